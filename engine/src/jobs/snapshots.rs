//! Report snapshots of finished runs, built in the background rather than when a researcher
//! first asks; trend watches are checked on the same beat.

use crate::reports::runs::warm_snapshots;
use arbiter_store::Store;

/// Rounds of the warmer between checks of the watched trends when no run finished (a human
/// label can turn a verdict, and so a trend, without finishing a run).
const WATCH_CHECK_ROUNDS: u32 = 20;

/// Builds finished runs' snapshots every `interval` until `shutdown` turns true, and checks
/// the watched trends for regressions whenever a run finished (and every few rounds).
pub async fn run(
    store: std::sync::Arc<dyn Store>,
    interval: std::time::Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut rounds_since_check = WATCH_CHECK_ROUNDS;
    loop {
        let built = match warm_snapshots(store.as_ref(), 2).await {
            Ok(built) => built,
            Err(err) => {
                tracing::warn!(error = %err, "building run snapshots failed");
                0
            }
        };
        if built > 0 {
            tracing::info!(built, "run snapshots built for finished runs");
        }
        rounds_since_check += 1;
        if built > 0 || rounds_since_check >= WATCH_CHECK_ROUNDS {
            rounds_since_check = 0;
            match crate::reports::trends::check_watches(store.as_ref(), arbiter_store::now_ms())
                .await
            {
                Ok((0, 0)) => {}
                Ok((raised, resolved)) => tracing::info!(raised, resolved, "regression alerts"),
                Err(err) => tracing::warn!(error = %err, "checking watched trends failed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
