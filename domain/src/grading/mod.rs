//! Grading of one answer: the verdict vocabulary (`Verdict`, `Grade`), final-answer extraction,
//! the original `exact_match@1` grader, and the data-described grader library in
//! `deterministic`.
//!
//! Pure. An answer that cannot be parsed is neither pass nor fail: it is `Uncertain` and goes to
//! the human annotation queue. Error placeholders are never graded (the dispatcher skips them).

pub mod batch;
pub mod calibration;
pub mod canary;
pub mod code_tests;
mod deterministic;
pub mod harness_match;
pub mod instructions;
pub mod judge;
pub mod pairwise;
pub mod quoting;
pub mod record;
pub mod scale;
pub mod scale_calibration;
pub mod triage;
pub mod tuning;

pub use deterministic::{
    grade, normalise_loosely, Grader, GraderSpec, GraderSpecError, Occurrence, Require,
    MAX_NESTING_DEPTH, MAX_PATTERN_CHARS,
};

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Uncertain,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Uncertain => "uncertain",
        }
    }
}

/// A grader's decision about one answer, with the evidence a reviewer needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grade {
    pub grader: String,
    pub verdict: Verdict,
    pub extracted_answer: Option<String>,
    pub reason: String,
}

/// Longest whole reply accepted as a bare answer when there is no `Answer:` line.
const MAX_BARE_ANSWER_CHARS: usize = 40;

/// The final answer in a reply: the text after the last `Answer:` line, or the whole reply when
/// it is one short line. `None` when the reply has no recognisable answer.
pub fn extract_answer(output: &str) -> Option<String> {
    let from_answer_line = output.lines().rev().find_map(|line| {
        let line = line.trim();
        let lower = line.to_ascii_lowercase();
        lower
            .strip_prefix("answer:")
            .map(|_| line["answer:".len()..].trim().to_string())
    });
    if let Some(answer) = from_answer_line {
        return (!answer.is_empty()).then_some(answer);
    }
    let trimmed = output.trim();
    let is_bare_answer = !trimmed.is_empty()
        && !trimmed.contains('\n')
        && trimmed.chars().count() <= MAX_BARE_ANSWER_CHARS;
    is_bare_answer.then(|| trimmed.to_string())
}

/// Case-folded, whitespace-collapsed, without surrounding quotes or trailing full stop, so that
/// "Paris." and "paris" match but "Paris, France" does not.
pub fn normalise(answer: &str) -> String {
    let collapsed = answer.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed
        .trim_matches(|c: char| c == '"' || c == '\'' || c == '`')
        .trim_end_matches('.')
        .trim()
        .to_lowercase()
}

/// Exact match after normalisation (grader `exact_match@1`).
pub fn grade_exact_match(output: &str, target: &str) -> Grade {
    let grader = crate::grading::EXACT_MATCH_GRADER.to_string();
    match extract_answer(output) {
        None => Grade {
            grader,
            verdict: Verdict::Uncertain,
            extracted_answer: None,
            reason: "no answer could be parsed from the output (no `Answer:` line and not a single short line)".into(),
        },
        Some(answer) => {
            let matched = normalise(&answer) == normalise(target);
            Grade {
                grader,
                verdict: if matched { Verdict::Pass } else { Verdict::Fail },
                reason: if matched {
                    format!("answer `{answer}` matches the target")
                } else {
                    format!("answer `{answer}` differs from the target `{target}`")
                },
                extracted_answer: Some(answer),
            }
        }
    }
}

/// The only grader of the foundation; later graders add their own ids.
pub const EXACT_MATCH_GRADER: &str = "exact_match@1";
/// The sandboxed code grader ([`code_tests::CodeTests`]).
pub const CODE_TESTS_GRADER: &str = "code_tests@1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_the_last_answer_line() {
        assert_eq!(
            extract_answer("Let me think.\nAnswer: 12\nAnswer: 13").as_deref(),
            Some("13")
        );
        assert_eq!(extract_answer("answer:  Paris ").as_deref(), Some("Paris"));
        assert_eq!(extract_answer("Tokyo").as_deref(), Some("Tokyo"));
    }

    #[test]
    fn rambling_or_empty_output_has_no_answer() {
        assert_eq!(extract_answer(""), None);
        assert_eq!(
            extract_answer("I am not sure.\nIt could be many things."),
            None
        );
        assert_eq!(extract_answer("Answer:"), None);
    }

    #[test]
    fn exact_match_normalises_case_and_punctuation_only() {
        assert_eq!(
            grade_exact_match("Answer: Paris.", "paris").verdict,
            Verdict::Pass
        );
        assert_eq!(
            grade_exact_match("Answer: \"42\"", "42").verdict,
            Verdict::Pass
        );
        assert_eq!(
            grade_exact_match("Answer: Paris, France", "Paris").verdict,
            Verdict::Fail
        );
        let uncertain = grade_exact_match("Hmm.\nHard to say.", "Paris");
        assert_eq!(uncertain.verdict, Verdict::Uncertain);
        assert!(uncertain.reason.contains("no answer"));
    }
}
