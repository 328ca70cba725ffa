//! Test support shared by the crates' test binaries (a dev-dependency only).
//!
//! - [`backend`]: a fresh store per test on SQLite or PostgreSQL, and [`stories!`], which
//!   turns one story into a test per backend;
//! - [`fixtures`]: datasets, evals, launched runs, recorded answers, escalations;
//! - [`egress`]: the egress policy of a test process (loopback allowed, for the simulator);
//! - [`pipeline`]: the simulator on a random port, checkpoints on it, launches, and a worker
//!   run until its runs complete;
//! - [`smtp`]: a local SMTP sink, with or without STARTTLS, that records what clients did;
//! - [`recorder`]: a stand-in model endpoint that records every request body it is sent.
//!
//! PostgreSQL: `eval "$(scripts/start-postgres)"` exports `ARBITER_TEST_POSTGRES_URL`, a
//! superuser URL of a throwaway server. Without it the PostgreSQL tests fail; they never skip.

pub mod backend;
pub mod egress;
pub mod fixtures;
pub mod pipeline;
pub mod recorder;
pub mod smtp;

pub use backend::TestBackend;
