//! `arbiter bench`: the dispatch benchmarks, each printing its figures.
//!
//! Every scenario drives the real pipeline (launch, streaming expansion, workers, the model
//! client, grading, batched commits) against `arbiter sim` started as a separate process, so
//! the CPU time reported is Arbiter's own. Build with `--release` for meaningful numbers.
//!
//! - [`pipeline`]: dispatch overhead, saturation, the long tail, memory, PostgreSQL, a real
//!   endpoint, triage and agreement;
//! - [`annotators`]: many annotators labelling at once;
//! - [`compare`]: comparing two million-identity runs;
//! - [`soak`]: the demo under mixed HTTP load;
//! - [`login_burst`]: sign-in bursts against the throttle and the bound on password checks;
//! - [`sandbox`]: code tests through the sandbox pool;
//! - [`likelihood`]: multiple choice scored by likelihood;
//! - [`contamination`]: indexing a corpus's 13-grams and checking items against it;
//! - [`preferences`]: the preference report (Bradley–Terry with bootstrap) over many pairs;
//! - [`support`]: what they share (the simulator process, scratch databases, fixtures,
//!   memory and CPU readings, percentiles).

pub mod annotators;
pub mod compare;
pub mod contamination;
pub mod instructions;
pub mod judge_batches;
pub mod likelihood;
pub mod login_burst;
pub mod pipeline;
pub mod preferences;
pub mod sandbox;
pub mod soak;
pub mod structured;
pub mod support;

use anyhow::Context;
use arbiter_store::Database;
use pipeline::{agreement, endpoint, long_tail, memory, overhead, postgres, saturation, triage};
use support::dataset;

/// One benchmark; `all` runs those that need nothing but this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Zero-latency simulator, SQLite: Arbiter's own cost per item; then the unchanged
    /// manifest's re-run, served from the cache.
    Overhead,
    /// 256 server slots at 100 ms per request: how close to 2,560 requests/s.
    Saturation,
    /// 1% of items 30 times longer: makespan against its lower bound, longest-first vs FIFO.
    LongTail,
    /// A 1,000,000-item run: the process's peak resident memory.
    Memory,
    /// 1,000,000 MMLU-style items (about 500 MB of JSONL) streamed in by `arbiter dataset
    /// upload`, then a templated chat eval defined and launched: time and peak memory of each.
    Structured,
    /// Three `arbiter worker` processes sharing one PostgreSQL.
    Postgres,
    /// Overhead (with re-run), saturation and long tail.
    All,
    /// A JSONL dataset (`--dataset`) against any OpenAI-compatible endpoint (`--endpoint`,
    /// `--model`): the same run a peer tool is timed on (`scripts/bench-peers`).
    Endpoint,
    /// The demo dataset through the demo's triage (exact match, cheap judge, strong judge,
    /// humans): the share decided at each stage and the cost against judging every answer with
    /// the strong judge.
    Triage,
    /// Agreement statistics (Krippendorff's alpha, Fleiss' kappa, percent agreement) over
    /// 1,000,000 labels: three raters per item, built up incrementally as labels arrive.
    Agreement,
    /// 200 simulated annotators against a 1,000,000-task queue (two raters per task), on
    /// SQLite and, with `--database-url`, PostgreSQL: claim latency and submissions per second.
    Annotators,
    /// Two 1,000,000-item runs on SQLite and, with `--database-url`, PostgreSQL: the
    /// comparison summary and the per-prompt diff's first page.
    Compare,
    /// The demo under a steady mixed load over HTTP (runs launched through the API,
    /// annotators, dashboard readers) for `--items` minutes (default 10): requests, errors,
    /// latencies and memory.
    Soak,
    /// `--items` (default 50) concurrent wrong passwords for one account, then ten times as many
    /// sign-ins from as many addresses: passwords checked, refused and turned away, and the
    /// peak resident memory of each burst.
    LoginBurst,
    /// `--items` (default 1,000) code test runs through the sandbox pool, half passing and
    /// half failing: tests per second and per-run latency, against the bare interpreter.
    Sandbox,
    /// `--items` (default 20,000) four-choice items scored by likelihood against the
    /// zero-latency simulator, then asked as a generated letter: items/s and the ratio.
    Likelihood,
    /// A 100 MB corpus indexed into 13-grams (MB/s), then `--items` (default 1,000,000)
    /// items checked against it (µs per item).
    Contamination,
    /// `--items` (default 200,000) answers checked against IFEval instructions, strictly and
    /// loosely: answers and instructions per second on one core.
    Instructions,
    /// The demo's answers judged twice by one judge (`--endpoint`/`--model`, else the demo's
    /// simulated judge), one answer per call and then `--batch` per call: calls, tokens, cost,
    /// time and agreement with the one-answer verdicts (`--items` repetitions, default 2).
    JudgeBatches,
    /// The preference report over `--items` (default 100,000) labelled pairs among 20
    /// checkpoints: Bradley–Terry ratings with bootstrap intervals, win rates, position bias.
    BradleyTerry,
}

/// Options of the `endpoint` scenario.
#[derive(Clone, Debug, clap::Args)]
pub struct EndpointArgs {
    /// Base URL of the OpenAI-compatible endpoint (`endpoint` scenario), e.g. http://127.0.0.1:8001/v1.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Model name served by `--endpoint`.
    #[arg(long, default_value = "bench")]
    pub model: String,
    /// JSONL dataset (`id`, `input`, `target` per line) for the `endpoint` scenario.
    #[arg(long)]
    pub dataset: Option<std::path::PathBuf>,
    /// Requests in flight (the endpoint's limit and the worker's).
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Answers per judge call in the `judge-batches` scenario.
    #[arg(long, default_value_t = 8)]
    pub batch: u32,
}

/// Writes a synthetic dataset into the database at `database_url` (the memory benchmark runs
/// this in a child process, so that parsing a million-line file is not counted as the run's
/// memory).
pub async fn write_dataset(database_url: &str, name: &str, items: usize) -> anyhow::Result<()> {
    let database = Database::open(database_url).await?;
    let parsed = arbiter_domain::dataset::parse_dataset_with_limit(
        &dataset(items, 0, 0),
        arbiter_domain::dataset::DatasetFormat::Jsonl,
        usize::MAX,
    )?;
    database
        .store()
        .store_dataset_revision(name, "bench.jsonl", &parsed, None)
        .await?;
    Ok(())
}

/// Runs a scenario (`items` overrides each scenario's default size).
pub async fn run(
    scenario: Scenario,
    items: Option<usize>,
    postgres_url: Option<String>,
    endpoint_options: EndpointArgs,
) -> anyhow::Result<()> {
    let warn_debug = cfg!(debug_assertions);
    if warn_debug {
        println!("note: this is a debug build; build with --release for meaningful figures");
    }
    match scenario {
        Scenario::Overhead => overhead(items.unwrap_or(100_000)).await,
        Scenario::Saturation => saturation(items.unwrap_or(25_600)).await,
        Scenario::LongTail => long_tail(items.unwrap_or(5_000)).await,
        Scenario::Memory => memory(items.unwrap_or(1_000_000)).await,
        Scenario::Structured => structured::structured(items.unwrap_or(1_000_000)).await,
        Scenario::Postgres => {
            let url = postgres_url.context(
                "set --database-url (or ARBITER_TEST_POSTGRES_URL) to a PostgreSQL server URL",
            )?;
            postgres(items.unwrap_or(100_000), &url).await
        }
        Scenario::Endpoint => endpoint(endpoint_options).await,
        Scenario::Triage => triage(items.unwrap_or(10)).await,
        Scenario::Annotators => {
            crate::bench::annotators::run(items.unwrap_or(1_000_000), postgres_url).await
        }
        Scenario::Compare => {
            crate::bench::compare::run(items.unwrap_or(1_000_000), postgres_url).await
        }
        Scenario::Soak => crate::bench::soak::run(items.unwrap_or(10) as u64).await,
        Scenario::LoginBurst => crate::bench::login_burst::run(items.unwrap_or(50)).await,
        Scenario::Sandbox => crate::bench::sandbox::run(items.unwrap_or(1_000)).await,
        Scenario::Likelihood => crate::bench::likelihood::likelihood(items.unwrap_or(20_000)).await,
        Scenario::Contamination => crate::bench::contamination::run(items.unwrap_or(1_000_000)),
        Scenario::JudgeBatches => {
            crate::bench::judge_batches::run(
                items.unwrap_or(2),
                crate::bench::judge_batches::JudgeUnderTest {
                    endpoint: endpoint_options
                        .endpoint
                        .clone()
                        .map(|url| (url, endpoint_options.model.clone())),
                    batch_items: endpoint_options.batch,
                },
            )
            .await
        }
        Scenario::Instructions => crate::bench::instructions::run(items.unwrap_or(200_000)),
        Scenario::Agreement => {
            agreement(items.unwrap_or(1_000_000));
            Ok(())
        }
        Scenario::BradleyTerry => {
            crate::bench::preferences::run(items.unwrap_or(100_000));
            Ok(())
        }
        Scenario::All => {
            overhead(items.unwrap_or(100_000)).await?;
            saturation(25_600).await?;
            long_tail(5_000).await
        }
    }
}
