//! Side-by-side preference: sending pairs of two checkpoints' answers to raters from the
//! Compare page, recording raters' preferences, and the report per eval (win rates,
//! Bradley–Terry ratings, position bias, agreement between raters).

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::User;
use arbiter_domain::annotation::agreement::{krippendorff_alpha, Agreement, Level, Unit};
use arbiter_domain::annotation::preference::{
    preference_report, Judgement, PairSelection, Preference, PreferenceReport,
    MAX_PAIRS_PER_REQUEST, MAX_RATERS_PER_PAIR,
};
use arbiter_domain::annotation::task::{ClaimHandle, TrainingFeedback, MAX_RATIONALE_CHARS};
use arbiter_domain::ids::{RunId, UserId};
use arbiter_store::preferences::{NewPairRequest, PairRequestSummary, PreferenceRow};
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
}

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
    let request = NewPairRequest {
        run_a: form.run_a,
        run_b: form.run_b,
        selection,
        pairs,
        labels_needed,
        seed: rand::random(),
        note: form.note.trim().to_string(),
        requested_by: requested_by.id,
    };
    Ok(store.create_pair_request(&request).await?)
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

/// Records a rater's answer on the pair they hold: `a`, `b`, `tie` or `both_bad`; on a gold
/// pair, a rater in training learns the right answer.
pub async fn submit_preference(
    store: &dyn Store,
    handle: &ClaimHandle,
    user_id: UserId,
    choice: &str,
    rationale: &str,
) -> ServiceResult<Option<TrainingFeedback>> {
    let choice = Preference::parse(choice).map_err(ServiceError::Invalid)?;
    if rationale.chars().count() > MAX_RATIONALE_CHARS {
        return Err(ServiceError::Invalid(format!(
            "the rationale is longer than {MAX_RATIONALE_CHARS} characters"
        )));
    }
    Ok(store
        .submit_preference(handle, user_id, choice, rationale)
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
    let mut judgements = Vec::with_capacity(rows.len());
    for row in rows {
        let left = contestant(row.left_checkpoint_id, &row.left_checkpoint);
        let right = contestant(row.right_checkpoint_id, &row.right_checkpoint);
        let rater = row.rater_id as u64;
        if !raters.iter().any(|(id, _)| *id == rater) {
            raters.push((rater, row.rater.clone()));
        }
        judgements.push(Judgement {
            pair: row.task_id,
            left,
            right,
            rater,
            choice: row.choice,
        });
    }
    // Rows come by pair, so each pair's labels are adjacent.
    let units: Vec<Unit<&'static str>> = rows
        .chunk_by(|a, b| a.task_id == b.task_id)
        .map(|pair| {
            Unit::new(
                pair.iter()
                    .map(|row| (row.rater_id as u64, row.choice.as_str()))
                    .collect(),
            )
        })
        .collect();
    // A rater answers a pair once (a unique key), so no unit repeats a rater.
    let agreement =
        krippendorff_alpha(&units, Level::Nominal).expect("each rater labels a pair at most once");
    let report = preference_report(
        checkpoints.len(),
        &judgements,
        PREFERENCE_RESAMPLES,
        eval_id as u64,
    );
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
    }
}
