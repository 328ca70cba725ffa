//! The loop every background job shares: do a round, wait, again, until shutdown.

use std::future::Future;
use std::time::Duration;

/// Runs `round` now and then every `interval` until `shutdown` turns true (a round in
/// progress finishes first).
pub async fn every<F, Fut>(
    interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        round().await;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rounds_repeat_until_shutdown() {
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let rounds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = rounds.clone();
        let job = tokio::spawn(every(Duration::from_millis(20), shutdown, move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
        stop.send(true).unwrap();
        // Shutdown ends the wait at once rather than after the interval.
        tokio::time::timeout(Duration::from_millis(500), job)
            .await
            .expect("the loop stops on shutdown")
            .unwrap();
        let done = rounds.load(std::sync::atomic::Ordering::SeqCst);
        assert!(done >= 2, "{done} rounds");
    }
}
