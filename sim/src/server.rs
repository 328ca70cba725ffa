//! The simulator's HTTP surface: `/v1/models`, `/v1/chat/completions` and `/v1/completions`
//! (streamed or whole, with logprobs), `/metrics` in vLLM's names, `/health`, the API key check
//! and the injected faults (429 with Retry-After, 5xx, timeouts, truncation, malformed bodies).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Value};

use crate::prefix_cache::PrefixCache;
use crate::replies::*;
use crate::{SimConfig, SimFaults, SimModel};

/// OpenAI's default when a request names no limit would be "unbounded"; a small cap keeps
/// runaway test prompts cheap.
const DEFAULT_MAX_TOKENS: usize = 256;

const FINGERPRINT: &str = "arbiter-sim";

/// Labels every response, so a simulated result can never pass for a real model's.
const SIMULATOR_HEADER: &str = "x-arbiter-simulator";

/// Long enough that any sane client timeout fires first.
const SIMULATED_TIMEOUT: Duration = Duration::from_secs(120);

/// The simulator's routes, every response labelled with `x-arbiter-simulator: true`.
pub fn router(config: SimConfig) -> Router {
    let required_key = config.api_key.clone();
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        // vLLM's tokenizer endpoints, as rolling-likelihood clients use them.
        .route("/tokenizer_info", get(tokenizer_info))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .fallback(unknown_route)
        .with_state(Arc::new(SimState::new(config)))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let required_key = required_key.clone();
                async move { require_api_key(required_key.as_deref(), request, next).await }
            },
        ))
        .layer(axum::middleware::map_response(label_as_simulator))
}

/// 401 for `/v1/*` requests without the configured key, in OpenAI's error shape.
async fn require_api_key(
    required: Option<&str>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(key) = required {
        let presented = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        if request.uri().path().starts_with("/v1/") && presented != Some(&format!("Bearer {key}")) {
            return (
                axum::http::StatusCode::UNAUTHORIZED,
                axum::Json(serde_json::json!({
                    "error": {"message": "Unauthorized: a valid API key is required", "type": "invalid_request_error", "code": 401}
                })),
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Serves the simulator on `listener` until the task is dropped.
pub async fn serve(config: SimConfig, listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let address = listener
        .local_addr()
        .context("reading the simulator's listening address")?;
    tracing::info!(%address, "arbiter sim serving simulated models");
    axum::serve(listener, router(config))
        .await
        .context("serving the simulated model endpoint")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    RateLimited,
    ServerError,
    Timeout,
    Malformed,
    Truncated,
}

impl Fault {
    /// Every injectable fault, in the order of [`SimState::faults_injected`].
    const INJECTED: [Fault; 5] = [
        Fault::RateLimited,
        Fault::ServerError,
        Fault::Timeout,
        Fault::Malformed,
        Fault::Truncated,
    ];

    /// The `fault` label of `arbiter_sim_faults_total`.
    fn label(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::RateLimited => "rate_limited",
            Fault::ServerError => "server_error",
            Fault::Timeout => "timeout",
            Fault::Malformed => "malformed",
            Fault::Truncated => "truncated",
        }
    }

    /// The fault a uniform draw `u` selects; rates are stacked in [`SimFaults`] field order.
    fn from_draw(faults: &SimFaults, u: f64) -> Fault {
        let ladder = [
            (faults.rate_429, Fault::RateLimited),
            (faults.rate_500, Fault::ServerError),
            (faults.rate_timeout, Fault::Timeout),
            (faults.rate_malformed, Fault::Malformed),
            (faults.rate_truncate, Fault::Truncated),
        ];
        let mut threshold = 0.0;
        for (rate, fault) in ladder {
            threshold += rate.max(0.0);
            if u < threshold {
                return fault;
            }
        }
        Fault::None
    }
}

struct SimState {
    models: Vec<ModelSlot>,
    latency_ms_min: u64,
    latency_ms_max: u64,
    faults: SimFaults,
    /// Counts requests so fault draws differ between a request and its retry; also reported
    /// as `arbiter_sim_requests_total`, so benchmarks can prove a run made no calls.
    request_counter: AtomicU64,
    /// Faults injected so far, in [`Fault::INJECTED`] order (`arbiter_sim_faults_total`), so
    /// tests can hold a client to account for exactly the faults it met.
    faults_injected: [AtomicU64; 5],
    /// Batch slots when the server's concurrency is limited.
    slots: Option<tokio::sync::Semaphore>,
    /// Requests queued for a slot.
    waiting: AtomicU64,
    latency_us_per_prompt_byte: u64,
    prefix_cache: bool,
}

struct ModelSlot {
    model: SimModel,
    /// Requests in flight, reported as `vllm:num_requests_running`.
    running: AtomicU64,
    prefix_cache: std::sync::Mutex<PrefixCache>,
}

impl SimState {
    fn new(config: SimConfig) -> SimState {
        SimState {
            models: config
                .models
                .into_iter()
                .map(|model| ModelSlot {
                    model,
                    running: AtomicU64::new(0),
                    prefix_cache: Default::default(),
                })
                .collect(),
            latency_ms_min: config.latency_ms_min,
            latency_ms_max: config.latency_ms_max,
            faults: config.faults,
            request_counter: AtomicU64::new(0),
            faults_injected: Default::default(),
            slots: config
                .max_concurrency
                .map(|slots| tokio::sync::Semaphore::new(slots.max(1))),
            waiting: AtomicU64::new(0),
            latency_us_per_prompt_byte: config.latency_us_per_prompt_byte,
            prefix_cache: config.prefix_cache,
        }
    }

    fn slot(&self, name: &str) -> Option<&ModelSlot> {
        self.models.iter().find(|slot| slot.model.name == name)
    }
}

/// Counts a request as running for as long as it lives, however the handler exits.
struct RunningGuard<'a>(&'a AtomicU64);

impl<'a> RunningGuard<'a> {
    fn enter(running: &'a AtomicU64) -> RunningGuard<'a> {
        running.fetch_add(1, Ordering::Relaxed);
        RunningGuard(running)
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An OpenAI-shaped error response.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn invalid_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: "invalid_request",
            message: message.into(),
        }
    }

    fn model_not_found(name: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: "model_not_found",
            message: format!("The model `{name}` does not exist on this simulator."),
        }
    }

    fn server(status: StatusCode, message: &str) -> ApiError {
        ApiError {
            status,
            kind: "server_error",
            code: "internal_error",
            message: message.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {"message": self.message, "type": self.kind, "param": null, "code": self.code}
        });
        (self.status, Json(body)).into_response()
    }
}

async fn label_as_simulator(mut response: Response) -> Response {
    response.headers_mut().insert(
        HeaderName::from_static(SIMULATOR_HEADER),
        HeaderValue::from_static("true"),
    );
    response
}

async fn unknown_route() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        code: "unknown_url",
        message: "Unknown route on the Arbiter simulator.".to_string(),
    }
}

async fn health() -> &'static str {
    "ok"
}

/// The most tokens a simulated model reads (a prompt of ids longer than this is still read).
const SIM_MAX_MODEL_LEN: usize = 1 << 20;

/// `GET /tokenizer_info`, as vLLM answers it: the special tokens by text.
async fn tokenizer_info() -> Json<Value> {
    Json(json!({
        "tokenizer_class": "ArbiterSimTokenizer",
        "eos_token": crate::vocab::END_OF_TEXT,
        "bos_token": null,
        "pad_token": null,
        "add_bos_token": false,
        "model_max_length": SIM_MAX_MODEL_LEN,
    }))
}

#[derive(Deserialize)]
struct TokenizeRequest {
    prompt: String,
}

/// `POST /tokenize`: the ids the simulator reads `prompt` as (it adds no special tokens).
async fn tokenize(body: Bytes) -> Response {
    let request: TokenizeRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    match crate::vocab::ids_of(&crate::vocab::pieces(&request.prompt)) {
        Some(ids) => Json(json!({
            "count": ids.len(),
            "max_model_len": SIM_MAX_MODEL_LEN,
            "tokens": ids,
        }))
        .into_response(),
        None => ApiError::invalid_request("The simulator's vocabulary is full.").into_response(),
    }
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

/// `POST /detokenize`: the text of token ids.
async fn detokenize(body: Bytes) -> Response {
    let request: DetokenizeRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    match crate::vocab::pieces_of(&request.tokens) {
        Ok(pieces) => Json(json!({"prompt": pieces.concat()})).into_response(),
        Err(id) => ApiError::invalid_request(format!("Token id {id} is not in the vocabulary."))
            .into_response(),
    }
}

async fn list_models(State(state): State<Arc<SimState>>) -> Json<Value> {
    let data: Vec<Value> = state
        .models
        .iter()
        .map(|slot| {
            json!({"id": slot.model.name, "object": "model", "created": 0, "owned_by": "arbiter-sim"})
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn metrics(State(state): State<Arc<SimState>>) -> Response {
    let mut text = String::from(
        "# HELP vllm:num_requests_running Number of requests currently running.\n\
         # TYPE vllm:num_requests_running gauge\n",
    );
    for slot in &state.models {
        let running = slot.running.load(Ordering::Relaxed);
        let name = prometheus_label(&slot.model.name);
        text.push_str(&format!(
            "vllm:num_requests_running{{model_name=\"{name}\"}} {running}\n"
        ));
    }
    // Queued requests wait for a batch slot of the whole server, so they are reported once.
    text.push_str(
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n",
    );
    let waiting = state.waiting.load(Ordering::Relaxed);
    for (index, slot) in state.models.iter().enumerate() {
        let name = prometheus_label(&slot.model.name);
        let waiting = if index == 0 { waiting } else { 0 };
        text.push_str(&format!(
            "vllm:num_requests_waiting{{model_name=\"{name}\"}} {waiting}\n"
        ));
    }
    for (metric, help) in [
        ("queries", "Prompt tokens looked up in the prefix cache."),
        ("hits", "Prompt tokens found in the prefix cache."),
    ] {
        text.push_str(&format!(
            "# HELP vllm:prefix_cache_{metric}_total {help}\n# TYPE vllm:prefix_cache_{metric}_total counter\n"
        ));
        for slot in &state.models {
            let cache = slot
                .prefix_cache
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let count = if metric == "hits" {
                cache.hits
            } else {
                cache.queried
            };
            text.push_str(&format!(
                "vllm:prefix_cache_{metric}_total{{model_name=\"{}\"}} {count}\n",
                prometheus_label(&slot.model.name)
            ));
        }
    }
    text.push_str(&format!(
        "# HELP arbiter_sim_requests_total Generation requests received.\n\
         # TYPE arbiter_sim_requests_total counter\n\
         arbiter_sim_requests_total {}\n",
        state.request_counter.load(Ordering::Relaxed)
    ));
    text.push_str(
        "# HELP arbiter_sim_faults_total Failures the simulator injected, by kind.\n\
         # TYPE arbiter_sim_faults_total counter\n",
    );
    for (fault, count) in Fault::INJECTED.iter().zip(&state.faults_injected) {
        text.push_str(&format!(
            "arbiter_sim_faults_total{{fault=\"{}\"}} {}\n",
            fault.label(),
            count.load(Ordering::Relaxed)
        ));
    }
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// Escapes a Prometheus label value as the text exposition format requires.
fn prometheus_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Parses a request body ourselves, so malformed JSON gets an OpenAI-shaped 400 rather than
/// axum's plain-text rejection.
fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|error| ApiError::invalid_request(format!("Invalid request body: {error}")))
}

/// `stop` may be one string or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum StopField {
    One(String),
    Many(Vec<String>),
}

impl StopField {
    fn into_list(field: Option<StopField>) -> Vec<String> {
        match field {
            None => Vec::new(),
            Some(StopField::One(stop)) => vec![stop],
            Some(StopField::Many(stops)) => stops,
        }
    }
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct ChatMessage {
    #[serde(default)]
    content: Value,
}

#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    stop: Option<StopField>,
    seed: Option<i64>,
    logprobs: Option<bool>,
    top_logprobs: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
}

/// The legacy completions prompt: one string or one list of token ids, or a list holding
/// exactly one of either.
#[derive(Deserialize)]
#[serde(untagged)]
enum PromptField {
    One(String),
    Many(Vec<String>),
    Ids(Vec<u32>),
    ManyIds(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
struct CompletionRequest {
    model: String,
    prompt: PromptField,
    max_tokens: Option<u64>,
    stop: Option<StopField>,
    seed: Option<i64>,
    logprobs: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    /// Return the prompt, with its tokens' logprobs, before the completion.
    echo: Option<bool>,
}

/// What either endpoint asks of the simulator once its JSON is understood.
struct GenerationRequest {
    model: String,
    prompt: String,
    seed: i64,
    max_tokens: usize,
    stop: Vec<String>,
    /// `None` when logprobs were not requested.
    top_logprobs: Option<usize>,
    stream: bool,
    include_usage: bool,
    /// Completions only: the prompt's tokens come first, scored.
    echo: bool,
    /// A prompt sent as token ids: its tokens, exactly (`prompt` is their text).
    prompt_tokens: Option<Vec<String>>,
}

fn token_limit(limit: Option<u64>) -> usize {
    limit.map_or(DEFAULT_MAX_TOKENS, |limit| {
        usize::try_from(limit).unwrap_or(usize::MAX)
    })
}

fn checked_top_logprobs(count: u64) -> Result<usize, ApiError> {
    usize::try_from(count)
        .ok()
        .filter(|count| *count <= MAX_TOP_LOGPROBS)
        .ok_or_else(|| {
            ApiError::invalid_request(format!(
                "top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {count}"
            ))
        })
}

/// A chat message's text: a plain string, or the text parts of a multi-part message.
fn message_text(content: Value) -> String {
    match content {
        Value::String(text) => text,
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

impl ChatRequest {
    fn into_generation(self) -> Result<GenerationRequest, ApiError> {
        let top_logprobs = match self.logprobs {
            Some(true) => Some(checked_top_logprobs(self.top_logprobs.unwrap_or(0))?),
            _ => None,
        };
        let prompt: Vec<String> = self
            .messages
            .into_iter()
            .map(|message| message_text(message.content))
            .collect();
        Ok(GenerationRequest {
            model: self.model,
            prompt: prompt.join("\n"),
            seed: self.seed.unwrap_or(0),
            max_tokens: token_limit(self.max_completion_tokens.or(self.max_tokens)),
            stop: StopField::into_list(self.stop),
            top_logprobs,
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
            echo: false,
            prompt_tokens: None,
        })
    }
}

impl CompletionRequest {
    fn into_generation(self) -> Result<GenerationRequest, ApiError> {
        let one_prompt =
            || ApiError::invalid_request("The simulator answers exactly one prompt per request.");
        let ids = match self.prompt {
            PromptField::One(prompt) => Err(prompt),
            PromptField::Many(prompts) => match <[String; 1]>::try_from(prompts) {
                Ok([prompt]) => Err(prompt),
                Err(_) => return Err(one_prompt()),
            },
            PromptField::Ids(ids) => Ok(ids),
            PromptField::ManyIds(lists) => match <[Vec<u32>; 1]>::try_from(lists) {
                Ok([ids]) => Ok(ids),
                Err(_) => return Err(one_prompt()),
            },
        };
        let (prompt, prompt_tokens) = match ids {
            Ok(ids) => {
                let pieces = crate::vocab::pieces_of(&ids).map_err(|id| {
                    ApiError::invalid_request(format!(
                        "Token id {id} is not in the vocabulary (get ids from /tokenize)."
                    ))
                })?;
                (pieces.concat(), Some(pieces))
            }
            Err(text) => (text, None),
        };
        Ok(GenerationRequest {
            model: self.model,
            prompt,
            seed: self.seed.unwrap_or(0),
            max_tokens: token_limit(self.max_tokens),
            stop: StopField::into_list(self.stop),
            top_logprobs: self.logprobs.map(checked_top_logprobs).transpose()?,
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
            echo: self.echo.unwrap_or(false),
            prompt_tokens,
        })
    }
}

#[derive(Clone, Copy)]
enum Format {
    Chat,
    Completion,
}

async fn chat_completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    match parse_body::<ChatRequest>(&body).and_then(ChatRequest::into_generation) {
        Ok(request) => generate(&state, request, Format::Chat).await,
        Err(error) => error.into_response(),
    }
}

async fn completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    match parse_body::<CompletionRequest>(&body).and_then(CompletionRequest::into_generation) {
        Ok(request) => generate(&state, request, Format::Completion).await,
        Err(error) => error.into_response(),
    }
}

async fn generate(state: &SimState, request: GenerationRequest, format: Format) -> Response {
    let Some(slot) = state.slot(&request.model) else {
        return ApiError::model_not_found(&request.model).into_response();
    };
    let _running = RunningGuard::enter(&slot.running);
    let generation = Generation {
        model: &slot.model,
        prompt: &request.prompt,
        seed: request.seed,
    };
    let request_number = state.request_counter.fetch_add(1, Ordering::Relaxed);
    let fault = Fault::from_draw(&state.faults, generation.draw("fault", request_number));
    if let Some(index) = Fault::INJECTED.iter().position(|kind| *kind == fault) {
        tracing::debug!(model = %request.model, ?fault, "arbiter sim injecting a fault");
        state.faults_injected[index].fetch_add(1, Ordering::Relaxed);
    }
    // Rate limits and hangs happen before any work, as a real gateway's would.
    match fault {
        Fault::RateLimited => return rate_limited(),
        Fault::Timeout => {
            tokio::time::sleep(SIMULATED_TIMEOUT).await;
            return ApiError::server(StatusCode::GATEWAY_TIMEOUT, "Simulated timeout.")
                .into_response();
        }
        _ => {}
    }
    // With limited batch slots, a request first waits its turn, as on a busy server.
    let _batch_slot = match &state.slots {
        Some(slots) => {
            state.waiting.fetch_add(1, Ordering::Relaxed);
            let slot = slots.acquire().await.ok();
            state.waiting.fetch_sub(1, Ordering::Relaxed);
            slot
        }
        None => None,
    };
    // The prompt is read, at its modelled cost, only past the prefix the cache holds.
    let prompt_tokens = crate::replies::tokenize(&request.prompt);
    let cached = if state.prefix_cache {
        slot.prefix_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .read(&prompt_tokens)
    } else {
        0
    };
    let uncached_share = 1.0 - cached as f64 / prompt_tokens.len().max(1) as f64;
    let delay = latency(generation, state.latency_ms_min, state.latency_ms_max)
        + Duration::from_micros(
            (state.latency_us_per_prompt_byte as f64 * request.prompt.len() as f64 * uncached_share)
                as u64,
        );
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match fault {
        Fault::ServerError => {
            ApiError::server(StatusCode::INTERNAL_SERVER_ERROR, "Simulated server error.")
                .into_response()
        }
        Fault::Malformed => malformed_body(),
        _ => {
            let outcome = run_generation(generation, &request, format, fault == Fault::Truncated);
            render(&outcome, format, request.stream)
        }
    }
}

fn rate_limited() -> Response {
    let error = ApiError {
        status: StatusCode::TOO_MANY_REQUESTS,
        kind: "rate_limit_error",
        code: "rate_limit_exceeded",
        message: "Simulated rate limit; retry after one second.".to_string(),
    };
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn malformed_body() -> Response {
    let content_type = HeaderValue::from_static("application/json");
    ([(header::CONTENT_TYPE, content_type)], r#"{"choices": ["#).into_response()
}

/// Everything a response body needs, in either format, streamed or not.
struct Outcome<'a> {
    id: String,
    model: &'a str,
    tokens: Vec<ScoredToken>,
    finish_reason: &'static str,
    prompt_tokens: usize,
    logprobs: bool,
    include_usage: bool,
    /// Of `tokens`, how many are the echoed prompt's (0 without echo).
    echoed: usize,
}

impl Outcome<'_> {
    fn text(&self) -> String {
        let length = self.tokens.iter().map(|token| token.text.len()).sum();
        let mut text = String::with_capacity(length);
        for token in &self.tokens {
            text.push_str(&token.text);
        }
        text
    }

    fn usage(&self) -> Usage {
        let generated = self.tokens.len() - self.echoed;
        Usage {
            completion_tokens: generated,
            prompt_tokens: self.prompt_tokens,
            total_tokens: self.prompt_tokens + generated,
        }
    }

    /// The envelope shared by every body and chunk; streamed chunks carry no `usage`.
    fn envelope<Choices>(
        &self,
        object: &'static str,
        choices: Choices,
        usage: Option<Usage>,
    ) -> Envelope<'_, Choices> {
        Envelope {
            choices,
            created: 0,
            id: &self.id,
            model: self.model,
            object,
            system_fingerprint: FINGERPRINT,
            usage,
        }
    }

    /// `tokens`, if the request asked for logprobs; `None` renders as `"logprobs": null`.
    fn logprobs_of<'t>(&self, tokens: &'t [ScoredToken]) -> Option<&'t [ScoredToken]> {
        self.logprobs.then_some(tokens)
    }
}

#[derive(Serialize)]
struct Envelope<'a, Choices> {
    choices: Choices,
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    system_fingerprint: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct Usage {
    completion_tokens: usize,
    prompt_tokens: usize,
    total_tokens: usize,
}

/// The usage chunk's `choices: []`.
const NO_CHOICES: [(); 0] = [];

fn run_generation<'a>(
    generation: Generation<'_>,
    request: &'a GenerationRequest,
    format: Format,
    force_truncate: bool,
) -> Outcome<'a> {
    let reply = generate_reply(generation);
    let limits = Limits {
        max_tokens: request.max_tokens,
        stop: request.stop.clone(),
        force_truncate,
    };
    let finished = apply_limits(&reply.text, &limits);
    let top_count = request.top_logprobs.unwrap_or(0);
    let prefix = match format {
        Format::Chat => "chatcmpl-sim",
        Format::Completion => "cmpl-sim",
    };
    let mut tokens = score_tokens(generation, &reply, finished.tokens, top_count);
    let mut echoed = 0;
    if request.echo {
        let mut prompt = match &request.prompt_tokens {
            Some(tokens) => score_id_prompt(generation, tokens.clone(), top_count),
            None => score_prompt(generation, top_count),
        };
        echoed = prompt.len();
        prompt.append(&mut tokens);
        tokens = prompt;
    }
    Outcome {
        id: format!("{prefix}-{:016x}", generation.hash("id", 0)),
        model: &request.model,
        tokens,
        finish_reason: finished.finish_reason,
        prompt_tokens: request
            .prompt_tokens
            .as_ref()
            .map_or_else(|| request.prompt.split_whitespace().count(), Vec::len),
        logprobs: request.top_logprobs.is_some(),
        include_usage: request.include_usage,
        echoed,
    }
}

fn render(outcome: &Outcome<'_>, format: Format, stream: bool) -> Response {
    match (format, stream) {
        (Format::Chat, false) => Json(chat_body(outcome, &outcome.text())).into_response(),
        (Format::Chat, true) => event_stream(chat_chunks(outcome)),
        (Format::Completion, false) => {
            Json(completion_body(outcome, &outcome.text())).into_response()
        }
        (Format::Completion, true) => event_stream(completion_chunks(outcome)),
    }
}

/// One streamed chunk, rendered up front so that the stream need not borrow the outcome. These
/// plain structs cannot fail to serialize; if one ever did, the error would end the stream
/// rather than panic the server.
type Chunk = Result<Event, serde_json::Error>;

fn chunk_event(chunk: &impl Serialize) -> Chunk {
    serde_json::to_string(chunk).map(|json| Event::default().data(json))
}

/// Server-Sent Events: one `data:` event per chunk, then `data: [DONE]`.
fn event_stream(chunks: Vec<Chunk>) -> Response {
    let done = std::iter::once(Ok(Event::default().data("[DONE]")));
    Sse::new(futures::stream::iter(chunks.into_iter().chain(done))).into_response()
}

/// OpenAI's `stream_options.include_usage`: a last chunk with no choices and the usage.
fn push_usage_chunk(outcome: &Outcome<'_>, object: &'static str, chunks: &mut Vec<Chunk>) {
    if outcome.include_usage {
        let usage = Some(outcome.usage());
        chunks.push(chunk_event(&outcome.envelope(object, NO_CHOICES, usage)));
    }
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    finish_reason: &'static str,
    index: u32,
    logprobs: Option<ChatLogprobs<'a>>,
    message: AssistantMessage<'a>,
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    content: &'a str,
    role: &'static str,
}

#[derive(Serialize)]
struct ChatChunkChoice<'a> {
    delta: ChatDelta<'a>,
    finish_reason: Option<&'static str>,
    index: u32,
    logprobs: Option<ChatLogprobs<'a>>,
}

/// A streamed piece of the message: the first chunk carries the role, the last one nothing.
#[derive(Serialize)]
struct ChatDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
}

#[derive(Serialize)]
struct ChatLogprobs<'a> {
    #[serde(serialize_with = "chat_token_logprobs")]
    content: &'a [ScoredToken],
}

/// One chat token's entry; its alternatives use the same shape without `top_logprobs`.
#[derive(Serialize)]
struct ChatTokenLogprob<'a> {
    bytes: &'a [u8],
    logprob: f64,
    token: &'a str,
    #[serde(serialize_with = "chat_top_logprobs")]
    top_logprobs: &'a [(String, f64)],
}

#[derive(Serialize)]
struct ChatTopLogprob<'a> {
    bytes: &'a [u8],
    logprob: f64,
    token: &'a str,
}

fn chat_token_logprobs<S: Serializer>(
    tokens: &&[ScoredToken],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(tokens.iter().map(|token| ChatTokenLogprob {
        bytes: token.text.as_bytes(),
        logprob: token.logprob,
        token: &token.text,
        top_logprobs: &token.top,
    }))
}

fn chat_top_logprobs<S: Serializer>(
    top: &&[(String, f64)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(top.iter().map(|(text, logprob)| ChatTopLogprob {
        bytes: text.as_bytes(),
        logprob: *logprob,
        token: text,
    }))
}

fn chat_body<'a>(outcome: &'a Outcome<'_>, text: &'a str) -> impl Serialize + 'a {
    let choice = ChatChoice {
        finish_reason: outcome.finish_reason,
        index: 0,
        logprobs: outcome
            .logprobs_of(&outcome.tokens)
            .map(|content| ChatLogprobs { content }),
        message: AssistantMessage {
            content: text,
            role: "assistant",
        },
    };
    outcome.envelope("chat.completion", [choice], Some(outcome.usage()))
}

fn chat_chunks(outcome: &Outcome<'_>) -> Vec<Chunk> {
    const OBJECT: &str = "chat.completion.chunk";
    let chunk = |delta: ChatDelta<'_>, logprobs: Option<&[ScoredToken]>, finish_reason| {
        let choice = ChatChunkChoice {
            delta,
            finish_reason,
            index: 0,
            logprobs: logprobs.map(|content| ChatLogprobs { content }),
        };
        chunk_event(&outcome.envelope(OBJECT, [choice], None))
    };
    let mut chunks = Vec::with_capacity(outcome.tokens.len() + 3);
    let opening = ChatDelta {
        content: Some(""),
        role: Some("assistant"),
    };
    // The opening and closing chunks carry no token, so their logprobs are always null.
    chunks.push(chunk(opening, None, None));
    for token in &outcome.tokens {
        let delta = ChatDelta {
            content: Some(&token.text),
            role: None,
        };
        let logprobs = outcome.logprobs_of(std::slice::from_ref(token));
        chunks.push(chunk(delta, logprobs, None));
    }
    let closing = ChatDelta {
        content: None,
        role: None,
    };
    chunks.push(chunk(closing, None, Some(outcome.finish_reason)));
    push_usage_chunk(outcome, OBJECT, &mut chunks);
    chunks
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    finish_reason: Option<&'static str>,
    index: u32,
    logprobs: Option<CompletionLogprobs<'a>>,
    text: &'a str,
}

/// The legacy `logprobs` object, four lists over the same tokens.
#[derive(Serialize)]
struct CompletionLogprobs<'a> {
    text_offset: TextOffsets<'a>,
    #[serde(serialize_with = "completion_token_logprobs")]
    token_logprobs: &'a [ScoredToken],
    #[serde(serialize_with = "completion_tokens")]
    tokens: &'a [ScoredToken],
    #[serde(serialize_with = "completion_top_logprobs")]
    top_logprobs: &'a [ScoredToken],
}

impl<'a> CompletionLogprobs<'a> {
    /// `first_offset`: where the first of `tokens` starts in the whole completion.
    fn new(tokens: &'a [ScoredToken], first_offset: usize) -> CompletionLogprobs<'a> {
        CompletionLogprobs {
            text_offset: TextOffsets {
                tokens,
                first_offset,
            },
            token_logprobs: tokens,
            tokens,
            top_logprobs: tokens,
        }
    }
}

/// Where each token starts, in characters from the start of the completion.
struct TextOffsets<'a> {
    tokens: &'a [ScoredToken],
    first_offset: usize,
}

impl Serialize for TextOffsets<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let starts = self.tokens.iter().scan(self.first_offset, |next, token| {
            let start = *next;
            *next += token.text.chars().count();
            Some(start)
        });
        serializer.collect_seq(starts)
    }
}

fn completion_token_logprobs<S: Serializer>(
    tokens: &&[ScoredToken],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(tokens.iter().map(|token| token.logprob))
}

fn completion_tokens<S: Serializer>(
    tokens: &&[ScoredToken],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(tokens.iter().map(|token| token.text.as_str()))
}

fn completion_top_logprobs<S: Serializer>(
    tokens: &&[ScoredToken],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    // An echoed prompt's first token follows nothing: no logprob, no alternatives.
    serializer.collect_seq(
        tokens
            .iter()
            .map(|token| (!token.logprob.is_nan()).then_some(TopLogprobMap(&token.top))),
    )
}

/// One token's alternatives as a `{token: logprob}` object. Keys are written in byte order,
/// as the sorted maps of earlier versions wrote them; they are distinct by construction.
struct TopLogprobMap<'a>(&'a [(String, f64)]);

impl Serialize for TopLogprobMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut alternatives: Vec<&(String, f64)> = self.0.iter().collect();
        alternatives.sort_unstable_by(|left, right| left.0.cmp(&right.0));
        serializer.collect_map(alternatives.iter().map(|pair| (&pair.0, pair.1)))
    }
}

fn completion_body<'a>(outcome: &'a Outcome<'_>, text: &'a str) -> impl Serialize + 'a {
    let choice = CompletionChoice {
        finish_reason: Some(outcome.finish_reason),
        index: 0,
        logprobs: outcome
            .logprobs_of(&outcome.tokens)
            .map(|tokens| CompletionLogprobs::new(tokens, 0)),
        text,
    };
    outcome.envelope("text_completion", [choice], Some(outcome.usage()))
}

fn completion_chunks(outcome: &Outcome<'_>) -> Vec<Chunk> {
    const OBJECT: &str = "text_completion";
    let chunk = |text: &str, logprobs: Option<CompletionLogprobs<'_>>, finish_reason| {
        let choice = CompletionChoice {
            finish_reason,
            index: 0,
            logprobs,
            text,
        };
        chunk_event(&outcome.envelope(OBJECT, [choice], None))
    };
    let mut chunks = Vec::with_capacity(outcome.tokens.len() + 2);
    let mut offset = 0;
    for token in &outcome.tokens {
        let logprobs = outcome
            .logprobs_of(std::slice::from_ref(token))
            .map(|tokens| CompletionLogprobs::new(tokens, offset));
        chunks.push(chunk(&token.text, logprobs, None));
        offset += token.text.chars().count();
    }
    chunks.push(chunk("", None, Some(outcome.finish_reason)));
    push_usage_chunk(outcome, OBJECT, &mut chunks);
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::TEMPLATE;

    #[test]
    fn faults_follow_the_configured_ladder() {
        let faults = SimFaults {
            rate_429: 0.1,
            rate_500: 0.1,
            rate_timeout: 0.1,
            rate_malformed: 0.1,
            rate_truncate: 0.1,
        };
        assert_eq!(Fault::from_draw(&faults, 0.05), Fault::RateLimited);
        assert_eq!(Fault::from_draw(&faults, 0.15), Fault::ServerError);
        assert_eq!(Fault::from_draw(&faults, 0.25), Fault::Timeout);
        assert_eq!(Fault::from_draw(&faults, 0.35), Fault::Malformed);
        assert_eq!(Fault::from_draw(&faults, 0.45), Fault::Truncated);
        assert_eq!(Fault::from_draw(&faults, 0.55), Fault::None);
        assert_eq!(Fault::from_draw(&SimFaults::default(), 0.0), Fault::None);
    }

    /// The demo's models with next to no latency, on a free local port: (base URL, server).
    async fn start_fast_demo() -> (String, tokio::task::JoinHandle<anyhow::Result<()>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let base = format!("http://{}", listener.local_addr().expect("local address"));
        let config = SimConfig {
            latency_ms_min: 0,
            latency_ms_max: 1,
            ..SimConfig::demo()
        };
        (base, tokio::spawn(serve(config, listener)))
    }

    /// vLLM's tokenizer endpoints and prompts of token ids, as lm-eval's `local-completions`
    /// sends them for rolling likelihood: the echo scores exactly the tokens sent.
    #[tokio::test]
    async fn tokenizes_and_scores_prompts_of_token_ids() {
        let (base, server) = start_fast_demo().await;
        let client = reqwest::Client::new();
        let post = |path: &str, body: Value| {
            let request = client.post(format!("{base}{path}")).json(&body);
            async move {
                let response = request.send().await.expect("request");
                let status = response.status();
                (status, response.json::<Value>().await.expect("json"))
            }
        };

        let info: Value = client
            .get(format!("{base}/tokenizer_info"))
            .send()
            .await
            .expect("tokenizer_info")
            .json()
            .await
            .expect("json");
        let eos = info["eos_token"].as_str().expect("an end-of-text token");
        let (_, eos_ids) = post(
            "/tokenize",
            json!({"prompt": eos, "add_special_tokens": false}),
        )
        .await;
        assert_eq!(eos_ids["tokens"], json!([0]));

        let text = "The river crossed the valley.\nIt rained.";
        let (status, tokenized) =
            post("/tokenize", json!({"model": "sim-ckpt-a", "prompt": text})).await;
        assert_eq!(status, StatusCode::OK);
        let ids: Vec<u64> = tokenized["tokens"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|id| id.as_u64().expect("an id"))
            .collect();
        assert_eq!(tokenized["count"], json!(ids.len()));
        let (_, detokenized) = post("/detokenize", json!({"tokens": ids})).await;
        assert_eq!(detokenized["prompt"], text);

        let mut prompt = vec![0u64];
        prompt.extend(&ids);
        let (status, echoed) = post(
            "/v1/completions",
            json!({"model": "sim-ckpt-a", "prompt": [prompt], "max_tokens": 1, "logprobs": 1, "echo": true, "temperature": 0}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{echoed}");
        let logprobs = &echoed["choices"][0]["logprobs"];
        let tokens: Vec<&str> = logprobs["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|token| token.as_str().expect("text"))
            .collect();
        assert_eq!(tokens[0], eos);
        assert_eq!(
            tokens[1..=ids.len()].concat(),
            text,
            "the echo is the tokens sent"
        );
        assert!(logprobs["token_logprobs"][0].is_null());
        assert!(logprobs["token_logprobs"][1].as_f64().expect("scored") < 0.0);
        assert_eq!(echoed["usage"]["prompt_tokens"], json!(ids.len() + 1));

        let (status, unknown) = post(
            "/v1/completions",
            json!({"model": "sim-ckpt-a", "prompt": [[0, 4_000_000_000u64]], "max_tokens": 1, "echo": true}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4000000000"));
        server.abort();
    }

    #[tokio::test]
    async fn serves_openai_shaped_responses_over_http() {
        let (base, server) = start_fast_demo().await;
        let client = reqwest::Client::new();

        let models = client
            .get(format!("{base}/v1/models"))
            .send()
            .await
            .expect("models");
        assert_eq!(models.headers()["x-arbiter-simulator"], "true");
        let models: Value = models.json().await.expect("models json");
        assert_eq!(models["data"][0]["id"], "sim-ckpt-a");
        assert_eq!(models["data"][0]["owned_by"], "arbiter-sim");

        let chat: Value = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({
                "model": "sim-ckpt-a",
                "messages": [{"role": "user", "content": format!("{TEMPLATE}What is 7 * 8?")}],
                "logprobs": true,
                "top_logprobs": 3,
                "seed": 1,
            }))
            .send()
            .await
            .expect("chat")
            .json()
            .await
            .expect("chat json");
        assert_eq!(chat["object"], "chat.completion");
        assert_eq!(chat["system_fingerprint"], "arbiter-sim");
        let content = chat["choices"][0]["logprobs"]["content"]
            .as_array()
            .expect("logprobs content");
        assert!(!content.is_empty());
        assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(3));
        let completion_tokens = chat["usage"]["completion_tokens"].as_u64();
        assert_eq!(completion_tokens, Some(content.len() as u64));

        // A vision request: text and image parts. The simulator answers from the text, as a
        // model that reads the image would answer the same question.
        let with_image: Value = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({
                "model": "sim-ckpt-a",
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": format!("{TEMPLATE}What is 7 * 8?")},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
                ]}],
                "seed": 1,
            }))
            .send()
            .await
            .expect("chat with an image")
            .json()
            .await
            .expect("chat json");
        assert_eq!(
            with_image["choices"][0]["message"]["content"],
            chat["choices"][0]["message"]["content"]
        );

        let stream = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"model": "sim-ckpt-b", "prompt": "What is 18 * 3?", "stream": true, "logprobs": 2}))
            .send()
            .await
            .expect("stream");
        assert_eq!(stream.status().as_u16(), 200);
        let body = stream.text().await.expect("stream body");
        assert!(body.contains("\"text_completion\""));
        assert!(body.trim_end().ends_with("data: [DONE]"));

        let missing = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"model": "no-such-model", "messages": []}))
            .send()
            .await
            .expect("missing model");
        assert_eq!(missing.status().as_u16(), 404);
        let missing: Value = missing.json().await.expect("error json");
        assert_eq!(missing["error"]["code"], "model_not_found");

        let malformed = client
            .post(format!("{base}/v1/completions"))
            .body("{not json")
            .send()
            .await
            .expect("malformed");
        assert_eq!(malformed.status().as_u16(), 400);

        let metrics = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .expect("metrics");
        let metrics = metrics.text().await.expect("metrics text");
        assert!(metrics.contains("vllm:num_requests_running{model_name=\"sim-judge\"} 0"));
        assert!(metrics.contains("vllm:num_requests_waiting{model_name=\"sim-ckpt-a\"} 0"));

        server.abort();
    }

    #[tokio::test]
    async fn streamed_chat_has_logprobs_on_token_chunks_only() {
        let config = SimConfig {
            latency_ms_min: 0,
            latency_ms_max: 0,
            ..SimConfig::demo()
        };
        let request = json!({
            "model": "sim-ckpt-a",
            "messages": [{"role": "user", "content": format!("{TEMPLATE}What is 7 * 8?")}],
            "logprobs": true,
            "top_logprobs": 2,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let state = Arc::new(SimState::new(config));
        let response = chat_completions(State(state), Bytes::from(request.to_string())).await;
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a streamed body");
        let body = String::from_utf8(body.to_vec()).expect("UTF-8 events");
        let events: Vec<&str> = body
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .collect();
        assert_eq!(events.last(), Some(&"[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|event| serde_json::from_str(event).expect("a JSON chunk"))
            .collect();

        let (usage_chunk, chunks) = chunks.split_last().expect("a usage chunk");
        assert_eq!(usage_chunk["choices"], json!([]));
        let choices: Vec<&Value> = chunks.iter().map(|chunk| &chunk["choices"][0]).collect();
        let (opening, rest) = choices.split_first().expect("an opening chunk");
        let (closing, tokens) = rest.split_last().expect("a closing chunk");
        assert_eq!(
            opening["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(opening["logprobs"], Value::Null);
        assert_eq!(closing["delta"], json!({}));
        assert_eq!(closing["logprobs"], Value::Null);
        assert_eq!(closing["finish_reason"], "stop");
        assert_eq!(
            usage_chunk["usage"]["completion_tokens"].as_u64(),
            Some(tokens.len() as u64)
        );
        for token in tokens {
            let entries = token["logprobs"]["content"].as_array().expect("logprobs");
            assert_eq!(entries.len(), 1);
            assert_eq!(entries[0]["token"], token["delta"]["content"]);
            assert_eq!(entries[0]["top_logprobs"].as_array().map(Vec::len), Some(2));
            assert_eq!(token["finish_reason"], Value::Null);
        }
    }

    /// Chat, completions and their streamed forms, with logprobs, over bundled-dataset prompts:
    /// the request bodies a benchmark run sends.
    fn benchmark_bodies(format: Format, stream: bool) -> Vec<Bytes> {
        sample_items()
            .iter()
            .enumerate()
            .map(|(seed, item)| {
                let prompt = format!("{TEMPLATE}{}", item.input);
                let body = match format {
                    Format::Chat => json!({
                        "model": "sim-ckpt-a",
                        "messages": [{"role": "user", "content": prompt}],
                        "logprobs": true,
                        "top_logprobs": 5,
                        "seed": seed,
                        "stream": stream,
                    }),
                    Format::Completion => json!({
                        "model": "sim-ckpt-a",
                        "prompt": prompt,
                        "logprobs": 5,
                        "seed": seed,
                        "stream": stream,
                    }),
                };
                Bytes::from(body.to_string())
            })
            .collect()
    }

    /// The handler's CPU cost per response, body fully rendered, without the HTTP transport.
    /// Run in release: `cargo test --release -p arbiter-engine --lib sim -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "benchmark; run in release"]
    async fn benchmark_rendering_responses() {
        const RESPONSES: usize = 20_000;
        let config = SimConfig {
            latency_ms_min: 0,
            latency_ms_max: 0,
            ..SimConfig::demo()
        };
        let state = Arc::new(SimState::new(config));
        for (label, format, stream) in [
            ("chat", Format::Chat, false),
            ("chat, streamed", Format::Chat, true),
            ("completions", Format::Completion, false),
            ("completions, streamed", Format::Completion, true),
        ] {
            let bodies = benchmark_bodies(format, stream);
            let mut rendered_bytes = 0;
            // The first pass warms the allocator and the dataset cache and is not timed.
            for timed in [false, true] {
                let started = std::time::Instant::now();
                for index in 0..RESPONSES {
                    let body = bodies[index % bodies.len()].clone();
                    let response = match format {
                        Format::Chat => chat_completions(State(state.clone()), body).await,
                        Format::Completion => completions(State(state.clone()), body).await,
                    };
                    assert_eq!(response.status(), StatusCode::OK);
                    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                        .await
                        .expect("a rendered body");
                    rendered_bytes += bytes.len();
                }
                if timed {
                    let per_response = started.elapsed().as_secs_f64() * 1e6 / RESPONSES as f64;
                    println!(
                        "sim {label} with top_logprobs 5: {per_response:.2} µs per response \
                         ({} bytes each)",
                        rendered_bytes / (2 * RESPONSES)
                    );
                }
            }
        }
    }
}
