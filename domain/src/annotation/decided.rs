//! An item's human outcome as the `label.completed` webhook sends it: the item, what the raters
//! (or a reviewer) decided, and every label behind it. Sent each time the outcome is decided:
//! when the last label comes in, and again when a reviewer settles a split or a correction or
//! spot check changes it; receivers keep the latest per `task_id`.

use serde::Serialize;

/// One decided item (or pair).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecidedItem {
    pub task_id: i64,
    /// `escalation` (a judge was unsure), `audit` (sampled from confident verdicts), `pair`, or
    /// `pushed` (one output pushed from outside; a pushed pair is a `pair`).
    pub kind: String,
    /// When this outcome was decided (ms since the epoch).
    pub decided_at: i64,
    /// The item's eval, run, case and checkpoint; for a pair, its left side's. `None` for an
    /// item pushed from outside, which has no run (see `pushed`).
    pub eval: Option<String>,
    pub run_id: Option<i64>,
    pub work_item_id: Option<i64>,
    pub case_id: Option<String>,
    pub repetition: Option<i64>,
    pub turn: Option<i64>,
    pub checkpoint: Option<String>,
    /// `pass` or `fail` as the humans decided it; `None` for a pair.
    pub verdict: Option<String>,
    /// A rubric item's value per dimension, or a pair's `{"choice": …}` (the raters', or a
    /// reviewer's correction; a pair whose raters split is sent once a reviewer settles it).
    pub consensus: Option<serde_json::Value>,
    pub rubric: Option<String>,
    pub rubric_version: Option<i64>,
    /// A pair of two runs' answers: its sides, as raters saw them (left as A, right as B).
    pub pair: Option<DecidedPair>,
    /// An item pushed from outside (`POST /api/v1/annotation/items`): its queue, content hash
    /// and the pusher's metadata.
    pub pushed: Option<PushedOrigin>,
    /// Every label given on the item, in the order given (rejected ones too, marked).
    pub labels: Vec<DecidedLabel>,
}

/// A pair's sides: a choice `a` prefers the left one, `b` the right.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecidedPair {
    pub left: PairSide,
    pub right: PairSide,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairSide {
    pub run_id: i64,
    pub work_item_id: i64,
    pub checkpoint: String,
}

/// Where a pushed item came from, and for a pushed pair which output the raters preferred in
/// the order pushed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PushedOrigin {
    pub queue: String,
    pub content_hash: String,
    pub metadata: serde_json::Value,
    /// A pair: whether its first output was shown on the left (as A).
    pub first_on_left: Option<bool>,
    /// A pair's preferred output in the order pushed (0 or 1); `None` for a tie, both bad, a
    /// split or a single output.
    pub preferred_output: Option<usize>,
}

/// One rater's label as sent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecidedLabel {
    pub rater: String,
    /// `pass` or `fail` on a single item.
    pub verdict: Option<String>,
    /// `a`, `b`, `tie` or `both_bad` on a pair.
    pub choice: Option<String>,
    /// The rubric's answers by dimension key; on a pair that asks a rubric, the choice per
    /// dimension.
    pub answers: Option<serde_json::Value>,
    pub rationale: String,
    /// Time on task: from the claim to the submission.
    pub duration_ms: Option<i64>,
    /// `standing`, or `rejected` by a reviewer.
    pub state: String,
    pub guideline_version: Option<i64>,
    pub labelled_at: i64,
}
