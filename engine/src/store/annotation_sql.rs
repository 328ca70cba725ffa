//! The human annotation queue's SQL, for both backends (expanded next to `sql_store!`).
//!
//! Invariants, each kept inside one transaction:
//! - a rater holds at most one lease (a unique key), and never on an item they labelled or
//!   skipped;
//! - an item never has more live leases plus standing labels than the raters it needs, so
//!   exactly `labels_needed` distinct raters label it, even under concurrent claims (SQLite has
//!   one writer; PostgreSQL locks the task row it hands out) and expired leases (not counted);
//! - a label is accepted only from the rater holding a live lease, once;
//! - when the last label arrives the item is adjudicated, and a reviewer's rejection reopens it.

macro_rules! annotation_sql {
    ($db:ty, $begin:literal, $skip_locked:literal) => {
        use $crate::annotation::adjudication::{adjudicate, drawn_for_review, rater_quality, Vote};
        use $crate::store::{
            RaterLabel, RaterRecord, RaterUpdate, ReviewDecision, ReviewItem, RunLabel,
        };

        /// Tasks found full on a recount before a claim gives up for this call (the rater asks
        /// again a moment later); only concurrent claims on PostgreSQL make this happen.
        const MAX_FULL_TASKS_PASSED_OVER: usize = 8;

        /// The condition that task `t` has a slot free at time `now` (a bound parameter, or the
        /// server's own clock written as a number): its standing labels plus live leases are
        /// fewer than the raters it needs. One text for the claim, its recount and the counts.
        fn has_free_slot(now: &str) -> String {
            format!(
                "t.labels_done + (SELECT COUNT(*) FROM task_leases x WHERE x.task_id = t.id AND x.expires_at > {now}) \
                 < t.labels_needed"
            )
        }

        const NOT_HELD: &str = "this item is not leased to you (it was labelled, skipped or \
            reassigned, or its lease expired); take the next item";

        /// The rater's live item (its lease renewed), or the next one they may take.
        async fn claim_task(
            writer: &sqlx::Pool<$db>,
            user_id: i64,
            lease_ms: i64,
        ) -> StoreResult<Option<AnnotationTask>> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let rater: Option<(bool, bool, String)> =
                sqlx::query_as("SELECT active, paused, skills FROM users WHERE id = $1")
                    .bind(user_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some((active, paused, skills)) = rater else {
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
            // Renew the rater's own live lease first: "next" never hands out a second item.
            let mut held: Option<(i64, i64)> = sqlx::query_as(
                "UPDATE task_leases SET expires_at = $1 WHERE rater_id = $2 AND expires_at > $3 \
                 RETURNING task_id, expires_at",
            )
            .bind(now + lease_ms)
            .bind(user_id)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            if held.is_none() {
                sqlx::query("DELETE FROM task_leases WHERE rater_id = $1")
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
                // Skills as `,code,math,` so one pattern tests membership (tags are checked
                // to be letters, digits and dashes, so they hold no pattern characters).
                let skill_list = format!(",{skills},");
                let mut passed_over: Vec<i64> = Vec::new();
                let task = loop {
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "SELECT t.id FROM annotation_tasks t WHERE t.state = 'open' \
                         AND (t.skill IS NULL OR ",
                    );
                    select.push_bind(&skill_list);
                    select.push(" LIKE '%,' || t.skill || ',%') AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.task_id = t.id AND l.annotator_id = ");
                    select.push_bind(user_id);
                    select.push(") AND NOT EXISTS (SELECT 1 FROM annotation_skips s WHERE s.task_id = t.id AND s.user_id = ");
                    select.push_bind(user_id);
                    select.push(") AND ").push(has_free_slot(&now.to_string()));
                    for id in &passed_over {
                        select.push(" AND t.id <> ").push_bind(*id);
                    }
                    select.push(concat!(" ORDER BY t.priority DESC, t.due_at, t.id LIMIT 1 ", $skip_locked));
                    let Some(task_id) = select.build_query_scalar::<i64>().fetch_optional(&mut *tx).await? else {
                        break None;
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
                    .fetch_one(&mut *tx)
                    .await?;
                    if free {
                        break Some(task_id);
                    }
                    passed_over.push(task_id);
                    if passed_over.len() >= MAX_FULL_TASKS_PASSED_OVER {
                        break None;
                    }
                };
                if let Some(task_id) = task {
                    // Another rater's expired lease on this item no longer counts; drop it.
                    sqlx::query("DELETE FROM task_leases WHERE task_id = $1 AND expires_at <= $2")
                        .bind(task_id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO task_leases (task_id, rater_id, started_at, expires_at) VALUES ($1, $2, $3, $4)",
                    )
                    .bind(task_id)
                    .bind(user_id)
                    .bind(now)
                    .bind(now + lease_ms)
                    .execute(&mut *tx)
                    .await?;
                    held = Some((task_id, now + lease_ms));
                }
            }
            let Some((task_id, lease_expires_at)) = held else {
                tx.commit().await?;
                return Ok(None);
            };
            let row = sqlx::query(
                "SELECT i.input, i.target, g.output FROM annotation_tasks t \
                 JOIN work_items w ON w.id = t.work_item_id \
                 JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                 JOIN generations g ON g.work_item_id = w.id WHERE t.id = $1",
            )
            .bind(task_id)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(Some(AnnotationTask {
                task_id,
                input: row.try_get("input")?,
                target: row.try_get("target")?,
                output: row.try_get("output")?,
                lease_expires_at,
            }))
        }

        /// Records a label from the rater holding the item's live lease; adjudicates the item
        /// when it has all its labels.
        async fn submit_task_label(
            writer: &sqlx::Pool<$db>,
            task_id: i64,
            user_id: i64,
            pass: bool,
            rationale: &str,
        ) -> StoreResult<()> {
            let now = now_ms();
            let verdict = if pass { Verdict::Pass } else { Verdict::Fail };
            let mut tx = writer.begin_with($begin).await?;
            let started: Option<i64> = sqlx::query_scalar(
                "DELETE FROM task_leases WHERE task_id = $1 AND rater_id = $2 AND expires_at > $3 RETURNING started_at",
            )
            .bind(task_id)
            .bind(user_id)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(started) = started else {
                tx.rollback().await?;
                return Err(StoreError::Conflict(NOT_HELD.into()));
            };
            let label_id: i64 = sqlx::query_scalar(
                "INSERT INTO labels (task_id, annotator_id, verdict, rationale, created_at, duration_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            )
            .bind(task_id)
            .bind(user_id)
            .bind(verdict.as_str())
            .bind(rationale)
            .bind(now)
            .bind(now - started)
            .fetch_one(&mut *tx)
            .await
            .map_err(|err| conflict_on(err, "labels_task_annotator_key", "you have labelled this item already"))?;
            let (done, needed, review_rate): (i64, i64, f64) = sqlx::query_as(
                "UPDATE annotation_tasks SET labels_done = labels_done + 1 WHERE id = $1 \
                 RETURNING labels_done, labels_needed, review_rate",
            )
            .bind(task_id)
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
                    .bind(task_id)
                    .execute(&mut *tx)
                    .await?;
                adjudicate_task(&mut tx, task_id, now).await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// The item's final verdict from its standing labels (weighted by each rater's review
        /// record) or a reviewer's correction; an even split waits for a reviewer.
        async fn adjudicate_task(
            tx: &mut sqlx::Transaction<'_, $db>,
            task_id: i64,
            now: i64,
        ) -> Result<(), sqlx::Error> {
            let votes: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
                "SELECT u.username, l.verdict, l.rationale, \
                        (SELECT COUNT(*) FROM label_reviews r JOIN labels m ON m.id = r.label_id \
                         WHERE m.annotator_id = l.annotator_id AND r.decision = 'accepted'), \
                        (SELECT COUNT(*) FROM label_reviews r JOIN labels m ON m.id = r.label_id \
                         WHERE m.annotator_id = l.annotator_id AND r.decision <> 'accepted') \
                 FROM labels l JOIN users u ON u.id = l.annotator_id \
                 WHERE l.task_id = $1 AND l.state = 'standing' ORDER BY l.id",
            )
            .bind(task_id)
            .fetch_all(&mut **tx)
            .await?;
            let correction: Option<String> = sqlx::query_scalar(
                "SELECT r.verdict FROM label_reviews r JOIN labels l ON l.id = r.label_id \
                 WHERE l.task_id = $1 AND r.decision = 'corrected' ORDER BY r.id DESC LIMIT 1",
            )
            .bind(task_id)
            .fetch_optional(&mut **tx)
            .await?
            .flatten();
            let votes: Vec<Vote> = votes
                .into_iter()
                .map(|(rater, verdict, rationale, right, wrong)| Vote {
                    rater,
                    pass: verdict == "pass",
                    rationale,
                    quality: rater_quality(right.max(0) as u64, wrong.max(0) as u64),
                })
                .collect();
            let decided = adjudicate(&votes, correction.map(|verdict| verdict == "pass"));
            let Some(pass) = decided.pass else {
                // An even split: every standing label goes to the reviewers.
                sqlx::query(
                    "UPDATE labels SET review_state = 'pending' \
                     WHERE task_id = $1 AND state = 'standing' AND review_state IS NULL",
                )
                .bind(task_id)
                .execute(&mut **tx)
                .await?;
                return Ok(());
            };
            let verdict = if pass { Verdict::Pass } else { Verdict::Fail };
            let work_item_id: i64 =
                sqlx::query_scalar("SELECT work_item_id FROM annotation_tasks WHERE id = $1")
                    .bind(task_id)
                    .fetch_one(&mut **tx)
                    .await?;
            sqlx::query(
                "INSERT INTO grades (work_item_id, grader, verdict, extracted_answer, reason, stage, created_at) \
                 VALUES ($1, 'human', $2, NULL, $3, 'human', $4)",
            )
            .bind(work_item_id)
            .bind(verdict.as_str())
            .bind(&decided.reason)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            sqlx::query("UPDATE work_items SET verdict = $1, decided_by = 'human' WHERE id = $2")
                .bind(verdict.as_str())
                .bind(work_item_id)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        /// Gives the item back to the queue without a label; the rater is not offered it again.
        async fn skip_leased_task(
            writer: &sqlx::Pool<$db>,
            task_id: i64,
            user_id: i64,
        ) -> StoreResult<()> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let released = sqlx::query(
                "DELETE FROM task_leases WHERE task_id = $1 AND rater_id = $2 AND expires_at > $3",
            )
            .bind(task_id)
            .bind(user_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if released.rows_affected() == 0 {
                tx.rollback().await?;
                return Err(StoreError::Conflict(NOT_HELD.into()));
            }
            sqlx::query(
                "INSERT INTO annotation_skips (task_id, user_id, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(task_id)
            .bind(user_id)
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

        /// The oldest label waiting for a reviewer who did not write it, promotion decisions first.
        async fn next_pending_review(
            pool: &sqlx::Pool<$db>,
            reviewer_id: i64,
        ) -> StoreResult<Option<ReviewItem>> {
            let row = sqlx::query(
                "SELECT l.id, u.username, i.input, i.target, g.output, l.verdict, l.rationale, \
                        t.labels_needed, \
                        (SELECT COUNT(*) FROM labels o WHERE o.task_id = l.task_id AND o.state = 'standing' \
                         AND o.verdict <> l.verdict) AS dissent \
                 FROM labels l JOIN users u ON u.id = l.annotator_id \
                 JOIN annotation_tasks t ON t.id = l.task_id \
                 JOIN work_items w ON w.id = t.work_item_id \
                 JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                 JOIN generations g ON g.work_item_id = w.id \
                 WHERE l.review_state = 'pending' AND l.annotator_id <> $1 ORDER BY t.priority DESC, l.id LIMIT 1",
            )
            .bind(reviewer_id)
            .fetch_optional(pool)
            .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let verdict: String = row.try_get("verdict")?;
            let dissent: i64 = row.try_get("dissent")?;
            Ok(Some(ReviewItem {
                label_id: row.try_get("id")?,
                rater: row.try_get("username")?,
                input: row.try_get("input")?,
                target: row.try_get("target")?,
                output: row.try_get("output")?,
                pass: verdict == "pass",
                rationale: row.try_get("rationale")?,
                why: if dissent > 0 {
                    "the raters disagree on this item".into()
                } else {
                    "drawn for the random QC sample".into()
                },
            }))
        }

        /// A reviewer's decision: accepted labels stand, a correction decides the item, a
        /// rejected label stops counting and the item returns to the queue.
        async fn decide_review(
            writer: &sqlx::Pool<$db>,
            label_id: i64,
            reviewer_id: i64,
            decision: ReviewDecision,
            reason: &str,
        ) -> StoreResult<()> {
            let now = now_ms();
            let mut tx = writer.begin_with($begin).await?;
            let label: Option<(i64, i64, String, Option<String>)> = sqlx::query_as(
                "SELECT task_id, annotator_id, state, review_state FROM labels WHERE id = $1",
            )
            .bind(label_id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((task_id, rater_id, state, review_state)) = label else {
                return Err(StoreError::NotFound(format!("no label with id {label_id}")));
            };
            if rater_id == reviewer_id {
                return Err(StoreError::Conflict("you cannot review your own label".into()));
            }
            if state == "rejected" || review_state.as_deref().is_some_and(|s| s != "pending") {
                return Err(StoreError::Conflict("this label has been reviewed already".into()));
            }
            let corrected = match decision {
                ReviewDecision::Correct { pass } => Some(if pass { "pass" } else { "fail" }),
                _ => None,
            };
            sqlx::query(
                "INSERT INTO label_reviews (label_id, reviewer_id, decision, verdict, reason, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(label_id)
            .bind(reviewer_id)
            .bind(decision.as_str())
            .bind(corrected)
            .bind(reason)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(|err| conflict_on(err, "label_reviews_label_key", "this label has been reviewed already"))?;
            sqlx::query("UPDATE labels SET review_state = $1 WHERE id = $2")
                .bind(decision.as_str())
                .bind(label_id)
                .execute(&mut *tx)
                .await?;
            let task_done: bool = sqlx::query_scalar::<_, String>("SELECT state FROM annotation_tasks WHERE id = $1")
                .bind(task_id)
                .fetch_one(&mut *tx)
                .await?
                == "done";
            match decision {
                ReviewDecision::Accept => {}
                ReviewDecision::Correct { .. } => {
                    if task_done {
                        adjudicate_task(&mut tx, task_id, now).await?;
                    }
                }
                ReviewDecision::Reject => {
                    sqlx::query("UPDATE labels SET state = 'rejected' WHERE id = $1")
                        .bind(label_id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE annotation_tasks SET labels_done = labels_done - 1, state = 'open', completed_at = NULL \
                         WHERE id = $1",
                    )
                    .bind(task_id)
                    .execute(&mut *tx)
                    .await?;
                    if task_done {
                        restore_machine_verdict(&mut tx, task_id).await?;
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
            task_id: i64,
        ) -> Result<(), sqlx::Error> {
            let (work_item_id, kind): (i64, String) =
                sqlx::query_as("SELECT work_item_id, kind FROM annotation_tasks WHERE id = $1")
                    .bind(task_id)
                    .fetch_one(&mut **tx)
                    .await?;
            let judged: Option<(String, String)> = if kind == "audit" {
                sqlx::query_as(
                    "SELECT verdict, stage FROM grades WHERE work_item_id = $1 \
                     AND stage IN ('cheap_judge', 'strong_judge') AND verdict IN ('pass', 'fail') \
                     ORDER BY id DESC LIMIT 1",
                )
                .bind(work_item_id)
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
                .bind(work_item_id)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        /// Everyone who can label, with their last 30 days of labels.
        async fn rater_records(pool: &sqlx::Pool<$db>) -> StoreResult<Vec<RaterRecord>> {
            let since = now_ms() - 30 * 24 * 3_600_000;
            let raters: Vec<(i64, String, String, bool, bool, String, f64)> = sqlx::query_as(
                "SELECT id, username, role, active, paused, skills, weekly_capacity_hours FROM users \
                 WHERE role IN ('annotator', 'reviewer', 'lead', 'admin') ORDER BY username",
            )
            .fetch_all(pool)
            .await?;
            let labels: Vec<(i64, i64, Option<i64>, Option<String>, String, Option<String>, Option<String>)> =
                sqlx::query_as(
                    "SELECT l.annotator_id, l.created_at, l.duration_ms, l.review_state, l.verdict, \
                            w.verdict AS final_verdict, w.decided_by \
                     FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                     JOIN work_items w ON w.id = t.work_item_id WHERE l.created_at >= $1 ORDER BY l.id",
                )
                .bind(since)
                .fetch_all(pool)
                .await?;
            let mut by_rater: std::collections::HashMap<i64, Vec<RaterLabel>> =
                std::collections::HashMap::new();
            for (rater, created_at, duration_ms, review, verdict, final_verdict, decided_by) in labels {
                let matches_final = match (decided_by.as_deref(), final_verdict) {
                    (Some("human"), Some(final_verdict)) => Some(final_verdict == verdict),
                    _ => None,
                };
                by_rater.entry(rater).or_default().push(RaterLabel {
                    created_at,
                    duration_ms,
                    review,
                    matches_final,
                });
            }
            Ok(raters
                .into_iter()
                .map(|(id, username, role, active, paused, skills, capacity)| RaterRecord {
                    labels: by_rater.remove(&id).unwrap_or_default(),
                    id,
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
            user_id: i64,
            update: &RaterUpdate,
        ) -> StoreResult<()> {
            let mut tx = writer.begin_with($begin).await?;
            let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM users WHERE id = $1")
                .bind(user_id)
                .fetch_optional(&mut *tx)
                .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound(format!("no user with id {user_id}")));
            }
            if let Some(active) = update.active {
                sqlx::query("UPDATE users SET active = $1 WHERE id = $2")
                    .bind(active)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(paused) = update.paused {
                sqlx::query("UPDATE users SET paused = $1 WHERE id = $2")
                    .bind(paused)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(skills) = &update.skills {
                sqlx::query("UPDATE users SET skills = $1 WHERE id = $2")
                    .bind(skills.join(","))
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(hours) = update.weekly_capacity_hours {
                sqlx::query("UPDATE users SET weekly_capacity_hours = $1 WHERE id = $2")
                    .bind(hours)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
            if update.paused == Some(true) || update.active == Some(false) {
                sqlx::query("DELETE FROM task_leases WHERE rater_id = $1")
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// The standing labels on a run's items.
        async fn labels_of_run(pool: &sqlx::Pool<$db>, run_id: i64) -> StoreResult<Vec<RunLabel>> {
            let rows: Vec<(i64, i64, i64, String, String)> = sqlx::query_as(
                "SELECT l.id, l.task_id, l.annotator_id, u.username, l.verdict FROM labels l \
                 JOIN users u ON u.id = l.annotator_id JOIN annotation_tasks t ON t.id = l.task_id \
                 JOIN work_items w ON w.id = t.work_item_id \
                 WHERE w.run_id = $1 AND l.state = 'standing' ORDER BY l.task_id, l.id",
            )
            .bind(run_id)
            .fetch_all(pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(label_id, task_id, rater_id, rater, verdict)| RunLabel {
                    label_id,
                    task_id,
                    rater_id,
                    rater,
                    pass: verdict == "pass",
                })
                .collect())
        }
    };
}

pub(super) use annotation_sql;
