//! Grading: judges with their calibration, and an eval's triage policy and costs.

pub mod api;
pub(crate) mod eval;
pub(crate) mod judges;

pub use eval::EvalPage;
pub use judges::{JudgePage, JudgesPage};
