//! Several raters' answers to a rubric made into one answer per dimension, each rater weighted
//! by their quality (as for pass/fail labels):
//! - nominal dimensions (binary, one of named options): the weighted majority;
//! - several options at once: each option the weighted majority keeps;
//! - ordinal and numeric dimensions: the weighted median (a numeric tie between two values is
//!   their midpoint; an ordinal one has no point between, so it is a split);
//! - free text: not combined, every rater's text stands.
//!
//! A split (equal weights) is left to a reviewer, as with pass/fail. The item's verdict is the
//! weighted majority of the raters' own verdicts (each from their answer on the rubric's
//! verdict dimension), so raters who all pass an item agree on it whatever their points. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::adjudication::{adjudicate, Adjudication, Vote};
use super::rubric::{DimensionAnswer, DimensionKind, Rubric, RubricAnswer};

/// One rater's answer with the weight their record earns.
#[derive(Clone, Debug, PartialEq)]
pub struct RubricVote {
    pub rater: String,
    pub answer: RubricAnswer,
    /// From [`super::adjudication::rater_quality`].
    pub quality: f64,
}

/// What the raters' answers decide on one dimension.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DimensionConsensus {
    Decided {
        answer: DimensionAnswer,
    },
    /// The weights split evenly: a reviewer decides.
    Split,
    /// Nobody answered (an optional dimension), or free text, which is not combined.
    Open,
}

/// The consensus on every dimension, by key.
pub type Consensus = BTreeMap<String, DimensionConsensus>;

/// Weights closer than this are equal: they are sums of a few numbers in (0, 1).
const TIE: f64 = 1e-9;

/// The consensus of `votes` on each of the rubric's dimensions.
pub fn consensus(rubric: &Rubric, votes: &[RubricVote]) -> Consensus {
    rubric
        .dimensions
        .iter()
        .map(|dimension| {
            let answers: Vec<(&DimensionAnswer, f64)> = votes
                .iter()
                .filter_map(|vote| {
                    vote.answer
                        .get(&dimension.key)
                        .map(|answer| (answer, vote.quality))
                })
                .collect();
            let decided = if answers.is_empty() {
                DimensionConsensus::Open
            } else {
                match &dimension.kind {
                    DimensionKind::Binary => majority(&answers),
                    DimensionKind::Categorical {
                        multiple: false, ..
                    } => majority(&answers),
                    DimensionKind::Categorical {
                        options,
                        multiple: true,
                    } => options_kept(options, &answers),
                    DimensionKind::Ordinal { .. } => weighted_median(&answers, false),
                    DimensionKind::Numeric { .. } => weighted_median(&answers, true),
                    DimensionKind::FreeText { .. } => DimensionConsensus::Open,
                }
            };
            (dimension.key.clone(), decided)
        })
        .collect()
}

/// The answer with the most weight; a tie at the top is a split.
fn majority(answers: &[(&DimensionAnswer, f64)]) -> DimensionConsensus {
    let mut weights: Vec<(&DimensionAnswer, f64)> = Vec::new();
    for (answer, weight) in answers {
        match weights.iter_mut().find(|(seen, _)| seen == answer) {
            Some((_, total)) => *total += weight,
            None => weights.push((answer, *weight)),
        }
    }
    weights.sort_by(|a, b| b.1.total_cmp(&a.1));
    match weights.as_slice() {
        [(_, first), (_, second), ..] if (first - second).abs() < TIE => DimensionConsensus::Split,
        [(top, _), ..] => DimensionConsensus::Decided {
            answer: (*top).clone(),
        },
        [] => DimensionConsensus::Open,
    }
}

/// Each option kept when the raters who chose it outweigh those who did not.
fn options_kept(options: &[String], answers: &[(&DimensionAnswer, f64)]) -> DimensionConsensus {
    let total: f64 = answers.iter().map(|(_, weight)| weight).sum();
    let mut kept = Vec::new();
    for option in options {
        let chosen: f64 = answers
            .iter()
            .filter(|(answer, _)| {
                matches!(answer, DimensionAnswer::Texts(chosen) if chosen.contains(option))
            })
            .map(|(_, weight)| weight)
            .sum();
        let against = total - chosen;
        if (chosen - against).abs() < TIE {
            return DimensionConsensus::Split;
        }
        if chosen > against {
            kept.push(option.clone());
        }
    }
    DimensionConsensus::Decided {
        answer: DimensionAnswer::Texts(kept),
    }
}

/// The weighted median: the smallest value with more than half the weight at or below it.
/// When exactly half lies at or below one value and half above, a numeric median is the
/// midpoint of the two values and an ordinal one is a split.
fn weighted_median(answers: &[(&DimensionAnswer, f64)], midpoint: bool) -> DimensionConsensus {
    // The weight on each distinct value, in order: a run of equal answers is one step.
    let mut values: Vec<(f64, f64)> = Vec::new();
    let mut numbers: Vec<(f64, f64)> = answers
        .iter()
        .filter_map(|(answer, weight)| match answer {
            DimensionAnswer::Number(value) => Some((*value, *weight)),
            _ => None,
        })
        .collect();
    numbers.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (value, weight) in numbers {
        match values.last_mut() {
            Some((last, total)) if *last == value => *total += weight,
            _ => values.push((value, weight)),
        }
    }
    let half = values.iter().map(|(_, weight)| weight).sum::<f64>() / 2.0;
    let mut below = 0.0;
    for (index, (value, weight)) in values.iter().enumerate() {
        below += weight;
        if (below - half).abs() < TIE {
            // Exactly half at or below `value`; the next value holds the other half.
            let Some((next, _)) = values.get(index + 1) else {
                break;
            };
            return if midpoint {
                DimensionConsensus::Decided {
                    answer: DimensionAnswer::Number((value + next) / 2.0),
                }
            } else {
                DimensionConsensus::Split
            };
        }
        if below > half {
            return DimensionConsensus::Decided {
                answer: DimensionAnswer::Number(*value),
            };
        }
    }
    match values.last() {
        Some((largest, _)) => DimensionConsensus::Decided {
            answer: DimensionAnswer::Number(*largest),
        },
        None => DimensionConsensus::Open,
    }
}

/// A senior's word on an item that asks a rubric: the verdict, and when a reviewer corrected
/// the answers dimension by dimension, their answers (which give that verdict).
#[derive(Clone, Debug, PartialEq)]
pub struct RubricCorrection {
    pub pass: bool,
    pub answers: Option<RubricAnswer>,
}

/// The item's verdict and consensus. The verdict is a reviewer's correction if there is one,
/// else the weighted majority of the raters' own verdicts (each from their answer on the
/// verdict dimension, as pass/fail labels are counted): two raters who both pass an item agree
/// on the verdict even when their points differ, and an even split goes to a reviewer. The
/// consensus per dimension is reported beside it; a reviewer's corrected answers replace it on
/// every dimension they answer.
pub fn adjudicate_rubric(
    rubric: &Rubric,
    votes: &[RubricVote],
    correction: Option<&RubricCorrection>,
) -> (Adjudication, Consensus) {
    let mut consensus = consensus(rubric, votes);
    let summary = describe(rubric, &consensus);
    if let Some(answers) = correction.and_then(|correction| correction.answers.as_ref()) {
        for (key, answer) in answers {
            consensus.insert(
                key.clone(),
                DimensionConsensus::Decided {
                    answer: answer.clone(),
                },
            );
        }
    }
    let correction = correction.map(|correction| correction.pass);
    let verdicts: Vec<Vote> = votes
        .iter()
        .filter_map(|vote| {
            Some(Vote {
                rater: vote.rater.clone(),
                pass: rubric.verdict_of_answer(&vote.answer)?,
                rationale: String::new(),
                quality: vote.quality,
            })
        })
        .collect();
    if correction.is_none() && verdicts.is_empty() && !votes.is_empty() {
        return (
            Adjudication {
                pass: None,
                reason: format!(
                    "no rater's answers give a verdict ({summary}); a senior reviewer decides"
                ),
            },
            consensus,
        );
    }
    let decided = adjudicate(&verdicts, correction);
    let reason = match (correction, decided.pass) {
        (Some(_), _) => format!("{} (raters: {summary})", decided.reason),
        (None, Some(_)) => format!("{}; {summary}", decided.reason),
        (None, None) => decided.reason.clone(),
    };
    (
        Adjudication {
            pass: decided.pass,
            reason,
        },
        consensus,
    )
}

/// Whether one rater's answers match the raters' consensus, per dimension of `rubric` they
/// answered, in the rubric's order: on a decided dimension, whether their answer is the one
/// decided (a set of options in any order); on a split one, no (they were in no majority).
/// Numeric dimensions are left out (a weighted median is rarely anyone's exact number), as are
/// free text and dimensions nobody answered.
pub fn matches_consensus(
    rubric: &Rubric,
    answers: &RubricAnswer,
    consensus: &Consensus,
) -> Vec<(String, bool)> {
    let sorted = |texts: &[String]| {
        let mut texts = texts.to_vec();
        texts.sort();
        texts
    };
    rubric
        .dimensions
        .iter()
        .filter(|dimension| {
            !matches!(
                dimension.kind,
                DimensionKind::Numeric { .. } | DimensionKind::FreeText { .. }
            )
        })
        .filter_map(|dimension| {
            let given = answers.get(&dimension.key)?;
            let same = match consensus.get(&dimension.key)? {
                DimensionConsensus::Decided { answer: agreed } => match (given, agreed) {
                    (DimensionAnswer::Texts(given), DimensionAnswer::Texts(agreed)) => {
                        sorted(given) == sorted(agreed)
                    }
                    (given, agreed) => given == agreed,
                },
                DimensionConsensus::Split => false,
                DimensionConsensus::Open => return None,
            };
            Some((dimension.key.clone(), same))
        })
        .collect()
}

/// The consensus in words: `correct: pass; helpful: 3 (Good); issues: split`.
pub fn describe(rubric: &Rubric, consensus: &Consensus) -> String {
    rubric
        .dimensions
        .iter()
        .filter_map(|dimension| {
            let said = match consensus.get(&dimension.key)? {
                DimensionConsensus::Decided { answer } => answer_in_words(&dimension.kind, answer),
                DimensionConsensus::Split => "split".to_string(),
                DimensionConsensus::Open => return None,
            };
            Some(format!("{}: {said}", dimension.key))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A rater's answers as (question, answer in words), in the rubric's order; unanswered
/// dimensions are left out.
pub fn answers_in_words(rubric: &Rubric, answers: &RubricAnswer) -> Vec<(String, String)> {
    rubric
        .dimensions
        .iter()
        .filter_map(|dimension| {
            let answer = answers.get(&dimension.key)?;
            Some((
                dimension.question.clone(),
                answer_in_words(&dimension.kind, answer),
            ))
        })
        .collect()
}

/// One answer in words, as a dimension of its kind reads it.
pub fn answer_in_words(kind: &DimensionKind, answer: &DimensionAnswer) -> String {
    match (kind, answer) {
        (_, DimensionAnswer::Binary(pass)) => if *pass { "pass" } else { "fail" }.to_string(),
        (DimensionKind::Ordinal { scale }, DimensionAnswer::Number(point)) => {
            match scale.get((*point as usize).wrapping_sub(1)) {
                Some(anchor) => format!("{point} ({})", anchor.label),
                None => point.to_string(),
            }
        }
        (_, DimensionAnswer::Number(value)) => value.to_string(),
        (_, DimensionAnswer::Texts(texts)) if texts.is_empty() => "none".to_string(),
        (_, DimensionAnswer::Texts(texts)) => texts.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rubric() -> Rubric {
        serde_json::from_value(json!({
            "dimensions": [
                {"key": "correct", "question": "Correct?", "kind": "binary"},
                {"key": "helpful", "question": "Helpful?", "kind": "ordinal", "scale": [
                    {"label": "Poor", "description": "p"}, {"label": "Fair", "description": "f"},
                    {"label": "Good", "description": "g"}, {"label": "Great", "description": "e"}]},
                {"key": "tone", "question": "Tone?", "kind": "categorical", "options": ["formal", "casual", "rude"]},
                {"key": "issues", "question": "Issues?", "kind": "categorical",
                 "options": ["factual", "unsafe"], "multiple": true, "required": false},
                {"key": "score", "question": "Score?", "kind": "numeric", "min": 0, "max": 10},
                {"key": "why", "question": "Why?", "kind": "free_text", "max_chars": 100, "required": false}
            ],
            "verdict": {"dimension": "helpful", "pass_at_least": 3}
        }))
        .unwrap()
    }

    fn vote(quality: f64, answer: serde_json::Value) -> RubricVote {
        RubricVote {
            rater: "r".into(),
            answer: serde_json::from_value(answer).unwrap(),
            quality,
        }
    }

    fn decided(consensus: &Consensus, key: &str) -> DimensionAnswer {
        match &consensus[key] {
            DimensionConsensus::Decided { answer } => answer.clone(),
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn each_level_is_combined_by_its_own_rule() {
        let rubric = rubric();
        rubric.validate().unwrap();
        let votes = [
            vote(
                0.9,
                json!({"correct": true, "helpful": 2, "tone": ["formal"], "issues": ["factual"], "score": 2, "why": ["a"]}),
            ),
            vote(
                0.5,
                json!({"correct": false, "helpful": 4, "tone": ["casual"], "issues": ["factual", "unsafe"], "score": 9}),
            ),
            vote(
                0.5,
                json!({"correct": false, "helpful": 3, "tone": ["casual"], "issues": [], "score": 7}),
            ),
        ];
        let consensus = consensus(&rubric, &votes);
        // Weighted majority: 0.9 for pass against 1.0 for fail.
        assert_eq!(
            decided(&consensus, "correct"),
            DimensionAnswer::Binary(false)
        );
        // Weighted median of 2 (0.9), 3 (0.5), 4 (0.5): half the weight (0.95) is passed at 3.
        assert_eq!(decided(&consensus, "helpful"), DimensionAnswer::Number(3.0));
        assert_eq!(
            decided(&consensus, "tone"),
            DimensionAnswer::Texts(vec!["casual".into()])
        );
        // `factual` chosen by 1.4 of 1.9; `unsafe` by 0.5.
        assert_eq!(
            decided(&consensus, "issues"),
            DimensionAnswer::Texts(vec!["factual".into()])
        );
        assert_eq!(decided(&consensus, "score"), DimensionAnswer::Number(7.0));
        assert_eq!(consensus["why"], DimensionConsensus::Open);
        // Verdicts: helpful 2 fails (0.9), 4 and 3 pass (1.0): the weighted majority passes.
        let (adjudication, _) = adjudicate_rubric(&rubric, &votes, None);
        assert_eq!(adjudication.pass, Some(true));
        assert!(
            adjudication.reason.contains("helpful: 3 (Good)"),
            "{}",
            adjudication.reason
        );
    }

    #[test]
    fn even_splits_go_to_a_reviewer_but_a_numeric_tie_has_a_midpoint() {
        let rubric = rubric();
        let votes = [
            vote(
                0.6,
                json!({"correct": true, "helpful": 2, "tone": ["formal"], "score": 4}),
            ),
            vote(
                0.6,
                json!({"correct": false, "helpful": 4, "tone": ["rude"], "score": 8}),
            ),
        ];
        let consensus = consensus(&rubric, &votes);
        assert_eq!(consensus["correct"], DimensionConsensus::Split);
        assert_eq!(consensus["helpful"], DimensionConsensus::Split);
        assert_eq!(consensus["tone"], DimensionConsensus::Split);
        assert_eq!(decided(&consensus, "score"), DimensionAnswer::Number(6.0));
        assert_eq!(consensus["issues"], DimensionConsensus::Open);
        // helpful 2 fails and 4 passes, with equal weights: a reviewer decides.
        let (adjudication, _) = adjudicate_rubric(&rubric, &votes, None);
        assert_eq!(adjudication.pass, None);
        assert!(adjudication.reason.contains("senior reviewer"));
        // Both pass (3 and 4): the verdict stands though the points split.
        let both_pass = [
            vote(
                0.6,
                json!({"correct": true, "helpful": 3, "tone": ["formal"], "score": 4}),
            ),
            vote(
                0.6,
                json!({"correct": true, "helpful": 4, "tone": ["formal"], "score": 8}),
            ),
        ];
        let (adjudication, consensus) = adjudicate_rubric(&rubric, &both_pass, None);
        assert_eq!(adjudication.pass, Some(true));
        assert_eq!(consensus["helpful"], DimensionConsensus::Split);
        // A correction decides; the consensus stays as the raters gave it.
        let verdict_only = RubricCorrection {
            pass: true,
            answers: None,
        };
        let (corrected, kept) = adjudicate_rubric(&rubric, &votes, Some(&verdict_only));
        assert_eq!(corrected.pass, Some(true));
        assert_eq!(kept["helpful"], DimensionConsensus::Split);
        // Corrected answers replace the consensus on the dimensions they answer, and the reason
        // still says what the raters gave.
        let answers: RubricAnswer =
            serde_json::from_value(json!({"correct": true, "helpful": 2})).unwrap();
        let by_dimension = RubricCorrection {
            pass: true,
            answers: Some(answers),
        };
        let (corrected, replaced) = adjudicate_rubric(&rubric, &votes, Some(&by_dimension));
        assert_eq!(corrected.pass, Some(true));
        assert_eq!(
            replaced["helpful"],
            DimensionConsensus::Decided {
                answer: DimensionAnswer::Number(2.0)
            }
        );
        assert_eq!(replaced["tone"], kept["tone"]);
        assert!(corrected.reason.contains("raters:"), "{}", corrected.reason);
    }

    #[test]
    fn the_median_is_weighted_not_counted() {
        // Two weak raters at 1 and one strong rater at 4: the strong weight carries it.
        let answers = [
            (&DimensionAnswer::Number(1.0), 0.2),
            (&DimensionAnswer::Number(1.0), 0.2),
            (&DimensionAnswer::Number(4.0), 0.9),
        ];
        assert_eq!(
            weighted_median(&answers, false),
            DimensionConsensus::Decided {
                answer: DimensionAnswer::Number(4.0)
            }
        );
        // Equal weights: the plain median.
        let answers = [
            (&DimensionAnswer::Number(3.0), 0.5),
            (&DimensionAnswer::Number(1.0), 0.5),
            (&DimensionAnswer::Number(2.0), 0.5),
        ];
        assert_eq!(
            weighted_median(&answers, false),
            DimensionConsensus::Decided {
                answer: DimensionAnswer::Number(2.0)
            }
        );
        // Half the weight on one value that all share: no split.
        let answers = [
            (&DimensionAnswer::Number(2.0), 0.5),
            (&DimensionAnswer::Number(2.0), 0.5),
        ];
        assert_eq!(
            weighted_median(&answers, false),
            DimensionConsensus::Decided {
                answer: DimensionAnswer::Number(2.0)
            }
        );
    }

    #[test]
    fn equal_answers_weigh_together_in_the_median() {
        let number = |value: f64| DimensionAnswer::Number(value);
        let (one, two, five) = (number(1.0), number(2.0), number(5.0));
        // 1, 2, 2, 5 with equal weights: the median is 2, not a tie between 2 and 5.
        let answers = [(&one, 0.5), (&two, 0.5), (&two, 0.5), (&five, 0.5)];
        assert_eq!(
            weighted_median(&answers, true),
            DimensionConsensus::Decided {
                answer: number(2.0)
            }
        );
        // 1 (0.8), 1 (0.4), 2 (0.4): two thirds of the weight is on 1.
        let answers = [(&one, 0.8), (&one, 0.4), (&two, 0.4)];
        assert_eq!(
            weighted_median(&answers, false),
            DimensionConsensus::Decided {
                answer: number(1.0)
            }
        );
        // 1, 1, 2, 2: an even split between two values.
        let answers = [(&one, 0.5), (&one, 0.5), (&two, 0.5), (&two, 0.5)];
        assert_eq!(weighted_median(&answers, false), DimensionConsensus::Split);
        assert_eq!(
            weighted_median(&answers, true),
            DimensionConsensus::Decided {
                answer: number(1.5)
            }
        );
    }

    #[test]
    fn answers_that_give_no_verdict_go_to_a_reviewer_saying_so() {
        let mut rubric = rubric();
        rubric.verdict = None;
        let votes = [vote(
            0.5,
            json!({"correct": true, "helpful": 4, "tone": ["formal"], "score": 1}),
        )];
        let (adjudication, _) = adjudicate_rubric(&rubric, &votes, None);
        assert_eq!(adjudication.pass, None);
        assert!(
            adjudication
                .reason
                .starts_with("no rater's answers give a verdict"),
            "{}",
            adjudication.reason
        );
    }

    #[test]
    fn verdict_rules_are_checked() {
        let mut rubric = rubric();
        let mut refused = |rule: serde_json::Value| {
            rubric.verdict = Some(serde_json::from_value(rule).unwrap());
            rubric.validate().unwrap_err()
        };
        assert!(refused(json!({"dimension": "nope"})).contains("does not have"));
        assert!(refused(json!({"dimension": "helpful"})).contains("from 2 to 4"));
        assert!(
            refused(json!({"dimension": "helpful", "pass_at_least": 5})).contains("from 2 to 4")
        );
        assert!(refused(json!({"dimension": "correct", "pass_at_least": 1})).contains("drop"));
        assert!(refused(json!({"dimension": "tone"})).contains("binary, ordinal or numeric"));
        assert!(refused(json!({"dimension": "issues"})).contains("required"));
        assert!(refused(json!({"dimension": "score", "pass_at_least": 0})).contains("above 0"));
        rubric.verdict = None;
        rubric.dimensions[0].key = "verdict".into();
        assert!(rubric
            .validate()
            .unwrap_err()
            .contains("kept for the item's pass or fail"));
    }

    #[test]
    fn a_raters_answers_are_matched_to_the_consensus_per_decided_dimension() {
        let consensus: Consensus = serde_json::from_value(json!({
            "correct": {"state": "decided", "answer": true},
            "helpful": {"state": "decided", "answer": 3.0},
            "tone": {"state": "split"},
            "issues": {"state": "decided", "answer": ["factual", "unsafe"]},
            "score": {"state": "decided", "answer": 7.5},
            "why": {"state": "open"}
        }))
        .unwrap();
        let answers: RubricAnswer = serde_json::from_value(json!({
            "correct": true, "helpful": 2.0, "tone": ["formal"], "issues": ["unsafe", "factual"],
            "score": 7.5
        }))
        .unwrap();
        // Numeric `score` is left out; the split `tone` counts as no match.
        assert_eq!(
            matches_consensus(&rubric(), &answers, &consensus),
            [
                ("correct".to_string(), true),
                ("helpful".to_string(), false),
                ("tone".to_string(), false),
                ("issues".to_string(), true),
            ]
        );
    }
}
