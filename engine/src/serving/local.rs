//! The local launcher: starts each served checkpoint's replicas as processes on this host
//! from its engine's command template, keeps their logs, polls their health, restarts a
//! replica that dies, fails a launch that never becomes healthy (its runs cancelled with the
//! log's tail as the reason), and retires the servers once their checkpoint's runs are done
//! and the idle period has passed.
//!
//! Each replica runs in a process group of its own, so stopping it stops what it started
//! (vLLM's workers too): SIGTERM first, SIGKILL after a grace period.

use super::canary::read_canary;
use super::config::LocalLauncherConfig;
use crate::error::ServiceResult;
use arbiter_domain::serving::canary::{judge, CanaryReading, CANARY_PROMPTS};
use arbiter_domain::serving::command::{render, ReplicaVars};
use arbiter_domain::serving::launch::{log_tail, LaunchState};
use arbiter_domain::serving::{health_url, replica_url};
use arbiter_store::{now_ms, LauncherInfo, ManagedLaunch, Store};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;
use tokio::process::Child;

/// How long a stopped server gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// One health check's wait.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// The whole serving canary's time on one server.
const CANARY_BUDGET: Duration = Duration::from_secs(60);
/// How long a killed replica's process group gets to be gone before its replacement starts.
const GONE_WAIT: Duration = Duration::from_secs(5);
/// Bytes read from the end of each replica's log for a launch's tail.
const LOG_READ_BYTES: u64 = 16 * 1024;

struct Replica {
    child: Child,
    /// Its process group (its pid, kept: the child forgets it once reaped).
    group: u32,
    log: PathBuf,
}

/// One launch's running replicas.
struct Servers {
    replicas: Vec<Replica>,
    /// When they were (re)started, for the health deadline.
    started_at: i64,
    /// The GPUs the launch holds, `tp` per replica in replica order.
    gpus: Vec<usize>,
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

pub struct LocalLauncher {
    config: LocalLauncherConfig,
    http: reqwest::Client,
    servers: HashMap<i64, Servers>,
}

impl LocalLauncher {
    pub fn new(config: LocalLauncherConfig) -> LocalLauncher {
        let http = reqwest::Client::builder()
            .timeout(HEALTH_TIMEOUT)
            .no_proxy()
            .build()
            .expect("a plain HTTP client builds");
        LocalLauncher {
            config,
            http,
            servers: HashMap::new(),
        }
    }

    pub fn info(&self) -> LauncherInfo {
        LauncherInfo {
            id: self.config.id.clone(),
            host: self.config.host.clone(),
            engines: self.config.engines.keys().copied().collect(),
            port_first: self.config.ports.0,
            port_last: self.config.ports.1,
        }
    }

    /// Beats the launcher's heart and moves each of its live launches one step on.
    pub async fn round(&mut self, store: &dyn Store) -> ServiceResult<RoundReport> {
        store.heartbeat_launcher(&self.info(), now_ms()).await?;
        let launches = store.launches_to_manage(&self.config.id).await?;
        let live: HashSet<i64> = launches.iter().map(|launch| launch.id).collect();
        // Failed or retired by someone else (or gone): nothing of theirs keeps running.
        let orphans: Vec<i64> = self
            .servers
            .keys()
            .filter(|id| !live.contains(id))
            .copied()
            .collect();
        for id in orphans {
            if let Some(servers) = self.servers.remove(&id) {
                stop(servers).await;
            }
        }
        let mut report = RoundReport::default();
        // A run resumed (or a request lost) on a checkpoint without servers: start them.
        let woken = store.wake_waiting(&self.config.id, now_ms()).await?;
        let launches = if woken.is_empty() {
            launches
        } else {
            store.launches_to_manage(&self.config.id).await?
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
        if !self.servers.contains_key(&launch.id) {
            // Requested, or live from before this process started: start every replica, once
            // its GPUs are free (a plan needing more than the host has fails at once).
            let gpus = match self.free_gpus(launch) {
                Ok(Some(gpus)) => Ok(gpus),
                Ok(None) => return Ok(()),
                Err(error) => Err(error),
            };
            let started = gpus.and_then(|gpus| {
                let replicas = (0..launch.ports.len())
                    .map(|replica| self.spawn(launch, replica, &gpus))
                    .collect::<Result<Vec<Replica>, String>>()?;
                Ok((replicas, gpus))
            });
            let (replicas, gpus) = match started {
                Ok(started) => started,
                Err(error) => {
                    store.fail_launch(launch.id, &error, "", now).await?;
                    report.failed.push(launch.id);
                    return Ok(());
                }
            };
            self.servers.insert(
                launch.id,
                Servers {
                    replicas,
                    started_at: now,
                    gpus,
                },
            );
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
        let exited = self.exited_replicas(launch.id);
        match launch.state {
            LaunchState::Restarting if !exited.is_empty() => {
                return self.restart(store, launch, &exited, report).await;
            }
            LaunchState::Requested | LaunchState::Starting | LaunchState::Restarting => {
                if let Some((replica, status)) = exited.first() {
                    let failure =
                        format!("replica {replica} exited ({status}) before it was healthy");
                    return self.fail(store, launch, &failure, report).await;
                }
                let started_at = self.servers[&launch.id].started_at;
                if self.all_healthy(launch).await {
                    if launch.needs_canary {
                        let url = replica_url(&self.config.host, launch.ports[0]);
                        // Bounded, so a server that is healthy but hangs on generation holds
                        // the launcher's round (and its heartbeat) for a minute at most.
                        let reading = match tokio::time::timeout(
                            CANARY_BUDGET,
                            read_canary(&url, &launch.served_model),
                        )
                        .await
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
                        store.heartbeat_launcher(&self.info(), now_ms()).await?;
                        let predecessor = store.predecessor_canary(launch.checkpoint_id).await?;
                        let verdict = judge(
                            &reading,
                            predecessor
                                .as_ref()
                                .map(|(name, before)| (name.as_str(), before)),
                        );
                        if let Err(reason) = verdict {
                            if let Some(servers) = self.servers.remove(&launch.id) {
                                stop(servers).await;
                            }
                            let paused = store
                                .hold_launch(launch.id, &reason, &reading, now_ms())
                                .await?;
                            tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, %reason, runs_paused = paused.len(), "checkpoint held by the serving canary");
                            report.held.push(launch.id);
                            return Ok(());
                        }
                        store.record_canary(launch.id, &reading).await?;
                    }
                    store
                        .move_launch(launch.id, LaunchState::Healthy, None, None, now)
                        .await?;
                    report.healthy.push(launch.id);
                } else if self.config.policy.health_overdue(started_at, now) {
                    let failure = format!(
                        "not healthy {} s after it started",
                        (now - started_at) / 1000
                    );
                    return self.fail(store, launch, &failure, report).await;
                }
            }
            LaunchState::Healthy => {
                if !exited.is_empty() {
                    return self.restart(store, launch, &exited, report).await;
                } else {
                    let last_activity = launch
                        .last_run_finished_at
                        .into_iter()
                        .chain(launch.healthy_at)
                        .max()
                        .unwrap_or(now);
                    if self
                        .config
                        .policy
                        .idle_enough(launch.unfinished_runs, last_activity, now)
                        && store
                            .retire_launch(launch.id, Some(&self.log_tail(launch.id)), now)
                            .await?
                    {
                        if let Some(servers) = self.servers.remove(&launch.id) {
                            stop(servers).await;
                        }
                        tracing::info!(launch = launch.id, checkpoint = %launch.checkpoint_name, "servers retired");
                        report.retired.push(launch.id);
                    }
                }
            }
            LaunchState::Retired | LaunchState::Failed | LaunchState::Held => {}
        }
        Ok(())
    }

    /// Starts the replicas that exited again, or fails the launch once its restarts are
    /// spent.
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
        if launch.restarts >= self.config.policy.max_restarts {
            let failure = format!("{failure} after {} restarts", launch.restarts);
            return self.fail(store, launch, &failure, report).await;
        }
        let tail = self.log_tail(launch.id);
        let now = now_ms();
        for (replica, _) in exited {
            let gpus = self.servers[&launch.id].gpus.clone();
            // What the dead replica started (vLLM's workers) goes with it, GPUs and port too.
            let group = self.servers[&launch.id].replicas[*replica].group;
            signal_group(group, libc::SIGKILL);
            wait_until_gone(group).await;
            match self.spawn(launch, *replica, &gpus) {
                Ok(fresh) => {
                    if let Some(servers) = self.servers.get_mut(&launch.id) {
                        servers.replicas[*replica] = fresh;
                        servers.started_at = now;
                    }
                }
                Err(error) => return self.fail(store, launch, &error, report).await,
            }
        }
        tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, %failure, "a server died; restarting it");
        store
            .move_launch(
                launch.id,
                LaunchState::Restarting,
                Some(&failure),
                Some(&tail),
                now,
            )
            .await?;
        report.restarted.push(launch.id);
        Ok(())
    }

    /// The GPUs a launch's replicas get: `tp` each, free of every other launch's; refused
    /// when this host has too few (a plan for several nodes asks more than one host holds).
    fn free_gpus(&self, launch: &ManagedLaunch) -> Result<Option<Vec<usize>>, String> {
        if !launch.engine.uses_gpus() {
            return Ok(Some(Vec::new()));
        }
        let needed = (launch.plan.tensor_parallel as usize) * launch.ports.len();
        if needed > self.config.gpus as usize {
            return Err(format!(
                "the plan needs {needed} GPUs (tp={} × {} replicas); this launcher has {}",
                launch.plan.tensor_parallel,
                launch.ports.len(),
                self.config.gpus
            ));
        }
        let held: std::collections::HashSet<usize> = self
            .servers
            .values()
            .flat_map(|servers| servers.gpus.iter().copied())
            .collect();
        let free: Vec<usize> = (0..self.config.gpus as usize)
            .filter(|gpu| !held.contains(gpu))
            .take(needed)
            .collect();
        // Held by other launches: it waits, requested, until they retire.
        Ok((free.len() == needed).then_some(free))
    }

    /// Stops the servers and fails the launch with the logs' tail (its runs are cancelled).
    async fn fail(
        &mut self,
        store: &dyn Store,
        launch: &ManagedLaunch,
        failure: &str,
        report: &mut RoundReport,
    ) -> ServiceResult<()> {
        let tail = self.log_tail(launch.id);
        if let Some(servers) = self.servers.remove(&launch.id) {
            stop(servers).await;
        }
        let cancelled = store
            .fail_launch(launch.id, failure, &tail, now_ms())
            .await?;
        tracing::warn!(launch = launch.id, checkpoint = %launch.checkpoint_name, %failure, runs_cancelled = cancelled.len(), "servers failed");
        report.failed.push(launch.id);
        Ok(())
    }

    fn spawn(
        &self,
        launch: &ManagedLaunch,
        replica: usize,
        gpus: &[usize],
    ) -> Result<Replica, String> {
        let template = self.config.engines.get(&launch.engine).ok_or_else(|| {
            format!(
                "this launcher has no command for `{}`",
                launch.engine.as_str()
            )
        })?;
        let port = launch.ports[replica];
        let args = render(
            template,
            &ReplicaVars {
                path: &launch.model_path,
                model: &launch.served_model,
                host: &self.config.host,
                port,
                tensor_parallel: launch.plan.tensor_parallel,
                replica: replica as u32,
            },
        )?;
        std::fs::create_dir_all(&self.config.log_dir).map_err(|err| {
            format!(
                "cannot make the log folder {}: {err}",
                self.config.log_dir.display()
            )
        })?;
        let log = self
            .config
            .log_dir
            .join(format!("launch-{}-replica-{replica}.log", launch.id));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|err| format!("cannot open {}: {err}", log.display()))?;
        let stderr = file
            .try_clone()
            .map_err(|err| format!("cannot open {}: {err}", log.display()))?;
        let mut command = tokio::process::Command::new(&args[0]);
        command
            .args(&args[1..])
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .kill_on_drop(true)
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
        // which is async-signal-safe. The server gets SIGTERM if this process dies (even by
        // SIGKILL), so no server outlives its launcher holding a port and GPUs.
        let launcher = std::process::id();
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launcher died before the signal was set: nobody would stop this server.
                if libc::getppid() as u32 != launcher {
                    return Err(std::io::Error::other("the launcher is gone"));
                }
                Ok(())
            });
        }
        if launch.engine.uses_gpus() {
            // Replica r of a tensor-parallel group of tp takes the launch's GPUs r·tp … r·tp + tp − 1.
            let tp = launch.plan.tensor_parallel as usize;
            let mine: Vec<String> = gpus
                .iter()
                .skip(replica * tp)
                .take(tp)
                .map(|gpu| gpu.to_string())
                .collect();
            command.env("CUDA_VISIBLE_DEVICES", mine.join(","));
        }
        let child = command
            .spawn()
            .map_err(|err| format!("cannot start `{}`: {err}", args[0]))?;
        let group = child.id().unwrap_or_default();
        tracing::info!(launch = launch.id, replica, port, program = %args[0], "server started");
        Ok(Replica { child, group, log })
    }

    /// Replicas of the launch whose process has ended, with how.
    fn exited_replicas(&mut self, launch_id: i64) -> Vec<(usize, String)> {
        let Some(servers) = self.servers.get_mut(&launch_id) else {
            return Vec::new();
        };
        servers
            .replicas
            .iter_mut()
            .enumerate()
            .filter_map(|(index, replica)| match replica.child.try_wait() {
                Ok(Some(status)) => Some((index, status.to_string())),
                Ok(None) => None,
                Err(err) => Some((index, err.to_string())),
            })
            .collect()
    }

    async fn all_healthy(&self, launch: &ManagedLaunch) -> bool {
        for port in &launch.ports {
            let healthy = self
                .http
                .get(health_url(&self.config.host, *port))
                .send()
                .await
                .is_ok_and(|response| response.status().is_success());
            if !healthy {
                return false;
            }
        }
        true
    }

    /// The end of each replica's log, headed by the replica.
    fn log_tail(&self, launch_id: i64) -> String {
        let Some(servers) = self.servers.get(&launch_id) else {
            return String::new();
        };
        servers
            .replicas
            .iter()
            .enumerate()
            .map(|(index, replica)| {
                format!(
                    "── replica {index} ──\n{}",
                    log_tail(&read_end(&replica.log))
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The process ids of a launch's replicas in replica order (a replica that has exited has
    /// none), for an operator's diagnosis.
    pub fn replica_pids(&self, launch_id: i64) -> Vec<Option<u32>> {
        self.servers
            .get(&launch_id)
            .map(|servers| {
                servers
                    .replicas
                    .iter()
                    .map(|replica| replica.child.id())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops every server this launcher runs (at shutdown) and puts their launches back to
    /// `requested`: a launcher with this id starts them again, counting no restart.
    pub async fn stop_all(&mut self, store: &dyn Store) {
        // Released first, so no worker claims for servers that are stopping.
        if let Err(err) = store.release_launches(&self.config.id).await {
            tracing::warn!(error = %err, "launches not released at shutdown");
        }
        futures::future::join_all(self.servers.drain().map(|(_, servers)| stop(servers))).await;
    }
}

fn read_end(path: &std::path::Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(length.saturating_sub(LOG_READ_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// SIGTERM to each replica's process group, then (after it exits or the grace runs out)
/// SIGKILL to whatever of the group is left, all replicas at once.
async fn stop(servers: Servers) {
    futures::future::join_all(servers.replicas.into_iter().map(|mut replica| async move {
        signal_group(replica.group, libc::SIGTERM);
        let _ = tokio::time::timeout(STOP_GRACE, replica.child.wait()).await;
        signal_group(replica.group, libc::SIGKILL);
        let _ = replica.child.wait().await;
    }))
    .await;
}

/// Waits (up to [`GONE_WAIT`]) until no process of the group is left, so a replacement
/// finds its port and GPUs free.
async fn wait_until_gone(group: u32) {
    let Ok(pid) = libc::pid_t::try_from(group) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    let deadline = tokio::time::Instant::now() + GONE_WAIT;
    // SAFETY: kill(2) with signal 0 only asks whether the group still has a process.
    while unsafe { libc::kill(-pid, 0) } == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signal_group(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals the process group the replica leads (it was
    // spawned with process_group(0)); it touches no memory of ours.
    unsafe {
        libc::kill(-pid, signal);
    }
}
