//! Side-by-side preference: sending pairs of two checkpoints' answers to raters from the
//! Compare page, recording raters' preferences, and the report per eval (win rates,
//! Bradley–Terry ratings, position bias, agreement between raters).

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::User;
use arbiter_domain::annotation::agreement::{krippendorff_alpha, Agreement, Level, Unit};
use arbiter_domain::annotation::gold::parse_share;
use arbiter_domain::annotation::preference::{
    check_dimension_choices, preference_report, DimensionChoices, Judgement, PairSelection,
    Preference, PreferenceReport, MAX_PAIRS_PER_REQUEST, MAX_RATERS_PER_PAIR,
};
use arbiter_domain::annotation::task::{ClaimHandle, TrainingFeedback, MAX_RATIONALE_CHARS};
use arbiter_domain::grading::triage::DEFAULT_REVIEW_RATE;
use arbiter_domain::ids::{RunId, UserId};
use arbiter_store::preferences::{NewPairRequest, PairJudging, PairRequestSummary, PreferenceRow};
use arbiter_store::Store;
use serde::{Deserialize, Serialize};

/// Bootstrap rounds behind the intervals of a preference report.
pub const PREFERENCE_RESAMPLES: usize = 200;

/// A pair request as a form or the API sends it (numbers as typed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PairRequestForm {
    pub run_a: RunId,
    pub run_b: RunId,
    /// `differ`, `unsure` or `random`.
    pub selection: String,
    pub pairs: String,
    pub raters: String,
    #[serde(default)]
    pub note: String,
    /// A rubric's name (its newest version is asked) whose dimensions raters compare the two
    /// outputs on, besides overall; empty for one choice per pair.
    #[serde(default)]
    pub rubric: String,
    /// A pairwise judge's id to ask first (empty: raters only), the confidence at which its
    /// choice decides a pair (default 0.8), and the share of the pairs it decides that raters
    /// label anyway (default 0.1).
    #[serde(default)]
    pub judge: String,
    #[serde(default)]
    pub judge_threshold: String,
    #[serde(default)]
    pub audit_rate: String,
}

/// Confidence at which a pairwise judge's choice decides a pair, unless the request says.
pub const DEFAULT_PAIR_JUDGE_THRESHOLD: f64 = 0.8;
/// Share of a pairwise judge's decided pairs raters label anyway, unless the request says.
pub const DEFAULT_PAIR_AUDIT_RATE: f64 = 0.1;

/// Checks the form and queues its pairs; the researcher must act for both runs' teams (the
/// raters' time is spent on their behalf).
pub async fn send_pairs(
    store: &dyn Store,
    form: &PairRequestForm,
    requested_by: &User,
) -> ServiceResult<PairRequestSummary> {
    let selection = PairSelection::parse(form.selection.trim()).map_err(ServiceError::Invalid)?;
    let pairs = whole_number(
        &form.pairs,
        MAX_PAIRS_PER_REQUEST as i64,
        "the number of pairs",
    )? as usize;
    let labels_needed = whole_number(&form.raters, MAX_RATERS_PER_PAIR, "raters per pair")?;
    if form.run_a == form.run_b {
        return Err(ServiceError::Invalid(
            "pairs compare two different runs".into(),
        ));
    }
    if form.note.chars().count() > 1_000 {
        return Err(ServiceError::Invalid(
            "the note is longer than 1000 characters".into(),
        ));
    }
    for run in [form.run_a, form.run_b] {
        crate::runs::require_run_team(store, requested_by, run, "send pairs from").await?;
    }
    let rubric_id = match form.rubric.trim() {
        "" => None,
        name => Some(
            store
                .latest_rubric(name)
                .await?
                .ok_or_else(|| ServiceError::Invalid(format!("no rubric named `{name}`")))?
                .id,
        ),
    };
    let judging = pair_judging(store, form).await?;
    if judging.is_some() && rubric_id.is_some() {
        // The judge gives one choice per pair: its decided pairs would leave the dimensions'
        // ratings to the harder pairs raters saw.
        return Err(ServiceError::Invalid(
            "a pairwise judge gives one choice per pair; send pairs compared per dimension without a judge".into(),
        ));
    }
    // Pairs' answers are sampled for review at the rate the eval's grading policy sets for its
    // items (run A's, as frozen at its launch).
    let review_rate = store
        .run_manifest(form.run_a)
        .await?
        .and_then(|manifest| manifest.triage)
        .map_or(DEFAULT_REVIEW_RATE, |triage| triage.policy.review_rate);
    let request = NewPairRequest {
        run_a: form.run_a,
        run_b: form.run_b,
        selection,
        pairs,
        labels_needed,
        seed: rand::random(),
        note: form.note.trim().to_string(),
        requested_by: requested_by.id,
        rubric_id,
        review_rate,
        judging,
    };
    Ok(store.create_pair_request(&request).await?)
}

/// The pairwise judge a request asks first, checked: it exists and compares two answers.
async fn pair_judging(
    store: &dyn Store,
    form: &PairRequestForm,
) -> ServiceResult<Option<PairJudging>> {
    let id = form.judge.trim();
    if id.is_empty() {
        return Ok(None);
    }
    let judge_id: i64 = id
        .parse()
        .map_err(|_| ServiceError::Invalid(format!("the judge is named by its id, not `{id}`")))?;
    let judge = store
        .get_judge(judge_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no judge with id {judge_id}")))?;
    if !judge.pairwise {
        return Err(ServiceError::Invalid(format!(
            "judge {} grades one answer; pairs need a pairwise judge (A, B or TIE)",
            judge.grader_id()
        )));
    }
    let share = |text: &str, default: f64, what: &str, least: f64| -> ServiceResult<f64> {
        match text.trim() {
            "" => Ok(default),
            text => parse_share(text, what, 1.0)
                .map_err(ServiceError::Invalid)
                .and_then(|share| {
                    if share < least {
                        Err(ServiceError::Invalid(format!(
                            "{what} is at least {least}, not `{text}`"
                        )))
                    } else {
                        Ok(share)
                    }
                }),
        }
    };
    Ok(Some(PairJudging {
        judge_id,
        // Below a half, a choice could decide a pair while a likelier tie or other side stood.
        threshold: share(
            &form.judge_threshold,
            DEFAULT_PAIR_JUDGE_THRESHOLD,
            "the judge's threshold",
            0.5,
        )?,
        audit_rate: share(
            &form.audit_rate,
            DEFAULT_PAIR_AUDIT_RATE,
            "the audit share",
            0.0,
        )?,
    }))
}

/// A count typed in the form: a whole number from 1 to `max`.
fn whole_number(text: &str, max: i64, what: &str) -> ServiceResult<i64> {
    let text = text.trim();
    text.parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ServiceError::Invalid(format!(
                "{what} is a whole number from 1 to {max}, not `{text}`"
            ))
        })
}

/// Records a rater's answer on the pair they hold: `a`, `b`, `tie` or `both_bad`, and when the
/// pair asks a rubric, one such choice per dimension (`dimensions`: JSON by dimension key,
/// empty otherwise); on a gold pair, a rater in training learns the right answer.
pub async fn submit_preference(
    store: &dyn Store,
    handle: &ClaimHandle,
    user_id: UserId,
    choice: &str,
    dimensions: &str,
    rationale: &str,
) -> ServiceResult<Option<TrainingFeedback>> {
    let choice = Preference::parse(choice).map_err(ServiceError::Invalid)?;
    if rationale.chars().count() > MAX_RATIONALE_CHARS {
        return Err(ServiceError::Invalid(format!(
            "the rationale is longer than {MAX_RATIONALE_CHARS} characters"
        )));
    }
    let dimensions = match store.leased_rubric(handle, user_id).await? {
        Some(rubric_id) => {
            let version = store
                .get_rubric(rubric_id)
                .await?
                .ok_or_else(|| ServiceError::NotFound(format!("no rubric with id {rubric_id}")))?;
            let choices: DimensionChoices = serde_json::from_str(dimensions).map_err(|err| {
                ServiceError::Invalid(format!(
                    "choices per dimension are a JSON object of a, b, tie or both_bad by dimension key: {err}"
                ))
            })?;
            check_dimension_choices(&version.rubric, &choices).map_err(ServiceError::Invalid)?;
            Some(choices)
        }
        None if dimensions.trim().is_empty() => None,
        None => {
            return Err(ServiceError::Invalid(
                "this pair asks one choice, not one per dimension".into(),
            ))
        }
    };
    Ok(store
        .submit_preference(handle, user_id, choice, dimensions.as_ref(), rationale)
        .await?)
}

/// One eval's preferences.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalPreferences {
    pub eval_id: i64,
    pub eval_name: String,
    /// Checkpoint names; the report's contestants index this list.
    pub checkpoints: Vec<String>,
    /// Rater names by id, for the position-bias rows.
    pub raters: Vec<(u64, String)>,
    pub report: PreferenceReport,
    /// Krippendorff's alpha (nominal) over pairs with two or more labels.
    pub agreement: Agreement,
    /// The same per dimension, over the pairs that asked a rubric with that dimension (by key,
    /// in key order).
    pub dimensions: Vec<DimensionPreferences>,
}

/// Ratings, win rates, position bias and agreement on one dimension's choices.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DimensionPreferences {
    pub key: String,
    pub report: PreferenceReport,
    pub agreement: Agreement,
}

/// The preference report of every eval with labelled pairs (or of `eval_id` alone).
pub async fn preference_reports(
    store: &dyn Store,
    eval_id: Option<i64>,
) -> ServiceResult<Vec<EvalPreferences>> {
    let rows = store.preference_rows(eval_id).await?;
    // The bootstrap refits the ratings a few hundred times: CPU work, off the async threads.
    tokio::task::spawn_blocking(move || reports_from_rows(&rows))
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "computing preference reports failed");
            ServiceError::Internal
        })
}

fn reports_from_rows(rows: &[PreferenceRow]) -> Vec<EvalPreferences> {
    let mut evals: Vec<i64> = rows.iter().map(|row| row.eval_id).collect();
    evals.sort_unstable();
    evals.dedup();
    evals
        .into_iter()
        .map(|eval_id| {
            let rows: Vec<&PreferenceRow> =
                rows.iter().filter(|row| row.eval_id == eval_id).collect();
            eval_report(eval_id, &rows)
        })
        .collect()
}

fn eval_report(eval_id: i64, rows: &[&PreferenceRow]) -> EvalPreferences {
    let mut checkpoints: Vec<(i64, String)> = Vec::new();
    let mut raters: Vec<(u64, String)> = Vec::new();
    let mut contestant =
        |id: i64, name: &str| match checkpoints.iter().position(|(known, _)| *known == id) {
            Some(index) => index,
            None => {
                checkpoints.push((id, name.to_string()));
                checkpoints.len() - 1
            }
        };
    // Each row placed among the contestants once; the reports below differ only in the choice.
    let mut placed = Vec::with_capacity(rows.len());
    for row in rows {
        let left = contestant(row.left_checkpoint_id, &row.left_checkpoint);
        let right = contestant(row.right_checkpoint_id, &row.right_checkpoint);
        let rater = row.rater_id as u64;
        if !raters.iter().any(|(id, _)| *id == rater) {
            raters.push((rater, row.rater.clone()));
        }
        placed.push((*row, left, right));
    }
    let contestants = checkpoints.len();
    let report_on = |choice_of: &dyn Fn(&PreferenceRow) -> Option<Preference>| {
        let judgements: Vec<Judgement> = placed
            .iter()
            .filter_map(|(row, left, right)| {
                Some(Judgement {
                    pair: row.task_id,
                    left: *left,
                    right: *right,
                    rater: row.rater_id as u64,
                    choice: choice_of(row)?,
                })
            })
            .collect();
        // Rows come by pair, so each pair's labels are adjacent.
        let units: Vec<Unit<&'static str>> = placed
            .chunk_by(|a, b| a.0.task_id == b.0.task_id)
            .map(|pair| {
                Unit::new(
                    pair.iter()
                        .filter_map(|(row, ..)| {
                            Some((row.rater_id as u64, choice_of(row)?.as_str()))
                        })
                        .collect(),
                )
            })
            .collect();
        // A rater answers a pair once (a unique key), so no unit repeats a rater.
        let agreement = krippendorff_alpha(&units, Level::Nominal)
            .expect("each rater labels a pair at most once");
        let report = preference_report(
            contestants,
            &judgements,
            PREFERENCE_RESAMPLES,
            eval_id as u64,
        );
        (report, agreement)
    };
    let (report, agreement) = report_on(&|row| Some(row.choice));
    let mut keys: Vec<&String> = rows
        .iter()
        .filter_map(|row| row.dimensions.as_ref())
        .flat_map(|choices| choices.keys())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let dimensions = keys
        .into_iter()
        .map(|key| {
            let (report, agreement) =
                report_on(&|row: &PreferenceRow| row.dimensions.as_ref()?.get(key).copied());
            DimensionPreferences {
                key: key.clone(),
                report,
                agreement,
            }
        })
        .collect();
    EvalPreferences {
        eval_id,
        eval_name: rows
            .first()
            .map(|row| row.eval_name.clone())
            .unwrap_or_default(),
        checkpoints: checkpoints.into_iter().map(|(_, name)| name).collect(),
        raters,
        report,
        agreement,
        dimensions,
    }
}
