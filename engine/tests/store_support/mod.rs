//! The harness the store story tests share: a fresh store per test on SQLite (a temporary
//! directory) or PostgreSQL (a fresh database on the throwaway server), and fixtures that
//! launch runs and escalate items to humans.
//!
//! PostgreSQL: `eval "$(scripts/start-postgres)"` exports `ARBITER_TEST_POSTGRES_URL`, a
//! superuser URL of a throwaway server. Without it the PostgreSQL tests fail; they never skip.

#![allow(dead_code)]

use arbiter_domain::accounts::PasswordHash;
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::grading::grade_exact_match;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::run::{RunProgress, PRIORITY_SCHEDULED};
use arbiter_engine::catalog::EvalForm;
use arbiter_store::{Database, FinishedItem, Store};
use sqlx::Connection;

// ---------------------------------------------------------------------------------------------
// Harness: one body per story, one test per (backend, story).
// ---------------------------------------------------------------------------------------------

/// Generates `mod sqlite { … }` and `mod postgres { … }`, each with one test per story that
/// opens a fresh store, runs the story against it and tears the store down.
#[macro_export]
macro_rules! stories {
    ($($story:ident),+ $(,)?) => {
        stories!(@backend sqlite; $($story),+);
        stories!(@backend postgres; $($story),+);
    };
    (@backend $backend:ident; $($story:ident),+) => {
        mod $backend {
            $(
                // Several worker threads, so the concurrency story really runs in parallel.
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $story() {
                    let backend = super::TestBackend::$backend().await;
                    super::$story(backend.database.store()).await;
                    backend.tear_down().await;
                }
            )+
        }
    };
}

pub const POSTGRES_URL_VARIABLE: &str = "ARBITER_TEST_POSTGRES_URL";

/// An opened, migrated store and the scratch space it lives in.
pub struct TestBackend {
    pub database: Database,
    scratch: Scratch,
}

pub enum Scratch {
    /// Holds the SQLite file; removed when dropped.
    Directory(tempfile::TempDir),
    /// A database created for this test on the server at `admin_url`.
    PostgresDatabase { admin_url: String, name: String },
}

impl TestBackend {
    pub async fn sqlite() -> TestBackend {
        let directory = tempfile::tempdir().expect("a temporary directory for the SQLite file");
        let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
        let database = Database::open(&url)
            .await
            .expect("the SQLite store opens and migrates");
        TestBackend {
            database,
            scratch: Scratch::Directory(directory),
        }
    }

    /// Creates `arbiter_test_<random>` so that tests run in parallel without sharing rows.
    pub async fn postgres() -> TestBackend {
        let admin_url = std::env::var(POSTGRES_URL_VARIABLE)
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "{POSTGRES_URL_VARIABLE} is not set, so the PostgreSQL store cannot be tested: \
                     run `eval \"$(scripts/start-postgres)\"` in the repository root, then run the tests again"
                )
            });
        let name = format!("arbiter_test_{:016x}", rand::random::<u64>());
        let mut admin = admin_connection(&admin_url).await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|err| panic!("cannot create the test database {name}: {err}"));
        let database = Database::open(&database_url(&admin_url, &name))
            .await
            .unwrap_or_else(|err| panic!("the PostgreSQL store {name} does not open: {err}"));
        TestBackend {
            database,
            scratch: Scratch::PostgresDatabase { admin_url, name },
        }
    }

    /// The database's URL (for tools such as `pg_dump`).
    pub fn url(&self) -> String {
        match &self.scratch {
            Scratch::Directory(directory) => {
                format!("sqlite://{}", directory.path().join("arbiter.db").display())
            }
            Scratch::PostgresDatabase { admin_url, name } => database_url(admin_url, name),
        }
    }

    /// Closes the pool and removes the scratch space. A failed test never gets here, so its
    /// PostgreSQL database stays behind for inspection (the server is a throwaway one).
    pub async fn tear_down(self) {
        let TestBackend { database, scratch } = self;
        match &database {
            Database::Sqlite(store) => store.close().await,
            Database::Postgres(store) => store.close().await,
        }
        match scratch {
            Scratch::Directory(directory) => directory
                .close()
                .expect("the SQLite scratch directory is removed"),
            Scratch::PostgresDatabase { admin_url, name } => {
                let mut admin = admin_connection(&admin_url).await;
                sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .unwrap_or_else(|err| panic!("cannot drop the test database {name}: {err}"));
            }
        }
    }
}

pub async fn admin_connection(admin_url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "cannot connect to {admin_url} ({err}): is the test server running? \
             Run `eval \"$(scripts/start-postgres)\"` in the repository root"
            )
        })
}

/// The admin URL with its database name replaced, keeping any `?options`.
pub fn database_url(admin_url: &str, database: &str) -> String {
    let (address, options) = admin_url.split_once('?').unwrap_or((admin_url, ""));
    let authority_start = address.find("://").map_or(0, |index| index + 3);
    let path_start = address[authority_start..]
        .find('/')
        .map_or(address.len(), |index| authority_start + index);
    let mut url = format!("{}/{database}", &address[..path_start]);
    if !options.is_empty() {
        url.push('?');
        url.push_str(options);
    }
    url
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

/// The bundled sample: 60 cases in three categories.
pub const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");

pub const FIVE_CASES: &str = r#"{"id": "c1", "input": "What is 1 + 1?", "target": "2"}
{"id": "c2", "input": "What is 2 + 2?", "target": "4"}
{"id": "c3", "input": "What is 3 + 3?", "target": "6"}
{"id": "c4", "input": "What is 4 + 4?", "target": "8"}
{"id": "c5", "input": "What is 5 + 5?", "target": "10"}
"#;

pub const THREE_CASES: &str = r#"{"id": "q1", "input": "What is 6 times 7?", "target": "42"}
{"id": "q2", "input": "What is the capital of France?", "target": "Paris"}
{"id": "q3", "input": "How many legs has a spider?", "target": "8"}
"#;

/// A reply with no recognisable answer: the exact-match grader calls it uncertain.
pub const UNSURE: &str = "I am not sure.\nNo idea.";
pub const PROMPT_TEMPLATE: &str = "Question: {input}\nEnd with a line `Answer: <answer>`.";
/// A loopback port nothing listens on: launches probe it and find nothing, quickly.
pub const ENDPOINT: &str = "http://127.0.0.1:9";
/// Long enough that no lease expires during a test.
pub const LONG_LEASE_MS: i64 = 10 * 60 * 1000;

/// Store-level tests need a hash, not a real one: Argon2 would only slow them down.
pub fn stand_in_hash(label: &str) -> PasswordHash {
    PasswordHash::from_stored(format!("$argon2id$v=19$stand-in${label}"))
}

pub fn eval_form(name: &str, dataset_id: i64, repetitions: u32) -> EvalForm {
    EvalForm {
        name: name.to_string(),
        dataset_id,
        prompt_template: PROMPT_TEMPLATE.to_string(),
        max_tokens: 64,
        temperature: 0.0,
        repetitions,
        seed: 7,
        grader: String::new(),
    }
}

/// Uploads `dataset`, registers one checkpoint and one eval, and launches the run.
pub async fn launch_one_run(store: &dyn Store, dataset: &[u8], repetitions: u32) -> i64 {
    let revision = arbiter_engine::catalog::upload_dataset(store, "qa", "qa.jsonl", dataset, None)
        .await
        .expect("the dataset uploads");
    let checkpoint = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "base",
        ENDPOINT,
        "base-model",
        None,
    )
    .await
    .expect("the checkpoint registers");
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("qa-exact", revision.dataset_id, repetitions),
        None,
    )
    .await
    .expect("the eval is valid");
    let launched = arbiter_engine::runs::launch_run(
        store,
        eval,
        checkpoint,
        PRIORITY_SCHEDULED,
        "default",
        None,
    )
    .await
    .expect("the run launches");
    assert!(launched.created);
    launched.run_id
}

pub fn answered(output: &str) -> Generation {
    Generation {
        outcome: Outcome::Ok,
        output: output.to_string(),
        finish_reason: Some("stop".into()),
        error: None,
        latency_ms: 12,
        attempts: 1,
        prompt_tokens: Some(20),
        completion_tokens: Some(4),
        logprobs: None,
        ..Generation::default()
    }
}

pub fn endpoint_failure(error: &str) -> Generation {
    Generation {
        outcome: Outcome::EndpointError,
        output: String::new(),
        finish_reason: None,
        error: Some(error.to_string()),
        latency_ms: 3000,
        attempts: 3,
        prompt_tokens: None,
        completion_tokens: None,
        logprobs: None,
        error_category: Some(ErrorCategory::Connect),
        ..Generation::default()
    }
}

/// How a simulated model answers one item.
#[derive(Clone, Copy, Debug)]
pub enum Reply {
    Correct,
    Wrong,
    Unsure,
}

impl Reply {
    pub fn output(self, target: &str) -> String {
        match self {
            Reply::Correct => format!("Let me see.\nAnswer: {target}"),
            Reply::Wrong => "Answer: certainly not this".to_string(),
            Reply::Unsure => UNSURE.to_string(),
        }
    }
}

/// Answers a work item as a worker would: load the job, grade the reply, record both.
/// Returns what `record_result` returns (false for a duplicate commit).
pub async fn reply(store: &dyn Store, work_item_id: i64, answer: Reply) -> bool {
    let job = store
        .load_job(work_item_id)
        .await
        .expect("a claimed item loads");
    let output = answer.output(&job.target);
    let grade = grade_exact_match(&output, &job.target);
    store
        .record_result(work_item_id, &answered(&output), Some(&grade))
        .await
        .expect("recording a result succeeds")
}

/// Records each identity as an answer the grader cannot read, escalated to `raters` distinct
/// human raters per item (no QC review, any skill).
pub async fn escalate_to_humans(store: &dyn Store, ids: &[i64], raters: i64) {
    let finished: Vec<FinishedItem> = ids
        .iter()
        .map(|&work_item_id| {
            let mut grading = Grading::deterministic_only(Some(grade_exact_match(UNSURE, "42")));
            let task = grading
                .human
                .as_mut()
                .expect("an unreadable answer goes to humans");
            task.routing = arbiter_domain::grading::triage::HumanRouting {
                labels_needed: raters,
                skill: None,
                review_rate: 0.0,
            };
            FinishedItem {
                work_item_id,
                generation: answered(UNSURE),
                grading,
                generation_key: None,
                cached_from: None,
            }
        })
        .collect();
    store.record_results(&finished).await.unwrap();
}

pub async fn progress(store: &dyn Store, run_id: i64) -> RunProgress {
    store
        .run_progress(run_id)
        .await
        .expect("progress reads")
        .expect("the run exists")
}

pub fn sorted(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable();
    ids
}
