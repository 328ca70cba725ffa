//! Server functions of runs: launching, listing, a run's page and its controls.

use arbiter_domain::run::{IdentityResult, RunProgress, RunSummary};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::catalog::api::PAGE_ROWS,
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

/// Freezes the manifest and enqueues the run, then sends the browser to the run's page.
/// `priority` is `promotion`, `scheduled` (default) or `ablation`.
#[server(endpoint = "launch_run")]
pub async fn launch_run(
    eval_id: i64,
    checkpoint_id: String,
    #[server(default)] priority: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let checkpoint_id: i64 = checkpoint_id
        .trim()
        .parse()
        .map_err(|_| fail(400, "pick a checkpoint to launch against"))?;
    let priority = arbiter_engine::runs::parse_priority(&priority).map_err(service_error)?;
    let launched = arbiter_engine::runs::launch_run(
        state.store.as_ref(),
        eval_id,
        checkpoint_id,
        priority,
        &user.team,
        Some(user.id),
    )
    .await
    .map_err(service_error)?;
    leptos_axum::redirect(&format!("/runs/{}", launched.run_id));
    Ok(launched.run_id)
}

#[server(endpoint = "list_runs")]
pub async fn list_runs() -> Result<Vec<RunSummary>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    state.store.list_runs().await.map_err(store_error)
}

#[server(endpoint = "run_detail")]
pub async fn run_detail(id: i64) -> Result<RunPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let progress = arbiter_engine::runs::run_progress(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    let results = state
        .store
        .run_results(id, PAGE_ROWS)
        .await
        .map_err(store_error)?;
    Ok(RunPageData { progress, results })
}

/// Pause, resume or cancel a run (`action` is `pause`, `resume` or `cancel`).
#[server(endpoint = "change_run")]
pub async fn change_run(id: i64, action: String) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageEvals).await?;
    arbiter_engine::runs::change_run_state(state.store.as_ref(), id, &action)
        .await
        .map_err(service_error)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunPageData {
    pub progress: RunProgress,
    pub results: Vec<IdentityResult>,
}
