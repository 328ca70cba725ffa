//! Served checkpoints' launches: launchers announce themselves, launches are requested,
//! started, found healthy, restarted, failed or retired. A served checkpoint is registered
//! (with its ports and first launch) by [`crate::CatalogStore::register_checkpoint`].
//!
//! Invariants, each kept by one statement or transaction:
//! - a checkpoint has at most one live launch (a partial unique index);
//! - a launch fails together with its checkpoint's unfinished runs, which are cancelled with
//!   the reason, so none waits for servers that will not come;
//! - a launch retires only if, in the same statement, its checkpoint has no unfinished run.

use crate::StoreResult;
use arbiter_domain::ids::{CheckpointId, RunId};
use arbiter_domain::serving::canary::CanaryReading;
use arbiter_domain::serving::launch::{Launch, LaunchState};
use arbiter_domain::serving::plan::ServingPlan;
use arbiter_domain::serving::ServingEngine;
use async_trait::async_trait;

/// A launcher as it announces itself with each heartbeat.
#[derive(Clone, Debug, PartialEq)]
pub struct LauncherInfo {
    pub id: String,
    /// The host its servers listen on, as workers reach them.
    pub host: String,
    pub engines: Vec<ServingEngine>,
    pub port_first: u16,
    pub port_last: u16,
    /// How its replicas are reached: a URL with `{name}` and `{port}` (see
    /// [`arbiter_domain::serving::replica_url_from`]).
    pub replica_url: String,
}

/// A live launch as its launcher manages it.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedLaunch {
    pub id: i64,
    pub checkpoint_id: CheckpointId,
    pub checkpoint_name: String,
    /// The model name the servers must serve (the checkpoint's).
    pub served_model: String,
    pub engine: ServingEngine,
    pub model_path: String,
    pub plan: ServingPlan,
    pub host: String,
    /// One port per replica, in replica order.
    pub ports: Vec<u16>,
    /// Each replica's URL, as its endpoints were registered, in replica order.
    pub urls: Vec<String>,
    pub state: LaunchState,
    pub started_at: Option<i64>,
    pub restarts: i64,
    /// Unfinished runs on the checkpoint, and when the last of its runs finished.
    pub unfinished_runs: i64,
    pub last_run_finished_at: Option<i64>,
    pub healthy_at: Option<i64>,
    /// No launch of the checkpoint has read the serving canary yet (nor been held by it): its
    /// servers answer the canary before its runs.
    pub needs_canary: bool,
}

#[async_trait]
pub trait ServingStore: Send + Sync {
    /// Records the launcher's settings and heartbeat.
    async fn heartbeat_launcher(&self, launcher: &LauncherInfo, now: i64) -> StoreResult<()>;

    /// Requests a launch of a served checkpoint that has no live one (a run needs its
    /// servers again); `None` when it is not served, is retracted, or has a live launch.
    async fn request_launch(
        &self,
        checkpoint_id: CheckpointId,
        now: i64,
    ) -> StoreResult<Option<i64>>;

    /// Requests a launch for each checkpoint `launcher_id` serves that has a running run and
    /// no live launch (a run resumed, or a request lost); returns the new launches.
    async fn wake_waiting(&self, launcher_id: &str, now: i64) -> StoreResult<Vec<i64>>;

    /// Puts the launcher's live launches back to `requested` (it is shutting down and stops
    /// their servers): its next start launches them again, counting no restart.
    async fn release_launches(&self, launcher_id: &str) -> StoreResult<()>;

    /// Fails the live launches of launchers silent since before `gone_before` (their runs
    /// cancelled with the reason, as [`ServingStore::fail_launch`]); returns them.
    async fn fail_abandoned_launches(&self, gone_before: i64, now: i64) -> StoreResult<Vec<i64>>;

    /// The live launches of `launcher_id`, oldest first.
    async fn launches_to_manage(&self, launcher_id: &str) -> StoreResult<Vec<ManagedLaunch>>;

    /// Moves a live launch to `to` (`starting` stamps its start, `healthy` its first health,
    /// `restarting` counts a restart and keeps `failure` and `log_tail`); false when it is no
    /// longer live.
    async fn move_launch(
        &self,
        launch_id: i64,
        to: LaunchState,
        failure: Option<&str>,
        log_tail: Option<&str>,
        now: i64,
    ) -> StoreResult<bool>;

    /// Fails a live launch with its reason and log tail and cancels its checkpoint's
    /// unfinished runs (their last error says why), in one transaction; returns those runs.
    async fn fail_launch(
        &self,
        launch_id: i64,
        failure: &str,
        log_tail: &str,
        now: i64,
    ) -> StoreResult<Vec<RunId>>;

    /// Retires a live launch if its checkpoint has no unfinished run (decided in the same
    /// statement, so a run created meanwhile keeps it); frees a retracted checkpoint's ports.
    async fn retire_launch(
        &self,
        launch_id: i64,
        log_tail: Option<&str>,
        now: i64,
    ) -> StoreResult<bool>;

    /// The canary reading of the checkpoint before this one in its training run (the highest
    /// lower step with a reading, retracted and held ones skipped), with that checkpoint's name.
    async fn predecessor_canary(
        &self,
        checkpoint_id: CheckpointId,
    ) -> StoreResult<Option<(String, CanaryReading)>>;

    /// Records a live launch's canary reading (it passed).
    async fn record_canary(&self, launch_id: i64, reading: &CanaryReading) -> StoreResult<()>;

    /// Holds a live launch whose canary failed: `held` with the reason and reading, and its
    /// checkpoint's running and expanding runs paused with the reason, in one transaction;
    /// returns them. (A launch still planning its run then leaves it paused.)
    async fn hold_launch(
        &self,
        launch_id: i64,
        reason: &str,
        reading: &CanaryReading,
        now: i64,
    ) -> StoreResult<Vec<RunId>>;

    /// How a checkpoint is served; `None` for one registered at its URL.
    async fn serving_of(
        &self,
        checkpoint_id: CheckpointId,
    ) -> StoreResult<Option<arbiter_domain::serving::Serving>>;

    /// The latest launches, newest first (all of one checkpoint's when given).
    async fn list_launches(
        &self,
        checkpoint_id: Option<CheckpointId>,
        limit: i64,
    ) -> StoreResult<Vec<Launch>>;
}

/// The SQL of [`ServingStore`], for both backends (expanded once per backend by
/// `backend_sql!`).
macro_rules! serving_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::serving::{LauncherInfo, ManagedLaunch};
        use $crate::ReadColumn as _;
        use $crate::{StoreError, StoreResult};
        use arbiter_domain::ids::{CheckpointId, RunId};
        use arbiter_domain::serving::canary::CanaryReading;
        use arbiter_domain::serving::launch::{Launch, LaunchState};
        use arbiter_domain::serving::plan::ServingPlan;
        use arbiter_domain::serving::ServingEngine;

        fn canary_column(text: Option<String>) -> Result<Option<CanaryReading>, sqlx::Error> {
            text.map(|text| serde_json::from_str(&text).map_err(|err| sqlx::Error::Decode(err.into())))
                .transpose()
        }

        fn canary_json(reading: &CanaryReading) -> String {
            serde_json::to_string(reading).expect("readings serialize")
        }

        const LIVE: &str = "('requested', 'starting', 'healthy', 'restarting')";

        fn plan_column(text: &str) -> Result<ServingPlan, sqlx::Error> {
            serde_json::from_str(text).map_err(|err| sqlx::Error::Decode(err.into()))
        }

        fn state_column(text: &str) -> Result<LaunchState, sqlx::Error> {
            LaunchState::parse(text)
                .ok_or_else(|| sqlx::Error::Decode(format!("unknown launch state `{text}`").into()))
        }

        /// A served checkpoint's replicas' ports and URLs, in replica order.
        async fn ports_of(
            pool: &sqlx::Pool<$db>,
            checkpoint_id: i64,
        ) -> Result<(Vec<u16>, Vec<String>), sqlx::Error> {
            let rows: Vec<(i64, String)> = sqlx::query_as(
                "SELECT port, url FROM served_ports WHERE checkpoint_id = $1 ORDER BY replica",
            )
            .bind(checkpoint_id)
            .fetch_all(pool)
            .await?;
            Ok(rows.into_iter().map(|(port, url)| (port as u16, url)).unzip())
        }

        /// How a live launch ends: its new state, why, one column kept with it (the log tail or
        /// the canary reading) and when.
        struct EndedLaunch<'a> {
            launch_id: i64,
            state: &'static str,
            failure: &'a str,
            kept: (&'static str, String),
            now: i64,
        }

        /// Ends a live launch and moves its checkpoint's runs in `from` to `to` with `error` as
        /// their last error, in one transaction; returns the runs moved (none when the launch
        /// was no longer live).
        async fn end_launch(
            writer: &sqlx::Pool<$db>,
            ended: EndedLaunch<'_>,
            (to, from, error): (&'static str, &'static str, String),
        ) -> StoreResult<Vec<RunId>> {
            let mut tx = writer.begin_with($begin).await?;
            let checkpoint: Option<i64> = sqlx::query_scalar(&format!(
                "UPDATE server_launches SET state = '{}', failure = $2, {} = $3, ended_at = $4 \
                 WHERE id = $1 AND state IN {LIVE} RETURNING checkpoint_id",
                ended.state, ended.kept.0
            ))
            .bind(ended.launch_id)
            .bind(ended.failure)
            .bind(&ended.kept.1)
            .bind(ended.now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(checkpoint) = checkpoint else {
                return Ok(Vec::new());
            };
            let moved: Vec<i64> = sqlx::query_scalar(&format!(
                "UPDATE runs SET status = '{to}', last_error = $2 WHERE checkpoint_id = $1 AND status IN {from} RETURNING id"
            ))
            .bind(checkpoint)
            .bind(error)
            .fetch_all(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(moved.into_iter().map(RunId).collect())
        }

        #[async_trait::async_trait]
        impl $crate::serving::ServingStore for $store {
            async fn heartbeat_launcher(&self, launcher: &LauncherInfo, now: i64) -> StoreResult<()> {
                let engines: Vec<&str> = launcher.engines.iter().map(|engine| engine.as_str()).collect();
                sqlx::query(
                    "INSERT INTO serving_launchers (id, host, engines, port_first, port_last, heartbeat_at, replica_url) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET host = excluded.host, \
                     engines = excluded.engines, port_first = excluded.port_first, port_last = excluded.port_last, \
                     heartbeat_at = excluded.heartbeat_at, replica_url = excluded.replica_url",
                )
                .bind(&launcher.id)
                .bind(&launcher.host)
                .bind(serde_json::to_string(&engines).expect("names serialize"))
                .bind(i64::from(launcher.port_first))
                .bind(i64::from(launcher.port_last))
                .bind(now)
                .bind(&launcher.replica_url)
                .execute(&self.writer)
                .await
                .map_err(|err| StoreError::from(err).during("heartbeat_launcher"))?;
                Ok(())
            }

            async fn request_launch(&self, checkpoint_id: CheckpointId, now: i64) -> StoreResult<Option<i64>> {
                let result: StoreResult<Option<i64>> = async move {
                    let inserted = sqlx::query_scalar::<_, i64>(&format!(
                        "INSERT INTO server_launches (checkpoint_id, state, requested_at) \
                         SELECT s.checkpoint_id, 'requested', $2 FROM served_checkpoints s \
                         JOIN checkpoints c ON c.id = s.checkpoint_id \
                         WHERE s.checkpoint_id = $1 AND c.retracted_at IS NULL \
                         AND NOT EXISTS (SELECT 1 FROM server_launches l WHERE l.checkpoint_id = $1 AND l.state IN {LIVE}) \
                         RETURNING id"
                    ))
                    .bind(checkpoint_id.get())
                    .bind(now)
                    .fetch_optional(&self.writer)
                    .await;
                    match inserted {
                        Ok(id) => Ok(id),
                        // Another request made the live launch first: it serves this run too.
                        Err(sqlx::Error::Database(err))
                            if err.kind() == sqlx::error::ErrorKind::UniqueViolation =>
                        {
                            Ok(None)
                        }
                        Err(err) => Err(err.into()),
                    }
                }
                .await;
                result.map_err(|err| err.during("request_launch"))
            }

            async fn wake_waiting(&self, launcher_id: &str, now: i64) -> StoreResult<Vec<i64>> {
                let result: StoreResult<Vec<i64>> = async move {
                    let waiting: Vec<i64> = sqlx::query_scalar(&format!(
                        "SELECT s.checkpoint_id FROM served_checkpoints s JOIN checkpoints c ON c.id = s.checkpoint_id \
                         WHERE s.launcher_id = $1 AND c.retracted_at IS NULL \
                         AND EXISTS (SELECT 1 FROM runs r WHERE r.checkpoint_id = s.checkpoint_id AND r.status = 'running') \
                         AND NOT EXISTS (SELECT 1 FROM server_launches h WHERE h.checkpoint_id = s.checkpoint_id AND h.state = 'held' \
                                         AND h.id = (SELECT MAX(x.id) FROM server_launches x WHERE x.checkpoint_id = s.checkpoint_id)) \
                         AND NOT EXISTS (SELECT 1 FROM server_launches l WHERE l.checkpoint_id = s.checkpoint_id AND l.state IN {LIVE})"
                    ))
                    .bind(launcher_id)
                    .fetch_all(&self.pool)
                    .await?;
                    let mut launched = Vec::new();
                    for checkpoint in waiting {
                        if let Some(id) = self.request_launch(CheckpointId(checkpoint), now).await? {
                            launched.push(id);
                        }
                    }
                    Ok(launched)
                }
                .await;
                result.map_err(|err| err.during("wake_waiting"))
            }

            async fn fail_abandoned_launches(&self, gone_before: i64, now: i64) -> StoreResult<Vec<i64>> {
                let abandoned: Vec<(i64, String)> = sqlx::query_as(&format!(
                    "SELECT l.id, g.id FROM server_launches l JOIN served_checkpoints s ON s.checkpoint_id = l.checkpoint_id \
                     JOIN serving_launchers g ON g.id = s.launcher_id WHERE l.state IN {LIVE} AND g.heartbeat_at < $1"
                ))
                .bind(gone_before)
                .fetch_all(&self.pool)
                .await
                .map_err(|err| StoreError::from(err).during("fail_abandoned_launches"))?;
                let mut failed = Vec::new();
                for (launch, launcher) in abandoned {
                    let reason = format!("its launcher `{launcher}` stopped (no heartbeat for over 10 minutes)");
                    self.fail_launch(launch, &reason, "", now).await?;
                    failed.push(launch);
                }
                Ok(failed)
            }

            async fn release_launches(&self, launcher_id: &str) -> StoreResult<()> {
                sqlx::query(&format!(
                    "UPDATE server_launches SET state = 'requested' WHERE state IN {LIVE} \
                     AND checkpoint_id IN (SELECT checkpoint_id FROM served_checkpoints WHERE launcher_id = $1)"
                ))
                .bind(launcher_id)
                .execute(&self.writer)
                .await
                .map_err(|err| StoreError::from(err).during("release_launches"))?;
                Ok(())
            }

            async fn launches_to_manage(&self, launcher_id: &str) -> StoreResult<Vec<ManagedLaunch>> {
                let result: StoreResult<Vec<ManagedLaunch>> = async move {
                    let rows = sqlx::query(&format!(
                        "SELECT l.id, l.checkpoint_id, c.name, c.model, s.engine, s.model_path, s.plan, g.host, \
                         l.state, l.started_at, l.healthy_at, l.restarts, \
                         (SELECT COUNT(*) FROM runs r WHERE r.checkpoint_id = l.checkpoint_id \
                          AND r.status IN ('expanding', 'running', 'paused')) AS unfinished, \
                         (SELECT MAX(r.finished_at) FROM runs r WHERE r.checkpoint_id = l.checkpoint_id) AS last_finished, \
                         (SELECT COUNT(*) FROM server_launches e WHERE e.checkpoint_id = l.checkpoint_id AND e.canary IS NOT NULL) AS read \
                         FROM server_launches l JOIN served_checkpoints s ON s.checkpoint_id = l.checkpoint_id \
                         JOIN checkpoints c ON c.id = l.checkpoint_id JOIN serving_launchers g ON g.id = s.launcher_id \
                         WHERE s.launcher_id = $1 AND l.state IN {LIVE} ORDER BY l.id"
                    ))
                    .bind(launcher_id)
                    .fetch_all(&self.pool)
                    .await?;
                    let mut launches = Vec::with_capacity(rows.len());
                    for row in rows {
                        let checkpoint_id: i64 = row.read("checkpoint_id")?;
                        let engine: String = row.read("engine")?;
                        let (ports, urls) = ports_of(&self.pool, checkpoint_id).await?;
                        launches.push(ManagedLaunch {
                            id: row.read("id")?,
                            checkpoint_id: CheckpointId(checkpoint_id),
                            checkpoint_name: row.read("name")?,
                            served_model: row.read("model")?,
                            engine: ServingEngine::parse(&engine).map_err(|err| sqlx::Error::Decode(err.into()))?,
                            model_path: row.read("model_path")?,
                            plan: plan_column(&row.read::<String>("plan")?)?,
                            host: row.read("host")?,
                            ports,
                            urls,
                            state: state_column(&row.read::<String>("state")?)?,
                            started_at: row.read("started_at")?,
                            healthy_at: row.read("healthy_at")?,
                            restarts: row.read("restarts")?,
                            unfinished_runs: row.read("unfinished")?,
                            last_run_finished_at: row.read("last_finished")?,
                            needs_canary: row.read::<i64>("read")? == 0,
                        });
                    }
                    Ok(launches)
                }
                .await;
                result.map_err(|err| err.during("launches_to_manage"))
            }

            async fn move_launch(
                &self,
                launch_id: i64,
                to: LaunchState,
                failure: Option<&str>,
                log_tail: Option<&str>,
                now: i64,
            ) -> StoreResult<bool> {
                let moved = match to {
                    LaunchState::Starting => {
                        sqlx::query(&format!("UPDATE server_launches SET state = 'starting', started_at = $2 WHERE id = $1 AND state IN {LIVE}"))
                            .bind(launch_id)
                            .bind(now)
                            .execute(&self.writer)
                            .await
                    }
                    LaunchState::Healthy => {
                        sqlx::query(&format!(
                            "UPDATE server_launches SET state = 'healthy', healthy_at = COALESCE(healthy_at, $2) WHERE id = $1 AND state IN {LIVE}"
                        ))
                        .bind(launch_id)
                        .bind(now)
                        .execute(&self.writer)
                        .await
                    }
                    LaunchState::Restarting => {
                        sqlx::query(&format!(
                            "UPDATE server_launches SET state = 'restarting', restarts = restarts + 1, failure = $2, log_tail = $3 \
                             WHERE id = $1 AND state IN {LIVE}"
                        ))
                        .bind(launch_id)
                        .bind(failure)
                        .bind(log_tail)
                        .execute(&self.writer)
                        .await
                    }
                    other => {
                        return Err(StoreError::Conflict(format!(
                            "a launch is not moved to `{}` this way",
                            other.as_str()
                        )))
                    }
                }
                .map_err(|err| StoreError::from(err).during("move_launch"))?;
                Ok(moved.rows_affected() == 1)
            }

            async fn fail_launch(&self, launch_id: i64, failure: &str, log_tail: &str, now: i64) -> StoreResult<Vec<RunId>> {
                end_launch(
                    &self.writer,
                    EndedLaunch { launch_id, state: "failed", failure, kept: ("log_tail", log_tail.to_string()), now },
                    ("cancelled", "('expanding', 'running', 'paused')", format!("its servers failed: {failure}")),
                )
                .await
                .map_err(|err| err.during("fail_launch"))
            }

            async fn retire_launch(&self, launch_id: i64, log_tail: Option<&str>, now: i64) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let checkpoint: Option<i64> = sqlx::query_scalar(&format!(
                        "UPDATE server_launches SET state = 'retired', ended_at = $2, log_tail = COALESCE($3, log_tail) \
                         WHERE id = $1 AND state IN {LIVE} AND NOT EXISTS (SELECT 1 FROM runs r \
                         WHERE r.checkpoint_id = server_launches.checkpoint_id AND r.status IN ('expanding', 'running', 'paused')) \
                         RETURNING checkpoint_id"
                    ))
                    .bind(launch_id)
                    .bind(now)
                    .bind(log_tail)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(checkpoint) = checkpoint {
                        // A retracted checkpoint never runs again: its ports go back to the range.
                        sqlx::query(
                            "DELETE FROM served_ports WHERE checkpoint_id = $1 \
                             AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.id = $1 AND c.retracted_at IS NOT NULL)",
                        )
                        .bind(checkpoint)
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    Ok(checkpoint.is_some())
                }
                .await;
                result.map_err(|err| err.during("retire_launch"))
            }

            async fn predecessor_canary(&self, checkpoint_id: CheckpointId) -> StoreResult<Option<(String, CanaryReading)>> {
                let result: StoreResult<Option<(String, CanaryReading)>> = async move {
                    let row: Option<(String, Option<String>)> = sqlx::query_as(
                        "SELECT c.name, l.canary FROM checkpoints me \
                         JOIN checkpoints c ON c.training_run = me.training_run AND c.training_step < me.training_step \
                         JOIN server_launches l ON l.checkpoint_id = c.id \
                         WHERE me.id = $1 AND me.training_run <> '' AND c.retracted_at IS NULL \
                         AND l.canary IS NOT NULL AND l.state <> 'held' \
                         ORDER BY c.training_step DESC, l.id DESC LIMIT 1",
                    )
                    .bind(checkpoint_id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(match row {
                        Some((name, canary)) => canary_column(canary)?.map(|reading| (name, reading)),
                        None => None,
                    })
                }
                .await;
                result.map_err(|err| err.during("predecessor_canary"))
            }

            async fn record_canary(&self, launch_id: i64, reading: &CanaryReading) -> StoreResult<()> {
                sqlx::query("UPDATE server_launches SET canary = $2 WHERE id = $1")
                    .bind(launch_id)
                    .bind(canary_json(reading))
                    .execute(&self.writer)
                    .await
                    .map_err(|err| StoreError::from(err).during("record_canary"))?;
                Ok(())
            }

            async fn hold_launch(&self, launch_id: i64, reason: &str, reading: &CanaryReading, now: i64) -> StoreResult<Vec<RunId>> {
                end_launch(
                    &self.writer,
                    EndedLaunch { launch_id, state: "held", failure: reason, kept: ("canary", canary_json(reading)), now },
                    ("paused", "('expanding', 'running')", format!("held by the serving canary: {reason}; resume it to run it anyway")),
                )
                .await
                .map_err(|err| err.during("hold_launch"))
            }

            async fn serving_of(&self, checkpoint_id: CheckpointId) -> StoreResult<Option<arbiter_domain::serving::Serving>> {
                let result: StoreResult<Option<arbiter_domain::serving::Serving>> = async move {
                    let row: Option<(String, String, String)> = sqlx::query_as(
                        "SELECT engine, model_path, plan FROM served_checkpoints WHERE checkpoint_id = $1",
                    )
                    .bind(checkpoint_id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                    row.map(|(engine, model_path, plan)| {
                        Ok(arbiter_domain::serving::Serving {
                            engine: ServingEngine::parse(&engine).map_err(|err| sqlx::Error::Decode(err.into()))?,
                            model_path,
                            plan: plan_column(&plan)?,
                        })
                    })
                    .transpose()
                    .map_err(|err: sqlx::Error| err.into())
                }
                .await;
                result.map_err(|err| err.during("serving_of"))
            }

            async fn list_launches(&self, checkpoint_id: Option<CheckpointId>, limit: i64) -> StoreResult<Vec<Launch>> {
                let result: StoreResult<Vec<Launch>> = async move {
                    let rows = sqlx::query(
                        "SELECT l.id, l.checkpoint_id, c.name, s.launcher_id, s.plan, l.state, l.requested_at, \
                         l.started_at, l.healthy_at, l.ended_at, l.restarts, l.failure, l.log_tail, l.canary \
                         FROM server_launches l JOIN served_checkpoints s ON s.checkpoint_id = l.checkpoint_id \
                         JOIN checkpoints c ON c.id = l.checkpoint_id \
                         WHERE ($1 IS NULL OR l.checkpoint_id = $1) ORDER BY l.id DESC LIMIT $2",
                    )
                    .bind(checkpoint_id.map(|id| id.get()))
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    let mut launches = Vec::with_capacity(rows.len());
                    for row in rows {
                        let checkpoint: i64 = row.read("checkpoint_id")?;
                        launches.push(Launch {
                            id: row.read("id")?,
                            checkpoint_id: CheckpointId(checkpoint),
                            checkpoint_name: row.read("name")?,
                            launcher: row.read("launcher_id")?,
                            plan: plan_column(&row.read::<String>("plan")?)?,
                            urls: ports_of(&self.pool, checkpoint).await?.1,
                            state: state_column(&row.read::<String>("state")?)?,
                            requested_at: row.read("requested_at")?,
                            started_at: row.read("started_at")?,
                            healthy_at: row.read("healthy_at")?,
                            ended_at: row.read("ended_at")?,
                            restarts: row.read("restarts")?,
                            failure: row.read("failure")?,
                            log_tail: row.read("log_tail")?,
                            canary: canary_column(row.read("canary")?)?,
                        });
                    }
                    Ok(launches)
                }
                .await;
                result.map_err(|err| err.during("list_launches"))
            }
        }
    };
}
pub(crate) use serving_sql;
