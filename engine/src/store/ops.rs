//! What operating Arbiter stores beyond evaluations: API tokens (and, with them, the records a
//! platform team needs). A supertrait of [`super::Store`], so `dyn Store` offers it too, kept
//! apart so that each file of SQL stays about one thing.

use super::{Alert, StoreResult, User};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A personal API token as its owner and the admins see it: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    pub username: String,
    pub name: String,
    /// The token's first characters (`arb_` and 8 more), to tell tokens apart.
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

impl ApiToken {
    /// Usable at `now`: neither revoked nor expired.
    pub fn is_live(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|expires| expires > now)
    }
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
}

/// A worker process as its heartbeats describe it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub name: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub in_flight: i64,
}

/// A set of evals that new checkpoints trigger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Suite {
    pub id: i64,
    pub name: String,
    /// `smoke` (every checkpoint) or `full` (every Nth, or on demand).
    pub tier: String,
    /// Full suites: run on every Nth checkpoint of a training run; 0 for on demand only.
    pub every_nth: i64,
    /// Only checkpoints of this training run ('' for any).
    pub training_run: String,
    pub team: String,
    /// (eval id, eval name).
    pub evals: Vec<(i64, String)>,
    pub created_at: i64,
}

/// A suite to create (validated by [`crate::triggers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct NewSuite {
    pub name: String,
    pub tier: String,
    pub every_nth: i64,
    pub training_run: String,
    pub team: String,
    pub eval_ids: Vec<i64>,
}

/// A run a suite launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SuiteLaunch {
    pub suite: String,
    pub checkpoint: String,
    pub run_id: i64,
    pub reason: String,
    pub created_at: i64,
}

/// A receiver of event notifications.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Webhook {
    pub id: i64,
    pub url: String,
    /// `run.completed`, `alert.raised`, `alert.resolved`.
    pub events: Vec<String>,
    /// Whether deliveries carry an `X-Arbiter-Signature`.
    pub signed: bool,
    /// The sealed signing secret: the server's own, never serialised.
    #[serde(skip)]
    #[schema(ignore)]
    pub secret_ref: Option<String>,
    /// Events up to this time have been queued.
    pub cursor_ms: i64,
    pub created_at: i64,
}

/// A delivery waiting for its next attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct DueDelivery {
    pub id: i64,
    pub webhook_id: i64,
    pub event: String,
    pub payload: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
}

/// How an attempt went.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryAttempt {
    pub delivered: bool,
    pub status: Option<i64>,
    pub error: Option<String>,
    /// When to try again; `None` with `delivered: false` gives up.
    pub retry_at: Option<i64>,
}

/// A delivery as the page lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryRecord {
    pub id: i64,
    pub webhook_id: i64,
    pub url: String,
    pub event: String,
    pub event_key: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub delivered_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
}

/// What removing one run's raw answers did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawPurge {
    pub generations_cleared: u64,
    pub logprobs_deleted: u64,
    pub cache_entries_deleted: u64,
    /// Logprobs kept because a newer run's cached answer still reads them.
    pub logprobs_kept_in_use: u64,
}

/// Last-use times are written at most this often per token, so that a busy CI client does not
/// turn every read into a write.
pub const TOKEN_USE_RESOLUTION_MS: i64 = 60_000;

#[async_trait]
pub trait OpsStore: Send + Sync + 'static {
    /// Stores a new token's hash; `NotFound` for an unknown user.
    async fn insert_api_token(
        &self,
        user_id: i64,
        name: &str,
        token_hash: &str,
        prefix: &str,
        expires_at: Option<i64>,
        now: i64,
    ) -> StoreResult<ApiToken>;
    /// The owner of the live token with this hash, noting its use.
    async fn user_for_token(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>>;
    /// Tokens of one user (`Some`) or of everyone (`None`), newest first.
    async fn api_tokens(&self, user_id: Option<i64>) -> StoreResult<Vec<ApiToken>>;
    /// Revokes a live token (only `owner`'s when given); false when there was none to revoke.
    async fn revoke_api_token(
        &self,
        token_id: i64,
        owner: Option<i64>,
        now: i64,
    ) -> StoreResult<bool>;

    // System health.
    /// Identities of running runs not yet claimed, and identities claimed by workers.
    async fn queue_depth(&self) -> StoreResult<(i64, i64)>;
    /// Answers since `since`, their errors and latency histogram over `latency_edges_ms`.
    async fn answer_window(
        &self,
        since: i64,
        latency_edges_ms: &[i64],
    ) -> StoreResult<AnswerWindow>;
    /// Spending since `since`, per eval and team.
    async fn costs_since(&self, since: i64) -> StoreResult<Vec<CostRow>>;
    async fn endpoint_loads(&self) -> StoreResult<Vec<EndpointLoad>>;
    async fn worker_statuses(&self) -> StoreResult<Vec<WorkerStatus>>;
    /// Notes what an endpoint's `/metrics` reported.
    async fn observe_endpoint_queue(
        &self,
        url: &str,
        waiting: f64,
        running: f64,
        now: i64,
    ) -> StoreResult<()>;
    /// Keeps a monitor round's figures, dropping samples older than `keep_after`.
    async fn record_health_sample(&self, sample: &HealthSample, keep_after: i64)
        -> StoreResult<()>;
    async fn health_samples(&self, since: i64) -> StoreResult<Vec<HealthSample>>;

    /// The stored reference to the API key of the endpoint at `base_url` (`None`: no key).
    async fn endpoint_api_key_ref(&self, base_url: &str) -> StoreResult<Option<String>>;

    // Suites and checkpoint triggers.
    /// `Conflict` for a taken name, `NotFound` for an unknown eval; nothing stored then.
    async fn create_suite(
        &self,
        suite: &NewSuite,
        created_by: Option<i64>,
        now: i64,
    ) -> StoreResult<i64>;
    async fn suites(&self) -> StoreResult<Vec<Suite>>;
    /// False when there was no such suite.
    async fn delete_suite(&self, suite_id: i64) -> StoreResult<bool>;
    /// The checkpoint's training run and its position among that run's checkpoints in order
    /// of registration (1 for the first); `None` for an unknown checkpoint.
    async fn checkpoint_position(&self, checkpoint_id: i64) -> StoreResult<Option<(String, i64)>>;
    async fn record_suite_launch(
        &self,
        suite_id: i64,
        checkpoint_id: i64,
        run_id: i64,
        reason: &str,
        now: i64,
    ) -> StoreResult<()>;
    /// The latest launches, newest first.
    async fn suite_launches(&self, limit: i64) -> StoreResult<Vec<SuiteLaunch>>;
    // Webhooks.
    async fn create_webhook(
        &self,
        url: &str,
        events: &[String],
        secret_ref: Option<&str>,
        created_by: Option<i64>,
        now: i64,
    ) -> StoreResult<Webhook>;
    async fn webhooks(&self) -> StoreResult<Vec<Webhook>>;
    async fn delete_webhook(&self, webhook_id: i64) -> StoreResult<bool>;
    async fn set_webhook_cursor(&self, webhook_id: i64, cursor_ms: i64) -> StoreResult<()>;
    /// Runs that completed in (after, upto].
    async fn runs_finished_between(&self, after: i64, upto: i64) -> StoreResult<Vec<i64>>;
    /// Alerts opened or resolved in (after, upto].
    async fn alerts_changed_between(&self, after: i64, upto: i64) -> StoreResult<Vec<Alert>>;
    /// Queues one event for one webhook; false when it was queued before.
    async fn enqueue_delivery(
        &self,
        webhook_id: i64,
        event: &str,
        event_key: &str,
        payload: &str,
        now: i64,
    ) -> StoreResult<bool>;
    /// Event keys of the webhook's deliveries queued after `since`.
    async fn webhook_event_keys(&self, webhook_id: i64, since: i64) -> StoreResult<Vec<String>>;
    async fn due_deliveries(&self, now: i64, limit: i64) -> StoreResult<Vec<DueDelivery>>;
    /// Takes a due delivery for this sender until `lease_until`; false when another took it.
    async fn claim_delivery(
        &self,
        id: i64,
        seen_next_attempt_at: i64,
        lease_until: i64,
    ) -> StoreResult<bool>;
    async fn finish_delivery(
        &self,
        id: i64,
        attempt: &DeliveryAttempt,
        now: i64,
    ) -> StoreResult<()>;
    async fn recent_deliveries(&self, limit: i64) -> StoreResult<Vec<DeliveryRecord>>;
    /// Deletes finished (delivered or given up) deliveries queued before `before`.
    async fn prune_webhook_deliveries(&self, before: i64) -> StoreResult<u64>;

    // Retention.
    /// Completed runs finished before `before` whose raw answers are still stored, oldest
    /// first. (Cancelled runs can be resumed, so they are kept.)
    async fn runs_with_raw_before(&self, before: i64, limit: i64) -> StoreResult<Vec<i64>>;
    /// Removes one run's answer texts, logprobs and cache entries, keeping its verdicts,
    /// tallies and snapshot; logprobs a run last active at or after `keep_users_after` still
    /// reads (through a cache hit) are kept. One transaction.
    async fn purge_raw_outputs(
        &self,
        run_id: i64,
        keep_users_after: i64,
        now: i64,
    ) -> StoreResult<RawPurge>;
    /// Completed runs finished before `before`, oldest first.
    async fn runs_finished_before(&self, before: i64, limit: i64) -> StoreResult<Vec<i64>>;
    /// Whether another run's cached answers read this run's generations, or a promotion
    /// decision ties it to a run that has not expired (finished at or after `expired_before`).
    async fn run_in_use(&self, run_id: i64, expired_before: i64) -> StoreResult<bool>;
    /// Deletes a completed run and everything recorded for it (annotations, grades, answers,
    /// tallies, snapshot, decisions); rows deleted (0 when it is no longer completed). One
    /// transaction.
    async fn delete_run(&self, run_id: i64) -> StoreResult<u64>;

    /// The content hash of a watched announcement already handled.
    async fn announcement_hash(&self, source: &str) -> StoreResult<Option<String>>;
    async fn record_announcement(
        &self,
        source: &str,
        content_hash: &str,
        checkpoint_id: Option<i64>,
        error: Option<&str>,
        now: i64,
    ) -> StoreResult<()>;
}
