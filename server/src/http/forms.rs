//! Routes for plain HTML forms that must work without wasm: login, logout and dataset upload.
//!
//! Browsers get a redirect (with `?error=` on failure); clients that ask for JSON
//! (`Accept: application/json`) get a status code and a JSON body instead.

use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_engine::accounts::login_throttle::LoginThrottle;
use arbiter_engine::error::ServiceError;
use axum::extract::{ConnectInfo, Multipart, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form, Json};
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tower_sessions::Session;

/// The single message for every failed login, so it never reveals whether an account exists.
pub const LOGIN_FAILED: &str = "unknown username or wrong password";

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.contains("application/json"))
}

fn redirect_with_error(path: &str, message: &str) -> Response {
    Redirect::to(&format!("{path}?error={}", urlencoding::encode(message))).into_response()
}

pub(super) fn json_error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

#[derive(Deserialize)]
pub struct LoginForm {
    username: String,
    password: String,
}

pub async fn login(
    State(state): State<AppState>,
    Extension(throttle): Extension<Arc<LoginThrottle>>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    session: Session,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // Every X-Forwarded-For line, in order: proxies may append a line rather than an entry.
    let forwarded_for = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let client = client.map(|Extension(ConnectInfo(address))| {
        arbiter_engine::accounts::login_throttle::client_address(
            address.ip(),
            Some(forwarded_for.as_str()).filter(|text| !text.is_empty()),
            throttle.trusted_proxies(),
        )
    });
    let attempt = match throttle.reserve(&form.username, client, Instant::now()) {
        Ok(attempt) => attempt,
        Err(locked) => {
            tracing::warn!(client = ?client, ?locked, "sign-in refused: too many failed attempts");
            let message = locked.message();
            return if wants_json(&headers) {
                let mut response = json_error(StatusCode::TOO_MANY_REQUESTS, &message);
                let seconds = locked.wait().as_secs().max(1).to_string();
                if let Ok(value) = header::HeaderValue::from_str(&seconds) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                response
            } else {
                redirect_with_error("/login", &message)
            };
        }
    };
    let user = match arbiter_engine::accounts::authenticate(
        state.store.as_ref(),
        &form.username,
        &form.password,
    )
    .await
    {
        Ok(user) => user,
        Err(err) => {
            match &err {
                // Never checked: the attempt does not count.
                ServiceError::Busy(_) | ServiceError::Internal => attempt.not_tried(),
                // The right password of a deactivated account.
                _ => attempt.succeeded(),
            }
            return if wants_json(&headers) {
                let status = StatusCode::from_u16(err.status_code())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                json_error(status, &err.to_string())
            } else {
                redirect_with_error("/login", &err.to_string())
            };
        }
    };
    let Some(user) = user else {
        // The reservation stays: a failure.
        drop(attempt);
        tracing::info!("failed login");
        return if wants_json(&headers) {
            json_error(StatusCode::UNAUTHORIZED, LOGIN_FAILED)
        } else {
            redirect_with_error("/login", LOGIN_FAILED)
        };
    };
    attempt.succeeded();
    // A fresh session id at login defeats session fixation.
    let stored = arbiter_app::guard::start_session(&session, &user, arbiter_store::now_ms()).await;
    if let Err(err) = stored {
        tracing::error!(error = %err, "could not store the session");
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "could not start a session",
        );
    }
    tracing::info!(user = %user.username, "logged in");
    if wants_json(&headers) {
        Json(json!({
            "username": user.username,
            "role": user.role,
            "must_change_password": user.must_change_password,
        }))
        .into_response()
    } else if user.must_change_password {
        Redirect::to(arbiter_app::guard::CHANGE_PASSWORD_PATH).into_response()
    } else {
        Redirect::to("/").into_response()
    }
}

pub async fn logout(session: Session) -> Response {
    if let Err(err) = session.flush().await {
        tracing::error!(error = %err, "could not end the session");
    }
    Redirect::to("/login").into_response()
}

/// The signed-in account of a session that may act: active, its session current, and its
/// own password chosen.
pub async fn session_account(
    state: &AppState,
    session: &Session,
) -> Option<arbiter_domain::accounts::User> {
    arbiter_app::guard::session_account(state, session)
        .await
        .filter(|user| user.active && !user.must_change_password)
}

/// The signed-in account when its role allows `permission`; otherwise the 401 or 403 answer
/// to send (the session routes outside server functions and the REST API).
pub async fn session_allowed(
    state: &AppState,
    session: &Session,
    permission: arbiter_domain::accounts::Permission,
) -> Result<arbiter_domain::accounts::User, Response> {
    let Some(user) = session_account(state, session).await else {
        return Err(json_error(
            StatusCode::UNAUTHORIZED,
            "you are not logged in",
        ));
    };
    if !user.role.can(permission) {
        return Err(json_error(
            StatusCode::FORBIDDEN,
            &format!("your role ({}) does not allow this", user.role),
        ));
    }
    Ok(user)
}

/// A service's refusal or failure as a JSON answer with its status.
pub(super) fn service_error_response(err: &arbiter_engine::error::ServiceError) -> Response {
    json_error(
        StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &err.to_string(),
    )
}

/// Uploads a dataset file as a new revision. Fields: `name` and `file`.
pub async fn upload_dataset(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    multipart: Multipart,
) -> Response {
    let json = wants_json(&headers);
    let fail = |status: StatusCode, message: &str| {
        if json {
            json_error(status, message)
        } else {
            redirect_with_error("/datasets", message)
        }
    };
    let Some(user) = session_account(&state, &session).await else {
        return if json {
            json_error(StatusCode::UNAUTHORIZED, "you are not logged in")
        } else {
            Redirect::to("/login").into_response()
        };
    };
    if !user.role.can(Permission::ManageEvals) {
        return fail(
            StatusCode::FORBIDDEN,
            &format!("your role ({}) cannot upload datasets", user.role),
        );
    }
    let limits = arbiter_engine::catalog::upload_limits();
    let (name, file_name, spooled) = match read_upload(multipart, limits.max_bytes).await {
        Ok(upload) => upload,
        Err((status, message)) => return fail(status, &message),
    };
    match arbiter_engine::catalog::upload_dataset_file(
        state.store.as_ref(),
        &name,
        &file_name,
        spooled.path(),
        Some(user.id),
        limits,
    )
    .await
    {
        Ok(revision) if json => (
            StatusCode::CREATED,
            Json(json!({
                "dataset_id": revision.dataset_id,
                "revision_id": revision.id,
                "content_hash": revision.content_hash,
                "item_count": revision.item_count,
            })),
        )
            .into_response(),
        Ok(revision) => Redirect::to(&format!("/datasets/{}", revision.dataset_id)).into_response(),
        Err(err) => {
            let status = StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::BAD_REQUEST);
            let message = match &err {
                ServiceError::Invalid(_) => format!("{file_name}: {err}"),
                _ => err.to_string(),
            };
            fail(status, &message)
        }
    }
}

/// Reads the `name` and `file` fields of an upload form.
/// Longest `name` field the upload form reads.
const MAX_NAME_FIELD_BYTES: usize = 4096;

async fn read_upload(
    mut multipart: Multipart,
    limit: usize,
) -> Result<(String, String, tempfile::NamedTempFile), (StatusCode, String)> {
    let unreadable = |err: axum::extract::multipart::MultipartError| {
        (
            StatusCode::BAD_REQUEST,
            format!("the upload could not be read: {err}"),
        )
    };
    let mut name = None;
    let mut file = None;
    while let Some(mut field) = multipart.next_field().await.map_err(unreadable)? {
        match field.name() {
            Some("name") => {
                // A name is short; a huge one is refused, never buffered.
                let mut text = Vec::new();
                while let Some(piece) = field.chunk().await.map_err(unreadable)? {
                    text.extend_from_slice(&piece);
                    if text.len() > MAX_NAME_FIELD_BYTES {
                        return Err((
                            StatusCode::BAD_REQUEST,
                            "the dataset name is too long".to_string(),
                        ));
                    }
                }
                name = Some(String::from_utf8_lossy(&text).into_owned());
            }
            Some("file") => {
                let file_name = field.file_name().unwrap_or("upload.jsonl").to_string();
                // Spooled to disk as it arrives: never the whole file in memory.
                let mut spool = super::uploads::Spool::new(limit)?;
                while let Some(piece) = field.chunk().await.map_err(unreadable)? {
                    spool.write(&piece)?;
                }
                file = Some((file_name, spool.finish()?));
            }
            _ => {}
        }
    }
    let name = name.filter(|name| !name.trim().is_empty()).ok_or((
        StatusCode::BAD_REQUEST,
        "a dataset name is required".to_string(),
    ))?;
    let (file_name, spooled) = file.ok_or((
        StatusCode::BAD_REQUEST,
        "choose a file to upload".to_string(),
    ))?;
    Ok((name, file_name, spooled))
}
