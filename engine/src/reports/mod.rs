//! Reports and checkpoint comparisons over the store: reads tallies and run snapshots
//! (rebuilding a snapshot when its run has moved on), then hands them to the pure
//! [`arbiter_domain::reports`] functions. Nothing here loads a run's rows into memory: tallies
//! are a few rows per category, a snapshot is 12 bytes per identity, and diff texts are read a
//! page at a time.
//!
//! - [`runs`]: a run's report and its snapshot;
//! - [`compare`]: checkpoints compared on the items their runs share, and promotion decisions;
//! - [`diff`]: the per-prompt diff and where two answers' tokens diverged;
//! - [`trends`]: an eval along a training run, flaky prompts, watches;
//! - [`load`]: a run's load over time (claimed, waiting, at the endpoints, answer times);
//! - [`export`]: CSV, JSON Lines and Parquet exports; [`label_export`]: the same, a row per
//!   human label;
//! - [`charts`]: the server-rendered SVG figures.

pub mod charts;
pub mod compare;
pub mod diff;
pub mod export;
pub mod label_export;
pub mod load;
pub mod runs;
pub mod trends;
