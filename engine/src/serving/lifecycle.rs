//! The life of a launch, the same wherever its servers run: started once its resources are
//! free, healthy once every replica answers (after the serving canary, for a checkpoint's
//! first launch), restarted when a replica dies (failed once the restarts are spent), failed
//! with its logs' tail when it never becomes healthy (its runs cancelled with the reason), and
//! retired once its checkpoint's runs are done and the idle period has passed.
//!
//! [`Servers`] is where they run: processes on this host ([`super::local`]) or a Kubernetes
//! cluster ([`super::kubernetes`]).

use super::canary::read_canary;
use crate::error::ServiceResult;
use arbiter_domain::serving::canary::{judge, CanaryReading, CANARY_PROMPTS};
use arbiter_domain::serving::launch::{LaunchPolicy, LaunchState};
use arbiter_store::{now_ms, LauncherInfo, ManagedLaunch, Store};
use async_trait::async_trait;
use std::collections::HashSet;
use std::time::Duration;

/// The whole serving canary's time on one server.
const CANARY_BUDGET: Duration = Duration::from_secs(60);

/// How starting a launch's servers went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    Started,
    /// Its servers outlived the previous launcher (a cluster's do): this one watches them
    /// from now on, in the state they were in, counting no restart.
    TookOver,
    /// Not now (its resources are held by other launches, or the cluster is busy): asked
    /// again next round, its state unchanged.
    Waiting,
}

/// What one look at a launch's servers found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// Replicas that ended since the last look, with how.
    pub exited: Vec<(usize, String)>,
    /// Every replica answers its health check (only asked for when `health` was).
    pub healthy: bool,
}

/// Where a launcher's servers run.
#[async_trait]
pub trait Servers: Send {
    /// The launcher as it announces itself.
    fn info(&self) -> LauncherInfo;

    fn policy(&self) -> &LaunchPolicy;

    /// The launches whose servers this launcher has started (or taken over) in this process.
    fn held(&self) -> Vec<i64>;

    /// Starts every replica of a launch it does not hold; `Err` fails the launch.
    async fn start(&mut self, launch: &ManagedLaunch) -> Result<Start, String>;

    /// When the launch's servers were last (re)started, for the health deadline.
    fn started_at(&self, launch_id: i64) -> i64;

    /// Looks at a held launch's servers: which replicas ended, and (when `health`) whether
    /// every one is healthy. `Err` when the launch cannot recover (an image that cannot be
    /// pulled).
    async fn check(&mut self, launch: &ManagedLaunch, health: bool) -> Result<Check, String>;

    /// Brings back the replicas that ended.
    async fn restart(&mut self, launch: &ManagedLaunch, replicas: &[usize]) -> Result<(), String>;

    /// Stops a launch's servers and forgets them.
    async fn stop(&mut self, launch_id: i64);

    /// Stops every launch's servers at once (at shutdown).
    async fn stop_every(&mut self);

    /// The end of each replica's log, headed by the replica.
    async fn log_tail(&mut self, launch_id: i64) -> String;

    /// Each round, before the launches are stepped: removes servers this launcher left
    /// running for launches that are no longer live (a cluster keeps them across a launcher's
    /// restart, or when a delete failed; processes die with their launcher). It may do so
    /// less often than every round.
    async fn tidy(&mut self, live: &[ManagedLaunch]) -> Result<(), String>;

    /// Whether its servers stop when this process does (processes do; a cluster's keep
    /// serving, and the next launcher with this id takes them over).
    fn stop_at_shutdown(&self) -> bool;
}

/// What one round did, by launch id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    pub started: Vec<i64>,
    pub healthy: Vec<i64>,
    pub restarted: Vec<i64>,
    pub failed: Vec<i64>,
    pub retired: Vec<i64>,
    /// Held by the serving canary.
    pub held: Vec<i64>,
}

pub struct Launcher<S> {
    servers: S,
}

impl<S: Servers> Launcher<S> {
    pub fn with(servers: S) -> Launcher<S> {
        Launcher { servers }
    }

    pub fn info(&self) -> LauncherInfo {
        self.servers.info()
    }

    pub fn servers(&self) -> &S {
        &self.servers
    }

    pub fn servers_mut(&mut self) -> &mut S {
        &mut self.servers
    }

    /// Beats the launcher's heart and moves each of its live launches one step on.
    pub async fn round(&mut self, store: &dyn Store) -> ServiceResult<RoundReport> {
        let info = self.servers.info();
        store.heartbeat_launcher(&info, now_ms()).await?;
        let launches = store.launches_to_manage(&info.id).await?;
        let live: HashSet<i64> = launches.iter().map(|launch| launch.id).collect();
        // Failed or retired by someone else (or gone): nothing of theirs keeps running.
        for id in self.servers.held() {
            if !live.contains(&id) {
                self.servers.stop(id).await;
            }
        }
        if let Err(err) = self.servers.tidy(&launches).await {
            tracing::warn!(error = %err, "the launcher could not tidy its servers");
        }
        let mut report = RoundReport::default();
        // A run resumed (or a request lost) on a checkpoint without servers: start them.
        let woken = store.wake_waiting(&info.id, now_ms()).await?;
        let launches = if woken.is_empty() {
            launches
        } else {
            store.launches_to_manage(&info.id).await?
        };
        for launch in &launches {
            self.step(store, launch, &mut report).await?;
        }
        Ok(report)
    }

    async fn step(
        &mut self,
        store: &dyn Store,
        launch: &ManagedLaunch,
        report: &mut RoundReport,
    ) -> ServiceResult<()> {
        let now = now_ms();
        if !self.servers.held().contains(&launch.id) {
            // Requested, or live from before this process started: start every replica.
            match self.servers.start(launch).await {
                Ok(Start::Waiting) => return Ok(()),
                Ok(Start::Started) => {}
                Ok(Start::TookOver) => return self.take_over(store, launch, report).await,
                Err(error) => {
                    store.fail_launch(launch.id, &error, "", now).await?;
                    report.failed.push(launch.id);
                    return Ok(());
                }
            }
            let to = if launch.state == LaunchState::Requested {
                LaunchState::Starting
            } else {
                LaunchState::Restarting
            };
            let reason = "the launcher restarted and started the servers again";
            store
                .move_launch(launch.id, to, Some(reason), None, now)
                .await?;
            report.started.push(launch.id);
            return Ok(());
        }
        let starting = matches!(
            launch.state,
            LaunchState::Requested | LaunchState::Starting | LaunchState::Restarting
        );
        let check = match self.servers.check(launch, starting).await {
            Ok(check) => check,
            Err(failure) => return self.fail(store, launch, &failure, report).await,
        };
        match launch.state {
            LaunchState::Restarting if !check.exited.is_empty() => {
                return self.restart(store, launch, &check.exited, report).await;
            }
            LaunchState::Requested | LaunchState::Starting | LaunchState::Restarting => {
                if let Some((replica, status)) = check.exited.first() {
                    let failure =
                        format!("replica {replica} exited ({status}) before it was healthy");
                    return self.fail(store, launch, &failure, report).await;
                }
                let started_at = self.servers.started_at(launch.id);
                if check.healthy {
                    if launch.needs_canary && !self.canary_passes(store, launch, report).await? {
                        return Ok(());
                    }
                    store
                        .move_launch(launch.id, LaunchState::Healthy, None, None, now)
                        .await?;
                    report.healthy.push(launch.id);
                } else if self.servers.policy().health_overdue(started_at, now) {
                    let failure = format!(
                        "not healthy {} s after it started",
                        (now - started_at) / 1000
                    );
                    return self.fail(store, launch, &failure, report).await;
                }
            }
            LaunchState::Healthy => {
                if !check.exited.is_empty() {
                    return self.restart(store, launch, &check.exited, report).await;
                }
                let last_activity = launch
                    .last_run_finished_at
                    .into_iter()
                    .chain(launch.healthy_at)
                    .max()
                    .unwrap_or(now);
                if self
                    .servers
                    .policy()
                    .idle_enough(launch.unfinished_runs, last_activity, now)
                {
                    let tail = self.servers.log_tail(launch.id).await;
                    if store.retire_launch(launch.id, Some(&tail), now).await? {
                        self.servers.stop(launch.id).await;
                        tracing::info!(launch = launch.id, checkpoint = %launch.checkpoint_name, "servers retired");
                        report.retired.push(launch.id);
                    }
                }
            }
            LaunchState::Retired | LaunchState::Failed | LaunchState::Held => {}
        }
        Ok(())
    }

    /// A launch whose servers this launcher now watches keeps its state: a starting one goes on
    /// to its health deadline, a healthy one keeps serving (a replica found not ready is
    /// logged; one that dies from now on is a restart as usual). Only servers that cannot
    /// recover (an image that cannot be pulled) fail it.
    async fn take_over(
        &mut self,
        store: &dyn Store,
        launch: &ManagedLaunch,
        report: &mut RoundReport,
    ) -> ServiceResult<()> {
        tracing::info!(launch = launch.id, checkpoint = %launch.checkpoint_name, state = launch.state.as_str(), "servers taken over");
        if launch.state != LaunchState::Healthy {
            return Ok(());
        }
        match self.servers.check(launch, true).await {
            Ok(check) if check.healthy => Ok(()),
            Ok(_) => {
                tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, "not every replica was ready when this launcher took the servers over");
                Ok(())
            }
            Err(failure) => self.fail(store, launch, &failure, report).await,
        }
    }

    /// Reads the serving canary off the first replica and judges it against the checkpoint's
    /// predecessor's: recorded when it passes; otherwise the servers stop and the launch is
    /// held with the reason (its runs paused). Returns whether it passed.
    async fn canary_passes(
        &mut self,
        store: &dyn Store,
        launch: &ManagedLaunch,
        report: &mut RoundReport,
    ) -> ServiceResult<bool> {
        // No URL reads as a server that does not answer (the canary then holds the launch).
        let url = launch.urls.first().map(String::as_str).unwrap_or_default();
        // Bounded, so a server that is healthy but hangs on generation holds the launcher's
        // round (and its heartbeat) for a minute at most.
        let reading =
            match tokio::time::timeout(CANARY_BUDGET, read_canary(url, &launch.served_model)).await
            {
                Ok(reading) => reading,
                Err(_) => CanaryReading {
                    perplexity_error: Some(format!(
                        "no answer within {} s",
                        CANARY_BUDGET.as_secs()
                    )),
                    answers: vec![String::new(); CANARY_PROMPTS.len()],
                    ..CanaryReading::default()
                },
            };
        store
            .heartbeat_launcher(&self.servers.info(), now_ms())
            .await?;
        let predecessor = store.predecessor_canary(launch.checkpoint_id).await?;
        let verdict = judge(
            &reading,
            predecessor
                .as_ref()
                .map(|(name, before)| (name.as_str(), before)),
        );
        if let Err(reason) = verdict {
            self.servers.stop(launch.id).await;
            let paused = store
                .hold_launch(launch.id, &reason, &reading, now_ms())
                .await?;
            tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, %reason, runs_paused = paused.len(), "checkpoint held by the serving canary");
            report.held.push(launch.id);
            return Ok(false);
        }
        store.record_canary(launch.id, &reading).await?;
        Ok(true)
    }

    /// Brings back the replicas that exited, or fails the launch once its restarts are spent.
    async fn restart(
        &mut self,
        store: &dyn Store,
        launch: &ManagedLaunch,
        exited: &[(usize, String)],
        report: &mut RoundReport,
    ) -> ServiceResult<()> {
        let deaths: Vec<String> = exited
            .iter()
            .map(|(replica, status)| format!("replica {replica} exited ({status})"))
            .collect();
        let failure = deaths.join("; ");
        if launch.restarts >= self.servers.policy().max_restarts {
            let failure = format!("{failure} after {} restarts", launch.restarts);
            return self.fail(store, launch, &failure, report).await;
        }
        let tail = self.servers.log_tail(launch.id).await;
        let replicas: Vec<usize> = exited.iter().map(|(replica, _)| *replica).collect();
        if let Err(error) = self.servers.restart(launch, &replicas).await {
            return self.fail(store, launch, &error, report).await;
        }
        tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, %failure, "a server died; restarting it");
        store
            .move_launch(
                launch.id,
                LaunchState::Restarting,
                Some(&failure),
                Some(&tail),
                now_ms(),
            )
            .await?;
        report.restarted.push(launch.id);
        Ok(())
    }

    /// Stops the servers and fails the launch with the logs' tail (its runs are cancelled).
    async fn fail(
        &mut self,
        store: &dyn Store,
        launch: &ManagedLaunch,
        failure: &str,
        report: &mut RoundReport,
    ) -> ServiceResult<()> {
        let tail = self.servers.log_tail(launch.id).await;
        self.servers.stop(launch.id).await;
        let cancelled = store
            .fail_launch(launch.id, failure, &tail, now_ms())
            .await?;
        tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, %failure, runs_cancelled = cancelled.len(), "servers failed");
        report.failed.push(launch.id);
        Ok(())
    }

    /// At shutdown: stops the servers that die with this process and puts their launches back
    /// to `requested` (a launcher with this id starts them again, counting no restart). A
    /// cluster's servers keep serving, their launches live, for the next launcher to take over.
    pub async fn stop_all(&mut self, store: &dyn Store) {
        if !self.servers.stop_at_shutdown() {
            return;
        }
        // Released first, so no worker claims for servers that are stopping.
        if let Err(err) = store.release_launches(&self.servers.info().id).await {
            tracing::warn!(error = %err, "launches not released at shutdown");
        }
        self.servers.stop_every().await;
    }
}
