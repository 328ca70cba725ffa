//! `arbiter serve`: the web app with its in-process workers and background jobs, until Ctrl-C
//! or SIGTERM; and `arbiter worker`, a standalone worker on a shared database.

use super::{open, shutdown_signal, worker_config};
use anyhow::Context;
use arbiter_engine::clients::mail::Mailer;
use arbiter_engine::dispatch::{run_worker, WorkerConfig};
use arbiter_engine::jobs::{Jobs, JobsConfig};
use arbiter_store::Database;
use server::http;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

/// `arbiter serve`.
pub async fn serve(args: crate::ServeArgs) -> anyhow::Result<()> {
    let crate::ServeArgs {
        database_url,
        addr,
        site_root,
        workers,
        concurrency,
        watch_checkpoints,
        watch_seconds,
        launchers,
        mail,
    } = args;
    let launcher = launchers
        .map(|path| arbiter_engine::serving::config::LauncherConfig::read(&path))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if let Some(arbiter_engine::serving::config::LauncherConfig::Kubernetes(cluster)) = &launcher {
        // Credentials are found now, so a server without them says so at start.
        arbiter_engine::serving::kubernetes::ClusterServers::connect(cluster.clone())
            .await
            .map_err(anyhow::Error::msg)?;
    }
    // In-process workers call the servers this process launches.
    let launched = launcher
        .as_ref()
        .map(|config| config.endpoints())
        .unwrap_or_default();
    super::install_egress(&launched)?;
    let database = open(&database_url).await?;
    let mailer = Mailer::from_settings(
        &mail.transport,
        &mail.mail_from,
        mail.mail_ca_file.as_deref(),
    )?;
    tracing::info!(transport = %mailer.describe(), "mail");
    let mut jobs = background_jobs(
        Arc::new(mailer),
        workers,
        concurrency,
        mail.queue_monitor_seconds,
        watch_checkpoints.map(|path| (path, std::time::Duration::from_secs(watch_seconds.max(1)))),
    )?;
    jobs.launcher = launcher;
    run_server(&database, addr, &site_root, jobs).await
}

/// `arbiter worker`.
pub async fn worker(args: crate::WorkerArgs) -> anyhow::Result<()> {
    let crate::WorkerArgs {
        database_url,
        concurrency,
        lease_seconds,
    } = args;
    super::install_egress(&[])?;
    // Workers open sealed endpoint keys: check the key before taking any work.
    arbiter_engine::secrets::SecretBox::from_env().map_err(anyhow::Error::msg)?;
    let database = open(&database_url).await?;
    arbiter_engine::catalog::refresh_key_bindings(database.store().as_ref())
        .await
        .map_err(|err| anyhow::anyhow!("cannot read endpoint key bindings: {err}"))?;
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

/// What runs beside the web app in one `arbiter serve`: `workers` in-process workers with
/// `concurrency` requests in flight each, the queue monitor every `queue_monitor_seconds` (0:
/// none in this process), and a checkpoint announcement directory or manifest to scan.
pub(crate) fn background_jobs(
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
pub(crate) async fn run_server(
    database: &Database,
    addr: SocketAddr,
    site_root: &str,
    jobs: JobsConfig,
) -> anyhow::Result<()> {
    let mailer = jobs.mailer.clone();
    // Keys leads bound to hosts apply from the first request (workers re-read them as they beat).
    arbiter_engine::catalog::refresh_key_bindings(database.store().as_ref())
        .await
        .map_err(|err| anyhow::anyhow!("cannot read endpoint key bindings: {err}"))?;
    let jobs = Jobs::start(database.store(), jobs);
    let app = http::router(database, http::leptos_options(site_root, addr), mailer).await?;
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
