//! The pipeline benchmarks: a run launched, expanded, answered by workers against the
//! simulator, graded and committed, measured for overhead, saturation, the long tail, memory,
//! PostgreSQL, a real endpoint, triage and agreement.

use super::support::{
    cpu_seconds, cpu_seconds_named, dataset, drop_scratch_postgres, memory_mib,
    process_cpu_seconds, scratch_postgres, sim_requests, start_sim, Sim,
};
use super::EndpointArgs;
use anyhow::{bail, Context};
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, RunId};
use arbiter_domain::run::{Priority, RunProgress};
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_engine::dispatch::{run_worker, WorkerConfig};
use arbiter_store::{Database, Store};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub(crate) struct Bench {
    pub(crate) store: Arc<dyn Store>,
    _directory: Option<tempfile::TempDir>,
}

/// What one benchmark run took and produced.
pub(crate) struct RunFigures {
    /// Seconds the launch (freezing and expansion) took.
    pub(crate) expansion: f64,
    /// Identities already finished when the launch returned: workers answer a run's first
    /// identities while its later ones are still being planned.
    pub(crate) done_at_launch: i64,
    /// Seconds from the start of the launch to the run's completion.
    pub(crate) elapsed: f64,
    /// Identities finished (all of them: a run that finishes fewer is an error).
    pub(crate) done: i64,
    /// Identities graded as passed.
    pub(crate) passed: i64,
    /// Identities that ended in an endpoint error.
    pub(crate) errors: i64,
    pub(crate) run_id: RunId,
}

impl Bench {
    /// A bench over a store whose scratch space the caller keeps.
    pub(crate) fn on(store: Arc<dyn Store>) -> Bench {
        Bench {
            store,
            _directory: None,
        }
    }

    pub(crate) async fn sqlite() -> anyhow::Result<Bench> {
        let directory = tempfile::tempdir()?;
        let url = format!("sqlite://{}", directory.path().join("bench.db").display());
        let database = Database::open(&url).await?;
        Ok(Bench {
            store: database.store(),
            _directory: Some(directory),
        })
    }

    /// Uploads a dataset and registers a checkpoint on `sim`; returns (dataset, checkpoint).
    pub(crate) async fn prepare(
        &self,
        sim: &Sim,
        name: &str,
        data: &[u8],
        max_in_flight: usize,
    ) -> anyhow::Result<(DatasetId, CheckpointId)> {
        let store = self.store.as_ref();
        // Straight into the store: benchmark datasets may exceed the browser upload limit.
        let parsed = arbiter_domain::dataset::parse_dataset_with_limit(
            data,
            arbiter_domain::dataset::DatasetFormat::Jsonl,
            usize::MAX,
        )?;
        let revision = store
            .store_dataset_revision(name, "bench.jsonl", &parsed, None)
            .await?;
        let checkpoint = self
            .register(&sim.base_url, "bench", name, max_in_flight)
            .await?;
        Ok((revision.dataset_id, checkpoint))
    }

    /// Registers `model` served at `base_url` as checkpoint `{name}-ckpt`.
    pub(crate) async fn register(
        &self,
        base_url: &str,
        model: &str,
        name: &str,
        max_in_flight: usize,
    ) -> anyhow::Result<CheckpointId> {
        let form = CheckpointForm {
            name: format!("{name}-ckpt"),
            endpoint_url: base_url.into(),
            model: model.into(),
            max_in_flight: max_in_flight.to_string(),
            ..CheckpointForm::default()
        };
        arbiter_engine::catalog::register_checkpoint(self.store.as_ref(), &form, None)
            .await
            .map_err(|err| anyhow::anyhow!("checkpoint: {err}"))
    }

    async fn define(&self, dataset_id: DatasetId, name: &str, seed: u64) -> anyhow::Result<EvalId> {
        arbiter_engine::catalog::define_eval(
            self.store.as_ref(),
            &EvalForm {
                name: name.into(),
                dataset_id,
                prompt_template: "Answer with a final line `Answer: <answer>`.\n\n{input}".into(),
                max_tokens: 32,
                temperature: 0.0,
                repetitions: 1,
                seed,
                grader: String::new(),
                options: arbiter_engine::catalog::EvalOptions::default(),
            },
            None,
        )
        .await
        .map_err(|err| anyhow::anyhow!("eval: {err}"))
    }

    /// Launches `eval` on `checkpoint`; returns the run and the seconds the launch (freezing
    /// and expansion) took.
    pub(crate) async fn launch(
        &self,
        eval: EvalId,
        checkpoint: CheckpointId,
    ) -> anyhow::Result<(RunId, f64)> {
        let started = Instant::now();
        let launched = arbiter_engine::runs::launch_run(
            self.store.as_ref(),
            eval,
            checkpoint,
            Priority::Scheduled,
            "bench",
            None,
        )
        .await
        .map_err(|err| anyhow::anyhow!("launch: {err}"))?;
        Ok((launched.run_id, started.elapsed().as_secs_f64()))
    }

    /// Launches `eval` on `checkpoint` and works it with in-process workers until complete;
    /// fails when any identity ended in an endpoint error (every benchmark endpoint but a
    /// real one answers every request).
    pub(crate) async fn run(
        &self,
        eval: EvalId,
        checkpoint: CheckpointId,
        config: WorkerConfig,
    ) -> anyhow::Result<RunFigures> {
        let figures = self.run_counting_errors(eval, checkpoint, config).await?;
        let progress = self
            .store
            .run_progress(figures.run_id)
            .await?
            .context("the run disappeared")?;
        require_answered(&progress)?;
        Ok(figures)
    }

    /// As [`Bench::run`], with endpoint errors counted in the figures instead.
    pub(crate) async fn run_counting_errors(
        &self,
        eval: EvalId,
        checkpoint: CheckpointId,
        config: WorkerConfig,
    ) -> anyhow::Result<RunFigures> {
        let store = self.store.clone();
        let (stop, shutdown) = watch::channel(false);
        let worker = tokio::spawn(run_worker(store.clone(), config, shutdown));
        let started = Instant::now();
        let (run_id, expansion) = self.launch(eval, checkpoint).await?;
        let done_at_launch = store
            .run_progress(run_id)
            .await?
            .map_or(0, |progress| progress.done);
        while !store.finish_run_if_done(run_id).await? {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let _ = stop.send(true);
        worker.await?;
        let progress = store
            .run_progress(run_id)
            .await?
            .context("the run disappeared")?;
        Ok(RunFigures {
            expansion,
            done_at_launch,
            elapsed,
            done: progress.expected,
            passed: progress.passed,
            errors: progress.errors,
            run_id,
        })
    }
}

/// Fails a benchmark whose run ended with errors: figures of refused or failed calls would
/// time the failures, not the pipeline.
fn require_answered(progress: &RunProgress) -> anyhow::Result<()> {
    if progress.errors > 0 {
        bail!(
            "run {}: {} of {} identities ended in an error, for example: {}",
            progress.id,
            progress.errors,
            progress.expected,
            progress
                .last_error
                .as_deref()
                .unwrap_or("(no message kept)")
        );
    }
    Ok(())
}

pub(crate) fn worker(name: &str, in_flight: usize) -> WorkerConfig {
    let mut config = WorkerConfig::named(name);
    config.max_in_flight = in_flight;
    config.idle_poll = Duration::from_millis(20);
    config
}

pub(crate) async fn overhead(items: usize) -> anyhow::Result<()> {
    println!("== overhead: {items} items, zero-latency simulator, SQLite");
    let sim = start_sim(&["--latency-ms-min", "0", "--latency-ms-max", "0"]).await?;
    let bench = Bench::sqlite().await?;
    let (dataset, checkpoint) = bench
        .prepare(&sim, "overhead", &dataset(items, 0, 0), 1024)
        .await?;
    let eval = bench.define(dataset, "overhead", 0).await?;
    let cpu_before = cpu_seconds();
    let RunFigures {
        expansion,
        done_at_launch,
        elapsed,
        done,
        ..
    } = bench
        .run(eval, checkpoint, worker("bench-overhead", 256))
        .await?;
    let cpu = cpu_seconds() - cpu_before;
    let requests = sim_requests(&sim).await?;
    println!("launch (planning {done} identities): {expansion:.2} s, {done_at_launch} of them answered meanwhile");
    println!(
        "launch to last result: {elapsed:.2} s  ->  {:.0} items/s end to end (target 10,000)",
        done as f64 / elapsed
    );
    // Before runs were worked while they expanded, this was the figure reported end to end
    // (every identity was then answered after the launch returned).
    if done_at_launch < done {
        println!(
            "after the launch returned: {} items in {:.2} s  ->  {:.0} items/s",
            done - done_at_launch,
            elapsed - expansion,
            (done - done_at_launch) as f64 / (elapsed - expansion)
        );
    }
    println!(
        "Arbiter CPU: {cpu:.2} s = {:.1} µs per item (the simulator runs in its own process)",
        cpu * 1e6 / done as f64
    );
    println!("endpoint calls: {requests}");

    println!("== re-run: the unchanged manifest under a new eval name, answered from the cache");
    let again = bench.define(dataset, "overhead-rerun", 0).await?;
    let RunFigures {
        expansion,
        elapsed,
        done,
        ..
    } = bench
        .run(again, checkpoint, worker("bench-rerun", 256))
        .await?;
    let calls = sim_requests(&sim).await? - requests;
    println!(
        "{done} identities in {elapsed:.2} s (of which the launch {expansion:.2} s)  ->  {:.0} items/s (target 50,000)",
        done as f64 / elapsed
    );
    println!("endpoint calls during the re-run: {calls} (target 0)");
    Ok(())
}

pub(crate) async fn saturation(items: usize) -> anyhow::Result<()> {
    let slots = 256;
    let latency_ms = 100;
    let ideal = slots as f64 * 1000.0 / latency_ms as f64;
    println!("== saturation: {items} items, simulator with {slots} slots at {latency_ms} ms (ideal {ideal:.0} requests/s)");
    let sim = start_sim(&[
        "--latency-ms-min",
        "100",
        "--latency-ms-max",
        "100",
        "--max-concurrency",
        "256",
    ])
    .await?;
    let bench = Bench::sqlite().await?;
    let (dataset, checkpoint) = bench
        .prepare(&sim, "saturation", &dataset(items, 0, 0), 512)
        .await?;
    let eval = bench.define(dataset, "saturation", 0).await?;
    // Sample the simulator's request counter while the run goes, for the sustained rate
    // between 10% and 90% of the requests (start-up and the last round excluded).
    let sampler = {
        let metrics_url = format!("{}/metrics", sim.base_url.trim_end_matches("/v1"));
        tokio::spawn(async move {
            let mut samples: Vec<(Instant, u64)> = Vec::new();
            loop {
                let count = async {
                    let text = reqwest::get(&metrics_url).await.ok()?.text().await.ok()?;
                    arbiter_engine::dispatch::prometheus_sum(&text, "arbiter_sim_requests_total")
                };
                if let Some(count) = count.await {
                    samples.push((Instant::now(), count as u64));
                    if count as usize >= items {
                        return samples;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let RunFigures { elapsed, done, .. } = bench
        .run(eval, checkpoint, worker("bench-saturation", 512))
        .await?;
    let samples = sampler.await?;
    let rate = done as f64 / elapsed;
    println!("{done} requests in {elapsed:.2} s  ->  {rate:.0} requests/s = {:.1}% of ideal, start-up included", 100.0 * rate / ideal);
    let crossing = |fraction: f64| {
        samples
            .iter()
            .find(|(_, count)| *count as f64 >= fraction * items as f64)
            .copied()
    };
    if let (Some((start, low)), Some((end, high))) = (crossing(0.1), crossing(0.9)) {
        let sustained = (high - low) as f64 / (end - start).as_secs_f64();
        println!("sustained (10% to 90% of requests): {sustained:.0} requests/s = {:.1}% of ideal (target 95%)", 100.0 * sustained / ideal);
    }
    Ok(())
}

pub(crate) async fn long_tail(items: usize) -> anyhow::Result<()> {
    let slots = 64;
    let us_per_byte = 300;
    println!("== long tail: {items} items, 1% thirty times longer, {slots} server slots, {us_per_byte} µs per prompt byte");
    let sim = start_sim(&[
        "--latency-ms-min",
        "0",
        "--latency-ms-max",
        "0",
        "--max-concurrency",
        "64",
        "--latency-us-per-prompt-byte",
        "300",
        // The bound below counts every prompt byte as read: the long items share a long
        // preamble, which a prefix cache would read once.
        "--no-prefix-cache",
    ])
    .await?;
    let bench = Bench::sqlite().await?;
    let data = dataset(items, 100, 30);
    // As with a real server, the endpoint limit sits above the server's batch slots so its
    // queue never runs dry; the queue-depth control keeps that queue short.
    let (dataset_id, checkpoint) = bench.prepare(&sim, "longtail", &data, slots * 2).await?;
    // The lower bound from the simulator's own delay model.
    let template_bytes = "Answer with a final line `Answer: <answer>`.\n\n".len();
    let mut total_ms = 0.0;
    let mut longest_ms: f64 = 0.0;
    for line in data
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
    {
        let item: serde_json::Value = serde_json::from_slice(line)?;
        let bytes = template_bytes + item["input"].as_str().unwrap_or_default().len();
        let ms = bytes as f64 * us_per_byte as f64 / 1000.0;
        total_ms += ms;
        longest_ms = longest_ms.max(ms);
    }
    let bound = (total_ms / slots as f64).max(longest_ms) / 1000.0;
    println!("lower bound max(total work / capacity, longest item) = max({:.2} s, {:.2} s) = {bound:.2} s", total_ms / slots as f64 / 1000.0, longest_ms / 1000.0);
    for (seed, longest_first) in [(1, false), (2, true)] {
        let eval = bench
            .define(dataset_id, &format!("longtail-{seed}"), seed)
            .await?;
        let mut config = worker(&format!("bench-longtail-{seed}"), slots * 4);
        config.longest_first = longest_first;
        let RunFigures {
            elapsed, expansion, ..
        } = bench.run(eval, checkpoint, config).await?;
        // The bound leaves planning out; the makespan after the launch returned is the figure
        // reported before runs were worked while they expand.
        println!(
            "{:<14} makespan from launch {elapsed:.2} s = {:.1}% over the bound (target within 10%); after the {expansion:.2} s launch {:.2} s = {:.1}% over",
            if longest_first {
                "longest-first"
            } else {
                "FIFO"
            },
            100.0 * (elapsed / bound - 1.0),
            elapsed - expansion,
            100.0 * ((elapsed - expansion) / bound - 1.0)
        );
    }
    Ok(())
}

pub(crate) async fn memory(items: usize) -> anyhow::Result<()> {
    println!("== memory: {items} items, zero-latency simulator, SQLite");
    let sim = start_sim(&["--latency-ms-min", "0", "--latency-ms-max", "0"]).await?;
    let directory = tempfile::tempdir()?;
    let url = format!("sqlite://{}", directory.path().join("bench.db").display());
    // The dataset is written by a child process: this process only launches and runs.
    let status = Command::new(std::env::current_exe()?)
        .args([
            "bench-dataset",
            "--database-url",
            &url,
            "--name",
            "memory",
            "--items",
            &items.to_string(),
        ])
        .env("RUST_LOG", "warn")
        .status()?;
    if !status.success() {
        bail!("writing the benchmark dataset failed");
    }
    let database = Database::open(&url).await?;
    let bench = Bench {
        store: database.store(),
        _directory: Some(directory),
    };
    let dataset_id = bench
        .store
        .list_datasets()
        .await?
        .first()
        .context("the dataset was not written")?
        .id;
    let checkpoint = bench
        .register(&sim.base_url, "bench", "memory", 1024)
        .await?;
    let eval = bench.define(dataset_id, "memory", 0).await?;
    let RunFigures {
        expansion,
        elapsed,
        done,
        ..
    } = bench
        .run(eval, checkpoint, worker("bench-memory", 256))
        .await?;
    let (peak, now, anonymous, file) = memory_mib();
    println!(
        "{done} identities in {elapsed:.1} s from launch, of which the launch {expansion:.1} s ({:.0} items/s)",
        done as f64 / elapsed
    );
    println!("peak RSS {peak:.0} MiB (target under 300); now {now:.0} MiB = {anonymous:.0} MiB anonymous + {file:.0} MiB file-backed");
    Ok(())
}

pub(crate) async fn postgres(items: usize, admin_url: &str) -> anyhow::Result<()> {
    println!("== PostgreSQL scale-out: {items} items, three `arbiter worker` processes");
    let url = scratch_postgres(admin_url, "arbiter_bench").await?;
    let sim = start_sim(&["--latency-ms-min", "0", "--latency-ms-max", "0"]).await?;
    let database = Database::open(&url).await?;
    let bench = Bench {
        store: database.store(),
        _directory: None,
    };
    let (dataset_id, checkpoint) = bench
        .prepare(&sim, "pg", &dataset(items, 0, 0), 1024)
        .await?;
    let eval = bench.define(dataset_id, "pg", 0).await?;
    let mut workers: Vec<Child> = (0..3)
        .map(|index| {
            Command::new(std::env::current_exe()?)
                .args(["worker", "--database-url", &url, "--concurrency", "256"])
                .env("RUST_LOG", "warn")
                // The simulator listens on loopback, which a worker refuses by default: without
                // this every item would be timed as a refused call, not an answer.
                .env(
                    arbiter_engine::clients::egress::EGRESS_ALLOW_VARIABLE,
                    "127.0.0.1",
                )
                .env("HOSTNAME", format!("bench-{index}"))
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    // PostgreSQL's CPU counts only when it runs on this host (its backends are `postgres`).
    let database_cpu_before = cpu_seconds_named("postgres");
    let bench_cpu_before = cpu_seconds();
    let started = Instant::now();
    let (run_id, expansion) = bench.launch(eval, checkpoint).await?;
    let done_at_launch = bench
        .store
        .run_progress(run_id)
        .await?
        .map_or(0, |progress| progress.done);
    while !bench.store.finish_run_if_done(run_id).await? {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let progress = bench
        .store
        .run_progress(run_id)
        .await?
        .context("the run disappeared")?;
    let worker_cpu: f64 = workers
        .iter()
        .map(|worker| process_cpu_seconds(&worker.id().to_string()))
        .sum();
    let database_cpu = cpu_seconds_named("postgres") - database_cpu_before;
    let launch_cpu = cpu_seconds() - bench_cpu_before;
    for worker in &mut workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    require_answered(&progress)?;
    println!("launch {expansion:.2} s ({done_at_launch} identities answered meanwhile); {items} items finished {elapsed:.2} s after launch started  ->  {:.0} items/s", items as f64 / elapsed);
    let per_item = |seconds: f64| seconds * 1e6 / items as f64;
    println!(
        "CPU per item: workers {:.1} µs, PostgreSQL {:.1} µs, launching process (expansion, polling) {:.1} µs; {:.2} of this host's cores busy",
        per_item(worker_cpu),
        per_item(database_cpu),
        per_item(launch_cpu),
        (worker_cpu + database_cpu + launch_cpu) / elapsed
    );
    drop(bench);
    drop(database);
    drop_scratch_postgres(admin_url, &url).await
}

/// The `endpoint` scenario: one dataset file, one endpoint, the whole pipeline (launch,
/// expansion, workers, grading, commits to SQLite), timed from launch to the last commit.
pub(crate) async fn endpoint(options: EndpointArgs) -> anyhow::Result<()> {
    let base_url = options
        .endpoint
        .context("the endpoint scenario needs --endpoint URL")?;
    let path = options
        .dataset
        .context("the endpoint scenario needs --dataset FILE.jsonl")?;
    let data = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let parsed = arbiter_domain::dataset::parse_dataset_with_limit(
        &data,
        arbiter_domain::dataset::DatasetFormat::Jsonl,
        usize::MAX,
    )?;
    let bench = Bench::sqlite().await?;
    let revision = bench
        .store
        .store_dataset_revision("endpoint", "bench.jsonl", &parsed, None)
        .await?;
    let checkpoint = bench
        .register(&base_url, &options.model, "endpoint", options.concurrency)
        .await?;
    let eval = bench.define(revision.dataset_id, "endpoint", 0).await?;
    let started = Instant::now();
    // A real endpoint may fail a few requests; they are counted, not fatal.
    let RunFigures {
        done,
        passed,
        errors,
        ..
    } = bench
        .run_counting_errors(
            eval,
            checkpoint,
            worker("bench-endpoint", options.concurrency),
        )
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "arbiter: {done} items in {seconds:.3} s -> {:.0} items/s, {passed} passed, {errors} endpoint errors (launch, generation, grading and commits; concurrency {})",
        done as f64 / seconds,
        options.concurrency
    );
    Ok(())
}

/// The demo's models, judges and triage policy on the demo dataset repeated `repetitions`
/// times; prints where items were decided and what the grading cost.
pub(crate) async fn triage(repetitions: usize) -> anyhow::Result<()> {
    use crate::demo::{demo_policy, DEMO_CHECKPOINTS, SAMPLE_DATASET};
    use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
    use arbiter_engine::grading::{self, JudgeForm};
    println!("== triage: the demo dataset x {repetitions} repetitions through the demo policy");
    let sim = start_sim(&[
        "--latency-ms-min",
        "0",
        "--latency-ms-max",
        "0",
        "--model",
        "sim-ckpt-a:0.8:0.08",
        "--model",
        "judge:sim-judge:0.6:1.0",
        "--model",
        "judge:sim-judge-strong:0.85:1.0",
    ])
    .await?;
    let bench = Bench::sqlite().await?;
    let store = bench.store.as_ref();
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "qa-basic",
        "qa-basic.jsonl",
        SAMPLE_DATASET,
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("dataset: {err}"))?;
    let mut checkpoints = std::collections::HashMap::new();
    for (name, model, input_price, output_price) in DEMO_CHECKPOINTS {
        let form = CheckpointForm {
            name: name.into(),
            endpoint_url: sim.base_url.clone(),
            model: model.into(),
            input_usd_per_mtok: input_price.into(),
            output_usd_per_mtok: output_price.into(),
            ..CheckpointForm::default()
        };
        let id = arbiter_engine::catalog::register_checkpoint(store, &form, None)
            .await
            .map_err(|err| anyhow::anyhow!("checkpoint: {err}"))?;
        checkpoints.insert(model, id);
    }
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: "triage".into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {input}".into(),
            max_tokens: 128,
            temperature: 0.0,
            repetitions: u32::try_from(repetitions)?,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("eval: {err}"))?;
    let mut judges = Vec::new();
    for (name, model) in [
        ("qa-judge", "sim-judge"),
        ("qa-judge-strong", "sim-judge-strong"),
    ] {
        let form = JudgeForm {
            name: name.into(),
            checkpoint_id: checkpoints[model],
            rubric: DEFAULT_RUBRIC.into(),
            max_tokens: 64,
            scale_rubric: String::new(),
            scale_dimension: String::new(),
            scale_pass_at_least: String::new(),
            pairwise: false,
            batch_items: 1,
        };
        judges.push(
            grading::define_judge(store, &form, None)
                .await
                .map_err(|err| anyhow::anyhow!("judge: {err}"))?,
        );
    }
    let policy = demo_policy(judges[0].id, judges[1].id);
    grading::save_policy(store, eval, &policy, None)
        .await
        .map_err(|err| anyhow::anyhow!("policy: {err}"))?;
    let figures = bench
        .run(eval, checkpoints["sim-ckpt-a"], worker("bench-triage", 256))
        .await?;
    let costs = store.run_costs(figures.run_id).await?;
    let items = figures.done as f64;
    let stage = |name: &str| {
        costs
            .decided_by
            .iter()
            .find(|(stage, _)| stage == name)
            .map_or(0, |(_, count)| *count)
    };
    let (cheap_calls, cheap_usd) = store.judge_usage(&judges[0].grader_id()).await?;
    let (strong_calls, strong_usd) = store.judge_usage(&judges[1].grader_id()).await?;
    let escalated = stage("pending");
    let audits = store.annotation_queue_counts().await?.open - escalated;
    let human_price: f64 = policy.human_usd_per_label.parse()?;
    let human_usd = (escalated + audits) as f64 * human_price;
    println!(
        "{} answers in {:.2} s from launch",
        figures.done, figures.elapsed
    );
    for (label, count) in [
        ("deterministic (exact match)", stage("deterministic")),
        ("cheap judge, accepted", stage("cheap_judge")),
        ("strong judge, accepted", stage("strong_judge")),
        ("humans (escalated)", escalated),
    ] {
        println!(
            "  decided by {label:<28} {count:>6}  {:>5.1}%",
            100.0 * count as f64 / items
        );
    }
    println!(
        "  audited by humans after acceptance {audits:>6}  ({:.1}% of judge-accepted)",
        100.0 * audits as f64 / (stage("cheap_judge") + stage("strong_judge")).max(1) as f64
    );
    println!(
        "judge calls: cheap {cheap_calls} (${cheap_usd:.5}), strong {strong_calls} (${strong_usd:.5}); \
         human labels to come: {} (${human_usd:.2} at ${human_price:.2} each)",
        escalated + audits
    );
    let strong_per_call = if strong_calls > 0 {
        strong_usd / strong_calls as f64
    } else {
        0.0
    };
    let grading_usd = cheap_usd + strong_usd + human_usd;
    let strong_everything = items * strong_per_call;
    let strong_on_judged = cheap_calls as f64 * strong_per_call;
    println!(
        "grading cost with triage: ${grading_usd:.4} (judges ${:.5} + humans ${human_usd:.2})",
        cheap_usd + strong_usd
    );
    println!(
        "strong judge on every answer: ${strong_everything:.4} ({:.0}x the judges' cost with triage); \
         on only the {cheap_calls} answers exact match left undecided: ${strong_on_judged:.5} ({:.1}x)",
        strong_everything / (cheap_usd + strong_usd).max(f64::MIN_POSITIVE),
        strong_on_judged / (cheap_usd + strong_usd).max(f64::MIN_POSITIVE),
    );
    Ok(())
}

/// Agreement over `labels` labels, three raters per item, 80% of them agreeing with the item's
/// truth: the time to fold every label into the accumulators and to read the statistics.
pub(crate) fn agreement(labels: usize) {
    use arbiter_domain::annotation::agreement::{
        FleissAccumulator, KrippendorffAccumulator, Level, Unit,
    };
    const RATERS: usize = 3;
    let items = labels / RATERS;
    println!(
        "== agreement: {} labels ({items} items x {RATERS} raters)",
        items * RATERS
    );
    // A stable stand-in for rater behaviour: a multiplicative hash of (item, rater) decides
    // who deviates from the truth.
    let label = |item: usize, rater: usize| -> bool {
        let truth = !item.is_multiple_of(3);
        let mixed = (item as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (rater as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let draw = (mixed ^ (mixed >> 29)).wrapping_mul(0x94D0_49BB_1331_11EB) >> 32;
        if draw % 10 < 2 {
            !truth
        } else {
            truth
        }
    };
    let units: Vec<Unit<bool>> = (0..items)
        .map(|item| {
            Unit::new(
                (0..RATERS)
                    .map(|rater| (rater as u64, label(item, rater)))
                    .collect(),
            )
        })
        .collect();
    let started = Instant::now();
    let mut alpha = KrippendorffAccumulator::new();
    let mut fleiss = FleissAccumulator::new();
    for unit in &units {
        if let Err(err) = alpha.add_unit(unit) {
            println!("error: {err}");
            return;
        }
        let ratings: Vec<bool> = unit.values().copied().collect();
        fleiss.add_item(&ratings);
    }
    let folded = started.elapsed();
    let alpha_value = alpha.report(Level::Nominal);
    let fleiss_value = fleiss.report();
    let total = started.elapsed();
    println!(
        "folded in {:.3} s, statistics read in {:.6} s: {:.3} s in all (target under 1 s)",
        folded.as_secs_f64(),
        (total - folded).as_secs_f64(),
        total.as_secs_f64()
    );
    println!(
        "alpha (nominal) {:?}, Fleiss' kappa {:?}, percent agreement {:?}",
        alpha_value.statistic.value(),
        fleiss_value.statistic.value(),
        alpha_value.percent_agreement
    );
    // The interval the run and queue pages show, at the largest set they still compute one
    // for, with the resample count they use there.
    let sample = &units[..units.len().min(25_000)];
    let resamples = arbiter_engine::annotation::agreement::bootstrap_resamples(sample.len());
    let started = Instant::now();
    let interval = arbiter_domain::annotation::agreement::bootstrap_ci(
        sample,
        Level::Nominal,
        resamples,
        0.95,
        7,
    );
    println!(
        "95% bootstrap interval over {} items {interval:?} from {resamples} resamples in {:.2} s",
        sample.len(),
        started.elapsed().as_secs_f64()
    );
    // A label changed later costs one unit out and one in, not a recount.
    let started = Instant::now();
    let changed = Unit::new(vec![(0, !label(0, 0)), (1, label(0, 1)), (2, label(0, 2))]);
    let _ = alpha.remove_unit(&units[0]);
    let _ = alpha.add_unit(&changed);
    let _ = alpha.report(Level::Nominal);
    println!(
        "one changed label, statistic updated in {:.1} µs",
        started.elapsed().as_secs_f64() * 1e6
    );
    rubric_dimensions(items, RATERS, label);
}

/// The same labels as rubric answers, through the code the run page, the queue page and the
/// alerts use (`agreement_of`: alpha at the dimension's level, Fleiss' kappa, Cohen's kappa per
/// rater pair, weighted over an ordinal scale): a five-point ordinal dimension and a numeric
/// one, one point (or half a unit) off where the rater's pass/fail label above deviates.
fn rubric_dimensions(items: usize, raters: usize, label: impl Fn(usize, usize) -> bool) {
    use arbiter_domain::annotation::agreement::{Level, Value};
    use arbiter_engine::annotation::agreement::{agreement_of, Rating};
    let names: Vec<String> = (0..raters).map(|rater| format!("rater{rater}")).collect();
    let ratings = |value: &dyn Fn(usize, bool) -> f64| -> Vec<Rating> {
        (0..items)
            .flat_map(|item| (0..raters).map(move |rater| (item, rater)))
            .map(|(item, rater)| {
                // The rater deviates where their pass/fail label above differs from the truth.
                let off = label(item, rater) == item.is_multiple_of(3);
                Rating {
                    item: item as i64,
                    rater: rater as i64,
                    rater_name: names[rater].clone(),
                    value: Value::Number(value(item, off)),
                }
            })
            .collect()
    };
    let point = |item: usize, off: bool| (item % 5 + 1) as f64 + if off { 1.0 } else { 0.0 };
    let score = |item: usize, off: bool| (item % 7) as f64 + if off { 0.5 } else { 0.0 };
    let scale: Vec<Value> = (1..=6).map(|point| Value::Number(point as f64)).collect();
    for (name, level, values, scale) in [
        (
            "helpful (ordinal, 5+1 points)",
            Level::Ordinal,
            ratings(&point),
            Some(scale.as_slice()),
        ),
        ("score (interval)", Level::Interval, ratings(&score), None),
    ] {
        let started = Instant::now();
        match agreement_of(&values, name, level, scale, None) {
            Ok(report) => println!(
                "dimension {name}: {} labels in {:.3} s (target under 1 s): alpha {:?}, {} rater pairs",
                report.labels,
                started.elapsed().as_secs_f64(),
                report.alpha.statistic.value(),
                report.pairs.len()
            ),
            Err(err) => println!("dimension {name}: error: {err}"),
        }
    }
}
