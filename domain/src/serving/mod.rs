//! Serving a checkpoint: the layout its servers get ([`plan`]), the command a launcher starts
//! them with ([`command`]) and the life of one launch ([`launch`]). Nothing here starts a
//! process or reads a clock: the engine's launchers do, from these rules.

pub mod canary;
pub mod command;
pub mod kubernetes;
pub mod launch;
pub mod plan;

use serde::{Deserialize, Serialize};

/// The inference engines a launcher knows how to start and health-check.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ServingEngine {
    Vllm,
    Sglang,
    /// `arbiter model serve`: the bundled CPU server for small GGUF models.
    ArbiterModel,
    /// `arbiter sim`: a simulated endpoint, for tests and the demo (labelled so everywhere).
    Simulator,
}

impl ServingEngine {
    pub const ALL: [ServingEngine; 4] = [
        ServingEngine::Vllm,
        ServingEngine::Sglang,
        ServingEngine::ArbiterModel,
        ServingEngine::Simulator,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServingEngine::Vllm => "vllm",
            ServingEngine::Sglang => "sglang",
            ServingEngine::ArbiterModel => "arbiter_model",
            ServingEngine::Simulator => "simulator",
        }
    }

    pub fn parse(text: &str) -> Result<ServingEngine, String> {
        let text = text.trim();
        ServingEngine::ALL
            .into_iter()
            .find(|engine| engine.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "unknown serving engine `{text}`: use {}",
                    ServingEngine::ALL.map(ServingEngine::as_str).join(", ")
                )
            })
    }

    /// Whether its servers run on GPUs, so a plan needs the GPUs' count and memory.
    pub fn uses_gpus(self) -> bool {
        matches!(self, ServingEngine::Vllm | ServingEngine::Sglang)
    }

    /// A first guess at the seconds from start to healthy, until launches have been measured:
    /// a GPU engine loads weights and captures CUDA graphs; the CPU ones load in seconds.
    pub fn default_startup_s(self) -> f64 {
        match self {
            ServingEngine::Vllm | ServingEngine::Sglang => 180.0,
            ServingEngine::ArbiterModel => 15.0,
            ServingEngine::Simulator => 1.0,
        }
    }
}

/// The base URL workers call a launched replica at.
pub fn replica_url(host: &str, port: u16) -> String {
    format!("http://{host}:{port}/v1")
}

/// A replica's URL by its launcher's rule: `{name}` is the replica's name (see
/// [`kubernetes::replica_name`]) and `{port}` its reserved port; an empty rule (a launcher
/// older than rules) is `http://{host}:{port}/v1`.
pub fn replica_url_from(rule: &str, host: &str, checkpoint: &str, port: u16) -> String {
    if rule.is_empty() {
        return replica_url(host, port);
    }
    rule.replace("{name}", &kubernetes::replica_name(checkpoint, port))
        .replace("{port}", &port.to_string())
}

/// The URL a launcher polls until the replica answers 200 (vLLM, SGLang, the simulator and
/// `arbiter model serve` all serve `/health` beside `/v1`).
pub fn health_url(host: &str, port: u16) -> String {
    format!("http://{host}:{port}/health")
}

/// A launcher that has not beaten its heart for this long is taken for gone: registrations
/// pick another.
pub const LAUNCHER_LIVE_MS: i64 = 30_000;
/// A launcher silent this long is gone (a restart or deploy takes less): its live launches
/// fail, so their runs are not left waiting for servers nobody will start.
pub const LAUNCHER_GONE_MS: i64 = 10 * 60 * 1000;

/// How a checkpoint is served by a launcher rather than found at a URL (its replicas' URLs
/// come from the ports the store reserves for it). Frozen into its runs' manifests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Serving {
    pub engine: ServingEngine,
    /// The weights as the engine's command takes them (`{path}`).
    pub model_path: String,
    pub plan: plan::ServingPlan,
}
