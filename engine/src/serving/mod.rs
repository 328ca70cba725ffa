//! Checkpoints Arbiter serves itself: the serving plan chosen at registration, the launches
//! that start and retire their servers ([`lifecycle`]; [`local`] runs them as processes on this
//! host, [`kubernetes`] as Deployments in a cluster), and what the Checkpoints page and the API
//! show of them.
//!
//! "Load once, run everything": a served checkpoint's suites and any later runs share its
//! live launch; runs wait (not claimed) until it is healthy, and a run launched after it
//! retired requests a new one.

pub mod canary;
pub mod config;
pub mod kubernetes;
pub mod lifecycle;
pub mod local;

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::checkpoint::Checkpoint;
use arbiter_domain::ids::CheckpointId;
use arbiter_domain::manifest::EndpointFingerprint;
use arbiter_domain::run::RunStatus;
pub use arbiter_domain::serving::launch::LaunchView;
use arbiter_domain::serving::plan::{plan, PlanRequest, ServingPlan};
use arbiter_domain::serving::{Serving, ServingEngine};
use arbiter_store::Store;
use serde::{Deserialize, Serialize};

/// How an announcement (or the Checkpoints page) asks Arbiter to serve a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServeRequest {
    /// `vllm`, `sglang`, `arbiter_model` or `simulator`.
    pub engine: String,
    /// The weights as the engine's command takes them (a directory or a GGUF file).
    pub path: String,
    /// The model and machines the plan is made for.
    #[serde(flatten)]
    pub plan: PlanRequest,
}

const PATH_MAX: usize = 4096;

/// A path or repository id's characters: enough for any file system path or hub id, and
/// nothing a shell reads specially, in case an operator's template runs one (`sh -c`).
fn plain(c: char) -> bool {
    c.is_alphanumeric() || "/._-+=@:,~".contains(c)
}

/// The weights' path, checked: it becomes one argument of a command, so it may not be empty,
/// start with `-` (read as an option) or hold anything but plain path characters.
fn model_path(path: &str) -> ServiceResult<String> {
    let path = path.trim();
    if path.is_empty() {
        return Err(ServiceError::Invalid(
            "say where the weights are (`path`)".into(),
        ));
    }
    if path.starts_with('-') || !path.chars().all(plain) || path.len() > PATH_MAX {
        return Err(ServiceError::Invalid(format!(
            "the weights' path `{}` may not start with `-`, has at most {PATH_MAX} bytes, and holds only letters, digits and / . _ - + = @ : , ~",
            path.chars().take(80).collect::<String>()
        )));
    }
    Ok(path.to_string())
}

/// A served checkpoint's model name goes into its command (`{model}`) too.
pub fn check_served_model(model: &str) -> ServiceResult<()> {
    let model = model.trim();
    if model.starts_with('-') || !model.chars().all(plain) {
        return Err(ServiceError::Invalid(format!(
            "a served checkpoint's model name `{}` may not start with `-` and holds only letters, digits and / . _ - + = @ : , ~",
            model.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
}

/// The seconds the engine's last launches took from request to healthy, on average; `None`
/// before any was measured.
async fn measured_startup_s(
    store: &dyn Store,
    engine: ServingEngine,
) -> ServiceResult<Option<f64>> {
    let launches = store.list_launches(None, 200).await?;
    let times: Vec<f64> = launches
        .iter()
        .filter(|launch| launch.plan.engine == engine)
        .filter_map(|launch| launch.startup(0).startup_ms)
        .take(10)
        .map(|ms| ms as f64 / 1000.0)
        .collect();
    Ok((!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64))
}

/// The plan for a serve request, its start-up taken from the engine's measured launches
/// unless given.
pub async fn plan_for(store: &dyn Store, request: &ServeRequest) -> ServiceResult<Serving> {
    let engine = ServingEngine::parse(&request.engine).map_err(ServiceError::Invalid)?;
    let mut inputs = request.plan.clone();
    if inputs.startup_s.is_none() {
        inputs.startup_s = measured_startup_s(store, engine).await?;
    }
    let plan = plan(engine, &inputs).map_err(ServiceError::Invalid)?;
    Ok(Serving {
        engine,
        model_path: model_path(&request.path)?,
        plan,
    })
}

/// What a served checkpoint's runs are keyed by: the weights the launcher loads, under the
/// checkpoint's model name, in the plan's layout. Known without asking the servers, which may
/// not be up yet when the run is launched.
pub fn served_fingerprint(checkpoint: &Checkpoint, serving: &Serving) -> EndpointFingerprint {
    EndpointFingerprint {
        served_model: Some(serving.model_path.clone()),
        engine_build: checkpoint.engine_build.clone(),
        parallel_layout: serving.plan.layout(),
        probe_error: None,
    }
}

/// Requests a launch of a served checkpoint's servers if none is live (a run was launched or
/// resumed on it); nothing for a checkpoint found at its URL.
pub async fn wake_servers(store: &dyn Store, checkpoint_id: CheckpointId) -> ServiceResult<()> {
    if let Some(launch) = store
        .request_launch(checkpoint_id, arbiter_store::now_ms())
        .await?
    {
        tracing::info!(
            checkpoint = checkpoint_id.get(),
            launch,
            "servers requested for a run"
        );
    }
    Ok(())
}

/// The latest launches (of one checkpoint when given), newest first.
pub async fn launches(
    store: &dyn Store,
    checkpoint_id: Option<CheckpointId>,
) -> ServiceResult<Vec<LaunchView>> {
    let now = arbiter_store::now_ms();
    let launches = store.list_launches(checkpoint_id, 100).await?;
    let mut views = Vec::with_capacity(launches.len());
    let mut runs = None;
    for launch in launches {
        let view = LaunchView::of(launch, now);
        if !view.launch.state.is_live() {
            views.push(view);
            continue;
        }
        if runs.is_none() {
            runs = Some(store.list_runs().await?);
        }
        let mut tokens = 0u64;
        for run in runs.iter().flatten().filter(|run| {
            run.checkpoint_name == view.launch.checkpoint_name
                && !matches!(run.status, RunStatus::Completed | RunStatus::Cancelled)
        }) {
            if let Some(manifest) = store.run_manifest(run.id).await? {
                let left = (run.expected_count - run.done_count).max(0) as u64;
                tokens += left * u64::from(manifest.eval.generation.max_tokens);
            }
        }
        views.push(view.with_work(tokens));
    }
    Ok(views)
}

/// The Checkpoints page's serve form, as typed: numbers arrive as text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServeForm {
    pub engine: String,
    pub path: String,
    pub params_billions: String,
    pub bytes_per_param: String,
    pub gpus_per_node: String,
    pub gpu_memory_gib: String,
    pub nodes: String,
    pub replicas: String,
    pub sustained_tokens_per_s: String,
}

fn optional<T: std::str::FromStr>(text: &str, what: &str) -> ServiceResult<Option<T>> {
    match text.trim() {
        "" => Ok(None),
        text => text
            .parse()
            .map(Some)
            .map_err(|_| ServiceError::Invalid(format!("{what} must be a number, not `{text}`"))),
    }
}

impl ServeForm {
    pub fn request(&self) -> ServiceResult<ServeRequest> {
        Ok(ServeRequest {
            engine: self.engine.clone(),
            path: self.path.clone(),
            plan: PlanRequest {
                params_billions: optional(&self.params_billions, "parameters (billions)")?,
                bytes_per_param: optional(&self.bytes_per_param, "bytes per parameter")?,
                gpus_per_node: optional(&self.gpus_per_node, "GPUs per node")?,
                gpu_memory_gib: optional(&self.gpu_memory_gib, "GPU memory (GiB)")?,
                nodes: optional(&self.nodes, "nodes")?,
                replicas: optional(&self.replicas, "replicas")?,
                sustained_tokens_per_s: optional(
                    &self.sustained_tokens_per_s,
                    "sustained tokens/s",
                )?,
                startup_s: None,
            },
        })
    }
}

/// The plan a serve request would get, shown before anything is registered.
pub async fn preview_plan(store: &dyn Store, request: &ServeRequest) -> ServiceResult<ServingPlan> {
    Ok(plan_for(store, request).await?.plan)
}
