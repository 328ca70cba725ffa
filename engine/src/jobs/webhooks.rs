//! Webhook deliveries: events queued from the store's changes, then sent with backoff.

use crate::clients::egress::GuardedClient;
use crate::secrets::SecretBox;
use crate::webhooks::{deliver_due, DeliveryRound};
use arbiter_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Delivers webhooks every `interval` until `shutdown` turns true.
pub async fn run(
    store: Arc<dyn Store>,
    secrets: SecretBox,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let http = &GuardedClient::for_process(|builder| builder);
    let (store, secrets) = (store.as_ref(), &secrets);
    crate::jobs::every(interval, shutdown, move || async move {
        match deliver_due(store, secrets, http, arbiter_store::now_ms()).await {
            Ok(round) if round != DeliveryRound::default() => {
                tracing::info!(?round, "webhook round");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "webhook round failed"),
        }
    })
    .await;
}
