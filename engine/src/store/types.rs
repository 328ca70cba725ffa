//! Plain records read from and written to the store.

use crate::auth::{PasswordHash, Role};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub role: Role,
}

/// A user with their password hash, for login only.
pub struct UserCredentials {
    pub user: User,
    pub password_hash: PasswordHash,
}

#[derive(Clone, Debug)]
pub struct NewCheckpoint {
    pub name: String,
    /// Already normalised by `model_client::normalise_base_url`.
    pub base_url: String,
    pub model: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub id: i64,
    pub name: String,
    pub base_url: String,
    pub model: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetRevision {
    pub id: i64,
    pub dataset_id: i64,
    pub content_hash: String,
    pub item_count: i64,
    pub source_name: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetSummary {
    pub id: i64,
    pub name: String,
    pub revision_count: i64,
    /// The newest revision, which new evals and runs use.
    pub latest_revision: Option<DatasetRevision>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    pub id: i64,
    pub name: String,
    pub dataset_id: i64,
    pub dataset_name: String,
    pub prompt_template: String,
    pub grader: String,
    pub max_tokens: i64,
    pub temperature: f64,
    pub repetitions: i64,
    pub seed: i64,
    pub created_at: i64,
}

/// The rows a manifest is frozen from.
#[derive(Clone, Debug)]
pub struct ManifestInputs {
    pub eval: EvalSummary,
    pub revision: DatasetRevision,
    pub checkpoint: Checkpoint,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedRun {
    pub run_id: i64,
    /// False when the manifest had been launched before and this is that run.
    pub created: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: i64,
    pub eval_id: i64,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub status: String,
    pub expected_count: i64,
    pub done_count: i64,
    pub created_at: i64,
}

/// Live counts for a run's page. `passed + failed + uncertain + errors == done`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunProgress {
    pub id: i64,
    pub eval_id: i64,
    pub eval_name: String,
    pub checkpoint_name: String,
    pub endpoint_url: String,
    pub manifest_hash: String,
    pub dataset_revision: String,
    pub status: String,
    pub expected: i64,
    pub done: i64,
    pub in_flight: i64,
    pub passed: i64,
    pub failed: i64,
    pub uncertain: i64,
    pub errors: i64,
    /// One representative endpoint error, so a broken endpoint is explained on the page.
    pub last_error: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

/// One result identity with its answer and current verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub case_id: String,
    pub repetition: i64,
    pub category: String,
    pub input: String,
    pub target: String,
    pub output: String,
    pub outcome: String,
    pub verdict: String,
    pub grade_reason: String,
    pub error: Option<String>,
}

/// What a worker needs to run one result identity.
#[derive(Clone, Debug)]
pub struct Job {
    pub work_item_id: i64,
    pub run_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub input: String,
    pub target: String,
    pub prompt_template: String,
    pub grader: String,
    pub max_tokens: i64,
    pub temperature: f64,
    pub seed: i64,
    pub base_url: String,
    pub model: String,
}

/// An item as an annotator sees it: blind to the model and the grader's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnotationTask {
    pub task_id: i64,
    pub input: String,
    pub target: String,
    pub output: String,
    pub lease_expires_at: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueCounts {
    pub open: i64,
    pub leased: i64,
    pub done: i64,
}
