//! Side-by-side preference: send pairs of two runs' answers to raters, and read the report.

use super::{ApiErrorBody, ApiJson, ApiResult, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_domain::ids::RunId;
use arbiter_engine::preferences::{EvalPreferences, PairRequestForm};
use arbiter_store::preferences::PairRequestSummary;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

/// Pairs of run A's and run B's answers to the same cases, for raters to compare.
#[derive(Deserialize, ToSchema)]
pub struct PairsRequest {
    /// Two runs of one eval on different checkpoints.
    run_a: i64,
    run_b: i64,
    /// `differ` (verdicts differ), `unsure` (a judge was unsure) or `random`.
    selection: String,
    /// At most this many pairs (1 to 5,000).
    pairs: u64,
    /// Raters per pair (1 to 5).
    raters: u64,
    #[serde(default)]
    note: String,
    /// A rubric's name: raters also say which output is better on each of its dimensions
    /// (its newest version).
    #[serde(default)]
    rubric: String,
    /// A pairwise judge's id, asked first in both orders: a pair it decides with at least
    /// `judge_threshold` confidence (default 0.8) needs no rater, except a share `audit_rate`
    /// (default 0.1) that raters label anyway.
    #[serde(default)]
    judge: Option<i64>,
    #[serde(default)]
    judge_threshold: Option<f64>,
    #[serde(default)]
    audit_rate: Option<f64>,
}

#[utoipa::path(post, path = "/api/v1/pairs", tag = "preferences",
    request_body = PairsRequest,
    responses((status = 201, description = "The pairs queued for raters, sides drawn at random per pair", content_type = "application/json"),
        (status = 400, body = ApiErrorBody), (status = 403, description = "A run belongs to another team", body = ApiErrorBody), (status = 404, body = ApiErrorBody),
        (status = 409, description = "The runs cannot be compared, or no case qualifies", body = ApiErrorBody)))]
pub async fn send_pairs(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<PairsRequest>,
) -> ApiResult<(StatusCode, Json<PairRequestSummary>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let form = PairRequestForm {
        run_a: RunId(request.run_a),
        run_b: RunId(request.run_b),
        selection: request.selection,
        pairs: request.pairs.to_string(),
        raters: request.raters.to_string(),
        note: request.note,
        rubric: request.rubric,
        judge: request.judge.map(|id| id.to_string()).unwrap_or_default(),
        judge_threshold: request
            .judge_threshold
            .map(|share| share.to_string())
            .unwrap_or_default(),
        audit_rate: request
            .audit_rate
            .map(|share| share.to_string())
            .unwrap_or_default(),
    };
    let summary =
        arbiter_engine::preferences::send_pairs(state.store.as_ref(), &form, &user).await?;
    Ok((StatusCode::CREATED, Json(summary)))
}

#[utoipa::path(get, path = "/api/v1/preferences", tag = "preferences",
    responses((status = 200, description = "Per eval: Bradley–Terry ratings with bootstrap intervals, win rates per checkpoint pair, position bias overall and per rater, and agreement between raters of a pair", content_type = "application/json")))]
pub async fn preferences(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<EvalPreferences>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(
        arbiter_engine::preferences::preference_reports(state.store.as_ref(), None).await?,
    ))
}
