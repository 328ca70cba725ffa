//! What reports and comparisons read: per-category tallies kept by triggers as results arrive,
//! packed run snapshots, streamed scans and export pages in identity order, per-prompt diff
//! sides and logprobs, promotion decisions, and the runs and watches of trends.

use crate::{StoreError, StoreResult};
use arbiter_domain::ids::{EvalId, IdentityId, RunId, UserId};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A run snapshot as stored: the tallies' version it was built from and its packed bytes
/// (see [`arbiter_domain::reports::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub version: String,
    pub identity_hash: String,
    pub data: Vec<u8>,
    pub build_ms: i64,
}

/// One result identity as exported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ExportRow {
    #[sqlx(try_from = "i64")]
    pub run_id: RunId,
    /// Exported as `work_item_id`, the column's name since the first export format.
    #[serde(rename = "work_item_id")]
    #[sqlx(try_from = "i64")]
    pub identity_id: IdentityId,
    pub case_id: String,
    pub repetition: i64,
    /// The turn of a conversation (from 1; 1 for items that are not conversations).
    pub turn: i64,
    pub category: String,
    pub checkpoint: String,
    pub input: String,
    pub target: String,
    /// pass, fail, uncertain, error, or empty before a verdict.
    pub verdict: String,
    pub decided_by: String,
    pub outcome: String,
    pub output: String,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub error_category: Option<String>,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    pub from_cache: bool,
    pub latency_ms: Option<i64>,
    pub attempts: Option<i64>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    /// When the answer was recorded (ms since the Unix epoch).
    pub answered_at: Option<i64>,
    /// A likelihood eval's answer: every choice's score and the right ones, as JSON (written
    /// into JSON Lines exports as an object, not as a string).
    #[serde(serialize_with = "embedded_json")]
    pub choice_scores: Option<String>,
    /// How long the answer waited inside Arbiter for a request slot (not in `latency_ms`);
    /// empty for answers recorded before this was kept.
    pub waited_ms: Option<i64>,
}

/// A run's final verdicts split by whether their item was found in the training corpus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContaminationCounts {
    pub flagged_cases: i64,
    pub flagged_pass: i64,
    pub flagged_fail: i64,
    pub clean_pass: i64,
    pub clean_fail: i64,
}

/// Writes stored JSON text as the JSON it holds (`null` when absent or unreadable).
/// Rows of (case id, repetition, a JSON column), the column read as `T`; a value that does not
/// decode is a decode error, not a skipped row.
pub(crate) fn decode_json_column<T: serde::de::DeserializeOwned>(
    rows: Vec<(String, i64, String)>,
) -> StoreResult<Vec<(String, i64, T)>> {
    rows.into_iter()
        .map(|(case_id, repetition, json)| {
            let value =
                serde_json::from_str(&json).map_err(|err| sqlx::Error::Decode(err.into()))?;
            Ok((case_id, repetition, value))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(StoreError::from)
}

fn embedded_json<S: serde::Serializer>(
    text: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    let value = text
        .as_deref()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
    value.serialize(serializer)
}

#[async_trait]
pub trait ReportStore: Send + Sync + 'static {
    /// The run's per-category counts, kept by triggers as results arrive.
    async fn run_tallies(
        &self,
        run_id: RunId,
    ) -> StoreResult<Vec<arbiter_domain::reports::TallyRow>>;

    async fn stored_snapshot(&self, run_id: RunId) -> StoreResult<Option<StoredSnapshot>>;

    async fn save_snapshot(
        &self,
        run_id: RunId,
        item_count: i64,
        snapshot: &StoredSnapshot,
    ) -> StoreResult<()>;

    /// Completed runs without a snapshot built since they completed, oldest first.
    async fn runs_needing_snapshots(&self, limit: i64) -> StoreResult<Vec<RunId>>;

    async fn record_promotion_decision(&self, decision: &NewPromotionDecision) -> StoreResult<i64>;

    /// Decisions where the run is the baseline or the candidate, newest first.
    async fn promotion_decisions(&self, run_id: RunId)
        -> StoreResult<Vec<PromotionDecisionRecord>>;

    /// The latest (not cancelled) run of the eval on each checkpoint of the training run
    /// (every checkpoint for ''), in training order: by step, then registration.
    async fn trend_runs(&self, eval_id: EvalId, training_run: &str) -> StoreResult<Vec<TrendRun>>;

    /// The training runs checkpoints name, sorted.
    async fn training_runs(&self) -> StoreResult<Vec<String>>;

    async fn save_trend_watch(
        &self,
        watch: &TrendWatch,
        created_by: Option<UserId>,
    ) -> StoreResult<()>;

    async fn delete_trend_watch(&self, eval_id: EvalId, training_run: &str) -> StoreResult<()>;

    async fn trend_watches(&self) -> StoreResult<Vec<TrendWatch>>;

    /// Streams every identity of the run in identity order (never the whole run in memory).
    async fn scan_run(
        &self,
        run_id: RunId,
        sink: &mut (dyn FnMut(arbiter_domain::reports::snapshot::ScanRow) + Send),
    ) -> StoreResult<()>;

    /// The deterministic graders that graded the run's answers (kept by a trigger).
    async fn run_graders(&self, run_id: RunId) -> StoreResult<Vec<String>>;

    /// Every sample of the run grouped by case and turn in repetition order: (case id, turn,
    /// the answer its latest deterministic grade extracted, its final verdict: `Some(true)`
    /// pass, `Some(false)` fail, `None` undecided or no answer).
    async fn run_votes(
        &self,
        run_id: RunId,
    ) -> StoreResult<Vec<(String, i64, Option<String>, Option<bool>)>>;

    /// A likelihood run's scored answers: (case id, repetition, every choice's score), in the
    /// order the identities were planned (dataset order, repetition by repetition).
    async fn run_choice_scores(
        &self,
        run_id: RunId,
    ) -> StoreResult<Vec<(String, i64, arbiter_domain::likelihood::ChoiceScores)>>;

    /// A rolling-likelihood run's scored documents: (case id, repetition, score), in the order
    /// the identities were planned (dataset order), which is the order lm-eval sums them in.
    async fn run_rolling_scores(
        &self,
        run_id: RunId,
    ) -> StoreResult<Vec<(String, i64, arbiter_domain::rolling::RollingScore)>>;

    /// An instruction-following run's per-instruction results: (case id, repetition, each
    /// instruction followed strictly and loosely), in case and repetition order.
    async fn run_instruction_results(
        &self,
        run_id: RunId,
    ) -> StoreResult<
        Vec<(
            String,
            i64,
            Vec<arbiter_domain::grading::instructions::InstructionResult>,
        )>,
    >;

    /// Records a run's contaminated items (kept once per case, whatever is recorded again).
    async fn record_contamination(
        &self,
        run_id: RunId,
        flags: &[(String, arbiter_domain::contamination::Overlap)],
    ) -> StoreResult<()>;

    /// A run's verdicts split by contamination: (flagged cases, and of the final verdicts
    /// pass and fail: flagged pass, flagged fail, clean pass, clean fail).
    async fn contamination_split(&self, run_id: RunId) -> StoreResult<ContaminationCounts>;

    /// A page of the run's results for export, in identity order after `after_id`.
    async fn export_rows(
        &self,
        run_id: RunId,
        after_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<crate::ExportRow>>;

    /// The diff's view of these result identities: texts, outcomes, grades and labels.
    async fn diff_sides(&self, identity_ids: &[IdentityId]) -> StoreResult<Vec<DiffSide>>;

    /// The stored per-token logprobs of an answer (compact form, see [`arbiter_domain::logprobs`]).
    async fn generation_logprobs(&self, identity_id: IdentityId) -> StoreResult<Option<Vec<u8>>>;
}

/// The SQL of [`ReportStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! reports_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use sqlx::Row;
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::{CheckpointId, EvalId, IdentityId, RunId, UserId};
        use $crate::{StoreError, StoreResult, now_ms};
        use arbiter_domain::reports::diff::DiffGrade;

        impl $store {
            /// A run's scored generations' `scores` JSON: (case id, repetition, JSON), in the
            /// order the identities were planned (dataset order, repetition by repetition).
            async fn run_scores_json(&self, run_id: RunId) -> Result<Vec<(String, i64, String)>, sqlx::Error> {
                sqlx::query_as(
                    "SELECT w.case_id, w.repetition, g.scores FROM work_items w \
                     JOIN generations g ON g.work_item_id = w.id \
                     WHERE w.run_id = $1 AND g.scores IS NOT NULL ORDER BY w.id",
                )
                .bind(run_id.get())
                .fetch_all(&self.pool)
                .await
            }
        }

        #[async_trait::async_trait]
        impl $crate::reports::ReportStore for $store {
            async fn generation_logprobs(&self, identity_id: IdentityId) -> StoreResult<Option<Vec<u8>>> {
                let result: StoreResult<Option<Vec<u8>>> = async move {
                    Ok(sqlx::query_scalar("SELECT logprobs FROM generation_logprobs WHERE work_item_id = $1")
                        .bind(identity_id.get())
                        .fetch_optional(&self.pool)
                        .await?)
                }
                .await;
                result.map_err(|err| err.during("generation_logprobs"))
            }

            async fn run_tallies(&self, run_id: RunId) -> StoreResult<Vec<arbiter_domain::reports::TallyRow>> {
                let result: StoreResult<Vec<arbiter_domain::reports::TallyRow>> = async move {
                    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
                        "SELECT category, field, value, count FROM run_tallies WHERE run_id = $1 AND count <> 0 \
                         ORDER BY category, field, value",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(category, field, value, count)| arbiter_domain::reports::TallyRow { category, field, value, count })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("run_tallies"))
            }

            async fn stored_snapshot(&self, run_id: RunId) -> StoreResult<Option<$crate::StoredSnapshot>> {
                let result: StoreResult<Option<$crate::StoredSnapshot>> = async move {
                    let row: Option<(String, String, Vec<u8>, i64)> = sqlx::query_as(
                        "SELECT version, identity_hash, data, build_ms FROM run_snapshots WHERE run_id = $1",
                    )
                    .bind(run_id.get())
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row.map(|(version, identity_hash, data, build_ms)| $crate::StoredSnapshot { version, identity_hash, data, build_ms }))
                }
                .await;
                result.map_err(|err| err.during("stored_snapshot"))
            }

            async fn save_snapshot(&self, run_id: RunId, item_count: i64, snapshot: &$crate::StoredSnapshot) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO run_snapshots (run_id, version, identity_hash, item_count, data, built_at, build_ms) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id) DO UPDATE SET \
                         version = excluded.version, identity_hash = excluded.identity_hash, item_count = excluded.item_count, \
                         data = excluded.data, built_at = excluded.built_at, build_ms = excluded.build_ms",
                    )
                    .bind(run_id.get())
                    .bind(&snapshot.version)
                    .bind(&snapshot.identity_hash)
                    .bind(item_count)
                    .bind(&snapshot.data)
                    .bind(now_ms())
                    .bind(snapshot.build_ms)
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("save_snapshot"))
            }

            async fn record_promotion_decision(&self, decision: &arbiter_domain::reports::decision::NewPromotionDecision) -> StoreResult<i64> {
                let result: StoreResult<i64> = async move {
                    Ok(sqlx::query_scalar(
                        "INSERT INTO promotion_decisions (baseline_run_id, candidate_run_id, decision, note, summary_json, decided_by, decided_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                    )
                    .bind(decision.baseline_run_id.get())
                    .bind(decision.candidate_run_id.get())
                    .bind(if decision.promote { "promote" } else { "reject" })
                    .bind(&decision.note)
                    .bind(&decision.summary_json)
                    .bind(decision.decided_by.map(i64::from))
                    .bind(now_ms())
                    .fetch_one(&self.writer)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("record_promotion_decision"))
            }

            async fn promotion_decisions(&self, run_id: RunId) -> StoreResult<Vec<arbiter_domain::reports::decision::PromotionDecisionRecord>> {
                let result: StoreResult<Vec<arbiter_domain::reports::decision::PromotionDecisionRecord>> = async move {
                    let rows = sqlx::query(
                        "SELECT d.id, d.baseline_run_id, d.candidate_run_id, cb.name AS baseline_checkpoint, \
                         cc.name AS candidate_checkpoint, d.decision, d.note, d.summary_json, u.username, d.decided_at \
                         FROM promotion_decisions d \
                         JOIN runs rb ON rb.id = d.baseline_run_id JOIN checkpoints cb ON cb.id = rb.checkpoint_id \
                         JOIN runs rc ON rc.id = d.candidate_run_id JOIN checkpoints cc ON cc.id = rc.checkpoint_id \
                         LEFT JOIN users u ON u.id = d.decided_by \
                         WHERE d.baseline_run_id = $1 OR d.candidate_run_id = $1 ORDER BY d.id DESC",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(arbiter_domain::reports::decision::PromotionDecisionRecord {
                                id: row.read("id")?,
                                baseline_run_id: row.read("baseline_run_id")?,
                                candidate_run_id: row.read("candidate_run_id")?,
                                baseline_checkpoint: row.read("baseline_checkpoint")?,
                                candidate_checkpoint: row.read("candidate_checkpoint")?,
                                decision: row.read("decision")?,
                                note: row.read("note")?,
                                summary_json: row.read("summary_json")?,
                                decided_by: row.read("username")?,
                                decided_at: row.read("decided_at")?,
                            })
                        })
                        .collect()
                }
                .await;
                result.map_err(|err| err.during("promotion_decisions"))
            }

            async fn trend_runs(&self, eval_id: EvalId, training_run: &str) -> StoreResult<Vec<arbiter_domain::reports::trend::TrendRun>> {
                let result: StoreResult<Vec<arbiter_domain::reports::trend::TrendRun>> = async move {
                    let rows: Vec<(i64, i64, String, Option<i64>)> = sqlx::query_as(
                        "SELECT r.id, c.id, c.name, c.training_step FROM checkpoints c \
                         JOIN runs r ON r.id = (SELECT MAX(x.id) FROM runs x \
                             WHERE x.eval_id = $1 AND x.checkpoint_id = c.id AND x.status <> 'cancelled') \
                         WHERE ($2 = '' OR c.training_run = $2) AND c.retracted_at IS NULL \
                         ORDER BY CASE WHEN c.training_step IS NULL THEN 1 ELSE 0 END, c.training_step, c.created_at, c.id",
                    )
                    .bind(eval_id.get())
                    .bind(training_run)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(run_id, checkpoint_id, checkpoint_name, training_step)| arbiter_domain::reports::trend::TrendRun {
                            run_id: RunId(run_id),
                            checkpoint_id: CheckpointId(checkpoint_id),
                            checkpoint_name,
                            training_step,
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("trend_runs"))
            }

            async fn training_runs(&self) -> StoreResult<Vec<String>> {
                let result: StoreResult<Vec<String>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT DISTINCT training_run FROM checkpoints WHERE training_run <> '' ORDER BY training_run",
                    )
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("training_runs"))
            }

            async fn save_trend_watch(&self, watch: &arbiter_domain::reports::trend::TrendWatch, created_by: Option<UserId>) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO trend_watches (eval_id, training_run, policy, pinned_checkpoint_id, created_by, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (eval_id, training_run) DO UPDATE SET \
                         policy = excluded.policy, pinned_checkpoint_id = excluded.pinned_checkpoint_id, \
                         created_by = excluded.created_by, created_at = excluded.created_at",
                    )
                    .bind(watch.eval_id.get())
                    .bind(&watch.training_run)
                    .bind(&watch.policy)
                    .bind(watch.pinned_checkpoint_id.map(i64::from))
                    .bind(created_by.map(i64::from))
                    .bind(now_ms())
                    .execute(&self.writer)
                    .await
                    .map_err(|err| match err {
                        sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                            StoreError::NotFound("no such eval or pinned checkpoint".into())
                        }
                        other => other.into(),
                    })?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("save_trend_watch"))
            }

            async fn delete_trend_watch(&self, eval_id: EvalId, training_run: &str) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query("DELETE FROM trend_watches WHERE eval_id = $1 AND training_run = $2")
                        .bind(eval_id.get())
                        .bind(training_run)
                        .execute(&self.writer)
                        .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("delete_trend_watch"))
            }

            async fn trend_watches(&self) -> StoreResult<Vec<arbiter_domain::reports::trend::TrendWatch>> {
                let result: StoreResult<Vec<arbiter_domain::reports::trend::TrendWatch>> = async move {
                    let rows: Vec<(i64, String, String, String, Option<i64>)> = sqlx::query_as(
                        "SELECT w.eval_id, e.name, w.training_run, w.policy, w.pinned_checkpoint_id \
                         FROM trend_watches w JOIN evals e ON e.id = w.eval_id ORDER BY e.name, w.training_run",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(eval_id, eval_name, training_run, policy, pinned_checkpoint_id)| arbiter_domain::reports::trend::TrendWatch {
                            eval_id: EvalId(eval_id),
                            eval_name,
                            training_run,
                            policy,
                            pinned_checkpoint_id: pinned_checkpoint_id.map(CheckpointId),
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("trend_watches"))
            }

            async fn runs_needing_snapshots(&self, limit: i64) -> StoreResult<Vec<RunId>> {
                let result: StoreResult<Vec<RunId>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT r.id FROM runs r LEFT JOIN run_snapshots s ON s.run_id = r.id \
                         WHERE r.status = 'completed' AND (s.run_id IS NULL OR s.built_at < r.finished_at) \
                         ORDER BY r.finished_at LIMIT $1",
                    )
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?
                    .into_iter()
                    .map(RunId)
                    .collect())
                }
                .await;
                result.map_err(|err| err.during("runs_needing_snapshots"))
            }

            async fn scan_run(
                &self,
                run_id: RunId,
                sink: &mut (dyn FnMut(arbiter_domain::reports::snapshot::ScanRow) + Send),
            ) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    use futures::TryStreamExt;
                    // Identity order is id order: a run's identities are inserted in expansion order.
                    let mut rows = sqlx::query(
                        "SELECT w.id, w.case_id, w.repetition, w.turn, w.revision_id, w.category, w.verdict, \
                         CASE WHEN w.state = 'stopped' THEN 'stopped' ELSE g.outcome END AS outcome, g.model_used, g.fallback_used, g.latency_ms \
                         FROM work_items w LEFT JOIN generations g ON g.work_item_id = w.id \
                         WHERE w.run_id = $1 ORDER BY w.id",
                    )
                    .bind(run_id.get())
                    .fetch(&self.pool);
                    while let Some(row) = rows.try_next().await? {
                        sink(arbiter_domain::reports::snapshot::ScanRow {
                            identity_id: row.read("id")?,
                            case_id: row.read("case_id")?,
                            repetition: row.read("repetition")?,
                            turn: row.read("turn")?,
                            revision_id: row.read("revision_id")?,
                            category: row.read("category")?,
                            verdict: row.read("verdict")?,
                            outcome: row.read("outcome")?,
                            model_used: row.read("model_used")?,
                            fallback_used: row.try_get::<Option<bool>, _>("fallback_used")?.unwrap_or(false),
                            latency_ms: row.read("latency_ms")?,
                        });
                    }
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("scan_run"))
            }

            async fn run_votes(&self, run_id: RunId) -> StoreResult<Vec<(String, i64, Option<String>, Option<bool>)>> {
                let result: StoreResult<Vec<(String, i64, Option<String>, Option<bool>)>> = async move {
                    let rows: Vec<(String, i64, Option<String>, Option<String>)> = sqlx::query_as(
                        "SELECT w.case_id, w.turn, g.extracted_answer, w.verdict FROM work_items w \
                         LEFT JOIN grades g ON g.id = (SELECT MAX(d.id) FROM grades d \
                             WHERE d.work_item_id = w.id AND d.stage = 'deterministic') \
                         WHERE w.run_id = $1 ORDER BY w.case_id, w.turn, w.repetition",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(case_id, turn, answer, verdict)| {
                            let verdict = match verdict.as_deref() {
                                Some("pass") => Some(true),
                                Some("fail") => Some(false),
                                _ => None,
                            };
                            (case_id, turn, answer, verdict)
                        })
                        .collect())
                }
                .await;
                result.map_err(|err| err.during("run_votes"))
            }

            async fn run_choice_scores(&self, run_id: RunId) -> StoreResult<Vec<(String, i64, arbiter_domain::likelihood::ChoiceScores)>> {
                let result: StoreResult<Vec<(String, i64, arbiter_domain::likelihood::ChoiceScores)>> = async move {
                    $crate::reports::decode_json_column(self.run_scores_json(run_id).await?)
                }
                .await;
                result.map_err(|err| err.during("run_choice_scores"))
            }

            async fn run_rolling_scores(&self, run_id: RunId) -> StoreResult<Vec<(String, i64, arbiter_domain::rolling::RollingScore)>> {
                let result: StoreResult<Vec<(String, i64, arbiter_domain::rolling::RollingScore)>> = async move {
                    $crate::reports::decode_json_column(self.run_scores_json(run_id).await?)
                }
                .await;
                result.map_err(|err| err.during("run_rolling_scores"))
            }

            async fn run_instruction_results(&self, run_id: RunId) -> StoreResult<Vec<(String, i64, Vec<arbiter_domain::grading::instructions::InstructionResult>)>> {
                let result: StoreResult<Vec<(String, i64, Vec<arbiter_domain::grading::instructions::InstructionResult>)>> = async move {
                    let rows: Vec<(String, i64, String)> = sqlx::query_as(
                        "SELECT w.case_id, w.repetition, g.instructions FROM work_items w \
                         JOIN grades g ON g.work_item_id = w.id \
                         WHERE w.run_id = $1 AND g.instructions IS NOT NULL ORDER BY w.case_id, w.repetition",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    $crate::reports::decode_json_column(rows)
                }
                .await;
                result.map_err(|err| err.during("run_instruction_results"))
            }

            async fn record_contamination(
                &self,
                run_id: RunId,
                flags: &[(String, arbiter_domain::contamination::Overlap)],
            ) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    for chunk in flags.chunks(500) {
                        let mut insert = sqlx::QueryBuilder::<$db>::new(
                            "INSERT INTO contamination_flags (run_id, case_id, ngrams, matched, example) ",
                        );
                        insert.push_values(chunk, |mut row, (case_id, overlap)| {
                            row.push_bind(run_id.get())
                                .push_bind(case_id.as_str())
                                .push_bind(i64::from(overlap.ngrams))
                                .push_bind(i64::from(overlap.matched))
                                .push_bind(overlap.example.as_deref());
                        });
                        insert.push(" ON CONFLICT (run_id, case_id) DO NOTHING");
                        insert.build().execute(&self.writer).await?;
                    }
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("record_contamination"))
            }

            async fn contamination_split(&self, run_id: RunId) -> StoreResult<$crate::reports::ContaminationCounts> {
                let result: StoreResult<$crate::reports::ContaminationCounts> = async move {
                    let flagged_cases: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM contamination_flags WHERE run_id = $1",
                    )
                    .bind(run_id.get())
                    .fetch_one(&self.pool)
                    .await?;
                    let rows: Vec<(bool, String, i64)> = sqlx::query_as(
                        "SELECT f.case_id IS NOT NULL AS flagged, w.verdict, COUNT(*) FROM work_items w \
                         LEFT JOIN contamination_flags f ON f.run_id = w.run_id AND f.case_id = w.case_id \
                         WHERE w.run_id = $1 AND w.verdict IN ('pass', 'fail') \
                         GROUP BY f.case_id IS NOT NULL, w.verdict",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?;
                    let mut counts = $crate::reports::ContaminationCounts {
                        flagged_cases,
                        ..Default::default()
                    };
                    for (flagged, verdict, count) in rows {
                        match (flagged, verdict.as_str()) {
                            (true, "pass") => counts.flagged_pass = count,
                            (true, _) => counts.flagged_fail = count,
                            (false, "pass") => counts.clean_pass = count,
                            (false, _) => counts.clean_fail = count,
                        }
                    }
                    Ok(counts)
                }
                .await;
                result.map_err(|err| err.during("contamination_split"))
            }

            async fn run_graders(&self, run_id: RunId) -> StoreResult<Vec<String>> {
                let result: StoreResult<Vec<String>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT grader FROM run_graders WHERE run_id = $1 AND count > 0 ORDER BY grader",
                    )
                    .bind(run_id.get())
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("run_graders"))
            }

            async fn export_rows(&self, run_id: RunId, after_id: i64, limit: i64) -> StoreResult<Vec<$crate::ExportRow>> {
                let result: StoreResult<Vec<$crate::ExportRow>> = async move {
                    // Columns named and defaulted as the export's fields (FromRow reads them by name).
                    Ok(sqlx::query_as::<_, $crate::ExportRow>(
                        "SELECT w.run_id, w.id AS identity_id, w.case_id, w.repetition, w.turn, w.category, c.name AS checkpoint, \
                         i.input, i.target, COALESCE(w.verdict, '') AS verdict, COALESCE(w.decided_by, '') AS decided_by, \
                         CASE WHEN w.state = 'stopped' THEN 'stopped' ELSE COALESCE(g.outcome, '') END AS outcome, COALESCE(g.output, '') AS output, g.finish_reason, g.error, \
                         g.error_category, g.model_used, COALESCE(g.fallback_used, FALSE) AS fallback_used, \
                         COALESCE(g.from_cache, FALSE) AS from_cache, g.latency_ms, g.attempts, g.prompt_tokens, \
                         g.completion_tokens, g.cost_usd, g.created_at AS answered_at, g.scores AS choice_scores, g.waited_ms \
                         FROM work_items w JOIN checkpoints c ON c.id = w.checkpoint_id \
                         JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                         LEFT JOIN generations g ON g.work_item_id = w.id \
                         WHERE w.run_id = $1 AND w.id > $2 ORDER BY w.id LIMIT $3",
                    )
                    .bind(run_id.get())
                    .bind(after_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("export_rows"))
            }

            async fn diff_sides(&self, identity_ids: &[IdentityId]) -> StoreResult<Vec<arbiter_domain::reports::diff::DiffSide>> {
                let result: StoreResult<Vec<arbiter_domain::reports::diff::DiffSide>> = async move {
                    if identity_ids.is_empty() {
                        return Ok(Vec::new());
                    }
                    let mut select = sqlx::QueryBuilder::<$db>::new(
                        "SELECT w.id, w.case_id, w.repetition, w.turn, w.category, w.verdict, w.decided_by, i.input, i.target, \
                         g.output, CASE WHEN w.state = 'stopped' THEN 'stopped' ELSE g.outcome END AS outcome, g.error, g.model_used, g.latency_ms, \
                         COALESCE(g.source_work_item_id, g.work_item_id) AS logprobs_id \
                         FROM work_items w JOIN dataset_items i ON i.revision_id = w.revision_id AND i.case_id = w.case_id \
                         LEFT JOIN generations g ON g.work_item_id = w.id WHERE w.id IN (",
                    );
                    let mut ids = select.separated(", ");
                    for id in identity_ids {
                        ids.push_bind((*id).get());
                    }
                    ids.push_unseparated(")");
                    let rows = select.build().fetch_all(&self.pool).await?;
                    let mut sides = Vec::with_capacity(rows.len());
                    for row in rows {
                        sides.push(arbiter_domain::reports::diff::DiffSide {
                            identity_id: row.read("id")?,
                            case_id: row.read("case_id")?,
                            repetition: row.read("repetition")?,
                            turn: row.read("turn")?,
                            category: row.read("category")?,
                            verdict: row.try_get::<Option<String>, _>("verdict")?.unwrap_or_else(|| "pending".into()),
                            decided_by: row.try_get::<Option<String>, _>("decided_by")?.unwrap_or_default(),
                            input: row.read("input")?,
                            target: row.read("target")?,
                            output: row.try_get::<Option<String>, _>("output")?.unwrap_or_default(),
                            outcome: row.try_get::<Option<String>, _>("outcome")?.unwrap_or_else(|| "none".into()),
                            error: row.read("error")?,
                            model_used: row.read("model_used")?,
                            latency_ms: row.read("latency_ms")?,
                            logprobs_id: row.read("logprobs_id")?,
                            grades: Vec::new(),
                            labels: Vec::new(),
                        });
                    }
                    // Every grade and human label of these items, oldest first.
                    let mut grades = sqlx::QueryBuilder::<$db>::new(
                        "SELECT work_item_id, stage, grader, verdict, reason, confidence FROM grades WHERE work_item_id IN (",
                    );
                    let mut ids = grades.separated(", ");
                    for id in identity_ids {
                        ids.push_bind((*id).get());
                    }
                    ids.push_unseparated(") ORDER BY id");
                    for row in grades.build().fetch_all(&self.pool).await? {
                        let id: i64 = row.read("work_item_id")?;
                        if let Some(side) = sides.iter_mut().find(|side| side.identity_id == IdentityId(id)) {
                            side.grades.push($crate::read_columns!(row, DiffGrade {
                                stage,
                                grader,
                                verdict,
                                reason,
                                confidence,
                            }));
                        }
                    }
                    let mut labels = sqlx::QueryBuilder::<$db>::new(
                        "SELECT t.work_item_id, u.username, l.verdict, l.rationale FROM labels l \
                         JOIN annotation_tasks t ON t.id = l.task_id JOIN users u ON u.id = l.annotator_id \
                         WHERE t.work_item_id IN (",
                    );
                    let mut ids = labels.separated(", ");
                    for id in identity_ids {
                        ids.push_bind((*id).get());
                    }
                    ids.push_unseparated(") ORDER BY l.id");
                    for row in labels.build().fetch_all(&self.pool).await? {
                        let id: i64 = row.read("work_item_id")?;
                        if let Some(side) = sides.iter_mut().find(|side| side.identity_id == IdentityId(id)) {
                            let username: String = row.read("username")?;
                            let verdict: String = row.read("verdict")?;
                            let rationale: Option<String> = row.read("rationale")?;
                            side.labels.push(format!(
                                "{username}: {verdict}{}",
                                rationale.filter(|r| !r.is_empty()).map(|r| format!(" — {r}")).unwrap_or_default()
                            ));
                        }
                    }
                    Ok(sides)
                }
                .await;
                result.map_err(|err| err.during("diff_sides"))
            }
        }
    };
}

use arbiter_domain::reports::decision::{NewPromotionDecision, PromotionDecisionRecord};
use arbiter_domain::reports::diff::DiffSide;
use arbiter_domain::reports::trend::{TrendRun, TrendWatch};
pub(crate) use reports_sql;
