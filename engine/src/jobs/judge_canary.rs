//! The drift canaries of new judge versions, run one after another in the background.

use std::sync::Arc;
use std::time::Duration;

use crate::canary::{run_next_canary, CanaryRound};
use arbiter_store::Store;

/// Runs waiting canaries every `interval` (all that wait, one after another) until `shutdown`
/// turns true.
pub async fn run(
    store: Arc<dyn Store>,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let worker = format!("canary-{}", std::process::id());
    super::every(interval, shutdown, || {
        let (store, worker) = (store.clone(), worker.clone());
        async move {
            loop {
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
