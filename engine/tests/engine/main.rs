//! The engine's integration tests, in one binary so that sqlx, reqwest and parquet are linked
//! once: store stories on both backends, the worker pipeline against the simulator, triage,
//! quality control, operations, backups and property tests over user input.

mod backup_restore;
mod batch_judging;
mod canary_story;
mod code_tests;
mod contamination;
mod conversations;
mod dispatch;
mod endpoint_keys;
mod feedback_story;
mod fuzz_inputs;
mod images;
mod imports;
mod instructions;
mod kubernetes_launcher;
mod label_events_story;
mod likelihood;
mod ops_story;
mod pair_judging_story;
mod pay_story;
mod preference_story;
mod pushed_items_story;
mod quality_story;
mod queue_scan_story;
mod references;
mod rolling;
mod rubric_story;
mod sandbox;
mod scale_judge_story;
mod security;
mod store_story;
mod structured_suites;
mod triage;
