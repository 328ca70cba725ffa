//! Server-side request context for server functions: the shared state, the session's user and
//! the permission check every server function starts with.

use arbiter_domain::accounts::{Permission, User};
use arbiter_domain::ids::UserId;
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use leptos::prelude::*;
use leptos_axum::ResponseOptions;
use std::sync::Arc;

/// Session key holding the logged-in user's id.
pub const USER_ID_KEY: &str = "user_id";

/// State shared by every request, provided to server functions as context.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    /// Invitations to raters go out through it (alerts are mailed by the queue monitor).
    pub mailer: Arc<arbiter_engine::clients::mail::Mailer>,
}

/// Sets the response status and returns an error whose message the user may read.
pub fn fail(status: u16, message: impl Into<String>) -> ServerFnError {
    if let Some(response) = use_context::<ResponseOptions>() {
        if let Ok(status) = axum::http::StatusCode::from_u16(status) {
            response.set_status(status);
        }
    }
    ServerFnError::ServerError(message.into())
}

/// Maps an engine error to a status and a message safe to show.
pub fn service_error(err: ServiceError) -> ServerFnError {
    fail(err.status_code(), err.to_string())
}

/// Maps a store failure the same way (conflicts and missing rows are the user's to read).
pub fn store_error(err: arbiter_store::StoreError) -> ServerFnError {
    service_error(err.into())
}

fn state() -> Result<AppState, ServerFnError> {
    use_context::<AppState>().ok_or_else(|| fail(500, "server state is missing"))
}

/// The logged-in user, if any.
pub async fn session_user() -> Result<Option<(AppState, User)>, ServerFnError> {
    let state = state()?;
    let session: tower_sessions::Session = leptos_axum::extract()
        .await
        .map_err(|_| fail(500, "session layer is missing"))?;
    let user_id: Option<UserId> = session.get(USER_ID_KEY).await.unwrap_or(None);
    let Some(user_id) = user_id else {
        return Ok(None);
    };
    let user = state.store.get_user(user_id).await.map_err(store_error)?;
    Ok(user.map(|user| (state, user)))
}

/// The first line of every server function: 401 without a session, 403 for the wrong role.
pub async fn require(permission: Permission) -> Result<(AppState, User), ServerFnError> {
    let Some((state, user)) = session_user().await? else {
        return Err(fail(401, "you are not logged in"));
    };
    if !user.active {
        return Err(fail(
            403,
            "this account is deactivated; ask a lead to reactivate it",
        ));
    }
    if !user.role.can(permission) {
        tracing::info!(user = %user.username, role = %user.role, ?permission, "refused");
        return Err(fail(
            403,
            format!("your role ({}) does not allow this", user.role),
        ));
    }
    Ok((state, user))
}
