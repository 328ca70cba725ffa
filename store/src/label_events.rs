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
            DecidedItem, DecidedLabel, DecidedPair, PairSide,
        };

        fn json_column(text: Option<String>) -> Option<serde_json::Value> {
            text.and_then(|text| serde_json::from_str(&text).ok())
        }

        async fn read_decided(
            pool: &sqlx::Pool<$db>,
            (after_at, after_id): DecidedCursor,
            upto: i64,
            limit: i64,
        ) -> StoreResult<Vec<DecidedItem>> {
            // A pair's left item stands for it; its right side is joined apart.
            let rows = sqlx::query(
                "SELECT t.id AS task_id, t.kind, t.decided_at, t.consensus, e.name AS eval, w.run_id, \
                        w.id AS work_item_id, w.case_id, w.repetition, w.turn, c.name AS checkpoint, w.verdict, \
                        rb.name AS rubric, rb.version AS rubric_version, \
                        rw.run_id AS right_run_id, rw.id AS right_item_id, rc.name AS right_checkpoint \
                 FROM annotation_tasks t \
                 LEFT JOIN preference_pairs p ON p.task_id = t.id \
                 JOIN work_items w ON w.id = COALESCE(t.work_item_id, p.left_item_id) \
                 JOIN checkpoints c ON c.id = w.checkpoint_id \
                 JOIN runs r ON r.id = w.run_id \
                 JOIN evals e ON e.id = r.eval_id \
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
                let left = PairSide {
                    run_id: row.read("run_id")?,
                    work_item_id: row.read("work_item_id")?,
                    checkpoint: row.read("checkpoint")?,
                };
                let pair = match right_run {
                    Some(run_id) => Some(DecidedPair {
                        right: PairSide {
                            run_id,
                            work_item_id: row.read("right_item_id")?,
                            checkpoint: row.read("right_checkpoint")?,
                        },
                        left: left.clone(),
                    }),
                    None => None,
                };
                let verdict: Option<String> = row.read("verdict")?;
                items.push($crate::read_columns!(row, DecidedItem {
                    task_id,
                    kind,
                    decided_at,
                    eval,
                    case_id,
                    repetition,
                    turn,
                    rubric,
                    rubric_version;
                    run_id: left.run_id,
                    work_item_id: left.work_item_id,
                    checkpoint: left.checkpoint,
                    verdict: verdict.filter(|_| pair.is_none()),
                    consensus: json_column(row.read("consensus")?),
                    pair: pair,
                    labels: Vec::new(),
                }));
            }
            if items.is_empty() {
                return Ok(items);
            }
            // By the page's task ids (integers read above, so safe to inline): a task decided
            // again since the read above keeps its labels in this page.
            let ids = items
                .iter()
                .map(|item| item.task_id.to_string())
                .collect::<Vec<_>>()
                .join(",");
            let labels = sqlx::query(&format!(
                "SELECT l.task_id, u.username AS rater, l.verdict, NULL AS choice, l.answers, l.rationale, \
                        l.duration_ms, l.state, l.guideline_version, l.created_at AS labelled_at, l.id \
                 FROM labels l JOIN users u ON u.id = l.annotator_id \
                 WHERE l.task_id IN ({ids}) \
                 UNION ALL \
                 SELECT l.task_id, u.username, NULL, l.choice, NULL, l.rationale, \
                        l.duration_ms, 'standing', NULL, l.created_at, l.id \
                 FROM preference_labels l JOIN users u ON u.id = l.rater_id \
                 WHERE l.task_id IN ({ids}) \
                 ORDER BY 1, 11"
            ))
            .fetch_all(pool)
            .await?;
            let position: std::collections::HashMap<i64, usize> = items
                .iter()
                .enumerate()
                .map(|(index, item)| (item.task_id, index))
                .collect();
            for row in &labels {
                let task_id: i64 = row.read("task_id")?;
                let Some(&index) = position.get(&task_id) else {
                    continue;
                };
                items[index].labels.push($crate::read_columns!(row, DecidedLabel {
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
