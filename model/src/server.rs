//! The HTTP side of `arbiter model serve`: OpenAI-compatible routes over one loaded model.
//!
//! Every request gets its own copy of the model (the weights are shared, the KV cache is its
//! own) and runs on a blocking thread. At most `parallel` generations run at once; the rest
//! wait their turn in arrival order, and `/metrics` reports both counts under vLLM's names, so
//! Arbiter's queue-aware dispatcher backs off from this server as it does from vLLM.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::stream::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

use crate::chat::ChatTemplate;
use crate::generate::{
    generate, sampler_for, score_prompt, FinishReason, Finished, GenerateError, Piece,
    SamplingParams,
};
use crate::openai::{self, ApiError, Envelope, Format, Job, Prompt};
use crate::prefix_cache::PrefixCache;
use crate::weights::{self, LoadedModel};

/// How `arbiter model serve` was asked to run.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub gguf: PathBuf,
    /// The model name clients ask for; the file's stem when not given.
    pub name: Option<String>,
    /// Generations that run at once; the rest wait.
    pub parallel: usize,
    /// Prompt-prefix tokens whose reading is kept for prompts that start alike (0: none).
    pub prefix_cache_tokens: usize,
}

/// The loaded model and what the routes share.
pub struct ModelServer {
    name: String,
    /// What `/v1/models` reports as `root`: the file and its SHA-256, so Arbiter's manifests
    /// record exactly which weights answered.
    root: String,
    model: LoadedModel,
    template: ChatTemplate,
    slots: Arc<Semaphore>,
    counts: Counts,
    prefix_cache: PrefixCache,
}

#[derive(Default)]
struct Counts {
    waiting: AtomicUsize,
    running: AtomicUsize,
    requests: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    finished_stop: AtomicU64,
    finished_length: AtomicU64,
}

impl ModelServer {
    /// Loads the model (seconds) and checks its chat template compiles.
    pub fn load(config: &ServeConfig) -> anyhow::Result<ModelServer> {
        if config.parallel == 0 {
            anyhow::bail!("--parallel must be at least 1");
        }
        let digest = weights::file_sha256(&config.gguf)?;
        let model = weights::load(&config.gguf)?;
        let file_name = config
            .gguf
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = match &config.name {
            Some(name) => name.clone(),
            None => config
                .gguf
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .context("the model file has no name")?,
        };
        let template = ChatTemplate::for_model(model.chat_template.as_deref(), &model.tokenizer)
            .context("the model's chat template does not compile")?;
        Ok(ModelServer {
            name,
            root: format!("{file_name}@sha256:{digest}"),
            model,
            template,
            slots: Arc::new(Semaphore::new(config.parallel)),
            counts: Counts::default(),
            prefix_cache: PrefixCache::new(config.prefix_cache_tokens),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn model(&self) -> &LoadedModel {
        &self.model
    }

    /// The prompt's token ids, and the token limit once the context's room is known.
    fn prepare(&self, job: &mut Job) -> Result<Vec<u32>, ApiError> {
        let tokenizer = &self.model.tokenizer;
        let ids = match &job.prompt {
            Prompt::Chat(messages) => {
                let text = self
                    .template
                    .render(messages)
                    .map_err(|err| ApiError::invalid(format!("chat template: {err}")))?;
                tokenizer.encode(&text)
            }
            Prompt::Text(text) => tokenizer.encode_prompt(text),
            Prompt::Tokens(ids) => {
                let size = tokenizer.vocab_size();
                if let Some(bad) = ids.iter().find(|&&id| id as usize >= size) {
                    return Err(ApiError::invalid(format!(
                        "token id {bad} is outside the vocabulary of {size} tokens"
                    )));
                }
                Ok(ids.clone())
            }
        }
        .map_err(|err| ApiError::invalid(err.to_string()))?;
        if ids.is_empty() {
            return Err(ApiError::invalid("the prompt is empty"));
        }
        let context = self.model.context_length;
        let room = context.saturating_sub(ids.len());
        let wanted = job.max_tokens.unwrap_or(room);
        if wanted > room || room == 0 {
            // vLLM's wording, which clients already recognise.
            return Err(ApiError::invalid(format!(
                "This model's maximum context length is {context} tokens. However, you \
                 requested {} tokens ({} in the messages, {wanted} in the completion). Please \
                 reduce the length of the messages or completion.",
                ids.len() + wanted,
                ids.len(),
            )));
        }
        job.params.max_tokens = wanted;
        Ok(ids)
    }
}

pub fn router(server: Arc<ModelServer>) -> Router {
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/metrics", get(metrics))
        // vLLM's tokenizer endpoints, which lm-evaluation-harness's local-completions uses to
        // tokenize as the server does.
        .route("/tokenizer_info", get(tokenizer_info))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(|| async { StatusCode::OK }))
        .fallback(|| async {
            ApiError {
                status: StatusCode::NOT_FOUND,
                kind: "invalid_request_error",
                code: None,
                message: "Not found: this server serves /v1/models, /v1/completions and \
                          /v1/chat/completions."
                    .into(),
            }
        })
        .with_state(server)
}

/// Serves until the listener fails or the task is dropped.
pub async fn serve(
    server: Arc<ModelServer>,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<()> {
    axum::serve(listener, router(server)).await?;
    Ok(())
}

/// The tokenizer's special tokens and context, in vLLM's `/tokenizer_info` shape.
async fn tokenizer_info(State(server): State<Arc<ModelServer>>) -> Json<Value> {
    let tokenizer = &server.model.tokenizer;
    Json(json!({
        "tokenizer_class": "GPT2TokenizerFast",
        "eos_token": tokenizer.token_label(tokenizer.eos),
        "bos_token": tokenizer.bos.map(|bos| tokenizer.token_label(bos)),
        "pad_token": null,
        "add_bos_token": tokenizer.add_bos,
        "model_max_length": server.model.context_length,
    }))
}

#[derive(serde::Deserialize)]
struct TokenizeRequest {
    prompt: String,
    #[serde(default = "default_true")]
    add_special_tokens: bool,
}

fn default_true() -> bool {
    true
}

/// `POST /tokenize`: the ids the server would read `prompt` as (with the beginning-of-sequence
/// token when `add_special_tokens` and the model adds one).
async fn tokenize(
    State(server): State<Arc<ModelServer>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: TokenizeRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::invalid(format!("Invalid request body: {err}")))?;
    let tokenizer = &server.model.tokenizer;
    let ids = if request.add_special_tokens {
        tokenizer.encode_prompt(&request.prompt)
    } else {
        tokenizer.encode(&request.prompt)
    }
    .map_err(|err| ApiError::invalid(err.to_string()))?;
    Ok(Json(json!({
        "tokens": ids,
        "count": ids.len(),
        "max_model_len": server.model.context_length,
    })))
}

#[derive(serde::Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

/// `POST /detokenize`: the text of token ids.
async fn detokenize(
    State(server): State<Arc<ModelServer>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: DetokenizeRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::invalid(format!("Invalid request body: {err}")))?;
    let tokenizer = &server.model.tokenizer;
    if let Some(bad) = request
        .tokens
        .iter()
        .find(|&&id| id as usize >= tokenizer.vocab_size())
    {
        return Err(ApiError::invalid(format!(
            "token id {bad} is outside the vocabulary"
        )));
    }
    let text = tokenizer
        .decode(&request.tokens)
        .map_err(|err| ApiError::invalid(err.to_string()))?;
    Ok(Json(json!({"prompt": text})))
}

async fn list_models(State(server): State<Arc<ModelServer>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": server.name,
            "object": "model",
            "created": unix_seconds(),
            "owned_by": "arbiter",
            "root": server.root,
            "max_model_len": server.model.context_length,
        }],
    }))
}

async fn chat_completions(State(server): State<Arc<ModelServer>>, body: Bytes) -> Response {
    respond(server, Format::Chat, &body).await
}

async fn completions(State(server): State<Arc<ModelServer>>, body: Bytes) -> Response {
    respond(server, Format::Completion, &body).await
}

async fn respond(server: Arc<ModelServer>, format: Format, body: &[u8]) -> Response {
    let number = server.counts.requests.fetch_add(1, Ordering::Relaxed);
    let mut job = match openai::parse(format, body, default_seed(number)) {
        Ok(job) => job,
        Err(error) => return error.into_response(),
    };
    if job.model != server.name {
        return ApiError::model_not_found(&job.model, &server.name).into_response();
    }
    // Rendering and tokenizing a long prompt takes real CPU time: off the async threads, so
    // /metrics and open streams stay responsive.
    let preparing = server.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let prompt = preparing.prepare(&mut job);
        (job, prompt)
    })
    .await;
    let (job, prompt) = match prepared {
        Ok((job, Ok(prompt))) => (job, prompt),
        Ok((_, Err(error))) => return error.into_response(),
        Err(error) => {
            return ApiError::internal(format!("preparing the prompt: {error}")).into_response()
        }
    };
    let prefix = match format {
        Format::Chat => "chatcmpl",
        Format::Completion => "cmpl",
    };
    let reply = Reply {
        id: format!("{prefix}-arbiter-{number:x}"),
        created: unix_seconds(),
        format,
        logprobs: job.params.top_logprobs.is_some(),
        include_usage: job.include_usage,
    };
    // With echo, the prompt comes back first, each token scored (its text as sent).
    let echo = match (&job.prompt, job.echo) {
        (Prompt::Text(text), true) => Some(text.clone()),
        (Prompt::Tokens(_), true) => match server.model.tokenizer.decode(&prompt) {
            Ok(text) => Some(text),
            Err(error) => return ApiError::invalid(error.to_string()).into_response(),
        },
        _ => None,
    };
    let events = start(server.clone(), prompt, job.params, echo).await;
    if job.stream {
        reply.stream(server, events)
    } else {
        reply.whole(&server, events).await
    }
}

/// What a generation thread reports.
enum Progress {
    Piece(Piece),
    Done(Finished),
    Failed(String),
}

/// Sets the generation's cancel flag when the response is dropped (the client went away).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Counts a request in a gauge (waiting, running) until dropped: when it moves on, its
/// client leaves, or its generation panics, so the gauges never drift.
struct Gauge<'a>(&'a AtomicUsize);

impl<'a> Gauge<'a> {
    fn enter(count: &'a AtomicUsize) -> Gauge<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Gauge(count)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Events {
    receiver: mpsc::Receiver<Progress>,
    _cancel: CancelOnDrop,
}

/// Waits for a slot, then starts the generation on a blocking thread.
async fn start(
    server: Arc<ModelServer>,
    prompt: Vec<u32>,
    params: crate::generate::SamplingParams,
    echo: Option<String>,
) -> Events {
    let (sender, receiver) = mpsc::channel(64);
    let cancel = Arc::new(AtomicBool::new(false));
    let permit = {
        let _waiting = Gauge::enter(&server.counts.waiting);
        server
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    };
    let flag = cancel.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let running = Gauge::enter(&server.counts.running);
        let outcome = match echo {
            Some(text) if params.max_tokens <= 1 => {
                echo_prompt(&server, &prompt, &params, text, &flag, &sender)
            }
            echo => {
                let echoed = match echo {
                    Some(text) => echo_prompt(
                        &server,
                        &prompt,
                        &SamplingParams {
                            max_tokens: 0,
                            ..params.clone()
                        },
                        text,
                        &flag,
                        &sender,
                    )
                    .map(|_| ()),
                    None => Ok(()),
                };
                echoed.and_then(|()| {
                    generate(
                        (&server.model.weights, &server.prefix_cache),
                        &server.model.tokenizer,
                        &prompt,
                        &params,
                        &flag,
                        |piece| sender.blocking_send(Progress::Piece(piece)).is_ok(),
                    )
                })
            }
        };
        drop(running);
        let report = match outcome {
            Ok(finished) => {
                server.counts.record(&finished);
                Progress::Done(finished)
            }
            Err(GenerateError::Cancelled) => return,
            Err(GenerateError::Model(error)) => {
                tracing::error!(%error, "generation failed");
                Progress::Failed(format!("generation failed: {error}"))
            }
        };
        let _ = sender.blocking_send(report);
    });
    Events {
        receiver,
        _cancel: CancelOnDrop(cancel),
    }
}

/// With echo: sends the prompt's text and its scored tokens as the answer's first piece, then
/// (with `max_tokens` 1, as likelihood scoring asks) the one token that follows, always listed
/// with its logprob, even a stop token: clients count it off the end of the list by the usage.
fn echo_prompt(
    server: &ModelServer,
    prompt: &[u32],
    params: &SamplingParams,
    text: String,
    cancel: &AtomicBool,
    sender: &mpsc::Sender<Progress>,
) -> Result<Finished, GenerateError> {
    let tokenizer = &server.model.tokenizer;
    let top = params.top_logprobs.unwrap_or(0);
    let (tokens, next_logits) =
        score_prompt(&server.model.weights, tokenizer, prompt, top, cancel)?;
    let send = |piece: Piece| {
        sender
            .blocking_send(Progress::Piece(piece))
            .map_err(|_| GenerateError::Cancelled)
    };
    send(Piece { text, tokens })?;
    if params.max_tokens == 0 {
        return Ok(Finished {
            finish_reason: FinishReason::Length,
            prompt_tokens: prompt.len(),
            completion_tokens: 0,
        });
    }
    let next = sampler_for(params).sample(&next_logits)?;
    let logits = next_logits.to_vec1::<f32>()?;
    let scored = crate::scoring::score(&logits, next, top, tokenizer);
    let stop = tokenizer.stop_tokens.contains(&next);
    send(Piece {
        // A stop token is listed but is no text, as vLLM returns it.
        text: String::from_utf8_lossy(tokenizer.token_bytes(next)).into_owned(),
        tokens: vec![scored],
    })?;
    Ok(Finished {
        finish_reason: if stop {
            FinishReason::Stop
        } else {
            FinishReason::Length
        },
        prompt_tokens: prompt.len(),
        completion_tokens: 1,
    })
}

impl Counts {
    fn record(&self, finished: &Finished) {
        self.prompt_tokens
            .fetch_add(finished.prompt_tokens as u64, Ordering::Relaxed);
        self.generation_tokens
            .fetch_add(finished.completion_tokens as u64, Ordering::Relaxed);
        let counter = match finished.finish_reason {
            crate::generate::FinishReason::Stop => &self.finished_stop,
            crate::generate::FinishReason::Length => &self.finished_length,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One response's identity and options.
struct Reply {
    id: String,
    created: u64,
    format: Format,
    logprobs: bool,
    include_usage: bool,
}

impl Reply {
    fn envelope<'a>(&'a self, server: &'a ModelServer) -> Envelope<'a> {
        Envelope {
            id: &self.id,
            created: self.created,
            model: &server.name,
            fingerprint: FINGERPRINT,
        }
    }

    async fn whole(self, server: &ModelServer, mut events: Events) -> Response {
        let mut answer = Piece::default();
        while let Some(progress) = events.receiver.recv().await {
            match progress {
                Progress::Piece(piece) => {
                    answer.text.push_str(&piece.text);
                    answer.tokens.extend(piece.tokens);
                }
                Progress::Done(finished) => {
                    let body = openai::body(
                        self.format,
                        &self.envelope(server),
                        &answer,
                        &finished,
                        self.logprobs,
                    );
                    return Json(body).into_response();
                }
                Progress::Failed(message) => return ApiError::internal(message).into_response(),
            }
        }
        ApiError::internal("the generation stopped without an answer").into_response()
    }

    fn stream(self, server: Arc<ModelServer>, events: Events) -> Response {
        let opening = openai::opening_chunk(self.format, &self.envelope(&server));
        let state = (self, server, events, 0usize, false);
        let chunks = futures::stream::unfold(
            state,
            |(reply, server, mut events, offset, done)| async move {
                if done {
                    return None;
                }
                let envelope = reply.envelope(&server);
                let (chunks, offset, done) = match events.receiver.recv().await {
                    Some(Progress::Piece(piece)) => {
                        let chunk = openai::piece_chunk(
                            reply.format,
                            &envelope,
                            &piece,
                            reply.logprobs,
                            offset,
                        );
                        (vec![chunk], offset + piece.text.chars().count(), false)
                    }
                    Some(Progress::Done(finished)) => {
                        let mut chunks =
                            vec![openai::closing_chunk(reply.format, &envelope, &finished)];
                        if reply.include_usage {
                            chunks.push(openai::usage_chunk(reply.format, &envelope, &finished));
                        }
                        (chunks, offset, true)
                    }
                    Some(Progress::Failed(message)) => {
                        (vec![ApiError::internal(message).body()], offset, true)
                    }
                    None => (
                        vec![ApiError::internal("the generation stopped without an answer").body()],
                        offset,
                        true,
                    ),
                };
                let mut events_out: Vec<Event> = chunks
                    .iter()
                    .map(|chunk| Event::default().data(chunk.to_string()))
                    .collect();
                if done {
                    events_out.push(Event::default().data("[DONE]"));
                }
                Some((
                    futures::stream::iter(
                        events_out
                            .into_iter()
                            .map(Ok::<_, std::convert::Infallible>),
                    ),
                    (reply, server, events, offset, done),
                ))
            },
        )
        .flatten();
        let opening = futures::stream::iter(
            opening.map(|chunk| Ok(Event::default().data(chunk.to_string()))),
        );
        Sse::new(opening.chain(chunks)).into_response()
    }
}

/// `system_fingerprint`: which server build answered.
const FINGERPRINT: &str = concat!("arbiter-model-", env!("CARGO_PKG_VERSION"));

async fn metrics(State(server): State<Arc<ModelServer>>) -> Response {
    let counts = &server.counts;
    // Label values escape backslashes and quotes in the text format.
    let model_name = server.name.replace('\\', "\\\\").replace('"', "\\\"");
    let label = format!("{{model_name=\"{model_name}\"}}");
    let metric = |kind: &str, name: &str, help: &str, value: u64| {
        format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{label} {value}\n")
    };
    let load = |count: &AtomicUsize| count.load(Ordering::Relaxed) as u64;
    let load64 = |count: &AtomicU64| count.load(Ordering::Relaxed);
    let (prefix_queried, prefix_hits) = server.prefix_cache.counts();
    let body = [
        metric(
            "gauge",
            "vllm:num_requests_running",
            "Number of requests currently running.",
            load(&counts.running),
        ),
        metric(
            "gauge",
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            load(&counts.waiting),
        ),
        metric(
            "counter",
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            load64(&counts.prompt_tokens),
        ),
        metric(
            "counter",
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            load64(&counts.generation_tokens),
        ),
        metric(
            "counter",
            "vllm:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            prefix_queried,
        ),
        metric(
            "counter",
            "vllm:prefix_cache_hits_total",
            "Prompt tokens found in the prefix cache.",
            prefix_hits,
        ),
        format!(
            "# HELP vllm:request_success_total Count of successfully processed requests.\n\
             # TYPE vllm:request_success_total counter\n\
             vllm:request_success_total{{model_name=\"{model_name}\",finished_reason=\"stop\"}} {stop}\n\
             vllm:request_success_total{{model_name=\"{model_name}\",finished_reason=\"length\"}} {length}\n",
            stop = load64(&counts.finished_stop),
            length = load64(&counts.finished_length),
        ),
    ]
    .concat();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// A seed for a request that names none: different per request, as OpenAI's sampling is.
fn default_seed(request_number: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    nanos ^ request_number.rotate_left(32)
}
