//! The HTTP application: Leptos pages and server functions, the form routes that need no
//! wasm (login, logout, dataset upload), downloads, sessions, static files, and a health check.
//!
//! - [`forms`]: sign-in, sign-out and uploads that work before the wasm loads;
//! - [`downloads`]: the rater list as CSV and run exports;
//! - [`csrf`]: refusing state-changing requests from other sites;
//! - [`metrics`]: `/metrics` for Prometheus;
//! - [`rest`]: the REST API under `/api/v1` with its OpenAPI description.

pub mod csrf;
pub mod downloads;
pub mod forms;
pub mod metrics;
pub mod progress_events;
pub mod rest;
pub mod uploads;

use arbiter_app::guard::AppState;
use arbiter_app::{shell, App};
use arbiter_engine::accounts::login_throttle::LoginThrottle;
use arbiter_store::Database;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use std::net::SocketAddr;
use std::sync::Arc;
use tower_sessions::cookie::time::Duration as CookieDuration;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, Session, SessionManagerLayer, SessionStore};

/// Largest request body accepted by the upload route; the dataset parser applies the tighter
/// per-file limit and explains it.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Where the built site (`pkg/` with wasm, js and css, plus `public/` files) is served from.
pub fn leptos_options(site_root: &str, addr: SocketAddr) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name("arbiter")
        .site_root(site_root)
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build()
}

/// The body limit in whole megabytes, for error messages.
pub fn max_body_mb() -> usize {
    MAX_BODY_BYTES / (1024 * 1024)
}

/// Where the operator sets a session's absolute lifetime, in hours.
pub const SESSION_MAX_AGE_VARIABLE: &str = "ARBITER_SESSION_MAX_AGE_HOURS";

/// `ARBITER_SESSION_MAX_AGE_HOURS`, or 7 days; a bad value stops the server.
fn session_max_age_hours_from_env() -> anyhow::Result<i64> {
    use arbiter_domain::accounts::DEFAULT_SESSION_MAX_AGE_HOURS;
    match std::env::var(SESSION_MAX_AGE_VARIABLE) {
        Ok(text) if !text.trim().is_empty() => match text.trim().parse::<i64>() {
            Ok(hours) if (1..=24 * 366).contains(&hours) => Ok(hours),
            _ => anyhow::bail!(
                "{SESSION_MAX_AGE_VARIABLE} is a whole number of hours from 1 to 8784, not `{text}`"
            ),
        },
        _ => Ok(DEFAULT_SESSION_MAX_AGE_HOURS),
    }
}

/// Builds the whole router over an opened database.
pub async fn router(
    database: &Database,
    options: LeptosOptions,
    mailer: std::sync::Arc<arbiter_engine::clients::mail::Mailer>,
) -> anyhow::Result<Router> {
    let state = AppState {
        store: database.store(),
        mailer,
        session_max_age_ms: session_max_age_hours_from_env()? * 3_600_000,
    };
    Ok(match database {
        Database::Sqlite(store) => {
            let sessions = tower_sessions_sqlx_store::SqliteStore::new(store.pool().clone());
            sessions.migrate().await?;
            router_with_sessions(state, options, sessions)
        }
        Database::Postgres(store) => {
            let sessions = tower_sessions_sqlx_store::PostgresStore::new(store.pool().clone());
            sessions.migrate().await?;
            router_with_sessions(state, options, sessions)
        }
    })
}

fn router_with_sessions<S>(state: AppState, options: LeptosOptions, sessions: S) -> Router
where
    S: SessionStore + Clone,
{
    let session_layer = SessionManagerLayer::new(sessions)
        .with_name("arbiter_session")
        .with_same_site(SameSite::Lax)
        .with_http_only(true)
        // Plain http on localhost; behind TLS set ARBITER_SECURE_COOKIES=1.
        .with_secure(std::env::var("ARBITER_SECURE_COOKIES").is_ok_and(|v| v == "1"))
        .with_expiry(Expiry::OnInactivity(CookieDuration::hours(12)));
    let routes = generate_route_list(App);
    let context_state = state.clone();
    let login_state = state.clone();
    let fallback_state = state.clone();
    let api_routes = rest::routes(state.clone());
    let form_routes = Router::new()
        .route("/login", post(forms::login))
        .route("/logout", post(forms::logout))
        .route("/raters.csv", get(downloads::raters_csv))
        .route("/pay/ledger.csv", get(downloads::pay_ledger_csv))
        .route("/metrics", get(metrics::metrics))
        .route("/runs/{id}/export/{format}", get(downloads::export_results))
        .route("/runs/{id}/events", get(progress_events::page_events))
        .route("/runs/{id}/labels/{format}", get(downloads::export_labels))
        .route(
            "/datasets/upload",
            // The file is spooled to disk within the operator's limit (see `uploads`).
            post(forms::upload_dataset).layer(DefaultBodyLimit::disable()),
        )
        .with_state(state);
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .leptos_routes_with_context(
            &options,
            routes,
            move || provide_context(context_state.clone()),
            {
                let options = options.clone();
                move || shell(options.clone())
            },
        )
        // The built site's files are served as they are; unknown paths render the app's "not
        // found" page, which needs the same context. (Leptos's own file handler looks for a
        // response status in the reactive context, and a page rendered at the same moment on
        // the same thread could lend it one: a 403 from a refused call once reached the wasm.)
        .fallback_service(
            tower_http::services::ServeDir::new(&*options.site_root)
                .precompressed_gzip()
                .precompressed_br()
                // Directories are not pages: they go to the app's "not found" page too.
                .append_index_html_on_directories(false)
                .call_fallback_on_method_not_allowed(true)
                // The app's page keeps the status it renders with (404 for an unknown page).
                .fallback(axum::handler::Handler::with_state(
                    leptos_axum::file_and_error_handler_with_context(
                        move || provide_context(fallback_state.clone()),
                        shell,
                    ),
                    options.clone(),
                )),
        )
        .with_state(options)
        .merge(form_routes)
        .merge(api_routes)
        .layer(middleware::from_fn_with_state(
            login_state,
            require_login_for_pages,
        ))
        .layer(session_layer)
        .layer(middleware::from_fn(csrf::refuse_cross_site))
        .layer(Extension(csrf::TrustedOrigins(
            csrf::trusted_origins_from_env(),
        )))
        .layer(Extension(Arc::new(
            LoginThrottle::default().with_trusted_proxies(
                arbiter_engine::accounts::login_throttle::trusted_proxies_from_env(),
            ),
        )))
}

/// Paths anyone may fetch: the login page, static assets and machine endpoints. Server
/// functions check their own permissions and answer 401 rather than redirecting.
fn is_public(path: &str) -> bool {
    path == "/login"
        || path == "/health"
        || path == "/metrics"
        || path == "/favicon.ico"
        || path == "/favicon.svg"
        || path.starts_with("/pkg/")
        || path.starts_with("/api/")
        || path.starts_with("/samples/")
}

/// Sends anonymous visitors of any page to the login page instead of a page of errors, and
/// those who must choose their own password to the page where they do.
async fn require_login_for_pages(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let is_page = request.method() == axum::http::Method::GET && !is_public(path);
    if is_page {
        let session = request.extensions().get::<Session>().cloned();
        let user = match session {
            Some(session) => arbiter_app::guard::session_account(&state, &session)
                .await
                .filter(|user| user.active),
            None => None,
        };
        match user {
            None => return Redirect::to("/login").into_response(),
            Some(user)
                if user.must_change_password
                    && path != arbiter_app::guard::CHANGE_PASSWORD_PATH =>
            {
                return Redirect::to(arbiter_app::guard::CHANGE_PASSWORD_PATH).into_response()
            }
            Some(_) => {}
        }
    }
    next.run(request).await
}
