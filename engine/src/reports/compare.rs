//! Comparing checkpoints on the items their runs share, and recording a promotion decision on
//! two complete reports.

use crate::error::{ServiceError, ServiceResult};
use crate::reports::runs::{report_and_snapshot, RunView};
use arbiter_domain::ids::{RunId, UserId};
use arbiter_domain::reports::compare::{apply_correction, compare_snapshots, PairedComparison};
use arbiter_domain::reports::decision::NewPromotionDecision;
use arbiter_domain::reports::likelihood::paired_right_logprob;
use arbiter_domain::reports::rolling::paired_bits_per_byte;
use arbiter_domain::reports::sample_compare::compare_sample_metrics;
use arbiter_domain::reports::{Completeness, Report};
use arbiter_domain::run::RunProgress;
use arbiter_domain::stats::correction::Correction;
use arbiter_store::Store;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Candidates on one comparison page: each adds one family of tests to the correction.
pub const MAX_CANDIDATES: usize = 8;

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CandidateResult {
    pub run: RunProgress,
    pub report: Report,
    pub comparison: PairedComparison,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointComparison {
    pub baseline: RunProgress,
    pub baseline_report: Report,
    pub candidates: Vec<CandidateResult>,
    pub correction: Correction,
    /// Milliseconds to build this summary (snapshots read or rebuilt, tests run).
    pub elapsed_ms: u64,
}

pub(crate) fn check_runs(baseline: RunId, candidates: &[RunId]) -> ServiceResult<()> {
    if candidates.is_empty() {
        return Err(ServiceError::Invalid(
            "pick at least one candidate run".into(),
        ));
    }
    if candidates.len() > MAX_CANDIDATES {
        return Err(ServiceError::Invalid(format!(
            "compare at most {MAX_CANDIDATES} candidates at once"
        )));
    }
    if candidates.contains(&baseline) {
        return Err(ServiceError::Invalid(
            "pick two different runs to compare".into(),
        ));
    }
    Ok(())
}

/// The paired tests of a candidate against the baseline: verdicts identity by identity, and
/// with several samples per item, the metrics over samples. `Err` says why they cannot pair.
pub(crate) fn compare_runs(
    baseline: &RunView,
    candidate: &RunView,
) -> Result<PairedComparison, String> {
    let mut comparison = compare_snapshots(&baseline.snapshot, &candidate.snapshot)?;
    if let (Some(base), Some(cand)) = (&baseline.samples, &candidate.samples) {
        comparison.sample_metrics = compare_sample_metrics(base, cand);
    }
    if let (Some(base), Some(cand)) = (&baseline.choice_scores, &candidate.choice_scores) {
        comparison.likelihood = paired_right_logprob(base, cand);
    }
    if let (Some(base), Some(cand)) = (&baseline.rolling_scores, &candidate.rolling_scores) {
        comparison.rolling = paired_bits_per_byte(base, cand);
    }
    Ok(comparison)
}

/// Baseline against one or more candidates of the same eval: reports, paired tests per
/// category, corrected together.
pub async fn compare_checkpoints(
    store: &dyn Store,
    baseline_run: RunId,
    candidate_runs: &[RunId],
    correction: Correction,
) -> ServiceResult<CheckpointComparison> {
    check_runs(baseline_run, candidate_runs)?;
    let started = Instant::now();
    let baseline_view = report_and_snapshot(store, baseline_run).await?;
    let baseline = &baseline_view.progress;
    let mut runs = Vec::new();
    let mut comparisons = Vec::new();
    for &candidate_run in candidate_runs {
        let view = report_and_snapshot(store, candidate_run).await?;
        if view.progress.eval_id != baseline.eval_id {
            return Err(ServiceError::Invalid(format!(
                "run {} evaluates `{}` and run {} evaluates `{}`: only runs of the same eval can be compared",
                baseline.id, baseline.eval_name, view.progress.id, view.progress.eval_name
            )));
        }
        comparisons.push(compare_runs(&baseline_view, &view).map_err(ServiceError::Invalid)?);
        runs.push((view.progress, view.report));
    }
    apply_correction(&mut comparisons, correction);
    let candidates = runs
        .into_iter()
        .zip(comparisons)
        .map(|((run, report), comparison)| CandidateResult {
            run,
            report,
            comparison,
        })
        .collect();
    Ok(CheckpointComparison {
        baseline: baseline_view.progress,
        baseline_report: baseline_view.report,
        candidates,
        correction,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Longest note kept with a promotion decision.
const MAX_DECISION_NOTE: usize = 4_000;

/// What a promotion decision keeps of the comparison it was made on.
#[derive(Serialize)]
struct DecisionSummary<'a> {
    correction: Correction,
    baseline: &'a Report,
    candidate: &'a Report,
    comparison: &'a PairedComparison,
}

/// Records a decision to promote (or reject) the candidate against the baseline. Refused
/// unless both runs' reports are complete: a partial or invalid report can inform a decision
/// but never back one. The comparison as it stands is kept with the decision.
pub async fn decide_promotion(
    store: &dyn Store,
    baseline_run: RunId,
    candidate_run: RunId,
    promote: bool,
    note: &str,
    decided_by: Option<UserId>,
) -> ServiceResult<i64> {
    let note = note.trim();
    if note.chars().count() > MAX_DECISION_NOTE {
        return Err(ServiceError::Invalid(format!(
            "keep the note under {MAX_DECISION_NOTE} characters"
        )));
    }
    let correction = Correction::default();
    let comparison = compare_checkpoints(store, baseline_run, &[candidate_run], correction).await?;
    let candidate = comparison
        .candidates
        .first()
        .ok_or_else(|| ServiceError::Invalid("pick a candidate run".into()))?;
    for (side, run, report) in [
        (
            "baseline",
            &comparison.baseline,
            &comparison.baseline_report,
        ),
        ("candidate", &candidate.run, &candidate.report),
    ] {
        if report.completeness != Completeness::Complete {
            let mut reason = format!(
                "the {side} run {} on `{}` is {} ({} of {} results)",
                run.id,
                run.checkpoint_name,
                report.completeness.label(),
                report.completed,
                report.expected
            );
            for explanation in report.explanations() {
                reason.push_str("; ");
                reason.push_str(&explanation);
            }
            return Err(ServiceError::Invalid(format!(
                "{reason}: a promotion decision needs two complete reports"
            )));
        }
    }
    let summary_json = serde_json::to_string(&DecisionSummary {
        correction,
        baseline: &comparison.baseline_report,
        candidate: &candidate.report,
        comparison: &candidate.comparison,
    })
    .map_err(|err| {
        tracing::error!(error = %err, "serialising a promotion decision's summary failed");
        ServiceError::Internal
    })?;
    Ok(store
        .record_promotion_decision(&NewPromotionDecision {
            baseline_run_id: baseline_run,
            candidate_run_id: candidate_run,
            promote,
            note: note.to_string(),
            summary_json,
            decided_by,
        })
        .await?)
}
