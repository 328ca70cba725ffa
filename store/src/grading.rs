//! Grading records: judge versions, each eval's versioned triage policy, the grade cache of
//! judge calls, the human-checked verdicts judges are calibrated against, and costs by stage.

use arbiter_domain::ids::{EvalId, RunId, UserId};
use async_trait::async_trait;

#[async_trait]
pub trait GradingStore: Send + Sync + 'static {
    /// Stores a judge, as version 1 of a new name or the next version of an existing one.
    async fn create_judge(&self, new: &NewJudge, created_by: Option<UserId>) -> StoreResult<Judge>;

    /// Every judge version, newest version of each name first.
    async fn list_judges(&self) -> StoreResult<Vec<Judge>>;

    async fn get_judge(&self, id: i64) -> StoreResult<Option<Judge>>;

    /// Stores the next version of an eval's triage policy; returns its version number.
    async fn save_grading_policy(
        &self,
        eval_id: EvalId,
        policy: &arbiter_domain::grading::triage::TriagePolicy,
        note: &str,
        calibration_json: Option<&str>,
        created_by: Option<UserId>,
    ) -> StoreResult<i64>;

    /// Saves the policy as the next version only if `expected_latest` is still the eval's
    /// newest version (for re-tuning, which must never undo a save made while it computed);
    /// `None` when another version came first.
    async fn save_grading_policy_after(
        &self,
        eval_id: EvalId,
        expected_latest: i64,
        policy: &arbiter_domain::grading::triage::TriagePolicy,
        note: &str,
        calibration_json: Option<&str>,
    ) -> StoreResult<Option<i64>>;

    /// An eval's policy versions, newest first.
    async fn grading_policies(&self, eval_id: EvalId) -> StoreResult<Vec<PolicyVersion>>;

    /// A judge call answered before, by its grade cache key.
    async fn cached_judge_call(&self, cache_key: &str) -> StoreResult<Option<JudgeCall>>;

    /// The judge's verdicts (grader id `judge:name@version`) on items humans have labelled,
    /// with the humans' majority verdict (ties left out).
    async fn human_checked_judgements(
        &self,
        grader_id: &str,
    ) -> StoreResult<Vec<HumanCheckedJudgement>>;

    /// A scale judge's scores (grader id `judge:name@version`) on items whose raters answered
    /// a version of rubric `rubric_name`, with the raters' consensus and the item's sampling
    /// rate, oldest grade first.
    async fn human_scored_judgements(
        &self,
        grader_id: &str,
        rubric_name: &str,
    ) -> StoreResult<Vec<ScoredJudgementRow>>;

    /// Claims the drift canary of a judge version that has a previous version and no canary
    /// yet (oldest first), or of one whose claim went stale (started before `stale_before`):
    /// `(judge id, previous version's id)`, `None` when there is nothing to do. A failed canary
    /// is claimed again once stale too. The canary's baseline is settled when it finishes (see
    /// [`CanaryEnd::Done`]).
    async fn claim_judge_canary(
        &self,
        claimed_by: &str,
        now: i64,
        stale_before: i64,
    ) -> StoreResult<Option<(i64, i64)>>;

    /// The reference set of a judge version (grader id `judge:name@version`): the items it
    /// graded pass or fail in one sample (as the canary asks) that humans also labelled (their
    /// majority verdict, ties left out), oldest first, at most `limit`.
    async fn judge_reference_items(
        &self,
        grader_id: &str,
        limit: i64,
    ) -> StoreResult<Vec<ReferenceItem>>;

    /// Records a canary's end (`done` with its report, or `failed` with the reason) if
    /// `claimed_by` still holds it; whether it did.
    async fn finish_judge_canary(
        &self,
        judge_id: i64,
        claimed_by: &str,
        finished: &CanaryEnd,
        now: i64,
    ) -> StoreResult<bool>;

    /// Every judge version's canary, newest judge first.
    async fn judge_canaries(&self) -> StoreResult<Vec<JudgeCanary>>;

    /// Total cost and grade count of a judge's calls (grader id `judge:name@version`).
    async fn judge_usage(&self, grader_id: &str) -> StoreResult<(i64, f64)>;

    /// Cost by stage and identities by deciding stage, for one run.
    async fn run_costs(&self, run_id: RunId) -> StoreResult<RunCosts>;
}

/// How a judge version's canary ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CanaryEnd {
    Done {
        /// The earlier version compared with: the newest one humans checked.
        baseline_judge_id: i64,
        reference_items: Vec<i64>,
        report: DriftReport,
    },
    Failed {
        error: String,
    },
}

/// A scale judge's score on an item and the raters' consensus on it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredJudgementRow {
    pub score: arbiter_domain::grading::scale::ScoreRecord,
    pub consensus: arbiter_domain::annotation::consensus::Consensus,
    pub sampling_rate: f64,
}

/// A nullable JSON column read into its type.
pub(crate) fn json_column<T: serde::de::DeserializeOwned>(
    column: Option<String>,
) -> Result<Option<T>, sqlx::Error> {
    column
        .map(|text| serde_json::from_str(&text).map_err(|err| sqlx::Error::Decode(err.into())))
        .transpose()
}

/// The SQL of [`GradingStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! grading_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::{EvalId, RunId, UserId};
        use arbiter_domain::grading::canary::ReferenceItem;
        use arbiter_domain::grading::judge::{HumanCheckedJudgement, Judge, JudgeCall, NewJudge};
        use arbiter_domain::grading::triage::{PolicyVersion, TriagePolicy};
        use arbiter_domain::run::RunCosts;
        use $crate::{StoreError, StoreResult, now_ms};

        const JUDGE_SELECT: &str = "SELECT j.id, j.name, j.version, j.checkpoint_id, c.name AS checkpoint_name, \
            j.rubric, j.max_tokens, j.created_at, j.scale, j.pairwise, j.batch_items FROM judges j JOIN checkpoints c ON c.id = j.checkpoint_id";

        fn judge_from_row(row: &<$db as sqlx::Database>::Row) -> Result<Judge, sqlx::Error> {
            Ok($crate::read_columns!(row, Judge {
                id,
                name,
                version,
                checkpoint_id,
                checkpoint_name,
                rubric,
                max_tokens,
                created_at,
                pairwise,
                batch_items,
                ;
                scale: $crate::grading::json_column(row.read("scale")?)?,
            }))
        }

        /// Inserts the next policy version; with `expected_latest`, only if that is still the
        /// newest version (`None` otherwise).
        async fn insert_policy(
            writer: &sqlx::Pool<$db>,
            eval_id: EvalId,
            expected_latest: Option<i64>,
            policy: &TriagePolicy,
            note: &str,
            calibration_json: Option<&str>,
            created_by: Option<UserId>,
        ) -> StoreResult<Option<i64>> {
                let result: StoreResult<Option<i64>> = async move {
                    let mut tx = writer.begin_with($begin).await?;
                    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM evals WHERE id = $1")
                        .bind(eval_id.get())
                        .fetch_optional(&mut *tx)
                        .await?;
                    if exists.is_none() {
                        return Err(StoreError::NotFound(format!("no eval with id {eval_id}")));
                    }
                    for judge in [policy.cheap_judge, policy.strong_judge].into_iter().flatten() {
                        let found: Option<i64> = sqlx::query_scalar("SELECT id FROM judges WHERE id = $1")
                            .bind(judge)
                            .fetch_optional(&mut *tx)
                            .await?;
                        if found.is_none() {
                            return Err(StoreError::NotFound(format!("no judge with id {judge}")));
                        }
                    }
                    let version: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) + 1 FROM grading_policies WHERE eval_id = $1")
                        .bind(eval_id.get())
                        .fetch_one(&mut *tx)
                        .await?;
                    if expected_latest.is_some_and(|expected| expected + 1 != version) {
                        tx.rollback().await?;
                        return Ok(None);
                    }
                    let inserted = sqlx::query(
                        "INSERT INTO grading_policies (eval_id, version, policy_json, note, calibration_json, created_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    )
                    .bind(eval_id.get())
                    .bind(version)
                    .bind(serde_json::to_string(policy).expect("policies always serialize"))
                    .bind(note)
                    .bind(calibration_json)
                    .bind(created_by.map(i64::from))
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "grading_policies_eval_version_key", "the policy was changed at the same moment; reload and try again"));
                    match inserted {
                        // Another save took this version number first.
                        Err(StoreError::Conflict(_)) if expected_latest.is_some() => return Ok(None),
                        other => other?,
                    };
                    tx.commit().await?;
                    Ok(Some(version))
                }
                .await;
                result.map_err(|err| err.during("save_grading_policy"))
        }

        #[async_trait::async_trait]
        impl $crate::grading::GradingStore for $store {
            async fn create_judge(&self, new: &NewJudge, created_by: Option<UserId>) -> StoreResult<Judge> {
                let result: StoreResult<Judge> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let checkpoint: Option<String> = sqlx::query_scalar("SELECT name FROM checkpoints WHERE id = $1")
                        .bind(new.checkpoint_id.get())
                        .fetch_optional(&mut *tx)
                        .await?;
                    let Some(checkpoint_name) = checkpoint else {
                        return Err(StoreError::NotFound(format!("no checkpoint with id {}", new.checkpoint_id)));
                    };
                    let version: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) + 1 FROM judges WHERE name = $1")
                        .bind(&new.name)
                        .fetch_one(&mut *tx)
                        .await?;
                    let now = now_ms();
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO judges (name, version, checkpoint_id, rubric, max_tokens, created_by, created_at, scale, pairwise, batch_items) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
                    )
                    .bind(&new.name)
                    .bind(version)
                    .bind(new.checkpoint_id.get())
                    .bind(&new.rubric)
                    .bind(new.max_tokens)
                    .bind(created_by.map(i64::from))
                    .bind(now)
                    .bind(new.scale.as_ref().map(|scale| serde_json::to_string(scale).expect("scales always serialize")))
                    .bind(new.pairwise)
                    .bind(new.batch_items)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|err| $crate::conflict_on($backend, err, "judges_name_version_key", "another version of this judge was saved at the same moment; try again"))?;
                    tx.commit().await?;
                    Ok(Judge {
                        id,
                        name: new.name.clone(),
                        version,
                        checkpoint_id: new.checkpoint_id,
                        checkpoint_name,
                        rubric: new.rubric.clone(),
                        max_tokens: new.max_tokens,
                        created_at: now,
                        scale: new.scale.clone(),
                        pairwise: new.pairwise,
                        batch_items: new.batch_items,
                    })
                }
                .await;
                result.map_err(|err| err.during("create_judge"))
            }

            async fn list_judges(&self) -> StoreResult<Vec<Judge>> {
                let result: StoreResult<Vec<Judge>> = async move {
                    let rows = sqlx::query(&format!("{JUDGE_SELECT} ORDER BY j.name, j.version DESC"))
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(judge_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("list_judges"))
            }

            async fn get_judge(&self, id: i64) -> StoreResult<Option<Judge>> {
                let result: StoreResult<Option<Judge>> = async move {
                    let row = sqlx::query(&format!("{JUDGE_SELECT} WHERE j.id = $1"))
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row.as_ref().map(judge_from_row).transpose()?)
                }
                .await;
                result.map_err(|err| err.during("get_judge"))
            }

            async fn save_grading_policy(
                &self,
                eval_id: EvalId,
                policy: &TriagePolicy,
                note: &str,
                calibration_json: Option<&str>,
                created_by: Option<UserId>,
            ) -> StoreResult<i64> {
                let saved = insert_policy(&self.writer, eval_id, None, policy, note, calibration_json, created_by).await?;
                Ok(saved.expect("a save expecting no version always saves"))
            }

            async fn save_grading_policy_after(
                &self,
                eval_id: EvalId,
                expected_latest: i64,
                policy: &TriagePolicy,
                note: &str,
                calibration_json: Option<&str>,
            ) -> StoreResult<Option<i64>> {
                insert_policy(&self.writer, eval_id, Some(expected_latest), policy, note, calibration_json, None).await
            }

            async fn grading_policies(&self, eval_id: EvalId) -> StoreResult<Vec<PolicyVersion>> {
                let result: StoreResult<Vec<PolicyVersion>> = async move {
                    let rows = sqlx::query(
                        "SELECT p.eval_id, p.version, p.policy_json, p.note, p.calibration_json, u.username, p.created_at \
                         FROM grading_policies p LEFT JOIN users u ON u.id = p.created_by \
                         WHERE p.eval_id = $1 ORDER BY p.version DESC",
                    )
                    .bind(eval_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            let policy_json: String = row.read("policy_json")?;
                            Ok(PolicyVersion {
                                eval_id: row.read("eval_id")?,
                                version: row.read("version")?,
                                policy: serde_json::from_str(&policy_json)
                                    .map_err(|err| sqlx::Error::Decode(err.into()))?,
                                note: row.read("note")?,
                                calibration_json: row.read("calibration_json")?,
                                created_by: row.read("username")?,
                                created_at: row.read("created_at")?,
                            })
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("grading_policies"))
            }

            async fn cached_judge_call(&self, cache_key: &str) -> StoreResult<Option<JudgeCall>> {
                let result: StoreResult<Option<JudgeCall>> = async move {
                    let row = sqlx::query(
                        "SELECT cache_key, output, verdict, confidence, prompt_tokens, completion_tokens, model_used, score \
                         FROM grade_cache WHERE cache_key = $1",
                    )
                    .bind(cache_key)
                    .fetch_optional(&self.pool)
                    .await?;
                    row.map(|row| {
                        let verdict: Option<String> = row.read("verdict")?;
                        Ok($crate::read_columns!(row, JudgeCall {
                            cache_key,
                            output,
                            confidence,
                            prompt_tokens,
                            completion_tokens,
                            model_used,
                            ;
                            pass: verdict.map(|verdict| verdict == "pass"),
                            score: $crate::grading::json_column(row.read("score")?)?,
                        }))
                    })
                    .transpose()
                    .map_err(|err: sqlx::Error| StoreError::from(err))
                }
                .await;
                result.map_err(|err| err.during("cached_judge_call"))
            }

            async fn human_checked_judgements(&self, grader_id: &str) -> StoreResult<Vec<HumanCheckedJudgement>> {
                let result: StoreResult<Vec<HumanCheckedJudgement>> = async move {
                    // From the (few) labelled items to their judge grades, never across all grades.
                    let rows: Vec<(f64, String, f64, i64, i64, f64)> = sqlx::query_as(
                        "SELECT g.confidence, g.verdict, COALESCE(g.cost_usd, 0.0), h.passes, h.labels, h.sampling_rate \
                         FROM (SELECT t.work_item_id, SUM(CASE WHEN l.verdict = 'pass' THEN 1 ELSE 0 END) AS passes, \
                                      COUNT(*) AS labels, MAX(t.sampling_rate) AS sampling_rate \
                               FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                               WHERE l.state = 'standing' GROUP BY t.work_item_id) h \
                         JOIN grades g ON g.work_item_id = h.work_item_id \
                         WHERE g.grader = $1 AND g.confidence IS NOT NULL AND g.verdict IN ('pass', 'fail') \
                         ORDER BY g.id",
                    )
                    .bind(grader_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .filter(|(_, _, _, passes, labels, _)| passes * 2 != *labels)
                        .map(|(confidence, verdict, cost_usd, passes, labels, sampling_rate)| HumanCheckedJudgement {
                            confidence,
                            judge_pass: verdict == "pass",
                            human_pass: passes * 2 > labels,
                            cost_usd,
                            sampling_rate,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("human_checked_judgements"))
            }

            async fn human_scored_judgements(&self, grader_id: &str, rubric_name: &str) -> StoreResult<Vec<$crate::grading::ScoredJudgementRow>> {
                let result: StoreResult<Vec<$crate::grading::ScoredJudgementRow>> = async move {
                    // From the decided rubric tasks (few) to their judge grades.
                    let rows: Vec<(String, String, f64)> = sqlx::query_as(
                        "SELECT g.score, t.consensus, t.sampling_rate FROM rubrics r \
                         JOIN annotation_tasks t ON t.rubric_id = r.id \
                         JOIN grades g ON g.work_item_id = t.work_item_id \
                         WHERE r.name = $1 AND t.consensus IS NOT NULL AND g.grader = $2 AND g.score IS NOT NULL \
                         ORDER BY g.id",
                    )
                    .bind(rubric_name)
                    .bind(grader_id)
                    .fetch_all(&self.pool)
                    .await?;
                    rows.into_iter()
                        .map(|(score, consensus, sampling_rate)| {
                            Ok($crate::grading::ScoredJudgementRow {
                                score: serde_json::from_str(&score).map_err(|err| sqlx::Error::Decode(err.into()))?,
                                consensus: serde_json::from_str(&consensus).map_err(|err| sqlx::Error::Decode(err.into()))?,
                                sampling_rate,
                            })
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("human_scored_judgements"))
            }

            async fn claim_judge_canary(&self, claimed_by: &str, now: i64, stale_before: i64) -> StoreResult<Option<(i64, i64)>> {
                let result: StoreResult<Option<(i64, i64)>> = async move {
                    let next: Option<(i64, i64)> = sqlx::query_as(
                        "SELECT j.id, p.id FROM judges j JOIN judges p ON p.name = j.name AND p.version = j.version - 1 \
                         WHERE NOT j.pairwise AND NOT p.pairwise \
                           AND NOT EXISTS (SELECT 1 FROM judge_canaries c WHERE c.judge_id = j.id) ORDER BY j.id LIMIT 1",
                    )
                    .fetch_optional(&self.writer)
                    .await?;
                    if let Some((judge_id, baseline)) = next {
                        // Two processes may pick the same version: the insert decides.
                        let claimed = sqlx::query(
                            "INSERT INTO judge_canaries (judge_id, baseline_judge_id, state, claimed_by, started_at) \
                             VALUES ($1, $2, 'running', $3, $4) ON CONFLICT (judge_id) DO NOTHING",
                        )
                        .bind(judge_id)
                        .bind(baseline)
                        .bind(claimed_by)
                        .bind(now)
                        .execute(&self.writer)
                        .await?
                        .rows_affected();
                        if claimed == 1 {
                            return Ok(Some((judge_id, baseline)));
                        }
                    }
                    // A claim left running by a process that died, or a canary that failed (its
                    // endpoint was down), is taken again once stale.
                    let stale: Option<(i64, i64)> = sqlx::query_as(
                        "SELECT judge_id, baseline_judge_id FROM judge_canaries \
                         WHERE state IN ('running', 'failed') AND started_at < $1 ORDER BY judge_id LIMIT 1",
                    )
                    .bind(stale_before)
                    .fetch_optional(&self.writer)
                    .await?;
                    let Some((judge_id, baseline)) = stale else {
                        return Ok(None);
                    };
                    let taken = sqlx::query(
                        "UPDATE judge_canaries SET claimed_by = $1, started_at = $2, state = 'running', \
                                finished_at = NULL, error = NULL \
                         WHERE judge_id = $3 AND state IN ('running', 'failed') AND started_at < $4",
                    )
                    .bind(claimed_by)
                    .bind(now)
                    .bind(judge_id)
                    .bind(stale_before)
                    .execute(&self.writer)
                    .await?
                    .rows_affected();
                    Ok((taken == 1).then_some((judge_id, baseline)))
                }
                .await;
                result.map_err(|err| err.during("claim_judge_canary"))
            }

            async fn judge_reference_items(&self, grader_id: &str, limit: i64) -> StoreResult<Vec<ReferenceItem>> {
                let result: StoreResult<Vec<ReferenceItem>> = async move {
                    let rows: Vec<(i64, String, String, String, String, i64, i64)> = sqlx::query_as(
                        "SELECT w.id, i.input, i.target, gen.output, g.verdict, h.passes, h.labels \
                         FROM (SELECT t.work_item_id, SUM(CASE WHEN l.verdict = 'pass' THEN 1 ELSE 0 END) AS passes, \
                                      COUNT(*) AS labels \
                               FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                               WHERE l.state = 'standing' AND t.work_item_id IS NOT NULL GROUP BY t.work_item_id) h \
                         JOIN grades g ON g.work_item_id = h.work_item_id \
                         JOIN work_items w ON w.id = h.work_item_id \
                         JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                         JOIN generations gen ON gen.work_item_id = w.id \
                         WHERE g.grader = $1 AND g.verdict IN ('pass', 'fail') AND g.agreement IS NULL \
                           AND h.passes * 2 <> h.labels \
                         ORDER BY w.id LIMIT $2",
                    )
                    .bind(grader_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(work_item_id, input, target, output, verdict, passes, labels)| ReferenceItem {
                            work_item_id,
                            input,
                            target,
                            output,
                            old_pass: verdict == "pass",
                            human_pass: passes * 2 > labels,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("judge_reference_items"))
            }

            async fn finish_judge_canary(&self, judge_id: i64, claimed_by: &str, finished: &$crate::grading::CanaryEnd, now: i64) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let (state, baseline, items, report, error) = match finished {
                        $crate::grading::CanaryEnd::Done { baseline_judge_id, reference_items, report } => (
                            "done",
                            Some(*baseline_judge_id),
                            Some(serde_json::to_string(reference_items).expect("ids always serialize")),
                            Some(serde_json::to_string(report).expect("reports always serialize")),
                            None,
                        ),
                        $crate::grading::CanaryEnd::Failed { error } => ("failed", None, None, None, Some(error.as_str())),
                    };
                    let updated = sqlx::query(
                        "UPDATE judge_canaries SET state = $1, reference_items = $2, report = $3, error = $4, finished_at = $5, \
                                baseline_judge_id = COALESCE($8, baseline_judge_id) \
                         WHERE judge_id = $6 AND claimed_by = $7 AND state = 'running'",
                    )
                    .bind(state)
                    .bind(items)
                    .bind(report)
                    .bind(error)
                    .bind(now)
                    .bind(judge_id)
                    .bind(claimed_by)
                    .bind(baseline)
                    .execute(&self.writer)
                    .await?
                    .rows_affected();
                    Ok(updated == 1)
                }
                .await;
                result.map_err(|err| err.during("finish_judge_canary"))
            }

            async fn judge_canaries(&self) -> StoreResult<Vec<arbiter_domain::grading::canary::JudgeCanary>> {
                let result: StoreResult<Vec<arbiter_domain::grading::canary::JudgeCanary>> = async move {
                    let rows = sqlx::query(
                        "SELECT c.judge_id, p.name AS baseline_name, p.version AS baseline_version, c.state, c.started_at, \
                                c.finished_at, c.reference_items, c.report, c.error \
                         FROM judge_canaries c JOIN judges p ON p.id = c.baseline_judge_id ORDER BY c.judge_id DESC",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            let name: String = row.read("baseline_name")?;
                            let version: i64 = row.read("baseline_version")?;
                            Ok(arbiter_domain::grading::canary::JudgeCanary {
                                judge_id: row.read("judge_id")?,
                                baseline: arbiter_domain::grading::judge::grader_id(&name, version),
                                state: row.read("state")?,
                                started_at: row.read("started_at")?,
                                finished_at: row.read("finished_at")?,
                                reference_items: $crate::grading::json_column(row.read("reference_items")?)?.unwrap_or_default(),
                                report: $crate::grading::json_column(row.read("report")?)?,
                                error: row.read("error")?,
                            })
                        })
                        .collect::<Result<_, sqlx::Error>>()
                        .map_err(StoreError::from)
                }
                .await;
                result.map_err(|err| err.during("judge_canaries"))
            }

            async fn judge_usage(&self, grader_id: &str) -> StoreResult<(i64, f64)> {
                let result: StoreResult<(i64, f64)> = async move {
                    Ok(sqlx::query_as(
                        "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0.0) FROM grades \
                         WHERE grader = $1 AND stage IN ('cheap_judge', 'strong_judge')",
                    )
                    .bind(grader_id)
                    .fetch_one(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("judge_usage"))
            }

            async fn run_costs(&self, run_id: RunId) -> StoreResult<RunCosts> {
                let result: StoreResult<RunCosts> = async move {
                    let (generation_usd, generation_calls, cached_generations): (f64, i64, i64) = sqlx::query_as(
                        "SELECT COALESCE(SUM(g.cost_usd), 0.0), \
                                COALESCE(SUM(CASE WHEN g.from_cache THEN 0 ELSE 1 END), 0), \
                                COALESCE(SUM(CASE WHEN g.from_cache THEN 1 ELSE 0 END), 0) \
                         FROM generations g JOIN work_items w ON w.id = g.work_item_id WHERE w.run_id = $1",
                    )
                    .bind(run_id.get())
                    .fetch_one(&self.pool)
                    .await?;
                    let (judging_usd, judge_grades, cached_judge_grades): (f64, i64, i64) = sqlx::query_as(
                        "SELECT COALESCE(SUM(gr.cost_usd), 0.0), COUNT(*), \
                                COALESCE(SUM(CASE WHEN gr.from_cache THEN 1 ELSE 0 END), 0) \
                         FROM grades gr JOIN work_items w ON w.id = gr.work_item_id \
                         WHERE w.run_id = $1 AND gr.stage IN ('cheap_judge', 'strong_judge')",
                    )
                    .bind(run_id.get())
                    .fetch_one(&self.pool)
                    .await?;
                    let human_labels: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM labels l JOIN annotation_tasks t ON t.id = l.task_id \
                         JOIN work_items w ON w.id = t.work_item_id WHERE w.run_id = $1",
                    )
                    .bind(run_id.get())
                    .fetch_one(&self.pool)
                    .await?;
                    let decided_by: Vec<(String, i64)> = sqlx::query_as(
                        "SELECT COALESCE(decided_by, 'unanswered') AS stage, COUNT(*) FROM work_items \
                         WHERE run_id = $1 GROUP BY COALESCE(decided_by, 'unanswered') ORDER BY 1",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(RunCosts {
                        generation_usd,
                        judging_usd,
                        human_labels,
                        generation_calls,
                        cached_generations,
                        judge_grades,
                        cached_judge_grades,
                        decided_by,
                    })
                }
                .await;
                result.map_err(|err| err.during("run_costs"))
            }
        }
    };
}

use crate::StoreResult;
use arbiter_domain::grading::canary::{DriftReport, JudgeCanary, ReferenceItem};
use arbiter_domain::grading::judge::{HumanCheckedJudgement, Judge, JudgeCall, NewJudge};
use arbiter_domain::grading::triage::PolicyVersion;
use arbiter_domain::run::RunCosts;
pub(crate) use grading_sql;
