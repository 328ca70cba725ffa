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
    #[serde(skip)]
    pub identity_id: crate::ids::IdentityId,
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

/// A reviewer's decision on a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewDecision {
    Accept,
    /// The reviewer's verdict overrides the raters'.
    Correct {
        pass: bool,
    },
    /// The label no longer counts and the item returns to the queue.
    Reject,
}

impl ReviewDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewDecision::Accept => "accepted",
            ReviewDecision::Correct { .. } => "corrected",
            ReviewDecision::Reject => "rejected",
        }
    }
}
