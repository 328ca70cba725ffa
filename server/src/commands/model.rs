//! `arbiter model serve` and the demo's real model: the bundled CPU inference server
//! (`arbiter-model`), present when the binary is built with the `local-model` feature.
//!
//! Without the feature the command still exists and says how to get it, so that a build made
//! for speed fails with instructions rather than "unrecognized subcommand".

use std::net::SocketAddr;
use std::path::Path;

use crate::ModelAction;

/// Prompt-prefix tokens the bundled model keeps read by default (about 94 MB for
/// SmolLM2-135M): a judge's rubric and few-shot exemplars with room to spare.
pub const PREFIX_CACHE_TOKENS: usize = 2_048;

/// The bundled model server, running.
pub struct RunningModel {
    pub base_url: String,
    pub name: String,
}

#[cfg(feature = "local-model")]
mod enabled {
    use super::*;
    use anyhow::Context;
    use arbiter_model::server::{ModelServer, ServeConfig};
    use std::path::PathBuf;
    use std::sync::Arc;

    pub async fn run(action: ModelAction) -> anyhow::Result<()> {
        let (gguf, addr, name, parallel, prefix_cache_tokens) = match action {
            ModelAction::Serve {
                gguf,
                addr,
                name,
                parallel,
                prefix_cache_tokens,
            } => (gguf, addr, name, parallel, prefix_cache_tokens),
            ModelAction::Bench { gguf, tokens } => return bench(gguf, tokens).await,
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let address = listener.local_addr()?;
        let server = load(gguf, name, (parallel, prefix_cache_tokens)).await?;
        let model = server.model();
        println!(
            "arbiter model serve: `{}` ({}, loaded in {:.1} s) on http://{address}/v1, {parallel} at once",
            server.name(),
            model.description,
            model.load_time.as_secs_f64(),
        );
        tokio::select! {
            result = arbiter_model::server::serve(server, listener) => result,
            _ = super::super::shutdown_signal() => Ok(()),
        }
    }

    async fn load(
        gguf: PathBuf,
        name: Option<String>,
        (parallel, prefix_cache_tokens): (usize, usize),
    ) -> anyhow::Result<Arc<ModelServer>> {
        let config = ServeConfig {
            gguf,
            name,
            parallel,
            prefix_cache_tokens,
        };
        // Loading reads and converts ~100 MB of weights: seconds of CPU, off the async threads.
        let server = tokio::task::spawn_blocking(move || ModelServer::load(&config)).await??;
        Ok(Arc::new(server))
    }

    /// `arbiter model bench`: see its help.
    async fn bench(gguf: PathBuf, tokens: usize) -> anyhow::Result<()> {
        use server::bench::support::memory_mib;
        // No prefix cache: the bench times reading prompts.
        let server = load(gguf, Some("bench".into()), (2, 0)).await?;
        let load_time = server.model().load_time;
        let (_, after_load, _, _) = memory_mib();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/v1/chat/completions", listener.local_addr()?);
        tokio::spawn(arbiter_model::server::serve(server, listener));
        println!(
            "model bench: loaded in {:.2} s; resident memory after load {after_load:.0} MiB",
            load_time.as_secs_f64()
        );
        let http = reqwest::Client::new();
        let ask = |prompt: String, max_tokens: usize| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let started = std::time::Instant::now();
                let body = serde_json::json!({
                    "model": "bench", "temperature": 0, "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": prompt}],
                });
                let answer: serde_json::Value = http
                    .post(&url)
                    .json(&body)
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                let count = |key: &str| answer["usage"][key].as_u64().unwrap_or(0);
                anyhow::Ok((
                    count("prompt_tokens"),
                    count("completion_tokens"),
                    started.elapsed().as_secs_f64(),
                ))
            }
        };
        // Warm-up, then prefill: a long prompt and a single generated token.
        ask("Hello".into(), 1).await?;
        let long_prompt = "Summarise the following notes. ".to_string()
            + &"The quick brown fox jumps over the lazy dog near the river bank. ".repeat(40);
        let (prompt_tokens, _, seconds) = ask(long_prompt, 1).await?;
        println!(
            "prefill: {prompt_tokens} prompt tokens in {seconds:.2} s = {:.0} tokens/s",
            prompt_tokens as f64 / seconds
        );
        for concurrency in [1, 2] {
            let started = std::time::Instant::now();
            let requests: Vec<_> = (0..concurrency)
                .map(|i| {
                    tokio::spawn(ask(
                        format!("Write a long story about dragon number {i}."),
                        tokens,
                    ))
                })
                .collect();
            let mut results = Vec::new();
            for request in requests {
                results.push(request.await??);
            }
            let elapsed = started.elapsed().as_secs_f64();
            let generated: u64 = results.iter().map(|(_, completion, _)| completion).sum();
            let each: Vec<String> = results
                .iter()
                .map(|(_, completion, seconds)| format!("{:.1}", *completion as f64 / seconds))
                .collect();
            println!(
                "{concurrency} at once: {generated} tokens in {elapsed:.2} s = {:.1} tokens/s in all; per generation {} tokens/s",
                generated as f64 / elapsed,
                each.join(", ")
            );
        }
        let (peak, current, _, _) = memory_mib();
        println!("resident memory: peak {peak:.0} MiB, now {current:.0} MiB");
        Ok(())
    }

    pub async fn start_for_demo(gguf: &Path, addr: SocketAddr) -> anyhow::Result<RunningModel> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let address = listener.local_addr()?;
        let server = load(
            gguf.to_path_buf(),
            Some(server::demo::REAL_MODEL_NAME.into()),
            (2, PREFIX_CACHE_TOKENS),
        )
        .await?;
        let name = server.name().to_string();
        tokio::spawn(async move {
            if let Err(err) = arbiter_model::server::serve(server, listener).await {
                tracing::error!(error = %err, "the bundled model server stopped");
            }
        });
        Ok(RunningModel {
            base_url: format!("http://{address}/v1"),
            name,
        })
    }
}

/// Runs `arbiter model …`.
pub async fn run(action: ModelAction) -> anyhow::Result<()> {
    #[cfg(feature = "local-model")]
    return enabled::run(action).await;
    #[cfg(not(feature = "local-model"))]
    {
        let _ = action;
        anyhow::bail!("{}", NOT_BUILT)
    }
}

/// Starts the bundled model for `arbiter demo`, or says why the demo goes on without it.
pub async fn start_for_demo(gguf: Option<&Path>, addr: SocketAddr) -> Option<RunningModel> {
    let gguf = gguf?;
    if !gguf.is_file() {
        println!(
            "  No model file at {}: the demo uses only the simulator (run scripts/fetch-model).",
            gguf.display()
        );
        return None;
    }
    #[cfg(feature = "local-model")]
    {
        match enabled::start_for_demo(gguf, addr).await {
            Ok(model) => Some(model),
            Err(error) => {
                println!("  The real model could not be started ({error:#}); the demo uses only the simulator.");
                None
            }
        }
    }
    #[cfg(not(feature = "local-model"))]
    {
        let _ = addr;
        println!("  {NOT_BUILT} The demo uses only the simulator.");
        None
    }
}

#[cfg(not(feature = "local-model"))]
const NOT_BUILT: &str = "This arbiter was built without the bundled model; build it with \
    `cargo build -p server --features local-model`.";
