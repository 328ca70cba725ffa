//! The shapes the browser receives. They are deliberately separate from the engine's records:
//! the engine is server-only, and each view carries only what its page may show (an annotator's
//! task view, for instance, has no model or checkpoint identity).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserView {
    pub username: String,
    /// annotator, reviewer, researcher, lead or admin.
    pub role: String,
}

impl UserView {
    /// Mirrors `Permission::ManageEvals`/`ViewResults` for showing links; the server decides.
    pub fn is_researcher(&self) -> bool {
        matches!(self.role.as_str(), "researcher" | "lead" | "admin")
    }

    /// Mirrors `Permission::Review`.
    pub fn is_reviewer(&self) -> bool {
        matches!(self.role.as_str(), "reviewer" | "lead" | "admin")
    }

    /// Mirrors `Permission::ManageUsers`.
    pub fn is_lead(&self) -> bool {
        matches!(self.role.as_str(), "lead" | "admin")
    }

    /// Mirrors `Permission::Annotate`.
    pub fn is_annotator(&self) -> bool {
        matches!(
            self.role.as_str(),
            "annotator" | "reviewer" | "lead" | "admin"
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevisionView {
    pub id: i64,
    pub content_hash: String,
    pub item_count: i64,
    pub source_name: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetView {
    pub id: i64,
    pub name: String,
    pub revision_count: i64,
    pub latest: Option<RevisionView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemView {
    pub case_id: String,
    pub input: String,
    pub target: String,
    pub category: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetPageData {
    pub dataset: DatasetView,
    pub revisions: Vec<RevisionView>,
    /// The first items of the newest revision.
    pub items: Vec<ItemView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointView {
    pub id: i64,
    pub name: String,
    pub base_url: String,
    pub model: String,
    pub replica_urls: Vec<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    pub fallback_name: Option<String>,
    pub max_in_flight: i64,
    /// USD per million prompt / completion tokens.
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
    pub training_run: String,
    pub training_step: Option<i64>,
    /// How its endpoint authenticates, in words ("none", "stored encrypted", "from the
    /// environment (NAME)"): never the key.
    pub api_key: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalView {
    pub id: i64,
    pub name: String,
    pub dataset_name: String,
    pub prompt_template: String,
    /// The deterministic grader's id and version, e.g. `numeric@1`.
    pub grader: String,
    /// Its settings as JSON.
    pub grader_spec: String,
    pub max_tokens: i64,
    pub temperature: f64,
    pub repetitions: i64,
    pub seed: i64,
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

/// What an annotator sees: the question, the reference answer and the model's output as text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    pub task_id: i64,
    pub input: String,
    pub target: String,
    pub output: String,
    pub remaining: i64,
    /// The rater is in training: each answer is checked against a known answer at once.
    pub training: bool,
}

/// What a rater in training learns after each answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingFeedbackView {
    pub correct: bool,
    /// `pass` or `fail`.
    pub answer: String,
    pub note: String,
    pub answered: u64,
    pub latest_right: u64,
    /// Items of the latest that count towards passing.
    pub out_of: u64,
    pub graduated: bool,
}

/// The researcher's launch page needs evals and checkpoints together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalsPageData {
    pub evals: Vec<EvalView>,
    pub datasets: Vec<DatasetView>,
    pub checkpoints: Vec<CheckpointView>,
}

/// The optional part of the checkpoint form (inputs named `options[…]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointOptions {
    /// Further endpoint URLs, comma- or space-separated.
    pub replica_urls: String,
    pub engine_build: String,
    pub parallel_layout: String,
    /// Name of the checkpoint to fall back to.
    pub fallback_checkpoint: String,
    /// Requests in flight per endpoint from all workers together ('' for the default).
    pub max_in_flight: String,
    /// USD per million prompt tokens ('' is free).
    pub input_usd_per_mtok: String,
    /// USD per million completion tokens ('' is free).
    pub output_usd_per_mtok: String,
    /// The training run it comes from and its step there ('' for none), for trends.
    pub training_run: String,
    pub training_step: String,
    /// `promotion`, `scheduled` ('' too) or `ablation`: the priority of the suite runs the new
    /// checkpoint triggers.
    pub decision: String,
    /// The endpoint's API key: '' none, `env:NAME`, or the key (stored encrypted).
    pub api_key: String,
}

/// A judge version with how it has done so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgeView {
    pub id: i64,
    /// `judge:name@version`, as on its grades.
    pub grader_id: String,
    pub name: String,
    pub version: i64,
    pub checkpoint_name: String,
    pub rubric: String,
    pub max_tokens: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgesPageData {
    pub judges: Vec<JudgeView>,
    pub checkpoints: Vec<CheckpointView>,
    pub default_rubric: String,
}

/// One bin of a reliability diagram.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinView {
    pub lower: f64,
    pub upper: f64,
    pub count: u64,
    pub mean_confidence: Option<f64>,
    pub accuracy: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgeReportView {
    pub judge: JudgeView,
    /// Human-checked verdicts the figures are computed from.
    pub labelled: u64,
    pub accuracy: Option<f64>,
    pub kappa: Option<f64>,
    pub expected_calibration_error: Option<f64>,
    pub bins: Vec<BinView>,
    /// Server-rendered SVG of the reliability diagram (no user text inside but the judge id,
    /// which the renderer escapes).
    pub reliability_svg: String,
    pub grades: i64,
    pub cost_usd: f64,
}

/// One version of an eval's triage policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    pub version: i64,
    pub cheap_judge: Option<i64>,
    pub strong_judge: Option<i64>,
    pub accept_threshold: f64,
    pub escalate_threshold: f64,
    pub audit_rate: f64,
    pub judge_samples: u32,
    pub human_usd_per_label: f64,
    pub human_overlap: u32,
    pub review_rate: f64,
    /// '' when any rater may label.
    pub required_skill: String,
    pub note: String,
    pub calibration_json: Option<String>,
    pub created_by: Option<String>,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPageData {
    pub eval: EvalView,
    /// Newest first; the first is what new runs use.
    pub policies: Vec<PolicyView>,
    /// What the policy form starts from when the eval has no policy yet (version 0).
    pub default_policy: PolicyView,
    pub judges: Vec<JudgeView>,
    /// The eval's runs, newest first, with their cost by stage.
    pub runs: Vec<EvalRunCost>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRunCost {
    pub run_id: i64,
    pub checkpoint_name: String,
    pub status: String,
    pub expected: i64,
    pub cost: CostView,
}

/// A run's cost by stage and who decided its items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostView {
    pub generation_usd: f64,
    pub judging_usd: f64,
    pub human_usd: f64,
    pub total_usd: f64,
    pub usd_per_item: f64,
    pub generation_calls: i64,
    pub cached_generations: i64,
    pub judge_grades: i64,
    pub cached_judge_grades: i64,
    pub human_labels: i64,
    pub decided_by: Vec<(String, i64)>,
}

/// A label up for review, as a senior reviewer sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewView {
    pub label_id: i64,
    pub rater: String,
    pub input: String,
    pub target: String,
    pub output: String,
    /// `pass` or `fail`.
    pub verdict: String,
    pub rationale: String,
    pub why: String,
    /// Set when the reviewer is spot-checking another reviewer's decision on this label.
    pub check: Option<ReviewCheckView>,
}

/// Another reviewer's decision, up for a spot check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewCheckView {
    pub review_id: i64,
    pub reviewer: String,
    /// In words: "accepted the label", "corrected it to fail", "rejected it".
    pub decision: String,
    pub reason: String,
}

/// One member of the rater pool with their figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterView {
    pub id: i64,
    pub username: String,
    pub role: String,
    pub active: bool,
    pub paused: bool,
    pub skills: String,
    pub weekly_capacity_hours: f64,
    pub items_per_day: f64,
    pub median_seconds_per_item: Option<f64>,
    pub review_acceptance: Option<f64>,
    pub agreement_with_consensus: Option<f64>,
    pub gold_accuracy: Option<f64>,
    pub gold_answered: u64,
    pub reviews_upheld: Option<f64>,
    pub email: String,
    pub in_training: bool,
    pub labels_30d: u64,
    pub last_active: Option<i64>,
    pub flag: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatersPageData {
    pub raters: Vec<RaterView>,
    pub threshold: f64,
}

/// An agreement statistic: its value, or why it is undefined, with percent agreement beside.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatisticView {
    pub value: Option<f64>,
    pub undefined_because: Option<String>,
    pub percent_agreement: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairView {
    pub first: String,
    pub second: String,
    pub shared_items: u64,
    pub kappa: StatisticView,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgreementView {
    pub items: u64,
    pub labels: u64,
    pub alpha: StatisticView,
    pub alpha_interval: Option<(f64, f64)>,
    pub fleiss: StatisticView,
    pub pairs: Vec<PairView>,
}

/// A new rater's account, shown once to the lead who invited them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvitedView {
    pub username: String,
    pub password: String,
    pub emailed: String,
}

/// One bar of a small distribution: a label and a count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountView {
    pub label: String,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtRiskView {
    pub task_id: i64,
    pub queue: String,
    pub priority: i64,
    pub due_at: i64,
    pub forecast_done_at: Option<i64>,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlaDayView {
    /// Start of the UTC day, in Unix milliseconds.
    pub day_start: i64,
    pub completed: u64,
    pub on_time: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertView {
    pub id: i64,
    pub title: String,
    pub subject: String,
    pub message: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
    pub emailed_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueAgreementView {
    pub queue: String,
    pub agreement: AgreementView,
    pub below_floor: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldView {
    pub id: i64,
    pub task_id: i64,
    pub input: String,
    /// `pass` or `fail`.
    pub answer: String,
    pub note: String,
    pub retired: bool,
    pub answers: u64,
    pub right: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldCandidateView {
    pub task_id: i64,
    pub input: String,
    pub verdict: String,
    pub why: String,
}

/// The lead's queue page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuePageData {
    pub backlog_tasks: u64,
    pub backlog_labels: u64,
    pub ages: Vec<CountView>,
    pub breached: u64,
    pub at_risk: u64,
    pub at_risk_tasks: Vec<AtRiskView>,
    pub labels_per_hour: f64,
    pub velocity_basis: String,
    pub forecast_hours: Option<f64>,
    pub sla_days: Vec<SlaDayView>,
    pub attainment_7d: Option<f64>,
    pub inflow_labels_per_week: f64,
    pub seconds_per_label: Option<f64>,
    pub needed_hours_per_week: Option<f64>,
    pub capacity_hours_per_week: f64,
    pub availability: Option<f64>,
    pub backlog_hours: Option<f64>,
    pub queues: Vec<QueueAgreementView>,
    pub alerts: Vec<AlertView>,
    pub gold_rate: f64,
    pub review_check_rate: f64,
    pub agreement_floor: f64,
    pub gold: Vec<GoldView>,
    pub gold_candidates: Vec<GoldCandidateView>,
}

/// "40 s", "1.5 min", "2.3 h": a duration for people (run ETAs, time to results).
pub fn human_duration(seconds: f64) -> String {
    if seconds >= 90.0 * 60.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else if seconds >= 90.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}
