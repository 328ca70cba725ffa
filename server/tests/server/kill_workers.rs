//! Kill `arbiter worker` processes with SIGKILL again and again during a run, on SQLite and on
//! PostgreSQL: no result is lost or duplicated, and the final results equal a fault-free
//! run's. The simulator and the workers are real processes of the `arbiter` binary.

use arbiter_domain::ids::{CheckpointId, RunId};
use arbiter_domain::run::Priority;
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_engine::dispatch::{run_worker, WorkerConfig};
use arbiter_store::{Database, Store};
use sqlx::Connection;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");

/// A child process killed (SIGKILL) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn arbiter() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_arbiter"));
    command
        .env("RUST_LOG", "warn")
        .env(
            arbiter_engine::clients::egress::EGRESS_ALLOW_VARIABLE,
            arbiter_testkit::egress::TEST_EGRESS_ALLOW,
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

async fn start_sim() -> (Process, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let child = arbiter()
        .args([
            "sim",
            "--addr",
            &address,
            "--latency-ms-min",
            "40",
            "--latency-ms-max",
            "120",
        ])
        .spawn()
        .expect("arbiter sim starts");
    let process = Process(child);
    for _ in 0..100 {
        if reqwest::get(format!("http://{address}/health"))
            .await
            .is_ok()
        {
            return (process, format!("http://{address}/v1"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("arbiter sim did not start");
}

async fn checkpoint(store: &dyn Store, name: &str, endpoint: &str) -> CheckpointId {
    let form = CheckpointForm {
        name: name.into(),
        endpoint_url: endpoint.into(),
        model: "sim-ckpt-a".into(),
        // A fingerprint of its own, so the two runs share no cache entries.
        engine_build: name.into(),
        ..CheckpointForm::default()
    };
    arbiter_engine::catalog::register_checkpoint(store, &form, None)
        .await
        .unwrap()
}

async fn results(
    store: &dyn Store,
    run: RunId,
) -> HashMap<(String, i64), (String, String, String)> {
    store
        .run_outcomes(run)
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            (
                (row.case_id, row.repetition),
                (row.outcome, row.output, row.verdict),
            )
        })
        .collect()
}

async fn scenario(database_url: &str) {
    arbiter_testkit::egress::allow_loopback();
    let database = Database::open(database_url).await.unwrap();
    let store: Arc<dyn Store> = database.store();
    let (_sim, endpoint) = start_sim().await;
    let revision =
        arbiter_engine::catalog::upload_dataset(store.as_ref(), "qa", "qa.jsonl", SAMPLE, None)
            .await
            .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            name: "qa".into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Question: {input}".into(),
            max_tokens: 64,
            temperature: 0.0,
            repetitions: 2,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        None,
    )
    .await
    .unwrap();
    let reference_checkpoint = checkpoint(store.as_ref(), "reference", &endpoint).await;
    let killed_checkpoint = checkpoint(store.as_ref(), "killed", &endpoint).await;

    // The fault-free reference, answered by an in-process worker.
    let reference = arbiter_engine::runs::launch_run(
        store.as_ref(),
        eval,
        reference_checkpoint,
        Priority::Scheduled,
        "t",
        None,
    )
    .await
    .unwrap()
    .run_id;
    let (stop, shutdown) = watch::channel(false);
    let mut config = WorkerConfig::named("reference");
    config.idle_poll = Duration::from_millis(20);
    let worker = tokio::spawn(run_worker(store.clone(), config, shutdown));
    while !store.finish_run_if_done(reference).await.unwrap() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    worker.await.unwrap();

    // The same eval answered by worker processes that are killed every few hundred ms.
    let run = arbiter_engine::runs::launch_run(
        store.as_ref(),
        eval,
        killed_checkpoint,
        Priority::Scheduled,
        "t",
        None,
    )
    .await
    .unwrap()
    .run_id;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut kills = 0;
    let mut done_at_kills = Vec::new();
    while !store.finish_run_if_done(run).await.unwrap() {
        assert!(Instant::now() < deadline, "the run did not finish");
        let worker = Process(
            arbiter()
                .args([
                    "worker",
                    "--database-url",
                    database_url,
                    "--concurrency",
                    "4",
                    "--lease-seconds",
                    "1",
                ])
                .spawn()
                .expect("arbiter worker starts"),
        );
        tokio::time::sleep(Duration::from_millis(if kills < 8 { 600 } else { 3000 })).await;
        drop(worker); // SIGKILL, mid-request more often than not
        kills += 1;
        done_at_kills.push(
            arbiter_engine::runs::run_progress(store.as_ref(), run)
                .await
                .unwrap()
                .done,
        );
    }
    let progress = arbiter_engine::runs::run_progress(store.as_ref(), run)
        .await
        .unwrap();
    assert!(
        kills >= 5,
        "the workers were killed {kills} times: {done_at_kills:?}"
    );
    assert!(
        done_at_kills
            .iter()
            .filter(|done| **done > 0 && **done < progress.expected)
            .count()
            >= 3,
        "several kills happened mid-run: {done_at_kills:?}"
    );
    assert_eq!(
        (progress.done, progress.expected),
        (120, 120),
        "nothing lost"
    );
    let rows = store.run_outcomes(run).await.unwrap();
    assert_eq!(rows.len(), 120, "one result per identity, none duplicated");
    assert_eq!(
        results(store.as_ref(), run).await,
        results(store.as_ref(), reference).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_and_duplicate_nothing_on_sqlite() {
    let directory = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
    scenario(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_and_duplicate_nothing_on_postgres() {
    let admin_url = std::env::var("ARBITER_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "ARBITER_TEST_POSTGRES_URL is not set: run `eval \"$(scripts/start-postgres)\"` first"
        )
    });
    let name = format!("arbiter_kill_{:x}", rand_suffix());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let (base, _) = admin_url.rsplit_once('/').unwrap();
    scenario(&format!("{base}/{name}")).await;
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        ^ u128::from(std::process::id())
}
