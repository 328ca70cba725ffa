//! The Kubernetes launcher's servers: each replica of a served checkpoint is a Deployment of
//! one pod and a Service ([`arbiter_domain::serving::kubernetes`]), applied server-side through
//! the API, watched through its pod (ready, restarted, replaced, stuck on its image), and
//! deleted when the launch retires or fails. Kubernetes restarts a container that dies; the
//! launcher counts that as a restart, as it does a local process it starts again.
//!
//! Its servers do not stop with the launcher: they keep serving while it restarts, and the next
//! launcher with the same id takes them over, counting no restart (it applies them again, which
//! leaves pods that are already right alone, and checks that every replica is still ready).
//! Every minute it deletes objects it labelled that no live launch of its own names, so a
//! delete that failed, or a launch failed while the launcher was away, leaves nothing running.

use super::config::ClusterLauncherConfig;
use super::lifecycle::{self, Check, Launcher, Start};
use arbiter_domain::serving::kubernetes::{
    label_value, replica_name, replica_objects, ReplicaSet, LAUNCH_LABEL, MANAGED_BY,
};
use arbiter_domain::serving::launch::{log_tail, LaunchPolicy, LaunchState};
use arbiter_domain::serving::Serving;
use arbiter_store::{now_ms, LauncherInfo, ManagedLaunch};
use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The field manager Arbiter's server-side applies are recorded under.
const FIELD_MANAGER: &str = "arbiter";
/// The engine's container in each pod (see the domain's objects).
const CONTAINER: &str = "engine";
/// How often objects no live launch names are looked for.
const TIDY_EVERY: Duration = Duration::from_secs(60);
/// Lines and bytes of each replica's log read for a launch's tail.
const LOG_LINES: i64 = 200;
const LOG_BYTES: i64 = 16 * 1024;
/// A container waiting for one of these will not start without someone changing something:
/// the launch fails at once rather than at its health deadline. (`ErrImagePull` alone may be a
/// registry's passing error; `ImagePullBackOff` follows once pulls keep failing.)
const HOPELESS: [&str; 4] = [
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// One launch's objects, as this launcher applied them.
struct Applied {
    /// Each replica's Deployment and Service name, in replica order.
    names: Vec<String>,
    started_at: i64,
    /// Each replica's pod and its container's restarts when last looked at.
    seen: Vec<Option<(String, i32)>>,
}

pub struct ClusterServers {
    config: ClusterLauncherConfig,
    client: kube::Client,
    launches: HashMap<i64, Applied>,
    tidied_at: Option<tokio::time::Instant>,
    tidy_every: Duration,
}

/// A launcher of Deployments in a Kubernetes cluster.
pub type ClusterLauncher = Launcher<ClusterServers>;

impl ClusterServers {
    /// Finds the cluster as `config` says: the kubeconfig context it names, else the
    /// kubeconfig's current one, else the pod's service account.
    pub async fn connect(config: ClusterLauncherConfig) -> Result<ClusterLauncher, String> {
        let mut settings = match &config.context {
            Some(context) => kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions {
                context: Some(context.clone()),
                ..Default::default()
            })
            .await
            .map_err(|err| format!("kubeconfig context `{context}`: {err}"))?,
            None => kube::Config::infer().await.map_err(|err| {
                format!("no cluster found (kubeconfig or service account): {err}")
            })?,
        };
        settings.default_namespace = config.namespace.clone();
        let client = kube::Client::try_from(settings)
            .map_err(|err| format!("cannot make a Kubernetes client: {err}"))?;
        Ok(ClusterServers::with_client(config, client))
    }

    /// A launcher on a client made elsewhere (a test's API server).
    pub fn with_client(config: ClusterLauncherConfig, client: kube::Client) -> ClusterLauncher {
        Launcher::with(ClusterServers {
            config,
            client,
            launches: HashMap::new(),
            tidied_at: None,
            tidy_every: TIDY_EVERY,
        })
    }

    /// How often it looks for objects no live launch names (a minute unless set).
    pub fn set_tidy_every(&mut self, every: Duration) {
        self.tidy_every = every;
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// The label selector of this launcher's objects.
    fn own_objects(&self) -> String {
        format!(
            "{}={},arbiter.dev/launcher={}",
            MANAGED_BY.0,
            MANAGED_BY.1,
            label_value(&self.config.id)
        )
    }

    /// The launch's pods of the named replicas (those being deleted left out), by replica name.
    async fn pods(
        &self,
        launch_id: i64,
        names: &[String],
    ) -> Result<HashMap<String, Pod>, kube::Error> {
        let selector = format!(
            "{LAUNCH_LABEL}={launch_id},app.kubernetes.io/name in ({})",
            names.join(",")
        );
        let pods = self
            .api::<Pod>()
            .list(&ListParams::default().labels(&selector))
            .await?;
        let mut newest: HashMap<String, Pod> = HashMap::new();
        for pod in pods.items {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(name) = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get("app.kubernetes.io/name"))
                .cloned()
            else {
                continue;
            };
            let newer = newest.get(&name).is_none_or(|kept| {
                pod.metadata.creation_timestamp > kept.metadata.creation_timestamp
            });
            if newer {
                newest.insert(name, pod);
            }
        }
        Ok(newest)
    }

    /// Deletes a replica's Deployment (its pod goes with it) and Service; already gone is
    /// fine. False when the API refused or did not answer.
    async fn delete(&self, name: &str) -> bool {
        let background = DeleteParams::background();
        let deployment = self.api::<Deployment>().delete(name, &background).await;
        let service = self.api::<Service>().delete(name, &background).await;
        let mut deleted = true;
        for (kind, result) in [
            ("Deployment", deployment.map(|_| ())),
            ("Service", service.map(|_| ())),
        ] {
            match result {
                Ok(()) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(err) => {
                    tracing::warn!(%name, kind, error = %err, "not deleted; the launcher's tidying retries");
                    deleted = false;
                }
            }
        }
        deleted
    }

    /// The names a live launch's replicas have (whether or not this process applied them).
    fn names_of(launch: &ManagedLaunch) -> Vec<String> {
        launch
            .ports
            .iter()
            .map(|port| replica_name(&launch.checkpoint_name, *port))
            .collect()
    }
}

/// The engine container's status in a pod.
fn engine_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|status| status.name == CONTAINER)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Why a container that ended did: `exit code 137, OOMKilled`.
fn how_it_ended(status: &ContainerStatus) -> String {
    let terminated = status
        .last_state
        .as_ref()
        .and_then(|state| state.terminated.as_ref());
    match terminated {
        Some(terminated) => match terminated.reason.as_deref() {
            Some(reason) if !reason.is_empty() => {
                format!("exit code {}, {reason}", terminated.exit_code)
            }
            _ => format!("exit code {}", terminated.exit_code),
        },
        None => "the container restarted".into(),
    }
}

/// What a pod says about its replica now, apart from readiness: why it cannot start, and
/// what it is waiting for (for the log tail).
fn waiting(pod: &Pod) -> Option<(String, String)> {
    let state = engine_status(pod)?.state.as_ref()?.waiting.as_ref()?;
    Some((
        state.reason.clone().unwrap_or_default(),
        state.message.clone().unwrap_or_default(),
    ))
}

/// A pod's state in a few lines: its phase, conditions that are not met (with the scheduler's
/// message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu"), what the container waits
/// for and how it last ended.
fn describe(pod: &Pod) -> String {
    let mut lines = Vec::new();
    let status = pod.status.as_ref();
    let phase = status
        .and_then(|status| status.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    lines.push(format!(
        "pod {} is {phase}",
        pod.metadata.name.as_deref().unwrap_or("?")
    ));
    for condition in status
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|condition| condition.status != "True")
    {
        let why = [condition.reason.as_deref(), condition.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        if !why.is_empty() {
            lines.push(format!("{} is not met: {why}", condition.type_));
        }
    }
    if let Some((reason, message)) = waiting(pod) {
        lines.push(
            format!("the container waits: {reason} {message}")
                .trim_end()
                .into(),
        );
    }
    if let Some(status) = engine_status(pod) {
        if status.restart_count > 0 {
            lines.push(format!(
                "it restarted {} times; last: {}",
                status.restart_count,
                how_it_ended(status)
            ));
        }
    }
    lines.join("\n")
}

#[async_trait]
impl lifecycle::Servers for ClusterServers {
    fn info(&self) -> LauncherInfo {
        LauncherInfo {
            id: self.config.id.clone(),
            host: format!("kubernetes/{}", self.config.namespace),
            engines: self.config.engines.keys().copied().collect(),
            port_first: self.config.ports.0,
            port_last: self.config.ports.1,
            replica_url: self.config.replica_url.clone(),
        }
    }

    fn policy(&self) -> &LaunchPolicy {
        &self.config.policy
    }

    fn held(&self) -> Vec<i64> {
        self.launches.keys().copied().collect()
    }

    /// Applies every replica's Deployment and Service (server-side apply: creating what is
    /// missing, changing what differs, leaving pods that are already right alone). An API
    /// that does not answer leaves the launch requested for the next round; one that refuses
    /// the objects fails it.
    async fn start(&mut self, launch: &ManagedLaunch) -> Result<Start, String> {
        let engine = self.config.engines.get(&launch.engine).ok_or_else(|| {
            format!(
                "this launcher has no image for `{}`",
                launch.engine.as_str()
            )
        })?;
        let serving = Serving {
            engine: launch.engine,
            model_path: launch.model_path.clone(),
            plan: launch.plan.clone(),
        };
        let objects = replica_objects(
            engine,
            &ReplicaSet {
                launcher: &self.config.id,
                launch: launch.id,
                checkpoint: &launch.checkpoint_name,
                served_model: &launch.served_model,
                ports: &launch.ports,
            },
            &serving,
        )?;
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let names = ClusterServers::names_of(launch);
        for object in &objects {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let kind = object["kind"].as_str().unwrap_or_default();
            let applied = match kind {
                "Deployment" => self
                    .api::<Deployment>()
                    .patch(name, &apply, &Patch::Apply(object))
                    .await
                    .map(|_| ()),
                _ => self
                    .api::<Service>()
                    .patch(name, &apply, &Patch::Apply(object))
                    .await
                    .map(|_| ()),
            };
            match applied {
                Ok(()) => {}
                // Refused (invalid, forbidden, a quota): asking again will not help. Throttled
                // (429) or timed out (408) is the API being busy.
                Err(kube::Error::Api(status))
                    if (400..500).contains(&status.code) && ![408, 429].contains(&status.code) =>
                {
                    // What this launch applied goes now; servers an earlier launcher process
                    // left serving go with the next tidy, once the failed launch is not live.
                    if launch.state == LaunchState::Requested {
                        for applied in &names {
                            self.delete(applied).await;
                        }
                    }
                    return Err(format!(
                        "the cluster refused {kind} {name}: {}",
                        status.message
                    ));
                }
                Err(err) => {
                    tracing::warn!(launch = launch.id, %name, kind, error = %err, "the cluster did not take an object; trying again next round");
                    return Ok(Start::Waiting);
                }
            }
        }
        tracing::info!(launch = launch.id, checkpoint = %launch.checkpoint_name, replicas = launch.ports.len(), namespace = %self.config.namespace, "servers applied");
        // A launch past `requested` had its servers applied by an earlier launcher process: its
        // health deadline runs from when they were started, not from this take-over.
        let fresh = launch.state == LaunchState::Requested;
        let started_at = match launch.started_at {
            Some(started_at) if !fresh => started_at,
            _ => now_ms(),
        };
        self.launches.insert(
            launch.id,
            Applied {
                names,
                started_at,
                seen: vec![None; launch.ports.len()],
            },
        );
        Ok(if fresh {
            Start::Started
        } else {
            Start::TookOver
        })
    }

    fn started_at(&self, launch_id: i64) -> i64 {
        self.launches
            .get(&launch_id)
            .map_or_else(now_ms, |applied| applied.started_at)
    }

    /// One list of the launch's pods: a replica whose container restarted, or whose pod was
    /// replaced (evicted, its node lost), has exited; one whose image cannot be pulled fails
    /// the launch. An API that does not answer finds nothing (the health deadline still runs).
    async fn check(&mut self, launch: &ManagedLaunch, health: bool) -> Result<Check, String> {
        let Some(names) = self
            .launches
            .get(&launch.id)
            .map(|applied| applied.names.clone())
        else {
            return Ok(Check::default());
        };
        let pods = match self.pods(launch.id, &names).await {
            Ok(pods) => pods,
            Err(err) => {
                tracing::warn!(launch = launch.id, error = %err, "the cluster did not list the pods");
                return Ok(Check::default());
            }
        };
        let applied = self.launches.get_mut(&launch.id).expect("looked up above");
        let mut check = Check {
            exited: Vec::new(),
            healthy: health,
        };
        for (replica, name) in names.iter().enumerate() {
            let Some(pod) = pods.get(name) else {
                check.healthy = false;
                continue;
            };
            if let Some((reason, message)) = waiting(pod) {
                if HOPELESS.contains(&reason.as_str()) {
                    return Err(format!(
                        "replica {replica} cannot start: {reason}: {message}"
                    ));
                }
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let restarts = engine_status(pod).map_or(0, |status| status.restart_count);
            match &applied.seen[replica] {
                Some((seen_uid, _)) if *seen_uid != uid => {
                    check
                        .exited
                        .push((replica, "its pod was replaced".to_string()));
                }
                Some((_, seen_restarts)) if restarts > *seen_restarts => {
                    let mut how = engine_status(pod).map(how_it_ended).unwrap_or_default();
                    if restarts - seen_restarts > 1 {
                        how = format!(
                            "{how}; {} restarts since the last look",
                            restarts - seen_restarts
                        );
                    }
                    check.exited.push((replica, how));
                }
                _ => {}
            }
            applied.seen[replica] = Some((uid, restarts));
            check.healthy &= is_ready(pod);
        }
        check.healthy &= check.exited.is_empty();
        Ok(check)
    }

    /// Kubernetes starts a dead container (or a lost pod) again by itself: the health
    /// deadline starts over.
    async fn restart(&mut self, launch: &ManagedLaunch, _replicas: &[usize]) -> Result<(), String> {
        if let Some(applied) = self.launches.get_mut(&launch.id) {
            applied.started_at = now_ms();
        }
        Ok(())
    }

    async fn stop(&mut self, launch_id: i64) {
        let Some(applied) = self.launches.remove(&launch_id) else {
            return;
        };
        for name in &applied.names {
            self.delete(name).await;
        }
        tracing::info!(launch = launch_id, namespace = %self.config.namespace, "servers deleted");
    }

    /// Not called at shutdown (a cluster's servers keep serving); deletes them all.
    async fn stop_every(&mut self) {
        for launch_id in self.held() {
            self.stop(launch_id).await;
        }
    }

    /// Each replica's pod described, then the end of its engine's log: the container's before
    /// its last restart, if any, then the current one's (unless it waits to start again).
    async fn log_tail(&mut self, launch_id: i64) -> String {
        let Some(names) = self
            .launches
            .get(&launch_id)
            .map(|applied| applied.names.clone())
        else {
            return String::new();
        };
        let pods = match self.pods(launch_id, &names).await {
            Ok(pods) => pods,
            Err(err) => return format!("the pods could not be listed: {err}"),
        };
        let mut parts = Vec::new();
        for (replica, name) in names.iter().enumerate() {
            let Some(pod) = pods.get(name) else {
                parts.push(format!("── replica {replica} ──\nno pod of {name}"));
                continue;
            };
            let status = engine_status(pod);
            let restarted = status.is_some_and(|status| status.restart_count > 0);
            // A container waiting to start again has no log of its own yet.
            let waiting_again = restarted
                && status
                    .and_then(|status| status.state.as_ref())
                    .is_some_and(|state| state.waiting.is_some());
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let mut logs = Vec::new();
            // The log of the container before the current one, then the current one's.
            for previous in [true, false] {
                let wanted = if previous { restarted } else { !waiting_again };
                if !wanted {
                    continue;
                }
                let params = LogParams {
                    container: Some(CONTAINER.into()),
                    tail_lines: Some(LOG_LINES),
                    limit_bytes: Some(LOG_BYTES),
                    previous,
                    ..LogParams::default()
                };
                let heading = if previous {
                    "before its last restart:\n"
                } else {
                    ""
                };
                logs.push(match self.api::<Pod>().logs(&pod_name, &params).await {
                    Ok(log) => format!("{heading}{}", log_tail(&log)),
                    Err(err) => format!("{heading}(no log: {err})"),
                });
            }
            parts.push(format!(
                "── replica {replica} ──\n{}\n{}",
                describe(pod),
                logs.join("\n")
            ));
        }
        parts.join("\n")
    }

    /// Deletes the Deployments and Services this launcher labelled that no live launch of its
    /// own names: at its first round, then every minute.
    async fn tidy(&mut self, live: &[ManagedLaunch]) -> Result<(), String> {
        if self
            .tidied_at
            .is_some_and(|at| at.elapsed() < self.tidy_every)
        {
            return Ok(());
        }
        self.tidied_at = Some(tokio::time::Instant::now());
        let wanted: HashSet<String> = live.iter().flat_map(ClusterServers::names_of).collect();
        let selector = ListParams::default().labels(&self.own_objects());
        let listed = async {
            let deployments = self.api::<Deployment>().list(&selector).await?;
            let services = self.api::<Service>().list(&selector).await?;
            Ok::<_, kube::Error>(
                deployments
                    .items
                    .into_iter()
                    .map(|item| item.metadata.name)
                    .chain(services.items.into_iter().map(|item| item.metadata.name))
                    .flatten()
                    .collect::<HashSet<String>>(),
            )
        }
        .await;
        let names = match listed {
            Ok(names) => names,
            Err(err) => {
                return Err(format!(
                    "the cluster did not list the launcher's objects: {err}"
                ))
            }
        };
        let mut stale: Vec<&String> = names.difference(&wanted).collect();
        stale.sort();
        for name in stale {
            tracing::info!(%name, namespace = %self.config.namespace, "deleting servers no live launch names");
            self.delete(name).await;
        }
        Ok(())
    }

    fn stop_at_shutdown(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "arbiter-c-p8000-5d9c7-x2", "uid": "u1",
                         "labels": {"app.kubernetes.io/name": "arbiter-c-p8000"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_reads_as_ready_restarted_or_stuck() {
        let ready = pod(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "engine", "ready": true, "restartCount": 0,
                "image": "i", "imageID": "", "state": {"running": {}}}],
        }));
        assert!(is_ready(&ready));
        assert_eq!(waiting(&ready), None);

        let crashed = pod(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                            "message": "containers with unready status: [engine]"}],
            "containerStatuses": [{"name": "engine", "ready": false, "restartCount": 2,
                "image": "i", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        }));
        assert!(!is_ready(&crashed));
        assert_eq!(
            how_it_ended(engine_status(&crashed).unwrap()),
            "exit code 137, OOMKilled"
        );
        let described = describe(&crashed);
        assert!(
            described.contains("pod arbiter-c-p8000-5d9c7-x2 is Running")
                && described.contains("Ready is not met: ContainersNotReady")
                && described.contains("waits: CrashLoopBackOff back-off 20s")
                && described.contains("restarted 2 times; last: exit code 137, OOMKilled"),
            "{described}"
        );

        let unschedulable = pod(serde_json::json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}],
        }));
        assert!(describe(&unschedulable)
            .contains("PodScheduled is not met: Unschedulable: 0/3 nodes are available"));
    }
}
