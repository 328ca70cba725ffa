//! Comparing two runs of one eval on two checkpoints: scores and per-prompt outcome flips.
//!
//! Pure: result rows in, comparison out. Rows are paired by (case id, repetition), the part of
//! the result identity the two runs share.

use crate::store::ResultRow;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A run's tally. The score pools passes over items with a pass/fail verdict; uncertain and
/// errored items are shown beside it, never silently counted as wrong.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub passed: i64,
    pub failed: i64,
    pub uncertain: i64,
    pub errors: i64,
    pub pending: i64,
    pub total: i64,
}

impl Score {
    pub fn of(rows: &[ResultRow]) -> Score {
        let mut score = Score {
            total: rows.len() as i64,
            ..Score::default()
        };
        for row in rows {
            match row.verdict.as_str() {
                "pass" => score.passed += 1,
                "fail" => score.failed += 1,
                "uncertain" => score.uncertain += 1,
                "error" => score.errors += 1,
                _ => score.pending += 1,
            }
        }
        score
    }

    pub fn graded(&self) -> i64 {
        self.passed + self.failed
    }

    /// Pass rate over graded items; `None` before anything is graded.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.graded() > 0).then(|| self.passed as f64 / self.graded() as f64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlipDirection {
    /// Passed on the baseline, fails on the candidate: a regression.
    PassToFail,
    FailToPass,
}

/// One item whose outcome differs between the runs, with both answers for side-by-side reading.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Flip {
    pub case_id: String,
    pub repetition: i64,
    pub category: String,
    pub input: String,
    pub target: String,
    pub direction: FlipDirection,
    pub baseline_output: String,
    pub candidate_output: String,
    pub baseline_reason: String,
    pub candidate_reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub baseline: Score,
    pub candidate: Score,
    /// Pairs where both runs have a pass/fail verdict.
    pub paired: i64,
    pub pass_to_fail: i64,
    pub fail_to_pass: i64,
    /// Regressions first, then improvements, each in dataset order.
    pub flips: Vec<Flip>,
}

pub fn compare_runs(baseline: &[ResultRow], candidate: &[ResultRow]) -> Comparison {
    let candidate_by_identity: HashMap<(&str, i64), &ResultRow> = candidate
        .iter()
        .map(|row| ((row.case_id.as_str(), row.repetition), row))
        .collect();
    let mut flips = Vec::new();
    let mut paired = 0;
    for base in baseline {
        let Some(cand) = candidate_by_identity.get(&(base.case_id.as_str(), base.repetition))
        else {
            continue;
        };
        let direction = match (base.verdict.as_str(), cand.verdict.as_str()) {
            ("pass", "fail") => Some(FlipDirection::PassToFail),
            ("fail", "pass") => Some(FlipDirection::FailToPass),
            ("pass", "pass") | ("fail", "fail") => None,
            _ => continue,
        };
        paired += 1;
        if let Some(direction) = direction {
            flips.push(Flip {
                case_id: base.case_id.clone(),
                repetition: base.repetition,
                category: base.category.clone(),
                input: base.input.clone(),
                target: base.target.clone(),
                direction,
                baseline_output: base.output.clone(),
                candidate_output: cand.output.clone(),
                baseline_reason: base.grade_reason.clone(),
                candidate_reason: cand.grade_reason.clone(),
            });
        }
    }
    // Stable sort keeps dataset order within each direction.
    flips.sort_by_key(|flip| flip.direction != FlipDirection::PassToFail);
    Comparison {
        baseline: Score::of(baseline),
        candidate: Score::of(candidate),
        paired,
        pass_to_fail: flips
            .iter()
            .filter(|flip| flip.direction == FlipDirection::PassToFail)
            .count() as i64,
        fail_to_pass: flips
            .iter()
            .filter(|flip| flip.direction == FlipDirection::FailToPass)
            .count() as i64,
        flips,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case_id: &str, repetition: i64, verdict: &str) -> ResultRow {
        ResultRow {
            case_id: case_id.into(),
            repetition,
            category: String::new(),
            input: format!("question {case_id}"),
            target: "t".into(),
            output: format!("answer {case_id} {verdict}"),
            outcome: "ok".into(),
            verdict: verdict.into(),
            ..ResultRow::default()
        }
    }

    #[test]
    fn scores_pool_counts_and_keep_errors_apart() {
        let score = Score::of(&[
            row("a", 0, "pass"),
            row("b", 0, "fail"),
            row("c", 0, "error"),
            row("d", 0, "uncertain"),
        ]);
        assert_eq!(
            (score.passed, score.failed, score.errors, score.uncertain),
            (1, 1, 1, 1)
        );
        assert_eq!(score.pass_rate(), Some(0.5));
        assert_eq!(Score::of(&[]).pass_rate(), None);
    }

    #[test]
    fn flips_pair_by_identity_with_regressions_first() {
        let baseline = [
            row("a", 0, "fail"),
            row("b", 0, "pass"),
            row("b", 1, "pass"),
            row("c", 0, "pass"),
            row("d", 0, "pass"),
        ];
        let candidate = [
            row("d", 0, "uncertain"),
            row("c", 0, "pass"),
            row("b", 1, "fail"),
            row("b", 0, "pass"),
            row("a", 0, "pass"),
        ];
        let comparison = compare_runs(&baseline, &candidate);
        assert_eq!(comparison.paired, 4);
        assert_eq!((comparison.pass_to_fail, comparison.fail_to_pass), (1, 1));
        assert_eq!(comparison.flips[0].case_id, "b");
        assert_eq!(comparison.flips[0].repetition, 1);
        assert_eq!(comparison.flips[0].direction, FlipDirection::PassToFail);
        assert_eq!(comparison.flips[0].candidate_output, "answer b fail");
        assert_eq!(comparison.flips[1].direction, FlipDirection::FailToPass);
    }
}
