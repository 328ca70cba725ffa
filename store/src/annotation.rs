//! The human annotation queue.
//!
//! Invariants, each kept inside one transaction:
//! - a rater holds at most one lease (a unique key), and never on an item they labelled or
//!   skipped;
//! - an item never has more live leases plus standing labels than the raters it needs, so
//!   exactly `labels_needed` distinct raters label it, even under concurrent claims (SQLite has
//!   one writer; PostgreSQL locks the task row it hands out) and expired leases (not counted);
//! - a label is accepted only from the rater holding a live lease, once;
//! - when the last label arrives the item is adjudicated, and a reviewer's rejection reopens it.
//!
//! Also here: senior review and its spot checks, gold items and training, the rater pool, and
//! the queue's SLA figures (labelling flow, escalation; the open tasks are summed in
//! [`crate::open_queue`]).

use crate::StoreResult;
use arbiter_domain::accounts::PasswordHash;
use arbiter_domain::annotation::gold::{GoldAnswer, GoldCandidate, GoldItem};
use arbiter_domain::annotation::pool::{NewRater, RaterRecord, RaterUpdate};
use arbiter_domain::annotation::review::{OwnLabel, ReviewDecision, ReviewItem};
use arbiter_domain::annotation::sla::LabellingFlow;
use arbiter_domain::annotation::task::{
    AnnotationTask, ClaimHandle, QueueCounts, QueueLabel, RunLabel, TrainingFeedback,
};
use arbiter_domain::ids::{RunId, TaskId, UserId};
use async_trait::async_trait;

/// One label as exported: who gave it and how, and what became of it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LabelRecord {
    pub label_id: i64,
    pub run_id: i64,
    pub work_item_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub turn: i64,
    pub checkpoint: String,
    pub rater: String,
    /// `pass` or `fail` (for a rubric label, what its answers give).
    pub verdict: String,
    /// The answers to the item's rubric as JSON by dimension key; `None` for pass/fail.
    pub answers: Option<String>,
    pub rationale: String,
    /// Time on task: from the claim to the submission.
    pub duration_ms: Option<i64>,
    pub labelled_at: i64,
    pub edited_at: Option<i64>,
    /// `standing`, or `rejected` by a reviewer.
    pub state: String,
    /// The item is (or was, if retired) a gold item: its answer is known.
    pub gold: bool,
    /// `pending` while the label waits for a reviewer; then the reviewer's decision.
    pub review_state: Option<String>,
    /// `accepted`, `corrected` or `rejected` when a reviewer decided on the label.
    pub review_decision: Option<String>,
    /// The reviewer's verdict when they corrected it.
    pub review_verdict: Option<String>,
    /// The reviewer's answers as JSON by dimension key, when they corrected a rubric label
    /// dimension by dimension.
    pub review_answers: Option<String>,
    pub review_reason: Option<String>,
    /// A spot check of the reviewer's decision: `pending`, `upheld` or `overturned`.
    pub check_state: Option<String>,
    /// The verdict that stands when a spot checker overturned the reviewer.
    pub check_verdict: Option<String>,
    pub check_reason: Option<String>,
    pub rubric: Option<String>,
    pub rubric_version: Option<i64>,
    pub rubric_hash: Option<String>,
    pub guideline_version: Option<i64>,
}

/// A rater's answers to an item's rubric, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct RubricLabel {
    pub rubric_id: i64,
    /// The answers as JSON, by dimension key.
    pub answers: String,
    /// The verdict the rubric's verdict rule gives these answers.
    pub pass: bool,
    pub guideline_version: Option<i64>,
}

#[async_trait]
pub trait AnnotationStore: Send + Sync + 'static {
    /// The annotator's current leased task, or a newly leased open one.
    async fn next_annotation_task(
        &self,
        user_id: UserId,
        lease_ms: i64,
    ) -> StoreResult<Option<AnnotationTask>>;

    /// Records the label of the rater holding the live lease named by `handle`. On a gold item
    /// the answer is recorded as a gold answer instead; a rater in training gets feedback on it.
    async fn submit_label(
        &self,
        handle: &ClaimHandle,
        user_id: UserId,
        pass: bool,
        rationale: &str,
    ) -> StoreResult<Option<TrainingFeedback>>;

    /// A label answering the rubric of the item leased under `handle`: `answers` (JSON by
    /// dimension key, checked by the caller against rubric `rubric_id`, which must be the
    /// item's) with the verdict they give, under guidelines version `guideline_version`.
    async fn submit_rubric_label(
        &self,
        handle: &ClaimHandle,
        user_id: UserId,
        answer: &RubricLabel,
        rationale: &str,
    ) -> StoreResult<Option<TrainingFeedback>>;

    /// The rubric version (by id) of the item this rater holds under `handle` (`None`: pass or
    /// fail); refused when the lease is not theirs or has lapsed.
    async fn leased_rubric(
        &self,
        handle: &ClaimHandle,
        user_id: UserId,
    ) -> StoreResult<Option<i64>>;

    async fn skip_task(&self, handle: &ClaimHandle, user_id: UserId) -> StoreResult<()>;

    /// The label this reviewer holds for review, or the oldest one waiting (drawn for QC, or
    /// on an item whose raters split) on an item they did not label, higher-priority runs
    /// first, which is then served to them alone for a while; else a rater's choice on a pair
    /// waiting likewise; else a decision to spot-check.
    async fn next_review(&self, reviewer_id: UserId) -> StoreResult<Option<ReviewItem>>;

    /// Records a reviewer's decision on a label waiting for review and served to them;
    /// `Conflict` otherwise (not drawn, reviewed already, served to someone else, or on an
    /// item they labelled), `NotFound` for no such label.
    async fn review_label(
        &self,
        label_id: i64,
        reviewer_id: UserId,
        decision: ReviewDecision,
        reason: &str,
    ) -> StoreResult<()>;

    /// The rubric version (by id) a label's item asks and the label's answers to it as JSON
    /// (`None`: a pass/fail label); `NotFound` for no such label.
    async fn label_rubric(&self, label_id: i64) -> StoreResult<Option<(i64, String)>>;

    /// The rater pool with each rater's last 30 days of labels.
    async fn raters(&self) -> StoreResult<Vec<RaterRecord>>;

    /// A lead's change to a rater; pausing or deactivating releases their lease.
    async fn update_rater(&self, user_id: UserId, update: &RaterUpdate) -> StoreResult<()>;

    /// The standing labels on a run's items (for agreement between raters).
    async fn run_labels(&self, run_id: RunId) -> StoreResult<Vec<RunLabel>>;

    async fn annotation_queue_counts(&self) -> StoreResult<QueueCounts>;

    // Quality control and the queue's SLAs.
    /// Creates a rater's account with their pool settings in one statement.
    async fn invite_rater(&self, new: &NewRater, hash: &PasswordHash) -> StoreResult<UserId>;

    /// Another senior's check of a reviewer's decision: `None` upholds it, `Some(pass)`
    /// overturns it with the checker's verdict (which then decides the item).
    async fn check_review(
        &self,
        review_id: i64,
        checker_id: UserId,
        overturn_to: Option<bool>,
        reason: &str,
    ) -> StoreResult<()>;

    /// Makes a task's item (or pair) a gold item with a known answer, a verdict for an item and
    /// a choice for a pair.
    async fn create_gold(
        &self,
        task_id: TaskId,
        answer: GoldAnswer,
        note: &str,
        created_by: UserId,
    ) -> StoreResult<i64>;

    async fn retire_gold(&self, gold_id: i64) -> StoreResult<()>;

    /// Every gold item, live ones first.
    async fn gold_items(&self) -> StoreResult<Vec<GoldItem>>;

    /// Recently finished items that would make good gold (unanimous or reviewer-corrected).
    async fn gold_candidates(&self, limit: i64) -> StoreResult<Vec<GoldCandidate>>;

    async fn labelling_flow(&self, now: i64) -> StoreResult<LabellingFlow>;

    /// Tasks finished per UTC day since `since`, and how many by their deadline.
    async fn sla_days(
        &self,
        since: i64,
    ) -> StoreResult<Vec<arbiter_domain::annotation::sla::SlaDay>>;

    /// Raises the priority of open tasks that are not escalated yet and marks them escalated
    /// (senior raters take them first); returns how many changed.
    async fn escalate_tasks(&self, task_ids: &[TaskId], now: i64) -> StoreResult<u64>;

    /// Standing labels given since `since`, with their queue (eval).
    async fn queue_labels(&self, since: i64) -> StoreResult<Vec<QueueLabel>>;

    /// The labels on `run_id`'s items after `after` (a work item id and a label id: the last
    /// row of the previous page), in item then label order, at most `limit`.
    async fn label_records(
        &self,
        run_id: RunId,
        after: (i64, i64),
        limit: i64,
    ) -> StoreResult<Vec<LabelRecord>>;

    /// The raters' consensus on each decided item of `run_id` that asked a rubric.
    async fn run_consensus(
        &self,
        run_id: RunId,
    ) -> StoreResult<Vec<arbiter_domain::annotation::consensus::Consensus>>;

    /// A rater's feedback: their latest labels that a reviewer corrected or rejected, those
    /// waiting for a reviewer, and those still open to change; newest first, at most `limit`.
    async fn own_labels(&self, rater_id: UserId, limit: i64) -> StoreResult<Vec<OwnLabel>>;

    /// Changes a rater's own label while its item waits for other raters' labels (see
    /// [`arbiter_domain::annotation::review::may_edit`]); refused with the reason otherwise.
    async fn edit_label(
        &self,
        label_id: i64,
        rater_id: UserId,
        pass: bool,
        rationale: &str,
    ) -> StoreResult<()>;

    /// Changes a rater's own rubric label to new answers (JSON by dimension key, checked by the
    /// caller against the label's rubric) with the verdict they give, under the same rule.
    async fn edit_rubric_label(
        &self,
        label_id: i64,
        rater_id: UserId,
        answers: &str,
        pass: bool,
        rationale: &str,
    ) -> StoreResult<()>;
}

/// The SQL of [`AnnotationStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! annotation_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::{IdentityId, RunId, TaskId, UserId};
        use arbiter_domain::annotation::task::{AnnotationTask, ClaimHandle, QueueCounts, RunLabel, TaskRubric, TrainingFeedback};
        use $crate::annotation::{LabelRecord, RubricLabel};
        use arbiter_domain::annotation::gold::{GoldAnswer, DEFAULT_GOLD_RATE, DEFAULT_REVIEW_CHECK_RATE, GOLD_RATE_SETTING, REVIEW_CHECK_RATE_SETTING, TRAINING_ITEMS, next_is_gold, review_is_checked, training_passed};
        use arbiter_domain::annotation::pool::{DEFAULT_QUALITY_THRESHOLD, QUALITY_THRESHOLD_SETTING, RaterLabel, RaterRecord, RaterUpdate};
        use arbiter_domain::accounts::PasswordHash;
        use arbiter_domain::annotation::review::{LabelStanding, OwnLabel, ReviewCheck, ReviewDecision, ReviewItem, ReviewOutcome, may_edit};
        use $crate::{StoreError, StoreResult, now_ms};
        use arbiter_domain::grading::Verdict;
        use arbiter_domain::annotation::adjudication::{Vote, adjudicate, drawn_for_review, rater_quality};
        use arbiter_domain::annotation::consensus::{RubricCorrection, RubricVote, adjudicate_rubric};

        /// Tasks found full on a recount before a claim gives up for this call (the rater asks
        /// again a moment later); only concurrent claims on PostgreSQL make this happen.
        const MAX_FULL_TASKS_PASSED_OVER: usize = 8;

        /// The condition that task `t` has a slot free at time `now` (a bound parameter, or the
        /// server's own clock written as a number): its standing labels plus live leases are
        /// fewer than the raters it needs. One text for the claim, its recount and the counts.
        fn has_free_slot(now: &str) -> String {
            format!(
                "t.labels_done + (SELECT COUNT(*) FROM task_leases x WHERE x.task_id = t.id AND x.expires_at > {now} AND x.gold_id IS NULL) \
                 < t.labels_needed"
            )
        }

        /// Refusal of a pass/fail or rubric label on a pair.
        const PAIR_NOT_LABEL: &str = "this item is a pair of outputs: say which is better (a, b, tie or both bad)";

        /// Joins giving a single item's texts for task `t`: a run's item from its dataset and
        /// generation, or an item pushed from outside from its own row. Read with
        /// [`TASK_ITEM_COLUMNS`] and filtered with [`TASK_ITEM_PRESENT`].
        const TASK_ITEM_JOINS: &str = "LEFT JOIN work_items w ON w.id = t.work_item_id \
             LEFT JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
             LEFT JOIN generations g ON g.work_item_id = w.id \
             LEFT JOIN pushed_items pi ON pi.task_id = t.id";
        /// The identity (NULL for a pushed item), input, target and output of [`TASK_ITEM_JOINS`].
        const TASK_ITEM_COLUMNS: &str = "w.id AS identity_id, COALESCE(i.input, pi.input) AS input, \
             COALESCE(i.target, pi.target) AS target, COALESCE(g.output, pi.first_output) AS output";
        /// The item has its texts (a run's answer purged by retention has none).
        const TASK_ITEM_PRESENT: &str = "(g.output IS NOT NULL OR pi.task_id IS NOT NULL)";

        /// Joins giving the texts of task `t` as its raters see them, an item or a pair: a
        /// pair of runs' answers shows its left item's request and both outputs; an item, its
        /// own; a pushed item or pair, its own texts with its sides as drawn. Read with
        /// [`SHOWN_TASK_COLUMNS`].
        pub(crate) const SHOWN_TASK_JOINS: &str = "LEFT JOIN preference_pairs p ON p.task_id = t.id \
             LEFT JOIN pushed_items pi ON pi.task_id = t.id \
             LEFT JOIN work_items w ON w.id = COALESCE(t.work_item_id, p.left_item_id) \
             LEFT JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
             LEFT JOIN generations g ON g.work_item_id = w.id \
             LEFT JOIN generations r ON r.work_item_id = p.right_item_id";
        /// The identity (of a pair, its left item's), input, target, output (the left one of a
        /// pair) and `right_output` (NULL unless a pair) of [`SHOWN_TASK_JOINS`].
        pub(crate) const SHOWN_TASK_COLUMNS: &str = "w.id AS identity_id, COALESCE(i.input, pi.input) AS input, \
             COALESCE(i.target, pi.target) AS target, \
             COALESCE(g.output, CASE WHEN pi.first_on_left THEN pi.first_output ELSE pi.second_output END) AS output, \
             COALESCE(r.output, CASE WHEN pi.first_on_left THEN pi.second_output ELSE pi.first_output END) AS right_output";

        pub(crate) const NOT_HELD: &str = "this item is not leased to you (it was labelled, skipped or \
            reassigned, or its lease expired); take the next item";

        /// A share-valued setting inside a transaction (the default when unset or unreadable).
        async fn share_setting(
            tx: &mut sqlx::Transaction<'_, $db>,
            name: &str,
            default: f64,
        ) -> Result<f64, sqlx::Error> {
            let value: Option<String> = sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut **tx)
                .await?;
            Ok(value.and_then(|value| value.parse().ok()).unwrap_or(default))
        }

        /// The next open task with a free slot that this rater may take: their skills allow it,
        /// they have neither labelled nor skipped it. `escalated_only` limits the choice to
        /// tasks escalated for missing their SLA (senior raters are offered those first).
        async fn pick_task(
            tx: &mut sqlx::Transaction<'_, $db>,
            user_id: UserId,
            skill_list: &str,
            now: i64,
            escalated_only: bool,
        ) -> Result<Option<i64>, sqlx::Error> {
            let mut passed_over: Vec<i64> = Vec::new();
            loop {
                let mut select = sqlx::QueryBuilder::<$db>::new(
                    "SELECT t.id FROM annotation_tasks t WHERE t.state = 'open' \
                     AND (t.skill IS NULL OR ",
                );
                select.push_bind(skill_list);
                select.push(" LIKE '%,' || t.skill || ',%') AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.task_id = t.id AND l.annotator_id = ");
                select.push_bind(user_id.get());
                select.push(") AND NOT EXISTS (SELECT 1 FROM preference_labels p WHERE p.task_id = t.id AND p.rater_id = ");
                select.push_bind(user_id.get());
                select.push(") AND NOT EXISTS (SELECT 1 FROM annotation_skips s WHERE s.task_id = t.id AND s.user_id = ");
                select.push_bind(user_id.get());
                // A rater who answered an item as gold never labels it for real: they have seen it.
                select.push(") AND NOT EXISTS (SELECT 1 FROM gold_items g JOIN gold_answers a ON a.gold_id = g.id \
                             WHERE g.task_id = t.id AND a.rater_id = ");
                select.push_bind(user_id.get());
                // A pair waiting for its pairwise judge is not offered yet.
                select.push(") AND NOT EXISTS (SELECT 1 FROM preference_pairs jp WHERE jp.task_id = t.id AND jp.judge_state = 'pending')");
                select.push(" AND ").push(has_free_slot(&now.to_string()));
                if escalated_only {
                    select.push(" AND t.escalated_at IS NOT NULL");
                }
                for id in &passed_over {
                    select.push(" AND t.id <> ").push_bind(*id);
                }
                select.push(concat!(" ORDER BY t.priority DESC, t.due_at, t.id LIMIT 1 ", $skip_locked));
                let Some(task_id) = select.build_query_scalar::<i64>().fetch_optional(&mut **tx).await? else {
                    return Ok(None);
                };
                // Count again in a statement of its own, now that the task is ours to lease:
                // on PostgreSQL the choice above saw the leases of its own snapshot, and a
                // claim that held this task a moment ago may have committed one since.
                let free: bool = sqlx::query_scalar(&format!(
                    "SELECT {} FROM annotation_tasks t WHERE t.id = $1",
                    has_free_slot("$2")
                ))
                .bind(task_id)
                .bind(now)
                .fetch_one(&mut **tx)
                .await?;
                if free {
                    return Ok(Some(task_id));
                }
                passed_over.push(task_id);
                if passed_over.len() >= MAX_FULL_TASKS_PASSED_OVER {
                    return Ok(None);
                }
            }
        }

        /// A live gold item this rater has not answered, on an item they have not labelled:
        /// (gold id, task id).
        async fn pick_gold(
            tx: &mut sqlx::Transaction<'_, $db>,
            user_id: UserId,
            skill_list: &str,
        ) -> Result<Option<(i64, i64)>, sqlx::Error> {
            sqlx::query_as(
                "SELECT g.id, g.task_id FROM gold_items g JOIN annotation_tasks t ON t.id = g.task_id \
                 WHERE g.retired_at IS NULL AND (t.skill IS NULL OR $1 LIKE '%,' || t.skill || ',%') \
                 AND NOT EXISTS (SELECT 1 FROM gold_answers a WHERE a.gold_id = g.id AND a.rater_id = $2) \
                 AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.task_id = g.task_id AND l.annotator_id = $2) \
                 AND NOT EXISTS (SELECT 1 FROM preference_labels l WHERE l.task_id = g.task_id AND l.rater_id = $2) \
                 AND NOT EXISTS (SELECT 1 FROM annotation_skips s WHERE s.task_id = g.task_id AND s.user_id = $2) \
                 ORDER BY ((g.id + $2) * 7919) % 10007, g.id LIMIT 1",
            )
            .bind(skill_list)
            .bind(user_id.get())
            .fetch_optional(&mut **tx)
            .await
        }

        /// The rater's live item (its lease renewed), or the next one they may take: a gold
        /// item at the lead's gold rate (always, in training), escalated tasks first for
        /// senior raters, else the head of the queue.
        async fn claim_task(
            writer: &sqlx::Pool<$db>,
            user_id: UserId,
            lease_ms: i64,
        ) -> StoreResult<Option<AnnotationTask>> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let rater: Option<(bool, bool, String, String, Option<i64>)> = sqlx::query_as(
                "SELECT active, paused, skills, role, training_since FROM users WHERE id = $1",
            )
            .bind(user_id.get())
            .fetch_optional(&mut *tx)
            .await?;
            let Some((active, paused, skills, role, training_since)) = rater else {
                return Err(StoreError::NotFound("no such user".into()));
            };
            if !active {
                return Err(StoreError::Conflict("this account is deactivated".into()));
            }
            if paused {
                return Err(StoreError::Conflict(
                    "a lead has paused your labelling; ask them to resume it".into(),
                ));
            }
            let training = training_since.is_some();
            // Renew the rater's own live lease first: "next" never hands out a second item.
            // (A lease from before handles existed gets one here.)
            let mut held: Option<(i64, i64, String)> = sqlx::query_as(
                "UPDATE task_leases SET expires_at = $1, handle = COALESCE(handle, $4) \
                 WHERE rater_id = $2 AND expires_at > $3 RETURNING task_id, expires_at, handle",
            )
            .bind(now + lease_ms)
            .bind(user_id.get())
            .bind(now)
            .bind(ClaimHandle::fresh().0)
            .fetch_optional(&mut *tx)
            .await?;
            if held.is_none() {
                sqlx::query("DELETE FROM task_leases WHERE rater_id = $1")
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
                // Skills as `,code,math,` so one pattern tests membership (tags are checked
                // to be letters, digits and dashes, so they hold no pattern characters).
                let skill_list = format!(",{skills},");
                let serve_gold = training || {
                    let rate = share_setting(&mut tx, GOLD_RATE_SETTING, DEFAULT_GOLD_RATE).await?;
                    next_is_gold(rate, user_id, now)
                };
                let mut picked: Option<(i64, Option<i64>)> = None;
                if serve_gold {
                    picked = pick_gold(&mut tx, user_id, &skill_list)
                        .await?
                        .map(|(gold_id, task_id)| (task_id, Some(gold_id)));
                }
                if picked.is_none() && !training {
                    if matches!(role.as_str(), "reviewer" | "lead" | "admin") {
                        picked = pick_task(&mut tx, user_id, &skill_list, now, true)
                            .await?
                            .map(|task_id| (task_id, None));
                    }
                    if picked.is_none() {
                        picked = pick_task(&mut tx, user_id, &skill_list, now, false)
                            .await?
                            .map(|task_id| (task_id, None));
                    }
                }
                if let Some((task_id, gold_id)) = picked {
                    // Other raters' expired leases on this item are left alone: no count
                    // includes them, and each is removed by its owner's next claim (at most
                    // one per rater). Deleting them here deadlocked on PostgreSQL when two
                    // raters each took the item the other had let lapse.
                    let handle = ClaimHandle::fresh();
                    sqlx::query(
                        "INSERT INTO task_leases (task_id, rater_id, started_at, expires_at, gold_id, handle) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(task_id)
                    .bind(user_id.get())
                    .bind(now)
                    .bind(now + lease_ms)
                    .bind(gold_id)
                    .bind(handle.as_str())
                    .execute(&mut *tx)
                    .await?;
                    held = Some((task_id, now + lease_ms, handle.0));
                }
            }
            let Some((task_id, lease_expires_at, handle)) = held else {
                tx.commit().await?;
                return Ok(None);
            };
            let row = sqlx::query(&format!(
                "SELECT {SHOWN_TASK_COLUMNS}, t.rubric_id FROM annotation_tasks t {SHOWN_TASK_JOINS} WHERE t.id = $1"
            ))
            .bind(task_id)
            .fetch_one(&mut *tx)
            .await?;
            let right_output: Option<String> = row.read("right_output")?;
            let rubric_id: Option<i64> = row.read("rubric_id")?;
            let rubric = match rubric_id {
                Some(rubric_id) => Some(task_rubric(&mut tx, rubric_id).await?),
                None => None,
            };
            tx.commit().await?;
            Ok(Some(AnnotationTask {
                handle: ClaimHandle(handle),
                task_id: TaskId(task_id),
                identity_id: row.read("identity_id")?,
                input: row.read("input")?,
                images: Vec::new(),
                target: row.read("target")?,
                output: row.read("output")?,
                lease_expires_at,
                training,
                shown: None,
                rubric,
                pair: right_output.map(|output| arbiter_domain::annotation::task::TaskPair {
                    right_output: output,
                    right_shown: None,
                }),
            }))
        }

        /// A task's rubric version with the newest guidelines of its name.
        async fn task_rubric(
            tx: &mut sqlx::Transaction<'_, $db>,
            rubric_id: i64,
        ) -> Result<TaskRubric, sqlx::Error> {
            let row = sqlx::query(&format!("{} WHERE r.id = $1", super::rubrics_sql::RUBRIC_SELECT))
                .bind(rubric_id)
                .fetch_one(&mut **tx)
                .await?;
            let version = super::rubrics_sql::rubric_from_row(&row)?;
            let guidelines = sqlx::query(&format!(
                "{} WHERE g.rubric_name = $1 ORDER BY g.version DESC LIMIT 1",
                super::rubrics_sql::GUIDELINES_SELECT
            ))
            .bind(&version.name)
            .fetch_optional(&mut **tx)
            .await?
            .as_ref()
            .map(super::rubrics_sql::guidelines_from_row)
            .transpose()?;
            Ok(TaskRubric {
                version,
                guidelines,
                guidelines_html: String::new(),
            })
        }

        /// The rubric of the task leased to this rater under `handle`.
        async fn rubric_of_lease(
            pool: &sqlx::Pool<$db>,
            handle: &ClaimHandle,
            user_id: UserId,
        ) -> StoreResult<Option<i64>> {
            let row: Option<(Option<i64>,)> = sqlx::query_as(
                "SELECT t.rubric_id FROM task_leases x JOIN annotation_tasks t ON t.id = x.task_id \
                 WHERE x.handle = $1 AND x.rater_id = $2 AND x.expires_at > $3",
            )
            .bind(handle.as_str())
            .bind(user_id.get())
            .bind(now_ms())
            .fetch_optional(pool)
            .await?;
            match row {
                Some((rubric_id,)) => Ok(rubric_id),
                None => Err(StoreError::Conflict(NOT_HELD.into())),
            }
        }

        /// Records a label from the rater holding the item's live lease; adjudicates the item
        /// when it has all its labels. `rubric` carries the answers when the item asks a rubric
        /// (it must be the item's own), `None` for a pass/fail label.
        async fn submit_task_label(
            writer: &sqlx::Pool<$db>,
            handle: &ClaimHandle,
            user_id: UserId,
            pass: bool,
            rationale: &str,
            rubric: Option<&RubricLabel>,
        ) -> StoreResult<Option<TrainingFeedback>> {
            let now = now_ms();
            let verdict = if pass { Verdict::Pass } else { Verdict::Fail };
            let mut tx = writer.begin_with($begin).await?;
            let lease: Option<(i64, i64, Option<i64>)> = sqlx::query_as(
                "DELETE FROM task_leases WHERE handle = $1 AND rater_id = $2 AND expires_at > $3 \
                 RETURNING task_id, started_at, gold_id",
            )
            .bind(handle.as_str())
            .bind(user_id.get())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((task_id, started, gold_id)) = lease else {
                tx.rollback().await?;
                return Err(StoreError::Conflict(NOT_HELD.into()));
            };
            let task_id = TaskId(task_id);
            let (asked, kind): (Option<i64>, String) = sqlx::query_as("SELECT rubric_id, kind FROM annotation_tasks WHERE id = $1")
                .bind(task_id.get())
                .fetch_one(&mut *tx)
                .await?;
            if kind == "pair" {
                tx.rollback().await?;
                return Err(StoreError::Conflict(PAIR_NOT_LABEL.into()));
            }
            if asked != rubric.map(|label| label.rubric_id) {
                tx.rollback().await?;
                return Err(StoreError::Conflict(match asked {
                    Some(_) => "this item asks a rubric: answer its dimensions".into(),
                    None => "this item asks pass or fail, not a rubric".into(),
                }));
            }
            if let Some(gold_id) = gold_id {
                let feedback = record_gold_answer(&mut tx, gold_id, user_id, GoldAnswer::Verdict(pass), now - started, now).await?;
                tx.commit().await?;
                return Ok(feedback);
            }
            let label_id: i64 = sqlx::query_scalar(
                "INSERT INTO labels (task_id, annotator_id, verdict, rationale, created_at, duration_ms, answers, guideline_version) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(task_id.get())
            .bind(user_id.get())
            .bind(verdict.as_str())
            .bind(rationale)
            .bind(now)
            .bind(now - started)
            .bind(rubric.map(|label| label.answers.as_str()))
            .bind(rubric.and_then(|label| label.guideline_version))
            .fetch_one(&mut *tx)
            .await
            .map_err(|err| $crate::conflict_on($backend, err, "labels_task_annotator_key", "you have labelled this item already"))?;
            let (done, needed, review_rate): (i64, i64, f64) = sqlx::query_as(
                "UPDATE annotation_tasks SET labels_done = labels_done + 1 WHERE id = $1 \
                 RETURNING labels_done, labels_needed, review_rate",
            )
            .bind(task_id.get())
            .fetch_one(&mut *tx)
            .await?;
            if drawn_for_review(review_rate, label_id) {
                sqlx::query("UPDATE labels SET review_state = 'pending' WHERE id = $1")
                    .bind(label_id)
                    .execute(&mut *tx)
                    .await?;
            }
            if done >= needed {
                sqlx::query("UPDATE annotation_tasks SET state = 'done', completed_at = $1 WHERE id = $2")
                    .bind(now)
                    .bind(task_id.get())
                    .execute(&mut *tx)
                    .await?;
                adjudicate_task(&mut tx, task_id, now).await?;
            }
            tx.commit().await?;
            Ok(None)
        }

        /// Records a rater's answer to a gold item or pair. In training the rater learns the
        /// right answer, and graduates once enough of their latest answers are right.
        pub(crate) async fn record_gold_answer(
            tx: &mut sqlx::Transaction<'_, $db>,
            gold_id: i64,
            user_id: UserId,
            given: GoldAnswer,
            duration_ms: i64,
            now: i64,
        ) -> StoreResult<Option<TrainingFeedback>> {
            let (answer, note): (String, String) =
                sqlx::query_as("SELECT answer, note FROM gold_items WHERE id = $1")
                    .bind(gold_id)
                    .fetch_one(&mut **tx)
                    .await?;
            let answer = GoldAnswer::parse(&answer).map_err(|message| sqlx::Error::Decode(message.into()))?;
            let training_since: Option<i64> =
                sqlx::query_scalar("SELECT training_since FROM users WHERE id = $1")
                    .bind(user_id.get())
                    .fetch_one(&mut **tx)
                    .await?;
            let correct = answer == given;
            let choice = match given {
                GoldAnswer::Pair(choice) => Some(choice.as_str()),
                GoldAnswer::Verdict(_) => None,
            };
            sqlx::query(
                "INSERT INTO gold_answers (gold_id, rater_id, correct, training, duration_ms, created_at, choice) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(gold_id)
            .bind(user_id.get())
            .bind(correct)
            .bind(training_since.is_some())
            .bind(duration_ms)
            .bind(now)
            .bind(choice)
            .execute(&mut **tx)
            .await
            .map_err(|err| $crate::conflict_on($backend, err, "gold_answers_rater_key", "you have labelled this item already"))?;
            let Some(training_since) = training_since else {
                return Ok(None);
            };
            let answers: Vec<bool> = sqlx::query_scalar(
                "SELECT correct FROM gold_answers WHERE rater_id = $1 AND training AND created_at >= $2 ORDER BY id",
            )
            .bind(user_id.get())
            .bind(training_since)
            .fetch_all(&mut **tx)
            .await?;
            let threshold = share_setting(tx, QUALITY_THRESHOLD_SETTING, DEFAULT_QUALITY_THRESHOLD).await?;
            let graduated = training_passed(&answers, threshold);
            if graduated {
                sqlx::query("UPDATE users SET training_since = NULL WHERE id = $1")
                    .bind(user_id.get())
                    .execute(&mut **tx)
                    .await?;
            }
            let latest = &answers[answers.len().saturating_sub(TRAINING_ITEMS)..];
            Ok(Some(TrainingFeedback {
                correct,
                answer,
                note,
                answered: answers.len() as u64,
                latest_right: latest.iter().filter(|&&right| right).count() as u64,
                graduated,
            }))
        }

        /// Two columns: how often the rater in `rater` was right (labels and pair answers a
        /// reviewer accepted, or corrected a pair to the answer's own choice; gold answers right)
        /// and wrong (corrected or rejected, gold answers wrong), the record adjudication weighs
        /// their labels by.
        pub(crate) fn rater_record_sql(rater: &str) -> String {
            format!(
                "(SELECT COUNT(*) FROM label_reviews r JOIN labels m ON m.id = r.label_id \
                  WHERE m.annotator_id = {rater} AND r.decision = 'accepted') \
                 + (SELECT COUNT(*) FROM pair_reviews r JOIN preference_labels m ON m.id = r.label_id \
                  WHERE m.rater_id = {rater} AND (r.decision = 'accepted' OR r.choice = m.choice)) \
                 + (SELECT COUNT(*) FROM gold_answers a WHERE a.rater_id = {rater} AND a.correct), \
                 (SELECT COUNT(*) FROM label_reviews r JOIN labels m ON m.id = r.label_id \
                  WHERE m.annotator_id = {rater} AND r.decision <> 'accepted') \
                 + (SELECT COUNT(*) FROM pair_reviews r JOIN preference_labels m ON m.id = r.label_id \
                  WHERE m.rater_id = {rater} AND r.decision <> 'accepted' AND (r.choice IS NULL OR r.choice <> m.choice)) \
                 + (SELECT COUNT(*) FROM gold_answers a WHERE a.rater_id = {rater} AND NOT a.correct)"
            )
        }

        /// The item's final verdict from its standing labels (weighted by each rater's review
        /// record) or a reviewer's correction; an even split waits for a reviewer.
        async fn adjudicate_task(
            tx: &mut sqlx::Transaction<'_, $db>,
            task_id: TaskId,
            now: i64,
        ) -> Result<(), sqlx::Error> {
            let votes: Vec<(String, String, String, i64, i64, Option<String>)> = sqlx::query_as(&format!(
                "SELECT u.username, l.verdict, l.rationale, {}, l.answers \
                 FROM labels l JOIN users u ON u.id = l.annotator_id \
                 WHERE l.task_id = $1 AND l.state = 'standing' ORDER BY l.id",
                rater_record_sql("l.annotator_id"),
            ))
            .bind(task_id.get())
            .fetch_all(&mut **tx)
            .await?;
            // The latest senior word on the item: a reviewer's correction that stands, or a spot
            // checker's verdict that overturned a reviewer.
            // A reviewer's answers corrected dimension by dimension come with their verdict.
            let correction: Option<(Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT verdict, answers FROM (\
                   SELECT r.verdict AS verdict, r.answers AS answers, r.created_at AS decided_at FROM label_reviews r \
                   JOIN labels l ON l.id = r.label_id WHERE l.task_id = $1 AND r.decision = 'corrected' \
                   AND (r.check_state IS NULL OR r.check_state <> 'overturned') \
                   UNION ALL \
                   SELECT r.check_verdict, NULL, r.checked_at FROM label_reviews r \
                   JOIN labels l ON l.id = r.label_id WHERE l.task_id = $1 AND r.check_state = 'overturned'\
                 ) senior ORDER BY decided_at DESC LIMIT 1",
            )
            .bind(task_id.get())
            .fetch_optional(&mut **tx)
            .await?;
            let (correction, corrected_answers) = match correction {
                Some((verdict, answers)) => (
                    verdict.map(|verdict| verdict == "pass"),
                    // Checked against the rubric when stored.
                    answers.and_then(|json| serde_json::from_str::<arbiter_domain::annotation::rubric::RubricAnswer>(&json).ok()),
                ),
                None => (None, None),
            };
            let rubric_id: Option<i64> = sqlx::query_scalar("SELECT rubric_id FROM annotation_tasks WHERE id = $1")
                .bind(task_id.get())
                .fetch_one(&mut **tx)
                .await?;
            let decided = match rubric_id {
                // A rubric: each dimension by its own rule, the verdict from its dimension.
                Some(rubric_id) => {
                    let rubric = task_rubric(tx, rubric_id).await?.version.rubric;
                    let votes: Vec<RubricVote> = votes
                        .into_iter()
                        .map(|(rater, _, _, right, wrong, answers)| RubricVote {
                            rater,
                            answer: answers
                                .and_then(|json| serde_json::from_str(&json).ok())
                                .unwrap_or_default(),
                            quality: rater_quality(right.max(0) as u64, wrong.max(0) as u64),
                        })
                        .collect();
                    let correction = correction.map(|pass| RubricCorrection { pass, answers: corrected_answers });
                    let (decided, consensus) = adjudicate_rubric(&rubric, &votes, correction.as_ref());
                    sqlx::query("UPDATE annotation_tasks SET consensus = $1 WHERE id = $2")
                        .bind(serde_json::to_string(&consensus).expect("a consensus always serializes"))
                        .bind(task_id.get())
                        .execute(&mut **tx)
                        .await?;
                    decided
                }
                None => {
                    let votes: Vec<Vote> = votes
                        .into_iter()
                        .map(|(rater, verdict, rationale, right, wrong, _)| Vote {
                            rater,
                            pass: verdict == "pass",
                            rationale,
                            quality: rater_quality(right.max(0) as u64, wrong.max(0) as u64),
                        })
                        .collect();
                    adjudicate(&votes, correction)
                }
            };
            let Some(pass) = decided.pass else {
                // An even split: every standing label goes to the reviewers.
                sqlx::query(
                    "UPDATE labels SET review_state = 'pending' \
                     WHERE task_id = $1 AND state = 'standing' AND review_state IS NULL",
                )
                .bind(task_id.get())
                .execute(&mut **tx)
                .await?;
                return Ok(());
            };
            let verdict = if pass { Verdict::Pass } else { Verdict::Fail };
            // Stamped for the `label.completed` webhook: each decision is sent once.
            let identity_id: Option<i64> =
                sqlx::query_scalar("UPDATE annotation_tasks SET decided_at = $1 WHERE id = $2 RETURNING work_item_id")
                    .bind(now)
                    .bind(task_id.get())
                    .fetch_one(&mut **tx)
                    .await?;
            let Some(identity_id) = identity_id.map(IdentityId) else {
                // A pushed item: no run's result to grade; its verdict is kept beside it.
                sqlx::query("UPDATE pushed_items SET verdict = $1 WHERE task_id = $2")
                    .bind(verdict.as_str())
                    .bind(task_id.get())
                    .execute(&mut **tx)
                    .await?;
                return Ok(());
            };
            sqlx::query(
                "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, stage, created_at) \
                 VALUES ($1, 'human', $2, NULL, $3, 'human', $4)",
            )
            .bind(identity_id.get())
            .bind(verdict.as_str())
            .bind(&decided.reason)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            sqlx::query("UPDATE work_items SET verdict = $1, decided_by = 'human' WHERE id = $2")
                .bind(verdict.as_str())
                .bind(identity_id.get())
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        /// Gives the item back to the queue without a label; the rater is not offered it again.
        async fn skip_leased_task(
            writer: &sqlx::Pool<$db>,
            handle: &ClaimHandle,
            user_id: UserId,
        ) -> StoreResult<()> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let released: Option<i64> = sqlx::query_scalar(
                "DELETE FROM task_leases WHERE handle = $1 AND rater_id = $2 AND expires_at > $3 RETURNING task_id",
            )
            .bind(handle.as_str())
            .bind(user_id.get())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(task_id) = released else {
                tx.rollback().await?;
                return Err(StoreError::Conflict(NOT_HELD.into()));
            };
            // A skipped gold item is recorded like any skip: it never comes back, as no skipped
            // item does, so skipping cannot tell a rater which items were gold.

            sqlx::query(
                "INSERT INTO annotation_skips (task_id, user_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(task_id)
            .bind(user_id.get())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        }

        /// Items still needing labels, live leases, and finished items.
        async fn queue_counts(pool: &sqlx::Pool<$db>) -> StoreResult<QueueCounts> {
            let now = now_ms();
            // Open: items a rater could take now (not every slot leased).
            let open: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM annotation_tasks t WHERE t.state = 'open' AND {}",
                has_free_slot("$1")
            ))
            .bind(now)
            .fetch_one(pool)
            .await?;
            let done: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM annotation_tasks WHERE state = 'done'")
                    .fetch_one(pool)
                    .await?;
            let leased: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM task_leases WHERE expires_at > $1")
                    .bind(now)
                    .fetch_one(pool)
                    .await?;
            Ok(QueueCounts { open, leased, done })
        }

        /// How long a label served for review stays with its reviewer before the next reviewer
        /// who asks may take it.
        const REVIEW_HOLD_MS: i64 = 30 * 60 * 1000;

        /// The answer in `table` (labels, or preferences on pairs; its rater in `rater_column`)
        /// this reviewer holds for review, or the oldest free one waiting on an item they did
        /// not answer (higher-priority items first), now served to them alone for a while.
        pub(crate) async fn serve_for_review(
            writer: &sqlx::Pool<$db>,
            table: &str,
            rater_column: &str,
            reviewer_id: UserId,
            now: i64,
        ) -> StoreResult<Option<i64>> {
            let mut tx = writer.begin_with($begin).await?;
            let mut served = None;
            // A second reviewer may serve themselves the same answer at the same moment (on
            // PostgreSQL); the serving update is conditional, and the loser picks again.
            for _ in 0..3 {
                let picked: Option<i64> = sqlx::query_scalar(&format!(
                    "SELECT l.id FROM {table} l JOIN annotation_tasks t ON t.id = l.task_id \
                     WHERE l.review_state = 'pending' \
                       AND (l.review_served_to IS NULL OR l.review_served_to = $1 OR l.review_served_until <= $2) \
                       AND NOT EXISTS (SELECT 1 FROM {table} o WHERE o.task_id = l.task_id AND o.{rater_column} = $1) \
                     ORDER BY CASE WHEN l.review_served_to = $1 AND l.review_served_until > $2 THEN 0 ELSE 1 END, \
                              t.priority DESC, l.id LIMIT 1"
                ))
                .bind(reviewer_id.get())
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(answer_id) = picked else {
                    break;
                };
                let taken = sqlx::query(&format!(
                    "UPDATE {table} SET review_served_to = $1, review_served_until = $2 \
                     WHERE id = $3 AND review_state = 'pending' \
                       AND (review_served_to IS NULL OR review_served_to = $1 OR review_served_until <= $4)"
                ))
                .bind(reviewer_id.get())
                .bind(now + REVIEW_HOLD_MS)
                .bind(answer_id)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if taken == 1 {
                    served = Some(answer_id);
                    break;
                }
            }
            tx.commit().await?;
            Ok(served)
        }

        /// The label this reviewer holds for review, or the oldest free one on an item they did
        /// not label (higher-priority runs first), now served to them alone; else a decision
        /// to spot-check.
        async fn next_pending_review(
            writer: &sqlx::Pool<$db>,
            pool: &sqlx::Pool<$db>,
            reviewer_id: UserId,
        ) -> StoreResult<Option<ReviewItem>> {
            let now = now_ms();
            // A pair's answer this reviewer holds comes back first, so it is not kept from
            // other reviewers while labels of items wait.
            let holds_pair: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM preference_labels WHERE review_state = 'pending' AND review_served_to = $1 \
                 AND review_served_until > $2 LIMIT 1",
            )
            .bind(reviewer_id.get())
            .bind(now)
            .fetch_optional(pool)
            .await?;
            if holds_pair.is_some() {
                if let Some(pair) = super::preferences_sql::serve_pair_review(writer, reviewer_id).await? {
                    return Ok(Some(pair));
                }
            }
            let served = serve_for_review(writer, "labels", "annotator_id", reviewer_id, now).await?;
            let Some(label_id) = served else {
                if let Some(pair) = super::preferences_sql::serve_pair_review(writer, reviewer_id).await? {
                    return Ok(Some(pair));
                }
                return next_pending_check(pool, reviewer_id).await;
            };
            let row = sqlx::query(&format!(
                "SELECT l.id AS label_id, {TASK_ITEM_COLUMNS}, u.username, l.verdict, l.rationale, \
                        l.answers, rb.definition AS rubric_definition, \
                        (SELECT COUNT(*) FROM labels o WHERE o.task_id = l.task_id AND o.state = 'standing' \
                         AND o.verdict <> l.verdict) AS dissent \
                 FROM labels l JOIN users u ON u.id = l.annotator_id \
                 JOIN annotation_tasks t ON t.id = l.task_id LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                 {TASK_ITEM_JOINS} \
                 WHERE l.id = $1 AND {TASK_ITEM_PRESENT}",
            ))
            .bind(label_id)
            .fetch_one(writer)
            .await?;
            let dissent: i64 = row.read("dissent")?;
            let why = if dissent > 0 {
                "the raters disagree on this item"
            } else {
                "drawn for the random QC sample"
            };
            Ok(Some(label_under_review(&row, why, None)?))
        }

        /// A rubric and answers to it from a row's `rubric_definition` and `column` (`None`
        /// for a pass/fail label, or answers that do not read: both were checked when stored,
        /// and unreadable ones show nothing rather than fail).
        fn rubric_answers(
            row: &<$db as sqlx::Database>::Row,
            column: &str,
        ) -> Result<Option<arbiter_domain::annotation::review::LabelRubric>, sqlx::Error> {
            let answers: Option<String> = row.read(column)?;
            let definition: Option<String> = row.read("rubric_definition")?;
            let (Some(answers), Some(definition)) = (answers, definition) else {
                return Ok(None);
            };
            let (Ok(answers), Ok(rubric)) = (serde_json::from_str(&answers), serde_json::from_str(&definition)) else {
                return Ok(None);
            };
            Ok(Some(arbiter_domain::annotation::review::LabelRubric { rubric, answers }))
        }

        /// Answers in `column` to the rubric in `rubric_definition`, in words (empty for a
        /// pass/fail label).
        fn answers_in_words(row: &<$db as sqlx::Database>::Row, column: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
            Ok(rubric_answers(row, column)?
                .map(|given| arbiter_domain::annotation::consensus::answers_in_words(&given.rubric, &given.answers))
                .unwrap_or_default())
        }

        /// A label and its item from a row with `label_id`, `username` (the rater), `input`,
        /// `target`, `output`, `verdict` and `rationale`.
        fn label_under_review(
            row: &<$db as sqlx::Database>::Row,
            why: &str,
            check: Option<ReviewCheck>,
        ) -> Result<ReviewItem, sqlx::Error> {
            let verdict: String = row.read("verdict")?;
            Ok(ReviewItem {
                label_id: row.read("label_id")?,
                identity_id: row.read("identity_id")?,
                rater: row.read("username")?,
                input: row.read("input")?,
                images: Vec::new(),
                target: row.read("target")?,
                output: row.read("output")?,
                pass: verdict == "pass",
                rationale: row.read("rationale")?,
                why: why.to_string(),
                check,
                shown: None,
                answers: answers_in_words(row, "answers")?,
                rubric: rubric_answers(row, "answers")?,
                pair: None,
            })
        }

        /// The oldest reviewer decision drawn for a spot check that this senior neither made
        /// nor is the rater of.
        async fn next_pending_check(
            pool: &sqlx::Pool<$db>,
            checker_id: UserId,
        ) -> StoreResult<Option<ReviewItem>> {
            let row = sqlx::query(&format!(
                "SELECT r.id AS review_id, r.decision, r.verdict AS corrected_to, r.reason, rv.username AS reviewer, \
                        l.id AS label_id, {TASK_ITEM_COLUMNS}, u.username, l.verdict, l.rationale, \
                        l.answers, rb.definition AS rubric_definition \
                 FROM label_reviews r JOIN users rv ON rv.id = r.reviewer_id \
                 JOIN labels l ON l.id = r.label_id JOIN users u ON u.id = l.annotator_id \
                 JOIN annotation_tasks t ON t.id = l.task_id LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                 {TASK_ITEM_JOINS} \
                 WHERE r.check_state = 'pending' AND r.reviewer_id <> $1 AND {TASK_ITEM_PRESENT} \
                   AND NOT EXISTS (SELECT 1 FROM labels o WHERE o.task_id = l.task_id AND o.annotator_id = $1) \
                 ORDER BY r.id LIMIT 1",
            ))
            .bind(checker_id.get())
            .fetch_optional(pool)
            .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let corrected_to: Option<String> = row.read("corrected_to")?;
            let check = $crate::read_columns!(row, ReviewCheck {
                review_id,
                reviewer,
                decision,
                reason,
                ;
                corrected_to: corrected_to.map(|verdict| verdict == "pass"),
            });
            Ok(Some(label_under_review(&row, "a spot check of another reviewer's decision", Some(check))?))
        }

        /// Another senior upholds a reviewer's decision or overturns it with their own verdict,
        /// which then decides the item.
        async fn decide_check(
            writer: &sqlx::Pool<$db>,
            review_id: i64,
            checker_id: UserId,
            overturn_to: Option<bool>,
            reason: &str,
        ) -> StoreResult<()> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let review: Option<(i64, Option<String>, i64, i64)> = sqlx::query_as(
                "SELECT r.reviewer_id, r.check_state, l.annotator_id, l.task_id FROM label_reviews r \
                 JOIN labels l ON l.id = r.label_id WHERE r.id = $1",
            )
            .bind(review_id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((reviewer_id, check_state, rater_id, task_id)) = review else {
                return Err(StoreError::NotFound(format!("no review decision with id {review_id}")));
            };
            if UserId(reviewer_id) == checker_id {
                return Err(StoreError::Conflict("you cannot check your own review decision".into()));
            }
            if UserId(rater_id) == checker_id {
                return Err(StoreError::Conflict("you cannot check a decision about your own label".into()));
            }
            if labelled_by(&mut tx, TaskId(task_id), checker_id).await? {
                return Err(StoreError::Conflict(
                    "you labelled this item, so another senior checks decisions on it".into(),
                ));
            }
            if check_state.as_deref() != Some("pending") {
                return Err(StoreError::Conflict(
                    "this decision is not waiting for a spot check (not drawn, or checked already)".into(),
                ));
            }
            let state = if overturn_to.is_some() { "overturned" } else { "upheld" };
            // Conditional on still pending: on PostgreSQL a second checker who read `pending`
            // at the same moment waits for this row and then finds it decided.
            let decided = sqlx::query(
                "UPDATE label_reviews SET check_state = $1, checked_by = $2, check_verdict = $3, \
                 check_reason = $4, checked_at = $5 WHERE id = $6 AND check_state = 'pending'",
            )
            .bind(state)
            .bind(checker_id.get())
            .bind(overturn_to.map(|pass| if pass { "pass" } else { "fail" }))
            .bind(reason)
            .bind(now)
            .bind(review_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if decided != 1 {
                return Err(StoreError::Conflict("another senior checked this decision a moment ago".into()));
            }
            let task_done = sqlx::query_scalar::<_, String>("SELECT state FROM annotation_tasks WHERE id = $1")
                .bind(task_id)
                .fetch_one(&mut *tx)
                .await?
                == "done";
            if overturn_to.is_some() && task_done {
                adjudicate_task(&mut tx, TaskId(task_id), now).await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// Whether `user_id` has labelled the task's item (a label standing or rejected).
        async fn labelled_by(
            tx: &mut sqlx::Transaction<'_, $db>,
            task_id: TaskId,
            user_id: UserId,
        ) -> Result<bool, sqlx::Error> {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM labels WHERE task_id = $1 AND annotator_id = $2")
                .bind(task_id.get())
                .bind(user_id.get())
                .fetch_one(&mut **tx)
                .await
                .map(|count| count > 0)
        }

        /// A reviewer's decision: accepted labels stand, a correction decides the item, a
        /// rejected label stops counting and the item returns to the queue.
        async fn decide_review(
            writer: &sqlx::Pool<$db>,
            label_id: i64,
            reviewer_id: UserId,
            decision: ReviewDecision,
            reason: &str,
        ) -> StoreResult<()> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            // The item's row first, locked on PostgreSQL: a last label arriving meanwhile waits,
            // so whether the item is done is read as it stands and no correction is lost.
            sqlx::query("UPDATE annotation_tasks SET labels_done = labels_done WHERE id = (SELECT task_id FROM labels WHERE id = $1)")
                .bind(label_id)
                .execute(&mut *tx)
                .await?;
            let label: Option<(i64, i64, String, Option<String>, Option<i64>)> = sqlx::query_as(
                "SELECT task_id, annotator_id, state, review_state, review_served_to FROM labels WHERE id = $1",
            )
            .bind(label_id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((task_id, rater_id, state, review_state, served_to)) = label else {
                return Err(StoreError::NotFound(format!("no label with id {label_id}")));
            };
            arbiter_domain::annotation::review::may_review(
                "label",
                reviewer_id,
                UserId(rater_id),
                &state,
                review_state.as_deref(),
                served_to.map(UserId),
            )
            .map_err(StoreError::Conflict)?;
            if labelled_by(&mut tx, TaskId(task_id), reviewer_id).await? {
                return Err(StoreError::Conflict("you labelled this item, so another reviewer decides it".into()));
            }
            let corrected = decision.corrected_to().map(|pass| if pass { "pass" } else { "fail" });
            let corrected_answers = match &decision {
                ReviewDecision::CorrectAnswers { answers, .. } => {
                    let asks_rubric: Option<i64> = sqlx::query_scalar("SELECT rubric_id FROM annotation_tasks WHERE id = $1")
                        .bind(task_id)
                        .fetch_one(&mut *tx)
                        .await?;
                    if asks_rubric.is_none() {
                        return Err(StoreError::Conflict(
                            "this label answers pass or fail, not a rubric: correct its verdict".into(),
                        ));
                    }
                    Some(serde_json::to_string(answers).expect("answers always serialize"))
                }
                _ => None,
            };
            let review_id: i64 = sqlx::query_scalar(
                "INSERT INTO label_reviews (label_id, reviewer_id, decision, verdict, reason, created_at, answers) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            )
            .bind(label_id)
            .bind(reviewer_id.get())
            .bind(decision.as_str())
            .bind(corrected)
            .bind(reason)
            .bind(now)
            .bind(corrected_answers)
            .fetch_one(&mut *tx)
            .await
            .map_err(|err| $crate::conflict_on($backend, err, "label_reviews_label_key", "this label has been reviewed already"))?;
            let check_rate = share_setting(&mut tx, REVIEW_CHECK_RATE_SETTING, DEFAULT_REVIEW_CHECK_RATE).await?;
            if review_is_checked(check_rate, review_id) {
                sqlx::query("UPDATE label_reviews SET check_state = 'pending' WHERE id = $1")
                    .bind(review_id)
                    .execute(&mut *tx)
                    .await?;
            }
            // Conditional, so a label served again to another reviewer since it was read
            // above (PostgreSQL reads without locking) refuses this decision, and the review
            // row above goes back with it. A lapsed hold not yet served again still counts.
            let decided = sqlx::query(
                "UPDATE labels SET review_state = $1 WHERE id = $2 AND review_state = 'pending' AND review_served_to = $3",
            )
            .bind(decision.as_str())
            .bind(label_id)
            .bind(reviewer_id.get())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if decided != 1 {
                return Err(StoreError::Conflict(
                    "this label was served to another reviewer meanwhile; take your next item on the review page".into(),
                ));
            }
            let task_done: bool = sqlx::query_scalar::<_, String>("SELECT state FROM annotation_tasks WHERE id = $1")
                .bind(task_id)
                .fetch_one(&mut *tx)
                .await?
                == "done";
            match decision {
                ReviewDecision::Accept => {}
                ReviewDecision::Correct { .. } | ReviewDecision::CorrectAnswers { .. } => {
                    if task_done {
                        adjudicate_task(&mut tx, TaskId(task_id), now).await?;
                    }
                }
                ReviewDecision::Reject => {
                    sqlx::query("UPDATE labels SET state = 'rejected' WHERE id = $1")
                        .bind(label_id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE annotation_tasks SET labels_done = labels_done - 1, state = 'open', completed_at = NULL, consensus = NULL, \
                         decided_at = NULL WHERE id = $1",
                    )
                    .bind(task_id)
                    .execute(&mut *tx)
                    .await?;
                    if task_done {
                        restore_machine_verdict(&mut tx, TaskId(task_id)).await?;
                    }
                }
            }
            tx.commit().await?;
            Ok(())
        }

        /// Takes back a human verdict while its item is relabelled: an escalated item is
        /// undecided again, an audited one has its judge's verdict back.
        async fn restore_machine_verdict(
            tx: &mut sqlx::Transaction<'_, $db>,
            task_id: TaskId,
        ) -> Result<(), sqlx::Error> {
            let (identity_id, kind): (Option<i64>, String) =
                sqlx::query_as("SELECT work_item_id, kind FROM annotation_tasks WHERE id = $1")
                    .bind(task_id.get())
                    .fetch_one(&mut **tx)
                    .await?;
            let Some(identity_id) = identity_id else {
                // A pushed item: undecided again.
                sqlx::query("UPDATE pushed_items SET verdict = NULL WHERE task_id = $1")
                    .bind(task_id.get())
                    .execute(&mut **tx)
                    .await?;
                return Ok(());
            };
            let judged: Option<(String, String)> = if kind == "audit" {
                sqlx::query_as(
                    "SELECT verdict, stage FROM grades WHERE work_item_id = $1 \
                     AND stage IN ('cheap_judge', 'strong_judge') AND verdict IN ('pass', 'fail') \
                     ORDER BY id DESC LIMIT 1",
                )
                .bind(identity_id)
                .fetch_optional(&mut **tx)
                .await?
            } else {
                None
            };
            let (verdict, decided_by) =
                judged.unwrap_or_else(|| ("uncertain".to_string(), "pending".to_string()));
            sqlx::query("UPDATE work_items SET verdict = $1, decided_by = $2 WHERE id = $3")
                .bind(verdict)
                .bind(decided_by)
                .bind(identity_id)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        /// Everyone who can label, with their last 30 days of labels.
        async fn rater_records(pool: &sqlx::Pool<$db>) -> StoreResult<Vec<RaterRecord>> {
            let since = now_ms() - 30 * 24 * 3_600_000;
            let raters: Vec<(i64, String, String, bool, bool, String, f64, Option<String>, Option<i64>)> =
                sqlx::query_as(
                    "SELECT id, username, role, active, paused, skills, weekly_capacity_hours, email, training_since \
                     FROM users WHERE role IN ('annotator', 'reviewer', 'lead', 'admin') ORDER BY username",
                )
                .fetch_all(pool)
                .await?;
            let gold: std::collections::HashMap<i64, (i64, i64)> = sqlx::query_as::<_, (i64, i64, i64)>(
                "SELECT rater_id, COUNT(*) FILTER (WHERE correct), COUNT(*) FROM gold_answers \
                 WHERE created_at >= $1 GROUP BY rater_id",
            )
            .bind(since)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|(rater, right, all)| (rater, (right, all)))
            .collect();
            let checks: std::collections::HashMap<i64, (i64, i64)> = sqlx::query_as::<_, (i64, i64, i64)>(
                "SELECT reviewer_id, COUNT(*) FILTER (WHERE check_state = 'upheld'), \
                        COUNT(*) FILTER (WHERE check_state IN ('upheld', 'overturned')) \
                 FROM label_reviews WHERE created_at >= $1 GROUP BY reviewer_id",
            )
            .bind(since)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|(reviewer, upheld, all)| (reviewer, (upheld, all)))
            .collect();
            #[allow(clippy::type_complexity)]
            let labels: Vec<(i64, i64, Option<i64>, Option<String>, String, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>)> =
                sqlx::query_as(
                    "SELECT l.annotator_id, l.created_at, l.duration_ms, l.review_state, l.verdict, \
                            COALESCE(w.verdict, pi.verdict) AS final_verdict, \
                            CASE WHEN pi.verdict IS NOT NULL THEN 'human' ELSE w.decided_by END AS decided_by, \
                            l.answers, CASE WHEN t.state = 'done' AND t.labels_done >= 2 THEN t.consensus END AS consensus, \
                            rb.name AS rubric_name, rb.definition AS rubric_definition \
                     FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                     LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                     LEFT JOIN work_items w ON w.id = t.work_item_id \
                     LEFT JOIN pushed_items pi ON pi.task_id = t.id \
                     WHERE l.created_at >= $1 ORDER BY l.id",
                )
                .bind(since)
                .fetch_all(pool)
                .await?;
            let mut by_rater: std::collections::HashMap<i64, Vec<RaterLabel>> =
                std::collections::HashMap::new();
            for (rater, created_at, duration_ms, review, verdict, final_verdict, decided_by, answers, consensus, rubric_name, rubric_definition) in labels {
                let matches_final = match (decided_by.as_deref(), final_verdict) {
                    (Some("human"), Some(final_verdict)) => Some(final_verdict == verdict),
                    _ => None,
                };
                // Both were checked when stored; unreadable ones count for nothing here.
                let answers: Option<arbiter_domain::annotation::rubric::RubricAnswer> =
                    answers.and_then(|json| serde_json::from_str(&json).ok());
                let consensus: Option<arbiter_domain::annotation::consensus::Consensus> =
                    consensus.and_then(|json| serde_json::from_str(&json).ok());
                let rubric: Option<arbiter_domain::annotation::rubric::Rubric> =
                    rubric_definition.and_then(|json| serde_json::from_str(&json).ok());
                // Only where two or more raters made the consensus; keyed by rubric, as two
                // rubrics may share a dimension key.
                let dimension_matches = match (rubric, answers, consensus) {
                    (Some(rubric), Some(answers), Some(consensus)) => {
                        let name = rubric_name.unwrap_or_default();
                        arbiter_domain::annotation::consensus::matches_consensus(&rubric, &answers, &consensus)
                            .into_iter()
                            .map(|(key, matched)| (format!("{name}: {key}"), matched))
                            .collect()
                    }
                    _ => Vec::new(),
                };
                by_rater.entry(rater).or_default().push(RaterLabel {
                    created_at,
                    duration_ms,
                    review,
                    matches_final,
                    dimension_matches,
                });
            }
            Ok(raters
                .into_iter()
                .map(|(id, username, role, active, paused, skills, capacity, email, training_since)| RaterRecord {
                    labels: by_rater.remove(&id).unwrap_or_default(),
                    email,
                    training_since,
                    gold_right: gold.get(&id).map_or(0, |counts| counts.0.max(0) as u64),
                    gold_answered: gold.get(&id).map_or(0, |counts| counts.1.max(0) as u64),
                    reviews_upheld: checks.get(&id).map_or(0, |counts| counts.0.max(0) as u64),
                    reviews_checked: checks.get(&id).map_or(0, |counts| counts.1.max(0) as u64),
                    id: UserId(id),
                    username,
                    role,
                    active,
                    paused,
                    skills: skills
                        .split(',')
                        .filter(|skill| !skill.is_empty())
                        .map(str::to_string)
                        .collect(),
                    weekly_capacity_hours: capacity,
                })
                .collect())
        }

        /// Applies a lead's change to a rater; pausing or deactivating releases their lease.
        async fn update_rater(
            writer: &sqlx::Pool<$db>,
            user_id: UserId,
            update: &RaterUpdate,
        ) -> StoreResult<()> {
            let mut tx = writer.begin_with($begin).await?;
            let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM users WHERE id = $1")
                .bind(user_id.get())
                .fetch_optional(&mut *tx)
                .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound(format!("no user with id {user_id}")));
            }
            if let Some(active) = update.active {
                sqlx::query("UPDATE users SET active = $1 WHERE id = $2")
                    .bind(active)
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(paused) = update.paused {
                sqlx::query("UPDATE users SET paused = $1 WHERE id = $2")
                    .bind(paused)
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(skills) = &update.skills {
                sqlx::query("UPDATE users SET skills = $1 WHERE id = $2")
                    .bind(skills.join(","))
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(hours) = update.weekly_capacity_hours {
                sqlx::query("UPDATE users SET weekly_capacity_hours = $1 WHERE id = $2")
                    .bind(hours)
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(role) = update.role {
                sqlx::query("UPDATE users SET role = $1 WHERE id = $2")
                    .bind(role.as_str())
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(email) = &update.email {
                sqlx::query("UPDATE users SET email = $1 WHERE id = $2")
                    .bind(email.as_deref())
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(training) = update.training {
                // Sending a rater back to training restarts it: only answers from now count.
                sqlx::query("UPDATE users SET training_since = $1 WHERE id = $2")
                    .bind(training.then(now_ms))
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            if update.paused == Some(true) || update.active == Some(false) || update.training == Some(true) {
                sqlx::query("DELETE FROM task_leases WHERE rater_id = $1")
                    .bind(user_id.get())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// The standing labels on a run's items.
        async fn labels_of_run(pool: &sqlx::Pool<$db>, run_id: RunId) -> StoreResult<Vec<RunLabel>> {
            let rows: Vec<(i64, i64, i64, String, String, Option<String>)> = sqlx::query_as(
                "SELECT l.id, l.task_id, l.annotator_id, u.username, l.verdict, l.answers FROM labels l \
                 JOIN users u ON u.id = l.annotator_id JOIN annotation_tasks t ON t.id = l.task_id \
                 JOIN work_items w ON w.id = t.work_item_id \
                 WHERE w.run_id = $1 AND l.state = 'standing' ORDER BY l.task_id, l.id",
            )
            .bind(run_id.get())
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(label_id, task_id, rater_id, rater, verdict, answers)| RunLabel {
                    label_id,
                    task_id: TaskId(task_id),
                    rater_id: UserId(rater_id),
                    rater,
                    pass: verdict == "pass",
                    // Stored by the server after checking; unreadable JSON is no answers.
                    answers: answers.and_then(|json| serde_json::from_str(&json).ok()),
                })
                .collect())
        }

        /// Creates an invited rater's account with their pool settings, in one statement.
        async fn insert_rater(
            writer: &sqlx::Pool<$db>,
            new: &arbiter_domain::annotation::pool::NewRater,
            hash: &PasswordHash,
        ) -> StoreResult<UserId> {
            let now = now_ms();
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO users (username, password_hash, role, created_at, email, skills, \
                 weekly_capacity_hours, training_since, must_change_password) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, TRUE) RETURNING id",
            )
            .bind(&new.username)
            .bind(hash.as_phc())
            .bind(new.role.as_str())
            .bind(now)
            .bind(new.email.as_deref())
            .bind(new.skills.join(","))
            .bind(new.weekly_capacity_hours)
            .bind(new.training.then_some(now))
            .fetch_one(writer)
            .await
            .map(UserId)
            .map_err(|err| {
                $crate::conflict_on($backend, err, "users_username_key", &format!("the username `{}` is taken", new.username))
            })
        }

        /// Makes a task's item or pair gold (or brings a retired gold item back with a new
        /// answer).
        async fn insert_gold(
            writer: &sqlx::Pool<$db>,
            task_id: TaskId,
            gold: GoldAnswer,
            note: &str,
            created_by: UserId,
        ) -> StoreResult<i64> {
            let now = now_ms();
            let answer = gold.as_str();
            let mut tx = writer.begin_with($begin).await?;
            let task: Option<(String, bool)> = sqlx::query_as(
                "SELECT t.kind, EXISTS (SELECT 1 FROM pushed_items pi WHERE pi.task_id = t.id) \
                 FROM annotation_tasks t WHERE t.id = $1",
            )
            .bind(task_id.get())
            .fetch_optional(&mut *tx)
            .await?;
            let Some((kind, pushed)) = task else {
                return Err(StoreError::NotFound(format!("no annotation item with id {task_id}")));
            };
            if pushed {
                return Err(StoreError::Conflict(format!(
                    "item {task_id} was pushed from outside; gold items are chosen from runs' items"
                )));
            }
            match (kind == "pair", gold.is_pair()) {
                (true, false) => {
                    return Err(StoreError::Conflict(format!(
                        "item {task_id} is a pair of outputs; its gold answer is a, b, tie or both_bad"
                    )))
                }
                (false, true) => {
                    return Err(StoreError::Conflict(format!(
                        "item {task_id} is one output; its gold answer is pass or fail"
                    )))
                }
                _ => {}
            }
            let existing: Option<(i64, Option<i64>)> =
                sqlx::query_as("SELECT id, retired_at FROM gold_items WHERE task_id = $1")
                    .bind(task_id.get())
                    .fetch_optional(&mut *tx)
                    .await?;
            let gold_id = match existing {
                Some((_, None)) => {
                    return Err(StoreError::Conflict(format!("item {task_id} is a gold item already")))
                }
                Some((gold_id, Some(_))) => {
                    // Answers were scored against the old answer: a pair's against the choice
                    // each rater gave; an item's, with two possible answers, flip when it changed.
                    let rescore = if gold.is_pair() {
                        "UPDATE gold_answers SET correct = (choice IS NOT NULL AND choice = $2) WHERE gold_id = $1"
                    } else {
                        "UPDATE gold_answers SET correct = NOT correct WHERE gold_id = $1 \
                         AND (SELECT answer FROM gold_items WHERE id = $1) <> $2"
                    };
                    sqlx::query(rescore)
                        .bind(gold_id)
                        .bind(answer)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE gold_items SET answer = $1, note = $2, retired_at = NULL, created_by = $3, \
                         created_at = $4 WHERE id = $5",
                    )
                    .bind(answer)
                    .bind(note)
                    .bind(created_by.get())
                    .bind(now)
                    .bind(gold_id)
                    .execute(&mut *tx)
                    .await?;
                    gold_id
                }
                None => sqlx::query_scalar(
                    "INSERT INTO gold_items (task_id, answer, note, created_by, created_at) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(task_id.get())
                .bind(answer)
                .bind(note)
                .bind(created_by.get())
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(|err| $crate::conflict_on($backend, err, "gold_items_task_key", "this item is a gold item already"))?,
            };
            tx.commit().await?;
            Ok(gold_id)
        }

        /// Stops serving a gold item; leases on it are released.
        async fn retire_gold_item(writer: &sqlx::Pool<$db>, gold_id: i64) -> StoreResult<()> {
            let mut tx = writer.begin_with($begin).await?;
            let retired: Option<Option<i64>> =
                sqlx::query_scalar("SELECT retired_at FROM gold_items WHERE id = $1")
                    .bind(gold_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            match retired {
                None => return Err(StoreError::NotFound(format!("no gold item with id {gold_id}"))),
                Some(Some(_)) => return Err(StoreError::Conflict("this gold item is retired already".into())),
                Some(None) => {}
            }
            sqlx::query("UPDATE gold_items SET retired_at = $1 WHERE id = $2")
                .bind(now_ms())
                .bind(gold_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM task_leases WHERE gold_id = $1")
                .bind(gold_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        }

        /// The start of an item's question, to recognise it by in a list.
        fn excerpt(text: &str) -> String {
            const EXCERPT_CHARS: usize = 120;
            let mut excerpt: String = text.chars().take(EXCERPT_CHARS).collect();
            if text.chars().count() > EXCERPT_CHARS {
                excerpt.push('…');
            }
            excerpt
        }

        async fn list_gold(pool: &sqlx::Pool<$db>) -> StoreResult<Vec<arbiter_domain::annotation::gold::GoldItem>> {
            let rows: Vec<(i64, i64, String, String, String, i64, Option<i64>, i64, i64)> = sqlx::query_as(
                "SELECT g.id, g.task_id, i.input, g.answer, g.note, g.created_at, g.retired_at, \
                        (SELECT COUNT(*) FROM gold_answers a WHERE a.gold_id = g.id), \
                        (SELECT COUNT(*) FROM gold_answers a WHERE a.gold_id = g.id AND a.correct) \
                 FROM gold_items g JOIN annotation_tasks t ON t.id = g.task_id \
                 LEFT JOIN preference_pairs p ON p.task_id = t.id \
                 JOIN work_items w ON w.id = COALESCE(t.work_item_id, p.left_item_id) \
                 JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                 ORDER BY CASE WHEN g.retired_at IS NULL THEN 0 ELSE 1 END, g.id DESC LIMIT 500",
            )
            .fetch_all(pool)
            .await?;
            rows.into_iter()
                .map(|(id, task_id, input, answer, note, created_at, retired_at, answers, right)| {
                    Ok(arbiter_domain::annotation::gold::GoldItem {
                        id,
                        task_id: TaskId(task_id),
                        input: excerpt(&input),
                        answer: GoldAnswer::parse(&answer).map_err(|message| sqlx::Error::Decode(message.into()))?,
                        note,
                        created_at,
                        retired_at,
                        answers: answers.max(0) as u64,
                        right: right.max(0) as u64,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        }

        /// Recently finished items and pairs of runs' answers decided by humans who all agreed,
        /// or by a reviewer's correction, that are not gold yet.
        async fn list_gold_candidates(
            pool: &sqlx::Pool<$db>,
            limit: i64,
        ) -> StoreResult<Vec<arbiter_domain::annotation::gold::GoldCandidate>> {
            // A pair's answer is its decided choice, read from the consensus kept on the task.
            let rows: Vec<(i64, String, Option<String>, Option<String>, i64, i64, bool)> = sqlx::query_as(
                "SELECT t.id, i.input, w.verdict, NULL, t.labels_done, \
                        (SELECT COUNT(DISTINCT l.verdict) FROM labels l WHERE l.task_id = t.id AND l.state = 'standing'), \
                        EXISTS (SELECT 1 FROM label_reviews r JOIN labels l ON l.id = r.label_id \
                                WHERE l.task_id = t.id AND r.decision = 'corrected'), t.completed_at \
                 FROM annotation_tasks t JOIN work_items w ON w.id = t.work_item_id \
                 JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                 WHERE t.state = 'done' AND w.decided_by = 'human' AND w.verdict IN ('pass', 'fail') \
                 AND NOT EXISTS (SELECT 1 FROM gold_items g WHERE g.task_id = t.id) \
                 UNION ALL \
                 SELECT t.id, i.input, NULL, t.consensus, t.labels_done, \
                        (SELECT COUNT(DISTINCT l.choice) FROM preference_labels l WHERE l.task_id = t.id AND l.state = 'standing'), \
                        EXISTS (SELECT 1 FROM pair_reviews r JOIN preference_labels l ON l.id = r.label_id \
                                WHERE l.task_id = t.id AND r.decision = 'corrected'), t.completed_at \
                 FROM annotation_tasks t JOIN preference_pairs p ON p.task_id = t.id \
                 JOIN work_items w ON w.id = p.left_item_id \
                 JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                 WHERE t.state = 'done' AND t.decided_at IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM gold_items g WHERE g.task_id = t.id) \
                 ORDER BY 8 DESC LIMIT $1",
            )
            .bind(limit.saturating_mul(5))
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .filter_map(|(task_id, input, verdict, consensus, labels, answers, corrected)| {
                    let answer = match (verdict, consensus) {
                        (Some(verdict), _) => GoldAnswer::Verdict(verdict == "pass"),
                        (None, consensus) => GoldAnswer::Pair(
                            arbiter_domain::annotation::preference::decided_choice(consensus.as_deref()?)?,
                        ),
                    };
                    let why = if corrected {
                        "a senior reviewer decided it".to_string()
                    } else if labels >= 2 && answers == 1 {
                        format!("all {labels} raters agreed")
                    } else {
                        return None;
                    };
                    Some(arbiter_domain::annotation::gold::GoldCandidate {
                        task_id: TaskId(task_id),
                        input: excerpt(&input),
                        answer,
                        labels: labels.max(0) as u64,
                        why,
                    })
                })
                .take(usize::try_from(limit).unwrap_or(0))
                .collect())
        }

        async fn flow_of_labels(
            pool: &sqlx::Pool<$db>,
            now: i64,
        ) -> StoreResult<arbiter_domain::annotation::sla::LabellingFlow> {
            const HOUR: i64 = 3_600_000;
            let (hour, day, week): (i64, i64, i64) = sqlx::query_as(
                "SELECT COUNT(*) FILTER (WHERE created_at >= $1), COUNT(*) FILTER (WHERE created_at >= $2), \
                        COUNT(*) FROM (SELECT created_at FROM labels WHERE created_at >= $3 \
                                       UNION ALL SELECT created_at FROM preference_labels WHERE created_at >= $3) answers",
            )
            .bind(now - HOUR)
            .bind(now - 24 * HOUR)
            .bind(now - 7 * 24 * HOUR)
            .fetch_one(pool)
            .await?;
            let needed: i64 = sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(labels_needed), 0) AS BIGINT) FROM annotation_tasks WHERE created_at >= $1",
            )
            .bind(now - 7 * 24 * HOUR)
            .fetch_one(pool)
            .await?;
            let mut durations: Vec<i64> = sqlx::query_scalar(
                "SELECT duration_ms FROM (\
                   SELECT duration_ms, created_at FROM (SELECT duration_ms, created_at FROM labels \
                     WHERE duration_ms IS NOT NULL ORDER BY id DESC LIMIT 1000) l \
                   UNION ALL SELECT duration_ms, created_at FROM (SELECT duration_ms, created_at FROM preference_labels \
                     WHERE duration_ms IS NOT NULL ORDER BY id DESC LIMIT 1000) p\
                 ) answers ORDER BY created_at DESC LIMIT 1000",
            )
            .fetch_all(pool)
            .await?;
            durations.sort_unstable();
            let median_label_ms = arbiter_domain::annotation::pool::median(&durations);
            let capacity: Option<f64> = sqlx::query_scalar(
                "SELECT SUM(weekly_capacity_hours) FROM users WHERE active AND NOT paused \
                 AND training_since IS NULL AND role IN ('annotator', 'reviewer', 'lead', 'admin')",
            )
            .fetch_one(pool)
            .await?;
            Ok(arbiter_domain::annotation::sla::LabellingFlow {
                labels_last_hour: hour.max(0) as u64,
                labels_last_day: day.max(0) as u64,
                labels_last_week: week.max(0) as u64,
                labels_needed_last_week: needed.max(0) as u64,
                median_label_ms,
                capacity_hours_per_week: capacity.unwrap_or(0.0),
            })
        }

        async fn days_of_sla(
            pool: &sqlx::Pool<$db>,
            since: i64,
        ) -> StoreResult<Vec<arbiter_domain::annotation::sla::SlaDay>> {
            let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
                "SELECT completed_at / 86400000, COUNT(*), COUNT(*) FILTER (WHERE completed_at <= due_at) \
                 FROM annotation_tasks WHERE state = 'done' AND completed_at >= $1 \
                 GROUP BY completed_at / 86400000 ORDER BY 1",
            )
            .bind(since)
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(day, completed, on_time)| arbiter_domain::annotation::sla::SlaDay {
                    day,
                    completed: completed.max(0) as u64,
                    on_time: on_time.max(0) as u64,
                })
                .collect())
        }

        async fn raise_priority(writer: &sqlx::Pool<$db>, task_ids: &[TaskId], now: i64) -> StoreResult<u64> {
            // Short transactions: SQLite's one writer also serves claims and labels meanwhile.
            const ESCALATIONS_PER_TRANSACTION: usize = 200;
            let mut changed = 0;
            for chunk in task_ids.chunks(ESCALATIONS_PER_TRANSACTION) {
                let mut tx = writer.begin_with($begin).await?;
                for task_id in chunk {
                    changed += sqlx::query(
                        "UPDATE annotation_tasks SET priority = priority + 1, escalated_at = $1 \
                         WHERE id = $2 AND state = 'open' AND escalated_at IS NULL",
                    )
                    .bind(now)
                    .bind(task_id.get())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                }
                tx.commit().await?;
            }
            Ok(changed)
        }

        async fn labels_by_queue(
            pool: &sqlx::Pool<$db>,
            since: i64,
        ) -> StoreResult<Vec<arbiter_domain::annotation::task::QueueLabel>> {
            // A task's queue is its run's eval (the run copied onto the task; a pair's is one of
            // its two runs, which share an eval) or the pushed queue it came in by. Pairs'
            // preferences come with the labels, their choice in place of a verdict.
            const QUEUE_JOINS: &str = "JOIN annotation_tasks t ON t.id = l.task_id \
                 LEFT JOIN runs r ON r.id = t.run_id LEFT JOIN evals e ON e.id = r.eval_id \
                 LEFT JOIN pushed_items pi ON pi.task_id = t.id LEFT JOIN pushed_queues pq ON pq.id = pi.queue_id";
            #[allow(clippy::type_complexity)]
            let rows: Vec<(String, i64, i64, String, String, Option<i64>, Option<String>, Option<String>)> =
                sqlx::query_as(&format!(
                    "SELECT COALESCE(e.name, pq.name), l.task_id, l.annotator_id, u.username, l.verdict, t.rubric_id, \
                            l.answers, NULL AS choice, l.id \
                     FROM labels l JOIN users u ON u.id = l.annotator_id {QUEUE_JOINS} \
                     WHERE l.state = 'standing' AND l.created_at >= $1 AND (e.name IS NOT NULL OR pq.name IS NOT NULL) \
                     UNION ALL \
                     SELECT COALESCE(e.name, pq.name), l.task_id, l.rater_id, u.username, '', NULL, NULL, l.choice, l.id \
                     FROM preference_labels l JOIN users u ON u.id = l.rater_id {QUEUE_JOINS} \
                     WHERE l.state = 'standing' AND l.created_at >= $1 AND (e.name IS NOT NULL OR pq.name IS NOT NULL) \
                     ORDER BY 2, 9"
                ))
                .bind(since)
                .fetch_all(pool)
                .await?;
            Ok(rows
                .into_iter()
                .map(|(queue, task_id, rater_id, rater, verdict, rubric_id, answers, choice)| arbiter_domain::annotation::task::QueueLabel {
                    queue,
                    task_id: TaskId(task_id),
                    rater_id: UserId(rater_id),
                    rater,
                    pass: verdict == "pass",
                    rubric_id,
                    // Checked when stored; an unreadable one counts for the verdict only.
                    answers: answers.and_then(|json| serde_json::from_str(&json).ok()),
                    preference: choice.and_then(|choice| arbiter_domain::annotation::preference::Preference::parse(&choice).ok()),
                })
                .collect())
        }

        async fn labels_for_export(
            pool: &sqlx::Pool<$db>,
            run_id: RunId,
            (after_item, after_label): (i64, i64),
            limit: i64,
        ) -> StoreResult<Vec<LabelRecord>> {
            // Keyset paging on (item, label): the run's items come in id order from
            // `work_items (run_id, id)` and each item's labels from `labels (task_id, id)`.
            let rows = sqlx::query(
                "SELECT l.id AS label_id, w.run_id, w.id AS work_item_id, w.case_id, w.repetition, w.turn, \
                        c.name AS checkpoint, u.username AS rater, l.verdict, l.answers, l.rationale, l.duration_ms, \
                        l.created_at AS labelled_at, l.edited_at, l.state, \
                        EXISTS (SELECT 1 FROM gold_items gi WHERE gi.task_id = l.task_id) AS gold, \
                        l.review_state, r.decision AS review_decision, r.verdict AS review_verdict, \
                        r.answers AS review_answers, r.reason AS review_reason, r.check_state, r.check_verdict, \
                        CASE WHEN r.check_state IS NULL THEN NULL ELSE r.check_reason END AS check_reason, \
                        rb.name AS rubric, rb.version AS rubric_version, rb.content_hash AS rubric_hash, \
                        l.guideline_version \
                 FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                 JOIN work_items w ON w.id = t.work_item_id \
                 JOIN checkpoints c ON c.id = w.checkpoint_id \
                 JOIN users u ON u.id = l.annotator_id \
                 LEFT JOIN label_reviews r ON r.label_id = l.id \
                 LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                 WHERE w.run_id = $1 AND w.id >= $2 AND (w.id > $2 OR l.id > $3) \
                 ORDER BY w.id, l.id LIMIT $4",
            )
            .bind(run_id.get())
            .bind(after_item)
            .bind(after_label)
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let mut records = Vec::with_capacity(rows.len());
            for row in &rows {
                records.push($crate::read_columns!(row, LabelRecord {
                    label_id,
                    run_id,
                    work_item_id,
                    case_id,
                    repetition,
                    turn,
                    checkpoint,
                    rater,
                    verdict,
                    answers,
                    rationale,
                    duration_ms,
                    labelled_at,
                    edited_at,
                    state,
                    gold,
                    review_state,
                    review_decision,
                    review_verdict,
                    review_answers,
                    review_reason,
                    check_state,
                    check_verdict,
                    check_reason,
                    rubric,
                    rubric_version,
                    rubric_hash,
                    guideline_version,
                }));
            }
            Ok(records)
        }

        /// Where a label stands for an edit, from a row with `task_state`, `label_state`,
        /// `review_state`, `review_served_to` and `answers`.
        fn label_standing(row: &<$db as sqlx::Database>::Row) -> Result<LabelStanding, sqlx::Error> {
            let task_state: String = row.read("task_state")?;
            let label_state: String = row.read("label_state")?;
            let review_state: Option<String> = row.read("review_state")?;
            let served_to: Option<i64> = row.read("review_served_to")?;
            Ok(LabelStanding {
                item_done: task_state == "done",
                rejected: label_state == "rejected",
                reviewed: review_state.as_deref().is_some_and(|state| state != "pending"),
                // A lapsed hold still lets its reviewer decide, so any serving counts.
                with_reviewer: served_to.is_some(),
            })
        }

        const LABEL_STANDING_COLUMNS: &str = "t.state AS task_state, l.state AS label_state, l.review_state, \
            l.review_served_to, l.answers";

        async fn list_own_labels(pool: &sqlx::Pool<$db>, rater_id: UserId, limit: i64) -> StoreResult<Vec<OwnLabel>> {
            let rows = sqlx::query(&format!(
                "SELECT l.id AS label_id, {TASK_ITEM_COLUMNS}, l.verdict, l.rationale, \
                        l.created_at, l.edited_at, {LABEL_STANDING_COLUMNS}, rb.definition AS rubric_definition, \
                        r.decision, r.verdict AS corrected_to, r.answers AS corrected_answers, r.reason, \
                        r.created_at AS decided_at, r.check_state, r.check_verdict, r.check_reason \
                 FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                 LEFT JOIN rubrics rb ON rb.id = t.rubric_id \
                 {TASK_ITEM_JOINS} \
                 LEFT JOIN label_reviews r ON r.label_id = l.id \
                 WHERE l.annotator_id = $1 AND {TASK_ITEM_PRESENT} \
                   AND ((t.state <> 'done' AND l.state = 'standing') OR l.review_state = 'pending' \
                        OR r.decision IN ('corrected', 'rejected')) \
                 ORDER BY l.id DESC LIMIT $2"
            ))
            .bind(rater_id.get())
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let mut labels = Vec::with_capacity(rows.len());
            for row in &rows {
                let verdict: String = row.read("verdict")?;
                let decision: Option<String> = row.read("decision")?;
                let review = match decision {
                    Some(decision) => {
                        let corrected_to: Option<String> = row.read("corrected_to")?;
                        let check_state: Option<String> = row.read("check_state")?;
                        let check_verdict: Option<String> = row.read("check_verdict")?;
                        let check_reason: String = row.read("check_reason")?;
                        Some(ReviewOutcome {
                            decision,
                            corrected_to: corrected_to.map(|verdict| verdict == "pass"),
                            corrected_answers: answers_in_words(row, "corrected_answers")?,
                            corrected_choice: None,
                            reason: row.read("reason")?,
                            decided_at: row.read("decided_at")?,
                            overturned_to: match (check_state.as_deref(), check_verdict) {
                                (Some("overturned"), Some(verdict)) => Some((verdict == "pass", check_reason)),
                                _ => None,
                            },
                        })
                    }
                    None => None,
                };
                labels.push(OwnLabel {
                    label_id: row.read("label_id")?,
                    identity_id: row.read("identity_id")?,
                    input: row.read("input")?,
                    images: Vec::new(),
                    target: row.read("target")?,
                    output: row.read("output")?,
                    pass: verdict == "pass",
                    rationale: row.read("rationale")?,
                    created_at: row.read("created_at")?,
                    edited_at: row.read("edited_at")?,
                    editable: may_edit(label_standing(row)?),
                    review,
                    shown: None,
                    answers: answers_in_words(row, "answers")?,
                    rubric: rubric_answers(row, "answers")?,
                    pair: None,
                });
            }
            // With the rater's choices on pairs, newest first.
            labels.extend(super::preferences_sql::own_preferences(pool, rater_id, limit).await?);
            labels.sort_by_key(|label| std::cmp::Reverse(label.created_at));
            labels.truncate(usize::try_from(limit).unwrap_or(0));
            Ok(labels)
        }

        /// Changes a label in place. The item's row is touched first: that locks it against a
        /// last label arriving meanwhile (on PostgreSQL the other submission waits, then
        /// adjudicates with this label as changed; or this one waits and then finds the item
        /// done), and SQLite has one writer anyway.
        /// `answers`: the new answers of a rubric label (JSON, checked by the caller), `None`
        /// for a pass/fail label; each kind is changed only as itself.
        async fn change_own_label(
            writer: &sqlx::Pool<$db>,
            label_id: i64,
            rater_id: UserId,
            pass: bool,
            answers: Option<&str>,
            rationale: &str,
        ) -> StoreResult<()> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let task_id: Option<i64> = sqlx::query_scalar("SELECT task_id FROM labels WHERE id = $1 AND annotator_id = $2")
                .bind(label_id)
                .bind(rater_id.get())
                .fetch_optional(&mut *tx)
                .await?;
            let Some(task_id) = task_id else {
                return Err(StoreError::NotFound(format!("you have no label with id {label_id}")));
            };
            sqlx::query("UPDATE annotation_tasks SET labels_done = labels_done WHERE id = $1")
                .bind(task_id)
                .execute(&mut *tx)
                .await?;
            let row = sqlx::query(&format!(
                "SELECT {LABEL_STANDING_COLUMNS} FROM labels l JOIN annotation_tasks t ON t.id = l.task_id WHERE l.id = $1"
            ))
            .bind(label_id)
            .fetch_one(&mut *tx)
            .await?;
            may_edit(label_standing(&row)?).map_err(StoreError::Conflict)?;
            let verdict = if pass { Verdict::Pass } else { Verdict::Fail };
            // Conditional: a reviewer may have been served the label since it was read (the
            // serving update does not touch the item's row).
            let changed = sqlx::query(&format!(
                "UPDATE labels SET verdict = $1, rationale = $2, edited_at = $3, answers = COALESCE($5, answers) \
                 WHERE id = $4 AND state = 'standing' \
                 AND (review_state IS NULL OR review_state = 'pending') AND review_served_to IS NULL \
                 AND answers IS {}",
                if answers.is_some() { "NOT NULL" } else { "NULL" }
            ))
            .bind(verdict.as_str())
            .bind(rationale)
            .bind(now)
            .bind(label_id)
            .bind(answers)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if changed != 1 {
                return Err(StoreError::Conflict("a reviewer took this label meanwhile; it can no longer be changed".into()));
            }
            tx.commit().await?;
            Ok(())
        }

        #[async_trait::async_trait]
        impl $crate::annotation::AnnotationStore for $store {
            async fn next_annotation_task(&self, user_id: UserId, lease_ms: i64) -> StoreResult<Option<AnnotationTask>> {
                let result: StoreResult<Option<AnnotationTask>> = async move {
                    claim_task(&self.writer, user_id, lease_ms).await
                }
                .await;
                result.map_err(|err| err.during("next_annotation_task"))
            }

            async fn submit_label(
                &self,
                handle: &ClaimHandle,
                user_id: UserId,
                pass: bool,
                rationale: &str,
            ) -> StoreResult<Option<TrainingFeedback>> {
                let result: StoreResult<Option<TrainingFeedback>> = async move {
                    submit_task_label(&self.writer, handle, user_id, pass, rationale, None).await
                }
                .await;
                result.map_err(|err| err.during("submit_label"))
            }

            async fn submit_rubric_label(
                &self,
                handle: &ClaimHandle,
                user_id: UserId,
                answer: &RubricLabel,
                rationale: &str,
            ) -> StoreResult<Option<TrainingFeedback>> {
                submit_task_label(&self.writer, handle, user_id, answer.pass, rationale, Some(answer))
                    .await
                    .map_err(|err| err.during("submit_rubric_label"))
            }

            async fn leased_rubric(&self, handle: &ClaimHandle, user_id: UserId) -> StoreResult<Option<i64>> {
                rubric_of_lease(&self.writer, handle, user_id)
                    .await
                    .map_err(|err| err.during("leased_rubric"))
            }

            async fn skip_task(&self, handle: &ClaimHandle, user_id: UserId) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    skip_leased_task(&self.writer, handle, user_id).await
                }
                .await;
                result.map_err(|err| err.during("skip_task"))
            }

            async fn annotation_queue_counts(&self) -> StoreResult<QueueCounts> {
                let result: StoreResult<QueueCounts> = async move {
                    queue_counts(&self.pool).await
                }
                .await;
                result.map_err(|err| err.during("annotation_queue_counts"))
            }

            async fn next_review(&self, reviewer_id: UserId) -> StoreResult<Option<ReviewItem>> {
                let result: StoreResult<Option<ReviewItem>> = async move {
                    next_pending_review(&self.writer, &self.pool, reviewer_id).await
                }
                .await;
                result.map_err(|err| err.during("next_review"))
            }

            async fn review_label(
                &self,
                label_id: i64,
                reviewer_id: UserId,
                decision: ReviewDecision,
                reason: &str,
            ) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    decide_review(&self.writer, label_id, reviewer_id, decision, reason).await
                }
                .await;
                result.map_err(|err| err.during("review_label"))
            }

            async fn label_rubric(&self, label_id: i64) -> StoreResult<Option<(i64, String)>> {
                let result: StoreResult<Option<(i64, String)>> = async move {
                    let found: Option<(Option<i64>, Option<String>)> = sqlx::query_as(
                        "SELECT t.rubric_id, l.answers FROM labels l JOIN annotation_tasks t ON t.id = l.task_id WHERE l.id = $1",
                    )
                    .bind(label_id)
                    .fetch_optional(&self.pool)
                    .await?;
                    found
                        .map(|(rubric_id, answers)| rubric_id.map(|id| (id, answers.unwrap_or_default())))
                        .ok_or_else(|| StoreError::NotFound(format!("no label with id {label_id}")))
                }
                .await;
                result.map_err(|err| err.during("label_rubric"))
            }

            async fn raters(&self) -> StoreResult<Vec<RaterRecord>> {
                let result: StoreResult<Vec<RaterRecord>> = async move {
                    rater_records(&self.pool).await
                }
                .await;
                result.map_err(|err| err.during("raters"))
            }

            async fn update_rater(&self, user_id: UserId, update: &RaterUpdate) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    update_rater(&self.writer, user_id, update).await
                }
                .await;
                result.map_err(|err| err.during("update_rater"))
            }

            async fn run_labels(&self, run_id: RunId) -> StoreResult<Vec<RunLabel>> {
                let result: StoreResult<Vec<RunLabel>> = async move {
                    labels_of_run(&self.pool, run_id).await
                }
                .await;
                result.map_err(|err| err.during("run_labels"))
            }

            async fn invite_rater(&self, new: &arbiter_domain::annotation::pool::NewRater, hash: &PasswordHash) -> StoreResult<UserId> {
                let result: StoreResult<UserId> = async move {
                    insert_rater(&self.writer, new, hash).await
                }
                .await;
                result.map_err(|err| err.during("invite_rater"))
            }

            async fn check_review(
                &self,
                review_id: i64,
                checker_id: UserId,
                overturn_to: Option<bool>,
                reason: &str,
            ) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    decide_check(&self.writer, review_id, checker_id, overturn_to, reason).await
                }
                .await;
                result.map_err(|err| err.during("check_review"))
            }

            async fn create_gold(&self, task_id: TaskId, answer: GoldAnswer, note: &str, created_by: UserId) -> StoreResult<i64> {
                let result: StoreResult<i64> = async move {
                    insert_gold(&self.writer, task_id, answer, note, created_by).await
                }
                .await;
                result.map_err(|err| err.during("create_gold"))
            }

            async fn retire_gold(&self, gold_id: i64) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    retire_gold_item(&self.writer, gold_id).await
                }
                .await;
                result.map_err(|err| err.during("retire_gold"))
            }

            async fn gold_items(&self) -> StoreResult<Vec<arbiter_domain::annotation::gold::GoldItem>> {
                let result: StoreResult<Vec<arbiter_domain::annotation::gold::GoldItem>> = async move {
                    list_gold(&self.pool).await
                }
                .await;
                result.map_err(|err| err.during("gold_items"))
            }

            async fn gold_candidates(&self, limit: i64) -> StoreResult<Vec<arbiter_domain::annotation::gold::GoldCandidate>> {
                let result: StoreResult<Vec<arbiter_domain::annotation::gold::GoldCandidate>> = async move {
                    list_gold_candidates(&self.pool, limit).await
                }
                .await;
                result.map_err(|err| err.during("gold_candidates"))
            }

            async fn labelling_flow(&self, now: i64) -> StoreResult<arbiter_domain::annotation::sla::LabellingFlow> {
                let result: StoreResult<arbiter_domain::annotation::sla::LabellingFlow> = async move {
                    flow_of_labels(&self.pool, now).await
                }
                .await;
                result.map_err(|err| err.during("labelling_flow"))
            }

            async fn sla_days(&self, since: i64) -> StoreResult<Vec<arbiter_domain::annotation::sla::SlaDay>> {
                let result: StoreResult<Vec<arbiter_domain::annotation::sla::SlaDay>> = async move {
                    days_of_sla(&self.pool, since).await
                }
                .await;
                result.map_err(|err| err.during("sla_days"))
            }

            async fn escalate_tasks(&self, task_ids: &[TaskId], now: i64) -> StoreResult<u64> {
                let result: StoreResult<u64> = async move {
                    raise_priority(&self.writer, task_ids, now).await
                }
                .await;
                result.map_err(|err| err.during("escalate_tasks"))
            }

            async fn queue_labels(&self, since: i64) -> StoreResult<Vec<arbiter_domain::annotation::task::QueueLabel>> {
                let result: StoreResult<Vec<arbiter_domain::annotation::task::QueueLabel>> = async move {
                    labels_by_queue(&self.pool, since).await
                }
                .await;
                result.map_err(|err| err.during("queue_labels"))
            }

            async fn label_records(&self, run_id: RunId, after: (i64, i64), limit: i64) -> StoreResult<Vec<LabelRecord>> {
                labels_for_export(&self.pool, run_id, after, limit)
                    .await
                    .map_err(|err| err.during("label_records"))
            }

            async fn run_consensus(&self, run_id: RunId) -> StoreResult<Vec<arbiter_domain::annotation::consensus::Consensus>> {
                let result: StoreResult<Vec<String>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT t.consensus FROM annotation_tasks t JOIN work_items w ON w.id = t.work_item_id \
                         WHERE w.run_id = $1 AND t.consensus IS NOT NULL ORDER BY t.id",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                // Written by the server from the domain type; an unreadable one is left out.
                Ok(result
                    .map_err(|err| err.during("run_consensus"))?
                    .iter()
                    .filter_map(|json| serde_json::from_str(json).ok())
                    .collect())
            }

            async fn own_labels(&self, rater_id: UserId, limit: i64) -> StoreResult<Vec<OwnLabel>> {
                list_own_labels(&self.pool, rater_id, limit)
                    .await
                    .map_err(|err| err.during("own_labels"))
            }

            async fn edit_label(&self, label_id: i64, rater_id: UserId, pass: bool, rationale: &str) -> StoreResult<()> {
                change_own_label(&self.writer, label_id, rater_id, pass, None, rationale)
                    .await
                    .map_err(|err| err.during("edit_label"))
            }

            async fn edit_rubric_label(
                &self,
                label_id: i64,
                rater_id: UserId,
                answers: &str,
                pass: bool,
                rationale: &str,
            ) -> StoreResult<()> {
                change_own_label(&self.writer, label_id, rater_id, pass, Some(answers), rationale)
                    .await
                    .map_err(|err| err.during("edit_rubric_label"))
            }
        }
    };
}

pub(crate) use annotation_sql;
