//! The open human queue read for its SLA figures: open tasks summed by serving slot (priority,
//! deadline) and queue, and one slot's tasks in id order when the scan needs them one by one
//! (see [`arbiter_domain::annotation::queue_scan`]).
//!
//! The sums come from one covering index over the open tasks (`annotation_tasks_open_report_idx`),
//! so a million open tasks are read as a few thousand groups without touching the table.

use crate::StoreResult;
use arbiter_domain::annotation::queue_scan::{OpenGroup, OpenTask, SlotRequest, SlotTask};
use async_trait::async_trait;

/// Which of a slot's tasks to return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotFilter {
    /// Only tasks with less than the at-risk share of their SLA window left.
    pub only_short_of_window: bool,
    /// Only tasks not escalated yet.
    pub only_unescalated: bool,
    /// At most this many.
    pub limit: Option<usize>,
}

#[async_trait]
pub trait OpenQueueStore: Send + Sync {
    /// Calls `visit` with the open tasks summed by priority, deadline and run (named by its
    /// queue), in serving order, as of `now`.
    async fn scan_open_groups(
        &self,
        now: i64,
        visit: &mut (dyn FnMut(OpenGroup) + Send),
    ) -> StoreResult<()>;

    /// Calls `visit` with every open task in serving order, one by one: the reference the sums
    /// are checked against (by tests and `arbiter bench annotators`). It finds each task's
    /// queue through its items rather than the run copied onto it, so it checks that copy too;
    /// over a million tasks it takes seconds.
    async fn scan_open_tasks(&self, visit: &mut (dyn FnMut(OpenTask) + Send)) -> StoreResult<()>;

    /// The open tasks of `slot` in id order, each with the labels missing on it and on the
    /// slot's tasks before it, as `filter` picks them.
    async fn open_slot_tasks(
        &self,
        now: i64,
        slot: &SlotRequest,
        filter: SlotFilter,
    ) -> StoreResult<Vec<SlotTask>>;
}

/// The SQL of [`OpenQueueStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! open_queue_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::open_queue::SlotFilter;
        use $crate::StoreResult;
        use arbiter_domain::annotation::queue_scan::{
            OpenGroup, OpenTask, SlotRequest, SlotTask, AGE_BUCKETS, AT_RISK_SHARE_LEFT,
        };
        use arbiter_domain::annotation::pushed::PUSHED_QUEUE;
        use arbiter_domain::ids::TaskId;
        use std::collections::HashMap;

        /// A task's labels still needed, never below zero.
        const MISSING: &str =
            "CASE WHEN labels_needed > labels_done THEN labels_needed - labels_done ELSE 0 END";

        /// Whether a task has less than the at-risk share of its window left, with `now`, the
        /// share's denominator and its numerator as the three placeholders given; the same
        /// comparison as `queue_scan::short_of_window`.
        fn short_of_window(now: usize, whole: usize, share: usize) -> String {
            format!(
                "((due_at - ${now}) * ${whole} < \
                  (CASE WHEN due_at - created_at > 1 THEN due_at - created_at ELSE 1 END) * ${share})"
            )
        }

        /// Queue names by run, read once: joining every open task to its run and eval would
        /// double the cost of the scan.
        async fn queues_by_run(pool: &sqlx::Pool<$db>) -> StoreResult<HashMap<i64, String>> {
            Ok(sqlx::query_as::<_, (i64, String)>(
                "SELECT r.id, e.name FROM runs r JOIN evals e ON e.id = r.eval_id",
            )
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect())
        }

        /// The queue a task is reported under: its run's eval, or one queue for every item
        /// pushed from outside (which has no run; the sums are kept by run).
        fn queue_of(queues: &HashMap<i64, String>, run_id: Option<i64>) -> String {
            match run_id {
                Some(run_id) => queues.get(&run_id).cloned().unwrap_or_default(),
                None => PUSHED_QUEUE.to_string(),
            }
        }

        async fn visit_open_groups(
            pool: &sqlx::Pool<$db>,
            now: i64,
            visit: &mut (dyn FnMut(OpenGroup) + Send),
        ) -> StoreResult<()> {
            use futures::TryStreamExt;
            use sqlx::Row as _;
            let queues = queues_by_run(pool).await?;
            const BOUNDS: usize = AGE_BUCKETS.len() - 1;
            let younger: Vec<String> = (0..BOUNDS)
                .map(|bound| {
                    format!(
                        "CAST(SUM(CASE WHEN $1 - created_at < ${} THEN 1 ELSE 0 END) AS BIGINT)",
                        bound + 4
                    )
                })
                .collect();
            let sql = format!(
                "SELECT priority, due_at, run_id, COUNT(*), CAST(SUM({MISSING}) AS BIGINT), \
                        CAST(SUM(CASE WHEN escalated_at IS NULL THEN 0 ELSE 1 END) AS BIGINT), \
                        CAST(SUM(CASE WHEN {short} THEN 1 ELSE 0 END) AS BIGINT), \
                        CAST(SUM(CASE WHEN escalated_at IS NOT NULL AND {short} THEN 1 ELSE 0 END) AS BIGINT), \
                        {younger} \
                 FROM annotation_tasks WHERE state = 'open' \
                 GROUP BY priority, due_at, run_id ORDER BY priority DESC, due_at, run_id",
                short = short_of_window(1, 2, 3),
                younger = younger.join(", "),
            );
            let mut query = sqlx::query(&sql)
                .bind(now)
                .bind(AT_RISK_SHARE_LEFT.1)
                .bind(AT_RISK_SHARE_LEFT.0);
            for (_, upper) in &AGE_BUCKETS[..BOUNDS] {
                query = query.bind(*upper);
            }
            let mut rows = query.fetch(pool);
            let count = |value: i64| value.max(0) as u64;
            while let Some(row) = rows.try_next().await? {
                let mut younger_than = [0; BOUNDS];
                for (bound, slot) in younger_than.iter_mut().enumerate() {
                    *slot = count(row.try_get(8 + bound)?);
                }
                visit(OpenGroup {
                    queue: queue_of(&queues, row.try_get(2)?),
                    priority: row.try_get(0)?,
                    due_at: row.try_get(1)?,
                    tasks: count(row.try_get(3)?),
                    labels_missing: count(row.try_get(4)?),
                    escalated: count(row.try_get(5)?),
                    short_of_window: count(row.try_get(6)?),
                    short_of_window_escalated: count(row.try_get(7)?),
                    younger_than,
                });
            }
            Ok(())
        }

        async fn visit_open_tasks(
            pool: &sqlx::Pool<$db>,
            visit: &mut (dyn FnMut(OpenTask) + Send),
        ) -> StoreResult<()> {
            use futures::TryStreamExt;
            let queues = queues_by_run(pool).await?;
            let mut rows = sqlx::query_as::<_, (i64, Option<i64>, i64, i64, i64, i64, Option<i64>)>(
                "SELECT t.id, w.run_id, t.priority, t.created_at, t.due_at, t.labels_needed - t.labels_done, \
                        t.escalated_at \
                 FROM annotation_tasks t LEFT JOIN preference_pairs p ON p.task_id = t.id \
                 LEFT JOIN work_items w ON w.id = COALESCE(t.work_item_id, p.left_item_id) \
                 WHERE t.state = 'open' ORDER BY t.priority DESC, t.due_at, t.id",
            )
            .fetch(pool);
            while let Some((id, run_id, priority, created_at, due_at, missing, escalated_at)) = rows.try_next().await? {
                visit(OpenTask {
                    id: TaskId(id),
                    queue: queue_of(&queues, run_id),
                    priority,
                    created_at,
                    due_at,
                    labels_missing: missing,
                    escalated: escalated_at.is_some(),
                });
            }
            Ok(())
        }

        async fn tasks_of_slot(
            pool: &sqlx::Pool<$db>,
            now: i64,
            slot: &SlotRequest,
            filter: SlotFilter,
        ) -> StoreResult<Vec<SlotTask>> {
            let queues = queues_by_run(pool).await?;
            // The running shortfall is summed over the whole slot before the filter applies:
            // it places each task in the forecast.
            let sql = format!(
                "SELECT id, run_id, created_at, missing, escalated_at, through FROM (\
                   SELECT id, run_id, created_at, due_at, escalated_at, {MISSING} AS missing, \
                          CAST(SUM({MISSING}) OVER (ORDER BY id) AS BIGINT) AS through \
                   FROM annotation_tasks WHERE state = 'open' AND priority = $1 AND due_at = $2\
                 ) slot \
                 WHERE (NOT $3 OR escalated_at IS NULL) AND (NOT $4 OR {short}) \
                 ORDER BY id LIMIT $8",
                short = short_of_window(5, 6, 7),
            );
            let rows: Vec<(i64, Option<i64>, i64, i64, Option<i64>, i64)> = sqlx::query_as(&sql)
                .bind(slot.priority)
                .bind(slot.due_at)
                .bind(filter.only_unescalated)
                .bind(filter.only_short_of_window)
                .bind(now)
                .bind(AT_RISK_SHARE_LEFT.1)
                .bind(AT_RISK_SHARE_LEFT.0)
                .bind(filter.limit.map_or(i64::MAX, |limit| limit as i64))
                .fetch_all(pool)
                .await?;
            Ok(rows
                .into_iter()
                .map(|(id, run_id, created_at, missing, escalated_at, through)| SlotTask {
                    task: OpenTask {
                        id: TaskId(id),
                        queue: queue_of(&queues, run_id),
                        priority: slot.priority,
                        created_at,
                        due_at: slot.due_at,
                        labels_missing: missing,
                        escalated: escalated_at.is_some(),
                    },
                    missing_through: through.max(0) as u64,
                })
                .collect())
        }

        #[async_trait::async_trait]
        impl $crate::open_queue::OpenQueueStore for $store {
            async fn scan_open_groups(
                &self,
                now: i64,
                visit: &mut (dyn FnMut(OpenGroup) + Send),
            ) -> StoreResult<()> {
                visit_open_groups(&self.pool, now, visit)
                    .await
                    .map_err(|err| err.during("scan_open_groups"))
            }

            async fn scan_open_tasks(&self, visit: &mut (dyn FnMut(OpenTask) + Send)) -> StoreResult<()> {
                visit_open_tasks(&self.pool, visit)
                    .await
                    .map_err(|err| err.during("scan_open_tasks"))
            }

            async fn open_slot_tasks(
                &self,
                now: i64,
                slot: &SlotRequest,
                filter: SlotFilter,
            ) -> StoreResult<Vec<SlotTask>> {
                tasks_of_slot(&self.pool, now, slot, filter)
                    .await
                    .map_err(|err| err.during("open_slot_tasks"))
            }
        }
    };
}
pub(crate) use open_queue_sql;
