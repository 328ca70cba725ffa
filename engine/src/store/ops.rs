//! What operating Arbiter stores beyond evaluations: API tokens (and, with them, the records a
//! platform team needs). A supertrait of [`super::Store`], so `dyn Store` offers it too, kept
//! apart so that each file of SQL stays about one thing.

use super::{Alert, StoreResult, User};
use arbiter_domain::accounts::ApiToken;
use arbiter_domain::health::{AnswerWindow, CostRow, EndpointLoad, HealthSample, WorkerStatus};
use arbiter_domain::suites::{NewSuite, Suite, SuiteLaunch};
use arbiter_domain::webhooks::{DeliveryRecord, Webhook};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

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
