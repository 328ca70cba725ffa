//! Runs: the list, and a run's page with its progress, results, report, agreement and cost.

pub mod api;
pub(crate) mod pages;

pub use pages::{RunPage, RunsPage};
