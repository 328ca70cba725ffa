//! The work queue workers share: runs open for claims, leased batches of result identities
//! with everything needed to answer them, heartbeats and expired leases, the generation cache,
//! and recording finished identities — generation, grades, verdict, human task and cache entry
//! in one transaction, where a second commit of the same identity is a no-op.

use arbiter_domain::ids::{IdentityId, RunId};
use arbiter_domain::run::Priority;
use async_trait::async_trait;

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
    pub source_identity_id: IdentityId,
    pub generation: Generation,
    pub grading: Grading,
}

/// A generation found under its content hash. Its logprobs stay with the source generation
/// (`source_identity_id`) rather than being copied into every run that reuses it.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedGeneration {
    pub source_identity_id: IdentityId,
    pub outcome: Outcome,
    pub output: String,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub model_used: Option<String>,
    /// A likelihood eval's choice scores.
    pub choice_scores: Option<arbiter_domain::likelihood::ChoiceScores>,
    /// A rolling-likelihood eval's document score.
    pub rolling: Option<arbiter_domain::rolling::RollingScore>,
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
            choice_scores: self.choice_scores.clone(),
            rolling: self.rolling.clone(),
            ..Generation::default()
        }
    }
}

/// A run the scheduler may take work from.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveRun {
    pub id: RunId,
    pub priority: Priority,
    pub team: String,
    /// The team's fair-share weight (1 unless a lead set another).
    pub team_weight: f64,
}

/// A leased identity with what a worker needs to answer it.
#[derive(Clone, Debug)]
pub struct ClaimedIdentity {
    pub identity_id: IdentityId,
    pub run_id: RunId,
    pub case_id: String,
    pub repetition: i64,
    /// The turn of a conversation (from 1; 1 for an item that is not a conversation).
    pub turn: i64,
    /// The model's answers to the conversation's earlier turns, in order (empty for turn 1).
    pub earlier_answers: Vec<String>,
    /// The dataset item, which the manifest's prompt renders.
    pub item: arbiter_domain::dataset::DatasetItem,
    pub cost: i64,
    /// Times the identity has been claimed, this claim included.
    pub claims: i64,
    pub generation_key: Option<String>,
    pub cached: Option<CachedGeneration>,
}

/// A finished identity on its way to the store.
#[derive(Clone, Debug)]
pub struct FinishedIdentity {
    pub identity_id: IdentityId,
    pub generation: Generation,
    pub grading: Grading,
    /// Where to cache the generation (answers only; errors are never cached).
    pub generation_key: Option<String>,
    /// The generation this answer was copied from, when it came from the cache.
    pub cached_from: Option<IdentityId>,
    /// A later turn of the same conversation waits for this one: recording it lets that turn
    /// be claimed, or stops the rest of the conversation when this turn got no answer.
    pub next_turn_waits: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordOutcome {
    /// Identities recorded now (the rest already had a result).
    pub inserted: usize,
    /// Runs the recorded identities belong to.
    pub runs: Vec<RunId>,
}

/// One result identity's item and place in its conversation, to show it as its eval sent it.
#[derive(Clone, Debug)]
pub struct IdentityContext {
    pub run_id: RunId,
    pub item: arbiter_domain::dataset::DatasetItem,
    pub turn: i64,
    /// The model's answers to the conversation's earlier turns, in order.
    pub earlier_answers: Vec<String>,
}

/// What a worker needs to run one result identity.
#[derive(Clone, Debug)]
pub struct IdentityInputs {
    pub identity_id: IdentityId,
    pub run_id: RunId,
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

pub(crate) const RESULT_INSERT_BATCH: usize = 500;

/// Grades (18 columns) and grade cache entries (9) per statement.
pub(crate) const GRADE_INSERT_BATCH: usize = 1000;

#[async_trait]
pub trait WorkQueueStore: Send + Sync + 'static {
    // The generation cache.
    async fn cached_generations(
        &self,
        keys: &[String],
    ) -> StoreResult<Vec<(String, CachedGeneration)>>;

    // The work queue.
    /// Runs whose identities may be claimed now: `running`, or `expanding` with a chunk of
    /// identities written within [`PLANNING_STALE_MS`] (a large run's first identities are
    /// answered while its later ones are still being planned; a launch that died part-way
    /// leaves its run to a relaunch), and (on a checkpoint Arbiter serves) its servers
    /// healthy. Only a `running` run completes, so one still expanding never finishes early.
    ///
    /// [`PLANNING_STALE_MS`]: crate::runs::PLANNING_STALE_MS
    async fn active_runs(&self) -> StoreResult<Vec<ActiveRun>>;

    /// Leases up to `limit` queued identities of one run to `worker` (longest expected first,
    /// or in creation order when `longest_first` is false), with everything needed to answer
    /// them (and their cached generation, if any).
    async fn claim_identities(
        &self,
        worker: &str,
        run_id: RunId,
        limit: i64,
        lease_ms: i64,
        longest_first: bool,
    ) -> StoreResult<Vec<ClaimedIdentity>>;

    /// Leases up to `limit` queued identities of any run [`active_runs`] lists, whatever its
    /// servers (tests and tools).
    ///
    /// [`active_runs`]: WorkQueueStore::active_runs
    async fn claim_work(
        &self,
        worker: &str,
        limit: i64,
        lease_ms: i64,
    ) -> StoreResult<Vec<IdentityId>>;

    async fn load_identity(&self, identity_id: IdentityId) -> StoreResult<IdentityInputs>;

    /// A result identity's item, turn and earlier answers; `None` for an unknown identity.
    async fn identity_context(
        &self,
        identity_id: IdentityId,
    ) -> StoreResult<Option<IdentityContext>>;

    /// Records finished identities in one transaction: generation, grade, work item, annotation
    /// task and cache entry each. An identity that already has a result is skipped (a duplicate
    /// commit is a no-op).
    async fn record_results(&self, finished: &[FinishedIdentity]) -> StoreResult<RecordOutcome>;

    /// One finished identity; false when it already had a result.
    async fn record_result(
        &self,
        identity_id: IdentityId,
        generation: &Generation,
        grade: Option<&Grade>,
    ) -> StoreResult<bool> {
        let outcome = self
            .record_results(&[FinishedIdentity {
                identity_id,
                generation: generation.clone(),
                grading: Grading::deterministic_only(grade.cloned()),
                generation_key: None,
                cached_from: None,
                next_turn_waits: false,
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
    async fn release_lease(&self, worker: &str, identity_id: IdentityId) -> StoreResult<bool>;
}

/// The SQL of [`WorkQueueStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! work_queue_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::{IdentityId, RunId};
        use $crate::{ActiveRun, CachedGeneration, ClaimedIdentity, FinishedIdentity, IdentityInputs, RecordOutcome, StoreError, StoreResult, now_ms};
        use arbiter_domain::manifest::Manifest;
        use arbiter_domain::answer::Outcome;

        fn cached_from_row(row: &<$db as sqlx::Database>::Row) -> Result<CachedGeneration, sqlx::Error> {
            use arbiter_domain::rolling::StoredScores;
            let outcome: String = row.read("outcome")?;
            let scores: Option<String> = row.read("scores")?;
            let scores: Option<StoredScores> = scores
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(|err| sqlx::Error::Decode(err.into()))?;
            let (choice_scores, rolling) = match scores {
                Some(StoredScores::Choices(choices)) => (Some(choices), None),
                Some(StoredScores::Rolling(rolling)) => (None, Some(rolling)),
                None => (None, None),
            };
            Ok(CachedGeneration {
                source_identity_id: row.read("source_work_item_id")?,
                outcome: Outcome::parse(&outcome)
                    .ok_or_else(|| sqlx::Error::Decode(format!("unknown outcome `{outcome}`").into()))?,
                output: row.read("output")?,
                finish_reason: row.read("finish_reason")?,
                prompt_tokens: row.read("prompt_tokens")?,
                completion_tokens: row.read("completion_tokens")?,
                model_used: row.read("model_used")?,
                choice_scores,
                rolling,
            })
        }

        /// Counts `count` more identities of `run_id` as done, in the transaction that finished
        /// them (`runs.done_count` must never drift from the identities' states).
        pub(super) async fn add_done(
            tx: &mut sqlx::Transaction<'_, $db>,
            run_id: RunId,
            count: i64,
        ) -> Result<(), sqlx::Error> {
            if count > 0 {
                sqlx::query("UPDATE runs SET done_count = done_count + $1 WHERE id = $2")
                    .bind(count)
                    .bind(run_id.get())
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(())
        }

        /// Moves the conversations of just-recorded turns on: the next turn after an answered
        /// one becomes claimable; every later turn after one that got no answer stops (counted
        /// done, verdict `error`, outcome `stopped`), never to be sent with a missing answer.
        /// Returns the runs whose stopped turns count as done now.
        async fn advance_conversations(
            tx: &mut sqlx::Transaction<'_, $db>,
            answered: &[&FinishedIdentity],
            unanswered: &[&FinishedIdentity],
        ) -> Result<Vec<RunId>, sqlx::Error> {
            if !answered.is_empty() {
                let mut unlock = sqlx::QueryBuilder::<$db>::new(
                    "UPDATE work_items SET state = 'queued' WHERE state = 'waiting' AND \
                     (run_id, revision_id, case_id, checkpoint_id, repetition, turn) IN \
                     (SELECT run_id, revision_id, case_id, checkpoint_id, repetition, turn + 1 FROM work_items WHERE id IN (",
                );
                let mut ids = unlock.separated(", ");
                for item in answered {
                    ids.push_bind(item.identity_id.get());
                }
                ids.push_unseparated("))");
                unlock.build().execute(&mut **tx).await?;
            }
            let mut stopped_runs = Vec::new();
            for item in unanswered {
                // Rare (a turn that failed for good): one statement per conversation, on the
                // identity key's index.
                let stopped: Vec<(i64, String)> = sqlx::query_as(
                    "UPDATE work_items SET state = 'stopped', verdict = 'error', decided_by = 'error' \
                     WHERE state = 'waiting' AND (run_id, revision_id, case_id, checkpoint_id, repetition) = \
                     (SELECT run_id, revision_id, case_id, checkpoint_id, repetition FROM work_items WHERE id = $1) \
                     AND turn > (SELECT turn FROM work_items WHERE id = $1) RETURNING run_id, category",
                )
                .bind(item.identity_id.get())
                .fetch_all(&mut **tx)
                .await?;
                let mut per_category: Vec<((i64, String), i64)> = Vec::new();
                for key in stopped {
                    match per_category.iter_mut().find(|(known, _)| *known == key) {
                        Some((_, count)) => *count += 1,
                        None => per_category.push((key, 1)),
                    }
                }
                for ((run, category), count) in per_category {
                    add_done(tx, RunId(run), count).await?;
                    sqlx::query(
                        "INSERT INTO run_tallies (run_id, category, field, value, count) VALUES ($1, $2, 'outcome', 'stopped', $3) \
                         ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = run_tallies.count + excluded.count",
                    )
                    .bind(run)
                    .bind(&category)
                    .bind(count)
                    .execute(&mut **tx)
                    .await?;
                    if !stopped_runs.contains(&RunId(run)) {
                        stopped_runs.push(RunId(run));
                    }
                }
            }
            Ok(stopped_runs)
        }

        /// Writes finished identities inside `tx`: generations first (the unique key drops
        /// identities that already have one), then grades, work item states, annotation tasks
        /// and cache entries for the ones actually recorded, then their runs' counters. Call it
        /// once per transaction with everything it records: the counters lock the runs' rows.
        pub(super) async fn insert_results(
            tx: &mut sqlx::Transaction<'_, $db>,
            finished: &[FinishedIdentity],
            now: i64,
            launched_in: Option<RunId>,
        ) -> Result<RecordOutcome, sqlx::Error> {
            if finished.is_empty() {
                return Ok(RecordOutcome::default());
            }
            // A worker's commit keeps its runs' tallies itself, last (see `add_commit_tallies`);
            // the tally triggers stand aside until then.
            let tallied_here = launched_in.is_none();
            if tallied_here {
                set_commit_tallies(tx, true).await?;
            }
            // In identity order (stable: an identity's first entry stays first), so two
            // commits holding the same identities (a lease that expired and was taken again)
            // take their keys in one order and never wait on each other in a cycle.
            let mut finished: Vec<&FinishedIdentity> = finished.iter().collect();
            finished.sort_by_key(|item| item.identity_id.get());
            let mut inserted: std::collections::HashSet<i64> = std::collections::HashSet::new();
            // Each statement binds at most this many rows (SQLite allows 32,766 parameters).
            for chunk in finished.chunks($crate::work_queue::RESULT_INSERT_BATCH) {
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO generations (work_item_id, outcome, output, finish_reason, error, error_category, attempt_log, \
                     served_by, model_used, fallback_used, from_cache, source_work_item_id, latency_ms, waited_ms, attempts, \
                     prompt_tokens, completion_tokens, cost_usd, created_at, scores) ",
                );
                insert.push_values(chunk, |mut row, item| {
                    let generation = &item.generation;
                    row.push_bind(item.identity_id.get())
                        .push_bind(generation.outcome.as_str())
                        .push_bind(generation.output.as_str())
                        .push_bind(generation.finish_reason.as_deref())
                        .push_bind(generation.error.as_deref())
                        .push_bind(generation.error_category.map(|category| category.as_str()))
                        .push_bind(generation.attempt_log.as_deref())
                        .push_bind(generation.served_by.as_deref())
                        .push_bind(generation.model_used.as_deref())
                        .push_bind(generation.fallback_used)
                        .push_bind(item.cached_from.is_some())
                        .push_bind(item.cached_from.map(i64::from))
                        .push_bind(generation.latency_ms)
                        .push_bind(generation.waited_ms)
                        .push_bind(generation.attempts)
                        .push_bind(generation.prompt_tokens)
                        .push_bind(generation.completion_tokens)
                        .push_bind(generation.cost_usd)
                        .push_bind(now)
                        .push_bind(arbiter_domain::rolling::StoredScores::column(generation));
                });
                insert.push(" ON CONFLICT (work_item_id) DO NOTHING RETURNING work_item_id");
                inserted.extend(insert.build_query_scalar::<i64>().fetch_all(&mut **tx).await?);
            }
            // The first of an identity's entries is the one stored (a batch may hold one twice,
            // when its lease expired and the same worker claimed it again).
            let recorded: Vec<&FinishedIdentity> =
                finished.into_iter().filter(|item| inserted.remove(&item.identity_id.get())).collect();
            if recorded.is_empty() {
                if tallied_here {
                    set_commit_tallies(tx, false).await?;
                }
                return Ok(RecordOutcome::default());
            }

            let with_logprobs: Vec<(i64, &[u8])> = recorded
                .iter()
                .filter_map(|item| item.generation.logprobs.as_deref().map(|data| (item.identity_id.get(), data)))
                .collect();
            for chunk in with_logprobs.chunks($crate::work_queue::RESULT_INSERT_BATCH) {
                let mut logprobs = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO generation_logprobs (work_item_id, logprobs) ",
                );
                logprobs.push_values(chunk, |mut row, (identity_id, data)| {
                    row.push_bind(*identity_id).push_bind(*data);
                });
                logprobs.build().execute(&mut **tx).await?;
            }

            let grades: Vec<(i64, &arbiter_domain::grading::record::GradeRecord)> = recorded
                .iter()
                .flat_map(|item| item.grading.grades.iter().map(|grade| (item.identity_id.get(), grade)))
                .collect();
            for chunk in grades.chunks($crate::work_queue::GRADE_INSERT_BATCH) {
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, stage, confidence, \
                     agreement, cost_usd, prompt_tokens, completion_tokens, latency_ms, model_used, fallback_used, \
                     from_cache, instructions, score, created_at) ",
                );
                insert.push_values(chunk, |mut row, (identity_id, record)| {
                    row.push_bind(*identity_id)
                        .push_bind(record.grade.grader.as_str())
                        .push_bind(record.grade.verdict.as_str())
                        .push_bind(record.grade.extracted_answer.as_deref())
                        .push_bind(record.grade.reason.as_str())
                        .push_bind(record.stage.as_str())
                        .push_bind(record.confidence)
                        .push_bind(record.agreement)
                        .push_bind(record.cost_usd)
                        .push_bind(record.prompt_tokens)
                        .push_bind(record.completion_tokens)
                        .push_bind(record.latency_ms)
                        .push_bind(record.model_used.as_deref())
                        .push_bind(record.fallback_used)
                        .push_bind(record.from_cache)
                        .push_bind((!record.instructions.is_empty()).then(|| {
                            serde_json::to_string(&record.instructions).expect("results always serialize")
                        }))
                        .push_bind(record.score.as_ref().map(|score| {
                            serde_json::to_string(score).expect("scores always serialize")
                        }))
                        .push_bind(now);
                });
                insert.build().execute(&mut **tx).await?;
            }

            // Every identity finishes with its verdict (errors have none), a statement per chunk.
            let mut done_per_run: Vec<(i64, i64)> = Vec::new();
            // Each recorded identity's run, and (finished here) its category.
            let mut run_of: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
            let mut category_of: std::collections::HashMap<i64, String> = std::collections::HashMap::new();
            if let Some(run) = launched_in {
                run_of.extend(recorded.iter().map(|item| (item.identity_id.get(), run.get())));
            } else {
                for chunk in recorded.chunks($crate::work_queue::RESULT_INSERT_BATCH) {
                    let mut update = sqlx::QueryBuilder::<$db>::new(
                        "UPDATE work_items SET state = 'done', lease_owner = NULL, lease_expires_at = NULL, \
                         verdict = v.column2, decided_by = v.column3 FROM (",
                    );
                    update.push_values(chunk, |mut row, item| {
                        row.push_bind(item.identity_id.get())
                            .push_bind(item.grading.verdict_label())
                            .push_bind(item.grading.decided_by_label());
                    });
                    update.push(") AS v WHERE work_items.id = v.column1 RETURNING work_items.id, work_items.run_id, work_items.category");
                    for (identity, run, category) in update.build_query_as::<(i64, i64, String)>().fetch_all(&mut **tx).await? {
                        run_of.insert(identity, run);
                        category_of.insert(identity, category);
                        match done_per_run.iter_mut().find(|(id, _)| *id == run) {
                            Some((_, count)) => *count += 1,
                            None => done_per_run.push((run, 1)),
                        }
                    }
                }
            }
            done_per_run.sort_unstable();
            let runs: Vec<RunId> = done_per_run.iter().map(|(run, _)| RunId(*run)).collect();

            let for_humans: Vec<(i64, &arbiter_domain::grading::record::HumanTask)> = recorded
                .iter()
                .filter_map(|item| item.grading.human.as_ref().map(|task| (item.identity_id.get(), task)))
                .collect();
            for chunk in for_humans.chunks($crate::work_queue::RESULT_INSERT_BATCH) {
                let mut tasks = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO annotation_tasks (work_item_id, reason, kind, sampling_rate, labels_needed, skill, \
                     review_rate, rubric_id, state, created_at) ",
                );
                tasks.push_values(chunk, |mut row, (identity_id, task)| {
                    row.push_bind(*identity_id)
                        .push_bind(task.reason.as_str())
                        .push_bind(task.kind.as_str())
                        .push_bind(task.sampling_rate)
                        .push_bind(task.routing.labels_needed)
                        .push_bind(task.routing.skill.as_deref())
                        .push_bind(task.routing.review_rate)
                        .push_bind(task.routing.rubric_id)
                        .push_bind("open")
                        .push_bind(now);
                });
                tasks.push(" ON CONFLICT (work_item_id) DO NOTHING");
                tasks.build().execute(&mut **tx).await?;
                // Priority and SLA deadline follow the run's priority class.
                use arbiter_domain::annotation::adjudication::sla_hours;
                use arbiter_domain::run::Priority;
                let mut schedule = sqlx::QueryBuilder::<$db>::new(format!(
                    "UPDATE annotation_tasks SET run_id = r.id, priority = r.priority, \
                     due_at = annotation_tasks.created_at + (CASE WHEN r.priority >= {} THEN {} \
                     WHEN r.priority = {} THEN {} ELSE {} END) * 3600000 \
                     FROM work_items w JOIN runs r ON r.id = w.run_id \
                     WHERE w.id = annotation_tasks.work_item_id AND annotation_tasks.due_at IS NULL AND annotation_tasks.work_item_id IN (",
                    Priority::Promotion.rank(),
                    sla_hours(Priority::Promotion),
                    Priority::Ablation.rank(),
                    sla_hours(Priority::Ablation),
                    sla_hours(Priority::Scheduled),
                ));
                let mut ids = schedule.separated(", ");
                for (identity_id, _) in chunk {
                    ids.push_bind(*identity_id);
                }
                ids.push_unseparated(")");
                schedule.build().execute(&mut **tx).await?;
            }

            // Judge calls enter the grade cache (the first answer under a key stays).
            // Cache keys go in sorted, so two commits racing for the same keys take them in one
            // order and never wait on each other in a cycle.
            let mut judge_calls: Vec<&arbiter_domain::grading::judge::JudgeCall> =
                recorded.iter().flat_map(|item| &item.grading.judge_calls).collect();
            judge_calls.sort_by(|a, b| a.cache_key.cmp(&b.cache_key));
            for chunk in judge_calls.chunks($crate::work_queue::GRADE_INSERT_BATCH) {
                let mut cache = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO grade_cache (cache_key, output, verdict, confidence, prompt_tokens, completion_tokens, model_used, score, created_at) ",
                );
                cache.push_values(chunk, |mut row, call| {
                    row.push_bind(call.cache_key.as_str())
                        .push_bind(call.output.as_str())
                        .push_bind(call.pass.map(|pass| if pass { "pass" } else { "fail" }))
                        .push_bind(call.confidence)
                        .push_bind(call.prompt_tokens)
                        .push_bind(call.completion_tokens)
                        .push_bind(call.model_used.as_deref())
                        .push_bind(call.score.as_ref().map(|score| {
                            serde_json::to_string(score).expect("scores always serialize")
                        }))
                        .push_bind(now);
                });
                cache.push(" ON CONFLICT (cache_key) DO NOTHING");
                cache.build().execute(&mut **tx).await?;
            }

            // Answers (never errors) enter the content-addressed cache, by reference.
            let mut cacheable: Vec<(&str, i64)> = recorded
                .iter()
                .filter(|item| item.cached_from.is_none() && !item.generation.outcome.is_error())
                .filter_map(|item| item.generation_key.as_deref().map(|key| (key, item.identity_id.get())))
                .collect();
            cacheable.sort_unstable();
            for chunk in cacheable.chunks($crate::work_queue::GRADE_INSERT_BATCH) {
                let mut cache = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO generation_cache (generation_key, work_item_id, created_at) ",
                );
                cache.push_values(chunk, |mut row, (key, identity_id)| {
                    row.push_bind(*key).push_bind(*identity_id).push_bind(now);
                });
                cache.push(" ON CONFLICT (generation_key) DO NOTHING");
                cache.build().execute(&mut **tx).await?;
            }

            // The run counters come last: the run rows they lock (in id order, so two commits
            // spanning the same runs never wait on each other in a cycle) are then held for
            // the few statements left, and commits of one run overlap up to here.
            if tallied_here {
                add_commit_tallies(tx, &done_per_run, &recorded, &run_of, &category_of).await?;
                set_commit_tallies(tx, false).await?;
            }
            for (run, count) in &done_per_run {
                add_done(tx, RunId(*run), *count).await?;
            }
            count_answers(tx, &recorded, &run_of).await?;

            let (answered, unanswered): (Vec<&FinishedIdentity>, Vec<&FinishedIdentity>) = recorded
                .iter()
                .filter(|item| item.next_turn_waits)
                .partition(|item| !item.generation.outcome.is_error());
            let mut runs = runs;
            for run in advance_conversations(tx, &answered, &unanswered).await? {
                if !runs.contains(&run) {
                    runs.push(run);
                }
            }
            Ok(RecordOutcome { inserted: recorded.len(), runs })
        }

        /// Whether this transaction keeps its runs' tallies itself, which the tally triggers
        /// read: PostgreSQL's transaction-local setting `arbiter.commit_tallies`, SQLite's row
        /// in `commit_tallies` (written and removed inside the transaction, so no other
        /// connection sees it).
        pub(super) async fn set_commit_tallies(tx: &mut sqlx::Transaction<'_, $db>, on: bool) -> Result<(), sqlx::Error> {
            let statement = match ($backend, on) {
                ("postgres", true) => "SELECT set_config('arbiter.commit_tallies', 'on', true)",
                ("postgres", false) => "SELECT set_config('arbiter.commit_tallies', 'off', true)",
                (_, true) => "INSERT INTO commit_tallies (one) VALUES (1)",
                (_, false) => "DELETE FROM commit_tallies",
            };
            sqlx::query(statement).execute(&mut **tx).await?;
            Ok(())
        }

        /// What the tally triggers would have added for a worker's commit, added once: the
        /// verdict and outcome of each recorded identity and the deterministic graders that
        /// graded them, counted per run and category, after the runs' rows are locked in id
        /// order (every writer of a run's tallies queues there first).
        async fn add_commit_tallies(
            tx: &mut sqlx::Transaction<'_, $db>,
            done_per_run: &[(i64, i64)],
            recorded: &[&FinishedIdentity],
            run_of: &std::collections::HashMap<i64, i64>,
            category_of: &std::collections::HashMap<i64, String>,
        ) -> Result<(), sqlx::Error> {
            // (SQLite's one writer has every row to itself already.)
            if $backend == "postgres" && !done_per_run.is_empty() {
                let mut lock = sqlx::QueryBuilder::<$db>::new("SELECT id FROM runs WHERE id IN (");
                let mut ids = lock.separated(", ");
                for (run, _) in done_per_run {
                    ids.push_bind(*run);
                }
                ids.push_unseparated(") ORDER BY id FOR NO KEY UPDATE");
                lock.build().fetch_all(&mut **tx).await?;
            }

            let mut tallies: std::collections::BTreeMap<(i64, &str, &str, &str), i64> = std::collections::BTreeMap::new();
            let mut graders: std::collections::BTreeMap<(i64, &str), i64> = std::collections::BTreeMap::new();
            // A recorded identity had no verdict before (it was leased, without a generation):
            // each adds a first verdict, as the trigger would, and no change.
            for item in recorded {
                let identity = item.identity_id.get();
                let (Some(run), Some(category)) = (run_of.get(&identity), category_of.get(&identity)) else { continue };
                *tallies.entry((*run, category, "verdict", item.grading.verdict_label())).or_default() += 1;
                *tallies.entry((*run, category, "outcome", item.generation.outcome.as_str())).or_default() += 1;
                for record in &item.grading.grades {
                    if record.stage == arbiter_domain::grading::triage::Stage::Deterministic {
                        *graders.entry((*run, record.grade.grader.as_str())).or_default() += 1;
                    }
                }
            }
            if !tallies.is_empty() {
                let mut upsert = sqlx::QueryBuilder::<$db>::new("INSERT INTO run_tallies (run_id, category, field, value, count) ");
                upsert.push_values(&tallies, |mut row, ((run, category, field, value), count)| {
                    row.push_bind(*run).push_bind(*category).push_bind(*field).push_bind(*value).push_bind(*count);
                });
                upsert.push(" ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = run_tallies.count + excluded.count");
                upsert.build().execute(&mut **tx).await?;
            }
            if !graders.is_empty() {
                let mut upsert = sqlx::QueryBuilder::<$db>::new("INSERT INTO run_graders (run_id, grader, count) ");
                upsert.push_values(&graders, |mut row, ((run, grader), count)| {
                    row.push_bind(*run).push_bind(*grader).push_bind(*count);
                });
                upsert.push(" ON CONFLICT (run_id, grader) DO UPDATE SET count = run_graders.count + excluded.count");
                upsert.build().execute(&mut **tx).await?;
            }
            Ok(())
        }

        /// Keeps the run counters the progress page reads instead of counting a run's rows:
        /// answers from the cache and errors by category (one statement for the batch), and
        /// each run's latest error (only when the batch has one).
        async fn count_answers(
            tx: &mut sqlx::Transaction<'_, $db>,
            recorded: &[&FinishedIdentity],
            run_of: &std::collections::HashMap<i64, i64>,
        ) -> Result<(), sqlx::Error> {
            let mut counts: std::collections::BTreeMap<(i64, String), i64> = std::collections::BTreeMap::new();
            let mut last_errors: std::collections::BTreeMap<i64, &str> = std::collections::BTreeMap::new();
            for item in recorded {
                let Some(&run) = run_of.get(&item.identity_id.get()) else { continue };
                if item.cached_from.is_some() {
                    *counts.entry((run, $crate::runs::FROM_CACHE_COUNT.to_string())).or_default() += 1;
                }
                if let Some(category) = item.generation.error_category {
                    *counts.entry((run, format!("{}{}", $crate::runs::ERROR_COUNT_PREFIX, category.as_str()))).or_default() += 1;
                }
                if let Some(error) = &item.generation.error {
                    last_errors.insert(run, error);
                }
            }
            if !counts.is_empty() {
                let mut upsert = sqlx::QueryBuilder::<$db>::new("INSERT INTO run_counts (run_id, name, count) ");
                upsert.push_values(&counts, |mut row, ((run, name), count)| {
                    row.push_bind(*run).push_bind(name.as_str()).push_bind(*count);
                });
                upsert.push(" ON CONFLICT (run_id, name) DO UPDATE SET count = run_counts.count + excluded.count");
                upsert.build().execute(&mut **tx).await?;
            }
            for (run, error) in last_errors {
                sqlx::query("UPDATE runs SET last_error = $1 WHERE id = $2")
                    .bind(error)
                    .bind(run)
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(())
        }

        /// The answers to the earlier turns of the claimed identities that are later turns of
        /// conversations, by identity, in turn order (one query, only when there are any).
        async fn earlier_answers(
            pool: &sqlx::Pool<$db>,
            claimed: &[<$db as sqlx::Database>::Row],
        ) -> Result<std::collections::HashMap<i64, Vec<String>>, sqlx::Error> {
            let mut later_turns = Vec::new();
            for row in claimed {
                if row.read::<i64>("turn")? > 1 {
                    later_turns.push(row.read::<i64>("id")?);
                }
            }
            let mut answers: std::collections::HashMap<i64, Vec<String>> = std::collections::HashMap::new();
            if later_turns.is_empty() {
                return Ok(answers);
            }
            let mut select = sqlx::QueryBuilder::<$db>::new(
                "SELECT w.id, g.output FROM work_items w JOIN work_items p ON p.run_id = w.run_id \
                 AND p.revision_id = w.revision_id AND p.case_id = w.case_id AND p.checkpoint_id = w.checkpoint_id \
                 AND p.repetition = w.repetition AND p.turn < w.turn \
                 JOIN generations g ON g.work_item_id = p.id WHERE w.id IN (",
            );
            let mut ids = select.separated(", ");
            for id in &later_turns {
                ids.push_bind(*id);
            }
            ids.push_unseparated(") ORDER BY w.id, p.turn");
            let rows: Vec<(i64, String)> = select.build_query_as().fetch_all(pool).await?;
            for (id, output) in rows {
                answers.entry(id).or_default().push(output);
            }
            Ok(answers)
        }

        #[async_trait::async_trait]
        impl $crate::work_queue::WorkQueueStore for $store {
            async fn cached_generations(&self, keys: &[String]) -> StoreResult<Vec<(String, CachedGeneration)>> {
                let result: StoreResult<Vec<(String, CachedGeneration)>> = async move {
                    let mut found = Vec::new();
                    for chunk in keys.chunks($crate::KEY_LOOKUP_BATCH) {
                        let mut select = sqlx::QueryBuilder::<$db>::new(
                            "SELECT c.generation_key, c.work_item_id AS source_work_item_id, g.outcome, g.output, g.finish_reason, \
                             g.prompt_tokens, g.completion_tokens, g.model_used, g.scores \
                             FROM generation_cache c JOIN generations g ON g.work_item_id = c.work_item_id \
                             WHERE c.generation_key IN (",
                        );
                        let mut list = select.separated(", ");
                        for key in chunk {
                            list.push_bind(key.as_str());
                        }
                        list.push_unseparated(")");
                        for row in select.build().fetch_all(&self.pool).await? {
                            found.push((row.read("generation_key")?, cached_from_row(&row)?));
                        }
                    }
                    Ok(found)
                }
                .await;
                result.map_err(|err| err.during("cached_generations"))
            }

            async fn active_runs(&self) -> StoreResult<Vec<ActiveRun>> {
                let result: StoreResult<Vec<ActiveRun>> = async move {
                    let rows: Vec<(i64, i64, String, f64)> = sqlx::query_as(
                        "SELECT r.id, r.priority, r.team, COALESCE(t.weight, 1.0) FROM runs r \
                         LEFT JOIN team_weights t ON t.team = r.team \
                         WHERE (r.status = 'running' OR (r.status = 'expanding' AND r.planned_at > $1)) \
                         AND NOT EXISTS (SELECT 1 FROM served_checkpoints s WHERE s.checkpoint_id = r.checkpoint_id \
                                         AND NOT EXISTS (SELECT 1 FROM server_launches l WHERE l.checkpoint_id = r.checkpoint_id \
                                                         AND l.state = 'healthy')) ORDER BY r.id",
                    )
                    .bind(now_ms() - $crate::runs::PLANNING_STALE_MS)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.into_iter()
                        .map(|(id, priority, team, team_weight)| {
                            Ok(ActiveRun { id: RunId(id), priority: $crate::priority_of(priority)?, team, team_weight })
                        })
                        .collect()
                }
                .await;
                result.map_err(|err| err.during("active_runs"))
            }

            async fn claim_identities(
                &self,
                worker: &str,
                run_id: RunId,
                limit: i64,
                lease_ms: i64,
                longest_first: bool,
            ) -> StoreResult<Vec<ClaimedIdentity>> {
                let result: StoreResult<Vec<ClaimedIdentity>> = async move {
                    let now = now_ms();
                    let started = std::time::Instant::now();
                    // Longest expected first, so the long tail overlaps the bulk.
                    let order = if longest_first { "cost DESC, id" } else { "id" };
                    let claim = format!(
                        "UPDATE work_items SET state = 'leased', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1 \
                         WHERE id IN (SELECT id FROM work_items WHERE run_id = $3 AND state = 'queued' \
                                      AND EXISTS (SELECT 1 FROM runs WHERE id = $3 AND (status = 'running' OR (status = 'expanding' AND planned_at > $5))) \
                                      ORDER BY {order} LIMIT $4 {}) RETURNING id",
                        $skip_locked
                    );
                    // One autocommit statement takes the lease; the identities' inputs are then read
                    // on a reader connection (they never change, so no transaction spans both),
                    // leaving SQLite's single writer free for commits meanwhile.
                    let ids: Vec<i64> = sqlx::query_scalar(&claim)
                        .bind(worker)
                        .bind(now + lease_ms)
                        .bind(run_id.get())
                        .bind(limit)
                        .bind(now - $crate::runs::PLANNING_STALE_MS)
                        .fetch_all(&self.writer)
                        .await?;
                    if ids.is_empty() {
                        return Ok(Vec::new());
                    }
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "SELECT w.id, w.run_id, w.case_id, w.repetition, w.turn, w.cost, w.attempts, w.generation_key, i.input, i.target, i.category, i.fields, \
                         c.work_item_id AS source_work_item_id, g.outcome, g.output, g.finish_reason, g.prompt_tokens, \
                         g.completion_tokens, g.model_used, g.scores \
                         FROM work_items w JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                         LEFT JOIN generation_cache c ON c.generation_key = w.generation_key \
                         LEFT JOIN generations g ON g.work_item_id = c.work_item_id WHERE w.id IN (",
                    );
                    let mut list = select.separated(", ");
                    for id in &ids {
                        list.push_bind(*id);
                    }
                    list.push_unseparated(") ORDER BY w.cost DESC, w.id");
                    let rows = select.build().fetch_all(&self.pool).await?;
                    let mut earlier = earlier_answers(&self.pool, &rows).await?;
                    $crate::log_operation("claim_identities", rows.len(), started);
                    rows.iter()
                        .map(|row| {
                            let cached_outcome: Option<String> = row.read("outcome")?;
                            let identity_id: i64 = row.read("id")?;
                            Ok(ClaimedIdentity {
                                identity_id: IdentityId(identity_id),
                                run_id: row.read("run_id")?,
                                case_id: row.read("case_id")?,
                                repetition: row.read("repetition")?,
                                turn: row.read("turn")?,
                                earlier_answers: earlier.remove(&identity_id).unwrap_or_default(),
                                item: {
                                    use arbiter_domain::dataset::DatasetItem;
                                    $crate::item_from_row!(row)
                                },
                                cost: row.read("cost")?,
                                claims: row.read("attempts")?,
                                generation_key: row.read("generation_key")?,
                                cached: match cached_outcome {
                                    Some(_) => Some(cached_from_row(row)?),
                                    None => None,
                                },
                            })
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("claim_identities"))
            }

            async fn claim_work(&self, worker: &str, limit: i64, lease_ms: i64) -> StoreResult<Vec<IdentityId>> {
                let result: StoreResult<Vec<i64>> = async move {
                    let now = now_ms();
                    // The run's status is read in a subquery, not a join: on PostgreSQL a joined
                    // `FOR UPDATE SKIP LOCKED` would lock the run's row too, and every concurrent
                    // claim would then skip the whole run and come back empty.
                    let mut tx = self.writer.begin_with($begin).await?;
                    let ids: Vec<i64> = sqlx::query_scalar(concat!(
                        "UPDATE work_items SET state = 'leased', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1 \
                         WHERE id IN (SELECT w.id FROM work_items w \
                                      WHERE w.state = 'queued' \
                                      AND EXISTS (SELECT 1 FROM runs r WHERE r.id = w.run_id \
                                                  AND (r.status = 'running' OR (r.status = 'expanding' AND r.planned_at > $4))) \
                                      ORDER BY w.id LIMIT $3 ",
                        $skip_locked,
                        ") RETURNING id"
                    ))
                    .bind(worker)
                    .bind(now + lease_ms)
                    .bind(limit)
                    .bind(now - $crate::runs::PLANNING_STALE_MS)
                    .fetch_all(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(ids)
                }
                .await;
                result.map(|ids| ids.into_iter().map(IdentityId).collect()).map_err(|err| err.during("claim_work"))
            }

            async fn load_identity(&self, identity_id: IdentityId) -> StoreResult<IdentityInputs> {
                let result: StoreResult<IdentityInputs> = async move {
                    let row = sqlx::query(
                        "SELECT w.id, w.run_id, w.case_id, w.repetition, i.input, i.target, r.manifest_json \
                         FROM work_items w JOIN runs r ON r.id = w.run_id \
                         JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                         WHERE w.id = $1",
                    )
                    .bind(identity_id.get())
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("no result identity with id {identity_id}")))?;
                    let manifest_json: String = row.read("manifest_json")?;
                    let manifest: Manifest = serde_json::from_str(&manifest_json)
                        .map_err(|err| sqlx::Error::Decode(err.into()))?;
                    Ok($crate::read_columns!(row, IdentityInputs {
                        run_id,
                        case_id,
                        repetition,
                        input,
                        target,
                        ;
                        identity_id: row.read("id")?,
                        prompt_template: manifest.eval.prompt.template,
                        grader: manifest.eval.grader.id_version().to_string(),
                        max_tokens: i64::from(manifest.eval.generation.max_tokens),
                        temperature: manifest.eval.generation.temperature,
                        seed: manifest.eval.generation.seed as i64,
                        base_url: manifest.endpoint_urls.first().cloned().unwrap_or_default(),
                        model: manifest.served_model,
                    }))
                }
                .await;
                result.map_err(|err| err.during("load_identity"))
            }

            async fn identity_context(&self, identity_id: IdentityId) -> StoreResult<Option<$crate::IdentityContext>> {
                let result: StoreResult<Option<$crate::IdentityContext>> = async move {
                    let rows = sqlx::query(
                        "SELECT w.id, w.run_id, w.turn, w.case_id, i.input, i.target, i.category, i.fields \
                         FROM work_items w JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                         WHERE w.id = $1",
                    )
                    .bind(identity_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    let Some(row) = rows.first() else {
                        return Ok(None);
                    };
                    let mut earlier = earlier_answers(&self.pool, &rows).await?;
                    Ok(Some($crate::IdentityContext {
                        run_id: row.read("run_id")?,
                        item: {
                            use arbiter_domain::dataset::DatasetItem;
                            $crate::item_from_row!(row)
                        },
                        turn: row.read("turn")?,
                        earlier_answers: earlier.remove(&identity_id.get()).unwrap_or_default(),
                    }))
                }
                .await;
                result.map_err(|err| err.during("identity_context"))
            }

            async fn record_results(&self, finished: &[FinishedIdentity]) -> StoreResult<RecordOutcome> {
                let result: StoreResult<RecordOutcome> = async move {
                    if finished.is_empty() {
                        return Ok(RecordOutcome::default());
                    }
                    let started = std::time::Instant::now();
                    let mut tx = self.writer.begin_with($begin).await?;
                    let outcome = insert_results(&mut tx, finished, now_ms(), None).await?;
                    tx.commit().await?;
                    $crate::log_operation("record_results", finished.len(), started);
                    Ok(outcome)
                }
                .await;
                result.map_err(|err| err.during("record_results"))
            }

            async fn heartbeat(&self, worker: &str, in_flight: i64, lease_ms: i64, live_within_ms: i64) -> StoreResult<i64> {
                let result: StoreResult<i64> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
                    sqlx::query("UPDATE work_items SET lease_expires_at = $1 WHERE state = 'leased' AND lease_owner = $2")
                        .bind(now + lease_ms)
                        .bind(worker)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO workers (name, started_at, heartbeat_at, in_flight) VALUES ($1, $2, $2, $3) \
                         ON CONFLICT (name) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, in_flight = excluded.in_flight",
                    )
                    .bind(worker)
                    .bind(now)
                    .bind(in_flight)
                    .execute(&mut *tx)
                    .await?;
                    let live: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM workers WHERE heartbeat_at > $1")
                        .bind(now - live_within_ms)
                        .fetch_one(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(live.max(1))
                }
                .await;
                result.map_err(|err| err.during("heartbeat"))
            }

            async fn reap_expired_leases(&self) -> StoreResult<u64> {
                let result: StoreResult<u64> = async move {
                    let now = now_ms();
                    let reaped = sqlx::query(
                        "UPDATE work_items SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                         WHERE state = 'leased' AND lease_expires_at < $1",
                    )
                    .bind(now)
                    .execute(&self.writer)
                    .await?;
                    // Workers silent for an hour are gone; their rows only clutter the health page.
                    sqlx::query("DELETE FROM workers WHERE heartbeat_at < $1")
                        .bind(now - 3_600_000)
                        .execute(&self.writer)
                        .await?;
                    Ok(reaped.rows_affected())
                }
                .await;
                result.map_err(|err| err.during("reap_expired_leases"))
            }

            async fn release_lease(&self, worker: &str, identity_id: IdentityId) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let released = sqlx::query(
                        "UPDATE work_items SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                         WHERE id = $1 AND lease_owner = $2 AND state = 'leased'",
                    )
                    .bind(identity_id.get())
                    .bind(worker)
                    .execute(&self.writer)
                    .await?;
                    Ok(released.rows_affected() == 1)
                }
                .await;
                result.map_err(|err| err.during("release_lease"))
            }

            async fn deregister_worker(&self, worker: &str) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query("DELETE FROM workers WHERE name = $1")
                        .bind(worker)
                        .execute(&self.writer)
                        .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("deregister_worker"))
            }
        }
    };
}

use crate::StoreResult;
use arbiter_domain::answer::{Generation, Outcome};
use arbiter_domain::expansion::PlannedIdentity;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::Grade;
pub(crate) use work_queue_sql;
