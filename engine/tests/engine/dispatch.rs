//! The dispatch path end to end against real HTTP endpoints (`arbiter sim` in-process): runs
//! complete with every identity graded once, failures are retried and recorded, answers are
//! cached, an unreachable endpoint ends in a clear error state, and fair share holds.

use arbiter_domain::ids::{CheckpointId, EvalId, RunId};
use arbiter_domain::run::RunStatus;
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_sim::{SimConfig, SimFaults};
use arbiter_store::Store;
use arbiter_testkit::pipeline::*;
use std::collections::HashMap;

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");

fn fast_sim() -> SimConfig {
    SimConfig {
        latency_ms_min: 1,
        latency_ms_max: 5,
        ..SimConfig::demo()
    }
}

/// Uploads the sample and defines a 2-repetition eval on it.
async fn eval(store: &dyn Store, name: &str) -> EvalId {
    let revision = arbiter_engine::catalog::upload_dataset(store, "qa", "qa.jsonl", SAMPLE, None)
        .await
        .unwrap();
    arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: name.into(),
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
    .unwrap()
}

/// `arbiter_sim_faults_total` by fault, read from the simulator's `/metrics`.
async fn injected_faults(endpoint: &str) -> HashMap<String, u64> {
    let url = format!("{}/metrics", endpoint.trim_end_matches("/v1"));
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("arbiter_sim_faults_total{fault=\""))
        .filter_map(|rest| rest.split_once("\"} "))
        .map(|(fault, count)| (fault.to_string(), count.parse().unwrap()))
        .collect()
}

/// (case, repetition) → (outcome, output, verdict) of a run.
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

#[tokio::test]
async fn a_run_completes_with_every_identity_graded_once_and_reruns_come_from_the_cache() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim(fast_sim()).await;
    let eval_id = eval(store.as_ref(), "qa exact").await;
    let ckpt = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let run = launch(store.as_ref(), eval_id, ckpt).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w"))
        .await
        .remove(0);
    assert_eq!(progress.status, RunStatus::Completed, "{progress:?}");
    assert_eq!((progress.expected, progress.done), (120, 120));
    assert_eq!(progress.errors, 0);
    assert_eq!(progress.passed + progress.failed + progress.uncertain, 120);
    // ckpt-a is configured at 80% accuracy with 8% unparseable answers.
    assert!(
        progress.passed > 60 && progress.failed > 0 && progress.uncertain > 0,
        "{progress:?}"
    );
    assert_eq!(
        store.annotation_queue_counts().await.unwrap().open,
        progress.uncertain
    );
    assert_eq!(progress.from_cache, 0);

    // The same prompts and settings under another eval: answered from the cache at launch.
    let again = eval(store.as_ref(), "qa exact again").await;
    let rerun = launch(store.as_ref(), again, ckpt).await;
    let rerun_progress = arbiter_engine::runs::run_progress(store.as_ref(), rerun)
        .await
        .unwrap();
    assert_eq!(
        rerun_progress.status,
        RunStatus::Completed,
        "no worker was needed: {rerun_progress:?}"
    );
    assert_eq!(rerun_progress.from_cache, 120);
    assert_eq!(
        results(store.as_ref(), rerun).await,
        results(store.as_ref(), run).await
    );

    // A changed fingerprint (engine build) shares nothing with the cache.
    let rebuilt = checkpoint(
        store.as_ref(),
        "a-rebuilt",
        &endpoint,
        "sim-ckpt-a",
        "vllm 2",
    )
    .await;
    let fresh = launch(store.as_ref(), eval_id, rebuilt).await;
    let fresh_progress = arbiter_engine::runs::run_progress(store.as_ref(), fresh)
        .await
        .unwrap();
    assert_eq!(
        (fresh_progress.status.as_str(), fresh_progress.done),
        ("running", 0)
    );
}

/// An eval of 8,000 sums: four expansion chunks, so its launch plans for a while.
async fn sums_eval(store: &dyn Store) -> EvalId {
    let items: String = (0..8_000)
        .map(|i| {
            format!(
                "{{\"id\": \"c{i}\", \"input\": \"What is {i} + 1?\", \"target\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "sums",
        "sums.jsonl",
        items.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let form = arbiter_testkit::fixtures::eval_form("sums", revision.dataset_id, 1);
    arbiter_engine::catalog::define_eval(store, &form, None)
        .await
        .unwrap()
}

/// A run cancelled while its launch is still planning it stays cancelled, and the launch says
/// so (it used to report the run running, and wake a served checkpoint's servers for it).
#[tokio::test]
async fn a_run_cancelled_while_its_launch_plans_it_stays_cancelled() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim(fast_sim()).await;
    let eval_id = sums_eval(store.as_ref()).await;
    let ckpt = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let cancel_while_expanding = async {
        let expanding = async {
            loop {
                let runs = store.list_runs().await.unwrap();
                if let Some(run) = runs
                    .first()
                    .filter(|run| run.status == RunStatus::Expanding)
                {
                    return run.id;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        let run = tokio::time::timeout(std::time::Duration::from_secs(60), expanding)
            .await
            .expect("the run was never seen expanding");
        assert!(
            store
                .set_run_status(run, &[RunStatus::Expanding], RunStatus::Cancelled)
                .await
                .unwrap(),
            "the launch ended before the run could be cancelled while expanding"
        );
        run
    };
    let (launched, cancelled) = tokio::join!(
        arbiter_engine::runs::launch_run(
            store.as_ref(),
            eval_id,
            ckpt,
            arbiter_domain::run::Priority::Scheduled,
            "default",
            None,
        ),
        cancel_while_expanding,
    );
    let launched = launched.unwrap();
    assert_eq!(
        (launched.run_id, launched.status),
        (cancelled, RunStatus::Cancelled)
    );
    let progress = arbiter_engine::runs::run_progress(store.as_ref(), cancelled)
        .await
        .unwrap();
    assert_eq!(progress.status, RunStatus::Cancelled);
}

/// A worker already running while a run of four expansion chunks is launched answers its
/// first identities before the launch has planned the rest; the run completes with every
/// identity answered once and its tallies matching its rows.
#[tokio::test]
async fn a_run_is_worked_while_it_expands_and_completes_whole() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim(fast_sim()).await;
    let eval_id = sums_eval(store.as_ref()).await;
    let ckpt = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(arbiter_engine::dispatch::run_worker(
        store.clone(),
        test_worker("early"),
        shutdown,
    ));
    let run = launched(store.as_ref(), eval_id, ckpt).await.run_id;
    let at_launch = arbiter_engine::runs::run_progress(store.as_ref(), run)
        .await
        .unwrap();
    assert!(
        at_launch.done > 0,
        "the worker answered nothing while the run expanded: {at_launch:?}"
    );
    let progress = work_until_complete(store.clone(), &[run], test_worker("late"))
        .await
        .remove(0);
    stop.send(true).unwrap();
    worker.await.unwrap();
    assert_eq!(progress.status, RunStatus::Completed, "{progress:?}");
    assert_eq!(
        (progress.expected, progress.done, progress.errors),
        (8_000, 8_000, 0)
    );
    assert_eq!(
        progress.passed + progress.failed + progress.uncertain,
        8_000,
        "{progress:?}"
    );
    let rows = store.run_outcomes(run).await.unwrap();
    assert_eq!(rows.len(), 8_000);
    for (verdict, tally) in [
        ("pass", progress.passed),
        ("fail", progress.failed),
        ("uncertain", progress.uncertain),
    ] {
        let rows = rows.iter().filter(|row| row.verdict == verdict).count() as i64;
        assert_eq!(rows, tally, "{verdict}: the tallies match the rows");
    }
    assert!(progress.failed > 0, "{progress:?}");
}

#[tokio::test]
async fn injected_faults_are_retried_and_recorded_without_extra_samples() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let clean_endpoint = start_sim(fast_sim()).await;
    let faulty_endpoint = start_sim(SimConfig {
        faults: SimFaults {
            rate_500: 0.10,
            rate_429: 0.05,
            rate_timeout: 0.01,
            rate_malformed: 0.01,
            rate_truncate: 0.0,
        },
        ..fast_sim()
    })
    .await;
    let eval_id = eval(store.as_ref(), "qa exact").await;
    // Different engine builds keep the two runs from sharing cache entries.
    let clean = checkpoint(
        store.as_ref(),
        "clean",
        &clean_endpoint,
        "sim-ckpt-a",
        "clean",
    )
    .await;
    let faulty = checkpoint(
        store.as_ref(),
        "faulty",
        &faulty_endpoint,
        "sim-ckpt-a",
        "faulty",
    )
    .await;
    let clean_run = launch(store.as_ref(), eval_id, clean).await;
    let faulty_run = launch(store.as_ref(), eval_id, faulty).await;
    let mut config = test_worker("w");
    config.retry.max_attempts = 8;
    let progress = work_until_complete(store.clone(), &[clean_run, faulty_run], config).await;
    for run in &progress {
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(
            (run.expected, run.done),
            (120, 120),
            "exactly one result per identity"
        );
    }
    // Retries reached the same deterministic answers as the fault-free run.
    assert_eq!(
        results(store.as_ref(), faulty_run).await,
        results(store.as_ref(), clean_run).await
    );
    let faulty_rows = store.run_outcomes(faulty_run).await.unwrap();
    assert!(
        faulty_rows.iter().all(|row| row.outcome == "ok"),
        "every item ended with its answer"
    );
    // Every fault the simulator injected is recorded as a failed attempt on its identity, with
    // its category. (How many faults a run meets depends on how requests interleave, so the
    // test counts them at the simulator rather than expecting a rate.)
    let injected = injected_faults(&faulty_endpoint).await;
    let total: u64 = injected.values().sum();
    assert!(total > 0, "about 17% of requests fail: {injected:?}");
    let logs: Vec<serde_json::Value> = faulty_rows
        .iter()
        .filter_map(|row| row.attempt_log.as_deref())
        .map(|log| serde_json::from_str(log).unwrap())
        .collect();
    let failed_attempts: usize = logs.iter().map(|log| log.as_array().unwrap().len()).sum();
    assert_eq!(
        failed_attempts as u64, total,
        "{injected:?} against {logs:?}"
    );
    let log = serde_json::to_string(&logs).unwrap();
    for (fault, category) in [
        ("rate_limited", "rate_limited"),
        ("server_error", "server_error"),
    ] {
        if injected[fault] > 0 {
            assert!(log.contains(category), "{category} is recorded in: {log}");
        }
    }
    assert!(faulty_rows.iter().any(|row| row.attempts > 1));
    assert!(store
        .run_outcomes(clean_run)
        .await
        .unwrap()
        .iter()
        .all(|row| row.attempts == 1));
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
    let eval_id = eval(store.as_ref(), "qa exact").await;
    let ckpt = checkpoint(
        store.as_ref(),
        "gone",
        &format!("http://127.0.0.1:{port}/v1"),
        "nothing",
        "",
    )
    .await;
    let run = launch(store.as_ref(), eval_id, ckpt).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w"))
        .await
        .remove(0);
    assert_eq!(progress.status, RunStatus::Completed, "{progress:?}");
    assert_eq!(progress.errors, 120);
    assert_eq!(
        progress.passed + progress.failed + progress.uncertain,
        0,
        "errors are never graded"
    );
    assert_eq!(progress.error_mix, vec![("connect".to_string(), 120)]);
    let error = progress.last_error.expect("the error is explained");
    assert!(error.contains("could not connect"), "{error}");
    assert_eq!(store.annotation_queue_counts().await.unwrap().open, 0);
    // Errors are never cached: a relaunch under another eval finds nothing to reuse.
    let again = eval(store.as_ref(), "qa exact again").await;
    let rerun = launch(store.as_ref(), again, ckpt).await;
    assert_eq!(
        arbiter_engine::runs::run_progress(store.as_ref(), rerun)
            .await
            .unwrap()
            .done,
        0
    );
}

#[tokio::test]
async fn a_fallback_checkpoint_answers_when_the_primary_is_down() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim(fast_sim()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let eval_id = eval(store.as_ref(), "qa exact").await;
    checkpoint(store.as_ref(), "backup", &endpoint, "sim-ckpt-b", "").await;
    let form = CheckpointForm {
        name: "primary".into(),
        endpoint_url: format!("http://127.0.0.1:{port}/v1"),
        model: "sim-ckpt-a".into(),
        fallback_checkpoint: "backup".into(),
        ..CheckpointForm::default()
    };
    let primary = arbiter_engine::catalog::register_checkpoint(store.as_ref(), &form, None)
        .await
        .unwrap();
    let run = launch(store.as_ref(), eval_id, primary).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w"))
        .await
        .remove(0);
    assert_eq!((progress.done, progress.errors), (120, 0), "{progress:?}");
    let rows = store.run_outcomes(run).await.unwrap();
    assert!(rows
        .iter()
        .all(|row| row.fallback_used && row.model_used.as_deref() == Some("sim-ckpt-b")));
}

/// Two simulators slow enough for requests to overlap, registered as one checkpoint's endpoint
/// and replica: (endpoint, replica, checkpoint).
async fn replicated_checkpoint(store: &dyn Store) -> (String, String, CheckpointId) {
    let slow = SimConfig {
        latency_ms_min: 20,
        latency_ms_max: 30,
        ..SimConfig::demo()
    };
    let first = start_sim(slow.clone()).await;
    let second = start_sim(slow).await;
    let form = CheckpointForm {
        name: "replicated".into(),
        endpoint_url: first.clone(),
        model: "sim-ckpt-a".into(),
        replica_urls: second.clone(),
        ..CheckpointForm::default()
    };
    let checkpoint = arbiter_engine::catalog::register_checkpoint(store, &form, None)
        .await
        .unwrap();
    (first, second, checkpoint)
}

#[tokio::test]
async fn replicas_share_the_load() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let eval_id = eval(store.as_ref(), "qa exact").await;
    let (first, second, ckpt) = replicated_checkpoint(store.as_ref()).await;
    let run = launch(store.as_ref(), eval_id, ckpt).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w"))
        .await
        .remove(0);
    assert_eq!(progress.done, 120);
    let rows = store.run_outcomes(run).await.unwrap();
    let on_first = rows
        .iter()
        .filter(|row| row.served_by.as_deref() == Some(first.as_str()))
        .count();
    let on_second = rows
        .iter()
        .filter(|row| row.served_by.as_deref() == Some(second.as_str()))
        .count();
    assert_eq!(on_first + on_second, 120);
    assert!(
        on_first >= 30 && on_second >= 30,
        "least outstanding spreads the load: {on_first} / {on_second}"
    );
}

/// A simulator's prefix cache counters (vLLM's, in tokens): (looked up, found).
async fn prefix_cache(endpoint: &str) -> (f64, f64) {
    let url = format!("{}/metrics", endpoint.trim_end_matches("/v1"));
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    let sum = |metric: &str| arbiter_engine::dispatch::prometheus_sum(&text, metric).unwrap();
    (
        sum("vllm:prefix_cache_queries_total"),
        sum("vllm:prefix_cache_hits_total"),
    )
}

#[tokio::test]
async fn a_run_whose_prompts_share_a_long_start_keeps_to_one_replica_and_its_prefix_cache() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let (first, second, ckpt) = replicated_checkpoint(store.as_ref()).await;
    let revision =
        arbiter_engine::catalog::upload_dataset(store.as_ref(), "qa", "qa.jsonl", SAMPLE, None)
            .await
            .unwrap();
    // A long system prompt every request starts with, as few-shot exemplars would be.
    let guideline = "Read the question carefully, work it out step by step, and check the \
        result before you answer; give the final answer on a line of its own. ";
    let eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            name: "qa with instructions".into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Question: {input}".into(),
            max_tokens: 64,
            temperature: 0.0,
            repetitions: 2,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions {
                system_prompt: guideline.repeat(10),
                ..arbiter_engine::catalog::EvalOptions::default()
            },
        },
        None,
    )
    .await
    .unwrap();
    let run = launch(store.as_ref(), eval, ckpt).await;
    // Four requests at a time: below each replica's starting limit, so neither is saturated
    // and least outstanding alone would alternate between them.
    let mut worker = test_worker("w");
    worker.max_in_flight = 4;
    let progress = work_until_complete(store.clone(), &[run], worker)
        .await
        .remove(0);
    assert_eq!(progress.done, 120);
    let rows = store.run_outcomes(run).await.unwrap();
    let served = |url: &str| {
        rows.iter()
            .filter(|row| row.served_by.as_deref() == Some(url))
            .count()
    };
    let (on_first, on_second) = (served(&first), served(&second));
    assert_eq!(on_first + on_second, 120);
    assert!(
        on_first.max(on_second) == 120,
        "the shared prefix keeps the run on one replica while it has room: {on_first} / {on_second}"
    );
    let preferred = if on_first > on_second {
        &first
    } else {
        &second
    };
    let (queried, found) = prefix_cache(preferred).await;
    assert!(
        found / queried > 0.8,
        "its prefix cache holds the shared start: {found} of {queried} prompt tokens"
    );
}

#[tokio::test]
async fn a_retry_goes_to_another_replica_than_the_one_that_failed() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let live = start_sim(SimConfig {
        latency_ms_min: 20,
        latency_ms_max: 30,
        ..SimConfig::demo()
    })
    .await;
    // A replica whose server is gone: it refuses connections at once, so it always has the
    // fewest requests outstanding.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", listener.local_addr().unwrap())
    };
    let eval_id = eval(store.as_ref(), "qa exact").await;
    let form = CheckpointForm {
        name: "half-dead".into(),
        endpoint_url: live.clone(),
        model: "sim-ckpt-a".into(),
        replica_urls: dead.clone(),
        ..CheckpointForm::default()
    };
    let ckpt = arbiter_engine::catalog::register_checkpoint(store.as_ref(), &form, None)
        .await
        .unwrap();
    let run = launch(store.as_ref(), eval_id, ckpt).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w"))
        .await
        .remove(0);
    assert_eq!(
        (progress.done, progress.errors),
        (120, 0),
        "every request the dead replica refused was answered by the live one: {progress:?}"
    );
    let rows = store.run_outcomes(run).await.unwrap();
    assert!(rows
        .iter()
        .all(|row| row.served_by.as_deref() == Some(live.as_str())));
    assert!(
        rows.iter().any(|row| row.attempts > 1),
        "some requests were sent to the dead replica first"
    );
}
