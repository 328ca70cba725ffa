//! Pairs waiting for their pairwise judge, judged in the background round after round.

use std::sync::Arc;
use std::time::Duration;

use crate::pair_judging::judge_waiting_pairs;
use arbiter_store::Store;

/// Judges waiting pairs every `interval` (round after round while any wait) until `shutdown`
/// turns true; a round in progress finishes first.
pub async fn run(
    store: Arc<dyn Store>,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let worker = super::claim_owner("pairs");
    let stopping = shutdown.clone();
    super::every(interval, shutdown, || {
        let (store, worker, stopping) = (store.clone(), worker.clone(), stopping.clone());
        async move {
            while !*stopping.borrow() {
                match judge_waiting_pairs(&store, &worker).await {
                    Ok(0) => break,
                    Ok(judged) => tracing::info!(judged, "pairs judged"),
                    Err(err) => {
                        tracing::warn!(error = %err, "judging pairs failed");
                        break;
                    }
                }
            }
        }
    })
    .await;
}
