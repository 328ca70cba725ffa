//! The launcher's rounds: every second it beats its heart and moves its launches on; at
//! shutdown it stops the servers that die with this process (a cluster's keep serving).

use std::sync::Arc;
use std::time::Duration;

use crate::serving::config::LauncherConfig;
use crate::serving::kubernetes::ClusterServers;
use crate::serving::lifecycle::{Launcher, Servers};
use crate::serving::local::LocalLauncher;
use arbiter_store::Store;
use tokio::sync::Mutex;

/// Rounds of the launcher every `interval` until `shutdown` turns true; then its servers stop.
pub async fn run(
    store: Arc<dyn Store>,
    config: LauncherConfig,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    match config {
        LauncherConfig::Local(config) => {
            rounds(store, LocalLauncher::new(config), interval, shutdown).await
        }
        LauncherConfig::Kubernetes(config) => match ClusterServers::connect(config).await {
            Ok(launcher) => rounds(store, launcher, interval, shutdown).await,
            Err(err) => tracing::error!(error = %err, "the Kubernetes launcher cannot start"),
        },
    }
}

async fn rounds<S: Servers + 'static>(
    store: Arc<dyn Store>,
    launcher: Launcher<S>,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let launcher = Arc::new(Mutex::new(launcher));
    let (round_store, round_launcher) = (store.clone(), launcher.clone());
    super::every(interval, shutdown, move || {
        let (store, launcher) = (round_store.clone(), round_launcher.clone());
        async move {
            if let Err(err) = launcher.lock().await.round(store.as_ref()).await {
                tracing::warn!(error = %err, "launcher round failed");
            }
        }
    })
    .await;
    launcher.lock().await.stop_all(store.as_ref()).await;
}
