//! Routing that follows the evidence: each eval whose triage policy has re-tuning bounds is
//! tuned from its cheap judge's human-checked verdicts (see
//! [`arbiter_domain::grading::tuning`]), each change saved as a new policy version with the
//! data behind it. A judge taken out of the first stage raises an alert for the eval, which
//! stays open until someone saves a policy of their own for it.
//!
//! Run by the queue monitor each round; an unchanged policy is left as it is.

use crate::error::ServiceResult;
use crate::grading::labelled_judgements;
use arbiter_domain::grading::triage::PolicyVersion;
use arbiter_domain::grading::tuning::{tune, TuningChange, TuningRecord, TuningStep};
use arbiter_domain::health::ALERT_JUDGE_BENCHED;
use arbiter_domain::manifest::EvalSummary;
use arbiter_store::Store;

/// What one tuning round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TuningRound {
    /// Evals whose accept threshold moved.
    pub retuned: u64,
    /// Evals whose cheap judge left the first stage.
    pub benched: u64,
    pub alerts_raised: u64,
    pub alerts_resolved: u64,
}

/// Tunes every eval with re-tuning bounds, at `now`. An eval that cannot be tuned (a store
/// error, a stored policy that no longer reads) is logged and left as it is; the others are
/// tuned regardless.
pub async fn tune_policies(store: &dyn Store, now: i64) -> ServiceResult<TuningRound> {
    let mut round = TuningRound::default();
    let mut benched_evals = Vec::new();
    for eval in store.list_evals().await? {
        let subject = format!("{} (eval {})", eval.name, eval.id);
        match tune_eval(store, &eval, &subject, now, &mut round).await {
            Ok(false) => {}
            Ok(true) => benched_evals.push(subject),
            Err(err) => {
                tracing::warn!(eval = %eval.name, error = %err, "re-tuning skipped this eval this round");
                // Unread, so its alert (if any) is left open rather than resolved.
                benched_evals.push(subject);
            }
        }
    }
    round.alerts_resolved = store
        .resolve_alerts(ALERT_JUDGE_BENCHED, &benched_evals, now)
        .await?;
    Ok(round)
}

/// Tunes one eval; whether its "judge below floor" alert stays open.
async fn tune_eval(
    store: &dyn Store,
    eval: &EvalSummary,
    subject: &str,
    now: i64,
    round: &mut TuningRound,
) -> ServiceResult<bool> {
    let versions = store.grading_policies(eval.id).await?;
    // The tuner benched a judge since a person last saved this eval's policy.
    let benched = benched_since_a_person_saved(&versions);
    let Some(latest) = versions.into_iter().next() else {
        return Ok(benched);
    };
    let (Some(bounds), Some(judge_id)) = (&latest.policy.auto_tuning, latest.policy.cheap_judge)
    else {
        return Ok(benched);
    };
    let Some(judge) = store.get_judge(judge_id).await? else {
        return Ok(benched);
    };
    let labelled = labelled_judgements(store, &judge.grader_id()).await?;
    let TuningStep::Change(change) = tune(&latest.policy, bounds, &judge.grader_id(), &labelled)
    else {
        return Ok(benched);
    };
    let TuningChange {
        policy,
        record,
        note,
    } = *change;
    let record_json = serde_json::to_string(&record).expect("records always serialize");
    // Saved only over the version read: a person's save meanwhile wins, and is tuned next round.
    let saved = store
        .save_grading_policy_after(eval.id, latest.version, &policy, &note, Some(&record_json))
        .await?;
    if saved.is_none() {
        return Ok(benched);
    }
    tracing::info!(eval = %eval.name, %note, "triage policy re-tuned");
    match record {
        TuningRecord::Retuned { .. } => {
            round.retuned += 1;
            Ok(benched)
        }
        TuningRecord::Benched { .. } => {
            round.benched += 1;
            let message = format!(
                "Eval `{}`: {note}. Items are routed by the new policy version from the next launch. The judge's human-checked verdicts stay as they are, so choosing it again with the same floor benches it again; check it on its page first.",
                eval.name
            );
            round.alerts_raised += u64::from(
                store
                    .raise_alert(ALERT_JUDGE_BENCHED, subject, &message, now)
                    .await?,
            );
            Ok(true)
        }
    }
}

/// Whether the tuner benched a judge in the versions it saved since anyone else (a person,
/// the operator, a recalibration) last saved the policy; versions come newest first.
fn benched_since_a_person_saved(versions: &[PolicyVersion]) -> bool {
    versions
        .iter()
        .map(|version| TuningRecord::of_version(version.calibration_json.as_deref()))
        .take_while(Option::is_some)
        .any(|record| matches!(record, Some(TuningRecord::Benched { .. })))
}
