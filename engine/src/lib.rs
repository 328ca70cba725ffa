//! Arbiter's engine: everything the server does that is not HTTP.
//!
//! The pure rules live in `arbiter-domain` and persistence in `arbiter-store`; here are the use
//! cases that tie them together, by pipeline stage, and the edges to the outside world.
//!
//! # Layout
//! Use cases (callers have checked the session's role; these check the input and return
//! [`error::ServiceError`], whose message is safe to show):
//! - [`catalog`]: datasets, checkpoints, evals; [`preview`]: the request an eval would send;
//!   [`import`]: an lm-evaluation-harness task file made into datasets and evals;
//! - [`runs`]: launching a run from its frozen manifest, and controlling it; [`prompts`]: an
//!   eval's prompt made ready to render (exemplars drawn, every item checked);
//! - [`dispatch`]: workers that claim result identities, answer, grade and record them;
//! - [`grading`]: judges, triage policies, calibration, costs;
//! - [`annotation`]: review, gold items, the rater pool, agreement, the queue report;
//!   [`display`]: the texts raters read, rendered and sanitised; [`rubrics`]: what raters
//!   answer, and their answers checked;
//! - [`reports`]: run reports, comparisons, diffs, trends, exports, charts;
//! - [`accounts`]: users, passwords, API tokens, the login throttle;
//! - [`suites`]: suites that checkpoints trigger, and checkpoint announcements;
//! - [`health`]: the system's figures and alert rules;
//! - [`retention`], [`webhooks`]: the storage lifecycle, event notifications.
//!
//! Edges: [`clients`] (model endpoints, mail) and [`secrets`] (keys kept outside the database
//! or sealed). Background: [`jobs`], every job and the runner that starts and stops them.
//!
//! Invariant: no transaction is ever held across a model call (see [`dispatch`]).

pub mod accounts;
pub mod annotation;
pub mod archives;
pub mod canary;
pub mod catalog;
pub mod clients;
pub mod contamination;
pub mod dataset_files;
pub mod dispatch;
pub mod display;
pub mod error;
pub mod eval_form;
pub mod grading;
pub mod health;
pub mod import;
pub mod jobs;
pub mod pair_judging;
pub mod preferences;
pub mod preview;
pub mod prompts;
pub mod reports;
pub mod retention;
pub mod rubrics;
pub mod runs;
pub mod sandbox;
pub mod secrets;
pub mod serving;
pub mod suites;
pub mod tuning;
pub mod webhooks;
