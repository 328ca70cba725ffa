//! Reading peers' task definitions (lm-evaluation-harness task files, Inspect AI samples) into
//! Arbiter's datasets and evals. Pure: the engine reads the files and stores what these
//! functions make of them.

pub mod inspect;
pub mod lm_eval;
