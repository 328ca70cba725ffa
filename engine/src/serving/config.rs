//! A launcher's settings, from the TOML file `arbiter serve --launchers FILE` names. Only the
//! operator writes it: its commands run on this host, so no web user can set them.
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

use arbiter_domain::serving::command::check_template;
use arbiter_domain::serving::launch::LaunchPolicy;
use arbiter_domain::serving::ServingEngine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LauncherFile {
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
        let defaults = LaunchPolicy::default();
        let seconds = |value: Option<u64>, default_ms: i64| {
            value.map_or(default_ms, |seconds| (seconds as i64).saturating_mul(1000))
        };
        let host = file.host.trim().to_string();
        if host.is_empty() || host.contains(['/', ' ']) {
            return Err(format!("`{host}` is not a host name or address"));
        }
        Ok(LocalLauncherConfig {
            id: file.id.unwrap_or_else(|| format!("local:{}", host_name())),
            host,
            ports: parse_ports(&file.ports)?,
            log_dir: file.log_dir,
            policy: LaunchPolicy {
                health_timeout_ms: seconds(file.health_timeout_seconds, defaults.health_timeout_ms),
                idle_ms: seconds(file.idle_seconds, defaults.idle_ms),
                max_restarts: file.max_restarts.unwrap_or(defaults.max_restarts).max(0),
            },
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

    pub fn read(path: &Path) -> Result<LocalLauncherConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        LocalLauncherConfig::parse(&text).map_err(|err| format!("{}: {err}", path.display()))
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
    fn the_shipped_example_is_a_valid_launcher_file() {
        let example = include_str!("../../../deploy/launchers.example.toml");
        let config = LocalLauncherConfig::parse(example).unwrap();
        assert_eq!((config.gpus, config.engines.len()), (8, 3));
    }
}
