//! Server-side request context for server functions: the shared state, the session's user and
//! the permission check every server function starts with.

use arbiter_domain::accounts::{Permission, SessionEnded, SessionStamp, User};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use leptos::prelude::*;
use leptos_axum::ResponseOptions;
use std::sync::Arc;

/// Session key holding the sign-in's [`SessionStamp`]: who, at which session epoch, since when.
pub const SESSION_KEY: &str = "signed_in";

/// Where someone whose password was chosen by another must choose their own.
pub const CHANGE_PASSWORD_PATH: &str = "/account/password";

/// State shared by every request, provided to server functions as context.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    /// Invitations to raters go out through it (alerts are mailed by the queue monitor).
    pub mailer: Arc<arbiter_engine::clients::mail::Mailer>,
    /// A session's absolute lifetime from sign-in, in milliseconds (the idle one is the
    /// session cookie's).
    pub session_max_age_ms: i64,
}

/// Starts a signed-in session for `user`: a fresh session id (against session fixation) and
/// the stamp that later requests check.
pub async fn start_session(
    session: &tower_sessions::Session,
    user: &User,
    now: i64,
) -> Result<(), tower_sessions::session::Error> {
    session.cycle_id().await?;
    session
        .insert(SESSION_KEY, SessionStamp::new(user, now))
        .await
}

/// The account a session signs in, if it still does: the stamp's user, at the same
/// session epoch (no password change since) and within the absolute lifetime. A session that
/// no longer does is ended here.
pub async fn session_account(state: &AppState, session: &tower_sessions::Session) -> Option<User> {
    let stamp: SessionStamp = session.get(SESSION_KEY).await.ok().flatten()?;
    let user = state.store.get_user(stamp.user_id).await.ok().flatten();
    let ended = match &user {
        Some(user) => stamp.check(user, arbiter_store::now_ms(), state.session_max_age_ms),
        None => Err(SessionEnded::Gone),
    };
    match ended {
        Ok(()) => user,
        Err(why) => {
            tracing::info!(user = stamp.user_id.get(), ?why, "session ended");
            if let Err(err) = session.flush().await {
                tracing::warn!(error = %err, "could not end a session");
            }
            None
        }
    }
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

/// The logged-in user, if any (a session that no longer signs in counts for nothing).
pub async fn session_user() -> Result<Option<(AppState, User)>, ServerFnError> {
    let state = state()?;
    let session: tower_sessions::Session = leptos_axum::extract()
        .await
        .map_err(|_| fail(500, "session layer is missing"))?;
    Ok(session_account(&state, &session)
        .await
        .map(|user| (state, user)))
}

/// A signed-in user who may act: 401 without a session; 403 until someone whose password was
/// chosen by another has chosen their own.
pub async fn signed_in() -> Result<(AppState, User), ServerFnError> {
    let Some((state, user)) = session_user().await? else {
        return Err(fail(401, "you are not logged in"));
    };
    if !user.active {
        return Err(fail(
            403,
            "this account is deactivated; ask a lead to reactivate it",
        ));
    }
    if user.must_change_password {
        return Err(fail(
            403,
            format!("choose your own password first ({CHANGE_PASSWORD_PATH})"),
        ));
    }
    Ok((state, user))
}

/// The first line of every server function: 401 without a session, 403 for the wrong role.
pub async fn require(permission: Permission) -> Result<(AppState, User), ServerFnError> {
    let (state, user) = signed_in().await?;
    if !user.role.can(permission) {
        tracing::info!(user = %user.username, role = %user.role, ?permission, "refused");
        return Err(fail(
            403,
            format!("your role ({}) does not allow this", user.role),
        ));
    }
    Ok((state, user))
}
