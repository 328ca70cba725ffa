//! The server's integration tests, in one binary: the HTTP router and its refusals, the REST
//! API and the CI commands, killed workers on a shared database, and (with `local-model`)
//! the bundled model end to end.

mod api;
mod http;
mod kill_workers;
mod launcher_story;
#[cfg(feature = "local-model")]
mod real_model;
mod sandbox_refusal;
mod security;
mod support;
