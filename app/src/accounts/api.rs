//! Server functions of the Account page: the caller's personal API tokens (every token for
//! those who manage users).

use arbiter_domain::accounts::{ApiToken, User};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::guard::{fail, service_error, session_user, signed_in};

/// A token as its list shows it: the record and whether it is live, revoked or expired (read
/// on the server, so that the page renders without a clock).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenView {
    #[serde(flatten)]
    pub token: ApiToken,
    pub state: String,
}

/// A token just made: its text is shown once and never again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewTokenView {
    pub id: i64,
    pub name: String,
    pub token: String,
}

#[server(endpoint = "api_tokens")]
pub async fn api_tokens() -> Result<Vec<TokenView>, ServerFnError> {
    use arbiter_engine::accounts::api_tokens::visible_tokens;
    let (state, user) = signed_in().await?;
    let now = arbiter_store::now_ms();
    let tokens = visible_tokens(state.store.as_ref(), &user)
        .await
        .map_err(service_error)?;
    Ok(tokens
        .into_iter()
        .map(|token| TokenView {
            state: if token.is_live(now) {
                "live"
            } else if token.revoked_at.is_some() {
                "revoked"
            } else {
                "expired"
            }
            .into(),
            token,
        })
        .collect())
}

/// Makes a token for the caller; `days` is its lifetime ('' for none).
#[server(endpoint = "create_api_token")]
pub async fn create_api_token(name: String, days: String) -> Result<NewTokenView, ServerFnError> {
    let (state, user) = signed_in().await?;
    let lifetime = match days.trim() {
        "" => None,
        text => Some(text.parse::<i64>().map_err(|_| {
            fail(
                400,
                format!("the lifetime is a whole number of days, not `{text}`"),
            )
        })?),
    };
    let (token, plaintext) = arbiter_engine::accounts::api_tokens::create_token(
        state.store.as_ref(),
        &user,
        &name,
        lifetime,
        arbiter_store::now_ms(),
    )
    .await
    .map_err(service_error)?;
    Ok(NewTokenView {
        id: token.id,
        name: token.name,
        token: plaintext,
    })
}

#[server(endpoint = "revoke_api_token")]
pub async fn revoke_api_token(id: i64) -> Result<(), ServerFnError> {
    let (state, user) = signed_in().await?;
    arbiter_engine::accounts::api_tokens::revoke_token(
        state.store.as_ref(),
        &user,
        id,
        arbiter_store::now_ms(),
    )
    .await
    .map_err(service_error)
}

/// The logged-in user, or `None`; never an error for anonymous visitors.
#[server(endpoint = "current_user")]
pub async fn current_user() -> Result<Option<User>, ServerFnError> {
    Ok(session_user()
        .await?
        .map(|(_, user)| user)
        .filter(|user| user.active))
}

/// The caller's own new password (the current one required). Every other session of theirs
/// ends; this one goes on with a fresh id.
#[server(endpoint = "change_password")]
pub async fn change_password(
    current: String,
    new: String,
    confirmation: String,
) -> Result<(), ServerFnError> {
    let Some((state, user)) = session_user().await?.filter(|(_, user)| user.active) else {
        return Err(fail(401, "you are not logged in"));
    };
    let axum::Extension(throttle): axum::Extension<
        std::sync::Arc<arbiter_engine::accounts::login_throttle::LoginThrottle>,
    > = leptos_axum::extract()
        .await
        .map_err(|_| fail(500, "the sign-in throttle is missing"))?;
    let epoch = arbiter_engine::accounts::change_password(
        state.store.as_ref(),
        &throttle,
        &user,
        &current,
        &new,
        &confirmation,
    )
    .await
    .map_err(service_error)?;
    let session: tower_sessions::Session = leptos_axum::extract()
        .await
        .map_err(|_| fail(500, "session layer is missing"))?;
    let changed = User {
        session_epoch: epoch,
        must_change_password: false,
        ..user.clone()
    };
    crate::guard::start_session(&session, &changed, arbiter_store::now_ms())
        .await
        .map_err(|_| fail(500, "could not renew your session"))?;
    tracing::info!(user = %user.username, "password changed");
    Ok(())
}
