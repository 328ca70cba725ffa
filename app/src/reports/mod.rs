//! Reports: comparing checkpoints (with the per-prompt diff and promotion decisions) and trends along a training run.

pub mod api;
pub(crate) mod compare;
pub(crate) mod trends;
pub mod trends_api;

pub use compare::ComparePage;
pub use trends::TrendsPage;
