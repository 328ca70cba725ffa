//! Rater pay: the ledger for payroll, for leads.

use super::{ApiErrorBody, ApiResult, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_domain::annotation::pay::Ledger;
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

/// The range and period of a ledger.
#[derive(Deserialize, IntoParams)]
pub struct LedgerParams {
    /// First day, `YYYY-MM-DD` (UTC).
    from: String,
    /// Last day, included.
    until: String,
    /// `week` (ISO weeks) or `month`.
    #[serde(default = "weekly")]
    period: String,
}

fn weekly() -> String {
    "week".into()
}

#[utoipa::path(get, path = "/api/v1/pay/ledger", tag = "pay", params(LedgerParams),
    responses((status = 200, description = "A row per rater, period and rate in force: labels, gold answers and pair answers, rejected labels, payable hours (time on task, idle time capped) and the amount in minor units; totals per currency", content_type = "application/json"),
        (status = 400, body = ApiErrorBody), (status = 403, description = "Only leads and admins see the rater pool's pay", body = ApiErrorBody)))]
pub async fn ledger(
    State(state): State<AppState>,
    caller: ApiUser,
    Query(params): Query<LedgerParams>,
) -> ApiResult<Json<Ledger>> {
    caller.require(Permission::ManageUsers)?;
    Ok(Json(
        arbiter_engine::annotation::pay::ledger(
            state.store.as_ref(),
            &params.from,
            &params.until,
            &params.period,
            None,
        )
        .await?,
    ))
}
