//! The `arbiter` command: web server, standalone worker, simulator, demo, migrations and user
//! administration.

use anyhow::Context;
use arbiter_domain::accounts::Role;
use arbiter_engine::clients::mail::Mailer;
use arbiter_engine::dispatch::{run_worker, WorkerConfig};
use arbiter_engine::jobs::{Jobs, JobsConfig};
use arbiter_sim::{SimConfig, SimFaults, SimModel};
use arbiter_store::Database;
use clap::{Parser, Subcommand};
use server::{demo, web};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

mod local_model;

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
    Serve {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        #[arg(long, env = "ARBITER_ADDR", default_value = "127.0.0.1:3000")]
        addr: SocketAddr,
        /// The built site: pkg/ (wasm, js, css) and public files.
        #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
        site_root: String,
        /// In-process worker loops; 0 when separate `arbiter worker` processes do the work.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Requests each worker keeps in flight.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// A directory of checkpoint announcements (one JSON file each) or a JSON Lines
        /// manifest a training job writes; each new checkpoint is registered and triggers its
        /// suites. Watch from one server per deployment.
        #[arg(long, env = "ARBITER_WATCH_CHECKPOINTS")]
        watch_checkpoints: Option<PathBuf>,
        /// Seconds between scans of --watch-checkpoints.
        #[arg(long, default_value_t = 10)]
        watch_seconds: u64,
        #[command(flatten)]
        mail: MailArgs,
    },
    /// Work the queue of a shared database (PostgreSQL) without serving pages.
    Worker {
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
        /// Identities kept in flight by this process.
        #[arg(long, default_value_t = 256)]
        concurrency: usize,
        /// Seconds a claimed identity stays this worker's without a heartbeat; a killed
        /// worker's identities go back to the queue after this long.
        #[arg(long, default_value_t = 60)]
        lease_seconds: u64,
    },
    /// Serve a simulated OpenAI-compatible endpoint (for tests, benchmarks and the demo).
    Sim {
        #[arg(long, default_value = "127.0.0.1:8001")]
        addr: SocketAddr,
        /// `name:accuracy[:unparseable_rate]`, `judge:name` or `judge:name:low:high` (a calibrated
        /// judge, confidence drawn from [low, high)); repeat for several models.
        /// Without any, the demo's models are served.
        #[arg(long = "model")]
        models: Vec<String>,
        #[arg(long, default_value_t = 20)]
        latency_ms_min: u64,
        #[arg(long, default_value_t = 120)]
        latency_ms_max: u64,
        /// Fraction of requests answered 429 with Retry-After.
        #[arg(long, default_value_t = 0.0)]
        rate_429: f64,
        #[arg(long, default_value_t = 0.0)]
        rate_500: f64,
        #[arg(long, default_value_t = 0.0)]
        rate_timeout: f64,
        #[arg(long, default_value_t = 0.0)]
        rate_malformed: f64,
        #[arg(long, default_value_t = 0.0)]
        rate_truncate: f64,
        /// Requests served at once (a GPU server's batch slots); the rest queue.
        #[arg(long)]
        max_concurrency: Option<usize>,
        /// Extra delay per prompt byte, in microseconds (long prompts take longer).
        #[arg(long, default_value_t = 0)]
        latency_us_per_prompt_byte: u64,
        /// Demand this API key as a bearer token on /v1 routes, like vLLM's --api-key.
        #[arg(long, env = "ARBITER_SIM_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
    },
    /// Writes a synthetic benchmark dataset (used by `bench memory` in a child process).
    #[command(hide = true)]
    BenchDataset {
        #[arg(long)]
        database_url: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        items: usize,
    },
    /// Run a dispatch benchmark against the simulator and print its figures.
    Bench {
        #[arg(value_enum)]
        scenario: server::bench::Scenario,
        /// Items in the run (each scenario has its own default).
        #[arg(long)]
        items: Option<usize>,
        /// PostgreSQL server URL for the `postgres` scenario (a scratch database is created).
        #[arg(long, env = "ARBITER_TEST_POSTGRES_URL")]
        database_url: Option<String>,
        #[command(flatten)]
        endpoint: server::bench::EndpointArgs,
    },
    /// Start the demo: fresh SQLite database, simulated checkpoints, demo accounts, two runs.
    Demo {
        #[arg(long, default_value = "127.0.0.1:3000")]
        addr: SocketAddr,
        #[arg(long, default_value = "127.0.0.1:8001")]
        sim_addr: SocketAddr,
        #[arg(long, default_value = ".arbiter-demo")]
        data_dir: PathBuf,
        #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
        site_root: String,
        /// Seconds between rounds of the queue monitor (SLA escalation, alerts, email).
        #[arg(long, default_value_t = 30)]
        queue_monitor_seconds: u64,
        /// A real model (GGUF, from scripts/fetch-model) to serve beside the simulator: one
        /// more checkpoint and a judge. Missing file or a build without `local-model`: the
        /// demo says so and uses only the simulator.
        #[arg(long, env = "ARBITER_DEMO_GGUF")]
        model_gguf: Option<PathBuf>,
        #[arg(long, default_value = "127.0.0.1:8002")]
        model_addr: SocketAddr,
    },
    /// Serve a bundled GGUF model over the OpenAI API on CPU (needs the `local-model` build).
    Model {
        #[command(subcommand)]
        action: local_model::ModelAction,
    },
    /// Export runs' results: `--format csv|jsonl` to standard output or `--out FILE`;
    /// `--format parquet --out DIR` writes Hive-style partitions
    /// (`DIR/date=YYYY-MM-DD/checkpoint=NAME/run-ID.parquet`) for DuckDB, BigQuery or archives.
    Export {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        /// Runs to export (repeat the flag or separate with commas).
        #[arg(long = "run", required = true, value_delimiter = ',')]
        runs: Vec<i64>,
        #[arg(long, default_value = "csv")]
        format: String,
        /// A file (csv, jsonl; one run) or a folder (parquet).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Apply the retention policy now and print what it removed (`arbiter serve` does this
    /// every 6 hours). Export archives first: `arbiter export --format parquet`.
    Retention {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        /// Set the policy first: days raw answers and logprobs are kept.
        #[arg(long, requires = "summary_days")]
        raw_days: Option<String>,
        /// Days a run's summaries (and the run) are kept.
        #[arg(long, requires = "raw_days")]
        summary_days: Option<String>,
    },
    /// Copy a SQLite database to a new file while it is in use (consistent, online). For
    /// PostgreSQL use `pg_dump --format=custom` and `pg_restore` (see the README).
    Backup {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        /// The new file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Print a new ARBITER_SECRET_KEY (64 hex digits) for sealing endpoint API keys and webhook
    /// secrets; give the same key to every server and worker.
    Keygen,
    /// Apply database migrations and exit.
    Migrate {
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
    },
    /// Manage user accounts.
    User {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        #[command(subcommand)]
        action: UserAction,
    },
    /// Make, list or revoke personal API tokens (on the server's host; users can also make
    /// their own on the Account page).
    Token {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Launch a run through the REST API; with --wait, follow it, print its report and compare
    /// it with a baseline. Exit 0: no significant regression; 1: a significant regression;
    /// 2: an error; 3: timed out, or not COMPLETE with --require-complete.
    Submit(server::ci::SubmitArgs),
    /// Follow a run until it finishes, then report as `submit --wait` does.
    Wait(server::ci::WaitArgs),
    /// Print a run's report (and its comparison with a baseline) with `submit`'s exit statuses.
    Report(server::ci::ReportCommandArgs),
    /// Manage teams (fair share between teams on shared endpoints).
    Team {
        #[arg(long, env = "DATABASE_URL", default_value = "sqlite://arbiter.db")]
        database_url: String,
        #[command(subcommand)]
        action: TeamAction,
    },
}

/// Email to leads and invited raters, and the queue monitor that sends alerts.
#[derive(clap::Args)]
struct MailArgs {
    /// Mail transport: smtp://user:password@host:587 (STARTTLS), smtps://…:465, file:DIRECTORY
    /// (one .eml file per message) or log.
    #[arg(
        long = "mail",
        env = "ARBITER_MAIL",
        default_value = "log",
        hide_env_values = true
    )]
    transport: String,
    /// Sender of Arbiter's mail.
    #[arg(
        long,
        env = "ARBITER_MAIL_FROM",
        default_value = "Arbiter <arbiter@localhost>"
    )]
    mail_from: String,
    /// Seconds between rounds of the queue monitor (SLA escalation, alerts, email); 0 turns it
    /// off (run one `arbiter serve` with it on when several share a database).
    #[arg(long, default_value_t = 60)]
    queue_monitor_seconds: u64,
}

#[derive(Subcommand)]
enum TokenAction {
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
enum TeamAction {
    /// Set a team's fair-share weight (default 1): weights 2 and 1 split a contended
    /// endpoint two thirds to one third within a priority class.
    SetWeight { team: String, weight: f64 },
}

#[derive(Subcommand)]
enum UserAction {
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
        Command::Retention {
            database_url,
            raw_days,
            summary_days,
        } => {
            use arbiter_engine::retention;
            let database = open(&database_url).await?;
            let store = database.store();
            if let (Some(raw), Some(summary)) = (raw_days, summary_days) {
                retention::set_policy(store.as_ref(), &raw, &summary).await?;
            }
            let policy = retention::policy(store.as_ref()).await?;
            println!(
                "policy: raw answers and logprobs kept {} days, summaries {} days",
                policy.raw_days, policy.summary_days
            );
            let report =
                retention::enforce(store.as_ref(), policy, arbiter_store::now_ms()).await?;
            println!("{}", report.summary());
            Ok(())
        }
        Command::Backup { database_url, out } => match open(&database_url).await? {
            Database::Sqlite(store) => {
                store.backup_into(&out).await?;
                println!("backed up {} to {}", redact(&database_url), out.display());
                Ok(())
            }
            Database::Postgres(_) => anyhow::bail!(
                "back up PostgreSQL with its own tools: pg_dump --format=custom --file {} \"$DATABASE_URL\" (restore with pg_restore --dbname NEW_URL FILE)",
                out.display()
            ),
        },
        Command::Keygen => {
            println!("{}", arbiter_engine::secrets::SecretBox::generate_key());
            Ok(())
        }
        Command::Submit(args) => exit_with(server::ci::run_submit(&args).await),
        Command::Wait(args) => exit_with(server::ci::run_wait(&args).await),
        Command::Report(args) => exit_with(server::ci::run_report(&args).await),
        Command::Token {
            database_url,
            action,
        } => token(&open(&database_url).await?, action).await,
        Command::Serve {
            database_url,
            addr,
            site_root,
            workers,
            concurrency,
            watch_checkpoints,
            watch_seconds,
            mail,
        } => {
            let database = open(&database_url).await?;
            let mailer = Mailer::from_config(&mail.transport, &mail.mail_from)?;
            tracing::info!(transport = %mailer.describe(), "mail");
            let jobs = background_jobs(
                Arc::new(mailer),
                workers,
                concurrency,
                mail.queue_monitor_seconds,
                watch_checkpoints
                    .map(|path| (path, std::time::Duration::from_secs(watch_seconds.max(1)))),
            )?;
            serve(&database, addr, &site_root, jobs).await
        }
        Command::Worker {
            database_url,
            concurrency,
            lease_seconds,
        } => {
            // Workers open sealed endpoint keys: check the key before taking any work.
            arbiter_engine::secrets::SecretBox::from_env().map_err(anyhow::Error::msg)?;
            let database = open(&database_url).await?;
            let (shutdown_tx, shutdown) = watch::channel(false);
            let worker = tokio::spawn(run_worker(
                database.store(),
                WorkerConfig {
                    lease: std::time::Duration::from_secs(lease_seconds.max(1)),
                    ..worker_config(0, concurrency)
                },
                shutdown,
            ));
            shutdown_signal().await;
            let _ = shutdown_tx.send(true);
            worker.await?;
            Ok(())
        }
        Command::BenchDataset {
            database_url,
            name,
            items,
        } => server::bench::write_dataset(&database_url, &name, items).await,
        Command::Bench {
            scenario,
            items,
            database_url,
            endpoint,
        } => server::bench::run(scenario, items, database_url, endpoint).await,
        Command::Sim {
            addr,
            models,
            latency_ms_min,
            latency_ms_max,
            rate_429,
            rate_500,
            rate_timeout,
            rate_malformed,
            rate_truncate,
            max_concurrency,
            latency_us_per_prompt_byte,
            api_key,
        } => {
            let mut config = SimConfig::demo();
            if !models.is_empty() {
                config.models = models
                    .iter()
                    .map(|spec| SimModel::parse_spec(spec).map_err(anyhow::Error::msg))
                    .collect::<anyhow::Result<_>>()?;
            }
            config.latency_ms_min = latency_ms_min;
            config.latency_ms_max = latency_ms_max.max(latency_ms_min);
            config.faults = SimFaults {
                rate_429,
                rate_500,
                rate_timeout,
                rate_malformed,
                rate_truncate,
            };
            config.max_concurrency = max_concurrency;
            config.latency_us_per_prompt_byte = latency_us_per_prompt_byte;
            config.api_key = api_key;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            println!(
                "arbiter sim (a SIMULATED model endpoint) on http://{addr}/v1 serving {}",
                model_names(&config)
            );
            tokio::select! {
                result = arbiter_sim::serve(config, listener) => result,
                _ = shutdown_signal() => Ok(()),
            }
        }
        Command::Demo {
            addr,
            sim_addr,
            data_dir,
            site_root,
            queue_monitor_seconds,
            model_gguf,
            model_addr,
        } => {
            let real_model = local_model::start_for_demo(model_gguf.as_deref(), model_addr).await;
            run_demo(
                addr,
                sim_addr,
                &data_dir,
                &site_root,
                queue_monitor_seconds,
                real_model,
            )
            .await
        }
        Command::Model { action } => local_model::run(action).await,
        Command::Export {
            database_url,
            runs,
            format,
            out,
        } => export(&database_url, &runs, &format, out.as_deref()).await,
        Command::Migrate { database_url } => {
            let database = open(&database_url).await?;
            println!(
                "database at {} is migrated ({})",
                redact(&database_url),
                database.store().backend()
            );
            Ok(())
        }
        Command::User {
            database_url,
            action,
        } => {
            let database = open(&database_url).await?;
            let store = database.store();
            match action {
                UserAction::Create {
                    username,
                    role,
                    password,
                } => {
                    let role: Role = role.parse().map_err(anyhow::Error::msg)?;
                    arbiter_engine::accounts::create_user(store.as_ref(), &username, &password, role).await?;
                    println!("created {role} `{username}`");
                }
                UserAction::SetTeam { username, team } => {
                    arbiter_engine::accounts::set_team(store.as_ref(), &username, &team).await?;
                    println!("`{username}` is in team `{team}`");
                }
                UserAction::ResetPassword { username, password } => {
                    arbiter_engine::accounts::reset_password(store.as_ref(), &username, &password).await?;
                    println!("password of `{username}` reset");
                }
            }
            Ok(())
        }
        Command::Team {
            database_url,
            action,
        } => {
            let database = open(&database_url).await?;
            let store = database.store();
            match action {
                TeamAction::SetWeight { team, weight } => {
                    arbiter_engine::accounts::set_team_weight(store.as_ref(), &team, weight).await?;
                    println!("team `{team}` now weighs {weight} in fair share");
                }
            }
            Ok(())
        }
    }
}

/// Ends a CI command with its exit status; its errors exit 2 (never 1, which means a regression).
fn exit_with(result: anyhow::Result<u8>) -> ! {
    let code = result.unwrap_or_else(|err| {
        eprintln!("error: {err:#}");
        server::ci::EXIT_ERROR
    });
    std::process::exit(i32::from(code))
}

async fn token(database: &Database, action: TokenAction) -> anyhow::Result<()> {
    use arbiter_engine::accounts::api_tokens;
    let store = database.store();
    let now = arbiter_store::now_ms();
    match action {
        TokenAction::Create {
            username,
            name,
            days,
        } => {
            let user = store
                .find_user_credentials(&username)
                .await?
                .with_context(|| format!("no user named `{username}`"))?
                .user;
            let (token, plaintext) =
                api_tokens::create_token(store.as_ref(), &user, &name, days, now).await?;
            eprintln!(
                "token {} (`{}`) for {username}; it is shown only now:",
                token.id, token.name
            );
            println!("{plaintext}");
        }
        TokenAction::List => {
            for token in store.api_tokens(None).await? {
                let state = if token.is_live(now) {
                    "live"
                } else if token.revoked_at.is_some() {
                    "revoked"
                } else {
                    "expired"
                };
                println!(
                    "{:>5}  {:<16} {:<20} {}…  {state}",
                    token.id, token.username, token.name, token.prefix
                );
            }
        }
        TokenAction::Revoke { id } => {
            if store.revoke_api_token(id, None, now).await? {
                println!("token {id} revoked");
            } else {
                anyhow::bail!("no live token with id {id}");
            }
        }
    }
    Ok(())
}

async fn open(database_url: &str) -> anyhow::Result<Database> {
    Database::open(database_url)
        .await
        .with_context(|| format!("cannot open the database at {}", redact(database_url)))
}

/// The URL without its password, for messages.
fn redact(database_url: &str) -> String {
    match (database_url.find("://"), database_url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://…{}", &database_url[..scheme_end], &database_url[at..])
        }
        _ => database_url.to_string(),
    }
}

fn model_names(config: &SimConfig) -> String {
    config
        .models
        .iter()
        .map(|model| model.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn worker_config(index: usize, concurrency: usize) -> WorkerConfig {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let mut config = WorkerConfig::named(format!("{host}:{}:{index}", std::process::id()));
    config.max_in_flight = concurrency.max(1);
    config
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing a SIGTERM handler works on unix");
        tokio::select! {
            _ = ctrl_c => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// What runs beside the web app in one `arbiter serve`: `workers` in-process workers with
/// `concurrency` requests in flight each, the queue monitor every `queue_monitor_seconds` (0:
/// none in this process), and a checkpoint announcement directory or manifest to scan.
fn background_jobs(
    mailer: Arc<Mailer>,
    workers: usize,
    concurrency: usize,
    queue_monitor_seconds: u64,
    checkpoint_watch: Option<(PathBuf, std::time::Duration)>,
) -> anyhow::Result<JobsConfig> {
    // A bad key stops the server here rather than failing each sealed secret later.
    let secrets = arbiter_engine::secrets::SecretBox::from_env().map_err(anyhow::Error::msg)?;
    Ok(JobsConfig {
        workers: (0..workers)
            .map(|index| worker_config(index, concurrency))
            .collect(),
        queue_monitor: (queue_monitor_seconds > 0)
            .then(|| std::time::Duration::from_secs(queue_monitor_seconds)),
        checkpoint_watch,
        ..JobsConfig::server(mailer, secrets)
    })
}

/// Serves the app with its background jobs until Ctrl-C or SIGTERM, then lets requests in
/// flight finish and stops the jobs.
async fn serve(
    database: &Database,
    addr: SocketAddr,
    site_root: &str,
    jobs: JobsConfig,
) -> anyhow::Result<()> {
    let mailer = jobs.mailer.clone();
    let jobs = Jobs::start(database.store(), jobs);
    let app = web::router(database, web::leptos_options(site_root, addr), mailer).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    if !std::path::Path::new(site_root).join("pkg").exists() {
        tracing::warn!(
            site_root,
            "no built site found: pages will render but not hydrate (run scripts/build-site)"
        );
    }
    // The client's address feeds the login throttle (failed sign-ins per address).
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await?;
    jobs.stop().await?;
    Ok(())
}

async fn run_demo(
    addr: SocketAddr,
    sim_addr: SocketAddr,
    data_dir: &std::path::Path,
    site_root: &str,
    queue_monitor_seconds: u64,
    real_model: Option<local_model::RunningModel>,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // A fresh database every start, so the demo always shows the same story.
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(data_dir.join(format!("demo.db{suffix}")));
    }
    let sim_listener = tokio::net::TcpListener::bind(sim_addr)
        .await
        .with_context(|| format!("cannot start the simulator on {sim_addr}"))?;
    let sim_config = SimConfig::demo();
    let sim_models = model_names(&sim_config);
    tokio::spawn(async move {
        if let Err(err) = arbiter_sim::serve(sim_config, sim_listener).await {
            tracing::error!(error = %err, "simulator stopped");
        }
    });
    let database_url = format!("sqlite://{}", data_dir.join("demo.db").display());
    let database = open(&database_url).await?;
    let mut seeded =
        demo::seed(database.store().as_ref(), &format!("http://{sim_addr}/v1")).await?;
    if let Some(model) = &real_model {
        let runs = demo::seed_real_model(
            database.store().as_ref(),
            &seeded,
            &model.base_url,
            &model.name,
        )
        .await?;
        seeded.run_ids.extend(runs);
    }
    let mail_dir = data_dir.join("mail");
    let mailer = Mailer::from_config(
        &format!("file:{}", mail_dir.display()),
        "Arbiter demo <arbiter@arbiter.demo>",
    )?;
    println!();
    println!(
        "  Arbiter demo is up at http://{addr}  (ready in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    println!(
        "  Simulated model endpoint (arbiter sim) at http://{sim_addr}/v1 serving {sim_models}"
    );
    if let Some(model) = &real_model {
        println!(
            "  Real model (SmolLM2-135M-Instruct on CPU, arbiter model serve) at {} as `{}`",
            model.base_url, model.name
        );
    }
    println!("  Database: {}", data_dir.join("demo.db").display());
    println!(
        "  Runs launched: {:?} (in-process workers are answering them now)",
        seeded.run_ids
    );
    println!();
    println!("  Demo accounts (username / password):");
    for (username, role, password) in demo::DEMO_ACCOUNTS {
        println!("    {:<10}  {username:<12} / {password}", role.as_str());
    }
    println!(
        "  Mail to the lead ({}) is written to {}",
        demo::DEMO_LEAD_EMAIL,
        mail_dir.display()
    );
    println!();
    let announcements = data_dir.join("announcements");
    std::fs::create_dir_all(&announcements)
        .with_context(|| format!("cannot create {}", announcements.display()))?;
    println!(
        "  Announce a checkpoint of `{}`: write a JSON file into {}",
        demo::DEMO_TRAINING_RUN,
        announcements.display()
    );
    println!(
        "    e.g. {{\"name\": \"step-3000\", \"endpoint_url\": \"http://{sim_addr}/v1\", \"model\": \"sim-ckpt-a\", \"training_run\": \"{}\", \"training_step\": 3000}}",
        demo::DEMO_TRAINING_RUN
    );
    println!("    and its smoke suite `demo-smoke` starts within seconds.");
    println!();
    let jobs = background_jobs(
        Arc::new(mailer),
        1,
        64,
        queue_monitor_seconds,
        Some((announcements, std::time::Duration::from_secs(5))),
    )?;
    serve(&database, addr, site_root, jobs).await
}

/// `arbiter export`: see the subcommand's help.
async fn export(
    database_url: &str,
    runs: &[i64],
    format: &str,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use arbiter_engine::reports::export::{export_run, partition_path, ExportFormat};
    let format = ExportFormat::parse(format)
        .ok_or_else(|| anyhow::anyhow!("unknown format `{format}`: use csv, jsonl or parquet"))?;
    let database = open(database_url).await?;
    let store = database.store();
    match (format, out) {
        (ExportFormat::Parquet, Some(folder)) => {
            for &run_id in runs {
                let run = store
                    .run_header(run_id)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("no run with id {run_id}"))?;
                let path =
                    folder.join(partition_path(run.created_at, &run.checkpoint_name, run_id));
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                // Written beside, then renamed: an archive never holds a half-written file.
                let partial = path.with_extension("parquet.partial");
                let file = std::io::BufWriter::new(std::fs::File::create(&partial)?);
                let (writer, rows) = export_run(store.as_ref(), run_id, format, file)
                    .await
                    .map_err(|err| anyhow::anyhow!("run {run_id}: {err}"))?;
                writer
                    .into_inner()
                    .map_err(|err| err.into_error())?
                    .sync_all()?;
                std::fs::rename(&partial, &path)?;
                println!("{} ({rows} rows)", path.display());
            }
            Ok(())
        }
        (ExportFormat::Parquet, None) => {
            anyhow::bail!("parquet needs --out FOLDER (it writes one partitioned file per run)")
        }
        (_, _) if runs.len() != 1 => anyhow::bail!("csv and jsonl export one run at a time"),
        (_, Some(path)) => {
            let file = std::io::BufWriter::new(std::fs::File::create(path)?);
            let (writer, rows) = export_run(store.as_ref(), runs[0], format, file)
                .await
                .map_err(|err| anyhow::anyhow!("{err}"))?;
            writer.into_inner().map_err(|err| err.into_error())?;
            eprintln!("{} ({rows} rows)", path.display());
            Ok(())
        }
        (_, None) => {
            let stdout = std::io::BufWriter::new(std::io::stdout());
            let (mut writer, _) = export_run(store.as_ref(), runs[0], format, stdout)
                .await
                .map_err(|err| anyhow::anyhow!("{err}"))?;
            std::io::Write::flush(&mut writer)?;
            Ok(())
        }
    }
}
