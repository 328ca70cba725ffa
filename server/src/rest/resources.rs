//! The things runs are made of: the caller, datasets, checkpoints and evals.

use super::{ApiError, ApiErrorBody, ApiJson, ApiPath, ApiQuery, ApiResult, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_engine::auth::{Permission, Role};
use arbiter_engine::service::{self, CheckpointForm, EvalForm};
use arbiter_engine::store::{Checkpoint, DatasetRevision, DatasetSummary, EvalSummary};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The caller, as the token identifies them.
#[derive(Serialize, ToSchema)]
pub struct Me {
    pub id: i64,
    pub username: String,
    #[schema(value_type = String, example = "researcher")]
    pub role: Role,
    pub team: String,
}

#[utoipa::path(get, path = "/api/v1/me", tag = "account",
    responses((status = 200, body = Me), (status = 401, body = ApiErrorBody)))]
pub async fn me(ApiUser(user): ApiUser) -> Json<Me> {
    Json(Me {
        id: user.id,
        username: user.username,
        role: user.role,
        team: user.team,
    })
}

#[utoipa::path(get, path = "/api/v1/datasets", tag = "datasets",
    responses((status = 200, body = Vec<DatasetSummary>), (status = 401, body = ApiErrorBody), (status = 403, body = ApiErrorBody)))]
pub async fn list_datasets(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<DatasetSummary>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(state.store.list_datasets().await?))
}

/// A dataset with every revision, newest first.
#[derive(Serialize, ToSchema)]
pub struct DatasetDetail {
    pub dataset: DatasetSummary,
    pub revisions: Vec<DatasetRevision>,
}

#[utoipa::path(get, path = "/api/v1/datasets/{id}", tag = "datasets",
    params(("id" = i64, Path, description = "Dataset id")),
    responses((status = 200, body = DatasetDetail), (status = 404, body = ApiErrorBody)))]
pub async fn get_dataset(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Json<DatasetDetail>> {
    caller.require(Permission::ViewResults)?;
    let dataset =
        state.store.get_dataset(id).await?.ok_or_else(|| {
            ApiError::new(StatusCode::NOT_FOUND, format!("no dataset with id {id}"))
        })?;
    let revisions = state.store.list_revisions(id).await?;
    Ok(Json(DatasetDetail { dataset, revisions }))
}

#[derive(Deserialize, IntoParams)]
pub struct UploadParams {
    /// The dataset's name; uploading under an existing name adds a revision.
    name: String,
    /// The file's name: its extension (`.jsonl`, `.json`, `.csv`) selects the parser.
    file_name: String,
}

#[utoipa::path(post, path = "/api/v1/datasets", tag = "datasets",
    params(UploadParams),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The file's bytes: JSONL, JSON or CSV with `id`, `input`, `target` and optional `category`"),
    responses(
        (status = 201, description = "A new revision", body = DatasetRevision),
        (status = 200, description = "Identical content was uploaded before: that revision", body = DatasetRevision),
        (status = 400, description = "The file was refused; nothing was stored", body = ApiErrorBody)))]
pub async fn upload_dataset(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiQuery(params): ApiQuery<UploadParams>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<DatasetRevision>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let started = arbiter_engine::store::now_ms();
    let revision = service::upload_dataset(
        state.store.as_ref(),
        &params.name,
        &params.file_name,
        &body,
        Some(user.id),
    )
    .await
    .map_err(|err| match err {
        service::ServiceError::Invalid(message) => {
            ApiError::bad_request(format!("{}: {message}", params.file_name))
        }
        other => other.into(),
    })?;
    // Identical content returns the revision stored by an earlier upload.
    let status = if revision.created_at < started {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(revision)))
}

#[utoipa::path(get, path = "/api/v1/checkpoints", tag = "checkpoints",
    responses((status = 200, body = Vec<Checkpoint>)))]
pub async fn list_checkpoints(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<Checkpoint>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(state.store.list_checkpoints().await?))
}

/// A checkpoint to register: where it is served and what it costs.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct NewCheckpointRequest {
    /// Unique name, e.g. `sft-v3-step-12000`.
    pub name: String,
    /// The OpenAI-compatible base URL, e.g. `http://vllm:8000/v1`.
    pub endpoint_url: String,
    /// The model name the endpoint serves it under.
    pub model: String,
    /// Further replicas serving the same weights.
    #[serde(default)]
    pub replica_urls: Vec<String>,
    #[serde(default)]
    pub engine_build: String,
    #[serde(default)]
    pub parallel_layout: String,
    /// Another checkpoint to try once when retries run out.
    #[serde(default)]
    pub fallback_checkpoint: Option<String>,
    /// Requests in flight to each endpoint, from all workers together.
    #[serde(default)]
    pub max_in_flight: Option<i64>,
    #[serde(default)]
    pub input_usd_per_mtok: Option<f64>,
    #[serde(default)]
    pub output_usd_per_mtok: Option<f64>,
    /// The training run it comes from, for trends.
    #[serde(default)]
    pub training_run: Option<String>,
    #[serde(default)]
    pub training_step: Option<i64>,
}

fn text<T: ToString>(value: Option<T>) -> String {
    value.map(|value| value.to_string()).unwrap_or_default()
}

#[utoipa::path(post, path = "/api/v1/checkpoints", tag = "checkpoints",
    request_body = NewCheckpointRequest,
    responses((status = 201, body = Checkpoint), (status = 400, body = ApiErrorBody), (status = 409, description = "The name is taken", body = ApiErrorBody)))]
pub async fn register_checkpoint(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<NewCheckpointRequest>,
) -> ApiResult<(StatusCode, Json<Checkpoint>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let form = CheckpointForm {
        name: request.name,
        endpoint_url: request.endpoint_url,
        model: request.model,
        replica_urls: request.replica_urls.join(","),
        engine_build: request.engine_build,
        parallel_layout: request.parallel_layout,
        fallback_checkpoint: request.fallback_checkpoint.unwrap_or_default(),
        max_in_flight: text(request.max_in_flight),
        input_usd_per_mtok: text(request.input_usd_per_mtok),
        output_usd_per_mtok: text(request.output_usd_per_mtok),
        training_run: request.training_run.unwrap_or_default(),
        training_step: text(request.training_step),
    };
    let id = service::register_checkpoint(state.store.as_ref(), &form, Some(user.id)).await?;
    let checkpoint = state
        .store
        .list_checkpoints()
        .await?
        .into_iter()
        .find(|checkpoint| checkpoint.id == id)
        .ok_or_else(|| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the checkpoint vanished")
        })?;
    Ok((StatusCode::CREATED, Json(checkpoint)))
}

#[utoipa::path(get, path = "/api/v1/evals", tag = "evals",
    responses((status = 200, body = Vec<EvalSummary>)))]
pub async fn list_evals(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<EvalSummary>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(state.store.list_evals().await?))
}

#[utoipa::path(get, path = "/api/v1/evals/{id}", tag = "evals",
    params(("id" = i64, Path, description = "Eval id")),
    responses((status = 200, body = EvalSummary), (status = 404, body = ApiErrorBody)))]
pub async fn get_eval(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Json<EvalSummary>> {
    caller.require(Permission::ViewResults)?;
    state
        .store
        .get_eval(id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no eval with id {id}")))
}

/// An eval to define over a dataset: the prompt, the grader and the generation settings.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEvalRequest {
    pub name: String,
    pub dataset_id: i64,
    /// Jinja-style template over the item's fields, e.g. `Q: {{input}}\nA:`.
    pub prompt_template: String,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub temperature: f64,
    #[serde(default = "one")]
    pub repetitions: u32,
    #[serde(default)]
    pub seed: u64,
    /// A grader spec (`{"kind": "numeric", …}`) or a grader id without settings
    /// (`"multiple_choice@1"`); exact match when absent.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub grader: Option<serde_json::Value>,
}

fn default_max_tokens() -> u32 {
    256
}

fn one() -> u32 {
    1
}

#[utoipa::path(post, path = "/api/v1/evals", tag = "evals",
    request_body = NewEvalRequest,
    responses((status = 201, body = EvalSummary), (status = 400, body = ApiErrorBody)))]
pub async fn define_eval(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<NewEvalRequest>,
) -> ApiResult<(StatusCode, Json<EvalSummary>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let grader = match request.grader {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(id)) => id,
        Some(spec) => spec.to_string(),
    };
    let form = EvalForm {
        name: request.name,
        dataset_id: request.dataset_id,
        prompt_template: request.prompt_template,
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        repetitions: request.repetitions,
        seed: request.seed,
        grader,
    };
    let id = service::define_eval(state.store.as_ref(), &form, Some(user.id)).await?;
    let eval = state
        .store
        .get_eval(id)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the eval vanished"))?;
    Ok((StatusCode::CREATED, Json(eval)))
}
