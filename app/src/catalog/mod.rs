//! The catalog: datasets, checkpoints and evals (and launching runs from the evals page).

pub mod api;
pub(crate) mod checkpoints;
pub(crate) mod datasets;
pub(crate) mod eval_form;
pub(crate) mod eval_prompt;
pub(crate) mod evals;
pub(crate) mod served;

pub use checkpoints::CheckpointsPage;
pub use datasets::{DatasetPage, DatasetsPage};
pub use evals::EvalsPage;
