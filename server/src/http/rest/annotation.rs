//! Items pushed from outside into labelling queues, and read back with their labels.

use super::{ApiErrorBody, ApiJson, ApiQuery, ApiResult, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_domain::annotation::pushed::{PushReceipt, PushedRecord};
use arbiter_engine::annotation::pushed::PushRequest;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Largest push body: up to 1,000 items of long traces (the usual 2 MiB body limit would refuse
/// a few hundred of them).
pub const MAX_PUSH_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What a push did, item by item.
#[derive(Serialize, ToSchema)]
pub struct PushResponse {
    /// Items queued by this push.
    created: usize,
    /// Items whose content was in the queue already (nothing added for them).
    existing: usize,
    items: Vec<PushReceipt>,
}

#[utoipa::path(post, path = "/api/v1/annotation/items", tag = "annotation",
    request_body = PushRequest,
    responses((status = 201, description = "Some items were queued; each receipt gives the item's task id and content hash", body = PushResponse),
        (status = 200, description = "Every item was in the queue already: nothing was added", body = PushResponse),
        (status = 400, description = "The push or one of its items is malformed (the message names the item); nothing was queued", body = ApiErrorBody),
        (status = 403, description = "The queue belongs to another team, or the caller may not send items to raters", body = ApiErrorBody),
        (status = 404, description = "No rubric has that name", body = ApiErrorBody)))]
pub async fn push_items(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiJson(request): ApiJson<PushRequest>,
) -> ApiResult<(StatusCode, Json<PushResponse>)> {
    let user = caller.require(Permission::ManageEvals)?;
    let items =
        arbiter_engine::annotation::pushed::push_items(state.store.as_ref(), &user, request)
            .await?;
    let created = items.iter().filter(|item| item.created).count();
    let status = if created > 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(PushResponse {
            created,
            existing: items.len() - created,
            items,
        }),
    ))
}

/// Which queue's items to read, and from where.
#[derive(Deserialize, IntoParams)]
pub struct PushedParams {
    /// The queue's name.
    queue: String,
    /// Items after this task id (0, the default, from the first); page on with the last id read.
    #[serde(default)]
    after: i64,
    /// At most this many (1 to 500; default 100).
    #[serde(default = "hundred")]
    limit: i64,
}

fn hundred() -> i64 {
    100
}

#[utoipa::path(get, path = "/api/v1/annotation/items", tag = "annotation", params(PushedParams),
    responses((status = 200, description = "The queue's items in push order: state, labels needed and done, the humans' verdict or rubric consensus or pair choice (with the preferred output in the order pushed), and every label (rater, answer, rationale, time on task, guideline version)", content_type = "application/json"),
        (status = 400, body = ApiErrorBody), (status = 403, description = "The queue belongs to another team", body = ApiErrorBody),
        (status = 404, description = "No queue of pushed items has that name", body = ApiErrorBody)))]
pub async fn pushed_items(
    State(state): State<AppState>,
    caller: ApiUser,
    ApiQuery(params): ApiQuery<PushedParams>,
) -> ApiResult<Json<Vec<PushedRecord>>> {
    let user = caller.require(Permission::ManageEvals)?;
    Ok(Json(
        arbiter_engine::annotation::pushed::pushed_items(
            state.store.as_ref(),
            &user,
            &params.queue,
            params.after,
            params.limit,
        )
        .await?,
    ))
}
