//! Server functions for suites: the tiered sets of evals each new checkpoint triggers, and
//! running one on a checkpoint on demand.

use arbiter_domain::ids::{CheckpointId, EvalId, RunId};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[cfg(feature = "ssr")]
use crate::guard::{fail, require, service_error, store_error};
#[cfg(feature = "ssr")]
use arbiter_domain::accounts::Permission;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteView {
    pub id: i64,
    pub name: String,
    pub tier: String,
    /// When it runs, in words.
    pub schedule: String,
    pub training_run: String,
    pub team: String,
    pub evals: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchView {
    pub suite: String,
    pub checkpoint: String,
    pub run_id: RunId,
    pub reason: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuitesData {
    pub suites: Vec<SuiteView>,
    /// (id, name) of every eval, for the form.
    pub evals: Vec<(EvalId, String)>,
    /// (id, name) of every checkpoint, newest first, for running a suite on demand.
    pub checkpoints: Vec<(CheckpointId, String)>,
    pub launches: Vec<LaunchView>,
}

/// The outcome of running a suite, one line per eval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchOutcome {
    pub lines: Vec<String>,
}

#[server(endpoint = "suites_page")]
pub async fn suites_page() -> Result<SuitesData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    let suites = store.suites().await.map_err(store_error)?;
    let mut checkpoints: Vec<(CheckpointId, String)> = store
        .list_checkpoints()
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|checkpoint| (checkpoint.id, checkpoint.name))
        .collect();
    checkpoints.sort_by_key(|checkpoint| std::cmp::Reverse(checkpoint.0));
    Ok(SuitesData {
        suites: suites
            .into_iter()
            .map(|suite| SuiteView {
                schedule: match (suite.tier.as_str(), suite.every_nth) {
                    ("smoke", _) | (_, 1) => "every checkpoint".into(),
                    (_, 0) => "on demand only".into(),
                    (_, n) => format!(
                        "every {} checkpoint of its training run",
                        arbiter_domain::suites::ordinal(n)
                    ),
                },
                id: suite.id,
                name: suite.name,
                tier: suite.tier,
                training_run: suite.training_run,
                team: suite.team,
                evals: suite.evals.into_iter().map(|(_, name)| name).collect(),
            })
            .collect(),
        evals: store
            .list_evals()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(|eval| (eval.id, eval.name))
            .collect(),
        checkpoints,
        launches: store
            .suite_launches(30)
            .await
            .map_err(store_error)?
            .into_iter()
            .map(|launch| LaunchView {
                suite: launch.suite,
                checkpoint: launch.checkpoint,
                run_id: launch.run_id,
                reason: launch.reason,
                created_at: launch.created_at,
            })
            .collect(),
    })
}

/// Creates a suite; `evals` holds one `evals[ID]=on` entry per ticked eval.
#[server(endpoint = "create_suite")]
pub async fn create_suite(
    name: String,
    tier: String,
    #[server(default)] every_nth: String,
    #[server(default)] training_run: String,
    #[server(default)] team: String,
    #[server(default)] evals: BTreeMap<String, String>,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let eval_ids = evals
        .keys()
        .map(|id| {
            id.parse::<EvalId>()
                .map_err(|_| fail(400, format!("`{id}` is not an eval id")))
        })
        .collect::<Result<Vec<EvalId>, _>>()?;
    let every_nth = match every_nth.trim() {
        "" => None,
        text => Some(text.parse::<i64>().map_err(|_| {
            fail(
                400,
                format!("“every Nth checkpoint” takes a whole number, not `{text}`"),
            )
        })?),
    };
    arbiter_engine::suites::create_suite(
        state.store.as_ref(),
        &arbiter_engine::suites::SuiteForm {
            name,
            tier,
            every_nth,
            training_run,
            team,
            eval_ids,
        },
        &user.team,
        user.role.can(Permission::ManageUsers),
        Some(user.id),
    )
    .await
    .map_err(service_error)
}

#[server(endpoint = "delete_suite")]
pub async fn delete_suite(id: i64) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::suites::delete_suite(state.store.as_ref(), &user, id)
        .await
        .map_err(service_error)
}

/// Runs a suite on a checkpoint now, whatever its schedule.
#[server(endpoint = "run_suite")]
pub async fn run_suite(
    checkpoint_id: String,
    suite: String,
    #[server(default)] priority: String,
) -> Result<LaunchOutcome, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let checkpoint_id: CheckpointId = checkpoint_id
        .trim()
        .parse()
        .map_err(|_| fail(400, "pick a checkpoint"))?;
    let priority = arbiter_engine::runs::parse_priority(&priority).map_err(service_error)?;
    let runs = arbiter_engine::suites::run_suite_on_demand(
        state.store.as_ref(),
        &user,
        checkpoint_id,
        &suite,
        priority,
    )
    .await
    .map_err(service_error)?;
    Ok(LaunchOutcome {
        lines: runs
            .into_iter()
            .map(|run| match (run.run_id, run.error) {
                (Some(id), _) if run.created => format!("{}: run {id} launched", run.eval),
                (Some(id), _) => format!("{}: run {id} (this manifest ran before)", run.eval),
                (None, error) => format!("{}: refused: {}", run.eval, error.unwrap_or_default()),
            })
            .collect(),
    })
}
