//! The retention sweep, every few hours after a quiet start.

use crate::retention::{enforce, policy};
use arbiter_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// How long after start-up the first enforcement waits: an upgraded deployment's operators get
/// time to see the policy (logged now) and archive before anything is removed.
const FIRST_ROUND_AFTER: Duration = Duration::from_secs(15 * 60);

/// Enforces the stored policy every `interval` (the first time a quarter of an hour after
/// start-up) until `shutdown` turns true.
pub async fn run(
    store: Arc<dyn Store>,
    interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    match policy(store.as_ref()).await {
        Ok(policy) => tracing::info!(
            raw_days = policy.raw_days,
            summary_days = policy.summary_days,
            "retention: raw answers and runs older than these are removed, first in 15 minutes"
        ),
        Err(err) => tracing::warn!(error = %err, "retention policy unreadable"),
    }
    tokio::select! {
        _ = tokio::time::sleep(FIRST_ROUND_AFTER) => {}
        _ = shutdown.changed() => return,
    }
    let store = store.as_ref();
    crate::jobs::every(interval, shutdown, move || async move {
        let outcome = async {
            let policy = policy(store).await?;
            enforce(store, policy, arbiter_store::now_ms()).await
        }
        .await;
        match outcome {
            Ok(report) if report.runs_raw_purged + report.runs_deleted > 0 => {
                tracing::info!(report = %report.summary(), "retention enforced");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "retention round failed"),
        }
    })
    .await;
}
