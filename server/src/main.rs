//! The `arbiter` command: web server, standalone worker, simulator, demo, migrations and user
//! administration.

use arbiter_domain::ids::RunId;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

mod commands;

/// mimalloc: the dispatch path allocates many small short-lived buffers per request (HTTP
/// bodies, JSON, SQL arguments) across threads, where it beats the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "arbiter", version, about = "Run LLM evaluations at scale")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the web app (and, unless --workers 0, in-process workers).
    Serve(ServeArgs),
    /// Work the queue of a shared database (PostgreSQL) without serving pages.
    Worker(WorkerArgs),
    /// Serve a simulated OpenAI-compatible endpoint (for tests, benchmarks and the demo).
    Sim(SimArgs),
    /// Writes a synthetic benchmark dataset (used by `bench memory` in a child process).
    #[command(hide = true)]
    BenchDataset(BenchDatasetArgs),
    /// Run a dispatch benchmark against the simulator and print its figures.
    Bench(BenchArgs),
    /// Start the demo: fresh SQLite database, simulated checkpoints, demo accounts, two runs.
    Demo(DemoArgs),
    /// Serve a bundled GGUF model over the OpenAI API on CPU (needs the `local-model` build).
    Model(ModelArgs),
    /// Export runs' results (or, with `--labels`, their human labels): `--format csv|jsonl` to
    /// standard output or `--out FILE`; `--format parquet --out DIR` writes Hive-style
    /// partitions (`DIR/date=YYYY-MM-DD/checkpoint=NAME/run-ID.parquet`; labels as
    /// `DIR/labels/date=…/checkpoint=…/labels-ID.parquet`) for DuckDB, BigQuery or archives.
    Export(ExportArgs),
    /// Apply the retention policy now and print what it removed (`arbiter serve` does this
    /// every 6 hours). Export archives first: `arbiter export --format parquet`.
    Retention(RetentionArgs),
    /// Copy a SQLite database to a new file while it is in use (consistent, online). For
    /// PostgreSQL use `pg_dump --format=custom` and `pg_restore` (see the README).
    Backup(BackupArgs),
    /// Print a new ARBITER_SECRET_KEY (64 hex digits) for sealing endpoint API keys and webhook
    /// secrets; give the same key to every server and worker.
    Keygen,
    /// Re-seal every stored endpoint API key and webhook signing secret under a new
    /// ARBITER_SECRET_KEY, in one transaction. Give the new key as ARBITER_SECRET_KEY and the
    /// old one once, as ARBITER_OLD_SECRET_KEY (or --old-key); then restart every server and
    /// worker with the new key.
    Rekey(RekeyArgs),
    /// Apply database migrations and exit.
    Migrate(MigrateArgs),
    /// Manage datasets: `upload FILE --name NAME` streams a file of any size (within
    /// ARBITER_MAX_UPLOAD_MB and ARBITER_MAX_UPLOAD_ITEMS) into a new revision.
    Dataset(DatasetArgs),
    /// Import a peer's task: `lm-eval TASK.yaml` makes an lm-evaluation-harness task (its
    /// declarative part, with local data files) into datasets and one eval per filter;
    /// `inspect SAMPLES.jsonl` makes Inspect AI samples into a dataset and an eval.
    Import(ImportArgs),
    /// Contamination checks: `index --out FILE CORPUS…` builds the 13-gram index of training
    /// corpora (text, JSONL or its gzip form, Parquet) that an eval can name.
    Contamination(ContaminationArgs),
    /// Manage user accounts.
    User(UserArgs),
    /// Make, list or revoke personal API tokens (on the server's host; users can also make
    /// their own on the Account page).
    Token(TokenArgs),
    /// Launch a run through the REST API; with --wait, follow it, print its report and compare
    /// it with a baseline. Exit 0: no significant regression; 1: a significant regression;
    /// 2: an error; 3: timed out, or not COMPLETE with --require-complete.
    Submit(SubmitArgs),
    /// Follow a run until it finishes, then report as `submit --wait` does.
    Wait(WaitArgs),
    /// Print a run's report (and its comparison with a baseline) with `submit`'s exit statuses.
    Report(ReportCommandArgs),
    /// Manage teams (fair share between teams on shared endpoints).
    Team(TeamArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    #[arg(long, env = "ARBITER_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,
    /// The built site: pkg/ (wasm, js, css) and public files.
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,
    /// In-process worker loops; 0 when separate `arbiter worker` processes do the work.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Requests each worker keeps in flight.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// A directory of checkpoint announcements (one JSON file each) or a JSON Lines
    /// manifest a training job writes; each new checkpoint is registered and triggers its
    /// suites. Watch from one server per deployment.
    #[arg(long, env = "ARBITER_WATCH_CHECKPOINTS")]
    pub watch_checkpoints: Option<PathBuf>,
    /// Seconds between scans of --watch-checkpoints.
    #[arg(long, default_value_t = 10)]
    pub watch_seconds: u64,
    /// A launcher's settings (TOML: a local launcher's host, port range and each engine's
    /// command, or `kind = "kubernetes"` with a namespace and each engine's image): this
    /// process then starts and retires the servers of checkpoints registered with `serve`.
    #[arg(long, env = "ARBITER_LAUNCHERS")]
    pub launchers: Option<PathBuf>,
    #[command(flatten)]
    pub mail: MailArgs,
}

#[derive(clap::Args)]
pub struct WorkerArgs {
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Identities kept in flight by this process.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Seconds a claimed identity stays this worker's without a heartbeat; a killed
    /// worker's identities go back to the queue after this long.
    #[arg(long, default_value_t = 60)]
    pub lease_seconds: u64,
}

#[derive(clap::Args)]
pub struct SimArgs {
    #[arg(long, default_value = "127.0.0.1:8001")]
    pub addr: SocketAddr,
    /// `name:accuracy[:unparseable_rate]`, `judge:name` or `judge:name:low:high` (a calibrated
    /// judge, confidence drawn from [low, high)); repeat for several models.
    /// Without any, the demo's models are served.
    #[arg(long = "model")]
    pub models: Vec<String>,
    #[arg(long, default_value_t = 20)]
    pub latency_ms_min: u64,
    #[arg(long, default_value_t = 120)]
    pub latency_ms_max: u64,
    /// Fraction of requests answered 429 with Retry-After.
    #[arg(long, default_value_t = 0.0)]
    rate_429: f64,
    #[arg(long, default_value_t = 0.0)]
    rate_500: f64,
    #[arg(long, default_value_t = 0.0)]
    pub rate_timeout: f64,
    #[arg(long, default_value_t = 0.0)]
    pub rate_malformed: f64,
    #[arg(long, default_value_t = 0.0)]
    pub rate_truncate: f64,
    /// Requests served at once (a GPU server's batch slots); the rest queue.
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Extra delay per prompt byte, in microseconds (long prompts take longer).
    #[arg(long, default_value_t = 0)]
    pub latency_us_per_prompt_byte: u64,
    /// Demand this API key as a bearer token on /v1 routes, like vLLM's --api-key.
    #[arg(long, env = "ARBITER_SIM_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Read every prompt in full, with no prefix cache (its counters stay at zero).
    #[arg(long)]
    pub no_prefix_cache: bool,
}

#[derive(clap::Args)]
pub struct BenchDatasetArgs {
    #[arg(long)]
    pub database_url: String,
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub items: usize,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    #[arg(value_enum)]
    pub scenario: server::bench::Scenario,
    /// Items in the run (each scenario has its own default).
    #[arg(long)]
    pub items: Option<usize>,
    /// PostgreSQL server URL for the `postgres` scenario (a scratch database is created).
    #[arg(long, env = "ARBITER_TEST_POSTGRES_URL")]
    pub database_url: Option<String>,
    #[command(flatten)]
    pub endpoint: server::bench::EndpointArgs,
}

#[derive(clap::Args)]
pub struct DemoArgs {
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,
    #[arg(long, default_value = "127.0.0.1:8001")]
    pub sim_addr: SocketAddr,
    #[arg(long, default_value = ".arbiter-demo")]
    pub data_dir: PathBuf,
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,
    /// Seconds between rounds of the queue monitor (SLA escalation, alerts, email).
    #[arg(long, default_value_t = 30)]
    pub queue_monitor_seconds: u64,
    /// A real model (GGUF, from scripts/fetch-model) to serve beside the simulator: one
    /// more checkpoint and a judge. Missing file or a build without `local-model`: the
    /// demo says so and uses only the simulator.
    #[arg(long, env = "ARBITER_DEMO_GGUF")]
    pub model_gguf: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:8002")]
    pub model_addr: SocketAddr,
    /// HumanEval (`HumanEval.jsonl.gz`, from scripts/fetch-humaneval) to offer as a code
    /// suite beside the bundled code problems.
    #[arg(long, env = "ARBITER_DEMO_HUMANEVAL")]
    pub humaneval: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub action: ModelAction,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    /// Runs to export (repeat the flag or separate with commas).
    #[arg(long = "run", required = true, value_delimiter = ',')]
    pub runs: Vec<RunId>,
    #[arg(long, default_value = "csv")]
    pub format: String,
    /// A file (csv, jsonl; one run) or a folder (parquet).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Export the human labels on the runs' items, a row per label (rater, answers, rationale,
    /// time on task, gold, review, rubric and guidelines versions), instead of their results.
    #[arg(long)]
    pub labels: bool,
}

#[derive(clap::Args)]
pub struct RetentionArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    /// Set the policy first: days raw answers and logprobs are kept.
    #[arg(long, requires = "summary_days")]
    pub raw_days: Option<String>,
    /// Days a run's summaries (and the run) are kept.
    #[arg(long, requires = "raw_days")]
    pub summary_days: Option<String>,
}

#[derive(clap::Args)]
pub struct RekeyArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    /// The key the secrets are sealed with now (64 hex digits).
    #[arg(long, env = "ARBITER_OLD_SECRET_KEY", hide_env_values = true)]
    pub old_key: String,
    /// The key to seal them with (64 hex digits; `arbiter keygen` makes one).
    #[arg(long, env = "ARBITER_SECRET_KEY", hide_env_values = true)]
    pub new_key: String,
}

#[derive(clap::Args)]
pub struct BackupArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    /// The new file.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args)]
pub struct DatasetArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    #[command(subcommand)]
    pub action: DatasetAction,
}

#[derive(Subcommand)]
pub enum DatasetAction {
    /// Upload a file (JSONL, JSONL.gz, CSV, CSV.gz or Parquet, by its extension) as a new
    /// revision of the dataset; identical content returns the revision it already is.
    Upload {
        file: PathBuf,
        /// The dataset's name (a new dataset on first upload).
        #[arg(long)]
        name: String,
    },
}

#[derive(clap::Args)]
pub struct ContaminationArgs {
    #[command(subcommand)]
    pub action: ContaminationAction,
}

#[derive(Subcommand)]
pub enum ContaminationAction {
    /// Builds an n-gram index of the corpora: words lower-cased without punctuation, as the
    /// GPT-3 paper's decontamination; streams, in bounded memory. Prints its content hash.
    Index {
        /// The index file to write.
        #[arg(long)]
        out: PathBuf,
        /// Words per n-gram.
        #[arg(long, default_value_t = arbiter_domain::contamination::DEFAULT_NGRAM)]
        n: usize,
        /// Corpus files: plain text (one document), .jsonl / .jsonl.gz (a document per line,
        /// its strings), .parquet (a document per row).
        #[arg(required = true)]
        corpora: Vec<PathBuf>,
    },
}

#[derive(clap::Args)]
pub struct ImportArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    #[command(subcommand)]
    pub source: ImportSource,
}

#[derive(Subcommand)]
pub enum ImportSource {
    /// An lm-evaluation-harness task YAML (generate_until, multiple_choice or
    /// loglikelihood_rolling, dataset_path json|csv|parquet with
    /// local data_files). Keys it cannot express (`!function`, remote datasets) are refused
    /// by name, and nothing is stored.
    LmEval {
        task: PathBuf,
        /// Names the datasets and evals (default: the task's name).
        #[arg(long, default_value = "")]
        name: String,
        /// `completions` (base checkpoints, as `local-completions`) or `chat` (the same text
        /// as one user message).
        #[arg(long, default_value = "completions")]
        api: String,
        /// A loglikelihood_rolling task's window: lm-eval's `max_length` model argument (each
        /// request holds at most max_length - 1 token ids; default 2048, as lm-eval's).
        #[arg(long)]
        max_length: Option<u32>,
    },
    /// Inspect AI samples (JSONL: `input` a string or chat messages, `target`, `choices`,
    /// `id`, `metadata`): one dataset and one eval. With choices the letter chosen is graded,
    /// otherwise the final answer is matched exactly.
    Inspect {
        samples: PathBuf,
        /// Names the dataset and the eval (default: the file's name).
        #[arg(long, default_value = "")]
        name: String,
        /// The grader instead, as the eval form takes it (`normalised_match@1`, or JSON).
        #[arg(long)]
        grader: Option<String>,
        /// `chat` (default) or `completions`.
        #[arg(long, default_value = "chat")]
        api: String,
    },
}

#[derive(clap::Args)]
pub struct MigrateArgs {
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
}

#[derive(clap::Args)]
pub struct UserArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    #[command(subcommand)]
    pub action: UserAction,
}

#[derive(clap::Args)]
pub struct TokenArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(clap::Args)]
pub struct TeamArgs {
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
    pub database_url: String,
    #[command(subcommand)]
    pub action: TeamAction,
}

/// Email to leads and invited raters, and the queue monitor that sends alerts.
#[derive(clap::Args)]
pub struct MailArgs {
    /// Mail transport: smtp://user:password@host:587 (STARTTLS, required), smtps://…:465,
    /// smtp+cleartext://host:25 (a local relay without TLS, and without credentials),
    /// file:DIRECTORY (one .eml file per message) or log.
    #[arg(
        long = "mail",
        env = "ARBITER_MAIL",
        default_value = "log",
        hide_env_values = true
    )]
    pub transport: String,
    /// Sender of Arbiter's mail.
    #[arg(
        long,
        env = "ARBITER_MAIL_FROM",
        default_value = "Arbiter <arbiter@localhost>"
    )]
    pub mail_from: String,
    /// PEM file of the CA that signed the mail server's certificate, when it is not a public one.
    #[arg(long, env = "ARBITER_MAIL_CA_FILE")]
    pub mail_ca_file: Option<std::path::PathBuf>,
    /// Seconds between rounds of the queue monitor (SLA escalation, alerts, email); 0 turns it
    /// off (run one `arbiter serve` with it on when several share a database).
    #[arg(long, default_value_t = 60)]
    pub queue_monitor_seconds: u64,
}

#[derive(Subcommand)]
pub enum TokenAction {
    /// Make a token for a user and print it (shown only this once).
    Create {
        username: String,
        /// Where it is used, e.g. `nightly-ci`.
        #[arg(long)]
        name: String,
        /// Days until it expires (never, when absent).
        #[arg(long)]
        days: Option<i64>,
    },
    /// List tokens (never the tokens themselves).
    List,
    /// Revoke a token by id.
    Revoke { id: i64 },
}

#[derive(Subcommand)]
pub enum TeamAction {
    /// Set a team's fair-share weight (default 1): weights 2 and 1 split a contended
    /// endpoint two thirds to one third within a priority class.
    SetWeight { team: String, weight: f64 },
}

#[derive(Subcommand)]
pub enum UserAction {
    /// Create a user. The password is read from ARBITER_PASSWORD so it stays out of shell history.
    Create {
        username: String,
        /// annotator, reviewer, researcher, lead or admin.
        #[arg(long)]
        role: String,
        #[arg(long, env = "ARBITER_PASSWORD", hide_env_values = true)]
        password: String,
    },
    /// Put a user in a fair-share team (runs they launch share endpoints with other teams').
    SetTeam { username: String, team: String },
    /// Set a new password (from ARBITER_PASSWORD).
    ResetPassword {
        username: String,
        #[arg(long, env = "ARBITER_PASSWORD", hide_env_values = true)]
        password: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn,tower_sessions=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Retention(args) => commands::data::retention(args).await,
        Command::Backup(args) => commands::data::backup(args).await,
        Command::Keygen => commands::data::keygen(),
        Command::Rekey(args) => commands::data::rekey(args).await,
        Command::Submit(args) => commands::ci::exit_with(commands::ci::run_submit(&args).await),
        Command::Wait(args) => commands::ci::exit_with(commands::ci::run_wait(&args).await),
        Command::Report(args) => commands::ci::exit_with(commands::ci::run_report(&args).await),
        Command::Token(args) => commands::accounts::token(args).await,
        Command::Serve(args) => commands::serve::serve(args).await,
        Command::Worker(args) => commands::serve::worker(args).await,
        Command::BenchDataset(args) => commands::bench::bench_dataset(args).await,
        Command::Bench(args) => commands::bench::bench(args).await,
        Command::Sim(args) => commands::sim::sim(args).await,
        Command::Demo(args) => commands::demo::demo(args).await,
        Command::Model(args) => commands::model::run(args.action).await,
        Command::Export(args) => commands::data::export(args).await,
        Command::Dataset(args) => commands::data::dataset(args).await,
        Command::Import(args) => commands::data::import(args).await,
        Command::Contamination(args) => commands::data::contamination(args),
        Command::Migrate(args) => commands::data::migrate(args).await,
        Command::User(args) => commands::accounts::user(args).await,
        Command::Team(args) => commands::accounts::team(args).await,
    }
}

/// `arbiter model …`
#[derive(clap::Subcommand)]
pub enum ModelAction {
    /// Serve a GGUF model (Llama family, e.g. SmolLM2-135M-Instruct) over the OpenAI API on
    /// CPU: /v1/models, /v1/completions, /v1/chat/completions (streaming and not, with
    /// logprobs) and vLLM-style /metrics. `scripts/fetch-model` downloads the demo's model.
    Serve {
        /// The model file.
        #[arg(long)]
        gguf: PathBuf,
        /// Where to listen; port 0 picks a free port (printed at start-up).
        #[arg(long, default_value = "127.0.0.1:8002")]
        addr: SocketAddr,
        /// The model name clients ask for (default: the file name without `.gguf`).
        #[arg(long)]
        name: Option<String>,
        /// Generations that run at once; later requests wait in a queue.
        #[arg(long, default_value_t = 2)]
        parallel: usize,
        /// Prompt-prefix tokens whose reading is kept, so prompts that start alike (a judge's
        /// rubric, few-shot exemplars) skip reading them again; 0 keeps none. SmolLM2-135M
        /// holds about 46 KB per token.
        #[arg(long, default_value_t = commands::model::PREFIX_CACHE_TOKENS)]
        prefix_cache_tokens: usize,
    },
    /// Time the bundled model on this machine: load time, memory, prompt (prefill) tokens/s,
    /// and generated tokens/s with one and with two generations at once, through its HTTP API.
    Bench {
        #[arg(long)]
        gguf: PathBuf,
        /// Tokens each timed generation produces.
        #[arg(long, default_value_t = 128)]
        tokens: usize,
    },
}

/// Where the API is and who calls it.
#[derive(clap::Args, Clone, Debug)]
pub struct ApiArgs {
    /// The Arbiter server's URL.
    #[arg(long, env = "ARBITER_URL", default_value = "http://127.0.0.1:3000")]
    pub server: String,
    /// A personal API token (`arb_…`).
    #[arg(
        long,
        env = "ARBITER_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    pub token: String,
}

/// What to compare the run against.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct BaselineArgs {
    /// Compare against this run.
    #[arg(long, conflicts_with = "baseline_checkpoint")]
    pub baseline_run: Option<RunId>,
    /// Compare against the latest completed run of the same eval on this checkpoint.
    #[arg(long)]
    pub baseline_checkpoint: Option<String>,
}

impl BaselineArgs {
    fn baseline(&self) -> Option<server::ci::Baseline> {
        match (&self.baseline_run, &self.baseline_checkpoint) {
            (Some(run), _) => Some(server::ci::Baseline::Run(*run)),
            (None, Some(name)) => Some(server::ci::Baseline::Checkpoint(name.clone())),
            (None, None) => None,
        }
    }
}

/// How the report is shown and judged.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ReportArgs {
    /// Print JSON (the API's report and comparison) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Exit 3 unless every report involved is COMPLETE.
    #[arg(long)]
    pub require_complete: bool,
}

#[derive(clap::Args, Clone, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// A JSON manifest: {"eval": …, "checkpoint": …, "priority": …, "baseline": {"checkpoint": …}}
    /// (`eval_id`/`checkpoint_id` and `{"run": ID}` work too). Flags override it.
    #[arg(long)]
    pub manifest: Option<std::path::PathBuf>,
    /// The eval, by name.
    #[arg(long)]
    pub eval: Option<String>,
    /// The checkpoint, by name.
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// promotion, scheduled or ablation.
    #[arg(long)]
    pub priority: Option<String>,
    #[command(flatten)]
    pub baseline: BaselineArgs,
    /// Wait for the run to finish, then print its report (and comparison).
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many minutes (exit 3).
    #[arg(long, default_value_t = 120)]
    pub timeout_minutes: u64,
    #[command(flatten)]
    pub report: ReportArgs,
}

#[derive(clap::Args, Clone, Debug)]
pub struct WaitArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    pub run: RunId,
    #[arg(long, default_value_t = 120)]
    pub timeout_minutes: u64,
    #[command(flatten)]
    pub baseline: BaselineArgs,
    #[command(flatten)]
    pub report: ReportArgs,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ReportCommandArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    pub run: RunId,
    #[command(flatten)]
    pub baseline: BaselineArgs,
    #[command(flatten)]
    pub report: ReportArgs,
}
