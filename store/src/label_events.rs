//! Items' human outcomes in the order they were decided, for the `label.completed` webhook.
//! The queue stamps `annotation_tasks.decided_at` on each decision (see [`crate::annotation`]
//! and [`crate::preferences`]); here they are read back a page at a time with their labels.

use crate::StoreResult;
use arbiter_domain::annotation::decided::DecidedItem;
use async_trait::async_trait;

/// Where a page of decided items starts: after this (decided_at, task id).
pub type DecidedCursor = (i64, i64);

#[async_trait]
pub trait LabelEventStore: Send + Sync {
    /// Items decided after `after` and at or before `upto`, in (decided_at, task id) order, at
    /// most `limit`, each with all its labels.
    async fn decided_items(
        &self,
        after: DecidedCursor,
        upto: i64,
        limit: i64,
    ) -> StoreResult<Vec<DecidedItem>>;
}

/// The SQL of [`LabelEventStore`], for both backends (expanded once per backend by
/// `backend_sql!`).
macro_rules! label_events_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::label_events::DecidedCursor;
        use $crate::ReadColumn as _;
        use $crate::StoreResult;
        use arbiter_domain::annotation::decided::{
            DecidedItem, DecidedLabel, DecidedPair, PairSide, PushedOrigin,
        };
        use arbiter_domain::annotation::preference::Preference;
        use arbiter_domain::annotation::pushed::preferred_output;

        pub(super) fn json_column(text: Option<String>) -> Option<serde_json::Value> {
            text.and_then(|text| serde_json::from_str(&text).ok())
        }

        /// A pushed item's origin from a row with `pushed_queue`, `content_hash`, `metadata` and
        /// `first_on_left` (all NULL for an item of a run); a pair's preferred output is read
        /// from its `consensus`.
        pub(super) fn pushed_origin(
            row: &<$db as sqlx::Database>::Row,
            consensus: Option<&serde_json::Value>,
        ) -> Result<Option<PushedOrigin>, sqlx::Error> {
            let Some(queue) = row.read::<Option<String>>("pushed_queue")? else {
                return Ok(None);
            };
            let is_pair = row.read::<String>("kind")? == "pair";
            let first_on_left: bool = row.read("first_on_left")?;
            let preferred_output = consensus
                .and_then(|consensus| consensus.get("choice"))
                .and_then(serde_json::Value::as_str)
                .and_then(|choice| Preference::parse(choice).ok())
                .and_then(|choice| preferred_output(choice, first_on_left));
            Ok(Some(PushedOrigin {
                queue,
                content_hash: row.read("content_hash")?,
                metadata: json_column(row.read("metadata")?).unwrap_or_default(),
                first_on_left: is_pair.then_some(first_on_left),
                preferred_output: preferred_output.filter(|_| is_pair),
            }))
        }

        /// Every label on these tasks (rubric and pass/fail labels, and pairs' preferences), by
        /// task, each task's in the order given. The ids are integers, so safe to inline.
        pub(super) async fn labels_by_task(
            pool: &sqlx::Pool<$db>,
            task_ids: &[i64],
        ) -> Result<std::collections::HashMap<i64, Vec<DecidedLabel>>, sqlx::Error> {
            let mut by_task: std::collections::HashMap<i64, Vec<DecidedLabel>> =
                std::collections::HashMap::new();
            if task_ids.is_empty() {
                return Ok(by_task);
            }
            let ids = task_ids
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let labels = sqlx::query(&format!(
                "SELECT l.task_id, u.username AS rater, l.verdict, NULL AS choice, l.answers, l.rationale, \
                        l.duration_ms, l.state, l.guideline_version, l.created_at AS labelled_at, l.id \
                 FROM labels l JOIN users u ON u.id = l.annotator_id \
                 WHERE l.task_id IN ({ids}) \
                 UNION ALL \
                 SELECT l.task_id, u.username, NULL, l.choice, l.dimensions, l.rationale, \
                        l.duration_ms, l.state, NULL, l.created_at, l.id \
                 FROM preference_labels l JOIN users u ON u.id = l.rater_id \
                 WHERE l.task_id IN ({ids}) \
                 ORDER BY 1, 11"
            ))
            .fetch_all(pool)
            .await?;
            for row in &labels {
                let task_id: i64 = row.read("task_id")?;
                by_task.entry(task_id).or_default().push($crate::read_columns!(row, DecidedLabel {
                    rater,
                    verdict,
                    choice,
                    rationale,
                    duration_ms,
                    state,
                    guideline_version,
                    labelled_at;
                    answers: json_column(row.read("answers")?),
                }));
            }
            Ok(by_task)
        }

        async fn read_decided(
            pool: &sqlx::Pool<$db>,
            (after_at, after_id): DecidedCursor,
            upto: i64,
            limit: i64,
        ) -> StoreResult<Vec<DecidedItem>> {
            // A pair's left item stands for it; its right side is joined apart.
            // A pushed item has no run: its origin is in pushed_items instead.
            let rows = sqlx::query(
                "SELECT t.id AS task_id, t.kind, t.decided_at, t.consensus, e.name AS eval, w.run_id, \
                        w.id AS work_item_id, w.case_id, w.repetition, w.turn, c.name AS checkpoint, \
                        COALESCE(w.verdict, pi.verdict) AS verdict, \
                        rb.name AS rubric, rb.version AS rubric_version, \
                        rw.run_id AS right_run_id, rw.id AS right_item_id, rc.name AS right_checkpoint, \
                        pq.name AS pushed_queue, pi.content_hash, pi.metadata, pi.first_on_left \
                 FROM annotation_tasks t \
                 LEFT JOIN preference_pairs p ON p.task_id = t.id \
                 LEFT JOIN work_items w ON w.id = COALESCE(t.work_item_id, p.left_item_id) \
                 LEFT JOIN checkpoints c ON c.id = w.checkpoint_id \
                 LEFT JOIN runs r ON r.id = w.run_id \
                 LEFT JOIN evals e ON e.id = r.eval_id \
                 LEFT JOIN pushed_items pi ON pi.task_id = t.id \
                 LEFT JOIN pushed_queues pq ON pq.id = pi.queue_id \
                 LEFT JOIN work_items rw ON rw.id = p.right_item_id \
                 LEFT JOIN checkpoints rc ON rc.id = rw.checkpoint_id \
                 LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                 WHERE t.decided_at IS NOT NULL AND t.state = 'done' AND t.decided_at <= $3 \
                   AND (t.decided_at > $1 OR (t.decided_at = $1 AND t.id > $2)) \
                 ORDER BY t.decided_at, t.id LIMIT $4",
            )
            .bind(after_at)
            .bind(after_id)
            .bind(upto)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let mut items = Vec::with_capacity(rows.len());
            for row in &rows {
                let right_run: Option<i64> = row.read("right_run_id")?;
                let left_run: Option<i64> = row.read("run_id")?;
                let pair = match (left_run, right_run) {
                    (Some(left_run), Some(right_run)) => Some(DecidedPair {
                        left: PairSide {
                            run_id: left_run,
                            work_item_id: row.read("work_item_id")?,
                            checkpoint: row.read("checkpoint")?,
                        },
                        right: PairSide {
                            run_id: right_run,
                            work_item_id: row.read("right_item_id")?,
                            checkpoint: row.read("right_checkpoint")?,
                        },
                    }),
                    _ => None,
                };
                let consensus = json_column(row.read("consensus")?);
                let pushed = pushed_origin(row, consensus.as_ref())?;
                let single = pair.is_none() && pushed.as_ref().is_none_or(|origin| origin.first_on_left.is_none());
                let verdict: Option<String> = row.read("verdict")?;
                items.push($crate::read_columns!(row, DecidedItem {
                    task_id,
                    kind,
                    decided_at,
                    eval,
                    run_id,
                    work_item_id,
                    case_id,
                    repetition,
                    turn,
                    checkpoint,
                    rubric,
                    rubric_version;
                    verdict: verdict.filter(|_| single),
                    consensus: consensus,
                    pair: pair,
                    pushed: pushed,
                    labels: Vec::new(),
                }));
            }
            if items.is_empty() {
                return Ok(items);
            }
            let task_ids: Vec<i64> = items.iter().map(|item| item.task_id).collect();
            let mut labels = labels_by_task(pool, &task_ids).await?;
            for item in &mut items {
                item.labels = labels.remove(&item.task_id).unwrap_or_default();
            }
            Ok(items)
        }

        #[async_trait::async_trait]
        impl $crate::label_events::LabelEventStore for $store {
            async fn decided_items(
                &self,
                after: DecidedCursor,
                upto: i64,
                limit: i64,
            ) -> StoreResult<Vec<DecidedItem>> {
                read_decided(&self.pool, after, upto, limit)
                    .await
                    .map_err(|err| err.during("decided_items"))
            }
        }
    };
}
pub(crate) use label_events_sql;
