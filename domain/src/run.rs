//! A run: its priority class, its progress, its results and what it has cost.

use crate::ids::{EvalId, RunId};
use serde::{Deserialize, Serialize};

/// Scheduling class of a run: higher classes are served first on a shared endpoint, and
/// their human tasks get shorter deadlines. Stored and sent over the API as its rank (0, 1, 2).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(into = "i64", try_from = "i64")]
pub enum Priority {
    Ablation = 0,
    #[default]
    Scheduled = 1,
    Promotion = 2,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Ablation, Priority::Scheduled, Priority::Promotion];

    /// The rank stored in `runs.priority` and sent over the API.
    pub fn rank(self) -> i64 {
        self as i64
    }

    pub fn from_rank(rank: i64) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .find(|priority| priority.rank() == rank)
    }

    /// The name forms and the API take: `ablation`, `scheduled` or `promotion`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Ablation => "ablation",
            Priority::Scheduled => "scheduled",
            Priority::Promotion => "promotion",
        }
    }

    /// The class named in a form: `promotion`, `scheduled` (or nothing) or `ablation`.
    pub fn from_form(text: &str) -> Result<Priority, String> {
        match text.trim() {
            "" => Ok(Priority::Scheduled),
            name => Priority::ALL
                .into_iter()
                .find(|priority| priority.as_str() == name)
                .ok_or_else(|| {
                    format!("unknown priority `{name}`; use promotion, scheduled or ablation")
                }),
        }
    }

    /// The class in words, for pages.
    pub fn label(self) -> &'static str {
        match self {
            Priority::Ablation => "ablation",
            Priority::Scheduled => "scheduled",
            Priority::Promotion => "promotion decision",
        }
    }
}

impl From<Priority> for i64 {
    fn from(priority: Priority) -> i64 {
        priority.rank()
    }
}

impl TryFrom<i64> for Priority {
    type Error = String;

    fn try_from(rank: i64) -> Result<Priority, String> {
        Priority::from_rank(rank).ok_or_else(|| format!("unknown priority rank {rank}"))
    }
}

/// Where a run is in its life: `expanding` while its identities are written, `running` while
/// workers may claim them, `paused` by a researcher, `cancelled` (it can be resumed), or
/// `completed` once every identity has a final result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Expanding,
    Running,
    Paused,
    Cancelled,
    Completed,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Expanding,
        RunStatus::Running,
        RunStatus::Paused,
        RunStatus::Cancelled,
        RunStatus::Completed,
    ];

    /// As stored in `runs.status` and sent over the API.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Expanding => "expanding",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Completed => "completed",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
    }

    /// Completed or cancelled: nothing more happens unless someone resumes it.
    pub fn is_settled(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Cancelled)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(text: &str) -> Result<RunStatus, String> {
        RunStatus::parse(text).ok_or_else(|| format!("unknown run status `{text}`"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedRun {
    pub run_id: RunId,
    /// False when the manifest had been launched before and this is that run.
    pub created: bool,
    /// `Expanding` when identities still have to be written.
    pub status: RunStatus,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunSummary {
    pub id: RunId,
    #[schema(value_type = i64)]
    pub priority: Priority,
    pub eval_id: EvalId,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub status: RunStatus,
    pub expected_count: i64,
    pub done_count: i64,
    pub created_at: i64,
    /// Its checkpoint was retracted: never a baseline, out of trends.
    #[serde(default)]
    pub checkpoint_retracted: bool,
}

/// Live counts for a run's page. `passed + failed + uncertain + errors + scored == done`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunProgress {
    pub id: RunId,
    pub eval_id: EvalId,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub endpoint_url: String,
    pub manifest_hash: String,
    pub dataset_revision: String,
    pub status: RunStatus,
    pub expected: i64,
    pub done: i64,
    pub in_flight: i64,
    pub passed: i64,
    pub failed: i64,
    pub uncertain: i64,
    pub errors: i64,
    /// Identities scored without a verdict (rolling likelihood: a document's log-likelihood).
    #[serde(default)]
    pub scored: i64,
    /// One representative endpoint error, so a broken endpoint is explained on the page.
    pub last_error: Option<String>,
    /// Why the run's checkpoint was retracted, when it was: its results stay readable,
    /// marked so.
    #[serde(default)]
    pub checkpoint_retracted: Option<String>,
    #[schema(value_type = i64)]
    pub priority: Priority,
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

impl RunProgress {
    /// Seconds left at the current throughput; `None` when idle or finished.
    pub fn eta_seconds(&self) -> Option<f64> {
        let remaining = (self.expected - self.done) as f64;
        (remaining > 0.0 && self.throughput_per_s > 0.0).then(|| remaining / self.throughput_per_s)
    }
}

fn first_turn() -> i64 {
    1
}

/// One result identity with its answer and current verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IdentityResult {
    pub case_id: String,
    pub repetition: i64,
    /// The turn of a conversation (from 1; 1 for items that are not conversations).
    #[serde(default = "first_turn")]
    pub turn: i64,
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

/// A run's cost split by stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostReport {
    pub costs: RunCosts,
    pub human_usd: f64,
    pub total_usd: f64,
    /// Total over the run's expected identities.
    pub usd_per_item: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_keep_their_stored_ranks_and_form_names() {
        assert_eq!(
            Priority::ALL.map(Priority::rank),
            [0, 1, 2],
            "ranks are stored in runs.priority: never renumber them"
        );
        for priority in Priority::ALL {
            assert_eq!(Priority::from_rank(priority.rank()), Some(priority));
            assert_eq!(Priority::from_form(priority.as_str()), Ok(priority));
            assert_eq!(
                serde_json::to_string(&priority).unwrap(),
                priority.rank().to_string()
            );
        }
        assert_eq!(Priority::from_form(" "), Ok(Priority::Scheduled));
        assert!(Priority::from_form("urgent")
            .unwrap_err()
            .contains("urgent"));
        assert!(Priority::try_from(7).is_err());
        assert!(
            Priority::Promotion > Priority::Scheduled && Priority::Scheduled > Priority::Ablation
        );
    }

    #[test]
    fn statuses_round_trip_as_stored() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status));
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{}\"", status.as_str())
            );
        }
        assert!("done".parse::<RunStatus>().is_err());
        assert!(RunStatus::Completed.is_settled() && !RunStatus::Paused.is_settled());
    }
}
