//! The REST API (`/api/v1/…`): what the UI does for researchers — datasets, checkpoints, evals,
//! runs, reports, comparisons — for scripts, CI and training jobs, authenticated by personal
//! API tokens (`Authorization: Bearer arb_…`), and described by the OpenAPI document at
//! `/api/v1/openapi.json`.
//!
//! Handlers only translate HTTP to the engine's use cases and back; validation and rules live in
//! the engine, shared with the UI's server functions.

mod annotation;
mod auth;
mod openapi;
mod pay;
mod preferences;
mod resources;
mod runs;

pub use auth::ApiUser;
pub use openapi::ApiDoc;
pub use runs::{ComparisonResponse, Finding, LaunchRequest, LaunchResponse, RunReport};

use arbiter_app::guard::AppState;
use arbiter_engine::error::ServiceError;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Serialize, ToSchema)]
pub struct ApiErrorBody {
    /// What went wrong, in words meant for the person reading the CI log.
    pub error: String,
}

/// An error answer: a status and a message safe to show.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> ApiError {
        ApiError::new(
            StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            err.to_string(),
        )
    }
}

impl From<arbiter_store::StoreError> for ApiError {
    fn from(err: arbiter_store::StoreError) -> ApiError {
        ServiceError::from(err).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ApiErrorBody {
            error: self.message,
        });
        if self.status == StatusCode::UNAUTHORIZED {
            (
                self.status,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"arbiter\"")],
                body,
            )
                .into_response()
        } else {
            (self.status, body).into_response()
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A JSON body whose refusal is an [`ApiError`] (axum's own is plain text).
#[derive(axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// Path parameters, refused as an [`ApiError`].
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// Query parameters, refused as an [`ApiError`].
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> ApiError {
        ApiError::new(
            rejection.status(),
            format!("the JSON body was refused: {}", rejection.body_text()),
        )
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

/// The API's routes, to be merged into the app's router.
pub fn routes(state: AppState) -> Router {
    let api = Router::new()
        .route("/openapi.json", get(openapi::document))
        .route("/me", get(resources::me))
        .route(
            "/datasets",
            get(resources::list_datasets)
                .post(resources::upload_dataset)
                // The upload is spooled to disk within the operator's limit (see `uploads`).
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/datasets/{id}", get(resources::get_dataset))
        .route(
            "/checkpoints",
            get(resources::list_checkpoints).post(resources::register_checkpoint),
        )
        .route(
            "/checkpoints/{id}/retract",
            post(resources::retract_checkpoint),
        )
        .route("/launches", get(resources::list_launches))
        .route("/serving/plan", post(resources::plan_serving))
        .route("/endpoints", get(resources::list_endpoints))
        .route(
            "/endpoints/{id}",
            axum::routing::patch(resources::edit_endpoint),
        )
        .route(
            "/evals",
            get(resources::list_evals).post(resources::define_eval),
        )
        .route("/evals/{id}", get(resources::get_eval))
        .route("/evals/{id}/preview", get(resources::preview_eval))
        .route(
            "/suites",
            get(resources::list_suites).post(resources::create_suite),
        )
        .route(
            "/suites/{id}",
            axum::routing::delete(resources::delete_suite),
        )
        .route(
            "/webhooks",
            get(resources::list_webhooks).post(resources::create_webhook),
        )
        .route("/webhooks/deliveries", get(resources::list_deliveries))
        .route(
            "/webhooks/{id}",
            axum::routing::delete(resources::delete_webhook),
        )
        .route(
            "/checkpoints/{id}/suites/{suite}",
            post(resources::run_suite),
        )
        .route("/runs", get(runs::list_runs).post(runs::launch_run))
        .route("/runs/{id}", get(runs::get_run))
        .route("/runs/{id}/events", get(runs::run_events))
        .route("/runs/{id}/report", get(runs::run_report))
        .route("/runs/{id}/agreement", get(runs::run_agreement))
        .route("/runs/{id}/{action}", post(runs::change_run_state))
        .route("/compare", get(runs::compare))
        .route("/pairs", post(preferences::send_pairs))
        .route("/preferences", get(preferences::preferences))
        .route("/pay/ledger", get(pay::ledger))
        .route(
            "/annotation/items",
            get(annotation::pushed_items)
                .post(annotation::push_items)
                .layer(DefaultBodyLimit::max(annotation::MAX_PUSH_BODY_BYTES)),
        )
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no such API route; the routes are listed at /api/v1/openapi.json",
            )
        })
        .with_state(state);
    Router::new().nest("/api/v1", api)
}
