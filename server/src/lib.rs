//! The `arbiter` binary's library half: the HTTP application and the demo, so that tests can
//! start the real router on a random port.

pub mod annotator_bench;
pub mod bench;
pub mod ci;
pub mod compare_bench;
pub mod csrf;
pub mod demo;
pub mod forms;
pub mod metrics;
pub mod rest;
pub mod soak_bench;
pub mod web;
