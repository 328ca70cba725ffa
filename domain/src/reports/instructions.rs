//! What an instruction-following (IFEval) run's report shows beside its pass rate: IFEval's
//! four accuracies (prompt-level and instruction-level, strict and loose) with 95% intervals,
//! and each instruction's own rates, worst first.
//!
//! Prompt-level accuracy counts answers that follow every instruction; instruction-level
//! accuracy pools every instruction of every answer. Instructions of one item are not
//! independent, nor are an item's repetitions, so intervals are clustered by item (the ratio
//! estimator's cluster-robust variance); with one answer per item, the prompt-level ones are
//! Wilson intervals.
//!
//! Pure: the per-instruction results come from the store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::grading::instructions::InstructionResult;
use crate::stats::proportion::{clustered, wilson, ClusterSums, ItemTally};
use crate::stats::{Interval, DEFAULT_CONFIDENCE};

/// One of IFEval's accuracies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstructionAccuracy {
    /// `prompt_level_strict_acc`, `inst_level_strict_acc`, `prompt_level_loose_acc`,
    /// `inst_level_loose_acc`: lm-evaluation-harness's names.
    pub name: String,
    pub what: String,
    pub followed: u64,
    pub of: u64,
    /// `None` when there is nothing to count.
    pub rate: Option<f64>,
    pub interval: Option<Interval>,
}

/// One instruction id's rates over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstructionRow {
    pub id: String,
    /// Answers asked to follow it.
    pub asked: u64,
    pub strict: u64,
    pub loose: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstructionsReport {
    /// Graded answers (every repetition).
    pub answers: u64,
    pub accuracies: Vec<InstructionAccuracy>,
    /// Per instruction id, the lowest strict rate first.
    pub instructions: Vec<InstructionRow>,
}

/// The report over a run's graded answers: (case id, that answer's results).
pub fn instructions_report(answers: &[(String, Vec<InstructionResult>)]) -> InstructionsReport {
    let mut per_case: BTreeMap<&str, [ItemTally; 4]> = BTreeMap::new();
    let mut per_id: BTreeMap<&str, InstructionRow> = BTreeMap::new();
    for (case_id, results) in answers {
        let tallies = per_case.entry(case_id.as_str()).or_default();
        let strict = results.iter().filter(|r| r.strict).count() as u64;
        let loose = results.iter().filter(|r| r.loose).count() as u64;
        let asked = results.len() as u64;
        let add = |tally: &mut ItemTally, passes: u64, answers: u64| {
            tally.passes += passes;
            tally.answers += answers;
        };
        add(&mut tallies[0], u64::from(strict == asked), 1);
        add(&mut tallies[1], strict, asked);
        add(&mut tallies[2], u64::from(loose == asked), 1);
        add(&mut tallies[3], loose, asked);
        for result in results {
            let row = per_id
                .entry(result.id.as_str())
                .or_insert_with(|| InstructionRow {
                    id: result.id.clone(),
                    asked: 0,
                    strict: 0,
                    loose: 0,
                });
            row.asked += 1;
            row.strict += u64::from(result.strict);
            row.loose += u64::from(result.loose);
        }
    }
    let one_answer_per_case = per_case.len() == answers.len();
    let accuracies = [
        (
            "prompt_level_strict_acc",
            "answers following every instruction",
        ),
        ("inst_level_strict_acc", "instructions followed"),
        (
            "prompt_level_loose_acc",
            "answers following every instruction, read loosely",
        ),
        (
            "inst_level_loose_acc",
            "instructions followed, read loosely",
        ),
    ]
    .into_iter()
    .enumerate()
    .map(|(index, (name, what))| {
        let tallies: Vec<ItemTally> = per_case.values().map(|t| t[index]).collect();
        let followed: u64 = tallies.iter().map(|t| t.passes).sum();
        let of: u64 = tallies.iter().map(|t| t.answers).sum();
        let prompt_level = index % 2 == 0;
        let interval = if prompt_level && one_answer_per_case {
            wilson(followed, of, DEFAULT_CONFIDENCE)
        } else {
            clustered(&ClusterSums::of(tallies), DEFAULT_CONFIDENCE)
        };
        InstructionAccuracy {
            name: name.into(),
            what: what.into(),
            followed,
            of,
            rate: (of > 0).then(|| followed as f64 / of as f64),
            interval,
        }
    })
    .collect();
    let mut instructions: Vec<InstructionRow> = per_id.into_values().collect();
    instructions.sort_by(|a, b| {
        let rate = |row: &InstructionRow| row.strict as f64 / row.asked as f64;
        rate(a).total_cmp(&rate(b)).then_with(|| a.id.cmp(&b.id))
    });
    InstructionsReport {
        answers: answers.len() as u64,
        accuracies,
        instructions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, strict: bool, loose: bool) -> InstructionResult {
        InstructionResult {
            id: id.into(),
            strict,
            loose,
        }
    }

    #[test]
    fn the_four_accuracies_count_as_lm_eval_does() {
        let answers = vec![
            (
                "a".to_string(),
                vec![
                    result("punctuation:no_comma", true, true),
                    result("startend:quotation", false, true),
                ],
            ),
            (
                "b".to_string(),
                vec![result("punctuation:no_comma", true, true)],
            ),
            (
                "c".to_string(),
                vec![
                    result("punctuation:no_comma", false, false),
                    result("detectable_format:title", true, true),
                    result("startend:quotation", true, true),
                ],
            ),
        ];
        let report = instructions_report(&answers);
        let by_name = |name: &str| {
            report
                .accuracies
                .iter()
                .find(|a| a.name == name)
                .unwrap()
                .clone()
        };
        let prompt_strict = by_name("prompt_level_strict_acc");
        assert_eq!((prompt_strict.followed, prompt_strict.of), (1, 3));
        assert_eq!(prompt_strict.interval, wilson(1, 3, DEFAULT_CONFIDENCE));
        let inst_strict = by_name("inst_level_strict_acc");
        assert_eq!((inst_strict.followed, inst_strict.of), (4, 6));
        let prompt_loose = by_name("prompt_level_loose_acc");
        assert_eq!((prompt_loose.followed, prompt_loose.of), (2, 3));
        let inst_loose = by_name("inst_level_loose_acc");
        assert_eq!((inst_loose.followed, inst_loose.of), (5, 6));
        let interval = inst_loose.interval.unwrap();
        assert!(interval.contains(5.0 / 6.0));
        // Worst strict rate first: quotation 1/2 and no_comma 2/3 before title 1/1.
        let order: Vec<&str> = report.instructions.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            order,
            [
                "startend:quotation",
                "punctuation:no_comma",
                "detectable_format:title"
            ]
        );
        assert_eq!(report.answers, 3);
    }

    #[test]
    fn repetitions_of_an_item_are_clustered() {
        let answers: Vec<(String, Vec<InstructionResult>)> = (0..4)
            .flat_map(|case| {
                (0..3).map(move |_| {
                    (
                        format!("case-{case}"),
                        vec![result("punctuation:no_comma", case % 2 == 0, true)],
                    )
                })
            })
            .collect();
        let report = instructions_report(&answers);
        let prompt_strict = &report.accuracies[0];
        assert_eq!((prompt_strict.followed, prompt_strict.of), (6, 12));
        // Clustered by item, the interval is wider than Wilson's over 12 independent answers.
        let naive = wilson(6, 12, DEFAULT_CONFIDENCE).unwrap();
        let interval = prompt_strict.interval.unwrap();
        assert!(interval.upper - interval.lower > naive.upper - naive.lower);
    }

    #[test]
    fn an_empty_run_has_no_rates() {
        let report = instructions_report(&[]);
        assert!(report.accuracies.iter().all(|a| a.rate.is_none()));
        assert!(report.instructions.is_empty());
    }
}
