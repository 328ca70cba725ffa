//! Routing that follows the evidence: as human labels arrive, an eval's triage policy is
//! re-tuned without anyone pressing Recalibrate, within bounds its owners set.
//!
//! - The accept threshold moves to the lowest confidence at which the cheap judge's
//!   human-checked verdicts stay within the target error rate (as
//!   [`recalibrate_accept_threshold`] computes it), held within `[min, max]`. When no threshold
//!   meets the target, it moves to the maximum: more items go on to the strong judge and humans.
//! - A cheap judge whose accuracy against humans falls below the floor is taken out of the
//!   first stage: the strong judge takes its place, or, without one, the items the deterministic
//!   grader cannot decide go to humans.
//!
//! Each change is a new policy version carrying a [`TuningRecord`] with the data behind it;
//! an unchanged policy is left alone, so tuning again on the same labels changes nothing.
//!
//! Pure: the caller reads the labelled verdicts and stores the new version.

use serde::{Deserialize, Serialize};

use super::calibration::{
    judge_accuracy, recalibrate_accept_threshold, LabelledJudgement, Recalibration,
};
use super::triage::TriagePolicy;

/// Human-checked verdicts a judge needs before it is tuned or benched: fewer say too little.
pub const MIN_ITEMS_FOR_TUNING: u64 = 30;
/// Bounds a form leaves empty: lowest and highest accept threshold, judge floor.
pub const DEFAULT_BOUNDS: (f64, f64, f64) = (0.6, 0.99, 0.6);
/// Threshold moves smaller than this are not worth a new policy version.
pub const THRESHOLD_STEP: f64 = 0.005;

/// The bounds within which an eval's policy re-tunes itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoTuning {
    /// At most this share of auto-accepted verdicts may be wrong.
    pub target_error_rate: f64,
    /// The accept threshold stays within these bounds.
    pub min_accept_threshold: f64,
    pub max_accept_threshold: f64,
    /// A cheap judge right on fewer than this share of human-checked verdicts leaves the first
    /// stage.
    pub judge_floor: f64,
}

impl AutoTuning {
    /// The first problem with the bounds, in plain words.
    pub fn validate(&self) -> Result<(), String> {
        let in_unit = |value: f64| (0.0..=1.0).contains(&value);
        if !(self.target_error_rate > 0.0 && self.target_error_rate < 1.0) {
            return Err(
                "the target error rate for re-tuning is a share strictly between 0 and 1".into(),
            );
        }
        if !in_unit(self.min_accept_threshold) || !in_unit(self.max_accept_threshold) {
            return Err("the re-tuning bounds are confidences between 0 and 1".into());
        }
        if self.min_accept_threshold > self.max_accept_threshold {
            return Err(format!(
                "the lowest accept threshold re-tuning may set ({}) is above the highest ({})",
                self.min_accept_threshold, self.max_accept_threshold
            ));
        }
        if !in_unit(self.judge_floor) {
            return Err("the judge floor is a share between 0 and 1".into());
        }
        Ok(())
    }
}

/// What tuning decided, with the data behind it (stored with a new policy version as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum TuningRecord {
    /// The accept threshold moved.
    Retuned {
        judge: String,
        bounds: AutoTuning,
        old_accept_threshold: f64,
        new_accept_threshold: f64,
        /// The unbounded recommendation; `None` when no threshold met the target.
        recommended: Option<Recalibration>,
        items: u64,
        accuracy: Option<f64>,
    },
    /// The cheap judge fell below the floor and left the first stage.
    Benched {
        judge: String,
        accuracy: f64,
        judge_floor: f64,
        items: u64,
        kappa: Option<f64>,
        /// The strong judge's id, now first; `None`: undecided items go to humans.
        promoted_judge: Option<i64>,
    },
}

impl TuningRecord {
    /// The record of a policy version re-tuning saved; `None` for one a person saved (or a
    /// recalibration's record).
    pub fn of_version(calibration_json: Option<&str>) -> Option<TuningRecord> {
        serde_json::from_str(calibration_json?).ok()
    }
}

/// A tuning step: the policy to save as the next version, or nothing to change.
#[derive(Clone, Debug, PartialEq)]
pub enum TuningStep {
    /// Fewer human-checked verdicts than [`MIN_ITEMS_FOR_TUNING`].
    TooFewLabels { items: u64 },
    /// The policy stands as it is.
    Unchanged,
    /// Save this policy as the next version, with the record and note.
    Change(Box<TuningChange>),
}

/// A change tuning asks for: the next policy version, its record and note.
#[derive(Clone, Debug, PartialEq)]
pub struct TuningChange {
    pub policy: TriagePolicy,
    pub record: TuningRecord,
    pub note: String,
}

/// Tunes `policy` (whose cheap judge is `judge`) from that judge's human-checked verdicts.
pub fn tune(
    policy: &TriagePolicy,
    bounds: &AutoTuning,
    judge: &str,
    labelled: &[LabelledJudgement],
) -> TuningStep {
    let accuracy = judge_accuracy(labelled);
    if accuracy.items < MIN_ITEMS_FOR_TUNING {
        return TuningStep::TooFewLabels {
            items: accuracy.items,
        };
    }
    if let Some(share) = accuracy
        .accuracy
        .filter(|share| *share < bounds.judge_floor)
    {
        let promoted = policy.strong_judge;
        let new_policy = TriagePolicy {
            cheap_judge: promoted,
            strong_judge: None,
            ..policy.clone()
        };
        let instead = match promoted {
            Some(id) => format!("the strong judge (id {id}) now judges first"),
            None => "items the grader cannot decide now go to humans".to_string(),
        };
        let note = format!(
            "auto-tuning benched {judge}: right on {:.1}% of {} human-checked verdicts, below the floor of {:.1}%; {instead}",
            share * 100.0,
            accuracy.items,
            bounds.judge_floor * 100.0
        );
        return TuningStep::Change(Box::new(TuningChange {
            policy: new_policy,
            record: TuningRecord::Benched {
                judge: judge.to_string(),
                accuracy: share,
                judge_floor: bounds.judge_floor,
                items: accuracy.items,
                kappa: accuracy.kappa,
                promoted_judge: promoted,
            },
            note,
        }));
    }
    let recommended =
        recalibrate_accept_threshold(labelled, bounds.target_error_rate, MIN_ITEMS_FOR_TUNING).ok();
    let wanted = recommended.map_or(bounds.max_accept_threshold, |found| found.accept_threshold);
    let new_accept = wanted.clamp(bounds.min_accept_threshold, bounds.max_accept_threshold);
    if (new_accept - policy.accept_threshold).abs() < THRESHOLD_STEP {
        return TuningStep::Unchanged;
    }
    let new_policy = TriagePolicy {
        accept_threshold: new_accept,
        escalate_threshold: policy.escalate_threshold.min(new_accept),
        ..policy.clone()
    };
    let why = match recommended {
        Some(found) if found.accept_threshold == new_accept => format!(
            "{:.1}% estimated errors above it over {} human-checked verdicts",
            found.expected_error_rate * 100.0,
            found.items_used
        ),
        Some(found) => format!(
            "the evidence asks for {:.3}, held within [{:.3}, {:.3}]",
            found.accept_threshold, bounds.min_accept_threshold, bounds.max_accept_threshold
        ),
        None => format!(
            "no threshold keeps errors within {:.1}% over {} human-checked verdicts, so the highest bound",
            bounds.target_error_rate * 100.0,
            accuracy.items
        ),
    };
    let note = format!(
        "auto-tuned {judge} for at most {:.1}% errors: accept at {new_accept:.3} (was {:.3}); {why}",
        bounds.target_error_rate * 100.0,
        policy.accept_threshold
    );
    TuningStep::Change(Box::new(TuningChange {
        policy: new_policy,
        record: TuningRecord::Retuned {
            judge: judge.to_string(),
            bounds: bounds.clone(),
            old_accept_threshold: policy.accept_threshold,
            new_accept_threshold: new_accept,
            recommended,
            items: accuracy.items,
            accuracy: accuracy.accuracy,
        },
        note,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> AutoTuning {
        AutoTuning {
            target_error_rate: 0.1,
            min_accept_threshold: 0.7,
            max_accept_threshold: 0.95,
            judge_floor: 0.6,
        }
    }

    fn policy() -> TriagePolicy {
        TriagePolicy {
            cheap_judge: Some(1),
            strong_judge: Some(2),
            accept_threshold: 0.9,
            escalate_threshold: 0.8,
            ..TriagePolicy::default()
        }
    }

    /// `n` verdicts at each confidence, of which `wrong` disagree with the human.
    fn verdicts(groups: &[(f64, usize, usize)]) -> Vec<LabelledJudgement> {
        groups
            .iter()
            .flat_map(|&(confidence, n, wrong)| {
                (0..n).map(move |index| LabelledJudgement {
                    confidence,
                    judge_pass: true,
                    human_pass: index >= wrong,
                    weight: 1.0,
                })
            })
            .collect()
    }

    #[test]
    fn too_few_labels_change_nothing() {
        let step = tune(
            &policy(),
            &bounds(),
            "judge:a@1",
            &verdicts(&[(0.9, 29, 0)]),
        );
        assert_eq!(step, TuningStep::TooFewLabels { items: 29 });
    }

    /// The change a step asks for (the test fails without one).
    fn change(step: TuningStep) -> TuningChange {
        match step {
            TuningStep::Change(change) => *change,
            other => panic!("expected a change, got {other:?}"),
        }
    }

    #[test]
    fn the_threshold_follows_the_evidence_within_bounds() {
        // Sure verdicts are right; at 0.75 one in ten is wrong: the target of 10% is met from
        // 0.75 (5 of 70 wrong ≈ 7%), so the threshold comes down from 0.9.
        let labelled = verdicts(&[(0.98, 40, 0), (0.75, 30, 5), (0.55, 30, 20)]);
        let tuned = change(tune(&policy(), &bounds(), "judge:a@1", &labelled));
        assert_eq!(tuned.policy.accept_threshold, 0.75);
        assert_eq!(tuned.policy.escalate_threshold, 0.75);
        assert_eq!(tuned.policy.cheap_judge, Some(1));
        assert!(
            tuned.note.starts_with("auto-tuned judge:a@1"),
            "{}",
            tuned.note
        );
        assert!(matches!(
            tuned.record,
            TuningRecord::Retuned { old_accept_threshold, .. } if old_accept_threshold == 0.9
        ));
        // Tuning the tuned policy on the same labels changes nothing.
        assert_eq!(
            tune(&tuned.policy, &bounds(), "judge:a@1", &labelled),
            TuningStep::Unchanged
        );
        // A tighter lower bound holds the threshold up.
        let high_floor = AutoTuning {
            min_accept_threshold: 0.85,
            ..bounds()
        };
        let held = change(tune(&policy(), &high_floor, "judge:a@1", &labelled));
        assert_eq!(held.policy.accept_threshold, 0.85);
    }

    #[test]
    fn an_unreachable_target_raises_the_threshold_to_its_bound() {
        // Wrong a fifth of the time at every confidence: no threshold meets 10%.
        let labelled = verdicts(&[(0.97, 50, 10), (0.8, 50, 10)]);
        let tuned = change(tune(&policy(), &bounds(), "judge:a@1", &labelled));
        assert_eq!(tuned.policy.accept_threshold, 0.95);
        assert!(matches!(
            tuned.record,
            TuningRecord::Retuned {
                recommended: None,
                ..
            }
        ));
    }

    #[test]
    fn a_judge_below_the_floor_leaves_the_first_stage() {
        // Right on half its verdicts, below the 60% floor.
        let labelled = verdicts(&[(0.9, 40, 20)]);
        let benched = change(tune(&policy(), &bounds(), "judge:a@1", &labelled));
        assert_eq!(
            (benched.policy.cheap_judge, benched.policy.strong_judge),
            (Some(2), None)
        );
        assert!(
            benched.note.contains("benched judge:a@1"),
            "{}",
            benched.note
        );
        assert!(matches!(
            benched.record,
            TuningRecord::Benched {
                promoted_judge: Some(2),
                items: 40,
                ..
            }
        ));
        // Without a strong judge, the undecided items go to humans.
        let alone = TriagePolicy {
            strong_judge: None,
            ..policy()
        };
        let benched = change(tune(&alone, &bounds(), "judge:a@1", &labelled));
        assert_eq!(
            (benched.policy.cheap_judge, benched.policy.strong_judge),
            (None, None)
        );
        assert!(benched.policy.validate().is_ok());
    }

    #[test]
    fn bounds_are_checked() {
        assert!(bounds().validate().is_ok());
        let upside_down = AutoTuning {
            min_accept_threshold: 0.99,
            ..bounds()
        };
        assert!(upside_down
            .validate()
            .unwrap_err()
            .contains("above the highest"));
        let no_target = AutoTuning {
            target_error_rate: 0.0,
            ..bounds()
        };
        assert!(no_target.validate().is_err());
        let floor = AutoTuning {
            judge_floor: 1.5,
            ..bounds()
        };
        assert!(floor.validate().is_err());
    }
}
