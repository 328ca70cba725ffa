//! Helpers shared by the end-to-end tests: a fresh SQLite store, an in-process simulator,
//! checkpoints, launches and a worker run until its runs complete.

use arbiter_domain::ids::{CheckpointId, EvalId, RunId};
use arbiter_domain::run::{Priority, RunProgress, RunStatus};
use arbiter_engine::catalog::CheckpointForm;
use arbiter_engine::dispatch::{run_worker, RetryPolicy, WorkerConfig};
use arbiter_sim::SimConfig;
use arbiter_store::{Database, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub async fn open_store(directory: &tempfile::TempDir) -> Arc<dyn Store> {
    crate::egress::allow_loopback();
    let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
    Database::open(&url).await.expect("store opens").store()
}

/// Whether the simulated answerer got a human task's item right: it ends a right answer with
/// the line `Answer: <target>`, which is how tests label by the truth.
pub fn sim_answer_is_right(task: &arbiter_domain::annotation::task::AnnotationTask) -> bool {
    task.output
        .lines()
        .any(|line| line.trim() == format!("Answer: {}", task.target))
}

/// A simulated model that always answers in the expected form: `accuracy` for an answerer (or
/// an uncalibrated judge); a judge with `calibrated_confidence` is right as often as it says.
pub fn sim_model(
    name: &str,
    kind: arbiter_sim::SimModelKind,
    accuracy: f64,
    calibrated_confidence: Option<(f64, f64)>,
) -> arbiter_sim::SimModel {
    arbiter_sim::SimModel {
        name: name.into(),
        kind,
        accuracy,
        unparseable_rate: 0.0,
        calibrated_confidence,
    }
}

pub async fn start_sim(config: SimConfig) -> String {
    crate::egress::allow_loopback();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(arbiter_sim::serve(config, listener));
    format!("http://{address}/v1")
}

/// Registers a checkpoint; `engine_build` changes the fingerprint (and so the cache keys)
/// without changing what the simulator answers.
pub async fn checkpoint(
    store: &dyn Store,
    name: &str,
    endpoint: &str,
    model: &str,
    engine_build: &str,
) -> CheckpointId {
    let form = CheckpointForm {
        name: name.into(),
        endpoint_url: endpoint.into(),
        model: model.into(),
        engine_build: engine_build.into(),
        ..CheckpointForm::default()
    };
    arbiter_engine::catalog::register_checkpoint(store, &form, None)
        .await
        .unwrap()
}

pub async fn launch(store: &dyn Store, eval: EvalId, checkpoint: CheckpointId) -> RunId {
    launched(store, eval, checkpoint).await.run_id
}

/// Launches as [`launch`] does, saying whether the run is new and in what state it starts.
pub async fn launched(
    store: &dyn Store,
    eval: EvalId,
    checkpoint: CheckpointId,
) -> arbiter_domain::run::LaunchedRun {
    arbiter_engine::runs::launch_run(
        store,
        eval,
        checkpoint,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
}

pub fn test_worker(name: &str) -> WorkerConfig {
    let mut config = WorkerConfig::named(name);
    config.idle_poll = Duration::from_millis(20);
    config.retry = RetryPolicy {
        base_backoff: Duration::from_millis(20),
        attempt_timeout: Duration::from_secs(2),
        ..RetryPolicy::default()
    };
    config
}

/// Runs a worker until the runs complete (or the deadline passes) and returns their progress.
pub async fn work_until_complete(
    store: Arc<dyn Store>,
    runs: &[RunId],
    config: WorkerConfig,
) -> Vec<RunProgress> {
    let (stop, shutdown) = watch::channel(false);
    let worker = tokio::spawn(run_worker(store.clone(), config, shutdown));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let mut all = Vec::new();
        for run in runs {
            all.push(
                arbiter_engine::runs::run_progress(store.as_ref(), *run)
                    .await
                    .unwrap(),
            );
        }
        if all
            .iter()
            .all(|progress| progress.status == RunStatus::Completed)
            || tokio::time::Instant::now() > deadline
        {
            stop.send(true).unwrap();
            worker.await.unwrap();
            return all;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A run's final verdicts as (case id, verdict), sorted by case id.
pub async fn verdicts_by_case(
    store: &dyn Store,
    run: arbiter_domain::ids::RunId,
) -> Vec<(String, String)> {
    let mut verdicts: Vec<(String, String)> = store
        .run_results(run, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|result| (result.case_id, result.verdict))
        .collect();
    verdicts.sort();
    verdicts
}
