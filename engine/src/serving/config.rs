//! A launcher's settings, from the TOML file `arbiter serve --launchers FILE` names. Only the
//! operator writes it: its commands run on this host (or in the cluster), so no web user can
//! set them. A local launcher's file:
//!
//! ```toml
//! id = "gpu-node-1"            # default: local:<host name>
//! host = "127.0.0.1"           # where workers reach the servers
//! ports = "18100-18199"        # one port per replica, reserved per checkpoint
//! log_dir = "launch-logs"
//! health_timeout_seconds = 900
//! idle_seconds = 300
//! max_restarts = 3
//! gpus = 8                     # handed out tp per replica; a plan needing more is refused
//!
//! [engines]
//! vllm = "vllm serve {path} --served-model-name {model} --tensor-parallel-size {tp} --host {host} --port {port}"
//! arbiter_model = "arbiter model serve --gguf {path} --name {model} --addr {host}:{port}"
//! ```
//!
//! A Kubernetes launcher's file (`kind = "kubernetes"`; see `deploy/launchers.kubernetes.toml`):
//!
//! ```toml
//! kind = "kubernetes"
//! id = "cluster-a"             # default: kubernetes:<namespace>
//! namespace = "evals"
//! context = "prod"             # a kubeconfig context; default: in-cluster, else the current one
//! ports = "8000-8199"          # each replica's Service port, reserved per checkpoint
//! model_claim = "checkpoints"  # the PersistentVolumeClaim holding the weights
//! model_mount = "/models"
//! gpu_resource = "nvidia.com/gpu"
//!
//! [engines.vllm]
//! image = "vllm/vllm-openai:v0.6.3"
//! command = "vllm serve {path} --served-model-name {model} --tensor-parallel-size {tp} --host {host} --port {port}"
//! ```

use arbiter_domain::serving::command::check_template;
use arbiter_domain::serving::kubernetes::{service_url_rule, ClusterEngine};
use arbiter_domain::serving::launch::LaunchPolicy;
use arbiter_domain::serving::ServingEngine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LauncherFile {
    /// `local` or left out (read by [`LauncherConfig::parse`]).
    #[allow(dead_code)]
    kind: Option<String>,
    id: Option<String>,
    #[serde(default = "default_host")]
    host: String,
    #[serde(default = "default_ports")]
    ports: String,
    #[serde(default = "default_log_dir")]
    log_dir: PathBuf,
    health_timeout_seconds: Option<u64>,
    idle_seconds: Option<u64>,
    max_restarts: Option<i64>,
    /// GPUs on this host, handed to GPU engines' replicas (`CUDA_VISIBLE_DEVICES`).
    #[serde(default)]
    gpus: u32,
    engines: BTreeMap<String, String>,
}

fn default_host() -> String {
    "127.0.0.1".into()
}

fn default_ports() -> String {
    "18100-18199".into()
}

fn default_log_dir() -> PathBuf {
    "launch-logs".into()
}

/// A launcher's settings: processes on this host, or a Kubernetes cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum LauncherConfig {
    Local(LocalLauncherConfig),
    Kubernetes(ClusterLauncherConfig),
}

/// Only the field that says which kind of file the rest is.
#[derive(Deserialize)]
struct LauncherKind {
    kind: Option<String>,
}

impl LauncherConfig {
    pub fn parse(text: &str) -> Result<LauncherConfig, String> {
        let kind: LauncherKind = toml::from_str(text).map_err(|err| err.to_string())?;
        match kind.kind.as_deref() {
            None | Some("local") => LocalLauncherConfig::parse(text).map(LauncherConfig::Local),
            Some("kubernetes") => {
                ClusterLauncherConfig::parse(text).map(LauncherConfig::Kubernetes)
            }
            Some(other) => Err(format!(
                "unknown launcher kind `{other}`: use `local` or `kubernetes`"
            )),
        }
    }

    pub fn read(path: &Path) -> Result<LauncherConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        LauncherConfig::parse(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    /// What workers in this process must be allowed to reach (the launcher's servers are on
    /// private addresses, which are refused by default).
    pub fn endpoints(&self) -> Vec<String> {
        match self {
            LauncherConfig::Local(config) => config.endpoints(),
            LauncherConfig::Kubernetes(config) => config.endpoints(),
        }
    }
}

fn launch_policy(
    health_timeout_seconds: Option<u64>,
    idle_seconds: Option<u64>,
    max_restarts: Option<i64>,
) -> LaunchPolicy {
    let defaults = LaunchPolicy::default();
    let milliseconds = |value: Option<u64>, default_ms: i64| {
        value.map_or(default_ms, |seconds| (seconds as i64).saturating_mul(1000))
    };
    LaunchPolicy {
        health_timeout_ms: milliseconds(health_timeout_seconds, defaults.health_timeout_ms),
        idle_ms: milliseconds(idle_seconds, defaults.idle_ms),
        max_restarts: max_restarts.unwrap_or(defaults.max_restarts).max(0),
    }
}

/// A local launcher's settings, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalLauncherConfig {
    pub id: String,
    pub host: String,
    pub ports: (u16, u16),
    pub log_dir: PathBuf,
    pub policy: LaunchPolicy,
    /// GPUs on this host (0: CPU engines only).
    pub gpus: u32,
    /// Each engine's command template.
    pub engines: BTreeMap<ServingEngine, String>,
}

/// This host's name (for the default launcher id): two hosts must never share an id, or
/// both would manage the same launches.
fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into the buffer we own.
    let written = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    let name = if written == 0 {
        let end = buffer
            .iter()
            .position(|byte| *byte == 0)
            .unwrap_or(buffer.len());
        String::from_utf8_lossy(&buffer[..end]).into_owned()
    } else {
        String::new()
    };
    if name.is_empty() {
        std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into())
    } else {
        name
    }
}

fn parse_ports(text: &str) -> Result<(u16, u16), String> {
    let bad = || format!("ports are a range such as `18100-18199`, not `{text}`");
    let (first, last) = text.split_once('-').ok_or_else(bad)?;
    let first: u16 = first.trim().parse().map_err(|_| bad())?;
    let last: u16 = last.trim().parse().map_err(|_| bad())?;
    if first == 0 || last < first {
        return Err(bad());
    }
    Ok((first, last))
}

impl LocalLauncherConfig {
    pub fn parse(text: &str) -> Result<LocalLauncherConfig, String> {
        let file: LauncherFile = toml::from_str(text).map_err(|err| err.to_string())?;
        if file.engines.is_empty() {
            return Err("[engines] names no engine: give at least one command".into());
        }
        let mut engines = BTreeMap::new();
        for (name, template) in file.engines {
            let engine = ServingEngine::parse(&name)?;
            check_template(&template).map_err(|err| format!("engine `{name}`: {err}"))?;
            engines.insert(engine, template);
        }
        if file.gpus == 0
            && engines
                .keys()
                .any(|engine: &ServingEngine| engine.uses_gpus())
        {
            return Err(
                "a GPU engine is configured but `gpus` is 0: say how many GPUs this host has"
                    .into(),
            );
        }
        let host = file.host.trim().to_string();
        if host.is_empty() || host.contains(['/', ' ']) {
            return Err(format!("`{host}` is not a host name or address"));
        }
        Ok(LocalLauncherConfig {
            id: file.id.unwrap_or_else(|| format!("local:{}", host_name())),
            host,
            ports: parse_ports(&file.ports)?,
            log_dir: file.log_dir,
            policy: launch_policy(
                file.health_timeout_seconds,
                file.idle_seconds,
                file.max_restarts,
            ),
            gpus: file.gpus,
            engines,
        })
    }

    /// The `host:port` of every port the launcher may give a server: workers in this process
    /// must be allowed to reach them (loopback and private addresses are refused by default).
    pub fn endpoints(&self) -> Vec<String> {
        (self.ports.0..=self.ports.1)
            .map(|port| format!("{}:{port}", self.host))
            .collect()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    #[allow(dead_code)]
    kind: String,
    id: Option<String>,
    namespace: String,
    context: Option<String>,
    #[serde(default = "default_service_ports")]
    ports: String,
    replica_url: Option<String>,
    model_claim: String,
    model_mount: String,
    #[serde(default = "default_gpu_resource")]
    gpu_resource: String,
    health_timeout_seconds: Option<u64>,
    idle_seconds: Option<u64>,
    max_restarts: Option<i64>,
    engines: BTreeMap<String, ClusterEngineFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterEngineFile {
    image: String,
    command: String,
}

fn default_service_ports() -> String {
    "8000-8199".into()
}

fn default_gpu_resource() -> String {
    "nvidia.com/gpu".into()
}

/// A Kubernetes launcher's settings, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterLauncherConfig {
    pub id: String,
    pub namespace: String,
    /// The kubeconfig context to use; `None`: in-cluster, else the kubeconfig's current one.
    pub context: Option<String>,
    /// Service ports, one per replica, reserved per checkpoint (they also make its names
    /// unique).
    pub ports: (u16, u16),
    /// How workers reach a replica: a URL with `{name}` and `{port}`.
    pub replica_url: String,
    pub policy: LaunchPolicy,
    /// How each engine runs in the cluster.
    pub engines: BTreeMap<ServingEngine, ClusterEngine>,
}

/// A Kubernetes launcher's replica URL rule: an http(s) URL whose port is `{port}` (each
/// Service listens on its replica's) and where `{name}`, if used, is the first label of the
/// host (so the egress allow list can name the replicas as `*.<rest>`).
fn check_url_rule(rule: &str) -> Result<(), String> {
    // A port no rule would write itself, so `{port}` is found only where it stands.
    let example = rule.replace("{name}", "replica").replace("{port}", "8123");
    let url = url::Url::parse(&example)
        .map_err(|err| format!("replica_url `{rule}` is not a URL: {err}"))?;
    let host = url.host_str().unwrap_or_default();
    let port_in_place = rule.matches("{port}").count() == 1 && url.port() == Some(8123);
    let name_in_place = !rule.contains("{name}") || host.starts_with("replica.");
    if !["http", "https"].contains(&url.scheme()) || !port_in_place || !name_in_place {
        return Err(format!(
            "replica_url `{rule}` must be an http(s) URL whose port is `{{port}}` and where `{{name}}`, if used, is the first label of the host"
        ));
    }
    Ok(())
}

/// A namespace name (a DNS label): lower-case letters, digits and `-`, at most 63.
fn check_namespace(namespace: &str) -> Result<(), String> {
    let valid = !namespace.is_empty()
        && namespace.len() <= 63
        && namespace
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        && !namespace.starts_with('-')
        && !namespace.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{namespace}` is not a namespace name: lower-case letters, digits and `-`, at most 63"
        ))
    }
}

impl ClusterLauncherConfig {
    pub fn parse(text: &str) -> Result<ClusterLauncherConfig, String> {
        let file: ClusterFile = toml::from_str(text).map_err(|err| err.to_string())?;
        check_namespace(&file.namespace)?;
        if file.engines.is_empty() {
            return Err("[engines] names no engine: give at least one image and command".into());
        }
        let mount = file.model_mount.trim_end_matches('/').to_string();
        if !mount.starts_with('/') || mount.len() < 2 {
            return Err(format!(
                "model_mount `{}` must be an absolute path other than /",
                file.model_mount
            ));
        }
        if file.model_claim.trim().is_empty() {
            return Err("say which PersistentVolumeClaim holds the weights (`model_claim`)".into());
        }
        let replica_url = file
            .replica_url
            .unwrap_or_else(|| service_url_rule(&file.namespace));
        check_url_rule(&replica_url)?;
        let policy = launch_policy(
            file.health_timeout_seconds,
            file.idle_seconds,
            file.max_restarts,
        );
        let mut engines = BTreeMap::new();
        for (name, engine) in file.engines {
            let kind = ServingEngine::parse(&name)?;
            check_template(&engine.command).map_err(|err| format!("engine `{name}`: {err}"))?;
            if engine.image.trim().is_empty() {
                return Err(format!("engine `{name}` names no image"));
            }
            engines.insert(
                kind,
                ClusterEngine {
                    namespace: file.namespace.clone(),
                    image: engine.image,
                    command: engine.command,
                    gpu_resource: kind.uses_gpus().then(|| file.gpu_resource.clone()),
                    model_claim: file.model_claim.clone(),
                    model_mount: mount.clone(),
                    load_timeout_s: (policy.health_timeout_ms / 1000).clamp(1, u32::MAX as i64)
                        as u32,
                },
            );
        }
        Ok(ClusterLauncherConfig {
            id: file
                .id
                .unwrap_or_else(|| format!("kubernetes:{}", file.namespace)),
            ports: parse_ports(&file.ports)?,
            replica_url,
            policy,
            engines,
            namespace: file.namespace,
            context: file.context,
        })
    }

    /// The replicas' names or addresses on the launcher's ports, as the egress allow list
    /// takes them: the namespace's Services (`*.<namespace>.svc:<port>`) by default, else the
    /// host of `replica_url`.
    pub fn endpoints(&self) -> Vec<String> {
        let example = self.replica_url.replace("{name}", "replica");
        let host = url::Url::parse(&example.replace("{port}", "8000"))
            .ok()
            .and_then(|url| url.host_str().map(str::to_string))
            .unwrap_or_default();
        let host = match host.strip_prefix("replica.") {
            Some(domain) if self.replica_url.contains("{name}") => format!("*.{domain}"),
            _ => host,
        };
        (self.ports.0..=self.ports.1)
            .map(|port| format!("{host}:{port}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_file_is_read_with_its_defaults_and_checked() {
        let config = LocalLauncherConfig::parse(
            "id = \"n1\"\nidle_seconds = 60\n[engines]\nsimulator = \"arbiter sim --addr {host}:{port}\"\n",
        )
        .unwrap();
        assert_eq!(config.id, "n1");
        assert_eq!(config.ports, (18100, 18199));
        assert_eq!(config.policy.idle_ms, 60_000);
        assert_eq!(config.policy.max_restarts, 3);
        assert!(config.engines.contains_key(&ServingEngine::Simulator));

        let error = |text: &str| LocalLauncherConfig::parse(text).unwrap_err();
        assert!(error("[engines]\nvlm = \"x\"").contains("unknown serving engine `vlm`"));
        assert!(error("[engines]\nvllm = \"vllm {pth}\"").contains("engine `vllm`"));
        assert!(error("ports = \"9-1\"\ngpus = 1\n[engines]\nvllm = \"v\"")
            .contains("ports are a range"));
        assert!(error("[engines]\n").contains("no engine"));
        assert!(error("[engines]\nvllm = \"vllm serve {path}\"").contains("`gpus` is 0"));
        assert!(error("colour = 1\n[engines]\nvllm = \"v\"").contains("unknown field"));
    }

    #[test]
    fn the_shipped_examples_are_valid_launcher_files() {
        let example = include_str!("../../../deploy/launchers.example.toml");
        let LauncherConfig::Local(config) = LauncherConfig::parse(example).unwrap() else {
            panic!("a local launcher");
        };
        assert_eq!((config.gpus, config.engines.len()), (8, 3));
        let example = include_str!("../../../deploy/launchers.kubernetes.toml");
        let LauncherConfig::Kubernetes(config) = LauncherConfig::parse(example).unwrap() else {
            panic!("a Kubernetes launcher");
        };
        assert_eq!(config.engines.len(), 3);
        assert_eq!(config.endpoints().len(), 200);
        assert_eq!(config.endpoints()[0], "*.evals.svc:8000");
        // The launcher's ConfigMap in the cluster manifests holds a valid file too.
        let manifest = include_str!("../../../deploy/kubernetes/launcher.yaml");
        let embedded: String = manifest
            .split("launchers.toml: |\n")
            .nth(1)
            .unwrap()
            .lines()
            .take_while(|line| line.is_empty() || line.starts_with("    "))
            .map(|line| format!("{}\n", line.trim_start()))
            .collect();
        assert!(matches!(
            LauncherConfig::parse(&embedded),
            Ok(LauncherConfig::Kubernetes(_))
        ));
    }

    #[test]
    fn a_kubernetes_launcher_file_is_read_with_its_defaults_and_checked() {
        let file = |extra: &str| {
            format!(
                "kind = \"kubernetes\"\nnamespace = \"evals\"\nmodel_claim = \"weights\"\nmodel_mount = \"/models/\"\n{extra}\n[engines.vllm]\nimage = \"vllm/vllm-openai:v0.6.3\"\ncommand = \"vllm serve {{path}} --port {{port}}\"\n"
            )
        };
        let LauncherConfig::Kubernetes(config) = LauncherConfig::parse(&file("")).unwrap() else {
            panic!("a Kubernetes launcher");
        };
        assert_eq!(config.id, "kubernetes:evals");
        assert_eq!(config.ports, (8000, 8199));
        assert_eq!(config.replica_url, "http://{name}.evals.svc:{port}/v1");
        let vllm = &config.engines[&ServingEngine::Vllm];
        assert_eq!(vllm.model_mount, "/models");
        assert_eq!(vllm.gpu_resource.as_deref(), Some("nvidia.com/gpu"));
        assert_eq!(vllm.load_timeout_s, 900);

        let LauncherConfig::Kubernetes(local) = LauncherConfig::parse(&file(
            "ports = \"9000-9001\"\nreplica_url = \"http://127.0.0.1:{port}/v1\"",
        ))
        .unwrap() else {
            panic!("a Kubernetes launcher");
        };
        assert_eq!(local.endpoints(), ["127.0.0.1:9000", "127.0.0.1:9001"]);

        let error = |extra: &str| LauncherConfig::parse(&file(extra)).unwrap_err();
        assert!(error("context = 1").contains("invalid type"));
        assert!(error("colour = 1").contains("unknown field"));
        for rule in [
            "http://one/v1",
            "http://{name}.evals.svc/v1",
            "http://gw/{name}/{port}",
            "ftp://{name}.x:{port}/",
            "http://{name}.x:8000/{port}/v1",
        ] {
            assert!(
                error(&format!("replica_url = \"{rule}\"")).contains("must be an http(s) URL"),
                "{rule}"
            );
        }
        assert!(matches!(
            LauncherConfig::parse(
                "kind = \"local\"\n[engines]\nsimulator = \"arbiter sim --addr {host}:{port}\"\n"
            ),
            Ok(LauncherConfig::Local(_))
        ));
        assert!(LauncherConfig::parse(&file("").replace("evals", "Evals"))
            .unwrap_err()
            .contains("not a namespace name"));
        assert!(LauncherConfig::parse(&file("").replace("/models/", "/"))
            .unwrap_err()
            .contains("absolute path other than /"));
        assert!(LauncherConfig::parse("kind = \"slurm\"")
            .unwrap_err()
            .contains("unknown launcher kind `slurm`"));
    }
}
