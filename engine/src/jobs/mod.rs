//! Background jobs: one file per job, the loop they share ([`every`]: do a round, wait, again,
//! until shutdown), and the runner that starts them all and stops them on shutdown.

pub mod checkpoint_watch;
pub mod judge_canary;
pub mod launcher;
pub mod pair_judge;
pub mod queue_monitor;
pub mod retention;
pub mod snapshots;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::Arc;

use arbiter_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clients::mail::Mailer;
use crate::dispatch::{run_worker, WorkerConfig};
use crate::secrets::SecretBox;

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

/// A worker id for claims in the store, unique across hosts and containers (where every
/// process may be pid 1): a claim's owner is who may finish it.
pub(crate) fn claim_owner(job: &str) -> String {
    format!(
        "{job}:{}:{}:{:016x}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into()),
        std::process::id(),
        rand::random::<u64>()
    )
}

/// What one process runs in the background, and how often; `None` runs that job elsewhere
/// (or nowhere). Every job is safe to run in several processes at once: each claims its work
/// in the store.
pub struct JobsConfig {
    /// In-process dispatch workers (`arbiter serve --workers N`).
    pub workers: Vec<WorkerConfig>,
    /// Where alert mail and invitations go.
    pub mailer: Arc<Mailer>,
    /// Opens sealed webhook signing secrets.
    pub secrets: SecretBox,
    /// SLA escalation, alerts and their mail.
    pub queue_monitor: Option<Duration>,
    /// Report snapshots of finished runs, and trend watches.
    pub snapshots: Option<Duration>,
    /// Webhook deliveries.
    pub webhooks: Option<Duration>,
    /// The retention sweep.
    pub retention: Option<Duration>,
    /// A checkpoint announcement directory or manifest to scan.
    pub checkpoint_watch: Option<(PathBuf, Duration)>,
    /// New judge versions' drift canaries.
    pub judge_canary: Option<Duration>,
    /// Pairs waiting for their pairwise judge.
    pub pair_judging: Option<Duration>,
    /// Starts and retires served checkpoints' servers, on this host or in a cluster
    /// (`--launchers FILE`).
    pub launcher: Option<crate::serving::config::LauncherConfig>,
}

impl JobsConfig {
    /// What `arbiter serve` runs beside the web app, without workers or a queue monitor.
    pub fn server(mailer: Arc<Mailer>, secrets: SecretBox) -> JobsConfig {
        JobsConfig {
            workers: Vec::new(),
            mailer,
            secrets,
            queue_monitor: None,
            snapshots: Some(Duration::from_secs(15)),
            webhooks: Some(Duration::from_secs(5)),
            retention: Some(Duration::from_secs(6 * 3600)),
            checkpoint_watch: None,
            judge_canary: Some(Duration::from_secs(10)),
            pair_judging: Some(Duration::from_secs(2)),
            launcher: None,
        }
    }
}

/// How often the launcher checks its servers' health and its launches.
pub const LAUNCHER_ROUND: Duration = Duration::from_secs(1);

/// The background jobs of one process, running until [`Jobs::stop`].
pub struct Jobs {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Jobs {
    /// Starts every job the configuration names.
    pub fn start(store: Arc<dyn Store>, config: JobsConfig) -> Jobs {
        let (stop, shutdown) = watch::channel(false);
        let mut tasks: Vec<JoinHandle<()>> = config
            .workers
            .into_iter()
            .map(|worker| tokio::spawn(run_worker(store.clone(), worker, shutdown.clone())))
            .collect();
        if let Some(interval) = config.queue_monitor {
            tasks.push(tokio::spawn(queue_monitor::run(
                store.clone(),
                config.mailer.clone(),
                interval,
                shutdown.clone(),
            )));
        }
        if let Some(interval) = config.retention {
            tasks.push(tokio::spawn(retention::run(
                store.clone(),
                interval,
                shutdown.clone(),
            )));
        }
        if let Some(interval) = config.webhooks {
            tasks.push(tokio::spawn(webhooks::run(
                store.clone(),
                config.secrets,
                interval,
                shutdown.clone(),
            )));
        }
        if let Some((path, interval)) = config.checkpoint_watch {
            tasks.push(tokio::spawn(checkpoint_watch::run(
                store.clone(),
                path,
                interval,
                shutdown.clone(),
            )));
        }
        if let Some(interval) = config.judge_canary {
            tasks.push(tokio::spawn(judge_canary::run(
                store.clone(),
                interval,
                shutdown.clone(),
            )));
        }
        if let Some(interval) = config.pair_judging {
            tasks.push(tokio::spawn(pair_judge::run(
                store.clone(),
                interval,
                shutdown.clone(),
            )));
        }
        if let Some(launcher) = config.launcher {
            tasks.push(tokio::spawn(launcher::run(
                store.clone(),
                launcher,
                LAUNCHER_ROUND,
                shutdown.clone(),
            )));
        }
        if let Some(interval) = config.snapshots {
            tasks.push(tokio::spawn(snapshots::run(store, interval, shutdown)));
        }
        Jobs { stop, tasks }
    }

    /// Asks every job to stop and waits for them: a round in progress finishes first, and a
    /// worker commits what it has answered.
    pub async fn stop(self) -> Result<(), tokio::task::JoinError> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await?;
        }
        Ok(())
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
