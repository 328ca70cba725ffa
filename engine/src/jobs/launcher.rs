//! The local launcher's rounds: every second it beats its heart and moves its launches on;
//! at shutdown it stops the servers it started.

use std::sync::Arc;
use std::time::Duration;

use crate::serving::config::LocalLauncherConfig;
use crate::serving::local::LocalLauncher;
use arbiter_store::Store;
use tokio::sync::Mutex;

/// Rounds of the launcher every `interval` until `shutdown` turns true; then its servers stop.
pub async fn run(
    store: Arc<dyn Store>,
    config: LocalLauncherConfig,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let store_at_stop = store.clone();
    let launcher = Arc::new(Mutex::new(LocalLauncher::new(config)));
    let rounds = launcher.clone();
    super::every(interval, shutdown, move || {
        let (store, launcher) = (store.clone(), rounds.clone());
        async move {
            if let Err(err) = launcher.lock().await.round(store.as_ref()).await {
                tracing::warn!(error = %err, "launcher round failed");
            }
        }
    })
    .await;
    let store_for_stop = store_at_stop;
    launcher
        .lock()
        .await
        .stop_all(store_for_stop.as_ref())
        .await;
}
