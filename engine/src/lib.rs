//! Arbiter's engine: everything the server does that is not HTTP.
//!
//! Pure domain modules (`auth`, `dataset`, `manifest`, `grading`, `report`, `stats`) have no I/O and
//! are tested alone; `store`, `model_client`, `dispatch` and `sim` are the edges.

pub mod annotation;
pub mod api_tokens;
pub mod auth;
pub mod charts;
pub mod checkpoint_watch;
pub mod dataset;
pub mod dispatch;
pub mod expansion;
pub mod export;
pub mod grading;
pub mod health;
pub mod human_queue;
pub mod login_throttle;
pub mod logprobs;
pub mod mail;
pub mod manifest;
pub mod model_client;
pub mod periodic;
pub mod policies;
pub mod queue_health;
pub mod report;
pub mod reporting;
pub mod retention;
pub mod secrets;
pub mod service;
pub mod sim;
pub mod stats;
pub mod store;
pub mod trends;
pub mod triggers;
pub mod webhooks;
