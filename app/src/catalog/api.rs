//! Server functions of the catalog: datasets, checkpoints, evals. Each is thin — check the
//! session and role, make one engine call, map the error — and has a fixed endpoint under
//! `/api/` so that the HTTP tests can name it.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

/// Rows shown on the dataset and run pages.
pub const PAGE_ROWS: i64 = 200;

#[cfg(feature = "ssr")]
pub(crate) mod convert {
    //! Engine records to browser views.
    use super::*;
    use crate::runs::api::{ProgressView, ResultView};

    pub fn revision(revision: arbiter_domain::dataset::DatasetRevision) -> RevisionView {
        RevisionView {
            id: revision.id,
            content_hash: revision.content_hash,
            item_count: revision.item_count,
            source_name: revision.source_name,
            created_at: revision.created_at,
        }
    }

    pub fn dataset(dataset: arbiter_domain::dataset::DatasetSummary) -> DatasetView {
        DatasetView {
            id: dataset.id,
            name: dataset.name,
            revision_count: dataset.revision_count,
            latest: dataset.latest_revision.map(revision),
        }
    }

    pub fn checkpoint(
        checkpoint: arbiter_domain::checkpoint::Checkpoint,
        all: &[arbiter_domain::checkpoint::Checkpoint],
    ) -> CheckpointView {
        let fallback_name = checkpoint
            .fallback_checkpoint_id
            .and_then(|id| all.iter().find(|other| other.id == id))
            .map(|fallback| fallback.name.clone());
        CheckpointView {
            id: checkpoint.id,
            name: checkpoint.name,
            base_url: checkpoint.base_url,
            model: checkpoint.model,
            replica_urls: checkpoint.replica_urls,
            engine_build: checkpoint.engine_build,
            parallel_layout: checkpoint.parallel_layout,
            fallback_name,
            max_in_flight: checkpoint.max_in_flight,
            input_usd_per_mtok: checkpoint.prices.input_usd_per_mtok,
            output_usd_per_mtok: checkpoint.prices.output_usd_per_mtok,
            training_run: checkpoint.training_run,
            training_step: checkpoint.training_step,
            api_key: arbiter_engine::secrets::describe(checkpoint.api_key_ref.as_deref()),
        }
    }

    pub fn checkpoints(
        checkpoints: Vec<arbiter_domain::checkpoint::Checkpoint>,
    ) -> Vec<CheckpointView> {
        checkpoints
            .iter()
            .cloned()
            .map(|checkpoint| self::checkpoint(checkpoint, &checkpoints))
            .collect()
    }

    pub fn eval(eval: arbiter_domain::manifest::EvalSummary) -> EvalView {
        EvalView {
            id: eval.id,
            name: eval.name,
            dataset_name: eval.dataset_name,
            prompt_template: eval.prompt_template,
            grader: eval.grader.id_version().to_string(),
            grader_spec: serde_json::to_string(&eval.grader).unwrap_or_default(),
            max_tokens: eval.max_tokens,
            temperature: eval.temperature,
            repetitions: eval.repetitions,
            seed: eval.seed,
        }
    }

    pub fn progress(progress: arbiter_domain::run::RunProgress) -> ProgressView {
        ProgressView {
            id: progress.id,
            eval_name: progress.eval_name,
            checkpoint_name: progress.checkpoint_name,
            endpoint_url: progress.endpoint_url,
            manifest_hash: progress.manifest_hash,
            dataset_revision: progress.dataset_revision,
            status: progress.status.to_string(),
            expected: progress.expected,
            done: progress.done,
            in_flight: progress.in_flight,
            passed: progress.passed,
            failed: progress.failed,
            uncertain: progress.uncertain,
            errors: progress.errors,
            last_error: progress.last_error,
            priority: progress.priority.label().to_string(),
            team: progress.team,
            throughput_per_s: progress.throughput_per_s,
            from_cache: progress.from_cache,
            outcome_mix: progress.outcome_mix,
            error_mix: progress.error_mix,
        }
    }

    pub fn result(row: arbiter_domain::run::IdentityResult) -> ResultView {
        ResultView {
            case_id: row.case_id,
            repetition: row.repetition,
            input: row.input,
            target: row.target,
            output: row.output,
            outcome: row.outcome,
            verdict: row.verdict,
            reason: row.grade_reason,
            decided_by: row.decided_by,
            error: row.error,
            attempts: row.attempts,
            latency_ms: row.latency_ms,
            model_used: row.model_used,
            fallback_used: row.fallback_used,
            from_cache: row.from_cache,
        }
    }
}

#[server(endpoint = "list_datasets")]
pub async fn list_datasets() -> Result<Vec<DatasetView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let datasets = state.store.list_datasets().await.map_err(store_error)?;
    Ok(datasets.into_iter().map(convert::dataset).collect())
}

#[server(endpoint = "dataset_detail")]
pub async fn dataset_detail(id: i64) -> Result<DatasetPageData, ServerFnError> {
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
        dataset: convert::dataset(dataset),
        revisions: revisions.into_iter().map(convert::revision).collect(),
        items: items
            .into_iter()
            .map(|item| ItemView {
                case_id: item.case_id,
                input: item.input,
                target: item.target,
                category: item.category,
            })
            .collect(),
    })
}

#[server(endpoint = "list_checkpoints")]
pub async fn list_checkpoints() -> Result<Vec<CheckpointView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let checkpoints = state.store.list_checkpoints().await.map_err(store_error)?;
    Ok(convert::checkpoints(checkpoints))
}

/// Registers a checkpoint; `options` may be left out entirely.
#[server(endpoint = "register_checkpoint")]
pub async fn register_checkpoint(
    name: String,
    endpoint_url: String,
    model: String,
    #[server(default)] options: CheckpointOptions,
) -> Result<i64, ServerFnError> {
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
        Some(user.id),
    )
    .await
    {
        tracing::error!(checkpoint = id, error = %err, "suites not launched for a new checkpoint");
    }
    Ok(id)
}

/// Sets what a checkpoint's model costs (USD per million tokens; '' is free).
#[server(endpoint = "set_checkpoint_prices")]
pub async fn set_checkpoint_prices(
    checkpoint_id: i64,
    input_usd_per_mtok: String,
    output_usd_per_mtok: String,
) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageEvals).await?;
    arbiter_engine::catalog::set_checkpoint_prices(
        state.store.as_ref(),
        checkpoint_id,
        &input_usd_per_mtok,
        &output_usd_per_mtok,
    )
    .await
    .map_err(service_error)
}

#[server(endpoint = "evals_page")]
pub async fn evals_page() -> Result<EvalsPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    Ok(EvalsPageData {
        evals: store
            .list_evals()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(convert::eval)
            .collect(),
        datasets: store
            .list_datasets()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(convert::dataset)
            .collect(),
        checkpoints: convert::checkpoints(store.list_checkpoints().await.map_err(store_error)?),
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
) -> Result<i64, ServerFnError> {
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
        grader,
    };
    arbiter_engine::catalog::define_eval(state.store.as_ref(), &form, Some(user.id))
        .await
        .map_err(service_error)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevisionView {
    pub id: i64,
    pub content_hash: String,
    pub item_count: i64,
    pub source_name: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetView {
    pub id: i64,
    pub name: String,
    pub revision_count: i64,
    pub latest: Option<RevisionView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemView {
    pub case_id: String,
    pub input: String,
    pub target: String,
    pub category: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetPageData {
    pub dataset: DatasetView,
    pub revisions: Vec<RevisionView>,
    /// The first items of the newest revision.
    pub items: Vec<ItemView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointView {
    pub id: i64,
    pub name: String,
    pub base_url: String,
    pub model: String,
    pub replica_urls: Vec<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    pub fallback_name: Option<String>,
    pub max_in_flight: i64,
    /// USD per million prompt / completion tokens.
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
    pub training_run: String,
    pub training_step: Option<i64>,
    /// How its endpoint authenticates, in words ("none", "stored encrypted", "from the
    /// environment (NAME)"): never the key.
    pub api_key: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalView {
    pub id: i64,
    pub name: String,
    pub dataset_name: String,
    pub prompt_template: String,
    /// The deterministic grader's id and version, e.g. `numeric@1`.
    pub grader: String,
    /// Its settings as JSON.
    pub grader_spec: String,
    pub max_tokens: i64,
    pub temperature: f64,
    pub repetitions: i64,
    pub seed: i64,
}

/// The researcher's launch page needs evals and checkpoints together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalsPageData {
    pub evals: Vec<EvalView>,
    pub datasets: Vec<DatasetView>,
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
