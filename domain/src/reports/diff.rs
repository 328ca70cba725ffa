//! One side (baseline or candidate) of a per-prompt diff row: texts, outcome, grades and labels.

use crate::ids::IdentityId;
use serde::{Deserialize, Serialize};

/// One side (baseline or candidate) of a per-prompt diff row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffSide {
    pub identity_id: IdentityId,
    pub case_id: String,
    pub repetition: i64,
    /// The turn of a conversation (from 1; 1 for items that are not conversations).
    pub turn: i64,
    pub category: String,
    pub verdict: String,
    pub decided_by: String,
    pub input: String,
    pub target: String,
    pub output: String,
    pub outcome: String,
    pub error: Option<String>,
    pub model_used: Option<String>,
    pub latency_ms: Option<i64>,
    /// Where this answer's logprobs are stored (the source generation for cache hits).
    pub logprobs_id: Option<IdentityId>,
    /// Grader and judge grades, oldest first.
    pub grades: Vec<DiffGrade>,
    /// Human labels: "rater: verdict — rationale".
    pub labels: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffGrade {
    pub stage: String,
    pub grader: String,
    pub verdict: String,
    pub reason: String,
    pub confidence: Option<f64>,
}
