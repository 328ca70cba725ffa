//! Runs and their results: launch, follow, pause or cancel, read the report, compare.

use super::{ApiError, ApiErrorBody, ApiJson, ApiPath, ApiQuery, ApiResult, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_domain::ids::{CheckpointId, EvalId, RunId};
use arbiter_domain::reports::{Completeness, Report};
use arbiter_domain::run::RunStatus;
use arbiter_domain::run::{LaunchedRun, RunProgress, RunSummary};
use arbiter_domain::stats::correction::Correction;
use arbiter_engine::reports::compare::CheckpointComparison;
use arbiter_store::Store;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[utoipa::path(get, path = "/api/v1/runs", tag = "runs",
    responses((status = 200, body = Vec<RunSummary>)))]
pub async fn list_runs(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<RunSummary>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(state.store.list_runs().await?))
}

/// What to run: an eval against a checkpoint, each named by id or by name.
#[derive(Deserialize, Serialize, ToSchema, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct LaunchRequest {
    #[serde(default)]
    pub eval_id: Option<EvalId>,
    /// The eval's name, instead of `eval_id`.
    #[serde(default)]
    pub eval: Option<String>,
    #[serde(default)]
    pub checkpoint_id: Option<CheckpointId>,
    /// The checkpoint's name, instead of `checkpoint_id`.
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// `promotion`, `scheduled` (the default) or `ablation`.
    #[serde(default)]
    pub priority: Option<String>,
}

/// The run a launch made, or found when the same manifest had been launched before.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct LaunchResponse {
    pub run_id: RunId,
    /// False when this manifest had already been launched: this is that run.
    pub created: bool,
    pub status: RunStatus,
}

impl From<LaunchedRun> for LaunchResponse {
    fn from(run: LaunchedRun) -> LaunchResponse {
        LaunchResponse {
            run_id: run.run_id,
            created: run.created,
            status: run.status,
        }
    }
}

/// Resolves an id-or-name pair against a list of (id, name).
fn pick<Id: Copy>(
    what: &str,
    id: Option<Id>,
    name: Option<&str>,
    known: impl Iterator<Item = (Id, String)>,
) -> ApiResult<Id> {
    match (id, name.map(str::trim)) {
        (Some(id), None) => Ok(id),
        (None, Some(name)) if !name.is_empty() => known
            .into_iter()
            .find(|(_, known_name)| known_name == name)
            .map(|(id, _)| id)
            .ok_or_else(|| {
                ApiError::new(StatusCode::NOT_FOUND, format!("no {what} named `{name}`"))
            }),
        (Some(_), Some(_)) => Err(ApiError::bad_request(format!(
            "name the {what} by `{what}_id` or by `{what}`, not both"
        ))),
        _ => Err(ApiError::bad_request(format!(
            "say which {what}: `{what}_id` or `{what}` (its name)"
        ))),
    }
}

pub(crate) async fn resolve_launch(
    store: &dyn Store,
    request: &LaunchRequest,
) -> ApiResult<(EvalId, CheckpointId)> {
    let eval_id = match request.eval_id {
        Some(id) if request.eval.is_none() => id,
        _ => pick(
            "eval",
            request.eval_id,
            request.eval.as_deref(),
            store
                .list_evals()
                .await?
                .into_iter()
                .map(|e| (e.id, e.name)),
        )?,
    };
    let checkpoint_id = match request.checkpoint_id {
        Some(id) if request.checkpoint.is_none() => id,
        _ => pick(
            "checkpoint",
            request.checkpoint_id,
            request.checkpoint.as_deref(),
            store
                .list_checkpoints()
                .await?
                .into_iter()
                .map(|c| (c.id, c.name)),
        )?,
    };
    Ok((eval_id, checkpoint_id))
}

#[utoipa::path(post, path = "/api/v1/runs", tag = "runs",
    request_body = LaunchRequest,
    responses(
        (status = 201, description = "A new run", body = LaunchResponse),
        (status = 200, description = "The run of an identical manifest launched before", body = LaunchResponse),
        (status = 400, body = ApiErrorBody), (status = 404, body = ApiErrorBody)))]
pub async fn launch_run(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<LaunchRequest>,
) -> ApiResult<(StatusCode, Json<LaunchResponse>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let (eval_id, checkpoint_id) = resolve_launch(state.store.as_ref(), &request).await?;
    let priority =
        arbiter_engine::runs::parse_priority(request.priority.as_deref().unwrap_or_default())?;
    let launched = arbiter_engine::runs::launch_run(
        state.store.as_ref(),
        eval_id,
        checkpoint_id,
        priority,
        &user.team,
        Some(user.id),
    )
    .await?;
    let status = if launched.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(launched.into())))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs",
    params(("id" = i64, Path, description = "Run id")),
    responses((status = 200, description = "Live progress", body = RunProgress), (status = 404, body = ApiErrorBody)))]
pub async fn get_run(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<Json<RunProgress>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(
        arbiter_engine::runs::run_progress(state.store.as_ref(), id).await?,
    ))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/events", tag = "runs",
    params(("id" = i64, Path, description = "Run id")),
    responses(
        (status = 200, content_type = "text/event-stream",
         description = "Server-sent events: a `progress` event (the run's progress as JSON, as `GET /api/v1/runs/{id}` gives it) at once and whenever the run moves, read from its counters; the stream ends after the event that shows the run completed or cancelled"),
        (status = 404, body = ApiErrorBody)))]
pub async fn run_events(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<impl axum::response::IntoResponse> {
    caller.require(Permission::ViewResults)?;
    // An unknown run is refused before the stream starts.
    let first = arbiter_engine::runs::run_progress(state.store.as_ref(), id).await?;
    Ok(crate::http::progress_events::progress_events(
        state.store.clone(),
        first,
    ))
}

/// A run's heading and its report.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct RunReport {
    pub run: RunProgress,
    pub report: Report,
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/report", tag = "runs",
    params(("id" = i64, Path, description = "Run id")),
    responses((status = 200, description = "COMPLETE, PARTIAL (with counts and reasons) or INVALID", body = RunReport), (status = 404, body = ApiErrorBody)))]
pub async fn run_report(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<Json<RunReport>> {
    caller.require(Permission::ViewResults)?;
    let (run, report) = arbiter_engine::reports::runs::run_report(state.store.as_ref(), id).await?;
    Ok(Json(RunReport { run, report }))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/agreement", tag = "runs",
    params(("id" = i64, Path, description = "Run id")),
    responses((status = 200, description = "Agreement between the run's raters: on the verdict, then on each dimension of the run's rubric at its level of measurement (Krippendorff's alpha with a bootstrap interval, Fleiss' kappa for nominal dimensions, Cohen's kappa per rater pair)", content_type = "application/json"), (status = 404, body = ApiErrorBody)))]
pub async fn run_agreement(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<Json<Vec<arbiter_engine::annotation::agreement::AgreementReport>>> {
    caller.require(Permission::ViewResults)?;
    // A run that does not exist is a 404, not an empty report.
    arbiter_engine::runs::run_progress(state.store.as_ref(), id).await?;
    Ok(Json(
        arbiter_engine::annotation::agreement::run_agreement(state.store.as_ref(), id).await?,
    ))
}

#[utoipa::path(post, path = "/api/v1/runs/{id}/{action}", tag = "runs",
    params(("id" = i64, Path, description = "Run id"), ("action" = String, Path, description = "`pause`, `resume` or `cancel`")),
    responses((status = 204, description = "Done"), (status = 400, body = ApiErrorBody), (status = 403, description = "The run belongs to another team", body = ApiErrorBody), (status = 409, description = "Not possible in the run's state", body = ApiErrorBody)))]
pub async fn change_run_state(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath((id, action)): ApiPath<(RunId, String)>,
) -> ApiResult<StatusCode> {
    let user = caller.require(Permission::ManageEvals)?;
    arbiter_engine::runs::change_run_state(state.store.as_ref(), &user, id, &action).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
pub struct CompareParams {
    /// The baseline run.
    baseline: RunId,
    /// Candidate runs of the same eval, separated by commas.
    candidates: String,
    /// `holm` (the default), `bh` or `none`.
    #[serde(default)]
    correction: Option<String>,
}

/// One category where a candidate is significantly different from the baseline.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq)]
pub struct Finding {
    pub candidate_run: RunId,
    pub category: String,
    /// Candidate minus baseline pass rate on the items graded in both.
    pub delta: Option<f64>,
    /// After the correction across every test of the comparison.
    pub adjusted_p: f64,
}

/// The comparison, and its verdict for CI: `regressions` lists every significantly worse
/// category (overall included, as `all`) after correction.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ComparisonResponse {
    pub comparison: CheckpointComparison,
    pub regressions: Vec<Finding>,
    pub improvements: Vec<Finding>,
    /// True when both reports of every pair are COMPLETE: only then can a result gate a
    /// promotion.
    pub all_complete: bool,
}

pub(crate) fn findings(comparison: &CheckpointComparison) -> (Vec<Finding>, Vec<Finding>) {
    let mut regressions = Vec::new();
    let mut improvements = Vec::new();
    for candidate in &comparison.candidates {
        let paired = &candidate.comparison;
        for category in std::iter::once(&paired.overall).chain(&paired.categories) {
            let finding = || Finding {
                candidate_run: candidate.run.id,
                category: category.category.clone(),
                delta: category.delta,
                adjusted_p: category.adjusted_p,
            };
            if category.is_regression() {
                regressions.push(finding());
            } else if category.is_improvement() {
                improvements.push(finding());
            }
        }
    }
    (regressions, improvements)
}

#[utoipa::path(get, path = "/api/v1/compare", tag = "runs",
    params(CompareParams),
    responses((status = 200, body = ComparisonResponse), (status = 400, description = "Runs of different evals, or not paired on the same identities", body = ApiErrorBody)))]
pub async fn compare(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiQuery(params): ApiQuery<CompareParams>,
) -> ApiResult<Json<ComparisonResponse>> {
    caller.require(Permission::ViewResults)?;
    let correction = match params.correction.as_deref().map(str::trim) {
        None | Some("") => Correction::default(),
        Some(name) => Correction::parse(name).ok_or_else(|| {
            ApiError::bad_request(format!("unknown correction `{name}`: use holm, bh or none"))
        })?,
    };
    let candidates = params
        .candidates
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| {
            id.parse::<RunId>()
                .map_err(|_| ApiError::bad_request(format!("`{id}` is not a run id")))
        })
        .collect::<ApiResult<Vec<RunId>>>()?;
    let comparison = arbiter_engine::reports::compare::compare_checkpoints(
        state.store.as_ref(),
        params.baseline,
        &candidates,
        correction,
    )
    .await?;
    let (regressions, improvements) = findings(&comparison);
    let complete = |report: &Report| report.completeness == Completeness::Complete;
    let all_complete = complete(&comparison.baseline_report)
        && comparison
            .candidates
            .iter()
            .all(|candidate| complete(&candidate.report));
    Ok(Json(ComparisonResponse {
        comparison,
        regressions,
        improvements,
        all_complete,
    }))
}
