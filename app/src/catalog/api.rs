//! Server functions of the catalog: datasets, checkpoints, evals. Each is thin — check the
//! session and role, make one engine call, map the error — and has a fixed endpoint under
//! `/api/` so that the HTTP tests can name it.

use arbiter_domain::checkpoint::{Checkpoint, Endpoint, KeyBinding};
use arbiter_domain::dataset::{DatasetItem, DatasetRevision, DatasetSummary};
use arbiter_domain::eval_form::EvalFormText;
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, RunId};
use arbiter_domain::manifest::EvalSummary;
use arbiter_domain::prompt::request::{PromptSample, RequestPreview};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::format::PAGE_ROWS,
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

/// A checkpoint as its page shows it: the record, the name of its fallback, and how its
/// endpoint's key is kept in words (the record itself never carries the key to the browser).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointView {
    #[serde(flatten)]
    pub checkpoint: Checkpoint,
    pub fallback_name: Option<String>,
    /// "none", "stored encrypted", "from the environment (NAME)": never the key.
    pub api_key: String,
    /// Whether the viewer may change it (its registering team, leads and admins).
    pub may_change: bool,
}

/// A shared endpoint as the Checkpoints page lists it, and whether the viewer may edit its limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub editable: bool,
}

/// Checkpoints with their fallbacks' names and how their keys are kept.
#[cfg(feature = "ssr")]
pub(crate) fn checkpoint_views(
    checkpoints: Vec<Checkpoint>,
    viewer: &arbiter_domain::accounts::User,
) -> Vec<CheckpointView> {
    let names: std::collections::HashMap<CheckpointId, String> = checkpoints
        .iter()
        .map(|checkpoint| (checkpoint.id, checkpoint.name.clone()))
        .collect();
    checkpoints
        .into_iter()
        .map(|checkpoint| CheckpointView {
            fallback_name: checkpoint
                .fallback_checkpoint_id
                .and_then(|id| names.get(&id).cloned()),
            api_key: arbiter_engine::secrets::describe(checkpoint.api_key_ref.as_deref()),
            may_change: checkpoint.changeable_by(viewer),
            checkpoint,
        })
        .collect()
}

#[server(endpoint = "list_datasets")]
pub async fn list_datasets() -> Result<Vec<DatasetSummary>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    state.store.list_datasets().await.map_err(store_error)
}

#[server(endpoint = "dataset_detail")]
pub async fn dataset_detail(id: DatasetId) -> Result<DatasetPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    let dataset = store
        .get_dataset(id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| fail(404, format!("no dataset with id {id}")))?;
    let revisions = store.list_revisions(id).await.map_err(store_error)?;
    let items = match &dataset.latest_revision {
        Some(latest) => store
            .list_items(latest.id, PAGE_ROWS, 0)
            .await
            .map_err(store_error)?,
        None => Vec::new(),
    };
    Ok(DatasetPageData {
        dataset,
        revisions,
        items,
    })
}

#[server(endpoint = "list_checkpoints")]
pub async fn list_checkpoints() -> Result<Vec<CheckpointView>, ServerFnError> {
    let (state, user) = require(Permission::ViewResults).await?;
    let checkpoints = state.store.list_checkpoints().await.map_err(store_error)?;
    Ok(checkpoint_views(checkpoints, &user))
}

#[server(endpoint = "list_endpoints")]
pub async fn list_endpoints() -> Result<Vec<EndpointView>, ServerFnError> {
    let (state, user) = require(Permission::ViewResults).await?;
    let endpoints = state.store.list_endpoints().await.map_err(store_error)?;
    Ok(endpoints
        .into_iter()
        .map(|endpoint| EndpointView {
            editable: endpoint.editable_by(&user),
            endpoint,
        })
        .collect())
}

/// Operator keys in use and the hosts each may go to (leads and admins, who bind them).
#[server(endpoint = "key_bindings")]
pub async fn key_bindings() -> Result<Vec<KeyBinding>, ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    arbiter_engine::catalog::key_bindings(state.store.as_ref())
        .await
        .map_err(service_error)
}

/// Binds an operator key to hosts ('' removes the binding): leads and admins.
#[server(endpoint = "bind_endpoint_key")]
pub async fn bind_endpoint_key(variable: String, hosts: String) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    arbiter_engine::catalog::bind_endpoint_key(state.store.as_ref(), &user, &variable, &hosts)
        .await
        .map_err(service_error)
}

/// The explicit edit of a shared endpoint's in-flight limit (its owner, leads and admins).
#[server(endpoint = "set_endpoint_limit")]
pub async fn set_endpoint_limit(
    endpoint_id: i64,
    max_in_flight: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::catalog::set_endpoint_max_in_flight(
        state.store.as_ref(),
        &user,
        endpoint_id,
        &max_in_flight,
    )
    .await
    .map(|_| ())
    .map_err(service_error)
}

/// Registers a checkpoint; `options` may be left out entirely.
#[server(endpoint = "register_checkpoint")]
pub async fn register_checkpoint(
    name: String,
    endpoint_url: String,
    model: String,
    #[server(default)] options: CheckpointOptions,
) -> Result<CheckpointId, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let form = arbiter_engine::catalog::CheckpointForm {
        name,
        endpoint_url,
        model,
        replica_urls: options.replica_urls,
        engine_build: options.engine_build,
        parallel_layout: options.parallel_layout,
        fallback_checkpoint: options.fallback_checkpoint,
        max_in_flight: options.max_in_flight,
        input_usd_per_mtok: options.input_usd_per_mtok,
        output_usd_per_mtok: options.output_usd_per_mtok,
        training_run: options.training_run,
        training_step: options.training_step,
        api_key: options.api_key.into(),
    };
    let priority =
        arbiter_engine::runs::parse_priority(&options.decision).map_err(service_error)?;
    let id =
        arbiter_engine::catalog::register_checkpoint(state.store.as_ref(), &form, Some(user.id))
            .await
            .map_err(service_error)?;
    // Each new checkpoint launches its smoke suites (and full suites on their turn); a refused
    // launch is logged and listed, never a reason to fail the registration.
    if let Err(err) = arbiter_engine::suites::trigger_new_checkpoint(
        state.store.as_ref(),
        id,
        priority,
        Some(&user),
    )
    .await
    {
        tracing::error!(checkpoint = id.get(), error = %err, "suites not launched for a new checkpoint");
    }
    Ok(id)
}

/// Sets what a checkpoint's model costs (USD per million tokens; '' is free).
#[server(endpoint = "set_checkpoint_prices")]
pub async fn set_checkpoint_prices(
    checkpoint_id: CheckpointId,
    input_usd_per_mtok: String,
    output_usd_per_mtok: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::catalog::set_checkpoint_prices(
        state.store.as_ref(),
        &user,
        checkpoint_id,
        &input_usd_per_mtok,
        &output_usd_per_mtok,
    )
    .await
    .map_err(service_error)
}

/// What the serve form says about the weights and the machines (numbers as typed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServeFields {
    pub engine: String,
    pub path: String,
    #[serde(default)]
    pub params_billions: String,
    #[serde(default)]
    pub bytes_per_param: String,
    #[serde(default)]
    pub gpus_per_node: String,
    #[serde(default)]
    pub gpu_memory_gib: String,
    #[serde(default)]
    pub nodes: String,
    #[serde(default)]
    pub replicas: String,
    #[serde(default)]
    pub sustained_tokens_per_s: String,
}

/// The plan a served checkpoint gets and, unless only previewed, what its registration did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServeOutcome {
    pub plan: arbiter_domain::serving::plan::ServingPlan,
    /// The new checkpoint and the runs its suites launched; `None` for a preview.
    pub registered: Option<(CheckpointId, usize)>,
    pub trigger_error: Option<String>,
}

/// Plans a checkpoint's servers and, unless `preview` is set, registers it served by a
/// launcher: its suites wait for the servers and run once they are healthy.
#[server(endpoint = "serve_checkpoint")]
pub async fn serve_checkpoint(
    name: String,
    model: String,
    serve: ServeFields,
    #[server(default)] training_run: String,
    #[server(default)] training_step: String,
    #[server(default)] decision: String,
    #[server(default)] preview: Option<String>,
) -> Result<ServeOutcome, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let request = arbiter_engine::serving::ServeForm {
        engine: serve.engine,
        path: serve.path,
        params_billions: serve.params_billions,
        bytes_per_param: serve.bytes_per_param,
        gpus_per_node: serve.gpus_per_node,
        gpu_memory_gib: serve.gpu_memory_gib,
        nodes: serve.nodes,
        replicas: serve.replicas,
        sustained_tokens_per_s: serve.sustained_tokens_per_s,
    }
    .request()
    .map_err(service_error)?;
    let store = state.store.as_ref();
    let plan = arbiter_engine::serving::preview_plan(store, &request)
        .await
        .map_err(service_error)?;
    if preview.is_some() {
        return Ok(ServeOutcome {
            plan,
            registered: None,
            trigger_error: None,
        });
    }
    let step = training_step.trim();
    let announcement = arbiter_engine::suites::Announcement {
        name,
        model,
        training_run: Some(training_run).filter(|run| !run.trim().is_empty()),
        training_step: match step {
            "" => None,
            text => Some(text.parse().map_err(|_| {
                fail(
                    400,
                    format!("the training step must be a whole number, not `{text}`"),
                )
            })?),
        },
        decision: Some(decision).filter(|decision| !decision.is_empty()),
        serve: Some(request),
        ..Default::default()
    };
    let registered = arbiter_engine::suites::register_announced(store, &announcement, Some(&user))
        .await
        .map_err(service_error)?;
    Ok(ServeOutcome {
        plan,
        registered: Some((registered.checkpoint_id, registered.runs.len())),
        trigger_error: registered.trigger_error,
    })
}

/// Served checkpoints' launches, newest first.
#[server(endpoint = "serving_launches")]
pub async fn serving_launches(
) -> Result<Vec<arbiter_domain::serving::launch::LaunchView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    arbiter_engine::serving::launches(state.store.as_ref(), None)
        .await
        .map_err(service_error)
}

/// Retracts a rolled-back checkpoint with the reason shown on its runs.
#[server(endpoint = "retract_checkpoint")]
pub async fn retract_checkpoint(
    checkpoint_id: CheckpointId,
    reason: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::catalog::retract_checkpoint(state.store.as_ref(), &user, checkpoint_id, &reason)
        .await
        .map(|_| ())
        .map_err(service_error)
}

#[server(endpoint = "evals_page")]
pub async fn evals_page() -> Result<EvalsPageData, ServerFnError> {
    let (state, user) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    Ok(EvalsPageData {
        evals: store.list_evals().await.map_err(store_error)?,
        datasets: store.list_datasets().await.map_err(store_error)?,
        checkpoints: checkpoint_views(store.list_checkpoints().await.map_err(store_error)?, &user),
    })
}

/// Defines an eval. Numbers arrive as form text and are checked here; `grader` is a JSON
/// grader spec ('' or left out: exact match), refused with its problem when invalid.
#[server(endpoint = "create_eval")]
pub async fn create_eval(
    name: String,
    dataset_id: String,
    prompt_template: String,
    max_tokens: String,
    temperature: String,
    repetitions: String,
    seed: String,
    #[server(default)] grader: String,
    #[server(default)] options: EvalFormText,
) -> Result<EvalId, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    fn number<T: std::str::FromStr>(value: &str, what: &str) -> Result<T, ServerFnError> {
        value
            .trim()
            .parse()
            .map_err(|_| fail(400, format!("{what} must be a number, not `{value}`")))
    }
    let form = arbiter_engine::catalog::EvalForm {
        name,
        dataset_id: number(&dataset_id, "the dataset")?,
        prompt_template,
        max_tokens: number(&max_tokens, "max tokens")?,
        temperature: number(&temperature, "temperature")?,
        repetitions: number(&repetitions, "repetitions")?,
        seed: number(&seed, "seed")?,
        grader: arbiter_engine::eval_form::grader(&options, &grader).map_err(service_error)?,
        options: arbiter_engine::eval_form::options(&options).map_err(service_error)?,
    };
    arbiter_engine::catalog::define_eval(state.store.as_ref(), &form, Some(user.id))
        .await
        .map_err(service_error)
}

/// The eval form's live check: the dataset's fields and its first item's prompt under the
/// template as typed so far.
#[server(endpoint = "check_prompt")]
pub async fn check_prompt(
    dataset_id: DatasetId,
    prompt_template: String,
    #[server(default)] options: EvalFormText,
) -> Result<PromptSample, ServerFnError> {
    let (state, _) = require(Permission::ManageEvals).await?;
    let options = match arbiter_engine::eval_form::options(&options) {
        Ok(options) => options,
        Err(problem) => {
            return Ok(PromptSample {
                problem: Some(problem.to_string()),
                ..PromptSample::default()
            })
        }
    };
    let prompt = arbiter_engine::catalog::prompt_spec(&prompt_template, &options);
    arbiter_engine::preview::sample_prompt(state.store.as_ref(), dataset_id, &prompt)
        .await
        .map_err(service_error)
}

/// The exact request an eval would send for one item ('' for the first), with the model and
/// generation key of a checkpoint ('' for none).
#[server(endpoint = "preview_eval")]
pub async fn preview_eval(
    eval_id: EvalId,
    #[server(default)] case_id: String,
    #[server(default)] checkpoint_id: String,
) -> Result<RequestPreview, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let checkpoint = match checkpoint_id.trim() {
        "" => None,
        text => Some(CheckpointId(text.parse().map_err(|_| {
            fail(400, format!("the checkpoint must be an id, not `{text}`"))
        })?)),
    };
    arbiter_engine::preview::preview_request(
        state.store.as_ref(),
        eval_id,
        Some(case_id.as_str()),
        checkpoint,
        0,
    )
    .await
    .map_err(service_error)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetPageData {
    pub dataset: DatasetSummary,
    pub revisions: Vec<DatasetRevision>,
    /// The first items of the newest revision.
    pub items: Vec<DatasetItem>,
}

/// The researcher's launch page needs evals and checkpoints together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalsPageData {
    pub evals: Vec<EvalSummary>,
    pub datasets: Vec<DatasetSummary>,
    pub checkpoints: Vec<CheckpointView>,
}

/// The optional part of the checkpoint form (inputs named `options[…]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointOptions {
    /// Further endpoint URLs, comma- or space-separated.
    pub replica_urls: String,
    pub engine_build: String,
    pub parallel_layout: String,
    /// Name of the checkpoint to fall back to.
    pub fallback_checkpoint: String,
    /// Requests in flight per endpoint from all workers together ('' for the default).
    pub max_in_flight: String,
    /// USD per million prompt tokens ('' is free).
    pub input_usd_per_mtok: String,
    /// USD per million completion tokens ('' is free).
    pub output_usd_per_mtok: String,
    /// The training run it comes from and its step there ('' for none), for trends.
    pub training_run: String,
    pub training_step: String,
    /// `promotion`, `scheduled` ('' too) or `ablation`: the priority of the suite runs the new
    /// checkpoint triggers.
    pub decision: String,
    /// The endpoint's API key: '' none, `env:NAME`, or the key (stored encrypted).
    pub api_key: String,
}

/// Freezes the manifest and enqueues the run, then sends the browser to the run's page.
/// `priority` is `promotion`, `scheduled` (default) or `ablation`.
#[server(endpoint = "launch_run")]
pub async fn launch_run(
    eval_id: EvalId,
    checkpoint_id: String,
    #[server(default)] priority: String,
) -> Result<RunId, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let checkpoint_id: CheckpointId = checkpoint_id
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
