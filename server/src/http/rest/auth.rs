//! Who is calling: the user behind the request's API token.

use super::ApiError;
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::{Permission, User};
use arbiter_engine::accounts::api_tokens;
use arbiter_store::now_ms;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};

/// The token's owner. Extracting it answers 401 when the token is missing or not live.
pub struct ApiUser(pub User);

impl ApiUser {
    /// 403 unless the owner's role allows `permission`.
    pub fn require(self, permission: Permission) -> Result<User, ApiError> {
        if self.0.role.can(permission) {
            Ok(self.0)
        } else {
            tracing::info!(user = %self.0.username, role = %self.0.role, ?permission, "API call refused");
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("your role ({}) does not allow this", self.0.role),
            ))
        }
    }
}

impl FromRequestParts<AppState> for ApiUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(api_tokens::bearer_token)
            .unwrap_or_default();
        let user = api_tokens::authenticate(state.store.as_ref(), presented, now_ms()).await?;
        Ok(ApiUser(user))
    }
}
