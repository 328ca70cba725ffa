//! Side-by-side preference: pairs of two runs' answers to the same cases, sent to raters, and
//! the raters' answers. A pair is an annotation task of kind `pair`, so the queue's claims,
//! overlap, skips, priorities and SLAs (in [`crate::annotation`]) serve it like any item;
//! here are the pairs' creation, their labels and what reports read.
//!
//! Invariants, each kept inside one transaction:
//! - a request creates all its pairs or none, never a pair of two items already paired;
//! - a preference is accepted only from the rater holding the pair's live lease, once, and the
//!   pair is decided when its last label arrives (as single items are).

use crate::StoreResult;
pub use arbiter_domain::annotation::preference::PairRequestSummary;
use arbiter_domain::annotation::preference::{PairSelection, Preference};
use arbiter_domain::annotation::task::ClaimHandle;
use arbiter_domain::ids::{RunId, UserId};
use async_trait::async_trait;

/// What a researcher asks for from the Compare page.
#[derive(Clone, Debug, PartialEq)]
pub struct NewPairRequest {
    /// Run A (the baseline on the Compare page) and run B: two checkpoints on one eval.
    pub run_a: RunId,
    pub run_b: RunId,
    pub selection: PairSelection,
    /// At most this many pairs (fewer when fewer cases qualify).
    pub pairs: usize,
    /// Raters per pair.
    pub labels_needed: i64,
    /// Draws the cases and each pair's sides.
    pub seed: u64,
    pub note: String,
    pub requested_by: UserId,
}

/// One rater's answer on a pair, with the checkpoints on each side.
#[derive(Clone, Debug, PartialEq)]
pub struct PreferenceRow {
    pub eval_id: i64,
    pub eval_name: String,
    pub task_id: i64,
    pub left_checkpoint_id: i64,
    pub left_checkpoint: String,
    pub right_checkpoint_id: i64,
    pub right_checkpoint: String,
    pub rater_id: i64,
    pub rater: String,
    pub choice: Preference,
}

#[async_trait]
pub trait PreferenceStore: Send + Sync + 'static {
    /// Draws the request's pairs among the cases both runs answered that match its selection
    /// (and are not paired already), each with its sides drawn, and queues them; `Conflict`
    /// with the reason when the runs cannot be compared or no case qualifies.
    async fn create_pair_request(
        &self,
        request: &NewPairRequest,
    ) -> StoreResult<PairRequestSummary>;

    /// The newest requests first, at most `limit`.
    async fn pair_requests(&self, limit: i64) -> StoreResult<Vec<PairRequestSummary>>;

    /// Records the preference of the rater holding the pair leased under `handle`.
    async fn submit_preference(
        &self,
        handle: &ClaimHandle,
        user_id: UserId,
        choice: Preference,
        rationale: &str,
    ) -> StoreResult<()>;

    /// Every preference label on pairs of `eval_id`'s runs (all evals for `None`), by pair.
    async fn preference_rows(&self, eval_id: Option<i64>) -> StoreResult<Vec<PreferenceRow>>;
}

/// The SQL of [`PreferenceStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! preferences_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use $crate::preferences::{NewPairRequest, PairRequestSummary, PreferenceRow};
        use arbiter_domain::annotation::adjudication::{rater_quality, sla_hours};
        use arbiter_domain::annotation::preference::{decide_pair, draw_pairs, PairSelection, Preference};
        use arbiter_domain::annotation::task::ClaimHandle;
        use arbiter_domain::ids::UserId;
        use arbiter_domain::run::Priority;
        use $crate::{StoreError, StoreResult, now_ms};

        const SUMMARY_SELECT: &str = "SELECT q.id, e.id AS eval_id, e.name AS eval_name, q.run_a, q.run_b, \
            ca.name AS checkpoint_a, cb.name AS checkpoint_b, q.selection, q.pairs, q.labels_needed, \
            (SELECT COUNT(*) FROM preference_pairs p JOIN annotation_tasks t ON t.id = p.task_id \
             WHERE p.request_id = q.id AND t.state = 'done') AS pairs_done, \
            (SELECT COUNT(*) FROM preference_pairs p JOIN preference_labels l ON l.task_id = p.task_id \
             WHERE p.request_id = q.id) AS labels, \
            q.note, u.username AS requested_by, q.created_at \
            FROM pair_requests q JOIN runs ra ON ra.id = q.run_a JOIN runs rb ON rb.id = q.run_b \
            JOIN evals e ON e.id = ra.eval_id JOIN checkpoints ca ON ca.id = ra.checkpoint_id \
            JOIN checkpoints cb ON cb.id = rb.checkpoint_id JOIN users u ON u.id = q.requested_by";

        fn summary_from_row(row: &<$db as sqlx::Database>::Row) -> Result<PairRequestSummary, sqlx::Error> {
            Ok($crate::read_columns!(row, PairRequestSummary {
                id,
                eval_id,
                eval_name,
                run_a,
                run_b,
                checkpoint_a,
                checkpoint_b,
                selection,
                pairs,
                labels_needed,
                pairs_done,
                labels,
                note,
                requested_by,
                created_at,
            }))
        }

        /// The smaller and larger of two ids in this dialect (the pair key's expressions).
        fn least_greatest() -> (&'static str, &'static str) {
            if $backend == "postgres" {
                ("LEAST", "GREATEST")
            } else {
                ("MIN", "MAX")
            }
        }

        /// The answered cases of run A matched with run B's answers to the same case and
        /// repetition, filtered by `selection`, leaving out two items paired already. First
        /// turns only: a later turn's request holds one run's own earlier answers, so showing
        /// it beside the other run's answer would tell the sides apart.
        fn candidates_sql(selection: PairSelection) -> String {
            let answered = |side: &str| {
                format!(
                    "EXISTS (SELECT 1 FROM generations g WHERE g.work_item_id = {side}.id \
                     AND g.outcome NOT IN ('endpoint_error', 'timeout'))"
                )
            };
            let unsure = |side: &str| {
                format!("({side}.decided_by IN ('strong_judge', 'human', 'pending') OR {side}.verdict = 'uncertain')")
            };
            let chosen = match selection {
                PairSelection::Differ => "a.verdict IN ('pass', 'fail') AND b.verdict IN ('pass', 'fail') \
                    AND a.verdict <> b.verdict".to_string(),
                PairSelection::Unsure => format!("({} OR {})", unsure("a"), unsure("b")),
                PairSelection::Random => "1 = 1".to_string(),
            };
            format!(
                "SELECT a.id, b.id FROM work_items a JOIN work_items b ON b.run_id = $2 \
                 AND b.revision_id = a.revision_id AND b.case_id = a.case_id \
                 AND b.repetition = a.repetition AND b.turn = a.turn \
                 WHERE a.run_id = $1 AND a.turn = 1 AND {chosen} AND {} AND {} \
                 AND NOT EXISTS (SELECT 1 FROM preference_pairs p WHERE \
                     {least}(p.left_item_id, p.right_item_id) = {least}(a.id, b.id) \
                     AND {greatest}(p.left_item_id, p.right_item_id) = {greatest}(a.id, b.id))",
                answered("a"),
                answered("b"),
                least = least_greatest().0,
                greatest = least_greatest().1,
            )
        }

        #[async_trait::async_trait]
        impl $crate::preferences::PreferenceStore for $store {
            async fn create_pair_request(&self, request: &NewPairRequest) -> StoreResult<PairRequestSummary> {
                let result: StoreResult<PairRequestSummary> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
                    let mut runs = Vec::new();
                    for run in [request.run_a, request.run_b] {
                        let found: Option<(i64, i64, i64, i64, Option<i64>)> = sqlx::query_as(
                            "SELECT eval_id, revision_id, checkpoint_id, priority, raw_purged_at FROM runs WHERE id = $1",
                        )
                        .bind(run.get())
                        .fetch_optional(&mut *tx)
                        .await?;
                        let (eval, revision, checkpoint, priority, purged) =
                            found.ok_or_else(|| StoreError::NotFound(format!("no run {run}")))?;
                        if purged.is_some() {
                            return Err(StoreError::Conflict(format!(
                                "run {run}'s outputs were deleted by the retention policy, so there is nothing to show raters"
                            )));
                        }
                        runs.push((eval, revision, checkpoint, priority));
                    }
                    let ((eval_a, revision_a, checkpoint_a, priority_a), (eval_b, revision_b, checkpoint_b, priority_b)) =
                        (runs[0], runs[1]);
                    let refuse = |why: String| Err(StoreError::Conflict(why));
                    if eval_a != eval_b {
                        return refuse(format!(
                            "runs {} and {} are of different evals; pairs compare two checkpoints' answers to the same cases",
                            request.run_a, request.run_b
                        ));
                    }
                    if revision_a != revision_b {
                        return refuse(format!(
                            "runs {} and {} read different revisions of the dataset, so their cases are not the same",
                            request.run_a, request.run_b
                        ));
                    }
                    if checkpoint_a == checkpoint_b {
                        return refuse(format!(
                            "runs {} and {} are of the same checkpoint; pairs compare two checkpoints",
                            request.run_a, request.run_b
                        ));
                    }
                    let candidates: Vec<(i64, i64)> = sqlx::query_as(&candidates_sql(request.selection))
                        .bind(request.run_a.get())
                        .bind(request.run_b.get())
                        .fetch_all(&mut *tx)
                        .await?;
                    let mut drawn = draw_pairs(&candidates, request.pairs, request.seed);
                    // Inserted in the order of the pair key, so that two requests pairing the
                    // same cases at once wait on each other (the second then finds the pair
                    // taken) rather than each holding a key the other needs (a deadlock on
                    // PostgreSQL).
                    drawn.sort_by_key(|pair| (pair.left.min(pair.right), pair.left.max(pair.right)));
                    if drawn.is_empty() {
                        return refuse(format!(
                            "no case qualifies: the runs share no answered case {} that is not paired already",
                            match request.selection {
                                PairSelection::Differ => "whose verdicts differ",
                                PairSelection::Unsure => "that a judge was unsure of",
                                PairSelection::Random => "",
                            }
                        ));
                    }
                    // The pairs are as urgent as the more urgent of the two runs.
                    let priority = Priority::from_rank(priority_a.max(priority_b)).unwrap_or_default();
                    let due_at = now + sla_hours(priority) * 3_600_000;
                    let request_id: i64 = sqlx::query_scalar(
                        "INSERT INTO pair_requests (run_a, run_b, selection, pairs, labels_needed, seed, note, requested_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                    )
                    .bind(request.run_a.get())
                    .bind(request.run_b.get())
                    .bind(request.selection.as_str())
                    .bind(drawn.len() as i64)
                    .bind(request.labels_needed)
                    // Stored as its bits: PostgreSQL has no unsigned 64-bit integer.
                    .bind(request.seed as i64)
                    .bind(&request.note)
                    .bind(request.requested_by.get())
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                    for pair in &drawn {
                        // Pairs are never drawn for review or gold yet: their labels are no verdicts.
                        let task_id: i64 = sqlx::query_scalar(
                            "INSERT INTO annotation_tasks (work_item_id, reason, kind, labels_needed, review_rate, \
                             priority, due_at, state, created_at, run_id) \
                             VALUES (NULL, $1, 'pair', $2, 0, $3, $4, 'open', $5, $6) RETURNING id",
                        )
                        .bind(format!("pair request {request_id}"))
                        .bind(request.labels_needed)
                        .bind(priority.rank())
                        .bind(due_at)
                        .bind(now)
                        .bind(request.run_a.get())
                        .fetch_one(&mut *tx)
                        .await?;
                        sqlx::query(
                            "INSERT INTO preference_pairs (task_id, request_id, left_item_id, right_item_id) \
                             VALUES ($1, $2, $3, $4)",
                        )
                        .bind(task_id)
                        .bind(request_id)
                        .bind(pair.left)
                        .bind(pair.right)
                        .execute(&mut *tx)
                        .await
                        // On PostgreSQL a request for the same runs may have paired the same
                        // cases since this one read them; nothing of this one is kept.
                        .map_err(|err| $crate::conflict_on($backend, err, "preference_pairs_items_key",
                            "another request paired some of these cases at the same moment; send the request again"))?;
                    }
                    let row = sqlx::query(&format!("{SUMMARY_SELECT} WHERE q.id = $1"))
                        .bind(request_id)
                        .fetch_one(&mut *tx)
                        .await?;
                    let summary = summary_from_row(&row)?;
                    tx.commit().await?;
                    Ok(summary)
                }
                .await;
                result.map_err(|err| err.during("create_pair_request"))
            }

            async fn pair_requests(&self, limit: i64) -> StoreResult<Vec<PairRequestSummary>> {
                let result: StoreResult<Vec<PairRequestSummary>> = async move {
                    let rows = sqlx::query(&format!("{SUMMARY_SELECT} ORDER BY q.id DESC LIMIT $1"))
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(summary_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("pair_requests"))
            }

            async fn submit_preference(
                &self,
                handle: &ClaimHandle,
                user_id: UserId,
                choice: Preference,
                rationale: &str,
            ) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
                    let lease: Option<(i64, i64)> = sqlx::query_as(
                        "DELETE FROM task_leases WHERE handle = $1 AND rater_id = $2 AND expires_at > $3 \
                         RETURNING task_id, started_at",
                    )
                    .bind(handle.as_str())
                    .bind(user_id.get())
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((task_id, started)) = lease else {
                        tx.rollback().await?;
                        return Err(StoreError::Conflict(super::annotation_sql::NOT_HELD.into()));
                    };
                    let kind: String = sqlx::query_scalar("SELECT kind FROM annotation_tasks WHERE id = $1")
                        .bind(task_id)
                        .fetch_one(&mut *tx)
                        .await?;
                    if kind != "pair" {
                        tx.rollback().await?;
                        return Err(StoreError::Conflict(
                            "this item is one output, not a pair: label it pass or fail (or answer its rubric)".into(),
                        ));
                    }
                    sqlx::query(
                        "INSERT INTO preference_labels (task_id, rater_id, choice, rationale, duration_ms, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(task_id)
                    .bind(user_id.get())
                    .bind(choice.as_str())
                    .bind(rationale)
                    .bind(now - started)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "preference_labels_task_rater_key", "you have answered this pair already"))?;
                    let (done, needed): (i64, i64) = sqlx::query_as(
                        "UPDATE annotation_tasks SET labels_done = labels_done + 1 WHERE id = $1 \
                         RETURNING labels_done, labels_needed",
                    )
                    .bind(task_id)
                    .fetch_one(&mut *tx)
                    .await?;
                    if done >= needed {
                        // Decided as single items are: each rater weighted by their record.
                        let votes: Vec<(String, i64, i64)> = sqlx::query_as(&format!(
                            "SELECT l.choice, {} FROM preference_labels l WHERE l.task_id = $1 ORDER BY l.id",
                            super::annotation_sql::rater_record_sql("l.rater_id"),
                        ))
                        .bind(task_id)
                        .fetch_all(&mut *tx)
                        .await?;
                        let votes: Vec<(Preference, f64)> = votes
                            .into_iter()
                            .filter_map(|(choice, right, wrong)| {
                                let quality = rater_quality(right.max(0) as u64, wrong.max(0) as u64);
                                Preference::parse(&choice).ok().map(|choice| (choice, quality))
                            })
                            .collect();
                        let consensus = match decide_pair(&votes) {
                            Some(choice) => serde_json::json!({ "choice": choice.as_str() }),
                            None => serde_json::json!({ "split": true }),
                        };
                        sqlx::query(
                            "UPDATE annotation_tasks SET state = 'done', completed_at = $1, decided_at = $1, consensus = $2 \
                             WHERE id = $3",
                        )
                            .bind(now)
                            .bind(consensus.to_string())
                            .bind(task_id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("submit_preference"))
            }

            async fn preference_rows(&self, eval_id: Option<i64>) -> StoreResult<Vec<PreferenceRow>> {
                let result: StoreResult<Vec<PreferenceRow>> = async move {
                    let rows = sqlx::query(
                        "SELECT e.id AS eval_id, e.name AS eval_name, l.task_id, \
                                wl.checkpoint_id AS left_checkpoint_id, cl.name AS left_checkpoint, \
                                wr.checkpoint_id AS right_checkpoint_id, cr.name AS right_checkpoint, \
                                l.rater_id, u.username AS rater, l.choice \
                         FROM preference_labels l JOIN preference_pairs p ON p.task_id = l.task_id \
                         JOIN work_items wl ON wl.id = p.left_item_id JOIN work_items wr ON wr.id = p.right_item_id \
                         JOIN checkpoints cl ON cl.id = wl.checkpoint_id JOIN checkpoints cr ON cr.id = wr.checkpoint_id \
                         JOIN runs r ON r.id = wl.run_id JOIN evals e ON e.id = r.eval_id \
                         JOIN users u ON u.id = l.rater_id \
                         WHERE ($1 IS NULL OR r.eval_id = $1) ORDER BY l.task_id, l.id",
                    )
                    .bind(eval_id)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            let choice: String = row.read("choice")?;
                            let choice = Preference::parse(&choice)
                                .map_err(|message| sqlx::Error::Decode(message.into()))?;
                            Ok($crate::read_columns!(row, PreferenceRow {
                                eval_id,
                                eval_name,
                                task_id,
                                left_checkpoint_id,
                                left_checkpoint,
                                right_checkpoint_id,
                                right_checkpoint,
                                rater_id,
                                rater,
                                ;
                                choice: choice,
                            }))
                        })
                        .collect::<Result<Vec<_>, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("preference_rows"))
            }
        }
    };
}
pub(crate) use preferences_sql;
