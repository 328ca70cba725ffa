//! The local launcher's servers: each served checkpoint's replicas as processes on this host,
//! started from its engine's command template on the launch's GPUs, their logs kept, their
//! health polled, a replica that dies started again (the launch's life is
//! [`super::lifecycle`]'s).
//!
//! Each replica runs in a process group of its own, so stopping it stops what it started
//! (vLLM's workers too): SIGTERM first, SIGKILL after a grace period.

use super::config::LocalLauncherConfig;
use super::lifecycle::{self, Check, Launcher, Start};
use arbiter_domain::serving::command::{render, ReplicaVars};
use arbiter_domain::serving::health_url;
use arbiter_domain::serving::launch::{log_tail, LaunchPolicy};
use arbiter_store::{now_ms, LauncherInfo, ManagedLaunch};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;
use tokio::process::Child;

/// How long a stopped server gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// One health check's wait.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
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
struct Processes {
    replicas: Vec<Replica>,
    /// When they were (re)started, for the health deadline.
    started_at: i64,
    /// The GPUs the launch holds, `tp` per replica in replica order.
    gpus: Vec<usize>,
}

pub struct LocalServers {
    config: LocalLauncherConfig,
    http: reqwest::Client,
    servers: HashMap<i64, Processes>,
}

/// A launcher of processes on this host.
pub type LocalLauncher = Launcher<LocalServers>;

impl Launcher<LocalServers> {
    pub fn new(config: LocalLauncherConfig) -> LocalLauncher {
        let http = reqwest::Client::builder()
            .timeout(HEALTH_TIMEOUT)
            .no_proxy()
            .build()
            .expect("a plain HTTP client builds");
        Launcher::with(LocalServers {
            config,
            http,
            servers: HashMap::new(),
        })
    }

    /// The process ids of a launch's replicas in replica order (a replica that has exited has
    /// none), for an operator's diagnosis.
    pub fn replica_pids(&self, launch_id: i64) -> Vec<Option<u32>> {
        self.servers()
            .servers
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
}

#[async_trait]
impl lifecycle::Servers for LocalServers {
    fn info(&self) -> LauncherInfo {
        LauncherInfo {
            id: self.config.id.clone(),
            host: self.config.host.clone(),
            engines: self.config.engines.keys().copied().collect(),
            port_first: self.config.ports.0,
            port_last: self.config.ports.1,
            replica_url: String::new(),
        }
    }

    fn policy(&self) -> &LaunchPolicy {
        &self.config.policy
    }

    fn held(&self) -> Vec<i64> {
        self.servers.keys().copied().collect()
    }

    /// Starts every replica once its GPUs are free (a plan needing more than the host has
    /// fails at once).
    async fn start(&mut self, launch: &ManagedLaunch) -> Result<Start, String> {
        let Some(gpus) = self.free_gpus(launch)? else {
            return Ok(Start::Waiting);
        };
        let replicas = (0..launch.ports.len())
            .map(|replica| self.spawn(launch, replica, &gpus))
            .collect::<Result<Vec<Replica>, String>>()?;
        self.servers.insert(
            launch.id,
            Processes {
                replicas,
                started_at: now_ms(),
                gpus,
            },
        );
        Ok(Start::Started)
    }

    fn started_at(&self, launch_id: i64) -> i64 {
        self.servers
            .get(&launch_id)
            .map_or_else(now_ms, |servers| servers.started_at)
    }

    async fn check(&mut self, launch: &ManagedLaunch, health: bool) -> Result<Check, String> {
        let exited = self.exited_replicas(launch.id);
        let healthy = health && exited.is_empty() && self.all_healthy(launch).await;
        Ok(Check { exited, healthy })
    }

    async fn restart(&mut self, launch: &ManagedLaunch, replicas: &[usize]) -> Result<(), String> {
        let now = now_ms();
        for &replica in replicas {
            let gpus = self.servers[&launch.id].gpus.clone();
            // What the dead replica started (vLLM's workers) goes with it, GPUs and port too.
            let group = self.servers[&launch.id].replicas[replica].group;
            signal_group(group, libc::SIGKILL);
            wait_until_gone(group).await;
            let fresh = self.spawn(launch, replica, &gpus)?;
            if let Some(servers) = self.servers.get_mut(&launch.id) {
                servers.replicas[replica] = fresh;
                servers.started_at = now;
            }
        }
        Ok(())
    }

    async fn stop(&mut self, launch_id: i64) {
        if let Some(servers) = self.servers.remove(&launch_id) {
            stop(servers).await;
        }
    }

    async fn stop_every(&mut self) {
        futures::future::join_all(self.servers.drain().map(|(_, servers)| stop(servers))).await;
    }

    async fn log_tail(&mut self, launch_id: i64) -> String {
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

    /// Nothing to tidy: servers started by an earlier process died with it.
    async fn tidy(&mut self, _live: &[ManagedLaunch]) -> Result<(), String> {
        Ok(())
    }

    fn stop_at_shutdown(&self) -> bool {
        true
    }
}

impl LocalServers {
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
        let held: HashSet<usize> = self
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
async fn stop(servers: Processes) {
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
