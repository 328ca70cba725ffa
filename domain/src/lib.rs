//! Arbiter's domain: what an evaluation is, as plain data and pure functions.
//!
//! Nothing here does I/O: no database, no HTTP, no clock, no files. The store persists these
//! types, the engine's use cases and workers move them through the pipeline, and the UI shows
//! them. Each module is tested alone, against published values where there are any.
//!
//! # Layout, in pipeline order
//! - [`accounts`]: users, roles and what each may do; usernames, stored password hashes, API
//!   tokens as their owners see them.
//! - [`ids`]: one id type per stored thing (runs, evals, checkpoints, datasets, revisions,
//!   users, result identities, human tasks).
//! - [`dataset`]: parsing an upload into items, and the revision's content hash.
//! - [`fields`]: an eval's field mapping (which item fields are input, target, choices).
//! - [`checkpoint`]: a checkpoint and its endpoint, prices and limits.
//! - [`manifest`], [`prompt`]: an eval's definition, the frozen manifest a run is launched
//!   from (its hash is the run's identity), and prompt rendering.
//! - [`expansion`]: a manifest expanded into result identities, with cache keys and costs.
//! - [`contamination`]: items checked against a training corpus's 13-grams.
//! - [`run`]: a run's priority, progress and results.
//! - [`fair_share`]: which run a worker takes work from.
//! - [`answer`], [`logprobs`]: what an endpoint answered, and its per-token log probabilities.
//! - [`likelihood`]: multiple choice scored by the likelihood of each choice (lm-eval's
//!   `multiple_choice`), read from the endpoint's echoed prompt logprobs.
//! - [`grading`]: deterministic graders, LLM judges, confidence triage and judge calibration.
//! - [`annotation`]: the human queue's rules: adjudication, review sampling, gold items,
//!   rater quality, SLAs and inter-rater agreement.
//! - [`reports`], [`stats`]: complete or labelled-partial reports, paired comparisons,
//!   per-prompt diffs, trends along a training run, and the statistics behind them.
//! - [`health`]: system figures and the alert rules over them.
//! - [`suites`], [`webhooks`]: suites that new checkpoints trigger, and event receivers.
//! - [`import`]: peers' task files (lm-evaluation-harness) read into datasets and evals.

pub mod accounts;
pub mod annotation;
pub mod answer;
pub mod checkpoint;
pub mod contamination;
pub mod dataset;
pub mod eval_form;
pub mod expansion;
pub mod fair_share;
pub mod fields;
pub mod grading;
pub mod health;
pub mod ids;
pub mod images;
pub mod import;
pub mod likelihood;
pub mod logprobs;
pub mod manifest;
pub mod prompt;
pub mod reports;
pub mod rolling;
pub mod run;
pub mod sampling;
pub mod serving;
pub mod spreadsheet;
pub mod stats;
pub mod suites;
pub mod webhooks;
