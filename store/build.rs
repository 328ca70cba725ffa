// The migrations are embedded by `sqlx::migrate!` at compile time: a new or changed migration
// file must rebuild this crate, or a binary would run with the schema it was first built with.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
