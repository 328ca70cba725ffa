//! Confidence triage: which grader decides an item, and when it goes to a human.
//!
//! Pure: a state machine over stages. Deterministic graders decide what they can; the rest go
//! to the cheap judge; a verdict at or above the accept threshold (with the ensemble agreeing)
//! is accepted; the middle band escalates to the strong judge; below the escalate threshold,
//! on a judge failure, or when the judges disagree, the item goes to a human with the reason.
//! A stable random share of auto-accepted items is also sent to humans as an audit, so judge
//! accuracy is measured on the items the judge was sure about too.

use crate::ids::EvalId;
use serde::{Deserialize, Serialize};

use super::judge::{EnsembleVerdict, JudgeSpec, MAX_JUDGE_SAMPLES};
use super::{Grade, Verdict};

/// An eval's triage policy as a researcher edits it (stored per version as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriagePolicy {
    /// Judge (by id) asked about items the deterministic grader cannot decide.
    #[serde(default)]
    pub cheap_judge: Option<i64>,
    /// Judge asked about the cheap judge's middle band.
    #[serde(default)]
    pub strong_judge: Option<i64>,
    /// A judge verdict at or above this confidence is accepted.
    pub accept_threshold: f64,
    /// Below this confidence an item goes straight to a human; between the two thresholds it
    /// escalates to the strong judge.
    pub escalate_threshold: f64,
    /// Share of auto-accepted judge verdicts also sent to humans.
    pub audit_rate: f64,
    /// Samples each judge takes of one answer; more than one makes an ensemble whose
    /// agreement is a second confidence signal.
    pub judge_samples: u32,
    /// What one human label costs, in USD, for the cost split by stage.
    pub human_usd_per_label: f64,
    /// Distinct raters who label each item sent to humans (the overlap).
    #[serde(default = "one")]
    pub human_overlap: u32,
    /// Share of human labels a senior reviewer checks.
    #[serde(default = "default_review_rate")]
    pub review_rate: f64,
    /// A skill tag raters need to receive this eval's items (`None`: any rater).
    #[serde(default)]
    pub required_skill: Option<String>,
    /// The rubric (by name) raters answer for this eval's items; its newest version is frozen
    /// at launch. `None`: the pass/fail question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rubric: Option<String>,
    /// Bounds within which the policy re-tunes itself as human labels arrive (see
    /// [`tuning`](super::tuning)); `None`: only people change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_tuning: Option<super::tuning::AutoTuning>,
}

/// Share of human labels drawn for QC review unless a policy says otherwise.
pub const DEFAULT_REVIEW_RATE: f64 = 0.075;
/// Most raters one item may need.
pub const MAX_OVERLAP: u32 = 10;

fn one() -> u32 {
    1
}

fn default_review_rate() -> f64 {
    DEFAULT_REVIEW_RATE
}

impl Default for TriagePolicy {
    fn default() -> TriagePolicy {
        TriagePolicy {
            cheap_judge: None,
            strong_judge: None,
            accept_threshold: 0.9,
            escalate_threshold: 0.7,
            audit_rate: 0.02,
            judge_samples: 1,
            human_usd_per_label: 0.40,
            human_overlap: 1,
            review_rate: DEFAULT_REVIEW_RATE,
            required_skill: None,
            rubric: None,
            auto_tuning: None,
        }
    }
}

impl TriagePolicy {
    /// The first problem with a policy, in plain words.
    pub fn validate(&self) -> Result<(), String> {
        let in_unit = |value: f64| (0.0..=1.0).contains(&value);
        if !in_unit(self.accept_threshold) || !in_unit(self.escalate_threshold) {
            return Err("thresholds are confidences between 0 and 1".into());
        }
        if self.escalate_threshold > self.accept_threshold {
            return Err(format!(
                "the escalate threshold ({}) must not be above the accept threshold ({})",
                self.escalate_threshold, self.accept_threshold
            ));
        }
        if !in_unit(self.audit_rate) {
            return Err("the audit rate is a share between 0 and 1".into());
        }
        if self.judge_samples == 0 || self.judge_samples > MAX_JUDGE_SAMPLES {
            return Err(format!(
                "judge samples must be between 1 and {MAX_JUDGE_SAMPLES}"
            ));
        }
        if !(self.human_usd_per_label >= 0.0 && self.human_usd_per_label.is_finite()) {
            return Err("the cost of a human label must be zero or more".into());
        }
        if self.human_overlap == 0 || self.human_overlap > MAX_OVERLAP {
            return Err(format!(
                "each item needs 1 to {MAX_OVERLAP} raters (the overlap)"
            ));
        }
        if !in_unit(self.review_rate) {
            return Err("the review rate is a share between 0 and 1".into());
        }
        if let Some(skill) = &self.required_skill {
            crate::annotation::adjudication::check_skill(skill)?;
        }
        if let Some(rubric) = &self.rubric {
            crate::annotation::rubric::check_name(rubric)?;
        }
        if self.strong_judge.is_some() && self.cheap_judge.is_none() {
            return Err("a strong judge needs a cheap judge in front of it".into());
        }
        if self.cheap_judge.is_some() && self.cheap_judge == self.strong_judge {
            return Err("the strong judge must differ from the cheap judge".into());
        }
        // Re-tuning without a cheap judge waits for one (re-tuning may have benched it).
        if let Some(bounds) = &self.auto_tuning {
            bounds.validate()?;
        }
        Ok(())
    }
}

/// A policy frozen into a manifest, its judges resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrozenTriage {
    pub policy_version: i64,
    pub policy: TriagePolicy,
    pub cheap_judge: Option<JudgeSpec>,
    pub strong_judge: Option<JudgeSpec>,
    /// The version of the policy's rubric raters answer for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rubric: Option<FrozenRubric>,
}

/// A rubric version as a manifest freezes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrozenRubric {
    pub id: i64,
    pub name: String,
    pub version: i64,
    pub content_hash: String,
    pub rubric: crate::annotation::rubric::Rubric,
}

impl TriagePolicy {
    /// Where this policy's human tasks go.
    pub fn routing(&self) -> crate::grading::triage::HumanRouting {
        crate::grading::triage::HumanRouting {
            labels_needed: i64::from(self.human_overlap),
            skill: self.required_skill.clone(),
            review_rate: self.review_rate,
            rubric_id: None,
        }
    }
}

/// Where a grade came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Deterministic,
    CheapJudge,
    StrongJudge,
    Human,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Deterministic => "deterministic",
            Stage::CheapJudge => "cheap_judge",
            Stage::StrongJudge => "strong_judge",
            Stage::Human => "human",
        }
    }

    /// The stage in words, for reasons and pages: "cheap judge".
    pub fn label(self) -> &'static str {
        match self {
            Stage::Deterministic => "deterministic grader",
            Stage::CheapJudge => "cheap judge",
            Stage::StrongJudge => "strong judge",
            Stage::Human => "human",
        }
    }
}

/// Why a human sees an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HumanKind {
    /// No automatic grader was sure enough; the item has no verdict until a human gives one.
    Escalation,
    /// The verdict was accepted automatically; a human checks it.
    Audit,
}

impl HumanKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HumanKind::Escalation => "escalation",
            HumanKind::Audit => "audit",
        }
    }
}

/// What happens next to an item.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The verdict stands, decided at this stage.
    Accept { verdict: Verdict, stage: Stage },
    /// Ask this judge.
    Judge(Stage),
    /// A human decides; the reason is recorded on the task.
    Human { reason: String },
}

/// After the deterministic grader: its decision stands; otherwise a judge, else a human.
pub fn after_deterministic(triage: Option<&FrozenTriage>, grade: &Grade) -> Step {
    if grade.verdict != Verdict::Uncertain {
        return Step::Accept {
            verdict: grade.verdict,
            stage: Stage::Deterministic,
        };
    }
    match triage {
        Some(triage) if triage.cheap_judge.is_some() => Step::Judge(Stage::CheapJudge),
        _ => Step::Human {
            reason: format!("{}: {}", grade.grader, grade.reason),
        },
    }
}

/// After a judge's verdict. `cheap` is the cheap judge's verdict when `stage` is the strong
/// judge, so that disagreement between the two sends the item to a human.
pub fn after_judge(
    triage: &FrozenTriage,
    stage: Stage,
    verdict: &EnsembleVerdict,
    cheap: Option<&EnsembleVerdict>,
) -> Step {
    let policy = &triage.policy;
    let escalate = |reason: String| match (stage, &triage.strong_judge) {
        (Stage::CheapJudge, Some(_)) => Step::Judge(Stage::StrongJudge),
        _ => Step::Human { reason },
    };
    let name = stage.label();
    let Some(pass) = verdict.pass else {
        return escalate(if verdict.agreement > 0.0 {
            format!("the {name}'s samples split evenly")
        } else {
            format!("the {name} gave no verdict that could be read (judge failure)")
        });
    };
    let said = if pass { "pass" } else { "fail" };
    if let Some(cheap) = cheap.and_then(|cheap| cheap.pass) {
        if cheap != pass {
            return Step::Human {
                reason: format!(
                    "the judges disagree: the cheap judge said {}, the strong judge {said}",
                    if cheap { "pass" } else { "fail" }
                ),
            };
        }
    }
    let Some(confidence) = verdict.confidence else {
        return escalate(format!(
            "the {name} said {said} without logprobs, so its confidence is unknown"
        ));
    };
    if verdict.agreement < 1.0 {
        return escalate(format!(
            "the {name}'s samples disagree ({:.0}% voted {said})",
            verdict.agreement * 100.0
        ));
    }
    if confidence >= policy.accept_threshold {
        return Step::Accept {
            verdict: if pass { Verdict::Pass } else { Verdict::Fail },
            stage,
        };
    }
    let reason = format!(
        "the {name} said {said} at confidence {confidence:.2}, below the accept threshold {:.2}",
        policy.accept_threshold
    );
    if confidence < policy.escalate_threshold {
        Step::Human { reason }
    } else {
        escalate(reason)
    }
}

/// Whether an auto-accepted judge verdict is drawn for the human audit: a stable draw from
/// the identity's key, so a re-run audits the same items and the rate holds over any run.
pub fn drawn_for_audit(audit_rate: f64, identity_key: &str) -> bool {
    if audit_rate <= 0.0 {
        return false;
    }
    let draw = xxhash_rust::xxh3::xxh3_64(format!("audit\0{identity_key}").as_bytes());
    (draw as f64 / u64::MAX as f64) < audit_rate
}

/// Where a human task goes and how much human attention it gets.
#[derive(Clone, Debug, PartialEq)]
pub struct HumanRouting {
    pub labels_needed: i64,
    pub skill: Option<String>,
    pub review_rate: f64,
    /// The rubric version raters answer (`None`: pass or fail).
    pub rubric_id: Option<i64>,
}

impl Default for HumanRouting {
    fn default() -> HumanRouting {
        HumanRouting {
            labels_needed: 1,
            skill: None,
            review_rate: crate::grading::triage::DEFAULT_REVIEW_RATE,
            rubric_id: None,
        }
    }
}

/// One version of an eval's triage policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyVersion {
    pub eval_id: EvalId,
    pub version: i64,
    pub policy: TriagePolicy,
    pub note: String,
    /// For recalibrations: old and new thresholds and the data used, as JSON.
    pub calibration_json: Option<String>,
    pub created_by: Option<String>,
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grading::judge::DEFAULT_RUBRIC;

    fn judge(id: i64) -> JudgeSpec {
        JudgeSpec {
            judge_id: id,
            name: format!("judge-{id}"),
            version: 1,
            rubric: DEFAULT_RUBRIC.into(),
            max_tokens: 64,
            checkpoint_name: "j".into(),
            endpoint_urls: vec!["http://127.0.0.1:1/v1".into()],
            served_model: "j".into(),
            fingerprint: "j".into(),
            scale: None,
            pairwise: false,
            batch_items: 1,
        }
    }

    fn triage(strong: bool) -> FrozenTriage {
        FrozenTriage {
            policy_version: 1,
            policy: TriagePolicy {
                cheap_judge: Some(1),
                strong_judge: strong.then_some(2),
                ..TriagePolicy::default()
            },
            cheap_judge: Some(judge(1)),
            strong_judge: strong.then(|| judge(2)),
            rubric: None,
        }
    }

    fn uncertain() -> Grade {
        Grade {
            grader: "exact_match@1".into(),
            verdict: Verdict::Uncertain,
            extracted_answer: None,
            reason: "no answer".into(),
        }
    }

    fn said(pass: Option<bool>, confidence: Option<f64>, agreement: f64) -> EnsembleVerdict {
        EnsembleVerdict {
            pass,
            confidence,
            agreement,
        }
    }

    /// Runs an item through triage with the given judge answers; returns the final step and
    /// the stages visited.
    fn route(
        triage: &FrozenTriage,
        cheap: EnsembleVerdict,
        strong: EnsembleVerdict,
    ) -> (Step, Vec<Stage>) {
        let mut visited = vec![Stage::Deterministic];
        let mut step = after_deterministic(Some(triage), &uncertain());
        while let Step::Judge(stage) = step {
            visited.push(stage);
            step = match stage {
                Stage::CheapJudge => after_judge(triage, stage, &cheap, None),
                _ => after_judge(triage, stage, &strong, Some(&cheap)),
            };
        }
        (step, visited)
    }

    #[test]
    fn deterministic_decisions_stand() {
        let grade = Grade {
            verdict: Verdict::Fail,
            ..uncertain()
        };
        assert_eq!(
            after_deterministic(Some(&triage(true)), &grade),
            Step::Accept {
                verdict: Verdict::Fail,
                stage: Stage::Deterministic
            }
        );
    }

    #[test]
    fn without_judges_undecided_items_go_to_humans_with_the_graders_reason() {
        let Step::Human { reason } = after_deterministic(None, &uncertain()) else {
            panic!("expected a human");
        };
        assert_eq!(reason, "exact_match@1: no answer");
    }

    #[test]
    fn confidence_bands_route_to_accept_strong_judge_or_human() {
        let triage = triage(true);
        let sure = said(Some(true), Some(0.95), 1.0);
        let (step, _) = route(&triage, sure.clone(), sure.clone());
        assert_eq!(
            step,
            Step::Accept {
                verdict: Verdict::Pass,
                stage: Stage::CheapJudge
            }
        );
        let middling = said(Some(true), Some(0.8), 1.0);
        let (step, visited) = route(&triage, middling.clone(), sure.clone());
        assert_eq!(visited.last(), Some(&Stage::StrongJudge));
        assert_eq!(
            step,
            Step::Accept {
                verdict: Verdict::Pass,
                stage: Stage::StrongJudge
            }
        );
        let (step, visited) = route(&triage, said(Some(false), Some(0.6), 1.0), sure.clone());
        assert_eq!(visited, vec![Stage::Deterministic, Stage::CheapJudge]);
        assert!(matches!(step, Step::Human { .. }));
        // The strong judge disagreeing with the cheap one sends the item to a human.
        let (step, _) = route(&triage, middling, said(Some(false), Some(0.99), 1.0));
        let Step::Human { reason } = step else {
            panic!("expected a human")
        };
        assert!(reason.contains("disagree"));
    }

    #[test]
    fn judge_failures_and_split_ensembles_never_pass() {
        let triage = triage(false);
        for verdict in [
            said(None, None, 0.0),
            said(None, None, 0.5),
            said(Some(true), None, 1.0),
            said(Some(true), Some(0.99), 0.67),
        ] {
            let (step, _) = route(&triage, verdict.clone(), verdict);
            assert!(matches!(step, Step::Human { .. }), "{step:?}");
        }
    }

    /// Every item ends in exactly one final state, and every route to a human has a reason,
    /// over a grid of judge answers and both policy shapes.
    #[test]
    fn every_route_ends_once_and_humans_always_get_a_reason() {
        let answers: Vec<EnsembleVerdict> = [None, Some(true), Some(false)]
            .into_iter()
            .flat_map(|pass| {
                [
                    None,
                    Some(0.5),
                    Some(0.69),
                    Some(0.7),
                    Some(0.89),
                    Some(0.9),
                    Some(1.0),
                ]
                .into_iter()
                .flat_map(move |confidence| {
                    [0.0, 0.5, 1.0].map(|agreement| said(pass, confidence, agreement))
                })
            })
            .collect();
        for strong in [false, true] {
            let triage = triage(strong);
            for cheap in &answers {
                for strong_answer in &answers {
                    let (step, visited) = route(&triage, cheap.clone(), strong_answer.clone());
                    assert!(visited.len() <= 3, "stages repeat: {visited:?}");
                    match step {
                        Step::Human { reason } => assert!(!reason.trim().is_empty()),
                        Step::Accept { verdict, stage } => {
                            assert_ne!(verdict, Verdict::Uncertain);
                            assert_eq!(Some(&stage), visited.last());
                        }
                        Step::Judge(_) => unreachable!("route runs until a final step"),
                    }
                }
            }
        }
    }

    #[test]
    fn audit_draws_hit_the_rate_and_are_stable() {
        let drawn = (0..100_000)
            .filter(|i| drawn_for_audit(0.02, &format!("key-{i}")))
            .count();
        // 2% of 100k: the standard deviation is about 44, so ±300 is far outside chance.
        assert!((1_700..=2_300).contains(&drawn), "{drawn}");
        assert_eq!(drawn_for_audit(0.02, "x"), drawn_for_audit(0.02, "x"));
        assert!(!(0..1000).any(|i| drawn_for_audit(0.0, &i.to_string())));
    }

    #[test]
    fn policies_are_checked() {
        assert!(TriagePolicy::default().validate().is_ok());
        let bad = [
            TriagePolicy {
                escalate_threshold: 0.95,
                ..TriagePolicy::default()
            },
            TriagePolicy {
                accept_threshold: 1.5,
                ..TriagePolicy::default()
            },
            TriagePolicy {
                judge_samples: 0,
                ..TriagePolicy::default()
            },
            TriagePolicy {
                strong_judge: Some(2),
                ..TriagePolicy::default()
            },
            TriagePolicy {
                cheap_judge: Some(2),
                strong_judge: Some(2),
                ..TriagePolicy::default()
            },
        ];
        for policy in bad {
            assert!(policy.validate().is_err(), "{policy:?}");
        }
    }
}
