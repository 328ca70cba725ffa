//! What the benchmarks share: the simulator as a child process, scratch databases on both
//! backends, the bench eval and checkpoints, memory and CPU readings, and percentiles.

use anyhow::{bail, Context};
use arbiter_domain::ids::{CheckpointId, EvalId};
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_store::Store;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A simulator child process, killed when dropped.
pub(crate) struct Sim {
    child: Child,
    pub(crate) base_url: String,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `arbiter sim` with `args` and waits until it answers.
pub(crate) async fn start_sim(args: &[&str]) -> anyhow::Result<Sim> {
    let port = free_port()?;
    let address = format!("127.0.0.1:{port}");
    let child = Command::new(std::env::current_exe()?)
        .args(["sim", "--addr", &address, "--model", "bench:1.0"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start arbiter sim")?;
    let sim = Sim {
        child,
        base_url: format!("http://{address}/v1"),
    };
    let client = reqwest::Client::new();
    for _ in 0..100 {
        if client
            .get(format!("http://{address}/health"))
            .send()
            .await
            .is_ok()
        {
            return Ok(sim);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("arbiter sim did not start on {address}")
}

/// Requests the simulator has received so far.
pub(crate) async fn sim_requests(sim: &Sim) -> anyhow::Result<u64> {
    let metrics = reqwest::get(format!("{}/metrics", sim.base_url.trim_end_matches("/v1")))
        .await?
        .text()
        .await?;
    arbiter_engine::dispatch::prometheus_sum(&metrics, "arbiter_sim_requests_total")
        .map(|total| total as u64)
        .context("the simulator reports no request counter")
}

/// A synthetic dataset: arithmetic questions, a `long_every`-th of them padded `long_factor`
/// times longer (0 for none).
pub(crate) fn dataset(items: usize, long_every: usize, long_factor: usize) -> Vec<u8> {
    let mut jsonl = Vec::with_capacity(items * 80);
    for index in 0..items {
        let mut input = format!("Question {index}: what is {} + {}?", index % 97, index % 89);
        if long_every > 0 && index % long_every == long_every / 2 {
            input = format!(
                "{} {input}",
                "Consider the following carefully.".repeat(long_factor)
            );
        }
        let line = serde_json::json!({"id": format!("case-{index:07}"), "input": input, "target": (index % 97 + index % 89).to_string()});
        jsonl.extend_from_slice(line.to_string().as_bytes());
        jsonl.push(b'\n');
    }
    jsonl
}

/// CPU seconds this process has used (user + system, all threads).
pub(crate) fn cpu_seconds() -> f64 {
    process_cpu_seconds("self")
}

/// CPU seconds (user and system) a process has used, by `/proc` entry (a pid, or `self`); 0
/// for one that is gone.
pub(crate) fn process_cpu_seconds(process: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{process}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line; clock ticks are 1/100 s on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds used by every process on this host whose command name is `name` (the
/// PostgreSQL server's backends, all named `postgres`).
pub(crate) fn cpu_seconds_named(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|byte| byte.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .map(|pid| process_cpu_seconds(&pid))
        .sum()
}

/// Peak, current, anonymous and file-backed resident memory of this process, in MiB.
pub fn memory_mib() -> (f64, f64, f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let read = |key: &str| {
        status
            .lines()
            .find(|line| line.starts_with(key))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (
        read("VmHWM:"),
        read("VmRSS:"),
        read("RssAnon:"),
        read("RssFile:"),
    )
}

/// Resets this process's peak resident memory (`VmHWM`) to its current size, so a later
/// [`memory_mib`] reports the peak of what ran since. Linux only; false where refused.
pub(crate) fn reset_peak_memory() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Creates an empty database named after `prefix` and this process on the server at
/// `admin_url` (dropping a leftover of the same name); returns its URL.
/// Stores `jsonl` as dataset `name` and defines eval `name` over it (prompt `{input}`, exact
/// match, one repetition); returns the eval's id. For benchmarks that record answers themselves.
pub(crate) async fn bench_eval(
    store: &dyn Store,
    name: &str,
    jsonl: &[u8],
) -> anyhow::Result<EvalId> {
    let parsed = arbiter_domain::dataset::parse_dataset_with_limit(
        jsonl,
        arbiter_domain::dataset::DatasetFormat::Jsonl,
        usize::MAX,
    )?;
    let revision = store
        .store_dataset_revision(name, "bench.jsonl", &parsed, None)
        .await?;
    drop(parsed);
    arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: name.into(),
            dataset_id: revision.dataset_id,
            prompt_template: "{input}".into(),
            max_tokens: 16,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("eval: {err}"))
}

/// A checkpoint whose endpoint nothing listens on: the benchmark records the answers itself.
pub(crate) async fn answerless_checkpoint(
    store: &dyn Store,
    name: &str,
    model: &str,
) -> anyhow::Result<CheckpointId> {
    arbiter_engine::catalog::register_checkpoint(
        store,
        &CheckpointForm {
            name: name.into(),
            endpoint_url: "http://127.0.0.1:9/v1".into(),
            model: model.into(),
            ..CheckpointForm::default()
        },
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("checkpoint: {err}"))
}

/// Runs `scenario` on a fresh SQLite file, then on a scratch PostgreSQL database when
/// `postgres_admin_url` is given (and says so when it is not).
pub(crate) async fn on_sqlite_then_postgres<F, Fut>(
    prefix: &str,
    postgres_admin_url: Option<String>,
    mut scenario: F,
) -> anyhow::Result<()>
where
    F: FnMut(&'static str, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let directory = tempfile::tempdir()?;
    let url = format!("sqlite://{}", directory.path().join("bench.db").display());
    scenario("SQLite", url).await?;
    match postgres_admin_url {
        Some(admin_url) => {
            let url = scratch_postgres(&admin_url, prefix).await?;
            scenario("PostgreSQL", url.clone()).await?;
            drop_scratch_postgres(&admin_url, &url).await?;
        }
        None => println!("(PostgreSQL skipped: set --database-url or ARBITER_TEST_POSTGRES_URL)"),
    }
    Ok(())
}

pub(crate) async fn scratch_postgres(admin_url: &str, prefix: &str) -> anyhow::Result<String> {
    use sqlx::Connection;
    let name = format!("{prefix}_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
        .execute(&mut admin)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await?;
    let (base, _) = admin_url
        .rsplit_once('/')
        .context("the PostgreSQL URL has no database name")?;
    Ok(format!("{base}/{name}"))
}

/// Drops a database made by [`scratch_postgres`], closing its connections.
pub(crate) async fn drop_scratch_postgres(admin_url: &str, url: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let (_, name) = url
        .rsplit_once('/')
        .context("the PostgreSQL URL has no database name")?;
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    Ok(())
}

/// The value at `quantile` of `values` (sorted in place), nearest rank; NaN when empty.
pub(crate) fn percentile(values: &mut [f64], quantile: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() - 1) as f64 * quantile).round() as usize;
    values[rank]
}
