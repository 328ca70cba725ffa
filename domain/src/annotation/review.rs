//! Senior review of labels: a label drawn for QC as the reviewer sees it, the spot check of
//! another reviewer's decision, and the decisions a reviewer can make.

use serde::{Deserialize, Serialize};

/// A label drawn for QC, as a senior reviewer sees it (the rater's name included: reviewing is
/// about the rater's work).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewItem {
    pub label_id: i64,
    /// The labelled result identity (the server's own key): how its eval showed the item to
    /// the model is rebuilt from it.
    /// `None` for an item pushed from outside, which is shown as pushed.
    #[serde(skip)]
    pub identity_id: Option<crate::ids::IdentityId>,
    pub rater: String,
    pub input: String,
    /// Images sent with the input (data URLs).
    #[serde(default)]
    pub images: Vec<String>,
    pub target: String,
    pub output: String,
    pub pass: bool,
    pub rationale: String,
    /// Why the label is up for review: the random QC sample, or raters who split evenly.
    pub why: String,
    /// Set when this is a spot check of another reviewer's decision on the label.
    pub check: Option<ReviewCheck>,
    /// A rubric label's answers, as (question, answer in words); empty for pass/fail.
    #[serde(default)]
    pub answers: Vec<(String, String)>,
    /// A rubric label's rubric and answers as given, for a correction dimension by dimension
    /// (the form starts from the rater's answers).
    #[serde(default)]
    pub rubric: Option<LabelRubric>,
    /// The texts rendered for reading (filled by the engine before the item is shown).
    #[serde(default)]
    pub shown: Option<crate::annotation::shown::ShownItem>,
    /// Set when the label is a rater's choice on a pair (then `pass` means nothing): `output`
    /// is shown as A, this pair's other output as B.
    #[serde(default)]
    pub pair: Option<ReviewPair>,
}

/// The rubric a label under review answered, and its answers as given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelRubric {
    pub rubric: crate::annotation::rubric::Rubric,
    pub answers: crate::annotation::rubric::RubricAnswer,
}

/// A rater's choice on a pair under review, with the pair's right output (B).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewPair {
    pub choice: crate::annotation::preference::Preference,
    pub right: crate::annotation::task::TaskPair,
}

/// A reviewer's decision drawn for a spot check by another senior.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewCheck {
    pub review_id: i64,
    pub reviewer: String,
    /// `accepted`, `corrected` or `rejected`.
    pub decision: String,
    /// The reviewer's verdict when they corrected the label.
    pub corrected_to: Option<bool>,
    pub reason: String,
}

/// Whether `reviewer` may decide on an answer (a label, or a choice on a pair: `noun`) by
/// `rater`, in `state` (`standing` or `rejected`), whose review is `review_state` and which was
/// served to `served_to`: the refusal to show otherwise.
pub fn may_review(
    noun: &str,
    reviewer: crate::ids::UserId,
    rater: crate::ids::UserId,
    state: &str,
    review_state: Option<&str>,
    served_to: Option<crate::ids::UserId>,
) -> Result<(), String> {
    if rater == reviewer {
        return Err(format!("you cannot review your own {noun}"));
    }
    let Some(review_state) = review_state else {
        return Err(format!("this {noun} was not drawn for review"));
    };
    if state == "rejected" || review_state != "pending" {
        return Err(format!("this {noun} has been reviewed already"));
    }
    if served_to != Some(reviewer) {
        return Err(format!(
            "this {noun} was not served to you for review; take your next item on the review page"
        ));
    }
    Ok(())
}

/// A reviewer's decision on a label.
#[derive(Clone, Debug, PartialEq)]
pub enum ReviewDecision {
    Accept,
    /// The reviewer's verdict overrides the raters'.
    Correct {
        pass: bool,
    },
    /// A label answering a rubric corrected dimension by dimension: the reviewer's answers
    /// (checked against the item's rubric) replace the raters' consensus on every dimension
    /// they answer, and the verdict they give (`pass`) overrides the raters'.
    CorrectAnswers {
        answers: crate::annotation::rubric::RubricAnswer,
        pass: bool,
    },
    /// The label no longer counts and the item returns to the queue.
    Reject,
}

impl ReviewDecision {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReviewDecision::Accept => "accepted",
            ReviewDecision::Correct { .. } | ReviewDecision::CorrectAnswers { .. } => "corrected",
            ReviewDecision::Reject => "rejected",
        }
    }

    /// The verdict a correction gives.
    pub fn corrected_to(&self) -> Option<bool> {
        match self {
            ReviewDecision::Correct { pass } | ReviewDecision::CorrectAnswers { pass, .. } => {
                Some(*pass)
            }
            _ => None,
        }
    }
}

/// A reviewer's decision on a rater's choice on a pair: as [`ReviewDecision`], a correction
/// naming the right choice (sides as shown), which then decides the pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairReviewDecision {
    Accept,
    Correct(crate::annotation::preference::Preference),
    Reject,
}

impl PairReviewDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            PairReviewDecision::Accept => "accepted",
            PairReviewDecision::Correct(_) => "corrected",
            PairReviewDecision::Reject => "rejected",
        }
    }

    pub fn correction(self) -> Option<crate::annotation::preference::Preference> {
        match self {
            PairReviewDecision::Correct(choice) => Some(choice),
            _ => None,
        }
    }
}

/// One of a rater's own labels on their feedback page: one a reviewer corrected or rejected
/// (with the reason), or one still open to change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OwnLabel {
    pub label_id: i64,
    /// The labelled result identity (the server's own key), to show the item as it was sent.
    /// `None` for an item pushed from outside, which is shown as pushed.
    #[serde(skip)]
    pub identity_id: Option<crate::ids::IdentityId>,
    pub input: String,
    #[serde(default)]
    pub images: Vec<String>,
    pub target: String,
    pub output: String,
    pub pass: bool,
    pub rationale: String,
    pub created_at: i64,
    /// Set when the rater changed the label after submitting it.
    pub edited_at: Option<i64>,
    /// Why the rater can or cannot change the label now (`Ok`: they can).
    pub editable: Result<(), String>,
    pub review: Option<ReviewOutcome>,
    #[serde(default)]
    pub shown: Option<crate::annotation::shown::ShownItem>,
    /// A rubric label's answers, as (question, answer in words); empty for pass/fail.
    #[serde(default)]
    pub answers: Vec<(String, String)>,
    /// A rubric label's rubric and answers as given, for changing them while it is editable.
    #[serde(default)]
    pub rubric: Option<LabelRubric>,
    /// Set for a choice on a pair (then `pass` means nothing): the choice and the pair's
    /// right output (B).
    #[serde(default)]
    pub pair: Option<ReviewPair>,
}

/// What a reviewer decided on a rater's label, as the rater reads it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewOutcome {
    /// `accepted`, `corrected` or `rejected`.
    pub decision: String,
    /// The reviewer's verdict when they corrected the label.
    pub corrected_to: Option<bool>,
    /// The reviewer's answers, as (question, answer in words), when they corrected a rubric
    /// label dimension by dimension.
    #[serde(default)]
    pub corrected_answers: Vec<(String, String)>,
    /// The reviewer's choice when they corrected a choice on a pair.
    #[serde(default)]
    pub corrected_choice: Option<crate::annotation::preference::Preference>,
    pub reason: String,
    pub decided_at: i64,
    /// A second senior overturned the reviewer's decision: the verdict that stands, and why.
    pub overturned_to: Option<(bool, String)>,
}

/// Where a rater's label stands, for deciding whether they may still change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelStanding {
    /// The item has all its labels (it is adjudicated, or waits for a reviewer's split vote).
    pub item_done: bool,
    /// A reviewer rejected the label.
    pub rejected: bool,
    /// A reviewer decided on it (accepted, corrected or rejected).
    pub reviewed: bool,
    /// A reviewer has been served it (their hold may have lapsed, but they may still decide).
    pub with_reviewer: bool,
}

/// Whether a rater may change their label: only while the item waits for other raters, and
/// never while or after a reviewer looks at it (they would judge a label that then changed).
pub fn may_edit(standing: LabelStanding) -> Result<(), String> {
    if standing.rejected {
        Err("a reviewer rejected this label; the item went back to the queue".into())
    } else if standing.reviewed {
        Err("a reviewer has decided on this label".into())
    } else if standing.with_reviewer {
        Err("a reviewer has taken this label".into())
    } else if standing.item_done {
        Err("the item has all its labels; a label can be changed only while its item waits for other raters".into())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reviewer_decides_only_an_answer_served_to_them_and_not_their_own() {
        use crate::ids::UserId;
        let (reviewer, rater) = (UserId(1), UserId(2));
        let review = |rater, state, review_state, served_to| {
            may_review("label", reviewer, rater, state, review_state, served_to)
        };
        assert_eq!(
            review(rater, "standing", Some("pending"), Some(reviewer)),
            Ok(())
        );
        for (refusal, says) in [
            (
                review(reviewer, "standing", Some("pending"), Some(reviewer)),
                "your own label",
            ),
            (review(rater, "standing", None, Some(reviewer)), "not drawn"),
            (
                review(rater, "rejected", Some("pending"), Some(reviewer)),
                "reviewed already",
            ),
            (
                review(rater, "standing", Some("accepted"), Some(reviewer)),
                "reviewed already",
            ),
            (
                review(rater, "standing", Some("pending"), Some(UserId(3))),
                "not served to you",
            ),
            (
                review(rater, "standing", Some("pending"), None),
                "not served to you",
            ),
        ] {
            assert!(refusal.unwrap_err().contains(says), "{says}");
        }
    }

    #[test]
    fn a_label_is_editable_only_while_its_item_waits_and_no_reviewer_has_it() {
        let waiting = LabelStanding {
            item_done: false,
            rejected: false,
            reviewed: false,
            with_reviewer: false,
        };
        assert_eq!(may_edit(waiting), Ok(()));
        for (standing, word) in [
            (
                LabelStanding {
                    item_done: true,
                    ..waiting
                },
                "all its labels",
            ),
            (
                LabelStanding {
                    rejected: true,
                    ..waiting
                },
                "rejected",
            ),
            (
                LabelStanding {
                    reviewed: true,
                    ..waiting
                },
                "decided on",
            ),
            (
                LabelStanding {
                    with_reviewer: true,
                    ..waiting
                },
                "taken",
            ),
        ] {
            let refusal = may_edit(standing).unwrap_err();
            assert!(refusal.contains(word), "{refusal}");
        }
    }
}
