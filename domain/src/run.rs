//! A run: its priority class, its progress, its results and what it has cost.

use serde::{Deserialize, Serialize};

/// Scheduling class of a run: higher classes are served first on a shared endpoint.
pub const PRIORITY_ABLATION: i64 = 0;

pub const PRIORITY_SCHEDULED: i64 = 1;

pub const PRIORITY_PROMOTION: i64 = 2;

/// Names of the priority classes, for forms and pages.
pub fn priority_name(priority: i64) -> &'static str {
    match priority {
        PRIORITY_ABLATION => "ablation",
        PRIORITY_PROMOTION => "promotion decision",
        _ => "scheduled",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedRun {
    pub run_id: i64,
    /// False when the manifest had been launched before and this is that run.
    pub created: bool,
    /// `expanding` when identities still have to be written.
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunSummary {
    pub id: i64,
    pub priority: i64,
    pub eval_id: i64,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub status: String,
    pub expected_count: i64,
    pub done_count: i64,
    pub created_at: i64,
}

/// Live counts for a run's page. `passed + failed + uncertain + errors == done`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunProgress {
    pub id: i64,
    pub eval_id: i64,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub endpoint_url: String,
    pub manifest_hash: String,
    pub dataset_revision: String,
    pub status: String,
    pub expected: i64,
    pub done: i64,
    pub in_flight: i64,
    pub passed: i64,
    pub failed: i64,
    pub uncertain: i64,
    pub errors: i64,
    /// One representative endpoint error, so a broken endpoint is explained on the page.
    pub last_error: Option<String>,
    pub priority: i64,
    pub team: String,
    /// Identities finished in the last minute, per second.
    pub throughput_per_s: f64,
    /// Answers served from the generation cache.
    pub from_cache: i64,
    /// Finished identities by outcome (ok, truncated, refused, endpoint_error, …).
    pub outcome_mix: Vec<(String, i64)>,
    /// Failed identities by error category.
    pub error_mix: Vec<(String, i64)>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    /// From the checkpoint's registration to this run's completion: the eval platform's
    /// service-level objective (results visible this long after a checkpoint lands).
    pub time_to_results_ms: Option<i64>,
}

/// One result identity with its answer and current verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub case_id: String,
    pub repetition: i64,
    pub category: String,
    pub input: String,
    pub target: String,
    pub output: String,
    pub outcome: String,
    pub verdict: String,
    pub grade_reason: String,
    /// The triage stage that decided the verdict (`pending` while a human has not).
    pub decided_by: Option<String>,
    pub error: Option<String>,
    pub error_category: Option<String>,
    /// HTTP attempts made for this identity (0 when answered from the cache).
    pub attempts: i64,
    /// Failed attempts before the final one (JSON), when there were any.
    pub attempt_log: Option<String>,
    pub latency_ms: i64,
    pub served_by: Option<String>,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    pub from_cache: bool,
}

/// What a run has cost so far, by stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCosts {
    pub generation_usd: f64,
    pub judging_usd: f64,
    /// Human labels given on the run's items (their cost is the policy's price per label).
    pub human_labels: i64,
    pub generation_calls: i64,
    pub cached_generations: i64,
    pub judge_grades: i64,
    pub cached_judge_grades: i64,
    /// Identities decided per stage (`deterministic`, `cheap_judge`, …; `human` after labels;
    /// `pending` while a human has not decided; `error` for endpoint errors).
    pub decided_by: Vec<(String, i64)>,
}
