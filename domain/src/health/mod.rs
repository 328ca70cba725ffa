//! System figures as the monitor records them and the health page shows them: answers and
//! errors over a window, spending, endpoint load, workers, and the alerts raised from them
//! under the editable [`rules`].

pub mod results_objective;
pub mod rules;
pub mod run_load;

use serde::{Deserialize, Serialize};

/// An alert for leads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub id: i64,
    /// `sla_at_risk`, `sla_breached` or `low_agreement`.
    pub kind: String,
    /// What it is about: a queue's name.
    pub subject: String,
    pub message: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
    pub emailed_at: Option<i64>,
}

/// One monitor round's system figures, kept for charts and trend rules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthSample {
    pub taken_at: i64,
    pub queue_depth: i64,
    pub claimed: i64,
    pub answers_last_hour: i64,
    pub errors_last_hour: i64,
    pub p99_latency_ms: Option<i64>,
    pub live_workers: i64,
}

/// Model answers over a window of time (cache hits left out: they cost no call).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerWindow {
    pub answers: i64,
    /// Answers that ended as an endpoint error or a timeout.
    pub errors: i64,
    /// Errors by category (connect, rate_limited, server_error, timeout, …).
    pub errors_by_category: Vec<(String, i64)>,
    /// Answers per latency bucket: one per edge asked for, then one above the last.
    pub latency_buckets: Vec<i64>,
}

/// Spending on one eval by one team over a window: model calls and judge calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    pub eval_name: String,
    pub team: String,
    pub answers: i64,
    pub answer_usd: f64,
    pub judge_usd: f64,
}

/// One endpoint's load: identities claimed for it against its limit, and its server's own
/// queue where it reports one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointLoad {
    pub base_url: String,
    /// Checkpoints served there.
    pub checkpoints: Vec<String>,
    pub max_in_flight: i64,
    pub claimed: i64,
    /// vLLM's `num_requests_waiting` / `running` as last read, with when.
    pub server_waiting: Option<f64>,
    pub server_running: Option<f64>,
    pub observed_at: Option<i64>,
    /// The server's prefix cache as last read: the share of prompt tokens it found cached,
    /// and the tokens it looked up, since it started.
    #[serde(default)]
    pub prefix_cache: Option<PrefixCacheReading>,
}

/// What a server's `/metrics` say of its prefix cache.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixCacheReading {
    pub hit_rate: f64,
    /// Prompt tokens looked up; `None` when the server reports only a rate.
    pub queried_tokens: Option<f64>,
}

/// A worker process as its heartbeats describe it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub name: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub in_flight: i64,
}

pub const ALERT_SLA_AT_RISK: &str = "sla_at_risk";

pub const ALERT_SLA_BREACHED: &str = "sla_breached";

pub const ALERT_LOW_AGREEMENT: &str = "low_agreement";

/// Alert kind for an eval whose cheap judge re-tuning took out of the first stage.
pub const ALERT_JUDGE_BENCHED: &str = "judge_benched";

/// Alert kind for a judge version whose drift canary found it far from its previous version.
pub const ALERT_JUDGE_DRIFT: &str = "judge_drift";

/// An alert kind in words.
pub fn alert_title(kind: &str) -> &'static str {
    match kind {
        ALERT_SLA_AT_RISK => "SLA at risk",
        ALERT_SLA_BREACHED => "SLA breached",
        ALERT_LOW_AGREEMENT => "Low agreement",
        ALERT_JUDGE_BENCHED => "Judge below floor",
        ALERT_JUDGE_DRIFT => "Judge drift",
        ALERT_REGRESSION => "Regression",
        rules::ALERT_QUEUE_GROWING => "Queue growing",
        rules::ALERT_ERROR_RATE => "Error rate",
        rules::ALERT_P99_LATENCY => "Slow answers",
        rules::ALERT_DAILY_COST => "Over budget",
        rules::ALERT_RATER_AVAILABILITY => "Rater availability",
        rules::ALERT_WORKER_SILENT => "Worker lost",
        rules::ALERT_RESULTS_AT_RISK => "Results at risk",
        rules::ALERT_RESULTS_LATE => "Results late",
        _ => "Alert",
    }
}

/// Alert kind for a watched trend whose latest complete checkpoint regressed.
pub const ALERT_REGRESSION: &str = "regression";

impl Alert {
    /// The alert's kind in words, as pages and mail name it.
    pub fn title(&self) -> &'static str {
        alert_title(&self.kind)
    }
}
