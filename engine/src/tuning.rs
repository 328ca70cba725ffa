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

/// Tunes every eval with re-tuning bounds, at `now`.
pub async fn tune_policies(store: &dyn Store, now: i64) -> ServiceResult<TuningRound> {
    let mut round = TuningRound::default();
    let mut benched_evals = Vec::new();
    for eval in store.list_evals().await? {
        let versions = store.grading_policies(eval.id).await?;
        let subject = format!("{} (eval {})", eval.name, eval.id);
        // The tuner benched a judge since a person last saved this eval's policy: its alert
        // stays open.
        if benched_since_a_person_saved(&versions) {
            benched_evals.push(subject.clone());
        }
        let Some(latest) = versions.into_iter().next() else {
            continue;
        };
        let (Some(bounds), Some(judge_id)) =
            (&latest.policy.auto_tuning, latest.policy.cheap_judge)
        else {
            continue;
        };
        let Some(judge) = store.get_judge(judge_id).await? else {
            continue;
        };
        let labelled = labelled_judgements(store, &judge.grader_id()).await?;
        let TuningStep::Change(change) =
            tune(&latest.policy, bounds, &judge.grader_id(), &labelled)
        else {
            continue;
        };
        let TuningChange {
            policy,
            record,
            note,
        } = *change;
        let record_json = serde_json::to_string(&record).expect("records always serialize");
        store
            .save_grading_policy(eval.id, &policy, &note, Some(&record_json), None)
            .await?;
        tracing::info!(eval = %eval.name, %note, "triage policy re-tuned");
        match record {
            TuningRecord::Retuned { .. } => round.retuned += 1,
            TuningRecord::Benched { .. } => {
                round.benched += 1;
                let message = format!(
                    "Eval `{}`: {note}. Items are routed by the new policy version from the next launch; check the judge on its page and save a policy to choose its judges again.",
                    eval.name
                );
                round.alerts_raised += u64::from(
                    store
                        .raise_alert(ALERT_JUDGE_BENCHED, &subject, &message, now)
                        .await?,
                );
                benched_evals.push(subject);
            }
        }
    }
    round.alerts_resolved = store
        .resolve_alerts(ALERT_JUDGE_BENCHED, &benched_evals, now)
        .await?;
    Ok(round)
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
