//! A checkpoint as Arbiter knows it: the model behind an OpenAI-compatible endpoint, its
//! replicas, what it costs and how much it may be asked at once.

use crate::accounts::User;
use crate::ids::{CheckpointId, UserId};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default)]
pub struct NewCheckpoint {
    pub name: String,
    /// Already normalised by the engine's `clients::model::normalise_base_url`, like the replicas.
    pub base_url: String,
    pub model: String,
    /// Further endpoints serving the same checkpoint (load-balanced).
    pub replica_urls: Vec<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    /// Name of a registered checkpoint to try once when retries run out.
    pub fallback_checkpoint: Option<String>,
    /// Requests in flight from all workers together, for this checkpoint's endpoints.
    pub max_in_flight: Option<i64>,
    /// USD per million prompt and completion tokens for this checkpoint's model.
    pub prices: TokenPrices,
    /// The training run it comes from ('' for none) and its step there, for trends.
    pub training_run: String,
    pub training_step: Option<i64>,
    /// `env:NAME` or a sealed key (see the engine's `secrets`) for its endpoints; `None` keeps
    /// what they have.
    pub api_key_ref: Option<String>,
    /// Served by a launcher: the store reserves its replicas' ports and requests its first
    /// launch, and `base_url` and `replica_urls` are ignored.
    pub serving: Option<crate::serving::Serving>,
}

/// What an endpoint charges, in USD per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenPrices {
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
}

impl TokenPrices {
    /// The cost of one call, when the endpoint reported its token usage.
    pub fn cost(&self, prompt_tokens: Option<i64>, completion_tokens: Option<i64>) -> Option<f64> {
        if prompt_tokens.is_none() && completion_tokens.is_none() {
            return None;
        }
        let tokens = |count: Option<i64>| count.unwrap_or(0).max(0) as f64;
        Some(
            (tokens(prompt_tokens) * self.input_usd_per_mtok
                + tokens(completion_tokens) * self.output_usd_per_mtok)
                / 1_000_000.0,
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpoint {
    pub id: CheckpointId,
    pub name: String,
    pub base_url: String,
    pub model: String,
    pub replica_urls: Vec<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    pub fallback_checkpoint_id: Option<CheckpointId>,
    pub max_in_flight: i64,
    pub prices: TokenPrices,
    pub training_run: String,
    pub training_step: Option<i64>,
    pub created_at: i64,
    /// The team of whoever registered it (`None`: registered by the operator or a watched
    /// directory): its members change it, leads and admins override.
    pub owner_team: Option<String>,
    /// How workers authenticate to its endpoint (`env:NAME` or `sealed:v1:…`), for the
    /// server's own use: never serialised to a browser or an API client.
    #[serde(skip)]
    #[schema(ignore)]
    pub api_key_ref: Option<String>,
    /// Set once the checkpoint is rolled back: its runs are cancelled, it leaves trends and
    /// baselines, and its results stay readable, marked retracted.
    #[serde(default)]
    pub retraction: Option<Retraction>,
}

/// Why and when a checkpoint was retracted, and by whom.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Retraction {
    pub at: i64,
    pub reason: String,
    /// The username of whoever retracted it (`None` once that account is gone).
    pub by: Option<String>,
}

/// The most characters a retraction's reason may have.
pub const RETRACTION_REASON_MAX: usize = 2000;

/// A retraction's reason as given, trimmed; refused when empty or too long.
pub fn retraction_reason(reason: &str) -> Result<String, String> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err("say why the checkpoint is retracted: the reason is shown on its runs".into());
    }
    let length = reason.chars().count();
    if length > RETRACTION_REASON_MAX {
        return Err(format!(
            "the reason has {length} characters; at most {RETRACTION_REASON_MAX} are kept"
        ));
    }
    Ok(reason.to_string())
}

impl Checkpoint {
    /// Whether `user` may change this checkpoint (its prices): a member of the team that
    /// registered it, or a lead or admin.
    pub fn changeable_by(&self, user: &User) -> bool {
        match &self.owner_team {
            Some(team) => user.acts_for_team(team),
            None => user.oversees_every_team(),
        }
    }
}

/// An OpenAI-compatible server as the Checkpoints page lists it: shared by every checkpoint
/// registered on its URL, so its limits change only by an explicit edit of its owner or a lead.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Endpoint {
    pub id: i64,
    pub base_url: String,
    pub max_in_flight: i64,
    /// Whoever first registered a checkpoint on it (`None`: the operator).
    pub owner_id: Option<UserId>,
    pub owner: Option<String>,
    /// Checkpoints served by it, as their endpoint or as a replica.
    pub checkpoints: i64,
}

impl Endpoint {
    /// Its owner, leads and admins may change its limits; nobody else, because every team's
    /// runs on it share them.
    pub fn editable_by(&self, user: &User) -> bool {
        user.oversees_every_team() || self.owner_id == Some(user.id)
    }
}

/// How much one endpoint may be asked at once, by all workers together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointLimits {
    pub max_in_flight: i64,
    /// Prompt + completion tokens in flight; `None` for no budget.
    pub token_budget: Option<i64>,
}

impl Default for EndpointLimits {
    fn default() -> EndpointLimits {
        EndpointLimits {
            max_in_flight: 256,
            token_budget: None,
        }
    }
}

/// An operator's endpoint key (`ARBITER_ENDPOINT_KEY_…`) and the hosts it may be sent to, as
/// the Checkpoints page shows it to leads and admins. The key itself never leaves the
/// environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyBinding {
    pub variable: String,
    /// Host or host:port entries; empty when the key is bound to nothing (and so never sent).
    pub hosts: String,
    /// "the operator" (its `…_HOSTS` variable, which wins), "a lead", or "" when unbound.
    pub set_by: String,
    /// Whether a lead or admin may change it here (not when the operator's variable is set).
    pub editable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retraction_needs_a_reason_of_bounded_length() {
        assert_eq!(
            retraction_reason("  tokenizer lost its chat template \n"),
            Ok("tokenizer lost its chat template".into())
        );
        assert!(retraction_reason(" \n").unwrap_err().contains("say why"));
        let long = "x".repeat(RETRACTION_REASON_MAX + 1);
        assert!(retraction_reason(&long)
            .unwrap_err()
            .contains("2001 characters"));
        assert!(retraction_reason(&"é".repeat(RETRACTION_REASON_MAX)).is_ok());
    }
}
