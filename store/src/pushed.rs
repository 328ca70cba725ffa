//! Items pushed from outside into named labelling queues, and read back with their labels. A
//! pushed item is an annotation task with no work item (kind `pushed`, or `pair` for two
//! outputs), so the queue in [`crate::annotation`] serves it like any item; here are the
//! queues, the pushes and what the pusher reads back.
//!
//! Invariants, each kept inside one transaction:
//! - a push queues all its new items or none;
//! - content already in the queue is found, never queued twice: two pushes of the same content
//!   racing on PostgreSQL meet on the unique (queue, content hash) key, and the later one
//!   finds the earlier's item.

use crate::StoreResult;
use arbiter_domain::annotation::pushed::{PushReceipt, PushedItem, PushedRecord};
use arbiter_domain::ids::UserId;
use arbiter_domain::run::Priority;
use async_trait::async_trait;

/// A checked push, as the store queues it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewPush {
    /// The queue's name; made, owned by `team`, on its first push.
    pub queue: String,
    pub team: String,
    /// The rubric version single outputs are labelled by (`None`: pass or fail).
    pub rubric_id: Option<i64>,
    /// Raters per item.
    pub labels_needed: i64,
    pub priority: Priority,
    /// Only raters with this skill are offered the items.
    pub skill: Option<String>,
    pub pushed_by: UserId,
    pub items: Vec<PushedItem>,
}

#[async_trait]
pub trait PushedItemStore: Send + Sync {
    /// The team owning the queue of this name, if there is one.
    async fn pushed_queue_team(&self, name: &str) -> StoreResult<Option<String>>;

    /// Queues the push's items not already in its queue (by content hash), in one
    /// transaction; a receipt per item in the order pushed.
    async fn push_items(&self, push: &NewPush) -> StoreResult<Vec<PushReceipt>>;

    /// The queue's items with task ids above `after`, in push order, at most `limit`, each with
    /// its outcome and labels. `NotFound` when no queue has that name.
    async fn pushed_items(
        &self,
        queue: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<PushedRecord>>;
}

/// The SQL of [`PushedItemStore`], for both backends (expanded once per backend by
/// `backend_sql!`).
macro_rules! pushed_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::pushed::NewPush;
        use $crate::ReadColumn as _;
        use $crate::{now_ms, StoreError, StoreResult};
        use arbiter_domain::annotation::adjudication::sla_hours;
        use arbiter_domain::annotation::pushed::{first_on_left, PushReceipt, PushedRecord};
        use super::label_events_sql::{json_column, labels_by_task, pushed_origin};

        /// The queue's id, made for `push.team` when it does not exist yet.
        async fn queue_id(
            tx: &mut sqlx::Transaction<'_, $db>,
            push: &NewPush,
            now: i64,
        ) -> Result<i64, sqlx::Error> {
            sqlx::query(
                "INSERT INTO pushed_queues (name, team, created_by, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(&push.queue)
            .bind(&push.team)
            .bind(push.pushed_by.get())
            .bind(now)
            .execute(&mut **tx)
            .await?;
            sqlx::query_scalar("SELECT id FROM pushed_queues WHERE name = $1")
                .bind(&push.queue)
                .fetch_one(&mut **tx)
                .await
        }

        async fn insert_push(writer: &sqlx::Pool<$db>, push: &NewPush) -> StoreResult<Vec<PushReceipt>> {
            let now = now_ms();
            let due_at = now + sla_hours(push.priority) * 3_600_000;
            let mut tx = writer.begin_with($begin).await?;
            let queue_id = queue_id(&mut tx, push, now).await?;
            // New items get their tasks in push order (so the queue serves and reads back a
            // push in the order sent), then their rows in content-hash order, so two pushes
            // sharing items in another order wait on each other's unique keys instead of
            // deadlocking on PostgreSQL. Receipts come back in push order.
            let mut receipts: Vec<Option<PushReceipt>> = vec![None; push.items.len()];
            let mut allocated: Vec<(usize, String, i64)> = Vec::new();
            for (index, item) in push.items.iter().enumerate() {
                let content_hash = item.content_hash();
                let existing: Option<i64> = sqlx::query_scalar(
                    "SELECT task_id FROM pushed_items WHERE queue_id = $1 AND content_hash = $2",
                )
                .bind(queue_id)
                .bind(&content_hash)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(task_id) = existing {
                    receipts[index] = Some(PushReceipt { task_id, content_hash, created: false });
                    continue;
                }
                let (kind, rubric_id) = if item.is_pair() {
                    ("pair", None)
                } else {
                    ("pushed", push.rubric_id)
                };
                let task_id: i64 = sqlx::query_scalar(
                    "INSERT INTO annotation_tasks (work_item_id, reason, kind, labels_needed, review_rate, \
                     priority, skill, due_at, state, created_at, rubric_id) \
                     VALUES (NULL, $1, $2, $3, $4, $5, $6, $7, 'open', $8, $9) RETURNING id",
                )
                .bind(format!("pushed to queue {}", push.queue))
                .bind(kind)
                .bind(push.labels_needed)
                .bind(arbiter_domain::grading::triage::DEFAULT_REVIEW_RATE)
                .bind(push.priority.rank())
                .bind(push.skill.as_deref())
                .bind(due_at)
                .bind(now)
                .bind(rubric_id)
                .fetch_one(&mut *tx)
                .await?;
                allocated.push((index, content_hash, task_id));
            }
            allocated.sort_by(|a, b| a.1.cmp(&b.1));
            for (index, content_hash, task_id) in allocated {
                let item = &push.items[index];
                // On PostgreSQL another push of this content may have committed since the read
                // above (the insert waits for it), or this push holds the same content twice:
                // then the first item is the one, and this task goes.
                let inserted: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO pushed_items (task_id, queue_id, content_hash, input, target, first_output, \
                     second_output, first_on_left, metadata, pushed_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                     ON CONFLICT (queue_id, content_hash) DO NOTHING RETURNING task_id",
                )
                .bind(task_id)
                .bind(queue_id)
                .bind(&content_hash)
                .bind(&item.input)
                .bind(&item.target)
                .bind(&item.outputs[0])
                .bind(item.outputs.get(1))
                .bind(!item.is_pair() || first_on_left(&content_hash))
                .bind(item.metadata.to_string())
                .bind(push.pushed_by.get())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                if inserted.is_some() {
                    receipts[index] = Some(PushReceipt { task_id, content_hash, created: true });
                    continue;
                }
                sqlx::query("DELETE FROM annotation_tasks WHERE id = $1")
                    .bind(task_id)
                    .execute(&mut *tx)
                    .await?;
                let task_id: i64 = sqlx::query_scalar(
                    "SELECT task_id FROM pushed_items WHERE queue_id = $1 AND content_hash = $2",
                )
                .bind(queue_id)
                .bind(&content_hash)
                .fetch_one(&mut *tx)
                .await?;
                receipts[index] = Some(PushReceipt { task_id, content_hash, created: false });
            }
            tx.commit().await?;
            Ok(receipts.into_iter().flatten().collect())
        }

        async fn read_pushed(
            pool: &sqlx::Pool<$db>,
            queue: &str,
            after: i64,
            limit: i64,
        ) -> StoreResult<Vec<PushedRecord>> {
            let queue_id: Option<i64> = sqlx::query_scalar("SELECT id FROM pushed_queues WHERE name = $1")
                .bind(queue)
                .fetch_optional(pool)
                .await?;
            let Some(queue_id) = queue_id else {
                return Err(StoreError::NotFound(format!("no queue of pushed items is named `{queue}`")));
            };
            let rows = sqlx::query(
                "SELECT t.id AS task_id, t.kind, t.state, t.labels_needed, t.labels_done, t.decided_at, \
                        t.consensus, pi.verdict, pi.created_at AS pushed_at, pi.content_hash, pi.metadata, \
                        pi.first_on_left, pq.name AS pushed_queue, rb.name AS rubric, rb.version AS rubric_version \
                 FROM pushed_items pi JOIN annotation_tasks t ON t.id = pi.task_id \
                 JOIN pushed_queues pq ON pq.id = pi.queue_id \
                 LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                 WHERE pi.queue_id = $1 AND pi.task_id > $2 ORDER BY pi.task_id LIMIT $3",
            )
            .bind(queue_id)
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let mut records = Vec::with_capacity(rows.len());
            for row in &rows {
                let state: String = row.read("state")?;
                let consensus = json_column(row.read("consensus")?);
                let decided_at: Option<i64> = row.read("decided_at")?;
                let origin = pushed_origin(row, consensus.as_ref())?
                    .expect("every pushed item is in a queue");
                records.push($crate::read_columns!(row, PushedRecord {
                    task_id,
                    kind,
                    labels_needed,
                    labels_done,
                    pushed_at,
                    verdict,
                    rubric,
                    rubric_version;
                    origin: origin,
                    // A reviewer's rejection reopens an item: its earlier decision is withdrawn.
                    decided_at: decided_at.filter(|_| state == "done"),
                    state: match (state.as_str(), decided_at) {
                        ("done", Some(_)) => "decided",
                        ("done", None) => "awaiting_review",
                        _ => "open",
                    }
                    .to_string(),
                    consensus: consensus,
                    labels: Vec::new(),
                }));
            }
            let task_ids: Vec<i64> = records.iter().map(|record| record.task_id).collect();
            let mut labels = labels_by_task(pool, &task_ids).await?;
            for record in &mut records {
                record.labels = labels.remove(&record.task_id).unwrap_or_default();
            }
            Ok(records)
        }

        #[async_trait::async_trait]
        impl $crate::pushed::PushedItemStore for $store {
            async fn pushed_queue_team(&self, name: &str) -> StoreResult<Option<String>> {
                let result: StoreResult<Option<String>> = async move {
                    Ok(sqlx::query_scalar("SELECT team FROM pushed_queues WHERE name = $1")
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?)
                }
                .await;
                result.map_err(|err| err.during("pushed_queue_team"))
            }

            async fn push_items(&self, push: &NewPush) -> StoreResult<Vec<PushReceipt>> {
                insert_push(&self.writer, push).await.map_err(|err| err.during("push_items"))
            }

            async fn pushed_items(&self, queue: &str, after: i64, limit: i64) -> StoreResult<Vec<PushedRecord>> {
                read_pushed(&self.pool, queue, after, limit)
                    .await
                    .map_err(|err| err.during("pushed_items"))
            }
        }
    };
}
pub(crate) use pushed_sql;
