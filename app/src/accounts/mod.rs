//! Accounts: signing in and out, and the Account page (API tokens).

pub(crate) mod account;
pub mod api;
pub(crate) mod login;

pub use account::AccountPage;
pub use login::LoginPage;
