//! The browser entry point: hydrates the server-rendered page. Nothing else lives here.
#![recursion_limit = "512"]

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(arbiter_app::App);
}
