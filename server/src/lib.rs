//! The `arbiter` binary's library half, so that tests can start the real router on a random
//! port and benchmarks can drive the same code.
//!
//! # Layout
//! - [`http`]: the router (pages, server functions, forms, downloads, `/metrics`, the REST
//!   API under `/api/v1`), sessions, CSRF and the sign-in throttle;
//! - [`demo`]: the demo's seeded accounts, datasets, checkpoints, evals and runs;
//! - [`ci`]: the REST client behind `arbiter submit`, `wait` and `report`;
//! - [`bench`]: `arbiter bench` scenarios and their shared support.
//!
//! The binary itself (`main.rs`) holds the command-line types, and `commands/` one file per
//! group of subcommands.

// The app's page views are deep generic types, and the server lays them out when it renders
// them; the app and frontend crates raise the limit for the same reason.
#![recursion_limit = "512"]

pub mod bench;
pub mod ci;
pub mod demo;
pub mod http;
