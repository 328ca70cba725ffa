//! Plain records read from and written to the store.

use crate::auth::{PasswordHash, Role};
use crate::expansion::PlannedIdentity;
use crate::grading::triage::{after_deterministic, HumanKind, Stage, Step, TriagePolicy};
use crate::grading::{Grade, GraderSpec, Verdict};
use crate::manifest::Manifest;
use crate::model_client::{Generation, Outcome};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub role: Role,
    /// Fair-share group for runs this user launches.
    pub team: String,
    /// False once a lead deactivated the account: it can neither sign in nor use a session.
    pub active: bool,
}

/// A user with their password hash, for login only.
pub struct UserCredentials {
    pub user: User,
    pub password_hash: PasswordHash,
}

#[derive(Clone, Debug, Default)]
pub struct NewCheckpoint {
    pub name: String,
    /// Already normalised by `model_client::normalise_base_url`, like the replicas.
    pub base_url: String,
    pub model: String,
    /// Further endpoints serving the same checkpoint (load-balanced).
    pub replica_urls: Vec<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    /// Name of a registered checkpoint to try once when retries run out.
    pub fallback_checkpoint: Option<String>,
    /// Requests in flight from all workers together, for this checkpoint's endpoints.
    pub max_in_flight: Option<i64>,
    /// USD per million prompt and completion tokens for this checkpoint's model.
    pub prices: TokenPrices,
    /// The training run it comes from ('' for none) and its step there, for trends.
    pub training_run: String,
    pub training_step: Option<i64>,
    /// `env:NAME` or a sealed key (see [`crate::secrets`]) for its endpoints; `None` keeps
    /// what they have.
    pub api_key_ref: Option<String>,
}

/// What an endpoint charges, in USD per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenPrices {
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
}

impl TokenPrices {
    /// The cost of one call, when the endpoint reported its token usage.
    pub fn cost(&self, prompt_tokens: Option<i64>, completion_tokens: Option<i64>) -> Option<f64> {
        if prompt_tokens.is_none() && completion_tokens.is_none() {
            return None;
        }
        let tokens = |count: Option<i64>| count.unwrap_or(0).max(0) as f64;
        Some(
            (tokens(prompt_tokens) * self.input_usd_per_mtok
                + tokens(completion_tokens) * self.output_usd_per_mtok)
                / 1_000_000.0,
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpoint {
    pub id: i64,
    pub name: String,
    pub base_url: String,
    pub model: String,
    pub replica_urls: Vec<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    pub fallback_checkpoint_id: Option<i64>,
    pub max_in_flight: i64,
    pub prices: TokenPrices,
    pub training_run: String,
    pub training_step: Option<i64>,
    pub created_at: i64,
    /// How workers authenticate to its endpoint (`env:NAME` or `sealed:v1:…`), for the
    /// server's own use: never serialised to a browser or an API client.
    #[serde(skip)]
    #[schema(ignore)]
    pub api_key_ref: Option<String>,
}

/// How much one endpoint may be asked at once, by all workers together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointLimits {
    pub max_in_flight: i64,
    /// Prompt + completion tokens in flight; `None` for no budget.
    pub token_budget: Option<i64>,
}

impl Default for EndpointLimits {
    fn default() -> EndpointLimits {
        EndpointLimits {
            max_in_flight: 256,
            token_budget: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetRevision {
    pub id: i64,
    pub dataset_id: i64,
    pub content_hash: String,
    pub item_count: i64,
    pub source_name: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetSummary {
    pub id: i64,
    pub name: String,
    pub revision_count: i64,
    /// The newest revision, which new evals and runs use.
    pub latest_revision: Option<DatasetRevision>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EvalSummary {
    pub id: i64,
    pub name: String,
    pub dataset_id: i64,
    pub dataset_name: String,
    pub prompt_template: String,
    /// The grader spec (`{"kind": …}`), as stored.
    #[schema(value_type = Object)]
    pub grader: GraderSpec,
    pub max_tokens: i64,
    pub temperature: f64,
    pub repetitions: i64,
    pub seed: i64,
    pub created_at: i64,
}

/// The rows a manifest is frozen from.
#[derive(Clone, Debug)]
pub struct ManifestInputs {
    pub eval: EvalSummary,
    pub revision: DatasetRevision,
    pub checkpoint: Checkpoint,
    pub fallback: Option<Checkpoint>,
}

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

/// A run to create from a frozen manifest.
pub struct NewRun<'a> {
    pub manifest: &'a Manifest,
    pub priority: i64,
    pub team: &'a str,
    pub created_by: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedRun {
    pub run_id: i64,
    /// False when the manifest had been launched before and this is that run.
    pub created: bool,
    /// `expanding` when identities still have to be written.
    pub status: String,
}

/// An identity to create, possibly already answered from the generation cache.
#[derive(Clone, Debug)]
pub struct NewIdentity {
    pub planned: PlannedIdentity,
    pub cached: Option<CacheHit>,
}

/// A cached answer for a new identity that its deterministic grader decided; answers that
/// need a judge are queued for a worker instead.
#[derive(Clone, Debug)]
pub struct CacheHit {
    pub source_work_item_id: i64,
    pub generation: Generation,
    pub grading: Grading,
}

/// A generation found under its content hash. Its logprobs stay with the source generation
/// (`source_work_item_id`) rather than being copied into every run that reuses it.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedGeneration {
    pub source_work_item_id: i64,
    pub outcome: Outcome,
    pub output: String,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub model_used: Option<String>,
}

impl CachedGeneration {
    /// The cached answer as a generation record (no endpoint was called).
    pub fn to_generation(&self) -> Generation {
        Generation {
            outcome: self.outcome,
            output: self.output.clone(),
            finish_reason: self.finish_reason.clone(),
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            model_used: self.model_used.clone(),
            ..Generation::default()
        }
    }
}

/// A run the scheduler may take work from.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveRun {
    pub id: i64,
    pub priority: i64,
    pub team: String,
    /// The team's fair-share weight (1 unless a lead set another).
    pub team_weight: f64,
}

/// A leased identity with what a worker needs to answer it.
#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub work_item_id: i64,
    pub run_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub input: String,
    pub target: String,
    pub cost: i64,
    /// Times the identity has been claimed, this claim included.
    pub claims: i64,
    pub generation_key: Option<String>,
    pub cached: Option<CachedGeneration>,
}

/// A finished identity on its way to the store.
#[derive(Clone, Debug)]
pub struct FinishedItem {
    pub work_item_id: i64,
    pub generation: Generation,
    pub grading: Grading,
    /// Where to cache the generation (answers only; errors are never cached).
    pub generation_key: Option<String>,
    /// The generation this answer was copied from, when it came from the cache.
    pub cached_from: Option<i64>,
}

/// Everything grading decided about one answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grading {
    /// Grades in the order given (deterministic first, then judges).
    pub grades: Vec<GradeRecord>,
    /// The identity's verdict: `Uncertain` while a human has to decide; `None` for an
    /// endpoint error or timeout, which is never graded.
    pub verdict: Option<Verdict>,
    pub decided_by: Option<Stage>,
    /// Why a human sees the item (escalation, or the audit of an accepted verdict).
    pub human: Option<HumanTask>,
    /// Judge calls made now, for the grade cache.
    pub judge_calls: Vec<JudgeCall>,
}

impl Grading {
    /// An answer graded by its deterministic grader alone (no triage policy): undecided
    /// answers go to a human with the grader's reason. `None`: an error, never graded.
    pub fn deterministic_only(grade: Option<Grade>) -> Grading {
        let Some(grade) = grade else {
            return Grading::default();
        };
        let mut grading = Grading::default();
        let settled = grading.settle(after_deterministic(None, &grade));
        debug_assert!(settled, "without a policy no judge is asked");
        grading.grades.push(GradeRecord::deterministic(grade));
        grading
    }

    /// Records a final triage step: an accepted verdict, or a human escalation (no verdict
    /// until the human gives one). `false`, recording nothing, for `Step::Judge`.
    pub fn settle(&mut self, step: Step) -> bool {
        match step {
            Step::Accept { verdict, stage } => {
                self.verdict = Some(verdict);
                self.decided_by = Some(stage);
            }
            Step::Human { reason } => {
                self.verdict = Some(Verdict::Uncertain);
                self.decided_by = None;
                self.human = Some(HumanTask {
                    kind: HumanKind::Escalation,
                    reason,
                    sampling_rate: 1.0,
                    routing: HumanRouting::default(),
                });
            }
            Step::Judge(_) => return false,
        }
        true
    }

    /// Sends a human task where the run's policy says (overlap, skill, review rate); without a
    /// policy the defaults stand.
    pub fn route(mut self, triage: Option<&crate::grading::triage::FrozenTriage>) -> Grading {
        if let (Some(task), Some(triage)) = (self.human.as_mut(), triage) {
            task.routing = triage.policy.routing();
        }
        self
    }

    /// What `work_items.decided_by` holds: the deciding stage, `pending` while a human has to
    /// decide, `error` for an endpoint error (never graded).
    pub fn decided_by_label(&self) -> &'static str {
        match (self.decided_by, self.verdict) {
            (Some(stage), _) => stage.as_str(),
            (None, None) => "error",
            (None, Some(_)) => "pending",
        }
    }
}

/// One grade with the evidence and cost behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct GradeRecord {
    pub stage: Stage,
    pub grade: Grade,
    /// Judges: the probability of the verdict (mean over an ensemble's samples).
    pub confidence: Option<f64>,
    /// Judge ensembles: the share of samples voting the verdict.
    pub agreement: Option<f64>,
    pub cost_usd: Option<f64>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub latency_ms: Option<i64>,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    /// Every sample came from the grade cache (nothing was paid now).
    pub from_cache: bool,
}

impl GradeRecord {
    pub fn deterministic(grade: Grade) -> GradeRecord {
        GradeRecord {
            stage: Stage::Deterministic,
            grade,
            confidence: None,
            agreement: None,
            cost_usd: None,
            prompt_tokens: None,
            completion_tokens: None,
            latency_ms: None,
            model_used: None,
            fallback_used: false,
            from_cache: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HumanTask {
    pub kind: HumanKind,
    pub reason: String,
    /// The probability that triage sends an item like this to a human: 1 for an escalation,
    /// the audit rate for an audit.
    pub sampling_rate: f64,
    /// How many distinct raters label it, which skill they need, and the share of their labels
    /// a senior reviewer checks.
    pub routing: HumanRouting,
}

/// Where a human task goes and how much human attention it gets.
#[derive(Clone, Debug, PartialEq)]
pub struct HumanRouting {
    pub labels_needed: i64,
    pub skill: Option<String>,
    pub review_rate: f64,
}

impl Default for HumanRouting {
    fn default() -> HumanRouting {
        HumanRouting {
            labels_needed: 1,
            skill: None,
            review_rate: crate::grading::triage::DEFAULT_REVIEW_RATE,
        }
    }
}

/// One judge call's answer under its grade cache key.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgeCall {
    pub cache_key: String,
    pub output: String,
    pub pass: Option<bool>,
    pub confidence: Option<f64>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub model_used: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordOutcome {
    /// Identities recorded now (the rest already had a result).
    pub inserted: usize,
    /// Runs the recorded identities belong to.
    pub runs: Vec<i64>,
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

/// What a worker needs to run one result identity.
#[derive(Clone, Debug)]
pub struct Job {
    pub work_item_id: i64,
    pub run_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub input: String,
    pub target: String,
    pub prompt_template: String,
    pub grader: String,
    pub max_tokens: i64,
    pub temperature: f64,
    pub seed: i64,
    pub base_url: String,
    pub model: String,
}

/// An item as an annotator sees it: blind to the model and the grader's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnotationTask {
    pub task_id: i64,
    pub input: String,
    pub target: String,
    pub output: String,
    pub lease_expires_at: i64,
    /// The rater is in training: every item is a gold item and each answer gets feedback.
    /// (Outside training, gold items look exactly like ordinary ones.)
    pub training: bool,
}

/// What a rater in training learns after answering a gold item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingFeedback {
    pub correct: bool,
    /// The right answer, and why (the note the lead gave with the gold item).
    pub answer_pass: bool,
    pub note: String,
    /// Training answers so far, and how many of the latest were right.
    pub answered: u64,
    pub latest_right: u64,
    /// The rater passed with this answer and labels for real from now on.
    pub graduated: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueCounts {
    pub open: i64,
    pub leased: i64,
    pub done: i64,
}

/// A judge version as stored: a checkpoint plus a rubric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Judge {
    pub id: i64,
    pub name: String,
    pub version: i64,
    pub checkpoint_id: i64,
    pub checkpoint_name: String,
    pub rubric: String,
    pub max_tokens: i64,
    pub created_at: i64,
}

impl Judge {
    pub fn grader_id(&self) -> String {
        crate::grading::judge::grader_id(&self.name, self.version)
    }
}

/// A judge (or a new version of one) to store.
#[derive(Clone, Debug)]
pub struct NewJudge {
    pub name: String,
    pub checkpoint_id: i64,
    pub rubric: String,
    pub max_tokens: i64,
}

/// One version of an eval's triage policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyVersion {
    pub eval_id: i64,
    pub version: i64,
    pub policy: TriagePolicy,
    pub note: String,
    /// For recalibrations: old and new thresholds and the data used, as JSON.
    pub calibration_json: Option<String>,
    pub created_by: Option<String>,
    pub created_at: i64,
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

/// A judge verdict on an item that humans also labelled: the calibration data.
#[derive(Clone, Debug, PartialEq)]
pub struct HumanCheckedJudgement {
    pub confidence: f64,
    pub judge_pass: bool,
    pub human_pass: bool,
    pub cost_usd: f64,
    /// Probability that this verdict was sent to a human (see [`HumanTask::sampling_rate`]).
    pub sampling_rate: f64,
}

/// A label drawn for QC, as a senior reviewer sees it (the rater's name included: reviewing is
/// about the rater's work).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewItem {
    pub label_id: i64,
    pub rater: String,
    pub input: String,
    pub target: String,
    pub output: String,
    pub pass: bool,
    pub rationale: String,
    /// Why the label is up for review: the random QC sample, or raters who split evenly.
    pub why: String,
    /// Set when this is a spot check of another reviewer's decision on the label.
    pub check: Option<ReviewCheck>,
}

/// A reviewer's decision drawn for a spot check by another senior.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewCheck {
    pub review_id: i64,
    pub reviewer: String,
    /// `accepted`, `corrected` or `rejected`.
    pub decision: String,
    /// The reviewer's verdict when they corrected the label.
    pub corrected_to: Option<bool>,
    pub reason: String,
}

/// A reviewer's decision on a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewDecision {
    Accept,
    /// The reviewer's verdict overrides the raters'.
    Correct {
        pass: bool,
    },
    /// The label no longer counts and the item returns to the queue.
    Reject,
}

impl ReviewDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewDecision::Accept => "accepted",
            ReviewDecision::Correct { .. } => "corrected",
            ReviewDecision::Reject => "rejected",
        }
    }
}

/// A member of the rater pool with what their labels show, over the last 30 days.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterRecord {
    pub id: i64,
    pub username: String,
    pub role: String,
    pub active: bool,
    pub paused: bool,
    pub skills: Vec<String>,
    pub weekly_capacity_hours: f64,
    pub email: Option<String>,
    /// Set while the rater is in training (gold items only, with feedback).
    pub training_since: Option<i64>,
    /// Gold answers over the last 30 days: right, and all.
    pub gold_right: u64,
    pub gold_answered: u64,
    /// The rater's own review decisions spot-checked by another senior: upheld, and all.
    pub reviews_upheld: u64,
    pub reviews_checked: u64,
    /// Each label: when, how long it took (lease to submission), its review decision, and
    /// whether it matched the item's final human verdict (`None` while undecided).
    pub labels: Vec<RaterLabel>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterLabel {
    pub created_at: i64,
    pub duration_ms: Option<i64>,
    pub review: Option<String>,
    pub matches_final: Option<bool>,
}

/// What a lead changes about a rater; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RaterUpdate {
    pub active: Option<bool>,
    pub paused: Option<bool>,
    pub skills: Option<Vec<String>>,
    pub weekly_capacity_hours: Option<f64>,
    pub role: Option<crate::auth::Role>,
    /// `Some(None)` removes the address.
    pub email: Option<Option<String>>,
    /// `Some(true)` sends the rater to training (their lease is released); `Some(false)` ends it.
    pub training: Option<bool>,
}

/// A rater a lead invites: the account and its place in the pool, created in one statement.
#[derive(Clone, Debug)]
pub struct NewRater {
    pub username: String,
    pub role: crate::auth::Role,
    pub email: Option<String>,
    pub skills: Vec<String>,
    pub weekly_capacity_hours: f64,
    /// New raters usually start in training.
    pub training: bool,
}

/// A gold item with how raters have done on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldItem {
    pub id: i64,
    pub task_id: i64,
    /// The start of the item's question, to recognise it by.
    pub input: String,
    pub answer_pass: bool,
    pub note: String,
    pub created_at: i64,
    pub retired_at: Option<i64>,
    pub answers: u64,
    pub right: u64,
}

/// A finished item whose raters all agreed (or a reviewer corrected): a good gold candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldCandidate {
    pub task_id: i64,
    pub input: String,
    pub verdict_pass: bool,
    pub labels: u64,
    pub why: String,
}

/// Labelling velocity and inflow, for the forecast and availability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LabellingFlow {
    pub labels_last_hour: u64,
    pub labels_last_day: u64,
    pub labels_last_week: u64,
    /// Labels asked for by tasks created in the last week (inflow).
    pub labels_needed_last_week: u64,
    /// Median time per label over the latest labels (`None` before any).
    pub median_label_ms: Option<f64>,
    /// Weekly hours of active raters who are not paused or in training.
    pub capacity_hours_per_week: f64,
}

/// A standing label with its queue (the eval whose items it labels), for agreement per queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueLabel {
    pub queue: String,
    pub task_id: i64,
    pub rater_id: i64,
    pub rater: String,
    pub pass: bool,
}

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

/// One standing label on a run's item, for agreement statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct RunLabel {
    pub label_id: i64,
    pub task_id: i64,
    pub rater_id: i64,
    pub rater: String,
    pub pass: bool,
}

/// A run snapshot as stored: the tallies' version it was built from and its packed bytes
/// (see [`crate::report::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub version: String,
    pub identity_hash: String,
    pub data: Vec<u8>,
    pub build_ms: i64,
}

/// One side (baseline or candidate) of a per-prompt diff row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffSide {
    pub work_item_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub category: String,
    pub verdict: String,
    pub decided_by: String,
    pub input: String,
    pub target: String,
    pub output: String,
    pub outcome: String,
    pub error: Option<String>,
    pub model_used: Option<String>,
    pub latency_ms: Option<i64>,
    /// Where this answer's logprobs are stored (the source generation for cache hits).
    pub logprobs_id: Option<i64>,
    /// Grader and judge grades, oldest first.
    pub grades: Vec<DiffGrade>,
    /// Human labels: "rater: verdict — rationale".
    pub labels: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffGrade {
    pub stage: String,
    pub grader: String,
    pub verdict: String,
    pub reason: String,
    pub confidence: Option<f64>,
}

/// A researcher's decision on a candidate checkpoint, made on two complete reports.
#[derive(Clone, Debug)]
pub struct NewPromotionDecision {
    pub baseline_run_id: i64,
    pub candidate_run_id: i64,
    pub promote: bool,
    pub note: String,
    /// The comparison as it stood when decided (JSON).
    pub summary_json: String,
    pub decided_by: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromotionDecisionRecord {
    pub id: i64,
    pub baseline_run_id: i64,
    pub candidate_run_id: i64,
    pub baseline_checkpoint: String,
    pub candidate_checkpoint: String,
    /// `promote` or `reject`.
    pub decision: String,
    pub note: String,
    pub summary_json: String,
    pub decided_by: Option<String>,
    pub decided_at: i64,
}

/// The latest run of an eval on one checkpoint of a trend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrendRun {
    pub run_id: i64,
    pub checkpoint_id: i64,
    pub checkpoint_name: String,
    pub training_step: Option<i64>,
}

/// A researcher's request to be alerted when an eval regresses along a training run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrendWatch {
    pub eval_id: i64,
    pub eval_name: String,
    /// '' for all checkpoints.
    pub training_run: String,
    /// first, previous, best or pinned.
    pub policy: String,
    pub pinned_checkpoint_id: Option<i64>,
}
