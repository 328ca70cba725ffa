//! Server functions of runs: launching, listing, a run's page and its controls.

use arbiter_domain::ids::RunId;
use arbiter_domain::run::{IdentityResult, RunProgress, RunSummary};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::format::PAGE_ROWS,
    crate::guard::{require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

#[server(endpoint = "list_runs")]
pub async fn list_runs() -> Result<Vec<RunSummary>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    state.store.list_runs().await.map_err(store_error)
}

#[server(endpoint = "run_detail")]
pub async fn run_detail(id: RunId) -> Result<RunPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let progress = arbiter_engine::runs::run_progress(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    let results = arbiter_engine::runs::run_results(state.store.as_ref(), id, PAGE_ROWS)
        .await
        .map_err(service_error)?;
    Ok(RunPageData { progress, results })
}

/// The run's load over time, from its workers' samples.
#[server(endpoint = "run_load")]
pub async fn run_load(
    id: RunId,
) -> Result<arbiter_domain::health::run_load::RunLoadView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let progress = state
        .store
        .run_header(id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ServerFnError::new(format!("no run with id {id}")))?;
    let until = progress.finished_at.unwrap_or_else(arbiter_store::now_ms);
    arbiter_engine::reports::load::run_load(state.store.as_ref(), id, progress.created_at, until)
        .await
        .map_err(service_error)
}

/// Pause, resume or cancel a run (`action` is `pause`, `resume` or `cancel`).
#[server(endpoint = "change_run")]
pub async fn change_run(id: RunId, action: String) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::runs::change_run_state(state.store.as_ref(), &user, id, &action)
        .await
        .map_err(service_error)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPageData {
    pub progress: RunProgress,
    pub results: Vec<IdentityResult>,
}
