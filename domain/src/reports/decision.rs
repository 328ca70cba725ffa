//! Promotion decisions: a researcher's verdict on a candidate checkpoint, made on two complete
//! reports and kept with the comparison as it stood.

use crate::ids::{RunId, UserId};
use serde::{Deserialize, Serialize};

/// A researcher's decision on a candidate checkpoint, made on two complete reports.
#[derive(Clone, Debug)]
pub struct NewPromotionDecision {
    pub baseline_run_id: RunId,
    pub candidate_run_id: RunId,
    pub promote: bool,
    pub note: String,
    /// The comparison as it stood when decided (JSON).
    pub summary_json: String,
    pub decided_by: Option<UserId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromotionDecisionRecord {
    pub id: i64,
    pub baseline_run_id: RunId,
    pub candidate_run_id: RunId,
    pub baseline_checkpoint: String,
    pub candidate_checkpoint: String,
    /// `promote` or `reject`.
    pub decision: String,
    pub note: String,
    pub summary_json: String,
    pub decided_by: Option<String>,
    pub decided_at: i64,
}
