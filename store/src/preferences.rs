//! Side-by-side preference: pairs of two runs' answers to the same cases, sent to raters, and
//! the raters' answers. A pair is an annotation task of kind `pair`, so the queue's claims,
//! overlap, skips, priorities and SLAs (in [`crate::annotation`]) serve it like any item;
//! here are the pairs' creation, their labels and what reports read.
//!
//! Invariants, each kept inside one transaction:
//! - a request creates all its pairs or none, never a pair of two items already paired;
//! - a preference is accepted only from the rater holding the pair's live lease, once, and the
//!   pair is decided when its last label arrives (as single items are); on a gold pair it is a
//!   gold answer instead, which never counts as a label;
//! - a sample of preferences, and every preference on a pair whose raters split, waits for a
//!   senior reviewer, whose correction decides the pair and whose rejection reopens it.

use crate::StoreResult;
pub use arbiter_domain::annotation::preference::PairRequestSummary;
use arbiter_domain::annotation::preference::{DimensionChoices, PairSelection, Preference};
use arbiter_domain::annotation::review::PairReviewDecision;
use arbiter_domain::annotation::task::{ClaimHandle, TrainingFeedback};
use arbiter_domain::grading::pairwise::PairVerdict;
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
    /// The rubric version whose dimensions raters compare the outputs on, if any.
    pub rubric_id: Option<i64>,
    /// Share of answers drawn for senior review (as the eval's grading policy sets for items).
    pub review_rate: f64,
    /// A pairwise judge asked before raters, if any.
    pub judging: Option<PairJudging>,
}

/// A pairwise judge asked first on a request's pairs.
#[derive(Clone, Debug, PartialEq)]
pub struct PairJudging {
    pub judge_id: i64,
    /// Least confidence (both orders agreeing) at which the judge's choice decides a pair.
    pub threshold: f64,
    /// Share of the pairs the judge decided that raters label anyway (to calibrate it).
    pub audit_rate: f64,
}

/// A pair waiting for its pairwise judge, claimed by a worker: its texts as raters see them.
#[derive(Clone, Debug, PartialEq)]
pub struct PairToJudge {
    pub task_id: i64,
    /// The left answer's result identity (its request is the pair's question as sent).
    pub identity_id: Option<i64>,
    pub judging: PairJudging,
    /// When the pair was sent (its task made).
    pub sent_at: i64,
    pub input: String,
    pub left_output: String,
    pub right_output: String,
}

/// What a pairwise judge said on a pair, to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewPairJudgement {
    pub task_id: i64,
    pub judge_id: i64,
    /// Each order's reply and reading, as JSON.
    pub left_first: String,
    pub right_first: String,
    pub verdict: PairVerdict,
    /// The verdict decides the pair (no rater needed).
    pub decided: bool,
    /// It would have, but the pair was drawn for raters anyway.
    pub audited: bool,
    /// Why the judge gave no verdict (an endpoint that failed, a prompt too long).
    pub failure: Option<String>,
}

/// A pair's judgement with the raters' decided choice, where they decided one.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgedPair {
    pub judge_id: i64,
    pub verdict: PairVerdict,
    pub human: Option<Preference>,
    /// The judge decided it, but raters labelled it anyway (at this audit share).
    pub audited_at: Option<f64>,
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
    /// The rater's choices per dimension, when the pair asks a rubric.
    pub dimensions: Option<DimensionChoices>,
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

    /// Records the preference of the rater holding the pair leased under `handle`, with their
    /// choices per dimension when the pair asks a rubric (checked by the caller against it); on
    /// a gold pair it is a gold answer, and a rater in training gets feedback on it.
    async fn submit_preference(
        &self,
        handle: &ClaimHandle,
        user_id: UserId,
        choice: Preference,
        dimensions: Option<&DimensionChoices>,
        rationale: &str,
    ) -> StoreResult<Option<TrainingFeedback>>;

    /// Records a reviewer's decision on a rater's preference waiting for review and served to
    /// them (see [`crate::annotation::AnnotationStore::next_review`]); `Conflict` otherwise
    /// (not drawn, reviewed already, served to someone else, or on a pair they answered),
    /// `NotFound` for no such preference.
    async fn review_preference(
        &self,
        label_id: i64,
        reviewer_id: UserId,
        decision: PairReviewDecision,
        reason: &str,
    ) -> StoreResult<()>;

    /// Every preference label on pairs of `eval_id`'s runs (all evals for `None`), by pair; a
    /// pair a pairwise judge decided counts as the judge's label (rater id minus the judge's
    /// id, named by its grader id).
    async fn preference_rows(&self, eval_id: Option<i64>) -> StoreResult<Vec<PreferenceRow>>;

    /// Claims up to `limit` pairs waiting for their pairwise judge (unclaimed, or claimed
    /// before `stale_before` by a worker that died) for `worker`, with their texts.
    async fn claim_pairs_to_judge(
        &self,
        worker: &str,
        now: i64,
        stale_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<PairToJudge>>;

    /// Records a judgement by the worker holding the pair's claim: the pair is then decided by
    /// the judge, or offered to raters. `false` (nothing stored) when the claim is no longer
    /// the worker's.
    async fn record_pair_judgement(
        &self,
        worker: &str,
        judgement: &NewPairJudgement,
    ) -> StoreResult<bool>;

    /// Every pair a pairwise judge (or `judge_id`) judged with a verdict, with the raters'
    /// decided choice where they decided one: the judge's calibration data.
    async fn judged_pairs(&self, judge_id: Option<i64>) -> StoreResult<Vec<JudgedPair>>;
}

/// The SQL of [`PreferenceStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! preferences_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use $crate::preferences::{NewPairRequest, PairRequestSummary, PreferenceRow};
        use arbiter_domain::annotation::adjudication::{rater_quality, sla_hours};
        use arbiter_domain::annotation::preference::{choices_in_words, decide_pair, draw_pairs, pair_consensus, DimensionChoices, PairSelection, Preference};
        use arbiter_domain::annotation::adjudication::drawn_for_review;
        use arbiter_domain::annotation::gold::GoldAnswer;
        use arbiter_domain::annotation::review::{OwnLabel, PairReviewDecision, ReviewItem, ReviewOutcome, ReviewPair};
        use arbiter_domain::annotation::task::{ClaimHandle, TaskPair, TrainingFeedback};
        use arbiter_domain::ids::UserId;
        use arbiter_domain::run::Priority;
        use $crate::{StoreError, StoreResult, now_ms};

        const SUMMARY_SELECT: &str = "SELECT q.id, e.id AS eval_id, e.name AS eval_name, q.run_a, q.run_b, \
            ca.name AS checkpoint_a, cb.name AS checkpoint_b, q.selection, q.pairs, q.labels_needed, \
            (SELECT COUNT(*) FROM preference_pairs p JOIN annotation_tasks t ON t.id = p.task_id \
             WHERE p.request_id = q.id AND t.state = 'done') AS pairs_done, \
            (SELECT COUNT(*) FROM preference_pairs p JOIN preference_labels l ON l.task_id = p.task_id \
             WHERE p.request_id = q.id) AS labels, \
            q.note, u.username AS requested_by, q.created_at, \
            qr.name || '@' || CAST(qr.version AS TEXT) AS rubric, \
            'judge:' || qj.name || '@' || CAST(qj.version AS TEXT) AS judge, \
            (SELECT COUNT(*) FROM preference_pairs p JOIN pair_judgements j ON j.task_id = p.task_id \
             WHERE p.request_id = q.id AND j.decided AND NOT j.audited) AS judge_decided \
            FROM pair_requests q JOIN runs ra ON ra.id = q.run_a JOIN runs rb ON rb.id = q.run_b \
            LEFT JOIN rubrics qr ON qr.id = q.rubric_id LEFT JOIN judges qj ON qj.id = q.judge_id \
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
                rubric,
                judge,
                judge_decided,
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

        /// A pair's choice, kept on the task as its consensus: a reviewer's correction if there
        /// is one; else the standing preferences, each rater weighted by their record; on a split,
        /// the choice reviewers accepted (when they accepted one choice only). A pair still split
        /// sends its standing preferences to the reviewers, and once every one is reviewed and it
        /// is still split, it asks one more rater. `decided_at` moves only when the choice does, so
        /// the `label.completed` webhook sends each decision once.
        async fn decide_pair_task(
            tx: &mut sqlx::Transaction<'_, $db>,
            task_id: i64,
            now: i64,
        ) -> Result<(), sqlx::Error> {
            // Reviewers' words, latest first: each a decision and the choice it stands for.
            let reviewed: Vec<(String, String)> = sqlx::query_as(
                "SELECT r.decision, COALESCE(r.choice, l.choice) FROM pair_reviews r \
                 JOIN preference_labels l ON l.id = r.label_id WHERE l.task_id = $1 \
                 AND (r.decision = 'corrected' OR (r.decision = 'accepted' AND l.state = 'standing')) \
                 ORDER BY r.created_at DESC, r.id DESC",
            )
            .bind(task_id)
            .fetch_all(&mut **tx)
            .await?;
            let words = |wanted: &str| -> Vec<Preference> {
                reviewed
                    .iter()
                    .filter(|(decision, _)| decision == wanted)
                    .filter_map(|(_, choice)| Preference::parse(choice).ok())
                    .collect()
            };
            let mut decided = words("corrected").first().copied();
            if decided.is_none() {
                let votes: Vec<(String, i64, i64)> = sqlx::query_as(&format!(
                    "SELECT l.choice, {} FROM preference_labels l WHERE l.task_id = $1 AND l.state = 'standing' ORDER BY l.id",
                    super::annotation_sql::rater_record_sql("l.rater_id"),
                ))
                .bind(task_id)
                .fetch_all(&mut **tx)
                .await?;
                let votes: Vec<(Preference, f64)> = votes
                    .into_iter()
                    .filter_map(|(choice, right, wrong)| {
                        let quality = rater_quality(right.max(0) as u64, wrong.max(0) as u64);
                        Preference::parse(&choice).ok().map(|choice| (choice, quality))
                    })
                    .collect();
                decided = decide_pair(&votes);
            }
            if decided.is_none() {
                let mut accepted = words("accepted");
                accepted.sort_unstable();
                accepted.dedup();
                if let [only] = accepted.as_slice() {
                    decided = Some(*only);
                }
            }
            let consensus = pair_consensus(decided).to_string();
            let (before, was_decided): (Option<String>, bool) = sqlx::query_as(
                "SELECT consensus, decided_at IS NOT NULL FROM annotation_tasks WHERE id = $1",
            )
            .bind(task_id)
            .fetch_one(&mut **tx)
            .await?;
            if before.as_deref() != Some(consensus.as_str()) || was_decided != decided.is_some() {
                sqlx::query("UPDATE annotation_tasks SET consensus = $1, decided_at = $2 WHERE id = $3")
                    .bind(&consensus)
                    .bind(decided.map(|_| now))
                    .bind(task_id)
                    .execute(&mut **tx)
                    .await?;
            }
            if decided.is_some() {
                return Ok(());
            }
            sqlx::query(
                "UPDATE preference_labels SET review_state = 'pending' \
                 WHERE task_id = $1 AND state = 'standing' AND review_state IS NULL",
            )
            .bind(task_id)
            .execute(&mut **tx)
            .await?;
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM preference_labels WHERE task_id = $1 AND state = 'standing' AND review_state = 'pending'",
            )
            .bind(task_id)
            .fetch_one(&mut **tx)
            .await?;
            if waiting == 0 {
                // Reviewed and still split (reviewers accepted answers that disagree): one more
                // rater breaks the tie.
                sqlx::query(
                    "UPDATE annotation_tasks SET labels_needed = labels_needed + 1, state = 'open', \
                     completed_at = NULL, consensus = NULL, decided_at = NULL WHERE id = $1",
                )
                .bind(task_id)
                .execute(&mut **tx)
                .await?;
            }
            Ok(())
        }

        /// A rater's choices per dimension in words, from a row with `dimensions` and
        /// `rubric_definition` (empty for a pair that asks one choice; both were checked when
        /// stored, and unreadable ones show nothing rather than fail).
        fn dimension_words(row: &<$db as sqlx::Database>::Row) -> Result<Vec<(String, String)>, sqlx::Error> {
            let choices: Option<String> = row.read("dimensions")?;
            let definition: Option<String> = row.read("rubric_definition")?;
            let (Some(choices), Some(definition)) = (choices, definition) else {
                return Ok(Vec::new());
            };
            Ok(match (serde_json::from_str::<DimensionChoices>(&choices), serde_json::from_str(&definition)) {
                (Ok(choices), Ok(rubric)) => choices_in_words(&rubric, &choices),
                _ => Vec::new(),
            })
        }


        /// The preference this reviewer holds for review, or the oldest free one on a pair they
        /// did not answer (higher-priority pairs first), now served to them alone.
        pub(crate) async fn serve_pair_review(
            writer: &sqlx::Pool<$db>,
            reviewer_id: UserId,
        ) -> StoreResult<Option<ReviewItem>> {
            let served =
                super::annotation_sql::serve_for_review(writer, "preference_labels", "rater_id", reviewer_id, now_ms())
                    .await?;
            let Some(label_id) = served else {
                return Ok(None);
            };
            let row = sqlx::query(&format!(
                "SELECT l.id AS label_id, {}, u.username, l.choice, l.rationale, l.dimensions, \
                        qr.definition AS rubric_definition, \
                        (SELECT COUNT(*) FROM preference_labels o WHERE o.task_id = l.task_id AND o.state = 'standing' \
                         AND o.choice <> l.choice) AS dissent \
                 FROM preference_labels l JOIN users u ON u.id = l.rater_id \
                 JOIN annotation_tasks t ON t.id = l.task_id LEFT JOIN rubrics qr ON qr.id = t.rubric_id {} WHERE l.id = $1",
                super::annotation_sql::SHOWN_TASK_COLUMNS,
                super::annotation_sql::SHOWN_TASK_JOINS,
            ))
            .bind(label_id)
            .fetch_one(writer)
            .await?;
            let dissent: i64 = row.read("dissent")?;
            let choice: String = row.read("choice")?;
            let choice = Preference::parse(&choice).map_err(|message| sqlx::Error::Decode(message.into()))?;
            // A run's answer purged by retention shows as empty: the reviewer can still reject.
            let output: Option<String> = row.read("output")?;
            let right_output: Option<String> = row.read("right_output")?;
            Ok(Some(ReviewItem {
                label_id,
                identity_id: row.read("identity_id")?,
                rater: row.read("username")?,
                input: row.read::<Option<String>>("input")?.unwrap_or_default(),
                images: Vec::new(),
                target: row.read::<Option<String>>("target")?.unwrap_or_default(),
                output: output.unwrap_or_default(),
                pass: false,
                rationale: row.read("rationale")?,
                why: if dissent > 0 {
                    "the raters disagree on this pair".to_string()
                } else {
                    "drawn for the random QC sample".to_string()
                },
                check: None,
                shown: None,
                answers: dimension_words(&row)?,
                rubric: None,
                pair: Some(ReviewPair {
                    choice,
                    right: TaskPair {
                        right_output: right_output.unwrap_or_default(),
                        right_shown: None,
                    },
                }),
            }))
        }

        /// A rater's choices on pairs for their feedback page: those a reviewer corrected or
        /// rejected, those waiting for a reviewer, and those on pairs still waiting for other
        /// raters; newest first, at most `limit`. A choice cannot be changed once given.
        pub(crate) async fn own_preferences(
            pool: &sqlx::Pool<$db>,
            rater_id: UserId,
            limit: i64,
        ) -> StoreResult<Vec<OwnLabel>> {
            let rows = sqlx::query(&format!(
                "SELECT l.id AS label_id, {}, l.choice, l.rationale, l.created_at, l.dimensions, \
                        qr.definition AS rubric_definition, \
                        CASE WHEN pr.choice = l.choice THEN 'accepted' ELSE pr.decision END AS decision, \
                        CASE WHEN pr.choice = l.choice THEN NULL ELSE pr.choice END AS corrected_choice, \
                        pr.reason, pr.created_at AS decided_at \
                 FROM preference_labels l JOIN annotation_tasks t ON t.id = l.task_id \
                 LEFT JOIN rubrics qr ON qr.id = t.rubric_id {} \
                 LEFT JOIN pair_reviews pr ON pr.label_id = l.id \
                 WHERE l.rater_id = $1 \
                   AND ((t.state <> 'done' AND l.state = 'standing') OR l.review_state = 'pending' \
                        OR pr.decision = 'rejected' OR (pr.decision = 'corrected' AND pr.choice <> l.choice)) \
                 ORDER BY l.id DESC LIMIT $2",
                super::annotation_sql::SHOWN_TASK_COLUMNS,
                super::annotation_sql::SHOWN_TASK_JOINS,
            ))
            .bind(rater_id.get())
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let choice_of = |text: String| Preference::parse(&text).map_err(|message| sqlx::Error::Decode(message.into()));
            let mut labels = Vec::with_capacity(rows.len());
            for row in &rows {
                let decision: Option<String> = row.read("decision")?;
                let review = match decision {
                    Some(decision) => Some(ReviewOutcome {
                        decision,
                        corrected_to: None,
                        corrected_answers: Vec::new(),
                        corrected_choice: row.read::<Option<String>>("corrected_choice")?.map(choice_of).transpose()?,
                        reason: row.read("reason")?,
                        decided_at: row.read("decided_at")?,
                        overturned_to: None,
                    }),
                    None => None,
                };
                labels.push(OwnLabel {
                    label_id: row.read("label_id")?,
                    identity_id: row.read("identity_id")?,
                    input: row.read::<Option<String>>("input")?.unwrap_or_default(),
                    images: Vec::new(),
                    target: row.read::<Option<String>>("target")?.unwrap_or_default(),
                    output: row.read::<Option<String>>("output")?.unwrap_or_default(),
                    pass: false,
                    rationale: row.read("rationale")?,
                    created_at: row.read("created_at")?,
                    edited_at: None,
                    editable: Err("a choice on a pair cannot be changed after it is submitted".into()),
                    review,
                    shown: None,
                    answers: dimension_words(row)?,
                    rubric: None,
                    pair: Some(ReviewPair {
                        choice: choice_of(row.read("choice")?)?,
                        right: TaskPair {
                            right_output: row.read::<Option<String>>("right_output")?.unwrap_or_default(),
                            right_shown: None,
                        },
                    }),
                });
            }
            Ok(labels)
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
                        "INSERT INTO pair_requests (run_a, run_b, selection, pairs, labels_needed, seed, note, requested_by, created_at, rubric_id, \
                         judge_id, judge_threshold, audit_rate) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id",
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
                    .bind(request.rubric_id)
                    .bind(request.judging.as_ref().map(|judging| judging.judge_id))
                    .bind(request.judging.as_ref().map(|judging| judging.threshold))
                    .bind(request.judging.as_ref().map_or(0.0, |judging| judging.audit_rate))
                    .fetch_one(&mut *tx)
                    .await?;
                    for pair in &drawn {
                        let task_id: i64 = sqlx::query_scalar(
                            "INSERT INTO annotation_tasks (work_item_id, reason, kind, labels_needed, review_rate, \
                             priority, due_at, state, created_at, run_id, rubric_id) \
                             VALUES (NULL, $1, 'pair', $2, $7, $3, $4, 'open', $5, $6, $8) RETURNING id",
                        )
                        .bind(format!("pair request {request_id}"))
                        .bind(request.labels_needed)
                        .bind(priority.rank())
                        .bind(due_at)
                        .bind(now)
                        .bind(request.run_a.get())
                        .bind(request.review_rate)
                        .bind(request.rubric_id)
                        .fetch_one(&mut *tx)
                        .await?;
                        sqlx::query(
                            "INSERT INTO preference_pairs (task_id, request_id, left_item_id, right_item_id, judge_state) \
                             VALUES ($1, $2, $3, $4, $5)",
                        )
                        .bind(task_id)
                        .bind(request_id)
                        .bind(pair.left)
                        .bind(pair.right)
                        .bind(request.judging.as_ref().map(|_| "pending"))
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
                dimensions: Option<&DimensionChoices>,
                rationale: &str,
            ) -> StoreResult<Option<TrainingFeedback>> {
                let result: StoreResult<Option<TrainingFeedback>> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
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
                        return Err(StoreError::Conflict(super::annotation_sql::NOT_HELD.into()));
                    };
                    let (kind, asks_rubric): (String, Option<i64>) =
                        sqlx::query_as("SELECT kind, rubric_id FROM annotation_tasks WHERE id = $1")
                            .bind(task_id)
                            .fetch_one(&mut *tx)
                            .await?;
                    if kind != "pair" {
                        tx.rollback().await?;
                        return Err(StoreError::Conflict(
                            "this item is one output, not a pair: label it pass or fail (or answer its rubric)".into(),
                        ));
                    }
                    if asks_rubric.is_some() != dimensions.is_some() {
                        tx.rollback().await?;
                        return Err(StoreError::Conflict(if asks_rubric.is_some() {
                            "this pair asks which output is better on each dimension of its rubric".into()
                        } else {
                            "this pair asks one choice, not one per dimension".into()
                        }));
                    }
                    if let Some(gold_id) = gold_id {
                        let feedback = super::annotation_sql::record_gold_answer(
                            &mut tx, gold_id, user_id, GoldAnswer::Pair(choice), now - started, now,
                        )
                        .await?;
                        tx.commit().await?;
                        return Ok(feedback);
                    }
                    let label_id: i64 = sqlx::query_scalar(
                        "INSERT INTO preference_labels (task_id, rater_id, choice, rationale, duration_ms, created_at, dimensions) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                    )
                    .bind(task_id)
                    .bind(user_id.get())
                    .bind(choice.as_str())
                    .bind(rationale)
                    .bind(now - started)
                    .bind(now)
                    .bind(dimensions.map(|choices| serde_json::to_string(choices).expect("choices always serialize")))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "preference_labels_task_rater_key", "you have answered this pair already"))?;
                    let (done, needed, review_rate): (i64, i64, f64) = sqlx::query_as(
                        "UPDATE annotation_tasks SET labels_done = labels_done + 1 WHERE id = $1 \
                         RETURNING labels_done, labels_needed, review_rate",
                    )
                    .bind(task_id)
                    .fetch_one(&mut *tx)
                    .await?;
                    if drawn_for_review(review_rate, label_id) {
                        sqlx::query("UPDATE preference_labels SET review_state = 'pending' WHERE id = $1")
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
                        decide_pair_task(&mut tx, task_id, now).await?;
                    }
                    tx.commit().await?;
                    Ok(None)
                }
                .await;
                result.map_err(|err| err.during("submit_preference"))
            }

            async fn review_preference(
                &self,
                label_id: i64,
                reviewer_id: UserId,
                decision: PairReviewDecision,
                reason: &str,
            ) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
                    // The pair's row first, locked on PostgreSQL: a last answer arriving or another
                    // reviewer deciding on the same pair waits, so the decision below reads where
                    // the pair stands (and a correction is never lost to an answer's decision).
                    let task: Option<(String, Option<i64>)> = sqlx::query_as(
                        "UPDATE annotation_tasks SET labels_done = labels_done \
                         WHERE id = (SELECT task_id FROM preference_labels WHERE id = $1) RETURNING state, decided_at",
                    )
                    .bind(label_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((task_state, decided_at)) = task else {
                        return Err(StoreError::NotFound(format!("no preference with id {label_id}")));
                    };
                    let task_done = task_state == "done";
                    let (task_id, rater_id, state, review_state, served_to): (i64, i64, String, Option<String>, Option<i64>) =
                        sqlx::query_as(
                            "SELECT task_id, rater_id, state, review_state, review_served_to FROM preference_labels WHERE id = $1",
                        )
                        .bind(label_id)
                        .fetch_one(&mut *tx)
                        .await?;
                    arbiter_domain::annotation::review::may_review(
                        "preference",
                        reviewer_id,
                        UserId(rater_id),
                        &state,
                        review_state.as_deref(),
                        served_to.map(UserId),
                    )
                    .map_err(StoreError::Conflict)?;
                    let answered: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM preference_labels WHERE task_id = $1 AND rater_id = $2",
                    )
                    .bind(task_id)
                    .bind(reviewer_id.get())
                    .fetch_one(&mut *tx)
                    .await?;
                    if answered > 0 {
                        return Err(StoreError::Conflict("you answered this pair, so another reviewer decides it".into()));
                    }
                    sqlx::query(
                        "INSERT INTO pair_reviews (label_id, reviewer_id, decision, choice, reason, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(label_id)
                    .bind(reviewer_id.get())
                    .bind(decision.as_str())
                    .bind(decision.correction().map(Preference::as_str))
                    .bind(reason)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "pair_reviews_label_key", "this preference has been reviewed already"))?;
                    // Conditional, as for labels: a preference served again to another reviewer
                    // since it was read above refuses this decision, and the review goes back.
                    let decided = sqlx::query(
                        "UPDATE preference_labels SET review_state = $1 \
                         WHERE id = $2 AND review_state = 'pending' AND review_served_to = $3",
                    )
                    .bind(decision.as_str())
                    .bind(label_id)
                    .bind(reviewer_id.get())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if decided != 1 {
                        return Err(StoreError::Conflict(
                            "this preference was served to another reviewer meanwhile; take your next item on the review page".into(),
                        ));
                    }
                    match decision {
                        // An accepted answer weighs its rater's later answers, and settles a
                        // split; a decided pair keeps its decision.
                        PairReviewDecision::Accept => {
                            if task_done && decided_at.is_none() {
                                decide_pair_task(&mut tx, task_id, now).await?;
                            }
                        }
                        // A correction decides the pair, also one to the answer's own choice
                        // (which the rater's record counts as right, see `rater_record_sql`).
                        PairReviewDecision::Correct(_) => {
                            if task_done {
                                decide_pair_task(&mut tx, task_id, now).await?;
                            }
                        }
                        PairReviewDecision::Reject => {
                            sqlx::query("UPDATE preference_labels SET state = 'rejected' WHERE id = $1")
                                .bind(label_id)
                                .execute(&mut *tx)
                                .await?;
                            sqlx::query(
                                "UPDATE annotation_tasks SET labels_done = labels_done - 1, state = 'open', completed_at = NULL, \
                                 consensus = NULL, decided_at = NULL WHERE id = $1",
                            )
                            .bind(task_id)
                            .execute(&mut *tx)
                            .await?;
                        }
                    }
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("review_preference"))
            }

            async fn preference_rows(&self, eval_id: Option<i64>) -> StoreResult<Vec<PreferenceRow>> {
                let result: StoreResult<Vec<PreferenceRow>> = async move {
                    const SIDES: &str = "JOIN work_items wl ON wl.id = p.left_item_id JOIN work_items wr ON wr.id = p.right_item_id \
                         JOIN checkpoints cl ON cl.id = wl.checkpoint_id JOIN checkpoints cr ON cr.id = wr.checkpoint_id \
                         JOIN runs r ON r.id = wl.run_id JOIN evals e ON e.id = r.eval_id";
                    const COLUMNS: &str = "e.id AS eval_id, e.name AS eval_name, p.task_id, \
                                wl.checkpoint_id AS left_checkpoint_id, cl.name AS left_checkpoint, \
                                wr.checkpoint_id AS right_checkpoint_id, cr.name AS right_checkpoint";
                    // Pairs a pairwise judge decided are the judge's labels (raters never saw them).
                    let rows = sqlx::query(&format!(
                        "SELECT {COLUMNS}, l.rater_id, u.username AS rater, l.choice, l.dimensions, l.id AS label_order \
                         FROM preference_labels l JOIN preference_pairs p ON p.task_id = l.task_id {SIDES} \
                         JOIN users u ON u.id = l.rater_id \
                         WHERE ($1 IS NULL OR r.eval_id = $1) AND l.state = 'standing' \
                         UNION ALL \
                         SELECT {COLUMNS}, -jg.id, 'judge:' || jg.name || '@' || CAST(jg.version AS TEXT), j.choice, NULL, 0 \
                         FROM pair_judgements j JOIN preference_pairs p ON p.task_id = j.task_id {SIDES} \
                         JOIN judges jg ON jg.id = j.judge_id \
                         WHERE ($1 IS NULL OR r.eval_id = $1) AND j.decided AND NOT j.audited \
                         ORDER BY 3, 12",
                    ))
                    .bind(eval_id)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            let choice: String = row.read("choice")?;
                            let choice = Preference::parse(&choice)
                                .map_err(|message| sqlx::Error::Decode(message.into()))?;
                            let dimensions: Option<String> = row.read("dimensions")?;
                            // Checked when stored; unreadable ones count for the overall choice only.
                            let dimensions = dimensions.and_then(|json| serde_json::from_str(&json).ok());
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
                                dimensions: dimensions,
                            }))
                        })
                        .collect::<Result<Vec<_>, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("preference_rows"))
            }

            async fn claim_pairs_to_judge(
                &self,
                worker: &str,
                now: i64,
                stale_before: i64,
                limit: i64,
            ) -> StoreResult<Vec<$crate::preferences::PairToJudge>> {
                let result: StoreResult<Vec<$crate::preferences::PairToJudge>> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let ids: Vec<i64> = sqlx::query_scalar(concat!(
                        "SELECT task_id FROM preference_pairs WHERE judge_state = 'pending' \
                         AND (judge_claimed_at IS NULL OR judge_claimed_at < $1) ORDER BY task_id LIMIT $2 ",
                        $skip_locked
                    ))
                    .bind(stale_before)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                    if ids.is_empty() {
                        tx.commit().await?;
                        return Ok(Vec::new());
                    }
                    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
                    sqlx::query(&format!(
                        "UPDATE preference_pairs SET judge_claimed_by = $1, judge_claimed_at = $2 \
                         WHERE task_id IN ({list}) AND judge_state = 'pending'"
                    ))
                    .bind(worker)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    let rows = sqlx::query(&format!(
                        "SELECT t.id AS task_id, t.created_at AS sent_at, {}, q.judge_id, q.judge_threshold, q.audit_rate \
                         FROM annotation_tasks t {} JOIN pair_requests q ON q.id = p.request_id \
                         WHERE t.id IN ({list}) ORDER BY t.id",
                        super::annotation_sql::SHOWN_TASK_COLUMNS,
                        super::annotation_sql::SHOWN_TASK_JOINS,
                    ))
                    .fetch_all(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    rows.iter()
                        .map(|row| {
                            let text = |column: &str| -> Result<String, sqlx::Error> {
                                Ok(row.read::<Option<String>>(column)?.unwrap_or_default())
                            };
                            Ok($crate::preferences::PairToJudge {
                                task_id: row.read("task_id")?,
                                identity_id: row.read("identity_id")?,
                                judging: $crate::preferences::PairJudging {
                                    judge_id: row.read("judge_id")?,
                                    threshold: row.read::<Option<f64>>("judge_threshold")?.unwrap_or(1.0),
                                    audit_rate: row.read("audit_rate")?,
                                },
                                sent_at: row.read("sent_at")?,
                                input: text("input")?,
                                left_output: text("output")?,
                                right_output: text("right_output")?,
                            })
                        })
                        .collect::<Result<Vec<_>, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("claim_pairs_to_judge"))
            }

            async fn record_pair_judgement(
                &self,
                worker: &str,
                judgement: &$crate::preferences::NewPairJudgement,
            ) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let now = now_ms();
                    let mut tx = self.writer.begin_with($begin).await?;
                    let held = sqlx::query(
                        "UPDATE preference_pairs SET judge_state = 'judged', judge_claimed_by = NULL \
                         WHERE task_id = $1 AND judge_state = 'pending' AND judge_claimed_by = $2",
                    )
                    .bind(judgement.task_id)
                    .bind(worker)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if held != 1 {
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    let verdict = &judgement.verdict;
                    sqlx::query(
                        "INSERT INTO pair_judgements (task_id, judge_id, left_first, right_first, verdict, choice, \
                         confidence, consistent, decided, audited, failure, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                    )
                    .bind(judgement.task_id)
                    .bind(judgement.judge_id)
                    .bind(&judgement.left_first)
                    .bind(&judgement.right_first)
                    .bind(serde_json::to_string(verdict).expect("verdicts always serialize"))
                    .bind(verdict.choice.map(Preference::as_str))
                    .bind(verdict.confidence)
                    .bind(verdict.consistent)
                    .bind(judgement.decided)
                    .bind(judgement.audited)
                    .bind(judgement.failure.as_deref())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    if judgement.decided && !judgement.audited {
                        let grader: String = sqlx::query_scalar(
                            "SELECT 'judge:' || name || '@' || CAST(version AS TEXT) FROM judges WHERE id = $1",
                        )
                        .bind(judgement.judge_id)
                        .fetch_one(&mut *tx)
                        .await?;
                        let mut consensus = pair_consensus(verdict.choice);
                        consensus["judge"] = serde_json::Value::String(grader);
                        // No `decided_at`: that stamps what humans decided (the `label.completed`
                        // webhook, gold candidates).
                        let closed = sqlx::query(
                            "UPDATE annotation_tasks SET state = 'done', completed_at = $1, consensus = $2 \
                             WHERE id = $3 AND state = 'open'",
                        )
                        .bind(now)
                        .bind(consensus.to_string())
                        .bind(judgement.task_id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                        if closed != 1 {
                            // No rater can have touched a pair waiting for its judge; a pair
                            // not open is gone or changed underneath: nothing is kept.
                            tx.rollback().await?;
                            return Ok(false);
                        }
                    }
                    tx.commit().await?;
                    Ok(true)
                }
                .await;
                result.map_err(|err| err.during("record_pair_judgement"))
            }

            async fn judged_pairs(&self, judge_id: Option<i64>) -> StoreResult<Vec<$crate::preferences::JudgedPair>> {
                let result: StoreResult<Vec<$crate::preferences::JudgedPair>> = async move {
                    // A judge that failed to answer judged nothing (its pair went to raters).
                    let rows: Vec<(i64, String, Option<String>, bool, bool, f64)> = sqlx::query_as(
                        "SELECT j.judge_id, j.verdict, CASE WHEN t.decided_at IS NULL THEN NULL ELSE t.consensus END, \
                                j.decided AND NOT j.audited, j.audited, q.audit_rate \
                         FROM pair_judgements j JOIN annotation_tasks t ON t.id = j.task_id \
                         JOIN preference_pairs p ON p.task_id = j.task_id JOIN pair_requests q ON q.id = p.request_id \
                         WHERE ($1 IS NULL OR j.judge_id = $1) AND j.failure IS NULL ORDER BY j.task_id",
                    )
                    .bind(judge_id)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.into_iter()
                        .map(|(judge_id, verdict, consensus, by_judge, audited, audit_rate)| {
                            Ok($crate::preferences::JudgedPair {
                                judge_id,
                                verdict: serde_json::from_str(&verdict).map_err(|err| sqlx::Error::Decode(err.into()))?,
                                // The raters' choice: none on a pair the judge decided alone.
                                human: if by_judge {
                                    None
                                } else {
                                    consensus.as_deref().and_then(arbiter_domain::annotation::preference::decided_choice)
                                },
                                audited_at: audited.then_some(audit_rate),
                            })
                        })
                        .collect::<Result<Vec<_>, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("judged_pairs"))
            }
        }
    };
}
pub(crate) use preferences_sql;
