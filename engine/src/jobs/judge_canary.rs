//! The drift canaries of new judge versions, run one after another in the background.

use std::sync::Arc;
use std::time::Duration;

use crate::canary::{run_next_canary, CanaryRound};
use arbiter_store::Store;

/// Runs waiting canaries every `interval` (all that wait, one after another) until `shutdown`
/// turns true; a canary running then finishes first (its calls are bounded by the retry
/// policy's timeouts).
pub async fn run(
    store: Arc<dyn Store>,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let worker = super::claim_owner("canary");
    let stopping = shutdown.clone();
    super::every(interval, shutdown, || {
        let (store, worker, stopping) = (store.clone(), worker.clone(), stopping.clone());
        async move {
            // One canary after another, but none started once shutdown is asked.
            while !*stopping.borrow() {
                match run_next_canary(&store, &worker).await {
                    Ok(CanaryRound::Idle) => break,
                    Ok(CanaryRound::Done { judge_id, report }) => {
                        tracing::info!(judge_id, drifted = report.drifted(), summary = %report.summary(), "judge canary done");
                    }
                    Ok(CanaryRound::Failed { judge_id, error }) => {
                        tracing::warn!(judge_id, %error, "judge canary failed");
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "judge canary round failed");
                        break;
                    }
                }
            }
        }
    })
    .await;
}
