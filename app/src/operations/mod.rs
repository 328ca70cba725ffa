//! Operations: the System page (health, alert rules, retention), suites and webhooks.

pub(crate) mod suites;
pub mod suites_api;
pub(crate) mod system;
pub mod system_api;
pub(crate) mod webhooks;
pub mod webhooks_api;

pub use system::SystemPage;
