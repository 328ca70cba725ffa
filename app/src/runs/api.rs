//! Server functions of runs: launching, listing, a run's page and its controls.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::catalog::api::{convert, PAGE_ROWS},
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

/// Freezes the manifest and enqueues the run, then sends the browser to the run's page.
/// `priority` is `promotion`, `scheduled` (default) or `ablation`.
#[server(endpoint = "launch_run")]
pub async fn launch_run(
    eval_id: i64,
    checkpoint_id: String,
    #[server(default)] priority: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let checkpoint_id: i64 = checkpoint_id
        .trim()
        .parse()
        .map_err(|_| fail(400, "pick a checkpoint to launch against"))?;
    let priority = arbiter_engine::runs::parse_priority(&priority).map_err(service_error)?;
    let launched = arbiter_engine::runs::launch_run(
        state.store.as_ref(),
        eval_id,
        checkpoint_id,
        priority,
        &user.team,
        Some(user.id),
    )
    .await
    .map_err(service_error)?;
    leptos_axum::redirect(&format!("/runs/{}", launched.run_id));
    Ok(launched.run_id)
}

#[server(endpoint = "list_runs")]
pub async fn list_runs() -> Result<Vec<RunView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let runs = state.store.list_runs().await.map_err(store_error)?;
    Ok(runs
        .into_iter()
        .map(|run| RunView {
            id: run.id,
            priority: run.priority.label().to_string(),
            eval_id: run.eval_id,
            eval_name: run.eval_name,
            checkpoint_name: run.checkpoint_name,
            status: run.status.to_string(),
            expected: run.expected_count,
            done: run.done_count,
        })
        .collect())
}

#[server(endpoint = "run_detail")]
pub async fn run_detail(id: i64) -> Result<RunPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let progress = arbiter_engine::runs::run_progress(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    let results = state
        .store
        .run_results(id, PAGE_ROWS)
        .await
        .map_err(store_error)?;
    Ok(RunPageData {
        progress: convert::progress(progress),
        results: results.into_iter().map(convert::result).collect(),
    })
}

/// Pause, resume or cancel a run (`action` is `pause`, `resume` or `cancel`).
#[server(endpoint = "change_run")]
pub async fn change_run(id: i64, action: String) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageEvals).await?;
    arbiter_engine::runs::change_run_state(state.store.as_ref(), id, &action)
        .await
        .map_err(service_error)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub id: i64,
    /// ablation, scheduled or promotion decision.
    pub priority: String,
    pub eval_id: i64,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub status: String,
    pub expected: i64,
    pub done: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressView {
    pub id: i64,
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
    pub last_error: Option<String>,
    pub priority: String,
    pub team: String,
    pub throughput_per_s: f64,
    pub from_cache: i64,
    pub outcome_mix: Vec<(String, i64)>,
    pub error_mix: Vec<(String, i64)>,
}

impl ProgressView {
    /// Completed or cancelled: nothing more will change, so the page stops polling.
    pub fn is_complete(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "cancelled")
    }

    /// Seconds left at the current throughput; `None` when idle or finished.
    pub fn eta_seconds(&self) -> Option<f64> {
        let remaining = (self.expected - self.done) as f64;
        (remaining > 0.0 && self.throughput_per_s > 0.0).then(|| remaining / self.throughput_per_s)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultView {
    pub case_id: String,
    pub repetition: i64,
    pub input: String,
    pub target: String,
    pub output: String,
    pub outcome: String,
    pub verdict: String,
    /// The grade's reason: a grader's explanation or a judge's rationale.
    pub reason: String,
    /// The triage stage that decided the verdict.
    pub decided_by: Option<String>,
    pub error: Option<String>,
    /// HTTP attempts, latency including retries, and where the answer came from.
    pub attempts: i64,
    pub latency_ms: i64,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    pub from_cache: bool,
}

impl ResultView {
    /// "2 attempts · 130 ms · fallback sim-b", "from cache": how the answer was obtained.
    pub fn telemetry(&self) -> String {
        if self.from_cache {
            return "from cache".into();
        }
        let mut parts = vec![
            format!(
                "{} attempt{}",
                self.attempts,
                if self.attempts == 1 { "" } else { "s" }
            ),
            format!("{} ms", self.latency_ms),
        ];
        if self.fallback_used {
            parts.push(format!(
                "fallback {}",
                self.model_used.clone().unwrap_or_default()
            ));
        }
        parts.join(" · ")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPageData {
    pub progress: ProgressView,
    pub results: Vec<ResultView>,
}
