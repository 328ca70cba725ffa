//! The store: one trait over everything Arbiter persists, with SQLite and PostgreSQL backends.
//!
//! The backend is chosen by the database URL's scheme ([`connect`]). Both implementations are
//! generated from one body of SQL (`sql.rs`), so they cannot drift apart; the only dialect
//! difference is the row-lock clause used when claiming work.

mod annotation_sql;
mod ops;
mod ops_sql;
mod postgres;
mod sql;
mod sqlite;
mod types;

pub use ops::*;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use types::*;

use arbiter_domain::accounts::{PasswordHash, Role, User};
use arbiter_domain::annotation::gold::{GoldCandidate, GoldItem};
use arbiter_domain::annotation::pool::{NewRater, RaterRecord, RaterUpdate};
use arbiter_domain::annotation::review::{ReviewDecision, ReviewItem};
use arbiter_domain::annotation::sla::LabellingFlow;
use arbiter_domain::annotation::task::{
    AnnotationTask, QueueCounts, QueueLabel, RunLabel, TrainingFeedback,
};
use arbiter_domain::answer::Generation;
use arbiter_domain::checkpoint::{Checkpoint, EndpointLimits, NewCheckpoint, TokenPrices};
use arbiter_domain::dataset::{DatasetItem, DatasetRevision, DatasetSummary, ParsedDataset};
use arbiter_domain::grading::judge::{HumanCheckedJudgement, Judge, JudgeCall, NewJudge};
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::triage::PolicyVersion;
use arbiter_domain::grading::Grade;
use arbiter_domain::health::Alert;
use arbiter_domain::manifest::{EvalSpec, EvalSummary, Manifest};
use arbiter_domain::reports::decision::{NewPromotionDecision, PromotionDecisionRecord};
use arbiter_domain::reports::diff::DiffSide;
use arbiter_domain::reports::trend::{TrendRun, TrendWatch};
use arbiter_domain::run::{LaunchedRun, ResultRow, RunCosts, RunProgress, RunSummary};
use async_trait::async_trait;
use std::sync::Arc;

/// Errors a store reports. `Conflict` and `NotFound` are the caller's to explain; `Database` is
/// an infrastructure failure whose details are logged, never shown.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;

#[async_trait]
pub trait Store: OpsStore + Send + Sync + 'static {
    /// `sqlite` or `postgres`, for logs and the health page.
    fn backend(&self) -> &'static str;

    // Users.
    async fn create_user(
        &self,
        username: &str,
        hash: &PasswordHash,
        role: Role,
    ) -> StoreResult<i64>;
    async fn find_user_credentials(&self, username: &str) -> StoreResult<Option<UserCredentials>>;
    async fn get_user(&self, id: i64) -> StoreResult<Option<User>>;
    async fn set_password(&self, username: &str, hash: &PasswordHash) -> StoreResult<bool>;
    async fn list_users(&self) -> StoreResult<Vec<User>>;
    /// Moves a user to a fair-share team; false when there is no such user.
    async fn set_team(&self, username: &str, team: &str) -> StoreResult<bool>;

    // Checkpoints and their endpoints.
    async fn register_checkpoint(
        &self,
        new: &NewCheckpoint,
        created_by: Option<i64>,
    ) -> StoreResult<i64>;
    async fn list_checkpoints(&self) -> StoreResult<Vec<Checkpoint>>;
    /// Sets a checkpoint's prices; `NotFound` for an unknown checkpoint.
    async fn set_checkpoint_prices(
        &self,
        checkpoint_id: i64,
        prices: &TokenPrices,
    ) -> StoreResult<()>;
    /// The in-flight limit and token budget of the endpoint at `base_url` (defaults if unknown).
    async fn endpoint_limits(&self, base_url: &str) -> StoreResult<EndpointLimits>;

    // Datasets.
    /// Stores a parsed upload as a revision of the named dataset (creating the dataset on first
    /// upload). Re-uploading identical content returns the existing revision and makes it the
    /// latest again.
    async fn store_dataset_revision(
        &self,
        name: &str,
        source_name: &str,
        parsed: &ParsedDataset,
        created_by: Option<i64>,
    ) -> StoreResult<DatasetRevision>;
    async fn list_datasets(&self) -> StoreResult<Vec<DatasetSummary>>;
    async fn get_dataset(&self, id: i64) -> StoreResult<Option<DatasetSummary>>;
    async fn list_revisions(&self, dataset_id: i64) -> StoreResult<Vec<DatasetRevision>>;
    async fn list_items(
        &self,
        revision_id: i64,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<DatasetItem>>;
    /// Items after `after_position` in file order: keyset pages for streaming expansion.
    async fn items_after(
        &self,
        revision_id: i64,
        after_position: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, DatasetItem)>>;

    // Evals and runs.
    async fn create_eval(
        &self,
        dataset_id: i64,
        spec: &EvalSpec,
        created_by: Option<i64>,
    ) -> StoreResult<i64>;
    async fn list_evals(&self) -> StoreResult<Vec<EvalSummary>>;
    async fn get_eval(&self, id: i64) -> StoreResult<Option<EvalSummary>>;
    /// Everything needed to freeze a manifest for (eval, checkpoint), read in one snapshot.
    async fn manifest_inputs(
        &self,
        eval_id: i64,
        checkpoint_id: i64,
    ) -> StoreResult<ManifestInputs>;
    /// Inserts the run in status `expanding`, or finds the run of an identical manifest.
    async fn create_run(&self, new: &NewRun<'_>) -> StoreResult<LaunchedRun>;
    /// Adds a chunk of result identities; cache hits arrive finished (generation and grade).
    /// Identities that exist already are skipped, so a crashed expansion can simply be redone.
    async fn insert_identities(
        &self,
        run_id: i64,
        manifest: &Manifest,
        identities: &[NewIdentity],
    ) -> StoreResult<()>;
    /// Moves a run from one of `from` to `to`; false when it was in none of them.
    async fn set_run_status(&self, run_id: i64, from: &[&str], to: &str) -> StoreResult<bool>;
    async fn run_manifest(&self, run_id: i64) -> StoreResult<Option<Manifest>>;
    async fn list_runs(&self) -> StoreResult<Vec<RunSummary>>;
    async fn run_progress(&self, run_id: i64) -> StoreResult<Option<RunProgress>>;
    /// The run without counting its rows: verdict and outcome counts come from the tallies,
    /// `done` from the run's counter; no in-flight count, throughput, error mix or cache count.
    async fn run_header(&self, run_id: i64) -> StoreResult<Option<RunProgress>>;
    async fn run_results(&self, run_id: i64, limit: i64) -> StoreResult<Vec<ResultRow>>;
    /// All final results of a run, for comparisons.
    async fn run_outcomes(&self, run_id: i64) -> StoreResult<Vec<ResultRow>>;
    /// Marks the run completed if no identity is left unfinished; true if it is completed now.
    /// Completing a run adds its answers' lengths to the observed lengths of its cases.
    async fn finish_run_if_done(&self, run_id: i64) -> StoreResult<bool>;
    /// The run's per-category counts, kept by triggers as results arrive.
    async fn run_tallies(&self, run_id: i64)
        -> StoreResult<Vec<arbiter_domain::reports::TallyRow>>;
    async fn stored_snapshot(&self, run_id: i64) -> StoreResult<Option<StoredSnapshot>>;
    async fn save_snapshot(
        &self,
        run_id: i64,
        item_count: i64,
        snapshot: &StoredSnapshot,
    ) -> StoreResult<()>;
    /// Completed runs without a snapshot built since they completed, oldest first.
    async fn runs_needing_snapshots(&self, limit: i64) -> StoreResult<Vec<i64>>;
    async fn record_promotion_decision(&self, decision: &NewPromotionDecision) -> StoreResult<i64>;
    /// Decisions where the run is the baseline or the candidate, newest first.
    async fn promotion_decisions(&self, run_id: i64) -> StoreResult<Vec<PromotionDecisionRecord>>;
    /// The latest (not cancelled) run of the eval on each checkpoint of the training run
    /// (every checkpoint for ''), in training order: by step, then registration.
    async fn trend_runs(&self, eval_id: i64, training_run: &str) -> StoreResult<Vec<TrendRun>>;
    /// The training runs checkpoints name, sorted.
    async fn training_runs(&self) -> StoreResult<Vec<String>>;
    async fn save_trend_watch(
        &self,
        watch: &TrendWatch,
        created_by: Option<i64>,
    ) -> StoreResult<()>;
    async fn delete_trend_watch(&self, eval_id: i64, training_run: &str) -> StoreResult<()>;
    async fn trend_watches(&self) -> StoreResult<Vec<TrendWatch>>;
    /// Streams every identity of the run in identity order (never the whole run in memory).
    async fn scan_run(
        &self,
        run_id: i64,
        sink: &mut (dyn FnMut(arbiter_domain::reports::snapshot::ScanRow) + Send),
    ) -> StoreResult<()>;
    /// The deterministic graders that graded the run's answers (kept by a trigger).
    async fn run_graders(&self, run_id: i64) -> StoreResult<Vec<String>>;
    /// A page of the run's results for export, in identity order after `after_id`.
    async fn export_rows(
        &self,
        run_id: i64,
        after_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<crate::store::ExportRow>>;
    /// The diff's view of these result identities: texts, outcomes, grades and labels.
    async fn diff_sides(&self, work_item_ids: &[i64]) -> StoreResult<Vec<DiffSide>>;
    /// The stored per-token logprobs of an answer (compact form, see [`arbiter_domain::logprobs`]).
    async fn generation_logprobs(&self, work_item_id: i64) -> StoreResult<Option<Vec<u8>>>;
    /// Sets a team's fair-share weight (created if new).
    async fn set_team_weight(&self, team: &str, weight: f64) -> StoreResult<()>;
    /// Mean completion tokens observed so far for these cases of a dataset revision (cases
    /// never answered are absent): later runs claim the longest first by them.
    async fn observed_completion_tokens(
        &self,
        revision_id: i64,
        case_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, f64>>;

    // Judges, triage policies and the grade cache.
    /// Stores a judge, as version 1 of a new name or the next version of an existing one.
    async fn create_judge(&self, new: &NewJudge, created_by: Option<i64>) -> StoreResult<Judge>;
    /// Every judge version, newest version of each name first.
    async fn list_judges(&self) -> StoreResult<Vec<Judge>>;
    async fn get_judge(&self, id: i64) -> StoreResult<Option<Judge>>;
    /// Stores the next version of an eval's triage policy; returns its version number.
    async fn save_grading_policy(
        &self,
        eval_id: i64,
        policy: &arbiter_domain::grading::triage::TriagePolicy,
        note: &str,
        calibration_json: Option<&str>,
        created_by: Option<i64>,
    ) -> StoreResult<i64>;
    /// An eval's policy versions, newest first.
    async fn grading_policies(&self, eval_id: i64) -> StoreResult<Vec<PolicyVersion>>;
    /// A judge call answered before, by its grade cache key.
    async fn cached_judge_call(&self, cache_key: &str) -> StoreResult<Option<JudgeCall>>;
    /// The judge's verdicts (grader id `judge:name@version`) on items humans have labelled,
    /// with the humans' majority verdict (ties left out).
    async fn human_checked_judgements(
        &self,
        grader_id: &str,
    ) -> StoreResult<Vec<HumanCheckedJudgement>>;
    /// Total cost and grade count of a judge's calls (grader id `judge:name@version`).
    async fn judge_usage(&self, grader_id: &str) -> StoreResult<(i64, f64)>;
    /// Cost by stage and identities by deciding stage, for one run.
    async fn run_costs(&self, run_id: i64) -> StoreResult<RunCosts>;

    // The generation cache.
    async fn cached_generations(
        &self,
        keys: &[String],
    ) -> StoreResult<Vec<(String, CachedGeneration)>>;

    // The work queue.
    /// Runs whose identities may be claimed now (status `running`).
    async fn active_runs(&self) -> StoreResult<Vec<ActiveRun>>;
    /// Leases up to `limit` queued identities of one run to `worker` (longest expected first,
    /// or in creation order when `longest_first` is false), with everything needed to answer
    /// them (and their cached generation, if any).
    async fn claim_jobs(
        &self,
        worker: &str,
        run_id: i64,
        limit: i64,
        lease_ms: i64,
        longest_first: bool,
    ) -> StoreResult<Vec<ClaimedJob>>;
    /// Leases up to `limit` queued identities of any running run (tests and tools).
    async fn claim_work(&self, worker: &str, limit: i64, lease_ms: i64) -> StoreResult<Vec<i64>>;
    async fn load_job(&self, work_item_id: i64) -> StoreResult<Job>;
    /// Records finished identities in one transaction: generation, grade, work item, annotation
    /// task and cache entry each. An identity that already has a result is skipped (a duplicate
    /// commit is a no-op).
    async fn record_results(&self, finished: &[FinishedItem]) -> StoreResult<RecordOutcome>;
    /// One finished identity; false when it already had a result.
    async fn record_result(
        &self,
        work_item_id: i64,
        generation: &Generation,
        grade: Option<&Grade>,
    ) -> StoreResult<bool> {
        let outcome = self
            .record_results(&[FinishedItem {
                work_item_id,
                generation: generation.clone(),
                grading: Grading::deterministic_only(grade.cloned()),
                generation_key: None,
                cached_from: None,
            }])
            .await?;
        Ok(outcome.inserted == 1)
    }
    /// Extends the leases `worker` holds and records its heartbeat; returns the number of live
    /// workers (heartbeat within `live_within_ms`).
    async fn heartbeat(
        &self,
        worker: &str,
        in_flight: i64,
        lease_ms: i64,
        live_within_ms: i64,
    ) -> StoreResult<i64>;
    /// Returns identities whose lease has expired to the queue.
    async fn reap_expired_leases(&self) -> StoreResult<u64>;
    async fn deregister_worker(&self, worker: &str) -> StoreResult<()>;
    /// Returns one identity `worker` holds to the queue unrecorded (to be answered again);
    /// false when the worker no longer holds it.
    async fn release_lease(&self, worker: &str, work_item_id: i64) -> StoreResult<bool>;

    // Human annotation.
    /// The annotator's current leased task, or a newly leased open one.
    async fn next_annotation_task(
        &self,
        user_id: i64,
        lease_ms: i64,
    ) -> StoreResult<Option<AnnotationTask>>;
    /// Records the label of the rater holding the item's lease. On a gold item the answer is
    /// recorded as a gold answer instead; a rater in training gets feedback on it.
    async fn submit_label(
        &self,
        task_id: i64,
        user_id: i64,
        pass: bool,
        rationale: &str,
    ) -> StoreResult<Option<TrainingFeedback>>;
    async fn skip_task(&self, task_id: i64, user_id: i64) -> StoreResult<()>;
    /// The oldest label drawn for QC (or on an item whose raters split) that `reviewer_id`
    /// did not write, items of higher-priority runs first.
    async fn next_review(&self, reviewer_id: i64) -> StoreResult<Option<ReviewItem>>;
    /// Records a reviewer's decision on a label; `Conflict` for their own label or one already
    /// reviewed, `NotFound` for no such label.
    async fn review_label(
        &self,
        label_id: i64,
        reviewer_id: i64,
        decision: ReviewDecision,
        reason: &str,
    ) -> StoreResult<()>;
    /// The rater pool with each rater's last 30 days of labels.
    async fn raters(&self) -> StoreResult<Vec<RaterRecord>>;
    /// A lead's change to a rater; pausing or deactivating releases their lease.
    async fn update_rater(&self, user_id: i64, update: &RaterUpdate) -> StoreResult<()>;
    /// A setting by name (`None` when never set).
    async fn setting(&self, name: &str) -> StoreResult<Option<String>>;
    async fn set_setting(&self, name: &str, value: &str) -> StoreResult<()>;
    /// The standing labels on a run's items (for agreement between raters).
    async fn run_labels(&self, run_id: i64) -> StoreResult<Vec<RunLabel>>;
    async fn annotation_queue_counts(&self) -> StoreResult<QueueCounts>;

    // Quality control and the queue's SLAs.
    /// Creates a rater's account with their pool settings in one statement.
    async fn invite_rater(&self, new: &NewRater, hash: &PasswordHash) -> StoreResult<i64>;
    /// Another senior's check of a reviewer's decision: `None` upholds it, `Some(pass)`
    /// overturns it with the checker's verdict (which then decides the item).
    async fn check_review(
        &self,
        review_id: i64,
        checker_id: i64,
        overturn_to: Option<bool>,
        reason: &str,
    ) -> StoreResult<()>;
    /// Makes a task's item a gold item with a known answer.
    async fn create_gold(
        &self,
        task_id: i64,
        answer_pass: bool,
        note: &str,
        created_by: i64,
    ) -> StoreResult<i64>;
    async fn retire_gold(&self, gold_id: i64) -> StoreResult<()>;
    /// Every gold item, live ones first.
    async fn gold_items(&self) -> StoreResult<Vec<GoldItem>>;
    /// Recently finished items that would make good gold (unanimous or reviewer-corrected).
    async fn gold_candidates(&self, limit: i64) -> StoreResult<Vec<GoldCandidate>>;
    /// Calls `visit` with every open task, in the order raters are served them.
    async fn scan_open_tasks(
        &self,
        visit: &mut (dyn FnMut(arbiter_domain::annotation::sla::OpenTask) + Send),
    ) -> StoreResult<()>;
    async fn labelling_flow(&self, now: i64) -> StoreResult<LabellingFlow>;
    /// Tasks finished per UTC day since `since`, and how many by their deadline.
    async fn sla_days(
        &self,
        since: i64,
    ) -> StoreResult<Vec<arbiter_domain::annotation::sla::SlaDay>>;
    /// Raises the priority of open tasks that are not escalated yet and marks them escalated
    /// (senior raters take them first); returns how many changed.
    async fn escalate_tasks(&self, task_ids: &[i64], now: i64) -> StoreResult<u64>;
    /// Standing labels given since `since`, with their queue (eval).
    async fn queue_labels(&self, since: i64) -> StoreResult<Vec<QueueLabel>>;
    /// Opens an alert, or updates the message of the open one of the same kind and subject;
    /// true when it is new.
    async fn raise_alert(
        &self,
        kind: &str,
        subject: &str,
        message: &str,
        now: i64,
    ) -> StoreResult<bool>;
    /// Resolves the open alerts of `kind` whose subject is not in `still_open`.
    async fn resolve_alerts(&self, kind: &str, still_open: &[String], now: i64)
        -> StoreResult<u64>;
    /// Claims an alert's email for this sender: true when it was not emailed (nor claimed)
    /// before, so of several monitors exactly one sends it.
    async fn claim_alert_email(&self, alert_id: i64, now: i64) -> StoreResult<bool>;
    /// Gives a claimed email back after the send failed, so the next round tries again.
    async fn release_alert_email(&self, alert_id: i64) -> StoreResult<()>;
    /// Sets several settings in one transaction.
    async fn set_settings(&self, settings: &[(&str, String)]) -> StoreResult<()>;
    /// Open alerts, then the latest resolved ones.
    async fn alerts(&self, resolved_limit: i64) -> StoreResult<Vec<Alert>>;
    /// Email addresses of active leads (and admins).
    async fn lead_emails(&self) -> StoreResult<Vec<String>>;
}

/// An opened database, keeping its concrete pool for the session store beside the `Store`.
#[derive(Clone)]
pub enum Database {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PostgresStore>),
}

impl Database {
    /// Opens (and migrates) the database named by a URL: `sqlite:` or `postgres(ql):`.
    pub async fn open(database_url: &str) -> StoreResult<Database> {
        if database_url.starts_with("sqlite:") {
            Ok(Database::Sqlite(Arc::new(
                SqliteStore::connect(database_url).await?,
            )))
        } else if database_url.starts_with("postgres:") || database_url.starts_with("postgresql:") {
            Ok(Database::Postgres(Arc::new(
                PostgresStore::connect(database_url).await?,
            )))
        } else {
            Err(StoreError::Conflict(format!(
                "unsupported database URL `{database_url}`: use sqlite://PATH or postgres://…"
            )))
        }
    }

    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Database::Sqlite(store) => store.clone(),
            Database::Postgres(store) => store.clone(),
        }
    }
}

/// Current time as Unix milliseconds, the unit of every stored timestamp.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
