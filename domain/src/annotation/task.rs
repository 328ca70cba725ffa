//! An item in the human queue as a rater sees it (blind to the model and the grader's
//! verdict), what a rater in training learns after answering, and the labels agreement is
//! computed from.

use std::fmt;

use crate::ids::{TaskId, UserId};
use serde::{Deserialize, Serialize};

/// What a rater's claim on an item is called outside the server: random and new for every
/// claim, so nothing a rater sees ties the item to its task id (a gold item, served under its
/// real and usually old id, would give itself away) or to another rater's claim.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClaimHandle(pub String);

impl ClaimHandle {
    /// 128 random bits from the operating system, as hex.
    pub fn fresh() -> Self {
        ClaimHandle(hex::encode(rand::random::<[u8; 16]>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClaimHandle {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// Shortened: a handle is as good as the lease it names while that lease lives.
impl fmt::Debug for ClaimHandle {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "ClaimHandle({}…)",
            self.0.get(..6).unwrap_or(&self.0)
        )
    }
}

/// An item as an annotator sees it: blind to the model and the grader's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnotationTask {
    /// Names this rater's claim when they label or skip it.
    pub handle: ClaimHandle,
    /// The server's own key for the item; never sent to the browser.
    #[serde(skip)]
    pub task_id: TaskId,
    /// The result identity being labelled (the server's too): how its eval showed the item to
    /// the model is rebuilt from it.
    /// `None` for an item pushed from outside, which is shown as pushed.
    #[serde(skip)]
    pub identity_id: Option<crate::ids::IdentityId>,
    pub input: String,
    /// Images sent with the input (data URLs), shown beside it.
    #[serde(default)]
    pub images: Vec<String>,
    pub target: String,
    pub output: String,
    pub lease_expires_at: i64,
    /// The rater is in training: every item is a gold item and each answer gets feedback.
    /// (Outside training, gold items look exactly like ordinary ones.)
    pub training: bool,
    /// The texts rendered for reading (filled by the engine before the item is shown).
    #[serde(default)]
    pub shown: Option<crate::annotation::shown::ShownItem>,
    /// The rubric the rater answers (`None`: pass or fail), with its guidelines.
    #[serde(default)]
    pub rubric: Option<TaskRubric>,
    /// Set when the item is a pair: `output` is shown on the left as A, this on the right as B,
    /// and the rater says which is better.
    #[serde(default)]
    pub pair: Option<TaskPair>,
}

/// The right-hand output of a pair (B).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskPair {
    pub right_output: String,
    /// Rendered for reading (filled by the engine).
    #[serde(default)]
    pub right_shown: Option<crate::annotation::shown::ShownText>,
}

/// The rubric an item asks, as its rater sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRubric {
    pub version: crate::annotation::rubric::RubricVersion,
    /// The newest guidelines of the rubric, if it has any.
    pub guidelines: Option<crate::annotation::rubric::Guidelines>,
    /// The guidelines rendered and sanitised (filled by the engine).
    #[serde(default)]
    pub guidelines_html: String,
}

/// What a rater in training learns after answering a gold item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingFeedback {
    pub correct: bool,
    /// The right answer, and why (the note the lead gave with the gold item).
    pub answer: crate::annotation::gold::GoldAnswer,
    pub note: String,
    /// Training answers so far, and how many of the latest were right.
    pub answered: u64,
    pub latest_right: u64,
    /// The rater passed with this answer and labels for real from now on.
    pub graduated: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueCounts {
    pub open: i64,
    pub leased: i64,
    pub done: i64,
}

/// A standing label with its queue (the eval whose items it labels), for agreement per queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueLabel {
    pub queue: String,
    pub task_id: TaskId,
    pub rater_id: UserId,
    pub rater: String,
    pub pass: bool,
    /// The rubric version the item asks (`None`: pass or fail) and the label's answers to it.
    pub rubric_id: Option<i64>,
    pub answers: Option<crate::annotation::rubric::RubricAnswer>,
    /// A rater's choice on a pair (which has no verdict; `pass` is false then).
    pub preference: Option<crate::annotation::preference::Preference>,
}

/// One standing label on a run's item, for agreement statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct RunLabel {
    pub label_id: i64,
    pub task_id: TaskId,
    pub rater_id: UserId,
    pub rater: String,
    pub pass: bool,
    /// The answers to the item's rubric (`None` for a pass/fail label).
    pub answers: Option<crate::annotation::rubric::RubricAnswer>,
}

/// Longest rationale a rater may write.
pub const MAX_RATIONALE_CHARS: usize = 5_000;

/// A pass/fail label as a form or the API sends it: `pass` or `fail`, and a rationale of at
/// most [`MAX_RATIONALE_CHARS`]. Returns whether it passes.
pub fn parse_label(verdict: &str, rationale: &str) -> Result<bool, String> {
    let pass = match verdict {
        "pass" => true,
        "fail" => false,
        other => return Err(format!("a label is `pass` or `fail`, not `{other}`")),
    };
    if rationale.chars().count() > MAX_RATIONALE_CHARS {
        return Err(format!(
            "the rationale is longer than {MAX_RATIONALE_CHARS} characters"
        ));
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_pass_or_fail_with_a_bounded_rationale() {
        assert_eq!(parse_label("pass", ""), Ok(true));
        assert_eq!(parse_label("fail", "wrong unit"), Ok(false));
        assert!(parse_label("PASS", "").unwrap_err().contains("`PASS`"));
        let long = "é".repeat(MAX_RATIONALE_CHARS + 1);
        assert!(parse_label("pass", &long).unwrap_err().contains("5000"));
        assert_eq!(parse_label("pass", &long[2..]), Ok(true));
    }
}
