//! `arbiter sim`: the simulated OpenAI-compatible endpoint, configured from the command line.

use super::shutdown_signal;
use anyhow::Context;
use arbiter_sim::{SimConfig, SimFaults, SimModel};

/// `arbiter sim`.
pub async fn sim(args: crate::SimArgs) -> anyhow::Result<()> {
    let crate::SimArgs {
        addr,
        models,
        latency_ms_min,
        latency_ms_max,
        rate_429,
        rate_500,
        rate_timeout,
        rate_malformed,
        rate_truncate,
        max_concurrency,
        latency_us_per_prompt_byte,
        api_key,
        no_prefix_cache,
    } = args;
    let mut config = SimConfig::demo();
    if !models.is_empty() {
        config.models = models
            .iter()
            .map(|spec| SimModel::parse_spec(spec).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?;
    }
    config.latency_ms_min = latency_ms_min;
    config.latency_ms_max = latency_ms_max.max(latency_ms_min);
    config.faults = SimFaults {
        rate_429,
        rate_500,
        rate_timeout,
        rate_malformed,
        rate_truncate,
    };
    config.max_concurrency = max_concurrency;
    config.latency_us_per_prompt_byte = latency_us_per_prompt_byte;
    config.api_key = api_key;
    config.prefix_cache = !no_prefix_cache;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    println!(
        "arbiter sim (a SIMULATED model endpoint) on http://{addr}/v1 serving {}",
        model_names(&config)
    );
    tokio::select! {
        result = arbiter_sim::serve(config, listener) => result,
        _ = shutdown_signal() => Ok(()),
    }
}

pub(crate) fn model_names(config: &SimConfig) -> String {
    config
        .models
        .iter()
        .map(|model| model.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
