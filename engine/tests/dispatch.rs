//! The dispatch path end to end against real HTTP endpoints: a worker answers a launched run
//! through `arbiter sim`, grades every answer and records it once; an unreachable endpoint ends
//! the run in a clear error state instead of a hang.

use arbiter_engine::dispatch::{run_worker, WorkerConfig};
use arbiter_engine::service::{self, EvalForm};
use arbiter_engine::sim::{self, SimConfig};
use arbiter_engine::store::{Database, RunProgress, Store, PRIORITY_SCHEDULED};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const SAMPLE: &[u8] = include_bytes!("../../public/samples/qa-basic.jsonl");

async fn open_store(directory: &tempfile::TempDir) -> Arc<dyn Store> {
    let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
    Database::open(&url).await.expect("store opens").store()
}

async fn start_sim() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let mut config = SimConfig::demo();
    config.latency_ms_min = 1;
    config.latency_ms_max = 5;
    tokio::spawn(sim::serve(config, listener));
    format!("http://{address}/v1")
}

/// Uploads the sample, defines a 2-repetition eval and launches it on (endpoint, model).
async fn launch(store: &dyn Store, endpoint: &str, model: &str) -> i64 {
    let revision = service::upload_dataset(store, "qa", "qa.jsonl", SAMPLE, None)
        .await
        .unwrap();
    let checkpoint = service::register_simple_checkpoint(store, model, endpoint, model, None)
        .await
        .unwrap();
    let eval = service::define_eval(
        store,
        &EvalForm {
            name: "qa exact".into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Question: {input}".into(),
            max_tokens: 64,
            temperature: 0.0,
            repetitions: 2,
            seed: 0,
        },
        None,
    )
    .await
    .unwrap();
    service::launch_run(store, eval, checkpoint, PRIORITY_SCHEDULED, "default", None)
        .await
        .unwrap()
        .run_id
}

/// Runs a worker until the run completes (or the deadline passes) and returns its progress.
async fn work_until_complete(store: Arc<dyn Store>, run_id: i64) -> RunProgress {
    let (stop, shutdown) = watch::channel(false);
    let mut config = WorkerConfig::named("test-worker");
    config.idle_poll = Duration::from_millis(20);
    let worker = tokio::spawn(run_worker(store.clone(), config, shutdown));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let progress = loop {
        let progress = service::run_progress(store.as_ref(), run_id).await.unwrap();
        if progress.status == "completed" || tokio::time::Instant::now() > deadline {
            break progress;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.send(true).unwrap();
    worker.await.unwrap();
    progress
}

#[tokio::test]
async fn a_run_against_the_simulator_completes_with_every_identity_graded_once() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim().await;
    let run_id = launch(store.as_ref(), &endpoint, "sim-ckpt-a").await;
    let progress = work_until_complete(store.clone(), run_id).await;
    assert_eq!(progress.status, "completed", "{progress:?}");
    assert_eq!((progress.expected, progress.done), (120, 120));
    assert_eq!(progress.errors, 0);
    assert_eq!(progress.passed + progress.failed + progress.uncertain, 120);
    // ckpt-a is configured at 80% accuracy with 8% unparseable answers.
    assert!(
        progress.passed > 60 && progress.failed > 0 && progress.uncertain > 0,
        "{progress:?}"
    );
    let queue = store.annotation_queue_counts().await.unwrap();
    assert_eq!(
        queue.open, progress.uncertain,
        "every uncertain answer waits for a human"
    );
    let results = store.run_outcomes(run_id).await.unwrap();
    assert!(results
        .iter()
        .all(|row| row.outcome == "ok" && !row.output.is_empty()));
}

#[tokio::test]
async fn an_unreachable_endpoint_ends_the_run_with_errors_not_a_hang() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    // A port nothing listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run_id = launch(
        store.as_ref(),
        &format!("http://127.0.0.1:{port}/v1"),
        "nothing",
    )
    .await;
    let progress = work_until_complete(store.clone(), run_id).await;
    assert_eq!(progress.status, "completed", "{progress:?}");
    assert_eq!(progress.errors, 120);
    assert_eq!(
        progress.passed + progress.failed + progress.uncertain,
        0,
        "errors are never graded"
    );
    let error = progress.last_error.expect("the error is explained");
    assert!(error.contains("could not connect"), "{error}");
    assert_eq!(store.annotation_queue_counts().await.unwrap().open, 0);
}
