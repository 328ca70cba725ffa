//! The OpenAI-compatible model client: one HTTP attempt at a time, and what it means.
//!
//! Owns the HTTP conversation with an endpoint (vLLM, SGLang, TGI, llama.cpp, `arbiter sim`)
//! and turns every way an attempt can end into either a [`Generation`] or an [`AttemptFailure`]
//! with an [`ErrorCategory`]. Retries, backoff, load control and fallback are the dispatcher's;
//! grading is the grader's. An error is a value here, never an answer.

use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::checkpoint::Checkpoint;
use arbiter_domain::manifest::EndpointFingerprint;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// One request for one result identity.
#[derive(Clone, Debug)]
pub struct GenerationRequest {
    pub model: String,
    pub prompt: String,
    pub max_tokens: u32,
    pub temperature: f64,
    pub seed: u64,
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

/// A pooled HTTP client shared by all requests of a worker process.
#[derive(Clone)]
pub struct ModelClient {
    http: reqwest::Client,
}

impl Default for ModelClient {
    fn default() -> ModelClient {
        ModelClient::new()
    }
}

impl ModelClient {
    pub fn new() -> ModelClient {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(1024)
            .tcp_nodelay(true)
            .build()
            .expect("the HTTP client's static configuration is valid");
        ModelClient { http }
    }

    /// The raw client, for the dispatcher's `/metrics` and `/v1/models` probes.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// One chat completion against `base_url` (with `api_key` as a bearer token when the
    /// endpoint needs one), within `timeout`.
    pub async fn attempt(
        &self,
        base_url: &str,
        api_key: Option<&str>,
        request: &GenerationRequest,
        timeout: Duration,
    ) -> Result<Generation, AttemptFailure> {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let body = ChatRequest {
            model: &request.model,
            messages: [ChatMessage {
                role: "user",
                content: &request.prompt,
            }],
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            seed: request.seed,
            logprobs: true,
            top_logprobs: TOP_LOGPROBS,
            stream: false,
        };
        let mut post = self.http.post(&url).timeout(timeout).json(&body);
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
            let detail = response.text().await.unwrap_or_default();
            return Err(AttemptFailure {
                category: ErrorCategory::from_status(status.as_u16()),
                status: Some(status.as_u16()),
                message: format!(
                    "HTTP {} from {url}: {}",
                    status.as_u16(),
                    openai_error_message(&detail)
                ),
                retry_after,
            });
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|err| transport_failure(&url, err))?;
        let mut generation = parse_chat_completion(&bytes).map_err(|message| AttemptFailure {
            category: ErrorCategory::MalformedResponse,
            status: Some(status.as_u16()),
            message: format!("malformed response body from {url}: {message}"),
            retry_after: None,
        })?;
        generation.served_by = Some(base_url.to_string());
        Ok(generation)
    }
}

fn transport_failure(url: &str, err: reqwest::Error) -> AttemptFailure {
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

/// The `error.message` of an OpenAI-style error body, or the body itself, shortened.
fn openai_error_message(body: &str) -> String {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|value| value["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string());
    message.chars().take(300).collect()
}

/// Alternatives asked for at each token: judges and diverging-token views read them.
const TOP_LOGPROBS: u8 = 5;

/// An OpenAI chat completion request, serialized straight from borrowed fields.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [ChatMessage<'a>; 1],
    max_tokens: u32,
    temperature: f64,
    seed: u64,
    logprobs: bool,
    top_logprobs: u8,
    stream: bool,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: &'a str,
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
    logprobs: Option<arbiter_domain::logprobs::ChatLogprobs<'a>>,
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
    let choice = completion
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| "the response has no choices".to_string())?;
    let output = choice.message.content.unwrap_or_default();
    let refusal = choice
        .message
        .refusal
        .is_some_and(|refusal| !refusal.trim().is_empty());
    let finish_reason = choice.finish_reason;
    let outcome = if refusal || finish_reason.as_deref() == Some("content_filter") {
        Outcome::Refused
    } else if finish_reason.as_deref() == Some("length") {
        Outcome::Truncated
    } else if output.trim().is_empty() {
        Outcome::Empty
    } else {
        Outcome::Ok
    };
    Ok(Generation {
        outcome,
        output,
        finish_reason,
        model_used: completion.model,
        prompt_tokens: completion
            .usage
            .as_ref()
            .and_then(|usage| usage.prompt_tokens),
        completion_tokens: completion
            .usage
            .as_ref()
            .and_then(|usage| usage.completion_tokens),
        logprobs: choice
            .logprobs
            .as_ref()
            .and_then(|logprobs| logprobs.encode()),
        ..Generation::default()
    })
}

/// Checks and tidies an endpoint's base URL: http(s) only; a bare host gets `/v1`.
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
    if rest.contains('/') {
        Ok(trimmed.to_string())
    } else {
        Ok(format!("{trimmed}/v1"))
    }
}

/// The server root of an OpenAI base URL (`http://h:8000/v1` → `http://h:8000`), where vLLM
/// serves `/metrics`.
pub fn server_root(base_url: &str) -> &str {
    base_url
        .trim_end_matches('/')
        .strip_suffix("/v1")
        .unwrap_or(base_url)
}

/// How long the launch waits for an endpoint's `/v1/models` answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the endpoint which model it serves under the checkpoint's model name.
pub(crate) async fn probe_fingerprint(checkpoint: &Checkpoint) -> EndpointFingerprint {
    let url = format!("{}/models", checkpoint.base_url.trim_end_matches('/'));
    let probe = async {
        let mut request = reqwest::Client::new().get(&url).timeout(PROBE_TIMEOUT);
        if let Some(key) = crate::secrets::process().resolve(checkpoint.api_key_ref.as_deref())? {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|err| format!("could not reach {url}: {err}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "{url} answered HTTP {}",
                response.status().as_u16()
            ));
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|err| format!("unreadable answer from {url}: {err}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base_urls_are_normalised() {
        assert_eq!(
            normalise_base_url("http://127.0.0.1:8001").unwrap(),
            "http://127.0.0.1:8001/v1"
        );
        assert_eq!(
            normalise_base_url("https://host/openai/v1/").unwrap(),
            "https://host/openai/v1"
        );
        assert!(normalise_base_url("ftp://x").is_err());
        assert!(normalise_base_url("http://").is_err());
        assert_eq!(server_root("http://h:8000/v1"), "http://h:8000");
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

    #[tokio::test]
    async fn an_unreachable_endpoint_is_a_connect_failure() {
        // Bind then drop a listener so the port is (very likely) closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let failure = ModelClient::new()
            .attempt(
                &format!("http://127.0.0.1:{port}/v1"),
                None,
                &GenerationRequest {
                    model: "m".into(),
                    prompt: "hi".into(),
                    max_tokens: 8,
                    temperature: 0.0,
                    seed: 1,
                },
                Duration::from_secs(5),
            )
            .await
            .unwrap_err();
        assert_eq!(failure.category, ErrorCategory::Connect);
        assert!(failure.message.contains("could not connect"));
    }
}
