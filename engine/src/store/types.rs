//! Plain records read from and written to the store.

use arbiter_domain::accounts::{PasswordHash, User};
use arbiter_domain::answer::{Generation, Outcome};
use arbiter_domain::checkpoint::Checkpoint;
use arbiter_domain::dataset::DatasetRevision;
use arbiter_domain::expansion::PlannedIdentity;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::manifest::{EvalSummary, Manifest};
use serde::{Deserialize, Serialize};

/// A user with their password hash, for login only.
pub struct UserCredentials {
    pub user: User,
    pub password_hash: PasswordHash,
}

/// The rows a manifest is frozen from.
#[derive(Clone, Debug)]
pub struct ManifestInputs {
    pub eval: EvalSummary,
    pub revision: DatasetRevision,
    pub checkpoint: Checkpoint,
    pub fallback: Option<Checkpoint>,
}

/// A run to create from a frozen manifest.
pub struct NewRun<'a> {
    pub manifest: &'a Manifest,
    pub priority: i64,
    pub team: &'a str,
    pub created_by: Option<i64>,
}

/// An identity to create, possibly already answered from the generation cache.
#[derive(Clone, Debug)]
pub struct NewIdentity {
    pub planned: PlannedIdentity,
    pub cached: Option<CacheHit>,
}

/// A cached answer for a new identity that its deterministic grader decided; answers that
/// need a judge are queued for a worker instead.
#[derive(Clone, Debug)]
pub struct CacheHit {
    pub source_work_item_id: i64,
    pub generation: Generation,
    pub grading: Grading,
}

/// A generation found under its content hash. Its logprobs stay with the source generation
/// (`source_work_item_id`) rather than being copied into every run that reuses it.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedGeneration {
    pub source_work_item_id: i64,
    pub outcome: Outcome,
    pub output: String,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub model_used: Option<String>,
}

impl CachedGeneration {
    /// The cached answer as a generation record (no endpoint was called).
    pub fn to_generation(&self) -> Generation {
        Generation {
            outcome: self.outcome,
            output: self.output.clone(),
            finish_reason: self.finish_reason.clone(),
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            model_used: self.model_used.clone(),
            ..Generation::default()
        }
    }
}

/// A run the scheduler may take work from.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveRun {
    pub id: i64,
    pub priority: i64,
    pub team: String,
    /// The team's fair-share weight (1 unless a lead set another).
    pub team_weight: f64,
}

/// A leased identity with what a worker needs to answer it.
#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub work_item_id: i64,
    pub run_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub input: String,
    pub target: String,
    pub cost: i64,
    /// Times the identity has been claimed, this claim included.
    pub claims: i64,
    pub generation_key: Option<String>,
    pub cached: Option<CachedGeneration>,
}

/// A finished identity on its way to the store.
#[derive(Clone, Debug)]
pub struct FinishedItem {
    pub work_item_id: i64,
    pub generation: Generation,
    pub grading: Grading,
    /// Where to cache the generation (answers only; errors are never cached).
    pub generation_key: Option<String>,
    /// The generation this answer was copied from, when it came from the cache.
    pub cached_from: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordOutcome {
    /// Identities recorded now (the rest already had a result).
    pub inserted: usize,
    /// Runs the recorded identities belong to.
    pub runs: Vec<i64>,
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

/// A run snapshot as stored: the tallies' version it was built from and its packed bytes
/// (see [`arbiter_domain::reports::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub version: String,
    pub identity_hash: String,
    pub data: Vec<u8>,
    pub build_ms: i64,
}

/// One result identity as exported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExportRow {
    pub run_id: i64,
    pub work_item_id: i64,
    pub case_id: String,
    pub repetition: i64,
    pub category: String,
    pub checkpoint: String,
    pub input: String,
    pub target: String,
    /// pass, fail, uncertain, error, or empty before a verdict.
    pub verdict: String,
    pub decided_by: String,
    pub outcome: String,
    pub output: String,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub error_category: Option<String>,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    pub from_cache: bool,
    pub latency_ms: Option<i64>,
    pub attempts: Option<i64>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    /// When the answer was recorded (ms since the Unix epoch).
    pub answered_at: Option<i64>,
}
