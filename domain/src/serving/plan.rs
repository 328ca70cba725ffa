//! A checkpoint's serving layout, by the rule for throughput: the smallest tensor-parallel
//! degree whose share of the weights leaves a large KV cache on each GPU, then as many
//! data-parallel replicas as the GPUs hold. Small tensor-parallel groups spend less time in
//! all-reduce, and more replicas mean more sequences decoded at once.
//!
//! The expected time is the sizing method's: tokens to generate ÷ (sustained tokens/s per
//! replica × replicas) + start-up.

use super::ServingEngine;
use serde::{Deserialize, Serialize};

/// vLLM's default `--gpu-memory-utilization`: the share of each GPU's memory it takes.
pub const GPU_MEMORY_UTILIZATION: f64 = 0.9;
/// The most of that memory the weights may take: the rest is the KV cache (and activations).
/// At 60 % a 70B model in bf16 needs four 80 GB GPUs, not two that would fit it with no room
/// to batch.
pub const MAX_WEIGHT_SHARE: f64 = 0.6;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// What is known about the model and the machines before planning.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanRequest {
    /// Parameters, in billions (GPU engines only).
    #[serde(default)]
    pub params_billions: Option<f64>,
    /// Bytes per parameter as served: 2 for bf16/fp16, 1 for fp8/int8, 0.5 for int4.
    #[serde(default)]
    pub bytes_per_param: Option<f64>,
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
    #[serde(default)]
    pub gpu_memory_gib: Option<f64>,
    /// Nodes available to this checkpoint (default 1).
    #[serde(default)]
    pub nodes: Option<u32>,
    /// At most this many replicas (CPU engines: how many to start; default 1).
    #[serde(default)]
    pub replicas: Option<u32>,
    /// Tokens per second one replica sustains on this model (decode, at full batch), when
    /// known; without it the plan gives no expected time.
    #[serde(default)]
    pub sustained_tokens_per_s: Option<f64>,
    /// Seconds from start to healthy; by default the engine's measured or first guess.
    #[serde(default)]
    pub startup_s: Option<f64>,
}

/// The layout chosen, frozen into the launch and every run's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServingPlan {
    pub engine: ServingEngine,
    pub tensor_parallel: u32,
    pub replicas: u32,
    /// The weights' size in GiB (GPU engines).
    pub weights_gib: Option<f64>,
    /// Memory per GPU left for the KV cache after the weights' share, in GiB.
    pub kv_cache_gib_per_gpu: Option<f64>,
    pub sustained_tokens_per_s: Option<f64>,
    pub startup_s: f64,
}

impl ServingPlan {
    /// The layout as checkpoints record it (part of the endpoint fingerprint and cache key).
    pub fn layout(&self) -> String {
        format!("tp={} dp={}", self.tensor_parallel, self.replicas)
    }

    /// Seconds to generate `tokens` on every replica at once, plus start-up; `None` without
    /// a sustained rate.
    pub fn expected_seconds(&self, tokens: u64) -> Option<f64> {
        let rate = self.sustained_tokens_per_s.filter(|rate| *rate > 0.0)?;
        Some(self.startup_s + tokens as f64 / (rate * f64::from(self.replicas)))
    }
}

fn positive(value: Option<f64>, name: &str) -> Result<Option<f64>, String> {
    match value {
        Some(value) if !(value.is_finite() && value > 0.0) => {
            Err(format!("{name} must be a positive number, not {value}"))
        }
        other => Ok(other),
    }
}

/// Plans `engine`'s servers for the request; refused with the reason when the model cannot
/// fit one node or an input is missing or out of range.
pub fn plan(engine: ServingEngine, request: &PlanRequest) -> Result<ServingPlan, String> {
    let sustained = positive(request.sustained_tokens_per_s, "sustained tokens/s")?;
    let startup_s = match request.startup_s {
        Some(seconds) if !(seconds.is_finite() && seconds >= 0.0) => {
            return Err(format!(
                "start-up must be zero or more seconds, not {seconds}"
            ))
        }
        Some(seconds) => seconds,
        None => engine.default_startup_s(),
    };
    if request.replicas == Some(0) || request.nodes == Some(0) {
        return Err("replicas and nodes must be at least 1".into());
    }
    if !engine.uses_gpus() {
        return Ok(ServingPlan {
            engine,
            tensor_parallel: 1,
            replicas: request.replicas.unwrap_or(1),
            weights_gib: None,
            kv_cache_gib_per_gpu: None,
            sustained_tokens_per_s: sustained,
            startup_s,
        });
    }
    let missing = |name: &str| {
        format!(
            "{} needs the model's {name} to plan its GPUs",
            engine.as_str()
        )
    };
    let params = positive(request.params_billions, "parameters (billions)")?
        .ok_or_else(|| missing("parameters (billions)"))?;
    let bytes = positive(request.bytes_per_param, "bytes per parameter")?.unwrap_or(2.0);
    let gpus_per_node = request
        .gpus_per_node
        .filter(|gpus| *gpus > 0)
        .ok_or_else(|| missing("GPUs per node"))?;
    let memory = positive(request.gpu_memory_gib, "GPU memory (GiB)")?
        .ok_or_else(|| missing("GPU memory (GiB)"))?;
    let weights_gib = params * 1e9 * bytes / GIB;
    let usable = memory * GPU_MEMORY_UTILIZATION;
    let weight_room = usable * MAX_WEIGHT_SHARE;
    let tensor_parallel = std::iter::successors(Some(1u32), |tp| tp.checked_mul(2))
        .take_while(|tp| *tp <= gpus_per_node)
        .find(|tp| weights_gib / f64::from(*tp) <= weight_room)
        .ok_or_else(|| {
            format!(
                "the weights take {weights_gib:.1} GiB; {gpus_per_node} GPUs of {memory} GiB hold at most \
                 {:.1} GiB of weights with room for the KV cache: serve it across nodes by hand",
                weight_room * f64::from(gpus_per_node)
            )
        })?;
    let fitting = request.nodes.unwrap_or(1) * (gpus_per_node / tensor_parallel);
    let replicas = request.replicas.map_or(fitting, |most| most.min(fitting));
    Ok(ServingPlan {
        engine,
        tensor_parallel,
        replicas,
        weights_gib: Some(weights_gib),
        kv_cache_gib_per_gpu: Some(usable - weights_gib / f64::from(tensor_parallel)),
        sustained_tokens_per_s: sustained,
        startup_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(params: f64, gpus_per_node: u32, memory: f64, nodes: u32) -> PlanRequest {
        PlanRequest {
            params_billions: Some(params),
            bytes_per_param: Some(2.0),
            gpus_per_node: Some(gpus_per_node),
            gpu_memory_gib: Some(memory),
            nodes: Some(nodes),
            ..PlanRequest::default()
        }
    }

    #[test]
    fn the_smallest_tensor_parallel_group_with_room_then_replicas() {
        // 8B in bf16 (14.9 GiB) fits one 80 GB GPU with room: eight replicas per node.
        let small = plan(ServingEngine::Vllm, &gpus(8.0, 8, 80.0, 1)).unwrap();
        assert_eq!((small.tensor_parallel, small.replicas), (1, 8));
        assert_eq!(small.layout(), "tp=1 dp=8");
        // 70B (130 GiB): two GPUs would hold the weights but leave no cache; four do.
        let large = plan(ServingEngine::Vllm, &gpus(70.0, 8, 80.0, 2)).unwrap();
        assert_eq!((large.tensor_parallel, large.replicas), (4, 4));
        let cache = large.kv_cache_gib_per_gpu.unwrap();
        assert!((cache - (72.0 - 130.385 / 4.0)).abs() < 0.01, "{cache}");
        // A replica cap keeps the rest of the GPUs free.
        let capped = PlanRequest {
            replicas: Some(3),
            ..gpus(70.0, 8, 80.0, 2)
        };
        assert_eq!(plan(ServingEngine::Sglang, &capped).unwrap().replicas, 3);
    }

    #[test]
    fn a_model_too_large_for_a_node_is_refused_with_the_figures() {
        let error = plan(ServingEngine::Vllm, &gpus(405.0, 8, 80.0, 4)).unwrap_err();
        assert!(
            error.contains("754.4 GiB") && error.contains("across nodes"),
            "{error}"
        );
        let error = plan(
            ServingEngine::Vllm,
            &PlanRequest {
                gpus_per_node: None,
                ..gpus(8.0, 8, 80.0, 1)
            },
        )
        .unwrap_err();
        assert!(error.contains("GPUs per node"), "{error}");
        assert!(plan(
            ServingEngine::Vllm,
            &PlanRequest {
                gpu_memory_gib: Some(-1.0),
                ..gpus(8.0, 8, 80.0, 1)
            }
        )
        .is_err());
        assert!(plan(
            ServingEngine::Simulator,
            &PlanRequest {
                replicas: Some(0),
                ..PlanRequest::default()
            }
        )
        .is_err());
    }

    #[test]
    fn cpu_engines_start_the_replicas_asked_for_and_the_estimate_adds_start_up() {
        let local = plan(
            ServingEngine::ArbiterModel,
            &PlanRequest {
                replicas: Some(2),
                sustained_tokens_per_s: Some(25.0),
                startup_s: Some(10.0),
                ..PlanRequest::default()
            },
        )
        .unwrap();
        assert_eq!(local.layout(), "tp=1 dp=2");
        // 1,000 tokens over two replicas at 25/s: 20 s, after 10 s of start-up.
        assert_eq!(local.expected_seconds(1000), Some(30.0));
        let unknown = plan(ServingEngine::Simulator, &PlanRequest::default()).unwrap();
        assert_eq!(unknown.expected_seconds(1000), None);
        assert_eq!(
            unknown.startup_s,
            ServingEngine::Simulator.default_startup_s()
        );
    }
}
