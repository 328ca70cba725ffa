//! Reading peers' task definitions into Arbiter's datasets and evals. Pure: the engine reads
//! the files and stores what these functions make of them.

pub mod lm_eval;
