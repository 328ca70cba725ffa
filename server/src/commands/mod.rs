//! The `arbiter` subcommands, one file per group; `main.rs` holds their command-line types.
//!
//! - [`serve`]: `serve` (the web app with its background jobs) and `worker`;
//! - [`demo`]: `demo`, the embedded default with seeded data;
//! - [`sim`]: `sim`, the simulated endpoint;
//! - [`model`]: `model serve` and `model bench`, the bundled CPU model;
//! - [`accounts`]: `user`, `team`, `token`;
//! - [`data`]: `migrate`, `export`, `backup`, `retention`, `keygen`, `rekey`;
//! - [`ci`]: `submit`, `wait`, `report` against the REST API, with CI exit statuses;
//! - [`bench`]: `bench` and the hidden `bench-dataset`.

use anyhow::Context;
use arbiter_engine::dispatch::WorkerConfig;
use arbiter_store::Database;

pub mod accounts;
pub mod bench;
pub mod ci;
pub mod data;
pub mod demo;
pub mod model;
pub mod serve;
pub mod sim;

pub(crate) async fn open(database_url: &str) -> anyhow::Result<Database> {
    Database::open(database_url)
        .await
        .with_context(|| format!("cannot open the database at {}", redact(database_url)))
}

/// The URL without its password, for messages.
pub(crate) fn redact(database_url: &str) -> String {
    match (database_url.find("://"), database_url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://…{}", &database_url[..scheme_end], &database_url[at..])
        }
        _ => database_url.to_string(),
    }
}

/// Installs this process's egress policy: `ARBITER_EGRESS_ALLOW` (a bad entry stops the
/// process here) and the `extra` entries (the demo's own simulator and model server).
pub(crate) fn install_egress(extra: &[String]) -> anyhow::Result<()> {
    use arbiter_engine::clients::egress::{install, EgressPolicy};
    let mut policy = EgressPolicy::from_env().map_err(anyhow::Error::msg)?;
    for entry in extra {
        policy = policy.allowing(entry).map_err(anyhow::Error::msg)?;
    }
    tracing::info!(?policy, "egress: public addresses and these");
    install(policy).map_err(|current| {
        anyhow::anyhow!("this process already has another egress policy: {current:?}")
    })
}

pub(crate) fn worker_config(index: usize, concurrency: usize) -> WorkerConfig {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let mut config = WorkerConfig::named(format!("{host}:{}:{index}", std::process::id()));
    config.max_in_flight = concurrency.max(1);
    config
}

pub(crate) async fn shutdown_signal() {
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
