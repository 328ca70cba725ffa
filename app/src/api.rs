//! Server functions: the browser's calls into the engine. Each is thin — check the session and
//! role, make one engine call, map the error — and has a fixed endpoint under `/api/` so that
//! the HTTP tests can name it.

use crate::views::*;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use {
    crate::guard::{fail, require, service_error, session_user, store_error},
    arbiter_domain::accounts::Permission,
};

/// Rows shown on the dataset and run pages.
pub const PAGE_ROWS: i64 = 200;

#[cfg(feature = "ssr")]
pub(crate) mod convert {
    //! Engine records to browser views.
    use crate::views::*;

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

/// The logged-in user, or `None`; never an error for anonymous visitors.
#[server(endpoint = "current_user")]
pub async fn current_user() -> Result<Option<UserView>, ServerFnError> {
    Ok(session_user()
        .await?
        .filter(|(_, user)| user.active)
        .map(|(_, user)| UserView {
            username: user.username,
            role: user.role.to_string(),
        }))
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
pub async fn list_runs() -> Result<Vec<RunView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let runs = state.store.list_runs().await.map_err(store_error)?;
    Ok(runs
        .into_iter()
        .map(|run| RunView {
            id: run.id,
            priority: run.priority.label().to_string(),
            eval_id: run.eval_id,
            eval_name: run.eval_name,
            checkpoint_name: run.checkpoint_name,
            status: run.status.to_string(),
            expected: run.expected_count,
            done: run.done_count,
        })
        .collect())
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
    Ok(RunPageData {
        progress: convert::progress(progress),
        results: results.into_iter().map(convert::result).collect(),
    })
}

/// Pause, resume or cancel a run (`action` is `pause`, `resume` or `cancel`).
#[server(endpoint = "change_run")]
pub async fn change_run(id: i64, action: String) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageEvals).await?;
    arbiter_engine::runs::change_run_state(state.store.as_ref(), id, &action)
        .await
        .map_err(service_error)
}

/// How long an annotator holds an item before it returns to the queue.
#[cfg(feature = "ssr")]
const ANNOTATION_LEASE_MS: i64 = 10 * 60 * 1000;

/// The annotator's current item (or a newly leased one); `None` when the queue is empty.
#[server(endpoint = "next_task")]
pub async fn next_task() -> Result<Option<TaskView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let store = state.store.as_ref();
    let task = store
        .next_annotation_task(user.id, ANNOTATION_LEASE_MS)
        .await
        .map_err(store_error)?;
    let counts = store.annotation_queue_counts().await.map_err(store_error)?;
    Ok(task.map(|task| TaskView {
        task_id: task.task_id,
        input: task.input,
        target: task.target,
        output: task.output,
        remaining: counts.open + counts.leased,
        training: task.training,
    }))
}

/// Records a label: `verdict` is `pass` or `fail`.
#[server(endpoint = "submit_label")]
pub async fn submit_label(
    task_id: i64,
    verdict: String,
    rationale: String,
) -> Result<Option<TrainingFeedbackView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let pass = match verdict.as_str() {
        "pass" => true,
        "fail" => false,
        other => {
            return Err(fail(
                400,
                format!("a label is `pass` or `fail`, not `{other}`"),
            ))
        }
    };
    if rationale.chars().count() > 5000 {
        return Err(fail(400, "the rationale is longer than 5000 characters"));
    }
    let feedback = state
        .store
        .submit_label(task_id, user.id, pass, &rationale)
        .await
        .map_err(store_error)?;
    Ok(feedback.map(|feedback| TrainingFeedbackView {
        correct: feedback.correct,
        answer: if feedback.answer_pass { "pass" } else { "fail" }.into(),
        note: feedback.note,
        answered: feedback.answered,
        latest_right: feedback.latest_right,
        out_of: feedback
            .answered
            .min(arbiter_domain::annotation::gold::TRAINING_ITEMS as u64),
        graduated: feedback.graduated,
    }))
}

#[server(endpoint = "skip_task")]
pub async fn skip_task(task_id: i64) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    state
        .store
        .skip_task(task_id, user.id)
        .await
        .map_err(store_error)
}

/// Open + leased items in the human queue, for the home page.
#[server(endpoint = "queue_size")]
pub async fn queue_size() -> Result<i64, ServerFnError> {
    let (state, _) = require(Permission::Annotate).await?;
    let counts = state
        .store
        .annotation_queue_counts()
        .await
        .map_err(store_error)?;
    Ok(counts.open + counts.leased)
}
