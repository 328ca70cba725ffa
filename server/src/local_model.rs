//! `arbiter model serve` and the demo's real model: the bundled CPU inference server
//! (`arbiter-model`), present when the binary is built with the `local-model` feature.
//!
//! Without the feature the command still exists and says how to get it, so that a build made
//! for speed fails with instructions rather than "unrecognized subcommand".

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `arbiter model …`
#[derive(clap::Subcommand)]
pub enum ModelAction {
    /// Serve a GGUF model (Llama family, e.g. SmolLM2-135M-Instruct) over the OpenAI API on
    /// CPU: /v1/models, /v1/completions, /v1/chat/completions (streaming and not, with
    /// logprobs) and vLLM-style /metrics. `scripts/fetch-model` downloads the demo's model.
    Serve {
        /// The model file.
        #[arg(long)]
        gguf: PathBuf,
        /// Where to listen; port 0 picks a free port (printed at start-up).
        #[arg(long, default_value = "127.0.0.1:8002")]
        addr: SocketAddr,
        /// The model name clients ask for (default: the file name without `.gguf`).
        #[arg(long)]
        name: Option<String>,
        /// Generations that run at once; later requests wait in a queue.
        #[arg(long, default_value_t = 2)]
        parallel: usize,
    },
}

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
    use std::sync::Arc;

    pub async fn run(action: ModelAction) -> anyhow::Result<()> {
        let ModelAction::Serve {
            gguf,
            addr,
            name,
            parallel,
        } = action;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let address = listener.local_addr()?;
        let server = load(gguf, name, parallel).await?;
        let model = server.model();
        println!(
            "arbiter model serve: `{}` ({}, loaded in {:.1} s) on http://{address}/v1, {parallel} at once",
            server.name(),
            model.description,
            model.load_time.as_secs_f64(),
        );
        tokio::select! {
            result = arbiter_model::server::serve(server, listener) => result,
            _ = crate::shutdown_signal() => Ok(()),
        }
    }

    async fn load(
        gguf: PathBuf,
        name: Option<String>,
        parallel: usize,
    ) -> anyhow::Result<Arc<ModelServer>> {
        let config = ServeConfig {
            gguf,
            name,
            parallel,
        };
        // Loading reads and converts ~100 MB of weights: seconds of CPU, off the async threads.
        let server = tokio::task::spawn_blocking(move || ModelServer::load(&config)).await??;
        Ok(Arc::new(server))
    }

    pub async fn start_for_demo(gguf: &Path, addr: SocketAddr) -> anyhow::Result<RunningModel> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let server = load(
            gguf.to_path_buf(),
            Some(server::demo::REAL_MODEL_NAME.into()),
            2,
        )
        .await?;
        let name = server.name().to_string();
        tokio::spawn(async move {
            if let Err(err) = arbiter_model::server::serve(server, listener).await {
                tracing::error!(error = %err, "the bundled model server stopped");
            }
        });
        Ok(RunningModel {
            base_url: format!("http://{addr}/v1"),
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
