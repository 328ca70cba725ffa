//! Runs: creating one from a frozen manifest (or finding the run of an identical manifest),
//! writing its result identities chunk by chunk, moving it through its statuses, and reading
//! its progress and results.

use arbiter_domain::ids::{CheckpointId, EvalId, RevisionId, RunId, UserId};
use arbiter_domain::run::{Priority, RunStatus};
use async_trait::async_trait;

/// The rows a manifest is frozen from.
#[derive(Clone, Debug)]
pub struct ManifestInputs {
    pub eval: EvalSummary,
    pub revision: DatasetRevision,
    pub checkpoint: Checkpoint,
    pub fallback: Option<Checkpoint>,
}

/// A run to create from a frozen manifest.
pub struct NewRun<'a> {
    pub manifest: &'a Manifest,
    pub priority: Priority,
    pub team: &'a str,
    pub created_by: Option<UserId>,
}

pub(crate) const IDENTITY_INSERT_BATCH: usize = 1000;

/// How long after its launch last wrote a chunk of identities a run still expanding is
/// worked. A chunk is planned in well under a second; a launch silent this long has died
/// (its run waits, unworked, for a relaunch to finish planning it).
pub const PLANNING_STALE_MS: i64 = 120_000;

/// The most identities SQLite copies from a finished run in one transaction: about four
/// seconds of its one writer (`bench overhead`'s re-run copies 100,000 in 1.8 s).
pub(crate) const SQLITE_REUSE_LIMIT: u64 = 200_000;

/// The `run_counts` counter of answers served from the generation cache.
pub(crate) const FROM_CACHE_COUNT: &str = "from_cache";
/// The prefix of `run_counts` counters of failed answers by error category.
pub(crate) const ERROR_COUNT_PREFIX: &str = "error_category:";

/// One run with its eval, checkpoint, endpoint and dataset revision (`$1`: the run id).
pub(crate) const RUN_HEADER_SELECT: &str = "SELECT r.id, r.eval_id, e.name AS eval_name, c.name AS checkpoint_name, en.base_url, r.manifest_hash, \
     dr.content_hash, r.status, r.priority, r.team, r.expected_count, r.done_count, r.created_at, r.finished_at, \
     c.created_at AS checkpoint_created_at, c.retracted_reason, c.retracted_at \
     FROM runs r JOIN evals e ON e.id = r.eval_id JOIN checkpoints c ON c.id = r.checkpoint_id \
     JOIN endpoints en ON en.id = c.endpoint_id JOIN dataset_revisions dr ON dr.id = r.revision_id \
     WHERE r.id = $1";

#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Everything needed to freeze a manifest for (eval, checkpoint), read in one snapshot.
    async fn manifest_inputs(
        &self,
        eval_id: EvalId,
        checkpoint_id: CheckpointId,
    ) -> StoreResult<ManifestInputs>;

    /// Inserts the run in status `expanding`, or finds the run of an identical manifest.
    async fn create_run(&self, new: &NewRun<'_>) -> StoreResult<LaunchedRun>;

    /// Adds a chunk of result identities; cache hits arrive finished (generation and grade).
    /// Identities that exist already are skipped, so a crashed expansion can simply be redone.
    async fn insert_identities(
        &self,
        run_id: RunId,
        manifest: &Manifest,
        identities: &[NewIdentity],
    ) -> StoreResult<()>;

    /// Fills a new, empty run with the answers and deterministic grades of the newest
    /// completed run under the same [`Manifest::reuse_key`], inside the database and in one
    /// transaction, when that run answered every identity and its deterministic grader decided
    /// each (nothing went to a judge or a person, nothing failed). Returns how many identities
    /// were copied, or `None` when no such run exists: the run is then expanded item by item.
    async fn reuse_finished_run(
        &self,
        run_id: RunId,
        manifest: &Manifest,
    ) -> StoreResult<Option<u64>>;

    /// The team a run is charged to (and owned by); `None` for an unknown run.
    async fn run_team(&self, run_id: RunId) -> StoreResult<Option<String>>;

    /// Records that every identity of the run is written (its expansion ran to the end).
    async fn mark_planned_in_full(&self, run_id: RunId) -> StoreResult<()>;

    /// Whether every identity of the run was written, by an expansion that ran to the end or
    /// a copy of a finished run; false for an unknown run.
    async fn planned_in_full(&self, run_id: RunId) -> StoreResult<bool>;

    /// Moves a run from one of `from` to `to`; false when it was in none of them.
    async fn set_run_status(
        &self,
        run_id: RunId,
        from: &[RunStatus],
        to: RunStatus,
    ) -> StoreResult<bool>;

    async fn run_manifest(&self, run_id: RunId) -> StoreResult<Option<Manifest>>;

    async fn list_runs(&self) -> StoreResult<Vec<RunSummary>>;

    async fn run_progress(&self, run_id: RunId) -> StoreResult<Option<RunProgress>>;

    /// The run's status and done counter alone (one row): what a follower checks between
    /// full readings.
    async fn run_state(&self, run_id: RunId) -> StoreResult<Option<(RunStatus, i64)>>;

    /// The run without counting its rows: verdict and outcome counts come from the tallies,
    /// `done` from the run's counter; no in-flight count, throughput, error mix or cache count.
    async fn run_header(&self, run_id: RunId) -> StoreResult<Option<RunProgress>>;

    async fn run_results(&self, run_id: RunId, limit: i64) -> StoreResult<Vec<IdentityResult>>;

    /// All final results of a run, for comparisons.
    async fn run_outcomes(&self, run_id: RunId) -> StoreResult<Vec<IdentityResult>>;

    /// Marks the run completed if no identity is left unfinished; true if it is completed now.
    /// Completing a run adds its answers' lengths to the observed lengths of its cases.
    async fn finish_run_if_done(&self, run_id: RunId) -> StoreResult<bool>;

    /// Mean completion tokens observed so far for these cases of a dataset revision (cases
    /// never answered are absent): later runs claim the longest first by them.
    async fn observed_completion_tokens(
        &self,
        revision_id: RevisionId,
        case_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, f64>>;
}

/// The SQL of [`RunStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! runs_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use sqlx::Row;
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::{CheckpointId, EvalId, IdentityId, RevisionId, RunId};
        use $crate::{CatalogStore, ReportStore, FinishedIdentity, ManifestInputs, NewIdentity, NewRun, StoreError, StoreResult, now_ms};
        use super::catalog_sql::{eval_from_row, revision_from_row, EVAL_SELECT, REVISION_COLUMNS};
        use super::work_queue_sql::{add_done, insert_results, set_commit_tallies};
        use arbiter_domain::run::{LaunchedRun, IdentityResult, RunProgress, RunStatus, RunSummary};
        use arbiter_domain::manifest::Manifest;

        // Final results of a run with the latest grade's reason. The grade subquery picks the
        // newest grade, so a human label supersedes the automatic one.
        const RESULT_SELECT: &str = "SELECT w.case_id, w.repetition, w.turn, w.category, i.input, i.target, \
            COALESCE(g.output, '') AS output, \
            CASE WHEN w.state = 'stopped' THEN 'stopped' ELSE COALESCE(g.outcome, 'pending') END AS outcome, \
            COALESCE(w.verdict, 'pending') AS verdict, w.decided_by, g.error, g.error_category, \
            COALESCE(g.attempts, 0) AS attempts, g.attempt_log, COALESCE(g.latency_ms, 0) AS latency_ms, \
            g.served_by, g.model_used, COALESCE(g.fallback_used, FALSE) AS fallback_used, \
            COALESCE(g.from_cache, FALSE) AS from_cache, \
            COALESCE((SELECT gr.reason FROM grades gr WHERE gr.work_item_id = w.id \
                      ORDER BY gr.id DESC LIMIT 1), '') AS grade_reason \
            FROM work_items w \
            JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
            LEFT JOIN generations g ON g.work_item_id = w.id \
            WHERE w.run_id = $1 ORDER BY i.position, w.repetition, w.turn";

        fn identity_result_from_row(row: &<$db as sqlx::Database>::Row) -> Result<IdentityResult, sqlx::Error> {
            Ok($crate::read_columns!(row, IdentityResult {
                case_id,
                repetition,
                turn,
                category,
                input,
                target,
                output,
                outcome,
                verdict,
                grade_reason,
                decided_by,
                error,
                error_category,
                attempts,
                attempt_log,
                latency_ms,
                served_by,
                model_used,
                fallback_used,
                from_cache,
            }))
        }

        /// The run status shown to people: a running run whose identities are all finished is
        /// complete even before a worker has recorded it.
        fn displayed_status(status: RunStatus, done: i64, expected: i64) -> RunStatus {
            if status == RunStatus::Running && done >= expected {
                RunStatus::Completed
            } else {
                status
            }
        }

        fn add_count(counts: &mut Vec<(String, i64)>, key: String, count: i64) {
            match counts.iter_mut().find(|(existing, _)| *existing == key) {
                Some((_, total)) => *total += count,
                None => counts.push((key, count)),
            }
        }

        #[async_trait::async_trait]
        impl $crate::runs::RunStore for $store {
            async fn manifest_inputs(&self, eval_id: EvalId, checkpoint_id: CheckpointId) -> StoreResult<ManifestInputs> {
                let result: StoreResult<ManifestInputs> = async move {
                    let mut tx = self.pool.begin().await?;
                    let eval = sqlx::query(&format!("{EVAL_SELECT} WHERE e.id = $1"))
                        .bind(eval_id.get())
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or_else(|| StoreError::NotFound(format!("no eval with id {eval_id}")))?;
                    let eval = eval_from_row(&eval)?;
                    let revision = sqlx::query(&format!(
                        "SELECT {REVISION_COLUMNS} FROM dataset_revisions WHERE dataset_id = $1 ORDER BY uploaded_at DESC, id DESC LIMIT 1"
                    ))
                    .bind(eval.dataset_id.get())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("dataset `{}` has no revision", eval.dataset_name)))?;
                    tx.commit().await?;
                    let checkpoints = self.list_checkpoints().await?;
                    let checkpoint = checkpoints
                        .iter()
                        .find(|checkpoint| checkpoint.id == checkpoint_id)
                        .cloned()
                        .ok_or_else(|| StoreError::NotFound(format!("no checkpoint with id {checkpoint_id}")))?;
                    let fallback = checkpoint
                        .fallback_checkpoint_id
                        .and_then(|fallback| checkpoints.iter().find(|c| c.id == fallback).cloned());
                    Ok(ManifestInputs {
                        eval,
                        revision: revision_from_row(&revision)?,
                        checkpoint,
                        fallback,
                    })
                }
                .await;
                result.map_err(|err| err.during("manifest_inputs"))
            }

            async fn create_run(&self, new: &NewRun<'_>) -> StoreResult<LaunchedRun> {
                let result: StoreResult<LaunchedRun> = async move {
                    let manifest = new.manifest;
                    let manifest_hash = manifest.content_hash();
                    let manifest_json = serde_json::to_string(manifest).expect("manifests always serialize");
                    let mut tx = self.writer.begin_with($begin).await?;
                    // Holds the checkpoint's row until the run is committed, so a retraction
                    // either comes first (and the launch is refused) or after (and cancels it).
                    let live = sqlx::query("UPDATE checkpoints SET retracted_at = retracted_at WHERE id = $1 AND retracted_at IS NULL")
                        .bind(manifest.checkpoint_id.get())
                        .execute(&mut *tx)
                        .await?;
                    if live.rows_affected() == 0 {
                        return Err(StoreError::Conflict(format!(
                            "checkpoint {} was retracted; no run is launched against it",
                            manifest.checkpoint_id
                        )));
                    }
                    let inserted: Option<i64> = sqlx::query_scalar(
                        "INSERT INTO runs (manifest_hash, manifest_json, eval_id, revision_id, checkpoint_id, expected_count, status, priority, team, created_by, created_at, reuse_key) \
                         VALUES ($1, $2, $3, $4, $5, $6, 'expanding', $7, $8, $9, $10, $11) ON CONFLICT (manifest_hash) DO NOTHING RETURNING id",
                    )
                    .bind(&manifest_hash)
                    .bind(&manifest_json)
                    .bind(manifest.eval_id.get())
                    .bind(manifest.dataset_revision_id.get())
                    .bind(manifest.checkpoint_id.get())
                    .bind(manifest.expected_results() as i64)
                    .bind(new.priority.rank())
                    .bind(new.team)
                    .bind(new.created_by.map(i64::from))
                    .bind(now_ms())
                    .bind(manifest.reuse_key())
                    .fetch_optional(&mut *tx)
                    .await?;
                    let launched = match inserted {
                        Some(run_id) => LaunchedRun { run_id: RunId(run_id), created: true, status: RunStatus::Expanding },
                        None => {
                            let (run_id, status): (i64, String) =
                                sqlx::query_as("SELECT id, status FROM runs WHERE manifest_hash = $1")
                                    .bind(&manifest_hash)
                                    .fetch_one(&mut *tx)
                                    .await?;
                            LaunchedRun { run_id: RunId(run_id), created: false, status: $crate::status_of(&status)? }
                        }
                    };
                    tx.commit().await?;
                    Ok(launched)
                }
                .await;
                result.map_err(|err| err.during("create_run"))
            }

            async fn insert_identities(&self, run_id: RunId, manifest: &Manifest, identities: &[NewIdentity]) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let now = now_ms();
                    let started = std::time::Instant::now();
                    let mut tx = self.writer.begin_with($begin).await?;
                    let mut created_ids: std::collections::HashMap<(String, i64, i64), i64> = std::collections::HashMap::new();
                    for chunk in identities.chunks($crate::runs::IDENTITY_INSERT_BATCH) {
                        let mut insert = sqlx::QueryBuilder::<$db>::new(
                            "INSERT INTO work_items (run_id, revision_id, case_id, checkpoint_id, repetition, turn, state, verdict, decided_by, cost, shard, generation_key, category) ",
                        );
                        insert.push_values(chunk, |mut row, identity| {
                            let (state, verdict, decided_by) = match &identity.cached {
                                Some(hit) => (
                                    "done",
                                    Some(hit.grading.verdict_label()),
                                    Some(hit.grading.decided_by_label()),
                                ),
                                // A later turn waits for the answer to the turn before it.
                                None if identity.planned.turn > 1 => ("waiting", None, None),
                                None => ("queued", None, None),
                            };
                            row.push_bind(run_id.get())
                                .push_bind(manifest.dataset_revision_id.get())
                                .push_bind(identity.planned.case_id.clone())
                                .push_bind(manifest.checkpoint_id.get())
                                .push_bind(identity.planned.repetition)
                                .push_bind(identity.planned.turn)
                                .push_bind(state)
                                .push_bind(verdict)
                                .push_bind(decided_by)
                                .push_bind(identity.planned.cost)
                                .push_bind(identity.planned.shard)
                                .push_bind(identity.planned.generation_key.clone())
                                .push_bind(identity.planned.category.clone());
                        });
                        insert.push(" ON CONFLICT (run_id, revision_id, case_id, checkpoint_id, repetition, turn) DO NOTHING RETURNING id, case_id, repetition, turn");
                        let created: Vec<(i64, String, i64, i64)> = insert.build_query_as().fetch_all(&mut *tx).await?;
                        created_ids.extend(created.into_iter().map(|(id, case_id, repetition, turn)| ((case_id, repetition, turn), id)));
                    }
                    // Identities answered from the cache get their generation and grade now, once
                    // every turn of their conversations exists (a cached first turn lets its next
                    // turn be claimed).
                    let finished: Vec<FinishedIdentity> = identities
                        .iter()
                        .filter_map(|identity| {
                            let hit = identity.cached.as_ref()?;
                            let planned = &identity.planned;
                            let id = created_ids.get(&(planned.case_id.clone(), planned.repetition, planned.turn))?;
                            Some(FinishedIdentity {
                                identity_id: IdentityId(*id),
                                generation: hit.generation.clone(),
                                grading: hit.grading.clone(),
                                generation_key: None,
                                cached_from: Some(hit.source_identity_id),
                                next_turn_waits: planned.turn < planned.turns,
                            })
                        })
                        .collect();
                    // These identities were inserted finished; only their answers are missing.
                    let recorded = insert_results(&mut tx, &finished, now, Some(run_id)).await?;
                    add_done(&mut tx, run_id, recorded.inserted as i64).await?;
                    // Workers take this run's identities while it expands only while its launch
                    // keeps writing them.
                    sqlx::query("UPDATE runs SET planned_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(run_id.get())
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    $crate::log_operation("insert_identities", identities.len(), started);
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("insert_identities"))
            }

            async fn reuse_finished_run(&self, run_id: RunId, manifest: &Manifest) -> StoreResult<Option<u64>> {
                let Some(reuse_key) = manifest.reuse_key() else { return Ok(None) };
                // The copy is one transaction. SQLite has one writer, whom a larger copy would
                // keep from workers' commits and heartbeats for longer than their busy timeout;
                // such runs are expanded in chunks instead. PostgreSQL's writers do not wait.
                if $backend == "sqlite" && manifest.expected_results() > $crate::runs::SQLITE_REUSE_LIMIT {
                    return Ok(None);
                }
                let result: StoreResult<Option<u64>> = async move {
                    let started = std::time::Instant::now();
                    let mut tx = self.writer.begin_with($begin).await?;
                    // The new run's row is held until the copy commits: a second launch of the
                    // same manifest waits here, then finds the copy made. (SQLite's writer
                    // transaction holds everything already.) A second launch already expanding
                    // the run item by item can meet this copy in a deadlock; PostgreSQL then
                    // fails one of the two launches, and launching again finds the run.
                    let (lock, share) = if $backend == "postgres" { (" FOR UPDATE", " FOR SHARE OF r") } else { ("", "") };
                    let expanding: Option<i64> = sqlx::query_scalar(&format!(
                        "SELECT id FROM runs WHERE id = $1 AND status = 'expanding'{lock}"
                    ))
                    .bind(run_id.get())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if expanding.is_none() {
                        return Ok(None);
                    }
                    // The newest completed run with the same key, on a checkpoint still standing,
                    // its outputs kept. Its row is shared-locked: its verdicts cannot change
                    // (every writer of a run's tallies locks its row first) while it is copied.
                    let source: Option<(i64, i64)> = sqlx::query_as(&format!(
                        "SELECT r.id, r.checkpoint_id FROM runs r JOIN checkpoints c ON c.id = r.checkpoint_id \
                         WHERE r.reuse_key = $1 AND r.id <> $2 AND r.status = 'completed' AND r.expected_count = $3 \
                         AND r.raw_purged_at IS NULL AND c.retracted_at IS NULL ORDER BY r.id DESC LIMIT 1{share}"
                    ))
                    .bind(&reuse_key)
                    .bind(run_id.get())
                    .bind(manifest.expected_results() as i64)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((source, source_checkpoint)) = source else { return Ok(None) };
                    let started_already: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM work_items WHERE run_id = $1)")
                        .bind(run_id.get())
                        .fetch_one(&mut *tx)
                        .await?;
                    if started_already {
                        return Ok(None);
                    }
                    // What expanding from the cache would store again: every identity answered
                    // by the generation its key holds in the cache now, decided by the
                    // deterministic grader (or scored), none sent to people.
                    let decided: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM work_items w JOIN generations g ON g.work_item_id = w.id \
                         JOIN generation_cache c ON c.generation_key = w.generation_key \
                         WHERE w.run_id = $1 AND w.state = 'done' AND w.decided_by IN ('deterministic', 'scored') \
                         AND c.work_item_id = COALESCE(g.source_work_item_id, g.work_item_id) \
                         AND NOT EXISTS (SELECT 1 FROM annotation_tasks t WHERE t.work_item_id = w.id)",
                    )
                    .bind(source)
                    .fetch_one(&mut *tx)
                    .await?;
                    if decided != manifest.expected_results() as i64 {
                        return Ok(None);
                    }
                    let now = now_ms();
                    // The tally triggers would count the copy row by row; its twin's tallies are
                    // copied instead, below.
                    set_commit_tallies(&mut tx, true).await?;
                    let copied = sqlx::query(
                        "INSERT INTO work_items (run_id, revision_id, case_id, checkpoint_id, repetition, turn, state, verdict, \
                         decided_by, cost, shard, generation_key, category) \
                         SELECT $1, revision_id, case_id, $2, repetition, turn, 'done', verdict, decided_by, cost, shard, \
                         generation_key, category FROM work_items WHERE run_id = $3 ORDER BY id",
                    )
                    .bind(run_id.get())
                    .bind(manifest.checkpoint_id.get())
                    .bind(source)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    // Each new identity's twin in the source run, by the identity key's index.
                    const TWINS: &str = "FROM work_items n JOIN work_items s ON s.run_id = $1 AND s.revision_id = n.revision_id \
                         AND s.case_id = n.case_id AND s.checkpoint_id = $2 AND s.repetition = n.repetition AND s.turn = n.turn";
                    // As a cache hit is stored: the answer by reference to the generation that
                    // was paid for (its logprobs stay there), nothing spent now.
                    sqlx::query(&format!(
                        "INSERT INTO generations (work_item_id, outcome, output, finish_reason, error, error_category, attempt_log, \
                         served_by, model_used, fallback_used, from_cache, source_work_item_id, latency_ms, waited_ms, attempts, \
                         prompt_tokens, completion_tokens, cost_usd, created_at, scores) \
                         SELECT n.id, g.outcome, g.output, g.finish_reason, NULL, NULL, NULL, NULL, g.model_used, $4, $5, \
                         COALESCE(g.source_work_item_id, g.work_item_id), 0, 0, 0, g.prompt_tokens, g.completion_tokens, NULL, $6, g.scores \
                         {TWINS} JOIN generations g ON g.work_item_id = s.id WHERE n.run_id = $3 ORDER BY n.id"
                    ))
                    .bind(source)
                    .bind(source_checkpoint)
                    .bind(run_id.get())
                    .bind(false)
                    .bind(true)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(&format!(
                        "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, stage, confidence, \
                         agreement, cost_usd, prompt_tokens, completion_tokens, latency_ms, model_used, fallback_used, \
                         from_cache, instructions, score, created_at) \
                         SELECT n.id, d.grader, d.verdict, d.extracted_answer, d.reason, d.stage, d.confidence, d.agreement, \
                         d.cost_usd, d.prompt_tokens, d.completion_tokens, d.latency_ms, d.model_used, d.fallback_used, \
                         d.from_cache, d.instructions, d.score, $4 \
                         {TWINS} JOIN grades d ON d.work_item_id = s.id AND d.stage = 'deterministic' WHERE n.run_id = $3 ORDER BY n.id, d.id"
                    ))
                    .bind(source)
                    .bind(source_checkpoint)
                    .bind(run_id.get())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    // The twin's tallies are the copy's: the same verdicts and outcomes by
                    // category, the same graders (no person changed a verdict of it).
                    sqlx::query(
                        "INSERT INTO run_tallies (run_id, category, field, value, count) \
                         SELECT $1, category, field, value, count FROM run_tallies \
                         WHERE run_id = $2 AND field IN ('verdict', 'outcome') AND count <> 0",
                    )
                    .bind(run_id.get())
                    .bind(source)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query("INSERT INTO run_graders (run_id, grader, count) SELECT $1, grader, count FROM run_graders WHERE run_id = $2")
                        .bind(run_id.get())
                        .bind(source)
                        .execute(&mut *tx)
                        .await?;
                    set_commit_tallies(&mut tx, false).await?;
                    add_done(&mut tx, run_id, copied as i64).await?;
                    sqlx::query(
                        "INSERT INTO run_counts (run_id, name, count) VALUES ($1, $2, $3) \
                         ON CONFLICT (run_id, name) DO UPDATE SET count = run_counts.count + excluded.count",
                    )
                    .bind(run_id.get())
                    .bind($crate::runs::FROM_CACHE_COUNT)
                    .bind(copied as i64)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query("UPDATE runs SET planned_in_full_at = $1 WHERE id = $2")
                        .bind(now_ms())
                        .bind(run_id.get())
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    $crate::log_operation("reuse_finished_run", copied as usize, started);
                    Ok(Some(copied))
                }
                .await;
                result.map_err(|err| err.during("reuse_finished_run"))
            }

            async fn run_team(&self, run_id: RunId) -> StoreResult<Option<String>> {
                sqlx::query_scalar("SELECT team FROM runs WHERE id = $1")
                    .bind(run_id.get())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|err| StoreError::from(err).during("run_team"))
            }

            async fn mark_planned_in_full(&self, run_id: RunId) -> StoreResult<()> {
                sqlx::query("UPDATE runs SET planned_in_full_at = $1 WHERE id = $2 AND planned_in_full_at IS NULL")
                    .bind(now_ms())
                    .bind(run_id.get())
                    .execute(&self.writer)
                    .await
                    .map_err(|err| StoreError::from(err).during("mark_planned_in_full"))?;
                Ok(())
            }

            async fn planned_in_full(&self, run_id: RunId) -> StoreResult<bool> {
                let planned: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE id = $1 AND planned_in_full_at IS NOT NULL")
                    .bind(run_id.get())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|err| StoreError::from(err).during("planned_in_full"))?;
                Ok(planned > 0)
            }

            async fn set_run_status(&self, run_id: RunId, from: &[RunStatus], to: RunStatus) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let mut update = sqlx::QueryBuilder::<$db>::new("UPDATE runs SET status = ");
                    update.push_bind(to.as_str());
                    if to == RunStatus::Completed {
                        update.push(", finished_at = ").push_bind(now_ms());
                    }
                    update.push(" WHERE id = ").push_bind(run_id.get()).push(" AND status IN (");
                    let mut statuses = update.separated(", ");
                    for status in from {
                        statuses.push_bind(status.as_str());
                    }
                    statuses.push_unseparated(")");
                    if to == RunStatus::Running {
                        // A retracted checkpoint's runs never run again, whatever raced.
                        update.push(
                            " AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.id = runs.checkpoint_id AND c.retracted_at IS NOT NULL)",
                        );
                    }
                    let result = update.build().execute(&self.writer).await?;
                    Ok(result.rows_affected() == 1)
                }
                .await;
                result.map_err(|err| err.during("set_run_status"))
            }

            async fn run_manifest(&self, run_id: RunId) -> StoreResult<Option<Manifest>> {
                let result: StoreResult<Option<Manifest>> = async move {
                    let json: Option<String> = sqlx::query_scalar("SELECT manifest_json FROM runs WHERE id = $1")
                        .bind(run_id.get())
                        .fetch_optional(&self.pool)
                        .await?;
                    json.map(|json| serde_json::from_str(&json).map_err(|err| StoreError::from(sqlx::Error::Decode(err.into()))))
                        .transpose()
                }
                .await;
                result.map_err(|err| err.during("run_manifest"))
            }

            async fn list_runs(&self) -> StoreResult<Vec<RunSummary>> {
                let result: StoreResult<Vec<RunSummary>> = async move {
                    let rows = sqlx::query(
                        "SELECT r.id, r.eval_id, e.name AS eval_name, c.name AS checkpoint_name, r.expected_count, r.created_at, \
                         r.status, r.priority, \
                         r.done_count, c.retracted_at \
                         FROM runs r JOIN evals e ON e.id = r.eval_id JOIN checkpoints c ON c.id = r.checkpoint_id \
                         ORDER BY r.id DESC",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            let expected_count: i64 = row.read("expected_count")?;
                            let done_count: i64 = row.read("done_count")?;
                            let status: String = row.read("status")?;
                            Ok(RunSummary {
                                id: row.read("id")?,
                                priority: $crate::priority_of(row.read("priority")?)?,
                                eval_id: row.read("eval_id")?,
                                eval_name: row.read("eval_name")?,
                                checkpoint_name: row.read("checkpoint_name")?,
                                status: displayed_status($crate::status_of(&status)?, done_count, expected_count),
                                expected_count,
                                done_count,
                                created_at: row.read("created_at")?,
                                checkpoint_retracted: row.read::<Option<i64>>("retracted_at")?.is_some(),
                            })
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("list_runs"))
            }

            async fn run_state(&self, run_id: RunId) -> StoreResult<Option<(RunStatus, i64)>> {
                let result: StoreResult<Option<(RunStatus, i64)>> = async move {
                    let row: Option<(String, i64)> = sqlx::query_as("SELECT status, done_count FROM runs WHERE id = $1")
                        .bind(run_id.get())
                        .fetch_optional(&self.pool)
                        .await?;
                    row.map(|(status, done)| Ok(($crate::status_of(&status)?, done))).transpose()
                }
                .await;
                result.map_err(|err| err.during("run_state"))
            }

            async fn run_header(&self, run_id: RunId) -> StoreResult<Option<RunProgress>> {
                let result: StoreResult<Option<RunProgress>> = async move {
                    let Some(run) = sqlx::query($crate::runs::RUN_HEADER_SELECT)
                        .bind(run_id.get())
                        .fetch_optional(&self.pool)
                        .await?
                    else {
                        return Ok(None);
                    };
                    let mut counts = std::collections::HashMap::<(String, String), i64>::new();
                    for row in self.run_tallies(run_id).await? {
                        *counts.entry((row.field, row.value)).or_default() += row.count;
                    }
                    let count = |field: &str, value: &str| counts.get(&(field.to_string(), value.to_string())).copied().unwrap_or(0);
                    let finished_at: Option<i64> = run.read("finished_at")?;
                    Ok(Some(RunProgress {
                        id: run.read("id")?,
                        eval_id: run.read("eval_id")?,
                        eval_name: run.read("eval_name")?,
                        checkpoint_name: run.read("checkpoint_name")?,
                        endpoint_url: run.read("base_url")?,
                        manifest_hash: run.read("manifest_hash")?,
                        dataset_revision: run.read("content_hash")?,
                        status: $crate::status_of(run.read::<String>("status")?.as_str())?,
                        expected: run.read("expected_count")?,
                        done: run.read("done_count")?,
                        in_flight: 0,
                        passed: count("verdict", "pass"),
                        failed: count("verdict", "fail"),
                        uncertain: count("verdict", "uncertain"),
                        errors: count("verdict", "error"),
                        scored: count("verdict", "scored"),
                        last_error: None,
                        checkpoint_retracted: match run.read::<Option<i64>>("retracted_at")? {
                            Some(_) => Some(run.read::<Option<String>>("retracted_reason")?.unwrap_or_default()),
                            None => None,
                        },
                        priority: $crate::priority_of(run.read("priority")?)?,
                        team: run.read("team")?,
                        throughput_per_s: 0.0,
                        from_cache: 0,
                        outcome_mix: arbiter_domain::answer::Outcome::ALL
                            .iter()
                            .map(|o| (o.as_str().to_string(), count("outcome", o.as_str())))
                            .filter(|(_, n)| *n > 0)
                            .collect(),
                        error_mix: Vec::new(),
                        created_at: run.read("created_at")?,
                        time_to_results_ms: finished_at
                            .map(|at| at - run.try_get::<i64, _>("checkpoint_created_at").unwrap_or(at)),
                        finished_at,
                    }))
                }
                .await;
                result.map_err(|err| err.during("run_header"))
            }

            async fn run_progress(&self, run_id: RunId) -> StoreResult<Option<RunProgress>> {
                let result: StoreResult<Option<RunProgress>> = async move {
                    // The heading (counters and tallies kept as results arrive), then the
                    // identities claimed now and the last minute's pace: nothing here counts the
                    // run's rows, so a page polling a million-item run costs a few index reads.
                    let Some(header) = self.run_header(run_id).await? else { return Ok(None) };
                    let in_flight: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM work_items WHERE state = 'leased' AND run_id = $1",
                    )
                    .bind(run_id.get())
                    .fetch_one(&self.pool)
                    .await?;
                    let counters: Vec<(String, i64)> = sqlx::query_as("SELECT name, count FROM run_counts WHERE run_id = $1 ORDER BY name")
                        .bind(run_id.get())
                        .fetch_all(&self.pool)
                        .await?;
                    let last_error: Option<String> = sqlx::query_scalar("SELECT last_error FROM runs WHERE id = $1")
                        .bind(run_id.get())
                        .fetch_one(&self.pool)
                        .await?;
                    let window_ms = 60_000;
                    let recent: i64 = sqlx::query_scalar(
                        "SELECT CAST(COALESCE(SUM(finished), 0) AS BIGINT) FROM run_load_samples WHERE run_id = $1 AND taken_at > $2",
                    )
                    .bind(run_id.get())
                    .bind(now_ms() - window_ms)
                    .fetch_one(&self.pool)
                    .await?;
                    let expected = header.expected;
                    let done = header.done;
                    let mut status = header.status;
                    let mut finished_at = header.finished_at;
                    // Completion is also derived here, so a run whose last worker died between its
                    // commit and its completion check is still reported (and recorded) complete.
                    if status == RunStatus::Running && done == expected && self.finish_run_if_done(run_id).await? {
                        status = RunStatus::Completed;
                        finished_at = sqlx::query_scalar("SELECT finished_at FROM runs WHERE id = $1")
                            .bind(run_id.get())
                            .fetch_one(&self.pool)
                            .await?;
                    }
                    let mut error_mix: Vec<(String, i64)> = Vec::new();
                    let mut from_cache = 0;
                    for (name, count) in counters {
                        if name == $crate::runs::FROM_CACHE_COUNT {
                            from_cache = count;
                        } else if let Some(category) = name.strip_prefix($crate::runs::ERROR_COUNT_PREFIX) {
                            add_count(&mut error_mix, category.to_string(), count);
                        }
                    }
                    // Completed just now (above): registration to completion, read afresh.
                    let time_to_results_ms = match finished_at {
                        Some(now) if header.finished_at.is_none() => sqlx::query_scalar::<_, i64>(
                            "SELECT c.created_at FROM runs r JOIN checkpoints c ON c.id = r.checkpoint_id WHERE r.id = $1",
                        )
                        .bind(run_id.get())
                        .fetch_one(&self.pool)
                        .await
                        .ok()
                        .map(|registered| now - registered),
                        _ => header.time_to_results_ms,
                    };
                    Ok(Some(RunProgress {
                        status,
                        done,
                        in_flight,
                        last_error,
                        throughput_per_s: recent as f64 / (window_ms as f64 / 1000.0),
                        from_cache,
                        error_mix,
                        time_to_results_ms,
                        finished_at,
                        ..header
                    }))
                }
                .await;
                result.map_err(|err| err.during("run_progress"))
            }

            async fn finish_run_if_done(&self, run_id: RunId) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    // The counter moves in the same transactions as the identities' states, so this
                    // check costs the same on a million-item run as on a ten-item one.
                    let mut tx = self.writer.begin_with($begin).await?;
                    let result = sqlx::query(
                        "UPDATE runs SET status = 'completed', finished_at = $1 WHERE id = $2 AND status = 'running' \
                         AND done_count >= expected_count",
                    )
                    .bind(now_ms())
                    .bind(run_id.get())
                    .execute(&mut *tx)
                    .await?;
                    if result.rows_affected() == 1 {
                        // Fresh answers only (a cache hit would count its source twice), merged
                        // into the running means as weighted averages.
                        sqlx::query(
                            "INSERT INTO case_lengths (revision_id, case_id, completion_tokens, samples) \
                             SELECT w.revision_id, w.case_id, CAST(AVG(g.completion_tokens) AS DOUBLE PRECISION), COUNT(*) \
                             FROM work_items w JOIN generations g ON g.work_item_id = w.id \
                             WHERE w.run_id = $1 AND w.turn = 1 AND g.completion_tokens IS NOT NULL AND g.from_cache = FALSE \
                             GROUP BY w.revision_id, w.case_id \
                             ON CONFLICT (revision_id, case_id) DO UPDATE SET \
                             completion_tokens = (case_lengths.completion_tokens * case_lengths.samples \
                                                  + excluded.completion_tokens * excluded.samples) \
                                                 / (case_lengths.samples + excluded.samples), \
                             samples = case_lengths.samples + excluded.samples",
                        )
                        .bind(run_id.get())
                        .execute(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        return Ok(true);
                    }
                    tx.commit().await?;
                    let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
                        .bind(run_id.get())
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(status.as_deref() == Some(RunStatus::Completed.as_str()))
                }
                .await;
                result.map_err(|err| err.during("finish_run_if_done"))
            }

            async fn observed_completion_tokens(
                &self,
                revision_id: RevisionId,
                case_ids: &[String],
            ) -> StoreResult<std::collections::HashMap<String, f64>> {
                let result: StoreResult<std::collections::HashMap<String, f64>> = async move {
                    let mut found = std::collections::HashMap::new();
                    for chunk in case_ids.chunks($crate::KEY_LOOKUP_BATCH) {
                        let mut select = sqlx::QueryBuilder::<$db>::new(
                            "SELECT case_id, completion_tokens FROM case_lengths WHERE revision_id = ",
                        );
                        select.push_bind(revision_id.get()).push(" AND case_id IN (");
                        let mut list = select.separated(", ");
                        for case_id in chunk {
                            list.push_bind(case_id.as_str());
                        }
                        list.push_unseparated(")");
                        let rows: Vec<(String, f64)> = select.build_query_as().fetch_all(&self.pool).await?;
                        found.extend(rows);
                    }
                    Ok(found)
                }
                .await;
                result.map_err(|err| err.during("observed_completion_tokens"))
            }

            async fn run_results(&self, run_id: RunId, limit: i64) -> StoreResult<Vec<IdentityResult>> {
                let result: StoreResult<Vec<IdentityResult>> = async move {
                    let rows = sqlx::query(&format!("{RESULT_SELECT} LIMIT $2"))
                        .bind(run_id.get())
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(identity_result_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("run_results"))
            }

            async fn run_outcomes(&self, run_id: RunId) -> StoreResult<Vec<IdentityResult>> {
                let result: StoreResult<Vec<IdentityResult>> = async move {
                    let rows = sqlx::query(RESULT_SELECT)
                        .bind(run_id.get())
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(identity_result_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("run_outcomes"))
            }
        }
    };
}

use crate::{NewIdentity, StoreResult};
use arbiter_domain::checkpoint::Checkpoint;
use arbiter_domain::dataset::DatasetRevision;
use arbiter_domain::manifest::{EvalSummary, Manifest};
use arbiter_domain::run::{IdentityResult, LaunchedRun, RunProgress, RunSummary};
pub(crate) use runs_sql;
