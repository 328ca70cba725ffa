//! The OpenAI-compatible model client: one HTTP attempt at a time, and what it means.
//!
//! Owns the HTTP conversation with an endpoint (vLLM, SGLang, TGI, llama.cpp, `arbiter sim`)
//! and turns every way an attempt can end into either a [`Generation`] or an [`AttemptFailure`]
//! with an [`ErrorCategory`]. Retries, backoff, load control and fallback are the dispatcher's;
//! grading is the grader's. An error is a value here, never an answer.

use crate::clients::egress::{self, BodyError, EgressPolicy, GuardedClient};
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::checkpoint::Checkpoint;
use arbiter_domain::fields::{ChatMessage, Role};
use arbiter_domain::likelihood::{
    score_continuation, ContinuationScore, EchoedLogprobs, EchoedText,
};
use arbiter_domain::logprobs::{ChatLogprobs, CompletionLogprobs};
use arbiter_domain::manifest::EndpointFingerprint;
use arbiter_domain::manifest::SamplingOptions;
use arbiter_domain::prompt::PromptBody;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One request for one result identity (or one judge sample).
#[derive(Clone, Debug)]
pub struct GenerationRequest {
    pub model: String,
    /// A conversation for `/chat/completions`, or a prompt for `/completions`.
    pub body: PromptBody,
    pub max_tokens: u32,
    pub temperature: f64,
    pub seed: u64,
    /// `top_p`, `stop` and engine parameters (sent as top-level fields; checked when the eval
    /// was saved).
    pub sampling: SamplingOptions,
    /// What is asked of the endpoint: a generation, or a scoring request.
    pub scoring: Scoring,
    /// Alternatives asked for at each generated token; `None` for the usual
    /// [`TOP_LOGPROBS`] (a scale judge needs every point of its scale listed).
    pub top_logprobs: Option<u8>,
}

/// A request that scores instead of generating (nothing is generated but the one token the
/// APIs need), or asks the server's tokenizer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scoring {
    /// An ordinary generation.
    #[default]
    Generate,
    /// Likelihood evals: the prompt is echoed with its token logprobs and its last this-many
    /// characters are scored.
    Continuation(usize),
    /// Rolling likelihood: the prompt's token ids from the server's `/tokenize` (vLLM's route
    /// at the server root), without special tokens.
    Tokenize,
    /// Rolling likelihood: these token ids are the prompt, echoed with their logprobs, and
    /// the last `scored` of them are scored.
    Window { tokens: Vec<u32>, scored: usize },
}

impl GenerationRequest {
    /// One user message with the original three settings (judges ask this way).
    pub fn user_message(
        model: &str,
        prompt: String,
        max_tokens: u32,
        temperature: f64,
        seed: u64,
    ) -> GenerationRequest {
        GenerationRequest {
            model: model.to_string(),
            body: PromptBody::Chat(vec![ChatMessage {
                role: Role::User,
                content: prompt,
                images: Vec::new(),
            }]),
            max_tokens,
            temperature,
            seed,
            sampling: SamplingOptions::default(),
            scoring: Scoring::Generate,
            top_logprobs: None,
        }
    }

    /// A likelihood request: `text` (context and continuation) echoed with its logprobs, its
    /// last `continuation_chars` characters scored.
    pub fn scoring(model: &str, text: String, continuation_chars: usize) -> GenerationRequest {
        GenerationRequest {
            model: model.to_string(),
            body: PromptBody::Completion(text),
            // The APIs generate at least one token; it is dropped from the score.
            max_tokens: 1,
            temperature: 0.0,
            seed: 0,
            sampling: SamplingOptions::default(),
            scoring: Scoring::Continuation(continuation_chars),
            top_logprobs: None,
        }
    }

    /// A rolling request: the server's token ids for `text`.
    pub fn tokenize(model: &str, text: String) -> GenerationRequest {
        GenerationRequest {
            scoring: Scoring::Tokenize,
            ..GenerationRequest::scoring(model, text, 0)
        }
    }

    /// A rolling window: `tokens` echoed with their logprobs, the last `scored` scored.
    pub fn window(model: &str, tokens: Vec<u32>, scored: usize) -> GenerationRequest {
        GenerationRequest {
            scoring: Scoring::Window { tokens, scored },
            ..GenerationRequest::scoring(model, String::new(), 0)
        }
    }
}

/// A failed attempt: what went wrong and whether the endpoint asked us to wait.
#[derive(Clone, Debug)]
pub struct AttemptFailure {
    pub category: ErrorCategory,
    pub status: Option<u16>,
    pub message: String,
    pub retry_after: Option<Duration>,
}

/// Longest Retry-After we honour; a longer request is treated as this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A pooled HTTP client shared by all requests of a worker process, under the egress policy.
#[derive(Clone)]
pub struct ModelClient {
    http: GuardedClient,
}

impl Default for ModelClient {
    fn default() -> ModelClient {
        ModelClient::new()
    }
}

/// The most Arbiter reads of one completion: far above any answer with five alternatives per
/// token at the largest `max_tokens`, far below what would hurt a worker.
pub const COMPLETION_BODY_LIMIT: usize = 32 << 20;

impl ModelClient {
    /// A client under this process's egress policy.
    pub fn new() -> ModelClient {
        ModelClient::with_policy(egress::process())
    }

    pub fn with_policy(policy: Arc<EgressPolicy>) -> ModelClient {
        let http = GuardedClient::new(policy, |builder| {
            builder
                .connect_timeout(Duration::from_secs(5))
                .pool_max_idle_per_host(1024)
                .tcp_nodelay(true)
        });
        ModelClient { http }
    }

    /// The guarded client, for the dispatcher's `/metrics` probe.
    pub fn http(&self) -> &GuardedClient {
        &self.http
    }

    /// One chat completion against `base_url` (with `api_key` as a bearer token when the
    /// endpoint needs one), within `timeout`. Error messages name the status and category,
    /// never the endpoint's body: an endpoint's words are not Arbiter's to repeat.
    pub async fn attempt(
        &self,
        base_url: &str,
        api_key: Option<&str>,
        request: &GenerationRequest,
        timeout: Duration,
    ) -> Result<Generation, AttemptFailure> {
        let url = match (&request.scoring, &request.body) {
            (Scoring::Tokenize, _) => format!("{}/tokenize", server_root(base_url)),
            (_, PromptBody::Chat(_)) => {
                format!("{}/chat/completions", base_url.trim_end_matches('/'))
            }
            (_, PromptBody::Completion(_)) => {
                format!("{}/completions", base_url.trim_end_matches('/'))
            }
        };
        let post = self
            .http
            .post(&url)
            .map_err(|refusal| egress_failure(refusal.0))?
            .timeout(timeout);
        let mut post = match (&request.scoring, &request.body) {
            (Scoring::Tokenize, _) => post.json(&request_json(request)),
            _ => post.json(&RequestBody::of(request)),
        };
        if let Some(key) = api_key {
            post = post.bearer_auth(key);
        }
        let response = post
            .send()
            .await
            .map_err(|err| transport_failure(&url, err))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok())
                .map(|seconds| Duration::from_secs(seconds).min(MAX_RETRY_AFTER));
            let category = ErrorCategory::from_status(status.as_u16());
            return Err(AttemptFailure {
                category,
                status: Some(status.as_u16()),
                message: format!(
                    "HTTP {} from {url} ({})",
                    status.as_u16(),
                    category.as_str()
                ),
                retry_after,
            });
        }
        let bytes = egress::read_capped(response, COMPLETION_BODY_LIMIT)
            .await
            .map_err(|err| match err {
                BodyError::TooLarge { limit } => AttemptFailure {
                    category: ErrorCategory::ResponseTooLarge,
                    status: Some(status.as_u16()),
                    message: format!("the answer from {url} is larger than {limit} bytes"),
                    retry_after: None,
                },
                BodyError::Read(err) => transport_failure(&url, err),
            })?;
        let parsed = match (&request.body, &request.scoring) {
            (_, Scoring::Tokenize) => parse_tokenized(&bytes),
            (_, Scoring::Window { tokens, scored }) => {
                parse_scored_window(&bytes, tokens.len(), *scored)
            }
            (PromptBody::Chat(_), _) => parse_chat_completion(&bytes),
            (PromptBody::Completion(prompt), Scoring::Continuation(continuation_chars)) => {
                parse_scored_completion(&bytes, prompt, *continuation_chars)
            }
            (PromptBody::Completion(_), Scoring::Generate) => parse_completion(&bytes),
        };
        let mut generation = parsed.map_err(|message| AttemptFailure {
            category: ErrorCategory::MalformedResponse,
            status: Some(status.as_u16()),
            message: format!("malformed response body from {url}: {message}"),
            retry_after: None,
        })?;
        generation.served_by = Some(base_url.to_string());
        Ok(generation)
    }
}

fn egress_failure(refusal: String) -> AttemptFailure {
    AttemptFailure {
        category: ErrorCategory::EgressRefused,
        status: None,
        message: format!("not sent: {refusal}"),
        retry_after: None,
    }
}

fn transport_failure(url: &str, err: reqwest::Error) -> AttemptFailure {
    if let Some(refusal) = egress::refusal_in(&err) {
        return egress_failure(refusal);
    }
    if err.is_timeout() {
        return AttemptFailure {
            category: ErrorCategory::Timeout,
            status: None,
            message: format!("no response from {url} within the attempt timeout"),
            retry_after: None,
        };
    }
    let (category, reason) = if err.is_connect() {
        (ErrorCategory::Connect, "could not connect")
    } else if err.is_decode() || err.is_body() {
        (ErrorCategory::MalformedResponse, "unreadable response")
    } else {
        (ErrorCategory::Connect, "request failed")
    };
    // The innermost cause says what happened (e.g. "Connection refused").
    let mut cause: &dyn std::error::Error = &err;
    while let Some(source) = cause.source() {
        cause = source;
    }
    AttemptFailure {
        category,
        status: None,
        message: format!("{reason} to {url}: {cause}"),
        retry_after: None,
    }
}

/// Alternatives asked for at each token: judges and diverging-token views read them.
const TOP_LOGPROBS: u8 = 5;

/// An OpenAI chat completion or completion request, serialized straight from borrowed fields.
#[derive(Serialize)]
struct RequestBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<&'a [ChatMessage]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<Prompt<'a>>,
    max_tokens: u32,
    temperature: f64,
    seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    /// `true` for chat (with `top_logprobs`), a count for completions.
    logprobs: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<u8>,
    stream: bool,
    /// Scoring requests: the prompt comes back with its token logprobs.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    echo: bool,
    #[serde(flatten)]
    extra: &'a BTreeMap<String, serde_json::Value>,
}

/// A completion's prompt: text, or token ids (OpenAI's single token-list prompt).
#[derive(Clone, Copy, Serialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Text(&'a str),
    Tokens(&'a [u32]),
}

/// vLLM's `/tokenize` request.
#[derive(Serialize)]
struct TokenizeBody<'a> {
    model: &'a str,
    prompt: &'a str,
    add_special_tokens: bool,
}

impl<'a> RequestBody<'a> {
    fn of(request: &'a GenerationRequest) -> RequestBody<'a> {
        let (messages, prompt) = match (&request.body, &request.scoring) {
            (_, Scoring::Window { tokens, .. }) => (None, Some(Prompt::Tokens(tokens))),
            (PromptBody::Chat(messages), _) => (Some(&messages[..]), None),
            (PromptBody::Completion(prompt), _) => (None, Some(Prompt::Text(prompt))),
        };
        let scoring = !matches!(request.scoring, Scoring::Generate);
        let alternatives = request.top_logprobs.unwrap_or(TOP_LOGPROBS);
        RequestBody {
            model: &request.model,
            messages,
            prompt,
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            seed: request.seed,
            top_p: request.sampling.top_p,
            stop: &request.sampling.stop,
            logprobs: match (&prompt, scoring) {
                (None, _) => serde_json::Value::Bool(true),
                // The token's own logprob and the best alternative's, for greediness.
                (Some(_), true) => serde_json::Value::from(1),
                (Some(_), false) => serde_json::Value::from(alternatives),
            },
            top_logprobs: prompt.is_none().then_some(alternatives),
            stream: false,
            echo: scoring,
            extra: &request.sampling.extra,
        }
    }
}

/// The request body a generation request is sent as (the eval preview shows it).
pub fn request_json(request: &GenerationRequest) -> serde_json::Value {
    let json = match (&request.scoring, &request.body) {
        (Scoring::Tokenize, PromptBody::Completion(text)) => serde_json::to_value(TokenizeBody {
            model: &request.model,
            prompt: text,
            add_special_tokens: false,
        }),
        _ => serde_json::to_value(RequestBody::of(request)),
    };
    json.expect("requests always serialize")
}

/// The parts of an OpenAI chat completion Arbiter reads, borrowed from the body where possible.
#[derive(Deserialize)]
struct ChatCompletion<'a> {
    model: Option<String>,
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    message: Message,
    finish_reason: Option<String>,
    #[serde(default, borrow)]
    logprobs: Option<ChatLogprobs<'a>>,
}

#[derive(Deserialize, Default)]
struct Message {
    content: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
}

fn parse_chat_completion(body: &[u8]) -> Result<Generation, String> {
    let completion: ChatCompletion<'_> =
        serde_json::from_slice(body).map_err(|err| err.to_string())?;
    let choice = first_choice(completion.choices)?;
    let output = choice.message.content.unwrap_or_default();
    let refusal = choice
        .message
        .refusal
        .is_some_and(|refusal| !refusal.trim().is_empty());
    let logprobs = choice
        .logprobs
        .as_ref()
        .and_then(|logprobs| logprobs.encode());
    Ok(answered(
        outcome_of(refusal, choice.finish_reason.as_deref(), &output),
        output,
        choice.finish_reason,
        completion.model,
        completion.usage,
        logprobs,
    ))
}

/// The response's first choice (Arbiter asks for one).
fn first_choice<T>(choices: Vec<T>) -> Result<T, String> {
    choices
        .into_iter()
        .next()
        .ok_or_else(|| "the response has no choices".to_string())
}

/// A parsed answer of either API as a [`Generation`].
fn answered(
    outcome: Outcome,
    output: String,
    finish_reason: Option<String>,
    model_used: Option<String>,
    usage: Option<Usage>,
    logprobs: Option<Vec<u8>>,
) -> Generation {
    Generation {
        outcome,
        output,
        finish_reason,
        model_used,
        prompt_tokens: usage.as_ref().and_then(|usage| usage.prompt_tokens),
        completion_tokens: usage.as_ref().and_then(|usage| usage.completion_tokens),
        logprobs,
        ..Generation::default()
    }
}

/// The parts of an OpenAI (legacy) completion Arbiter reads.
#[derive(Deserialize)]
struct Completion<'a> {
    model: Option<String>,
    #[serde(default, borrow)]
    choices: Vec<CompletionChoice<'a>>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct CompletionChoice<'a> {
    #[serde(default)]
    text: String,
    finish_reason: Option<String>,
    #[serde(default, borrow)]
    logprobs: Option<CompletionLogprobs<'a>>,
}

fn parse_completion(body: &[u8]) -> Result<Generation, String> {
    let completion: Completion<'_> = serde_json::from_slice(body).map_err(|err| err.to_string())?;
    let choice = first_choice(completion.choices)?;
    let logprobs = choice
        .logprobs
        .as_ref()
        .and_then(CompletionLogprobs::encode);
    Ok(answered(
        outcome_of(false, choice.finish_reason.as_deref(), &choice.text),
        choice.text,
        choice.finish_reason,
        completion.model,
        completion.usage,
        logprobs,
    ))
}

/// A completion asked for with `echo`: what it says about the scored continuation.
#[derive(Deserialize)]
struct EchoedCompletion {
    model: Option<String>,
    #[serde(default)]
    choices: Vec<EchoedChoice>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct EchoedChoice {
    #[serde(default)]
    text: String,
    logprobs: Option<EchoedLogprobs>,
}

fn parse_scored_completion(
    body: &[u8],
    prompt: &str,
    continuation_chars: usize,
) -> Result<Generation, String> {
    parse_echoed(body, |echo, text, generated_tokens| {
        let echoed = EchoedText {
            text,
            prompt,
            generated_tokens,
        };
        score_continuation(echo, echoed, continuation_chars)
    })
}

/// An echoed completion's score, as `score` reads it from the echo, the returned text and the
/// tokens generated after the prompt (from the usage, when it says).
fn parse_echoed(
    body: &[u8],
    score: impl FnOnce(&EchoedLogprobs, &str, Option<usize>) -> Result<ContinuationScore, String>,
) -> Result<Generation, String> {
    let completion: EchoedCompletion =
        serde_json::from_slice(body).map_err(|err| err.to_string())?;
    let choice = first_choice(completion.choices)?;
    let echo = choice.logprobs.ok_or_else(|| {
        "the response has no logprobs: the endpoint does not return prompt logprobs".to_string()
    })?;
    let generated = completion
        .usage
        .as_ref()
        .and_then(|usage| usage.completion_tokens)
        .and_then(|tokens| usize::try_from(tokens).ok());
    let score = score(&echo, &choice.text, generated)?;
    Ok(Generation {
        continuation: Some(score),
        ..answered(
            Outcome::Ok,
            String::new(),
            Some("scored".into()),
            completion.model,
            completion.usage,
            None,
        )
    })
}

/// vLLM's `/tokenize` answer: the token ids.
#[derive(Deserialize)]
struct Tokenized {
    tokens: Vec<u32>,
}

fn parse_tokenized(body: &[u8]) -> Result<Generation, String> {
    let tokenized: Tokenized = serde_json::from_slice(body)
        .map_err(|err| format!("not a /tokenize answer with token ids: {err}"))?;
    Ok(Generation {
        outcome: Outcome::Ok,
        finish_reason: Some("tokenized".into()),
        prompt_tokens: Some(tokenized.tokens.len() as i64),
        token_ids: Some(tokenized.tokens),
        ..Generation::default()
    })
}

/// A rolling window's echo: the score of its last `scored` of `sent` token ids.
fn parse_scored_window(body: &[u8], sent: usize, scored: usize) -> Result<Generation, String> {
    parse_echoed(body, |echo, _, generated| {
        arbiter_domain::rolling::score_window(echo, sent, scored, generated)
    })
}

/// What an answer's finish reason and text say about it.
fn outcome_of(refusal: bool, finish_reason: Option<&str>, output: &str) -> Outcome {
    if refusal || finish_reason == Some("content_filter") {
        Outcome::Refused
    } else if finish_reason == Some("length") {
        Outcome::Truncated
    } else if output.trim().is_empty() {
        Outcome::Empty
    } else {
        Outcome::Ok
    }
}

/// Checks and tidies an endpoint's base URL: http(s) with a host, no credentials, query or
/// fragment (Arbiter appends the paths), and reachable under this process's egress policy (a
/// name is checked again when it resolves); a bare host gets `/v1`.
pub fn normalise_base_url(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(|| "the endpoint URL must start with http:// or https://".to_string())?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err("the endpoint URL has no host".into());
    }
    let normalised = if rest.contains('/') {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1")
    };
    egress::process()
        .check_url(&normalised)
        .map_err(|refusal| refusal.0)?;
    Ok(normalised)
}

/// The server root of an OpenAI base URL (`http://h:8000/v1` → `http://h:8000`), where vLLM
/// serves `/metrics`.
pub fn server_root(base_url: &str) -> &str {
    let trimmed = base_url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed)
}

/// How long the launch waits for an endpoint's `/v1/models` answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most Arbiter reads of a `/v1/models` list.
const PROBE_BODY_LIMIT: usize = 1 << 20;

/// Asks the endpoint which model it serves under the checkpoint's model name, under this
/// process's egress policy.
pub(crate) async fn probe_fingerprint(checkpoint: &Checkpoint) -> EndpointFingerprint {
    probe_fingerprint_with(&GuardedClient::for_process(|builder| builder), checkpoint).await
}

/// [`probe_fingerprint`] with a given client. Its errors name the status or category, never
/// the endpoint's words.
pub async fn probe_fingerprint_with(
    http: &GuardedClient,
    checkpoint: &Checkpoint,
) -> EndpointFingerprint {
    let url = format!("{}/models", checkpoint.base_url.trim_end_matches('/'));
    let probe = async {
        let key = crate::secrets::process()
            .resolve_endpoint_key(checkpoint.api_key_ref.as_deref(), &url)?;
        let body = probe_get_json(http, &url, key.as_deref()).await?;
        let models = body["data"].as_array().cloned().unwrap_or_default();
        let served = models
            .iter()
            .find(|model| model["id"].as_str() == Some(checkpoint.model.as_str()))
            .ok_or_else(|| format!("{url} does not list the model `{}`", checkpoint.model))?;
        // vLLM reports the weights it loaded as `root`; other servers only the id.
        Ok(served["root"]
            .as_str()
            .or(served["id"].as_str())
            .unwrap_or_default()
            .to_string())
    };
    let (served_model, probe_error) = match probe.await {
        Ok(served) => (Some(served), None),
        Err(error) => (None, Some(error)),
    };
    EndpointFingerprint {
        served_model,
        engine_build: checkpoint.engine_build.clone(),
        parallel_layout: checkpoint.parallel_layout.clone(),
        probe_error,
    }
}

/// The text the prompt-logprob probe scores, and its scored end.
const PROBE_TEXT: &str = "The capital of France is Paris";
const PROBE_CONTINUATION: &str = " Paris";

/// Checks that an endpoint returns prompt logprobs (`echo` with `logprobs` on `/completions`),
/// which likelihood scoring reads: without them, a server scores every choice alike and the
/// eval reports chance. The error names the endpoint and what it lacked.
pub async fn probe_prompt_logprobs(checkpoint: &Checkpoint, base_url: &str) -> Result<(), String> {
    let client = ModelClient::new();
    let url = format!("{}/completions", base_url.trim_end_matches('/'));
    let key =
        crate::secrets::process().resolve_endpoint_key(checkpoint.api_key_ref.as_deref(), &url)?;
    let request = GenerationRequest::scoring(
        &checkpoint.model,
        PROBE_TEXT.into(),
        PROBE_CONTINUATION.chars().count(),
    );
    match client
        .attempt(base_url, key.as_deref(), &request, PROBE_TIMEOUT * 6)
        .await
    {
        Ok(generation) if generation.continuation.is_some() => Ok(()),
        Ok(_) => Err(format!(
            "{url} returned no score for the probe's continuation"
        )),
        Err(failure) => Err(failure.message),
    }
}

/// Checks that an endpoint can score rolling likelihood (its `/tokenize`, and prompt logprobs
/// on a prompt of token ids, echoed one for one) and returns the prefix token the run scores
/// each document's first token after: `spec`'s own, else lm-eval's choice from the server's
/// `/tokenizer_info`. Refuses a server whose context is shorter than the windows. The error
/// names what the endpoint lacked.
pub async fn probe_rolling(
    checkpoint: &Checkpoint,
    base_url: &str,
    spec: &arbiter_domain::rolling::RollingSpec,
) -> Result<u32, String> {
    let http = GuardedClient::for_process(|builder| builder);
    let root = server_root(base_url);
    let key = crate::secrets::process().resolve_endpoint_key(
        checkpoint.api_key_ref.as_deref(),
        &format!("{root}/tokenize"),
    )?;
    let key = key.as_deref();
    let (ids, max_model_len) =
        probe_tokenize(&http, root, key, &checkpoint.model, PROBE_TEXT).await?;
    if ids.is_empty() {
        return Err(format!(
            "{root}/tokenize returned no token ids for a sentence"
        ));
    }
    if let Some(context) = max_model_len.filter(|context| *context < u64::from(spec.max_length)) {
        return Err(format!(
            "its context is {context} tokens, shorter than the eval's max_length of {}",
            spec.max_length
        ));
    }
    let prefix = match spec.prefix_token {
        Some(prefix) => prefix,
        None => {
            let info = probe_get_json(&http, &format!("{root}/tokenizer_info"), key).await?;
            let special = |name: &str| -> Option<String> {
                let value = &info[name];
                value
                    .as_str()
                    .or_else(|| value["content"].as_str())
                    .map(str::to_string)
            };
            let mut tokenised = Vec::new();
            for name in ["bos_token", "eos_token"] {
                tokenised.push(match special(name) {
                    Some(text) => {
                        let ids = probe_tokenize(&http, root, key, &checkpoint.model, &text)
                            .await?
                            .0;
                        Some((text, ids))
                    }
                    None => None,
                });
            }
            fn borrowed(entry: &Option<(String, Vec<u32>)>) -> Option<(&str, &[u32])> {
                entry.as_ref().map(|(text, ids)| (text.as_str(), &ids[..]))
            }
            arbiter_domain::rolling::lm_eval_prefix(
                borrowed(&tokenised[0]),
                borrowed(&tokenised[1]),
            )?
        }
    };
    let mut tokens = vec![prefix];
    tokens.extend_from_slice(&ids);
    let request = GenerationRequest::window(&checkpoint.model, tokens, ids.len());
    match ModelClient::new()
        .attempt(base_url, key, &request, PROBE_TIMEOUT * 6)
        .await
    {
        Ok(generation) if generation.continuation.is_some() => Ok(prefix),
        Ok(_) => Err(format!(
            "{base_url}/completions returned no score for the probe's tokens"
        )),
        Err(failure) => Err(failure.message),
    }
}

/// `/tokenize` of a probe text: its ids and the server's context length when it says.
async fn probe_tokenize(
    http: &GuardedClient,
    root: &str,
    key: Option<&str>,
    model: &str,
    text: &str,
) -> Result<(Vec<u32>, Option<u64>), String> {
    let url = format!("{root}/tokenize");
    let mut request = http
        .post(&url)
        .map_err(|refusal| format!("not sent: {refusal}"))?
        .timeout(PROBE_TIMEOUT)
        .json(&TokenizeBody {
            model,
            prompt: text,
            add_special_tokens: false,
        });
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let body = probe_body(request, &url).await?;
    let ids = body["tokens"]
        .as_array()
        .and_then(|ids| {
            ids.iter()
                .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
                .collect::<Option<Vec<u32>>>()
        })
        .ok_or_else(|| format!("{url} did not answer with token ids"))?;
    Ok((ids, body["max_model_len"].as_u64()))
}

async fn probe_get_json(
    http: &GuardedClient,
    url: &str,
    key: Option<&str>,
) -> Result<serde_json::Value, String> {
    let mut request = http
        .get(url)
        .map_err(|refusal| format!("not sent: {refusal}"))?
        .timeout(PROBE_TIMEOUT);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    probe_body(request, url).await
}

/// A probe's JSON answer, or why there is none (never the endpoint's own words).
async fn probe_body(
    request: reqwest::RequestBuilder,
    url: &str,
) -> Result<serde_json::Value, String> {
    let response = request
        .send()
        .await
        .map_err(|err| match egress::refusal_in(&err) {
            Some(refusal) => format!("not sent: {refusal}"),
            None if err.is_timeout() => format!("{url} did not answer within {PROBE_TIMEOUT:?}"),
            None => format!("could not reach {url}"),
        })?;
    if !response.status().is_success() {
        return Err(format!(
            "{url} answered HTTP {}",
            response.status().as_u16()
        ));
    }
    let body = egress::read_capped(response, PROBE_BODY_LIMIT)
        .await
        .map_err(|err| format!("{url}: {err}"))?;
    serde_json::from_slice(&body).map_err(|_| format!("{url} did not answer with JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn base_urls_are_normalised() {
        assert_eq!(
            normalise_base_url("http://models.example.com:8001").unwrap(),
            "http://models.example.com:8001/v1"
        );
        assert_eq!(
            normalise_base_url("https://host/openai/v1/").unwrap(),
            "https://host/openai/v1"
        );
        assert!(normalise_base_url("ftp://x").is_err());
        assert!(normalise_base_url("http://").is_err());
        // A query or fragment would choose the path Arbiter appends to; internal addresses
        // are refused under the default policy.
        for refused in [
            "http://api.example.com/api/v1/nothing#",
            "http://api.example.com/v1?x=1",
            "http://169.254.169.254/latest",
            "http://10.0.0.1:8000/v1",
        ] {
            assert!(normalise_base_url(refused).is_err(), "{refused}");
        }
        assert_eq!(server_root("http://h:8000/v1"), "http://h:8000");
        assert_eq!(server_root("http://h:8000/v1/"), "http://h:8000");
        // A base URL without `/v1` is its own root, without a trailing slash to double.
        assert_eq!(server_root("http://h/api/"), "http://h/api");
    }

    #[test]
    fn finish_reasons_and_refusals_are_outcomes() {
        let parse = |body: Value| {
            parse_chat_completion(&serde_json::to_vec(&body).unwrap())
                .unwrap()
                .outcome
        };
        assert_eq!(
            parse(json!({"choices": [{"message": {"content": "abc"}, "finish_reason": "length"}]})),
            Outcome::Truncated
        );
        assert_eq!(
            parse(json!({"choices": [{"message": {"content": "  "}, "finish_reason": "stop"}]})),
            Outcome::Empty
        );
        assert_eq!(
            parse(
                json!({"choices": [{"message": {"content": null, "refusal": "I can't"}, "finish_reason": "stop"}]})
            ),
            Outcome::Refused
        );
        assert_eq!(
            parse(
                json!({"choices": [{"message": {"content": "x"}, "finish_reason": "content_filter"}]})
            ),
            Outcome::Refused
        );
        let body = json!({"model": "m-1", "choices": [{"message": {"content": "x"}, "finish_reason": "stop", "logprobs": {"content": [{"token": "x", "logprob": -0.5, "top_logprobs": []}]}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}});
        let generation = parse_chat_completion(&serde_json::to_vec(&body).unwrap()).unwrap();
        let tokens = arbiter_domain::logprobs::decode(&generation.logprobs.unwrap()).unwrap();
        assert_eq!((tokens[0].text().as_ref(), tokens[0].logprob), ("x", -0.5));
        assert_eq!(generation.model_used.as_deref(), Some("m-1"));
        assert_eq!(
            (generation.prompt_tokens, generation.completion_tokens),
            (Some(3), Some(1))
        );
        assert!(parse_chat_completion(br#"{"choices": []}"#).is_err());
        assert!(parse_chat_completion(br#"{"choices": [{"#).is_err());
    }

    #[test]
    fn only_transient_categories_are_retried() {
        assert!(ErrorCategory::from_status(429).is_transient());
        assert!(ErrorCategory::from_status(503).is_transient());
        assert!(!ErrorCategory::from_status(401).is_transient());
        assert!(!ErrorCategory::from_status(404).is_transient());
        assert!(!ErrorCategory::from_status(400).is_transient());
    }

    fn request() -> GenerationRequest {
        GenerationRequest::user_message("m", "hi".into(), 8, 0.0, 1)
    }

    /// A client allowed to reach one loopback port.
    fn client_for(port: u16) -> ModelClient {
        ModelClient::with_policy(Arc::new(
            EgressPolicy::parse(&format!("127.0.0.1:{port}")).unwrap(),
        ))
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_a_connect_failure() {
        // Bind then drop a listener so the port is (very likely) closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let failure = client_for(port)
            .attempt(
                &format!("http://127.0.0.1:{port}/v1"),
                None,
                &request(),
                Duration::from_secs(5),
            )
            .await
            .unwrap_err();
        assert_eq!(failure.category, ErrorCategory::Connect);
        assert!(failure.message.contains("could not connect"));
    }

    #[tokio::test]
    async fn internal_addresses_are_never_sent_to_by_default() {
        let failure = ModelClient::with_policy(Arc::new(EgressPolicy::public_only()))
            .attempt(
                "http://127.0.0.1:3000/api/v1/nothing",
                Some("sk-operator"),
                &request(),
                Duration::from_secs(5),
            )
            .await
            .unwrap_err();
        assert_eq!(failure.category, ErrorCategory::EgressRefused);
        assert!(!failure.category.is_transient());
        assert!(
            failure.message.contains("not a public address"),
            "{}",
            failure.message
        );
    }

    /// The failure of one attempt against a server that answers `answer` once.
    async fn failure_from(answer: String) -> AttemptFailure {
        let port = crate::clients::test_server::answer_once(answer).await;
        client_for(port)
            .attempt(
                &format!("http://127.0.0.1:{port}/v1"),
                None,
                &request(),
                Duration::from_secs(5),
            )
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn error_bodies_are_never_repeated_and_large_answers_are_refused() {
        let body = "internal: the database password is hunter2";
        let failure = failure_from(format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ))
        .await;
        assert_eq!(failure.category, ErrorCategory::ModelNotFound);
        assert!(!failure.message.contains("hunter2"), "{}", failure.message);
        assert!(failure.message.contains("HTTP 404"), "{}", failure.message);

        let huge = COMPLETION_BODY_LIMIT + 1;
        let failure = failure_from(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {huge}\r\n\r\n{{"
        ))
        .await;
        assert_eq!(failure.category, ErrorCategory::ResponseTooLarge);
    }
}
