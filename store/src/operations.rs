//! What operating Arbiter keeps beyond evaluations: settings, alerts for leads, the system's
//! health figures (queue, answers, latency, spending, endpoint load, workers), suites and the
//! checkpoint announcements that trigger them, webhooks and their delivery outbox, and the
//! retention sweep's reads and deletes.

use arbiter_domain::ids::{CheckpointId, RunId, UserId};
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

#[async_trait]
pub trait OperationsStore: Send + Sync + 'static {
    // Settings and alerts.
    /// A setting by name (`None` when never set).
    async fn setting(&self, name: &str) -> StoreResult<Option<String>>;

    async fn set_setting(&self, name: &str, value: &str) -> StoreResult<()>;

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

    // System health.
    /// Identities of the runs workers may take (see [`active_runs`]) not yet claimed, and
    /// identities claimed by workers.
    ///
    /// [`active_runs`]: crate::WorkQueueStore::active_runs
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
        (waiting, running): (f64, f64),
        prefix_cache: Option<arbiter_domain::health::PrefixCacheReading>,
        now: i64,
    ) -> StoreResult<()>;

    /// Keeps a monitor round's figures, dropping samples older than `keep_after`.
    async fn record_health_sample(&self, sample: &HealthSample, keep_after: i64)
        -> StoreResult<()>;

    async fn health_samples(&self, since: i64) -> StoreResult<Vec<HealthSample>>;

    /// Each suite's runs on each checkpoint registered since `since` (retracted checkpoints
    /// and suites whose runs were all cancelled left out), for the time-to-results objective.
    async fn suite_deliveries(&self, since: i64) -> StoreResult<Vec<SuiteDelivery>>;

    /// Keeps workers' load samples of their runs (a sample already kept is left as it is).
    async fn record_run_load(&self, samples: &[RunLoadSample]) -> StoreResult<()>;

    /// A run's load samples, oldest first.
    async fn run_load(&self, run_id: RunId) -> StoreResult<Vec<RunLoadSample>>;

    // Suites and checkpoint triggers.
    /// `Conflict` for a taken name, `NotFound` for an unknown eval; nothing stored then.
    async fn create_suite(
        &self,
        suite: &NewSuite,
        created_by: Option<UserId>,
        now: i64,
    ) -> StoreResult<i64>;

    async fn suites(&self) -> StoreResult<Vec<Suite>>;

    /// False when there was no such suite.
    async fn delete_suite(&self, suite_id: i64) -> StoreResult<bool>;

    /// The checkpoint's training run and its position among that run's checkpoints in order
    /// of registration (1 for the first); `None` for an unknown checkpoint.
    async fn checkpoint_position(
        &self,
        checkpoint_id: CheckpointId,
    ) -> StoreResult<Option<(String, i64)>>;

    async fn record_suite_launch(
        &self,
        suite_id: i64,
        checkpoint_id: CheckpointId,
        run_id: RunId,
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
        created_by: Option<UserId>,
        now: i64,
    ) -> StoreResult<Webhook>;

    async fn webhooks(&self) -> StoreResult<Vec<Webhook>>;

    async fn delete_webhook(&self, webhook_id: i64) -> StoreResult<bool>;

    async fn set_webhook_cursor(&self, webhook_id: i64, cursor_ms: i64) -> StoreResult<()>;

    /// Re-seals every sealed secret (endpoint API keys and webhook signing secrets) with
    /// `reseal`, in one transaction: when `reseal` refuses one, nothing changes. Returns how
    /// many endpoint keys and webhook secrets were re-sealed.
    async fn reseal_secrets(
        &self,
        reseal: &(dyn for<'s> Fn(&'s str) -> Result<String, String> + Send + Sync),
    ) -> StoreResult<(u64, u64)>;

    /// Runs that completed in (after, upto].
    async fn runs_finished_between(&self, after: i64, upto: i64) -> StoreResult<Vec<RunId>>;

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
    async fn runs_with_raw_before(&self, before: i64, limit: i64) -> StoreResult<Vec<RunId>>;

    /// Removes one run's answer texts, logprobs and cache entries, keeping its verdicts,
    /// tallies and snapshot; logprobs a run last active at or after `keep_users_after` still
    /// reads (through a cache hit) are kept. One transaction.
    async fn purge_raw_outputs(
        &self,
        run_id: RunId,
        keep_users_after: i64,
        now: i64,
    ) -> StoreResult<RawPurge>;

    /// Completed runs finished before `before`, oldest first.
    async fn runs_finished_before(&self, before: i64, limit: i64) -> StoreResult<Vec<RunId>>;

    /// Whether another run's cached answers read this run's generations, or a promotion
    /// decision ties it to a run that has not expired (finished at or after `expired_before`).
    async fn run_in_use(&self, run_id: RunId, expired_before: i64) -> StoreResult<bool>;

    /// Deletes a completed run and everything recorded for it (annotations, grades, answers,
    /// tallies, snapshot, decisions); rows deleted (0 when it is no longer completed). One
    /// transaction.
    async fn delete_run(&self, run_id: RunId) -> StoreResult<u64>;

    /// The content hash of a watched announcement already handled.
    async fn announcement_hash(&self, source: &str) -> StoreResult<Option<String>>;

    async fn record_announcement(
        &self,
        source: &str,
        content_hash: &str,
        checkpoint_id: Option<CheckpointId>,
        error: Option<&str>,
        now: i64,
    ) -> StoreResult<()>;
}

/// The SQL of [`OperationsStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! operations_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::{StoreError, StoreResult};
        use arbiter_domain::ids::{CheckpointId, EvalId, RunId, UserId};

        async fn open_alert(
            writer: &sqlx::Pool<$db>,
            kind: &str,
            subject: &str,
            message: &str,
            now: i64,
        ) -> StoreResult<bool> {
            let mut tx = writer.begin_with($begin).await?;
            let updated = sqlx::query(
                "UPDATE alerts SET message = $1, updated_at = $2 \
                 WHERE kind = $3 AND subject = $4 AND resolved_at IS NULL",
            )
            .bind(message)
            .bind(now)
            .bind(kind)
            .bind(subject)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated == 0 {
                let inserted = sqlx::query(
                    "INSERT INTO alerts (kind, subject, message, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)",
                )
                .bind(kind)
                .bind(subject)
                .bind(message)
                .bind(now)
                .execute(&mut *tx)
                .await;
                match inserted.map_err(|err| $crate::conflict_on($backend, err, "alerts_open_key", "raised elsewhere")) {
                    Ok(_) => {}
                    // Another server's monitor opened the same alert a moment ago: it stands.
                    Err(StoreError::Conflict(_)) => return Ok(false),
                    Err(other) => return Err(other),
                }
            }
            tx.commit().await?;
            Ok(updated == 0)
        }

        async fn close_alerts(
            writer: &sqlx::Pool<$db>,
            kind: &str,
            still_open: &[String],
            now: i64,
        ) -> StoreResult<u64> {
            let mut tx = writer.begin_with($begin).await?;
            let open: Vec<(i64, String)> =
                sqlx::query_as("SELECT id, subject FROM alerts WHERE kind = $1 AND resolved_at IS NULL")
                    .bind(kind)
                    .fetch_all(&mut *tx)
                    .await?;
            let mut resolved = 0;
            for (id, subject) in open {
                if !still_open.contains(&subject) {
                    sqlx::query("UPDATE alerts SET resolved_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    resolved += 1;
                }
            }
            tx.commit().await?;
            Ok(resolved)
        }

        /// The columns of an alert, in [`AlertRow`]'s order (also read by the webhook scan).
        const ALERT_COLUMNS: &str = "id, kind, subject, message, created_at, updated_at, resolved_at, emailed_at";

        type AlertRow = (i64, String, String, String, i64, i64, Option<i64>, Option<i64>);

        fn alert_from_row(
            (id, kind, subject, message, created_at, updated_at, resolved_at, emailed_at): AlertRow,
        ) -> arbiter_domain::health::Alert {
            arbiter_domain::health::Alert { id, kind, subject, message, created_at, updated_at, resolved_at, emailed_at }
        }

        async fn list_alerts(pool: &sqlx::Pool<$db>, resolved_limit: i64) -> StoreResult<Vec<arbiter_domain::health::Alert>> {
            let mut rows: Vec<AlertRow> = sqlx::query_as(&format!(
                "SELECT {ALERT_COLUMNS} FROM alerts WHERE resolved_at IS NULL ORDER BY id DESC"
            ))
            .fetch_all(pool)
            .await?;
            rows.extend(
                sqlx::query_as::<_, AlertRow>(&format!(
                    "SELECT {ALERT_COLUMNS} FROM alerts WHERE resolved_at IS NOT NULL ORDER BY resolved_at DESC, id DESC LIMIT $1"
                ))
                .bind(resolved_limit)
                .fetch_all(pool)
                .await?,
            );
            Ok(rows.into_iter().map(alert_from_row).collect())
        }

        #[async_trait::async_trait]
        impl $crate::operations::OperationsStore for $store {
            async fn setting(&self, name: &str) -> StoreResult<Option<String>> {
                let result: StoreResult<Option<String>> = async move {
                    Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?)
                }
                .await;
                result.map_err(|err| err.during("setting"))
            }

            async fn set_setting(&self, name: &str, value: &str) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    )
                    .bind(name)
                    .bind(value)
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_setting"))
            }

            async fn raise_alert(&self, kind: &str, subject: &str, message: &str, now: i64) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    open_alert(&self.writer, kind, subject, message, now).await
                }
                .await;
                result.map_err(|err| err.during("raise_alert"))
            }

            async fn resolve_alerts(&self, kind: &str, still_open: &[String], now: i64) -> StoreResult<u64> {
                let result: StoreResult<u64> = async move {
                    close_alerts(&self.writer, kind, still_open, now).await
                }
                .await;
                result.map_err(|err| err.during("resolve_alerts"))
            }

            async fn claim_alert_email(&self, alert_id: i64, now: i64) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let claimed = sqlx::query("UPDATE alerts SET emailed_at = $1 WHERE id = $2 AND emailed_at IS NULL")
                        .bind(now)
                        .bind(alert_id)
                        .execute(&self.writer)
                        .await?
                        .rows_affected();
                    Ok(claimed == 1)
                }
                .await;
                result.map_err(|err| err.during("claim_alert_email"))
            }

            async fn release_alert_email(&self, alert_id: i64) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query("UPDATE alerts SET emailed_at = NULL WHERE id = $1")
                        .bind(alert_id)
                        .execute(&self.writer)
                        .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("release_alert_email"))
            }

            async fn set_settings(&self, settings: &[(&str, String)]) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    for (name, value) in settings {
                        sqlx::query(
                            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        )
                        .bind(*name)
                        .bind(value)
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_settings"))
            }

            async fn alerts(&self, resolved_limit: i64) -> StoreResult<Vec<arbiter_domain::health::Alert>> {
                let result: StoreResult<Vec<arbiter_domain::health::Alert>> = async move {
                    list_alerts(&self.pool, resolved_limit).await
                }
                .await;
                result.map_err(|err| err.during("alerts"))
            }

            async fn queue_depth(&self) -> $crate::StoreResult<(i64, i64)> {
                let result: $crate::StoreResult<(i64, i64)> = async move {
                    let outstanding: i64 = sqlx::query_scalar(
                        "SELECT CAST(COALESCE(SUM(expected_count - done_count), 0) AS BIGINT) FROM runs \
                         WHERE status = 'running' OR (status = 'expanding' AND planned_at > $1)",
                    )
                    .bind($crate::now_ms() - $crate::runs::PLANNING_STALE_MS)
                    .fetch_one(&self.pool)
                    .await?;
                    let claimed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM work_items WHERE state = 'leased'")
                        .fetch_one(&self.pool)
                        .await?;
                    Ok(((outstanding - claimed).max(0), claimed))
                }
                .await;
                result.map_err(|err| err.during("queue_depth"))
            }

            async fn answer_window(
                &self,
                since: i64,
                latency_edges_ms: &[i64],
            ) -> $crate::StoreResult<arbiter_domain::health::AnswerWindow> {
                let result: $crate::StoreResult<arbiter_domain::health::AnswerWindow> = async move {
                    use sqlx::Row;
                    use $crate::ReadColumn as _;
                    // One grouped scan of the window: the bucket of each answer's latency (edges are
                    // numbers from code, never from users) and its error category.
                    let mut bucket = String::from("CASE");
                    for (index, edge) in latency_edges_ms.iter().enumerate() {
                        bucket.push_str(&format!(" WHEN latency_ms < {edge} THEN {index}"));
                    }
                    bucket.push_str(&format!(" ELSE {} END", latency_edges_ms.len()));
                    let rows = sqlx::query(&format!(
                        "SELECT {bucket} AS bucket, \
                         CASE WHEN outcome IN ('endpoint_error', 'timeout') THEN COALESCE(error_category, outcome) ELSE '' END AS error, \
                         COUNT(*) AS answers \
                         FROM generations WHERE created_at > $1 AND NOT from_cache GROUP BY 1, 2"
                    ))
                    .bind(since)
                    .fetch_all(&self.pool)
                    .await?;
                    let mut window = arbiter_domain::health::AnswerWindow {
                        latency_buckets: vec![0; latency_edges_ms.len() + 1],
                        ..Default::default()
                    };
                    let mut errors: std::collections::BTreeMap<String, i64> = Default::default();
                    for row in &rows {
                        let bucket: i64 = row.try_get::<i64, _>("bucket").or_else(|_| row.try_get::<i32, _>("bucket").map(i64::from))?;
                        let error: String = row.read("error")?;
                        let answers: i64 = row.read("answers")?;
                        window.answers += answers;
                        if let Some(slot) = window.latency_buckets.get_mut(bucket as usize) {
                            *slot += answers;
                        }
                        if !error.is_empty() {
                            window.errors += answers;
                            *errors.entry(error).or_default() += answers;
                        }
                    }
                    window.errors_by_category = errors.into_iter().collect();
                    window.errors_by_category.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    Ok(window)
                }
                .await;
                result.map_err(|err| err.during("answer_window"))
            }

            async fn costs_since(&self, since: i64) -> $crate::StoreResult<Vec<arbiter_domain::health::CostRow>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::CostRow>> = async move {
                    let answers: Vec<(String, String, i64, f64)> = sqlx::query_as(
                        "SELECT e.name, r.team, COUNT(*), CAST(COALESCE(SUM(g.cost_usd), 0) AS DOUBLE PRECISION) \
                         FROM generations g JOIN work_items w ON w.id = g.work_item_id JOIN runs r ON r.id = w.run_id \
                         JOIN evals e ON e.id = r.eval_id WHERE g.created_at > $1 AND NOT g.from_cache \
                         GROUP BY e.name, r.team",
                    )
                    .bind(since)
                    .fetch_all(&self.pool)
                    .await?;
                    let judges: Vec<(String, String, f64)> = sqlx::query_as(
                        "SELECT e.name, r.team, CAST(COALESCE(SUM(gr.cost_usd), 0) AS DOUBLE PRECISION) \
                         FROM grades gr JOIN work_items w ON w.id = gr.work_item_id JOIN runs r ON r.id = w.run_id \
                         JOIN evals e ON e.id = r.eval_id WHERE gr.created_at > $1 AND gr.cost_usd IS NOT NULL \
                         GROUP BY e.name, r.team",
                    )
                    .bind(since)
                    .fetch_all(&self.pool)
                    .await?;
                    let mut rows: std::collections::BTreeMap<(String, String), arbiter_domain::health::CostRow> = Default::default();
                    for (eval_name, team, count, usd) in answers {
                        let row = rows.entry((eval_name.clone(), team.clone())).or_insert_with(|| arbiter_domain::health::CostRow {
                            eval_name, team, answers: 0, answer_usd: 0.0, judge_usd: 0.0,
                        });
                        row.answers += count;
                        row.answer_usd += usd;
                    }
                    for (eval_name, team, usd) in judges {
                        let row = rows.entry((eval_name.clone(), team.clone())).or_insert_with(|| arbiter_domain::health::CostRow {
                            eval_name, team, answers: 0, answer_usd: 0.0, judge_usd: 0.0,
                        });
                        row.judge_usd += usd;
                    }
                    Ok(rows.into_values().collect())
                }
                .await;
                result.map_err(|err| err.during("costs_since"))
            }

            async fn endpoint_loads(&self) -> $crate::StoreResult<Vec<arbiter_domain::health::EndpointLoad>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::EndpointLoad>> = async move {
                    type Row = (String, i64, String, i64, Option<f64>, Option<f64>, Option<i64>, Option<f64>, Option<f64>);
                    let rows: Vec<Row> = sqlx::query_as(
                        "SELECT en.base_url, en.max_in_flight, c.name, COALESCE(l.claimed, 0), o.waiting, o.running, o.observed_at, \
                                o.prefix_cache_hit_rate, o.prefix_cache_queries \
                         FROM checkpoints c JOIN endpoints en ON en.id = c.endpoint_id \
                         LEFT JOIN (SELECT checkpoint_id, COUNT(*) AS claimed FROM work_items WHERE state = 'leased' GROUP BY checkpoint_id) l \
                           ON l.checkpoint_id = c.id \
                         LEFT JOIN endpoint_observations o ON o.url = en.base_url \
                         ORDER BY en.base_url, c.name",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    let mut loads: Vec<arbiter_domain::health::EndpointLoad> = Vec::new();
                    for (base_url, max_in_flight, checkpoint, claimed, waiting, running, observed_at, hit_rate, queried_tokens) in rows {
                        match loads.last_mut() {
                            Some(load) if load.base_url == base_url => {
                                load.checkpoints.push(checkpoint);
                                load.claimed += claimed;
                            }
                            _ => loads.push(arbiter_domain::health::EndpointLoad {
                                base_url,
                                checkpoints: vec![checkpoint],
                                max_in_flight,
                                claimed,
                                server_waiting: waiting,
                                server_running: running,
                                observed_at,
                                prefix_cache: hit_rate.map(|hit_rate| arbiter_domain::health::PrefixCacheReading {
                                    hit_rate,
                                    queried_tokens,
                                }),
                            }),
                        }
                    }
                    Ok(loads)
                }
                .await;
                result.map_err(|err| err.during("endpoint_loads"))
            }

            async fn worker_statuses(&self) -> $crate::StoreResult<Vec<arbiter_domain::health::WorkerStatus>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::WorkerStatus>> = async move {
                    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
                        "SELECT name, started_at, heartbeat_at, in_flight FROM workers ORDER BY name",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(name, started_at, heartbeat_at, in_flight)| arbiter_domain::health::WorkerStatus {
                            name, started_at, heartbeat_at, in_flight,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("worker_statuses"))
            }

            async fn observe_endpoint_queue(
                &self,
                url: &str,
                (waiting, running): (f64, f64),
                prefix_cache: Option<arbiter_domain::health::PrefixCacheReading>,
                now: i64,
            ) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO endpoint_observations (url, waiting, running, observed_at, prefix_cache_hit_rate, prefix_cache_queries) \
                         VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (url) DO UPDATE SET waiting = excluded.waiting, running = excluded.running, \
                         observed_at = excluded.observed_at, prefix_cache_hit_rate = excluded.prefix_cache_hit_rate, \
                         prefix_cache_queries = excluded.prefix_cache_queries",
                    )
                    .bind(url)
                    .bind(waiting)
                    .bind(running)
                    .bind(now)
                    .bind(prefix_cache.map(|reading| reading.hit_rate))
                    .bind(prefix_cache.and_then(|reading| reading.queried_tokens))
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("observe_endpoint_queue"))
            }

            async fn record_health_sample(&self, sample: &arbiter_domain::health::HealthSample, keep_after: i64) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    let mut tx = self.writer.begin().await?;
                    sqlx::query(
                        "INSERT INTO health_samples (taken_at, queue_depth, claimed, answers_last_hour, errors_last_hour, p99_latency_ms, live_workers) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (taken_at) DO NOTHING",
                    )
                    .bind(sample.taken_at)
                    .bind(sample.queue_depth)
                    .bind(sample.claimed)
                    .bind(sample.answers_last_hour)
                    .bind(sample.errors_last_hour)
                    .bind(sample.p99_latency_ms)
                    .bind(sample.live_workers)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query("DELETE FROM health_samples WHERE taken_at <= $1")
                        .bind(keep_after)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("record_health_sample"))
            }

            async fn health_samples(&self, since: i64) -> $crate::StoreResult<Vec<arbiter_domain::health::HealthSample>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::HealthSample>> = async move {
                    let rows: Vec<(i64, i64, i64, i64, i64, Option<i64>, i64)> = sqlx::query_as(
                        "SELECT taken_at, queue_depth, claimed, answers_last_hour, errors_last_hour, p99_latency_ms, live_workers \
                         FROM health_samples WHERE taken_at > $1 ORDER BY taken_at",
                    )
                    .bind(since)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(taken_at, queue_depth, claimed, answers_last_hour, errors_last_hour, p99_latency_ms, live_workers)| {
                            arbiter_domain::health::HealthSample {
                                taken_at, queue_depth, claimed, answers_last_hour, errors_last_hour, p99_latency_ms, live_workers,
                            }
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("health_samples"))
            }

            async fn suite_deliveries(&self, since: i64) -> $crate::StoreResult<Vec<arbiter_domain::health::results_objective::SuiteDelivery>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::results_objective::SuiteDelivery>> = async move {
                    // Cancelled runs count for nothing; a suite still running is kept whatever its
                    // checkpoint's age, so its alert is not resolved by the window moving on.
                    type Row = (String, String, String, i64, i64, i64, i64, i64, Option<i64>, i64, i64, i64);
                    let rows: Vec<Row> = sqlx::query_as(
                        "SELECT s.name, s.tier, c.name, c.created_at, MIN(l.created_at), MIN(r.created_at), \
                         CAST(SUM(CASE WHEN r.status <> 'cancelled' THEN r.done_count ELSE 0 END) AS BIGINT), \
                         CAST(SUM(CASE WHEN r.status <> 'cancelled' THEN r.expected_count ELSE 0 END) AS BIGINT), \
                         MAX(CASE WHEN r.status = 'completed' THEN r.finished_at END), \
                         CAST(SUM(CASE WHEN r.status IN ('expanding', 'running') THEN 1 ELSE 0 END) AS BIGINT), \
                         CAST(SUM(CASE WHEN r.status = 'paused' THEN 1 ELSE 0 END) AS BIGINT), \
                         CAST(SUM(CASE WHEN r.status = 'completed' THEN 1 ELSE 0 END) AS BIGINT) \
                         FROM suite_launches l JOIN suites s ON s.id = l.suite_id \
                         JOIN checkpoints c ON c.id = l.checkpoint_id JOIN runs r ON r.id = l.run_id \
                         WHERE c.retracted_at IS NULL \
                         GROUP BY s.id, s.name, s.tier, c.id, c.name, c.created_at \
                         HAVING c.created_at > $1 OR SUM(CASE WHEN r.status IN ('expanding', 'running', 'paused') THEN 1 ELSE 0 END) > 0 \
                         ORDER BY c.created_at, s.name",
                    )
                    .bind(since)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .filter_map(|(suite, tier, checkpoint, registered_at, launched_at, started_at, done, expected, last_finished, moving, paused, completed)| {
                            // Withdrawn (every run cancelled) or paused on purpose: no objective.
                            if moving == 0 && (paused > 0 || completed == 0) {
                                return None;
                            }
                            Some(arbiter_domain::health::results_objective::SuiteDelivery {
                                suite,
                                tier,
                                checkpoint,
                                // A suite run on demand later starts its own clock.
                                due_from: registered_at.max(launched_at),
                                started_at,
                                finished_at: if moving == 0 { last_finished } else { None },
                                done,
                                expected,
                            })
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("suite_deliveries"))
            }

            async fn record_run_load(&self, samples: &[arbiter_domain::health::run_load::RunLoadSample]) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    if samples.is_empty() {
                        return Ok(());
                    }
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO run_load_samples (run_id, worker, taken_at, claimed, waiting, sending, request_limit, \
                         server_waiting, answers, latency_ms_sum, latency_ms_max, waited_ms_sum, finished) ",
                    );
                    insert.push_values(samples, |mut row, sample| {
                        row.push_bind(sample.run_id)
                            .push_bind(sample.worker.as_str())
                            .push_bind(sample.taken_at)
                            .push_bind(sample.claimed)
                            .push_bind(sample.waiting)
                            .push_bind(sample.sending)
                            .push_bind(sample.request_limit)
                            .push_bind(sample.server_waiting)
                            .push_bind(sample.answers)
                            .push_bind(sample.latency_ms_sum)
                            .push_bind(sample.latency_ms_max)
                            .push_bind(sample.waited_ms_sum)
                            .push_bind(sample.finished);
                    });
                    insert.push(" ON CONFLICT (run_id, taken_at, worker) DO NOTHING");
                    insert.build().execute(&self.writer).await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("record_run_load"))
            }

            async fn run_load(&self, run_id: RunId) -> $crate::StoreResult<Vec<arbiter_domain::health::run_load::RunLoadSample>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::run_load::RunLoadSample>> = async move {
                    let rows = sqlx::query(
                        "SELECT run_id, worker, taken_at, claimed, waiting, sending, request_limit, server_waiting, answers, \
                         latency_ms_sum, latency_ms_max, waited_ms_sum, finished FROM run_load_samples WHERE run_id = $1 ORDER BY taken_at, worker",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    use arbiter_domain::health::run_load::RunLoadSample;
                    rows.iter()
                        .map(|row| {
                            Ok($crate::read_columns!(row, RunLoadSample {
                                run_id, worker, taken_at, claimed, waiting, sending, request_limit, server_waiting,
                                answers, latency_ms_sum, latency_ms_max, waited_ms_sum, finished,
                            }))
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err($crate::StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("run_load"))
            }

            async fn create_suite(
                &self,
                suite: &arbiter_domain::suites::NewSuite,
                created_by: Option<UserId>,
                now: i64,
            ) -> $crate::StoreResult<i64> {
                let result: $crate::StoreResult<i64> = async move {
                    use $crate::StoreError;
                    let mut tx = self.writer.begin().await?;
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO suites (name, tier, every_nth, training_run, team, created_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                    )
                    .bind(&suite.name)
                    .bind(&suite.tier)
                    .bind(suite.every_nth)
                    .bind(&suite.training_run)
                    .bind(&suite.team)
                    .bind(created_by.map(i64::from))
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|err| match err {
                        sqlx::Error::Database(db) if db.is_unique_violation() => {
                            StoreError::Conflict(format!("a suite named `{}` exists already", suite.name))
                        }
                        other => other.into(),
                    })?;
                    for eval_id in &suite.eval_ids {
                        sqlx::query("INSERT INTO suite_evals (suite_id, eval_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                            .bind(id)
                            .bind(eval_id.get())
                            .execute(&mut *tx)
                            .await
                            .map_err(|err| match err {
                                sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                                    StoreError::NotFound(format!("no eval with id {eval_id}"))
                                }
                                other => other.into(),
                            })?;
                    }
                    tx.commit().await?;
                    Ok(id)
                }
                .await;
                result.map_err(|err| err.during("create_suite"))
            }

            async fn suites(&self) -> $crate::StoreResult<Vec<arbiter_domain::suites::Suite>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::suites::Suite>> = async move {
                    let rows: Vec<(i64, String, String, i64, String, String, i64)> = sqlx::query_as(
                        "SELECT id, name, tier, every_nth, training_run, team, created_at FROM suites ORDER BY tier DESC, name",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    let members: Vec<(i64, i64, String)> = sqlx::query_as(
                        "SELECT se.suite_id, e.id, e.name FROM suite_evals se JOIN evals e ON e.id = se.eval_id ORDER BY e.name",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(id, name, tier, every_nth, training_run, team, created_at)| arbiter_domain::suites::Suite {
                            evals: members
                                .iter()
                                .filter(|(suite_id, _, _)| *suite_id == id)
                                .map(|(_, eval_id, eval_name)| (EvalId(*eval_id), eval_name.clone()))
                                .collect(),
                            id, name, tier, every_nth, training_run, team, created_at,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("suites"))
            }

            async fn delete_suite(&self, suite_id: i64) -> $crate::StoreResult<bool> {
                let result: $crate::StoreResult<bool> = async move {
                    let deleted = sqlx::query("DELETE FROM suites WHERE id = $1")
                        .bind(suite_id)
                        .execute(&self.writer)
                        .await?
                        .rows_affected();
                    Ok(deleted == 1)
                }
                .await;
                result.map_err(|err| err.during("delete_suite"))
            }

            async fn checkpoint_position(&self, checkpoint_id: CheckpointId) -> $crate::StoreResult<Option<(String, i64)>> {
                let result: $crate::StoreResult<Option<(String, i64)>> = async move {
                    Ok(sqlx::query_as(
                        "SELECT c.training_run, (SELECT COUNT(*) FROM checkpoints o WHERE o.training_run = c.training_run AND o.id <= c.id) \
                         FROM checkpoints c WHERE c.id = $1",
                    )
                    .bind(checkpoint_id.get())
                    .fetch_optional(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("checkpoint_position"))
            }

            async fn record_suite_launch(
                &self,
                suite_id: i64,
                checkpoint_id: CheckpointId,
                run_id: RunId,
                reason: &str,
                now: i64,
            ) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO suite_launches (suite_id, checkpoint_id, run_id, reason, created_at) VALUES ($1, $2, $3, $4, $5) \
                         ON CONFLICT DO NOTHING",
                    )
                    .bind(suite_id)
                    .bind(checkpoint_id.get())
                    .bind(run_id.get())
                    .bind(reason)
                    .bind(now)
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("record_suite_launch"))
            }

            async fn suite_launches(&self, limit: i64) -> $crate::StoreResult<Vec<arbiter_domain::suites::SuiteLaunch>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::suites::SuiteLaunch>> = async move {
                    let rows: Vec<(String, String, i64, String, i64)> = sqlx::query_as(
                        "SELECT s.name, c.name, l.run_id, l.reason, l.created_at FROM suite_launches l \
                         JOIN suites s ON s.id = l.suite_id JOIN checkpoints c ON c.id = l.checkpoint_id \
                         ORDER BY l.created_at DESC, l.run_id DESC LIMIT $1",
                    )
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(suite, checkpoint, run_id, reason, created_at)| arbiter_domain::suites::SuiteLaunch {
                            suite, checkpoint, run_id: RunId(run_id), reason, created_at,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("suite_launches"))
            }

            async fn create_webhook(
                &self,
                url: &str,
                events: &[String],
                secret_ref: Option<&str>,
                created_by: Option<UserId>,
                now: i64,
            ) -> $crate::StoreResult<arbiter_domain::webhooks::Webhook> {
                let result: $crate::StoreResult<arbiter_domain::webhooks::Webhook> = async move {
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO webhooks (url, events, secret_ref, cursor_ms, created_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $4) RETURNING id",
                    )
                    .bind(url)
                    .bind(events.join(","))
                    .bind(secret_ref)
                    .bind(now)
                    .bind(created_by.map(i64::from))
                    .fetch_one(&self.writer)
                    .await?;
                    Ok(arbiter_domain::webhooks::Webhook {
                        id,
                        url: url.to_string(),
                        events: events.to_vec(),
                        signed: secret_ref.is_some(),
                        secret_ref: secret_ref.map(str::to_string),
                        cursor_ms: now,
                        created_by,
                        created_at: now,
                    })
                }
                .await;
                result.map_err(|err| err.during("create_webhook"))
            }

            async fn webhooks(&self) -> $crate::StoreResult<Vec<arbiter_domain::webhooks::Webhook>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::webhooks::Webhook>> = async move {
                    let rows: Vec<(i64, String, String, Option<String>, i64, Option<i64>, i64)> = sqlx::query_as(
                        "SELECT id, url, events, secret_ref, cursor_ms, created_by, created_at FROM webhooks ORDER BY id",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(id, url, events, secret_ref, cursor_ms, created_by, created_at)| arbiter_domain::webhooks::Webhook {
                            id,
                            url,
                            events: events.split(',').filter(|e| !e.is_empty()).map(str::to_string).collect(),
                            signed: secret_ref.is_some(),
                            secret_ref,
                            cursor_ms,
                            created_by: created_by.map(UserId::from),
                            created_at,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("webhooks"))
            }

            async fn delete_webhook(&self, webhook_id: i64) -> $crate::StoreResult<bool> {
                let result: $crate::StoreResult<bool> = async move {
                    Ok(sqlx::query("DELETE FROM webhooks WHERE id = $1")
                        .bind(webhook_id)
                        .execute(&self.writer)
                        .await?
                        .rows_affected()
                        == 1)
                }
                .await;
                result.map_err(|err| err.during("delete_webhook"))
            }

            async fn reseal_secrets(
                &self,
                reseal: &(dyn for<'s> Fn(&'s str) -> Result<String, String> + Send + Sync),
            ) -> $crate::StoreResult<(u64, u64)> {
                let result: $crate::StoreResult<(u64, u64)> = async move {
                    let mut tx = self.writer.begin().await?;
                    let mut counts = [0u64; 2];
                    // (table, key column, sealed column, what it is, in words)
                    let places = [
                        ("endpoints", "base_url", "api_key_ref", "the API key of endpoint"),
                        ("webhooks", "CAST(id AS TEXT)", "secret_ref", "the signing secret of webhook"),
                    ];
                    for (count, (table, key, column, what)) in counts.iter_mut().zip(places) {
                        let rows: Vec<(String, String)> = sqlx::query_as(&format!(
                            "SELECT {key}, {column} FROM {table} WHERE {column} LIKE 'sealed:%' ORDER BY 1"
                        ))
                        .fetch_all(&mut *tx)
                        .await?;
                        for (name, sealed) in rows {
                            let resealed = reseal(&sealed).map_err(|problem| {
                                $crate::StoreError::Conflict(format!("{what} {name}: {problem}; nothing was changed"))
                            })?;
                            sqlx::query(&format!(
                                "UPDATE {table} SET {column} = $1 WHERE {column} = $2"
                            ))
                            .bind(&resealed)
                            .bind(&sealed)
                            .execute(&mut *tx)
                            .await?;
                            *count += 1;
                        }
                    }
                    tx.commit().await?;
                    Ok((counts[0], counts[1]))
                }
                .await;
                result.map_err(|err| err.during("reseal_secrets"))
            }

            async fn set_webhook_cursor(&self, webhook_id: i64, cursor_ms: i64) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    sqlx::query("UPDATE webhooks SET cursor_ms = $1 WHERE id = $2 AND cursor_ms < $1")
                        .bind(cursor_ms)
                        .bind(webhook_id)
                        .execute(&self.writer)
                        .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_webhook_cursor"))
            }

            async fn runs_finished_between(&self, after: i64, upto: i64) -> $crate::StoreResult<Vec<RunId>> {
                let result: $crate::StoreResult<Vec<i64>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT id FROM runs WHERE status = 'completed' AND finished_at > $1 AND finished_at <= $2 ORDER BY finished_at, id",
                    )
                    .bind(after)
                    .bind(upto)
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map(|ids| ids.into_iter().map(RunId).collect()).map_err(|err| err.during("runs_finished_between"))
            }

            async fn alerts_changed_between(&self, after: i64, upto: i64) -> $crate::StoreResult<Vec<arbiter_domain::health::Alert>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::health::Alert>> = async move {
                    let rows: Vec<AlertRow> = sqlx::query_as(&format!(
                        "SELECT {ALERT_COLUMNS} FROM alerts \
                         WHERE (created_at > $1 AND created_at <= $2) OR (resolved_at > $1 AND resolved_at <= $2) ORDER BY id"
                    ))
                    .bind(after)
                    .bind(upto)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows.into_iter().map(alert_from_row).collect())
                }
                .await;
                result.map_err(|err| err.during("alerts_changed_between"))
            }

            async fn enqueue_delivery(
                &self,
                webhook_id: i64,
                event: &str,
                event_key: &str,
                payload: &str,
                now: i64,
            ) -> $crate::StoreResult<bool> {
                let result: $crate::StoreResult<bool> = async move {
                    Ok(sqlx::query(
                        "INSERT INTO webhook_deliveries (webhook_id, event, event_key, payload, next_attempt_at, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (webhook_id, event_key) DO NOTHING",
                    )
                    .bind(webhook_id)
                    .bind(event)
                    .bind(event_key)
                    .bind(payload)
                    .bind(now)
                    .execute(&self.writer)
                    .await?
                    .rows_affected()
                        == 1)
                }
                .await;
                result.map_err(|err| err.during("enqueue_delivery"))
            }

            async fn prune_webhook_deliveries(&self, before: i64) -> $crate::StoreResult<u64> {
                let result: $crate::StoreResult<u64> = async move {
                    Ok(sqlx::query(
                        "DELETE FROM webhook_deliveries WHERE created_at < $1 \
                         AND (delivered_at IS NOT NULL OR failed_at IS NOT NULL)",
                    )
                    .bind(before)
                    .execute(&self.writer)
                    .await?
                    .rows_affected())
                }
                .await;
                result.map_err(|err| err.during("prune_webhook_deliveries"))
            }

            async fn webhook_event_keys(&self, webhook_id: i64, since: i64) -> $crate::StoreResult<Vec<String>> {
                let result: $crate::StoreResult<Vec<String>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT event_key FROM webhook_deliveries WHERE webhook_id = $1 AND created_at > $2",
                    )
                    .bind(webhook_id)
                    .bind(since)
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("webhook_event_keys"))
            }

            async fn due_deliveries(&self, now: i64, limit: i64) -> $crate::StoreResult<Vec<$crate::DueDelivery>> {
                let result: $crate::StoreResult<Vec<$crate::DueDelivery>> = async move {
                    let rows: Vec<(i64, i64, String, String, i64, i64)> = sqlx::query_as(
                        "SELECT id, webhook_id, event, payload, attempts, next_attempt_at FROM webhook_deliveries \
                         WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= $1 \
                         ORDER BY next_attempt_at, id LIMIT $2",
                    )
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(id, webhook_id, event, payload, attempts, next_attempt_at)| $crate::DueDelivery {
                            id, webhook_id, event, payload, attempts, next_attempt_at,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("due_deliveries"))
            }

            async fn claim_delivery(&self, id: i64, seen_next_attempt_at: i64, lease_until: i64) -> $crate::StoreResult<bool> {
                let result: $crate::StoreResult<bool> = async move {
                    Ok(sqlx::query(
                        "UPDATE webhook_deliveries SET next_attempt_at = $1 WHERE id = $2 AND next_attempt_at = $3 \
                         AND delivered_at IS NULL AND failed_at IS NULL",
                    )
                    .bind(lease_until)
                    .bind(id)
                    .bind(seen_next_attempt_at)
                    .execute(&self.writer)
                    .await?
                    .rows_affected()
                        == 1)
                }
                .await;
                result.map_err(|err| err.during("claim_delivery"))
            }

            async fn finish_delivery(&self, id: i64, attempt: &$crate::DeliveryAttempt, now: i64) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    let (delivered_at, failed_at, next) = match (attempt.delivered, attempt.retry_at) {
                        (true, _) => (Some(now), None, now),
                        (false, Some(retry_at)) => (None, None, retry_at),
                        (false, None) => (None, Some(now), now),
                    };
                    sqlx::query(
                        "UPDATE webhook_deliveries SET attempts = attempts + 1, delivered_at = $1, failed_at = $2, \
                         next_attempt_at = $3, last_status = $4, last_error = $5 WHERE id = $6",
                    )
                    .bind(delivered_at)
                    .bind(failed_at)
                    .bind(next)
                    .bind(attempt.status)
                    .bind(&attempt.error)
                    .bind(id)
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("finish_delivery"))
            }

            async fn recent_deliveries(&self, limit: i64) -> $crate::StoreResult<Vec<arbiter_domain::webhooks::DeliveryRecord>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::webhooks::DeliveryRecord>> = async move {
                    let rows: Vec<(i64, i64, String, String, String, i64, i64, Option<i64>, Option<i64>, Option<i64>, Option<String>, i64)> =
                        sqlx::query_as(
                            "SELECT d.id, d.webhook_id, w.url, d.event, d.event_key, d.attempts, d.next_attempt_at, d.delivered_at, \
                             d.failed_at, d.last_status, d.last_error, d.created_at FROM webhook_deliveries d \
                             JOIN webhooks w ON w.id = d.webhook_id ORDER BY d.id DESC LIMIT $1",
                        )
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(id, webhook_id, url, event, event_key, attempts, next_attempt_at, delivered_at, failed_at, last_status, last_error, created_at)| {
                            arbiter_domain::webhooks::DeliveryRecord {
                                id, webhook_id, url, event, event_key, attempts, next_attempt_at, delivered_at, failed_at,
                                last_status, last_error, created_at,
                            }
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("recent_deliveries"))
            }

            async fn runs_with_raw_before(&self, before: i64, limit: i64) -> $crate::StoreResult<Vec<RunId>> {
                let result: $crate::StoreResult<Vec<i64>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT id FROM runs WHERE status = 'completed' AND raw_purged_at IS NULL \
                         AND finished_at < $1 ORDER BY finished_at, id LIMIT $2",
                    )
                    .bind(before)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map(|ids| ids.into_iter().map(RunId).collect()).map_err(|err| err.during("runs_with_raw_before"))
            }

            async fn purge_raw_outputs(&self, run_id: RunId, keep_users_after: i64, now: i64) -> $crate::StoreResult<$crate::RawPurge> {
                let result: $crate::StoreResult<$crate::RawPurge> = async move {
                    const OF_RUN: &str = "SELECT id FROM work_items WHERE run_id = $1";
                    let mut tx = self.writer.begin().await?;
                    let cache_entries_deleted = sqlx::query(&format!("DELETE FROM generation_cache WHERE work_item_id IN ({OF_RUN})"))
                        .bind(run_id.get())
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    // Logprobs that a recent run's cache hit still points at stay.
                    let in_use = "EXISTS (SELECT 1 FROM generations u JOIN work_items uw ON uw.id = u.work_item_id \
                        JOIN runs ur ON ur.id = uw.run_id WHERE u.source_work_item_id = generation_logprobs.work_item_id \
                        AND uw.run_id <> $1 AND (ur.status <> 'completed' OR ur.finished_at >= $2))";
                    let logprobs_kept_in_use: i64 = sqlx::query_scalar(&format!(
                        "SELECT COUNT(*) FROM generation_logprobs WHERE work_item_id IN ({OF_RUN}) AND {in_use}"
                    ))
                    .bind(run_id.get())
                    .bind(keep_users_after)
                    .fetch_one(&mut *tx)
                    .await?;
                    let logprobs_deleted = sqlx::query(&format!(
                        "DELETE FROM generation_logprobs WHERE work_item_id IN ({OF_RUN}) AND NOT {in_use}"
                    ))
                    .bind(run_id.get())
                    .bind(keep_users_after)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    let generations_cleared = sqlx::query(&format!(
                        "UPDATE generations SET output = '', attempt_log = NULL WHERE work_item_id IN ({OF_RUN}) AND output <> ''"
                    ))
                    .bind(run_id.get())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    sqlx::query("UPDATE runs SET raw_purged_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(run_id.get())
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok($crate::RawPurge {
                        generations_cleared,
                        logprobs_deleted,
                        cache_entries_deleted,
                        logprobs_kept_in_use: logprobs_kept_in_use as u64,
                    })
                }
                .await;
                result.map_err(|err| err.during("purge_raw_outputs"))
            }

            async fn runs_finished_before(&self, before: i64, limit: i64) -> $crate::StoreResult<Vec<RunId>> {
                let result: $crate::StoreResult<Vec<i64>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT id FROM runs WHERE status = 'completed' \
                         AND finished_at < $1 ORDER BY finished_at, id LIMIT $2",
                    )
                    .bind(before)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map(|ids| ids.into_iter().map(RunId).collect()).map_err(|err| err.during("runs_finished_before"))
            }

            async fn run_in_use(&self, run_id: RunId, expired_before: i64) -> $crate::StoreResult<bool> {
                let result: $crate::StoreResult<bool> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM generations u JOIN work_items uw ON uw.id = u.work_item_id \
                         JOIN work_items sw ON sw.id = u.source_work_item_id WHERE sw.run_id = $1 AND uw.run_id <> $1) \
                         OR EXISTS (SELECT 1 FROM promotion_decisions d JOIN runs o \
                           ON o.id = CASE WHEN d.baseline_run_id = $1 THEN d.candidate_run_id ELSE d.baseline_run_id END \
                           WHERE (d.baseline_run_id = $1 OR d.candidate_run_id = $1) \
                           AND (o.status <> 'completed' OR o.finished_at >= $2)) \
                         OR EXISTS (SELECT 1 FROM pair_requests q JOIN preference_pairs p ON p.request_id = q.id \
                           JOIN annotation_tasks t ON t.id = p.task_id \
                           WHERE (q.run_a = $1 OR q.run_b = $1) AND (t.state <> 'done' OR t.completed_at >= $2))",
                    )
                    .bind(run_id.get())
                    .bind(expired_before)
                    .fetch_one(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("run_in_use"))
            }

            async fn delete_run(&self, run_id: RunId) -> $crate::StoreResult<u64> {
                let result: $crate::StoreResult<u64> = async move {
                    const ITEMS: &str = "SELECT id FROM work_items WHERE run_id = $1";
                    let tasks = format!("SELECT id FROM annotation_tasks WHERE work_item_id IN ({ITEMS})");
                    let golds = format!("SELECT id FROM gold_items WHERE task_id IN ({tasks})");
                    // Children before parents, so foreign keys hold at every step.
                    let statements = [
                        format!("DELETE FROM label_reviews WHERE label_id IN (SELECT id FROM labels WHERE task_id IN ({tasks}))"),
                        format!("DELETE FROM task_leases WHERE task_id IN ({tasks}) OR gold_id IN ({golds})"),
                        format!("DELETE FROM gold_answers WHERE gold_id IN ({golds})"),
                        format!("DELETE FROM gold_items WHERE task_id IN ({tasks})"),
                        format!("DELETE FROM labels WHERE task_id IN ({tasks})"),
                        format!("DELETE FROM annotation_skips WHERE task_id IN ({tasks})"),
                        format!("DELETE FROM annotation_tasks WHERE work_item_id IN ({ITEMS})"),
                        format!("DELETE FROM grades WHERE work_item_id IN ({ITEMS})"),
                        format!("DELETE FROM generation_cache WHERE work_item_id IN ({ITEMS})"),
                        format!("DELETE FROM generation_logprobs WHERE work_item_id IN ({ITEMS})"),
                        format!("UPDATE generations SET source_work_item_id = NULL WHERE work_item_id IN ({ITEMS}) AND source_work_item_id IS NOT NULL"),
                        format!("DELETE FROM generations WHERE work_item_id IN ({ITEMS})"),
                        "DELETE FROM work_items WHERE run_id = $1".to_string(),
                        "DELETE FROM run_tallies WHERE run_id = $1".to_string(),
                        "DELETE FROM run_snapshots WHERE run_id = $1".to_string(),
                        "DELETE FROM run_graders WHERE run_id = $1".to_string(),
                        "DELETE FROM run_load_samples WHERE run_id = $1".to_string(),
                        "DELETE FROM run_counts WHERE run_id = $1".to_string(),
                        "DELETE FROM promotion_decisions WHERE baseline_run_id = $1 OR candidate_run_id = $1".to_string(),
                        "DELETE FROM suite_launches WHERE run_id = $1".to_string(),
                        "DELETE FROM runs WHERE id = $1".to_string(),
                    ];
                    let mut tx = self.writer.begin().await?;
                    // A run resumed since it was chosen is no longer expired.
                    let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
                        .bind(run_id.get())
                        .fetch_optional(&mut *tx)
                        .await?;
                    if status.as_deref() != Some(arbiter_domain::run::RunStatus::Completed.as_str()) {
                        return Ok(0);
                    }
                    let mut deleted = 0;
                    // Pairs with one side in the run go with it (their other side stays): every
                    // pair of the run's requests, as a request pairs the run with one other.
                    let pair_tasks: Vec<i64> = sqlx::query_scalar(
                        "SELECT p.task_id FROM preference_pairs p JOIN pair_requests q ON q.id = p.request_id \
                         WHERE q.run_a = $1 OR q.run_b = $1",
                    )
                    .bind(run_id.get())
                    .fetch_all(&mut *tx)
                    .await?;
                    for chunk in pair_tasks.chunks(500) {
                        let ids: Vec<String> = chunk.iter().map(i64::to_string).collect();
                        let ids = ids.join(", ");
                        let golds = format!("SELECT id FROM gold_items WHERE task_id IN ({ids})");
                        let pair_statements = [
                            format!("DELETE FROM pair_reviews WHERE label_id IN (SELECT id FROM preference_labels WHERE task_id IN ({ids}))"),
                            format!("DELETE FROM pair_judgements WHERE task_id IN ({ids})"),
                            format!("DELETE FROM task_leases WHERE task_id IN ({ids}) OR gold_id IN ({golds})"),
                            format!("DELETE FROM gold_answers WHERE gold_id IN ({golds})"),
                            format!("DELETE FROM gold_items WHERE task_id IN ({ids})"),
                            format!("DELETE FROM preference_labels WHERE task_id IN ({ids})"),
                            format!("DELETE FROM annotation_skips WHERE task_id IN ({ids})"),
                            format!("DELETE FROM preference_pairs WHERE task_id IN ({ids})"),
                        ];
                        for statement in &pair_statements {
                            deleted += sqlx::query(statement).execute(&mut *tx).await?.rows_affected();
                        }
                        deleted += sqlx::query(&format!("DELETE FROM annotation_tasks WHERE id IN ({ids})"))
                            .execute(&mut *tx)
                            .await?
                            .rows_affected();
                    }
                    deleted += sqlx::query("DELETE FROM pair_requests WHERE run_a = $1 OR run_b = $1")
                        .bind(run_id.get())
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    for statement in &statements {
                        deleted += sqlx::query(statement).bind(run_id.get()).execute(&mut *tx).await?.rows_affected();
                    }
                    tx.commit().await?;
                    Ok(deleted)
                }
                .await;
                result.map_err(|err| err.during("delete_run"))
            }

            async fn announcement_hash(&self, source: &str) -> $crate::StoreResult<Option<String>> {
                let result: $crate::StoreResult<Option<String>> = async move {
                    Ok(sqlx::query_scalar("SELECT content_hash FROM watched_announcements WHERE source = $1")
                        .bind(source)
                        .fetch_optional(&self.pool)
                        .await?)
                }
                .await;
                result.map_err(|err| err.during("announcement_hash"))
            }

            async fn record_announcement(
                &self,
                source: &str,
                content_hash: &str,
                checkpoint_id: Option<CheckpointId>,
                error: Option<&str>,
                now: i64,
            ) -> $crate::StoreResult<()> {
                let result: $crate::StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO watched_announcements (source, content_hash, checkpoint_id, error, seen_at) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (source) DO UPDATE SET content_hash = excluded.content_hash, \
                         checkpoint_id = excluded.checkpoint_id, error = excluded.error, seen_at = excluded.seen_at",
                    )
                    .bind(source)
                    .bind(content_hash)
                    .bind(checkpoint_id.map(i64::from))
                    .bind(error)
                    .bind(now)
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("record_announcement"))
            }
        }
    };
}

use crate::StoreResult;
use arbiter_domain::health::results_objective::SuiteDelivery;
use arbiter_domain::health::run_load::RunLoadSample;
use arbiter_domain::health::{
    Alert, AnswerWindow, CostRow, EndpointLoad, HealthSample, WorkerStatus,
};
use arbiter_domain::suites::{NewSuite, Suite, SuiteLaunch};
use arbiter_domain::webhooks::{DeliveryRecord, Webhook};
pub(crate) use operations_sql;
