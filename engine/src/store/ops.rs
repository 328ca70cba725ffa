//! What operating Arbiter stores beyond evaluations: API tokens (and, with them, the records a
//! platform team needs). A supertrait of [`super::Store`], so `dyn Store` offers it too, kept
//! apart so that each file of SQL stays about one thing.

use super::{StoreResult, User};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A personal API token as its owner and the admins see it: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    pub username: String,
    pub name: String,
    /// The token's first characters (`arb_` and 8 more), to tell tokens apart.
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

impl ApiToken {
    /// Usable at `now`: neither revoked nor expired.
    pub fn is_live(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|expires| expires > now)
    }
}

/// Last-use times are written at most this often per token, so that a busy CI client does not
/// turn every read into a write.
pub const TOKEN_USE_RESOLUTION_MS: i64 = 60_000;

#[async_trait]
pub trait OpsStore: Send + Sync + 'static {
    /// Stores a new token's hash; `NotFound` for an unknown user.
    async fn insert_api_token(
        &self,
        user_id: i64,
        name: &str,
        token_hash: &str,
        prefix: &str,
        expires_at: Option<i64>,
        now: i64,
    ) -> StoreResult<ApiToken>;
    /// The owner of the live token with this hash, noting its use.
    async fn user_for_token(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>>;
    /// Tokens of one user (`Some`) or of everyone (`None`), newest first.
    async fn api_tokens(&self, user_id: Option<i64>) -> StoreResult<Vec<ApiToken>>;
    /// Revokes a live token (only `owner`'s when given); false when there was none to revoke.
    async fn revoke_api_token(
        &self,
        token_id: i64,
        owner: Option<i64>,
        now: i64,
    ) -> StoreResult<bool>;
}
