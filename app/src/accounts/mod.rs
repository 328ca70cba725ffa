//! Accounts: signing in and out, the Account page (API tokens) and the password page.

pub(crate) mod account;
pub mod api;
pub(crate) mod login;
pub(crate) mod password;

pub use account::AccountPage;
pub use login::LoginPage;
pub use password::PasswordPage;
