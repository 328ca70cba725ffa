//! Scanning a watched announcement directory or manifest for new checkpoints.

use crate::suites::announcements::scan_once;
use arbiter_store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Scans `path` every `interval` until `shutdown` turns true.
pub async fn run(
    store: Arc<dyn Store>,
    path: PathBuf,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    tracing::info!(path = %path.display(), "watching for checkpoint announcements");
    let (store, path) = (store.as_ref(), path.as_path());
    crate::jobs::every(interval, shutdown, move || async move {
        if let Err(err) = scan_once(store, path).await {
            tracing::warn!(error = %err, "checkpoint watch scan failed");
        }
    })
    .await;
}
