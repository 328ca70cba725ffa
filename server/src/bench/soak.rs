//! `arbiter bench soak`: the demo under a steady mixed load for a while on loopback, over HTTP
//! like real users: a researcher launching a run every 30 s through the REST API, two
//! annotators labelling in the browser's way (server functions with a session), and four
//! dashboard readers opening pages, reports, comparisons and `/metrics`. It prints requests,
//! errors and latencies by kind, resident memory over time, and the work done; it fails on any
//! server error.

use crate::demo;
use anyhow::{bail, Context};
use arbiter_domain::ids::{DatasetId, RunId};
use arbiter_domain::run::RunStatus;
use arbiter_engine::clients::mail::Mailer;
use arbiter_engine::dispatch::WorkerConfig;
use arbiter_engine::jobs::{Jobs, JobsConfig};
use arbiter_sim::SimConfig;
use arbiter_store::{Database, Store};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ANNOTATORS: [(&str, &str); 2] = [
    ("annotator1", "annotator1-demo-pass"),
    ("annotator2", "annotator2-demo-pass"),
];
const READERS: usize = 4;
const LAUNCH_EVERY: Duration = Duration::from_secs(30);
const MEMORY_EVERY: Duration = Duration::from_secs(10);

/// Latencies (ms) and failures per kind of request.
#[derive(Default)]
struct Tally {
    latencies: BTreeMap<&'static str, Vec<f64>>,
    failures: BTreeMap<&'static str, Vec<String>>,
}

type Shared = Arc<Mutex<Tally>>;

fn note(tally: &Shared, kind: &'static str, started: Instant, outcome: Result<(), String>) {
    let mut tally = tally
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    tally
        .latencies
        .entry(kind)
        .or_default()
        .push(started.elapsed().as_secs_f64() * 1e3);
    if let Err(problem) = outcome {
        tally.failures.entry(kind).or_default().push(problem);
    }
}

async fn checked(response: Result<reqwest::Response, reqwest::Error>) -> Result<String, String> {
    let response = response.map_err(|err| format!("request failed: {err}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|err| format!("body: {err}"))?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!(
            "HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        ))
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

async fn login(base: &str, username: &str, password: &str) -> anyhow::Result<reqwest::Client> {
    let client = client();
    let response = client
        .post(format!("{base}/login"))
        .header("accept", "application/json")
        .form(&[("username", username), ("password", password)])
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("{username} could not sign in: HTTP {}", response.status());
    }
    Ok(client)
}

async fn annotator(
    base: String,
    client: reqwest::Client,
    tally: Shared,
    until: Instant,
    seed: u64,
) {
    let mut draw = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while Instant::now() < until {
        let started = Instant::now();
        let task = checked(client.post(format!("{base}/api/next_task")).send().await).await;
        let handle = task
            .as_ref()
            .ok()
            .and_then(|body| serde_json::from_str::<serde_json::Value>(body).ok())
            .and_then(|value| value["handle"].as_str().map(str::to_string));
        note(&tally, "annotator: next task", started, task.map(|_| ()));
        draw ^= draw << 13;
        draw ^= draw >> 7;
        draw ^= draw << 17;
        let think = Duration::from_millis(1_000 + draw % 2_000);
        tokio::time::sleep(think).await;
        if let Some(handle) = handle {
            let started = Instant::now();
            let verdict = if draw.is_multiple_of(5) {
                "fail"
            } else {
                "pass"
            };
            let outcome = checked(
                client
                    .post(format!("{base}/api/submit_label"))
                    .form(&[
                        ("handle", handle),
                        ("verdict", verdict.to_string()),
                        ("rationale", String::new()),
                    ])
                    .send()
                    .await,
            )
            .await;
            note(
                &tally,
                "annotator: submit label",
                started,
                outcome.map(|_| ()),
            );
        }
    }
}

async fn reader(
    base: String,
    client: reqwest::Client,
    token: String,
    tally: Shared,
    until: Instant,
    index: usize,
) {
    let mut round = index;
    while Instant::now() < until {
        round += 1;
        let started = Instant::now();
        let listed = checked(
            client
                .get(format!("{base}/api/v1/runs"))
                .bearer_auth(&token)
                .send()
                .await,
        )
        .await;
        let runs: Vec<RunId> = listed
            .as_ref()
            .ok()
            .and_then(|body| {
                serde_json::from_str::<Vec<arbiter_domain::run::RunSummary>>(body).ok()
            })
            .map(|runs| runs.into_iter().map(|run| run.id).collect())
            .unwrap_or_default();
        note(&tally, "reader: API runs list", started, listed.map(|_| ()));
        let latest = runs.iter().max().copied().unwrap_or(RunId(1));
        let (kind, request): (&'static str, reqwest::RequestBuilder) = match round % 6 {
            0 => ("reader: runs page", client.get(format!("{base}/runs"))),
            1 => (
                "reader: run page",
                client.get(format!("{base}/runs/{latest}")),
            ),
            2 => ("reader: system page", client.get(format!("{base}/system"))),
            3 => (
                "reader: API report",
                client
                    .get(format!("{base}/api/v1/runs/{latest}/report"))
                    .bearer_auth(&token),
            ),
            4 => (
                "reader: API compare",
                client
                    .get(format!("{base}/api/v1/compare?baseline=1&candidates=2"))
                    .bearer_auth(&token),
            ),
            _ => (
                "reader: /metrics",
                client.get(format!("{base}/metrics")).bearer_auth(&token),
            ),
        };
        let started = Instant::now();
        let outcome = checked(request.send().await).await.map(|_| ());
        note(&tally, kind, started, outcome);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn launcher(
    base: String,
    token: String,
    dataset_id: DatasetId,
    tally: Shared,
    until: Instant,
) -> usize {
    let http = client();
    let mut launched = 0;
    let mut index = 0;
    while Instant::now() < until {
        index += 1;
        let started = Instant::now();
        let eval = checked(
            http.post(format!("{base}/api/v1/evals"))
                .bearer_auth(&token)
                .json(&serde_json::json!({
                    "name": format!("soak-{index}"),
                    "dataset_id": dataset_id,
                    "prompt_template": "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {input}",
                    "max_tokens": 128,
                    "repetitions": 2,
                    "seed": index,
                }))
                .send()
                .await,
        )
        .await;
        note(
            &tally,
            "researcher: define eval",
            started,
            eval.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        if eval.is_ok() {
            let started = Instant::now();
            let run = checked(
                http.post(format!("{base}/api/v1/runs"))
                    .bearer_auth(&token)
                    .json(&serde_json::json!({"eval": format!("soak-{index}"), "checkpoint": "simulator/ckpt-a"}))
                    .send()
                    .await,
            )
            .await;
            launched += usize::from(run.is_ok());
            note(&tally, "researcher: launch run", started, run.map(|_| ()));
        }
        tokio::time::sleep(LAUNCH_EVERY).await;
    }
    launched
}

pub async fn run(minutes: u64) -> anyhow::Result<()> {
    println!("== soak: the demo under mixed load for {minutes} min on loopback (SQLite)");
    let directory = tempfile::tempdir()?;
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sim_url = format!("http://{}/v1", sim_listener.local_addr()?);
    tokio::spawn(arbiter_sim::serve(SimConfig::demo(), sim_listener));
    let database = Database::open(&format!(
        "sqlite://{}",
        directory.path().join("soak.db").display()
    ))
    .await?;
    let store: Arc<dyn Store> = database.store();
    demo::seed(store.as_ref(), &sim_url, None).await?;
    let dataset_id = store.list_datasets().await?[0].id;
    let researcher = store
        .find_user_credentials("researcher")
        .await?
        .context("the demo researcher")?
        .user;
    let (_, token) = arbiter_engine::accounts::api_tokens::create_token(
        store.as_ref(),
        &researcher,
        "soak",
        None,
        arbiter_store::now_ms(),
    )
    .await?;

    // The server as `arbiter serve` runs it: workers, monitor, snapshot warmer, webhooks.
    let mailer = Arc::new(Mailer::log_only());
    let jobs = Jobs::start(
        store.clone(),
        JobsConfig {
            workers: vec![WorkerConfig::named("soak:0")],
            queue_monitor: Some(Duration::from_secs(15)),
            retention: None,
            ..JobsConfig::server(
                mailer.clone(),
                arbiter_engine::secrets::SecretBox::without_key(),
            )
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = crate::http::router(
        &database,
        crate::http::leptos_options("target/site", listener.local_addr()?),
        mailer,
    )
    .await?;
    let server = tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await;
    });

    let started = Instant::now();
    let until = started + Duration::from_secs(minutes * 60);
    let tally: Shared = Arc::default();
    let mut load = Vec::new();
    for (index, (username, password)) in ANNOTATORS.into_iter().enumerate() {
        let session = login(&base, username, password).await?;
        load.push(tokio::spawn(annotator(
            base.clone(),
            session,
            tally.clone(),
            until,
            index as u64 + 1,
        )));
    }
    for index in 0..READERS {
        let session = login(&base, "lead", "lead-demo-pass").await?;
        load.push(tokio::spawn(reader(
            base.clone(),
            session,
            token.clone(),
            tally.clone(),
            until,
            index,
        )));
    }
    let launches = tokio::spawn(launcher(
        base.clone(),
        token.clone(),
        dataset_id,
        tally.clone(),
        until,
    ));

    let mut memory = Vec::new();
    while Instant::now() < until {
        let (_, rss, _, _) = crate::bench::support::memory_mib();
        memory.push((started.elapsed().as_secs(), rss));
        tokio::time::sleep(MEMORY_EVERY.min(until.saturating_duration_since(Instant::now()))).await;
    }
    for task in load {
        task.await?;
    }
    let launched = launches.await?;
    let elapsed = started.elapsed().as_secs_f64();

    let runs = store.list_runs().await?;
    let identities: i64 = runs.iter().map(|run| run.done_count).sum();
    let completed = runs
        .iter()
        .filter(|run| run.status == RunStatus::Completed)
        .count();
    let labels = store.annotation_queue_counts().await?;
    let mut tally = std::mem::take(
        &mut *tally
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    println!(
        "{:<28} {:>8} {:>9} {:>9} {:>9}",
        "requests", "count", "p50 ms", "p99 ms", "failed"
    );
    let mut failures = 0;
    for (kind, latencies) in tally.latencies.iter_mut() {
        let failed = tally.failures.get(kind).map_or(0, Vec::len);
        failures += failed;
        println!(
            "{kind:<28} {:>8} {:>9.1} {:>9.1} {failed:>9}",
            latencies.len(),
            crate::bench::support::percentile(latencies, 0.5),
            crate::bench::support::percentile(latencies, 0.99)
        );
    }
    let after_warm_up: Vec<f64> = memory
        .iter()
        .filter(|(at, _)| *at >= 60)
        .map(|(_, rss)| *rss)
        .collect();
    let first = after_warm_up.first().copied().unwrap_or(f64::NAN);
    let last = after_warm_up.last().copied().unwrap_or(f64::NAN);
    let peak = memory.iter().map(|(_, rss)| *rss).fold(0.0, f64::max);
    println!(
        "resident memory: {:.0} MiB after the first minute, {:.0} MiB at the end, peak {:.0} MiB (sampled every {} s)",
        first,
        last,
        peak,
        MEMORY_EVERY.as_secs()
    );
    println!(
        "work: {launched} runs launched through the API, {} runs in all ({completed} completed), {identities} identities answered, {} human tasks done, in {elapsed:.0} s",
        runs.len(),
        labels.done
    );
    server.abort();
    jobs.stop().await?;
    for (kind, problems) in &tally.failures {
        for problem in problems.iter().take(3) {
            println!("  failure in {kind}: {problem}");
        }
    }
    if failures > 0 {
        bail!("{failures} request(s) failed under load");
    }
    Ok(())
}
