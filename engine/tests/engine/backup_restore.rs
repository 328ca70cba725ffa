//! Backups restore to identical results: a SQLite file copied online with `VACUUM INTO`
//! (`arbiter backup`), and a PostgreSQL database dumped with `pg_dump` and restored with
//! `pg_restore` into a fresh database. After restoring, every run's exported results and
//! report, the datasets, checkpoints, evals, suites, tokens and alerts read back the same.

use arbiter_domain::ids::UserId;
use arbiter_domain::run::RunStatus;
use arbiter_testkit::{backend, fixtures, pipeline};

use arbiter_engine::reports::export::{export_run, ExportFormat};
use arbiter_sim::SimConfig;
use arbiter_store::{Database, Store};
use std::process::Command;
use std::sync::Arc;

/// Two runs answered by the simulator through a real worker, plus the things around them.
async fn fill(store: Arc<dyn Store>) {
    let endpoint = pipeline::start_sim(SimConfig {
        latency_ms_min: 1,
        latency_ms_max: 3,
        ..SimConfig::demo()
    })
    .await;
    let revision = arbiter_engine::catalog::upload_dataset(
        store.as_ref(),
        "qa",
        "qa.jsonl",
        fixtures::SAMPLE,
        None,
    )
    .await
    .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &fixtures::eval_form("qa", revision.dataset_id, 2),
        None,
    )
    .await
    .unwrap();
    let mut runs = Vec::new();
    for (name, model) in [("a", "sim-ckpt-a"), ("b", "sim-ckpt-b")] {
        let checkpoint = pipeline::checkpoint(store.as_ref(), name, &endpoint, model, "").await;
        runs.push(pipeline::launch(store.as_ref(), eval, checkpoint).await);
    }
    let finished =
        pipeline::work_until_complete(store.clone(), &runs, pipeline::test_worker("backup")).await;
    assert!(
        finished
            .iter()
            .all(|run| run.status == RunStatus::Completed),
        "{finished:?}"
    );
    let user = store
        .create_user(
            "res",
            &fixtures::stand_in_hash("res"),
            arbiter_domain::accounts::Role::Researcher,
        )
        .await
        .unwrap();
    let user = store.get_user(user).await.unwrap().unwrap();
    arbiter_engine::accounts::api_tokens::create_token(store.as_ref(), &user, "ci", None, 1_000)
        .await
        .unwrap();
    store
        .raise_alert("error_rate", "answers", "9% failed", 2_000)
        .await
        .unwrap();
}

/// Everything a person could read back, as one text.
async fn fingerprint(store: &dyn Store) -> String {
    let mut out = String::new();
    let mut runs = store.list_runs().await.unwrap();
    runs.sort_by_key(|run| run.id);
    assert_eq!(runs.len(), 2);
    for run in &runs {
        let (bytes, rows) = export_run(store, run.id, ExportFormat::Jsonl, Vec::new())
            .await
            .unwrap();
        assert_eq!(rows, 120);
        out.push_str(&String::from_utf8(bytes).unwrap());
        let (progress, report) = arbiter_engine::reports::runs::run_report(store, run.id)
            .await
            .unwrap();
        out.push_str(&serde_json::to_string(&(progress, report)).unwrap());
    }
    out.push_str(&serde_json::to_string(&runs).unwrap());
    out.push_str(&serde_json::to_string(&store.list_datasets().await.unwrap()).unwrap());
    out.push_str(&serde_json::to_string(&store.list_checkpoints().await.unwrap()).unwrap());
    out.push_str(&serde_json::to_string(&store.list_evals().await.unwrap()).unwrap());
    out.push_str(&serde_json::to_string(&store.api_tokens(None).await.unwrap()).unwrap());
    out.push_str(&format!("{:?}", store.alerts(10).await.unwrap()));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_backup_taken_while_serving_restores_identical_results() {
    let backend = backend::TestBackend::sqlite().await;
    let store = backend.database.store();
    fill(store.clone()).await;
    let before = fingerprint(store.as_ref()).await;
    let directory = tempfile::tempdir().unwrap();
    let copy = directory.path().join("backup.db");
    let Database::Sqlite(sqlite) = &backend.database else {
        unreachable!()
    };
    sqlite.backup_into(&copy).await.unwrap();
    // Never over an existing file.
    assert!(sqlite.backup_into(&copy).await.is_err());
    let restored = Database::open(&format!("sqlite://{}", copy.display()))
        .await
        .unwrap();
    assert_eq!(fingerprint(restored.store().as_ref()).await, before);
    backend.tear_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_dump_restored_into_a_fresh_database_gives_identical_results() {
    let backend = backend::TestBackend::postgres().await;
    let store = backend.database.store();
    fill(store.clone()).await;
    let before = fingerprint(store.as_ref()).await;
    let directory = tempfile::tempdir().unwrap();
    let dump = directory.path().join("arbiter.dump");
    let status = Command::new("pg_dump")
        .args(["--format=custom", "--no-owner", "--file"])
        .arg(&dump)
        .arg(backend.url())
        .status()
        .expect("pg_dump runs (PostgreSQL's client tools are installed with the server)");
    assert!(status.success(), "pg_dump failed");

    let admin_url = std::env::var(backend::POSTGRES_URL_VARIABLE).unwrap();
    let name = format!("arbiter_restore_{:016x}", rand::random::<u64>());
    let mut admin = backend::admin_connection(&admin_url).await;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let restored_url = backend::database_url(&admin_url, &name);
    let status = Command::new("pg_restore")
        .args(["--no-owner", "--exit-on-error", "--dbname"])
        .arg(&restored_url)
        .arg(&dump)
        .status()
        .expect("pg_restore runs");
    assert!(status.success(), "pg_restore failed");
    let restored = Database::open(&restored_url).await.unwrap();
    assert_eq!(fingerprint(restored.store().as_ref()).await, before);
    // The restored database keeps working: sequences continue past the restored rows.
    let id = restored
        .store()
        .create_user(
            "after-restore",
            &fixtures::stand_in_hash("x"),
            arbiter_domain::accounts::Role::Annotator,
        )
        .await
        .unwrap();
    assert!(id > UserId(1));
    if let Database::Postgres(restored) = &restored {
        restored.close().await;
    }
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
    backend.tear_down().await;
}
