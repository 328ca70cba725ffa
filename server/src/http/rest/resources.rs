//! The things runs are made of: the caller, datasets, checkpoints and evals.

use super::{ApiError, ApiErrorBody, ApiJson, ApiPath, ApiQuery, ApiResult, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::{Permission, Role};
use arbiter_domain::checkpoint::{Checkpoint, Endpoint};
use arbiter_domain::dataset::{DatasetRevision, DatasetSummary};
use arbiter_domain::fields::FieldMapping;
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, UserId};
use arbiter_domain::manifest::{EvalSummary, SamplingOptions};
use arbiter_domain::prompt::few_shot::FewShotSpec;
use arbiter_domain::prompt::request::RequestPreview;
use arbiter_domain::prompt::{Api, MessageTemplate, TemplateSyntax};
use arbiter_domain::suites::Suite;
use arbiter_domain::webhooks::{DeliveryRecord, Webhook};
use arbiter_engine::catalog::{EvalForm, EvalOptions};
use arbiter_engine::suites::{self, Announcement, SuiteForm, TriggeredRun};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// The caller, as the token identifies them.
#[derive(Serialize, ToSchema)]
pub struct Me {
    pub id: UserId,
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
    ApiPath(id): ApiPath<DatasetId>,
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
    /// The file's name: its extension selects the parser (`.csv`, `.parquet`, `.jsonl.gz`;
    /// anything else is JSONL).
    file_name: String,
}

#[utoipa::path(post, path = "/api/v1/datasets", tag = "datasets",
    params(UploadParams),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The file's bytes: JSONL (optionally gzip-compressed), CSV or Parquet; one item per line or row, with any fields. An `id` (or `case_id`) field names each item; without one, items are numbered by position. Items with only `input`, `target` and `category` keep the original four-field form and its revision hashes."),
    responses(
        (status = 201, description = "A new revision", body = DatasetRevision),
        (status = 200, description = "Identical content was uploaded before: that revision", body = DatasetRevision),
        (status = 400, description = "The file was refused; nothing was stored", body = ApiErrorBody)))]
pub async fn upload_dataset(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiQuery(params): ApiQuery<UploadParams>,
    body: axum::body::Body,
) -> ApiResult<(StatusCode, Json<DatasetRevision>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let started = arbiter_store::now_ms();
    let limits = arbiter_engine::catalog::upload_limits();
    let file = crate::http::uploads::spool_body(body, limits.max_bytes)
        .await
        .map_err(|(status, message)| {
            ApiError::new(status, format!("{}: {message}", params.file_name))
        })?;
    let revision = arbiter_engine::catalog::upload_dataset_file(
        state.store.as_ref(),
        &params.name,
        &params.file_name,
        file.path(),
        Some(user.id),
        limits,
    )
    .await
    .map_err(|err| match err {
        arbiter_engine::error::ServiceError::Invalid(message) => {
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

/// Which launches to list.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LaunchFilter {
    /// Only this checkpoint's launches.
    pub checkpoint: Option<CheckpointId>,
}

#[utoipa::path(get, path = "/api/v1/launches", tag = "checkpoints",
    params(LaunchFilter),
    responses((status = 200, description = "Served checkpoints' launches, newest first: state, start-up split into queue and load, serving time, restarts, failure and log tail", body = Vec<arbiter_engine::serving::LaunchView>)))]
pub async fn list_launches(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiQuery(filter): ApiQuery<LaunchFilter>,
) -> ApiResult<Json<Vec<arbiter_engine::serving::LaunchView>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(
        arbiter_engine::serving::launches(state.store.as_ref(), filter.checkpoint).await?,
    ))
}

#[utoipa::path(post, path = "/api/v1/serving/plan", tag = "checkpoints",
    request_body = arbiter_engine::serving::ServeRequest,
    responses(
        (status = 200, description = "The layout (tensor-parallel degree, replicas) and expected figures a checkpoint served this way gets; nothing is stored", body = arbiter_domain::serving::plan::ServingPlan),
        (status = 400, description = "An unknown engine, a missing or bad figure, or a model too large for one node", body = ApiErrorBody)))]
pub async fn plan_serving(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<arbiter_engine::serving::ServeRequest>,
) -> ApiResult<Json<arbiter_domain::serving::plan::ServingPlan>> {
    caller.require(Permission::ManageEvals)?;
    Ok(Json(
        arbiter_engine::serving::preview_plan(state.store.as_ref(), &request).await?,
    ))
}

#[utoipa::path(get, path = "/api/v1/endpoints", tag = "checkpoints",
    responses((status = 200, description = "Every model server checkpoints are registered on, with its owner and limit", body = Vec<Endpoint>)))]
pub async fn list_endpoints(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<Endpoint>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(state.store.list_endpoints().await?))
}

/// The explicit edit of an endpoint's limits.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointEdit {
    /// Requests in flight to it from all workers together (1 to 100000).
    pub max_in_flight: i64,
}

#[utoipa::path(patch, path = "/api/v1/endpoints/{id}", tag = "checkpoints",
    params(("id" = i64, Path, description = "Endpoint id")),
    request_body = EndpointEdit,
    responses((status = 200, body = Endpoint), (status = 400, body = ApiErrorBody),
        (status = 403, description = "Neither its owner nor a lead or admin", body = ApiErrorBody), (status = 404, body = ApiErrorBody)))]
pub async fn edit_endpoint(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<i64>,
    ApiJson(edit): ApiJson<EndpointEdit>,
) -> ApiResult<Json<Endpoint>> {
    let user = caller.require(Permission::ManageEvals)?;
    Ok(Json(
        arbiter_engine::catalog::set_endpoint_max_in_flight(
            state.store.as_ref(),
            &user,
            id,
            &edit.max_in_flight.to_string(),
        )
        .await?,
    ))
}

/// The registered checkpoint and the suite runs it triggered.
#[derive(Serialize, ToSchema)]
pub struct RegisteredCheckpoint {
    pub checkpoint: Checkpoint,
    pub runs: Vec<TriggeredRun>,
}

#[utoipa::path(post, path = "/api/v1/checkpoints", tag = "checkpoints",
    request_body = Announcement,
    responses(
        (status = 201, description = "Registered; its smoke suites (and any full suite whose turn it is) launched", body = RegisteredCheckpoint),
        (status = 400, description = "Refused; nothing stored", body = ApiErrorBody),
        (status = 409, description = "The name is taken", body = ApiErrorBody)))]
pub async fn register_checkpoint(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(announcement): ApiJson<Announcement>,
) -> ApiResult<(StatusCode, Json<RegisteredCheckpoint>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let registered =
        suites::register_announced(state.store.as_ref(), &announcement, Some(&user)).await?;
    let checkpoint = state
        .store
        .list_checkpoints()
        .await?
        .into_iter()
        .find(|checkpoint| checkpoint.id == registered.checkpoint_id)
        .ok_or_else(|| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the checkpoint vanished")
        })?;
    Ok((
        StatusCode::CREATED,
        Json(RegisteredCheckpoint {
            checkpoint,
            runs: registered.runs,
        }),
    ))
}

/// Why a checkpoint is retracted.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetractRequest {
    /// Shown on its runs (at most 2,000 characters).
    pub reason: String,
}

/// A retracted checkpoint and the runs its retraction cancelled.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct Retracted {
    pub checkpoint: Checkpoint,
    pub cancelled_runs: Vec<arbiter_domain::ids::RunId>,
}

#[utoipa::path(post, path = "/api/v1/checkpoints/{id}/retract", tag = "checkpoints",
    params(("id" = i64, Path, description = "Checkpoint id")),
    request_body = RetractRequest,
    responses(
        (status = 200, description = "Retracted: its unfinished runs cancelled, out of trends and baselines, its results readable and marked", body = Retracted),
        (status = 400, description = "No reason, or one too long; nothing changed", body = ApiErrorBody),
        (status = 403, body = ApiErrorBody), (status = 404, body = ApiErrorBody),
        (status = 409, description = "Retracted already", body = ApiErrorBody)))]
pub async fn retract_checkpoint(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<CheckpointId>,
    ApiJson(request): ApiJson<RetractRequest>,
) -> ApiResult<Json<Retracted>> {
    let user = caller.require(Permission::ManageEvals)?;
    let cancelled_runs = arbiter_engine::catalog::retract_checkpoint(
        state.store.as_ref(),
        &user,
        id,
        &request.reason,
    )
    .await?;
    let checkpoint = state
        .store
        .list_checkpoints()
        .await?
        .into_iter()
        .find(|checkpoint| checkpoint.id == id)
        .ok_or_else(|| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the checkpoint vanished")
        })?;
    Ok(Json(Retracted {
        checkpoint,
        cancelled_runs,
    }))
}

#[utoipa::path(get, path = "/api/v1/suites", tag = "checkpoints",
    responses((status = 200, body = Vec<Suite>)))]
pub async fn list_suites(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<Suite>>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(state.store.suites().await?))
}

#[utoipa::path(post, path = "/api/v1/suites", tag = "checkpoints",
    request_body = SuiteForm,
    responses((status = 201, body = Suite), (status = 400, body = ApiErrorBody), (status = 404, description = "An eval does not exist", body = ApiErrorBody), (status = 409, body = ApiErrorBody)))]
pub async fn create_suite(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(form): ApiJson<SuiteForm>,
) -> ApiResult<(StatusCode, Json<Suite>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let id = suites::create_suite(
        state.store.as_ref(),
        &form,
        &user.team,
        user.role.can(Permission::ManageUsers),
        Some(user.id),
    )
    .await?;
    let suite = state
        .store
        .suites()
        .await?
        .into_iter()
        .find(|suite| suite.id == id)
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the suite vanished"))?;
    Ok((StatusCode::CREATED, Json(suite)))
}

#[utoipa::path(delete, path = "/api/v1/suites/{id}", tag = "checkpoints",
    params(("id" = i64, Path, description = "Suite id")),
    responses((status = 204, description = "Deleted (its past runs stay)"), (status = 403, description = "The suite belongs to another team", body = ApiErrorBody), (status = 404, body = ApiErrorBody)))]
pub async fn delete_suite(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    let user = caller.require(Permission::ManageEvals)?;
    suites::delete_suite(state.store.as_ref(), &user, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
pub struct OnDemandParams {
    /// `promotion`, `scheduled` (the default) or `ablation`.
    #[serde(default)]
    priority: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/checkpoints/{id}/suites/{suite}", tag = "checkpoints",
    params(("id" = i64, Path, description = "Checkpoint id"), ("suite" = String, Path, description = "Suite name"), OnDemandParams),
    responses((status = 200, description = "The suite's runs (refused launches carry their error)", body = Vec<TriggeredRun>), (status = 403, description = "The suite belongs to another team", body = ApiErrorBody), (status = 404, body = ApiErrorBody)))]
pub async fn run_suite(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath((id, suite)): ApiPath<(CheckpointId, String)>,
    ApiQuery(params): ApiQuery<OnDemandParams>,
) -> ApiResult<Json<Vec<TriggeredRun>>> {
    let user = caller.require(Permission::ManageEvals)?;
    let priority =
        arbiter_engine::runs::parse_priority(params.priority.as_deref().unwrap_or_default())?;
    Ok(Json(
        suites::run_suite_on_demand(state.store.as_ref(), &user, id, &suite, priority).await?,
    ))
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
    ApiPath(id): ApiPath<EvalId>,
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
    pub dataset_id: DatasetId,
    /// The user message (chat) or the prompt (completions): a Jinja template over the item's
    /// fields (`Q: {{ question }}\n{{ choices | lettered }}\nA:`), or the original form where
    /// `{input}` is replaced by the input. Empty with `messages`, or to send items'
    /// conversations as they are.
    #[serde(default)]
    pub prompt_template: String,
    /// `jinja` or `placeholder`; absent: Jinja when the template has a Jinja tag (`{{`, `{%`,
    /// `{#`) or no `{input}`, the original form otherwise.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub template_syntax: Option<TemplateSyntax>,
    /// Sent first as the system message (a template in the same syntax).
    #[serde(default)]
    pub system_prompt: String,
    /// A whole conversation of `{"role", "content"}` templates, instead of `prompt_template`.
    #[serde(default)]
    pub messages: Vec<MessageTemplate>,
    /// `chat` (the default: `/v1/chat/completions`) or `completions` (`/v1/completions`, for
    /// base checkpoints).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub api: Api,
    /// Which item fields are `input`, `target`, `choices`, `category` and `metadata`; absent:
    /// `input`, `target`, `category`.
    #[serde(default)]
    pub fields: Option<FieldMapping>,
    /// Exemplars shown before each question: `{"dataset_id", "count", "seed", "style": "text"
    /// | "turns", "delimiter", "target_delimiter"}`, drawn from that dataset's newest revision
    /// and frozen into each run's manifest.
    #[serde(default)]
    pub few_shot: Option<FewShotSpec>,
    /// Score each choice by its likelihood after the prompt (lm-eval's `multiple_choice`)
    /// instead of generating: `{"target_delimiter": " ", "select_by": "raw"}` (`raw`, `chars`
    /// or `bytes`). Needs `"api": "completions"` and a choices field.
    #[serde(default)]
    pub likelihood: Option<arbiter_domain::likelihood::LikelihoodSpec>,
    /// Score each item's whole prompt text by rolling log-likelihood (lm-eval's
    /// `loglikelihood_rolling`: word and byte perplexity, bits per byte) instead of generating:
    /// `{"max_length": 2048, "stride": 2046, "prefix_token": 0}` (stride and prefix_token
    /// optional: lm-eval's windows, and the prefix read from the server's `/tokenizer_info`).
    /// Needs `"api": "completions"` and a server with `/tokenize`.
    #[serde(default)]
    pub rolling: Option<arbiter_domain::rolling::RollingSpec>,
    /// Check items against a training corpus's n-gram index when a run expands:
    /// `{"index": "/data/corpus.ngrams", "check_target": false}` (a file on the server, made by
    /// `arbiter contamination index`).
    #[serde(default)]
    pub contamination: Option<arbiter_domain::contamination::ContaminationSpec>,
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
    /// Nucleus sampling (0 < top_p ≤ 1); absent leaves the endpoint's default.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Stop sequences (at most 16, each 1 to 256 bytes).
    #[serde(default)]
    pub stop: Vec<String>,
    /// Engine sampling parameters: `top_k`, `min_p`, `repetition_penalty`,
    /// `presence_penalty`, `frequency_penalty`, `min_tokens`, `ignore_eos`,
    /// `skip_special_tokens`, each checked against the range vLLM accepts.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub extra: BTreeMap<String, serde_json::Value>,
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
        options: EvalOptions {
            template_syntax: request.template_syntax,
            system_prompt: request.system_prompt,
            messages: request.messages,
            api: request.api,
            mapping: request.fields,
            few_shot: request.few_shot,
            sampling: SamplingOptions {
                top_p: request.top_p,
                stop: request.stop,
                extra: request.extra,
            },
            likelihood: request.likelihood,
            rolling: request.rolling,
            contamination: request.contamination,
        },
    };
    let id =
        arbiter_engine::catalog::define_eval(state.store.as_ref(), &form, Some(user.id)).await?;
    let eval = state
        .store
        .get_eval(id)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the eval vanished"))?;
    Ok((StatusCode::CREATED, Json(eval)))
}

/// Which item and checkpoint to preview.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PreviewParams {
    /// The item's case id; the first item of the newest revision when absent.
    #[serde(default)]
    case_id: Option<String>,
    /// The checkpoint whose model and endpoint fingerprint the request would carry.
    #[serde(default)]
    checkpoint_id: Option<CheckpointId>,
    /// The repetition (it picks the seed); 0 when absent.
    #[serde(default)]
    repetition: u32,
}

/// The exact request body a worker would send for one item, and its generation key.
#[utoipa::path(get, path = "/api/v1/evals/{id}/preview", tag = "evals",
    params(("id" = i64, Path, description = "Eval id"), PreviewParams),
    responses((status = 200, body = RequestPreview), (status = 400, description = "The item cannot be rendered: the message says why", body = ApiErrorBody), (status = 404, body = ApiErrorBody)))]
pub async fn preview_eval(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<EvalId>,
    ApiQuery(params): ApiQuery<PreviewParams>,
) -> ApiResult<Json<RequestPreview>> {
    caller.require(Permission::ViewResults)?;
    Ok(Json(
        arbiter_engine::preview::preview_request(
            state.store.as_ref(),
            id,
            params.case_id.as_deref(),
            params.checkpoint_id,
            params.repetition,
        )
        .await?,
    ))
}

/// Every webhook; the whole URL only on those you created (all of them for leads and admins),
/// the scheme and host alone on the rest, since receivers often carry a secret in the path.
#[utoipa::path(get, path = "/api/v1/webhooks", tag = "webhooks",
    responses((status = 200, body = Vec<Webhook>)))]
pub async fn list_webhooks(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<Webhook>>> {
    let user = caller.require(Permission::ViewResults)?;
    Ok(Json(
        arbiter_engine::webhooks::webhooks_seen_by(state.store.as_ref(), &user).await?,
    ))
}

/// A webhook to add.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWebhookRequest {
    /// Where to POST: http:// or https://.
    pub url: String,
    /// Any of `run.completed`, `alert.raised`, `alert.resolved`, `label.completed` (the last three
    /// for leads and admins only: they name raters).
    pub events: Vec<String>,
    /// Sign deliveries (`X-Arbiter-Signature`); the secret is returned once. Needs
    /// `ARBITER_SECRET_KEY` on the server.
    #[serde(default)]
    pub sign: bool,
}

/// The new webhook, with its signing secret (shown only now).
#[derive(Serialize, ToSchema)]
pub struct CreatedWebhook {
    pub webhook: Webhook,
    pub secret: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/webhooks", tag = "webhooks",
    request_body = NewWebhookRequest,
    responses((status = 201, body = CreatedWebhook), (status = 400, body = ApiErrorBody)))]
pub async fn create_webhook(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<NewWebhookRequest>,
) -> ApiResult<(StatusCode, Json<CreatedWebhook>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let (webhook, secret) = arbiter_engine::webhooks::create_webhook(
        state.store.as_ref(),
        arbiter_engine::secrets::process(),
        &request.url,
        &request.events,
        request.sign,
        user.role.can(Permission::ManageUsers),
        Some(user.id),
        arbiter_store::now_ms(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhook { webhook, secret }),
    ))
}

#[utoipa::path(delete, path = "/api/v1/webhooks/{id}", tag = "webhooks",
    params(("id" = i64, Path, description = "Webhook id")),
    responses((status = 204, description = "Deleted with its pending deliveries"), (status = 403, description = "Not yours: only its creator, leads and admins delete a webhook", body = ApiErrorBody), (status = 404, body = ApiErrorBody)))]
pub async fn delete_webhook(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    let user = caller.require(Permission::ManageEvals)?;
    arbiter_engine::webhooks::delete_webhook(state.store.as_ref(), &user, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/webhooks/deliveries", tag = "webhooks",
    responses((status = 200, description = "The latest 100 deliveries, newest first", body = Vec<DeliveryRecord>)))]
pub async fn list_deliveries(
    State(state): State<AppState>,
    caller: ApiUser,
) -> ApiResult<Json<Vec<DeliveryRecord>>> {
    let user = caller.require(Permission::ViewResults)?;
    Ok(Json(
        arbiter_engine::webhooks::deliveries_seen_by(state.store.as_ref(), &user, 100).await?,
    ))
}
