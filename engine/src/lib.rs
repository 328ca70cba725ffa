//! Arbiter's engine: everything the server does that is not HTTP.
//!
//! The pure rules live in `arbiter-domain`; here are the use cases over the store, and the
//! edges: `store`, `model_client`, `mail`, `dispatch` and `sim`.

pub mod api_tokens;
pub mod charts;
pub mod checkpoint_watch;
pub mod dispatch;
pub mod export;
pub mod health;
pub mod human_queue;
pub mod login_throttle;
pub mod mail;
pub mod model_client;
pub mod passwords;
pub mod periodic;
pub mod policies;
pub mod queue_health;
pub mod reporting;
pub mod retention;
pub mod secrets;
pub mod service;

pub mod trends;
pub mod triggers;
pub mod webhooks;
