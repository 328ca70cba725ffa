//! The OpenAI-compatible model client: one chat completion per result identity, with retries.
//!
//! Owns the HTTP conversation with an endpoint (vLLM, SGLang, TGI, llama.cpp, `arbiter sim`) and
//! turns every way it can end into an [`Outcome`]. It never grades: an error is a value here,
//! not an answer.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How a generation ended. Only `Ok` and `Truncated` carry an answer worth grading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// `finish_reason = length`: kept apart from wrong answers.
    Truncated,
    Empty,
    EndpointError,
    Timeout,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Truncated => "truncated",
            Outcome::Empty => "empty",
            Outcome::EndpointError => "endpoint_error",
            Outcome::Timeout => "timeout",
        }
    }

    pub fn is_error(self) -> bool {
        matches!(self, Outcome::EndpointError | Outcome::Timeout)
    }
}

/// One request for one result identity.
#[derive(Clone, Debug)]
pub struct GenerationRequest {
    pub base_url: String,
    pub model: String,
    pub prompt: String,
    pub max_tokens: u32,
    pub temperature: f64,
    pub seed: u64,
}

/// Everything learned from an endpoint about one result identity, over all attempts.
#[derive(Clone, Debug)]
pub struct Generation {
    pub outcome: Outcome,
    pub output: String,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub latency_ms: i64,
    pub attempts: i64,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub logprobs_json: Option<String>,
}

/// Attempts per identity before it is recorded as an endpoint error.
const MAX_ATTEMPTS: u32 = 3;
const BASE_BACKOFF: Duration = Duration::from_millis(250);
/// Longest Retry-After we honour; a longer request is treated as this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A pooled HTTP client shared by all requests of a worker process.
#[derive(Clone)]
pub struct ModelClient {
    http: reqwest::Client,
    attempt_timeout: Duration,
}

/// The result of one HTTP attempt, before retry policy is applied.
enum Attempt {
    Done(Box<Generation>),
    /// Worth another try (connection failure, 429, 5xx, timeout); `wait` overrides backoff.
    Transient {
        error: String,
        outcome: Outcome,
        wait: Option<Duration>,
    },
    /// Retrying cannot help (bad request, auth, unknown model, unreadable body).
    Permanent(String),
}

impl ModelClient {
    pub fn new(attempt_timeout: Duration) -> ModelClient {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(512)
            .build()
            .expect("the HTTP client's static configuration is valid");
        ModelClient {
            http,
            attempt_timeout,
        }
    }

    /// Runs one generation to its final outcome, retrying transient failures with exponential
    /// backoff and jitter, honouring `Retry-After`.
    pub async fn generate(&self, request: &GenerationRequest) -> Generation {
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let failure = match self.attempt(request).await {
                Attempt::Done(mut generation) => {
                    generation.attempts = i64::from(attempts);
                    generation.latency_ms = elapsed_ms(started);
                    return *generation;
                }
                Attempt::Permanent(error) => (error, Outcome::EndpointError, None, false),
                Attempt::Transient {
                    error,
                    outcome,
                    wait,
                } => (error, outcome, wait, true),
            };
            let (error, outcome, wait, retryable) = failure;
            if !retryable || attempts >= MAX_ATTEMPTS {
                return Generation {
                    outcome,
                    output: String::new(),
                    finish_reason: None,
                    error: Some(error),
                    latency_ms: elapsed_ms(started),
                    attempts: i64::from(attempts),
                    prompt_tokens: None,
                    completion_tokens: None,
                    logprobs_json: None,
                };
            }
            let backoff = BASE_BACKOFF * 2u32.pow(attempts - 1);
            let jitter = Duration::from_millis(rand::random::<u64>() % 100);
            tokio::time::sleep(wait.unwrap_or(backoff + jitter)).await;
        }
    }

    async fn attempt(&self, request: &GenerationRequest) -> Attempt {
        let url = format!(
            "{}/chat/completions",
            request.base_url.trim_end_matches('/')
        );
        let body = json!({
            "model": request.model,
            "messages": [{"role": "user", "content": request.prompt}],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
            "logprobs": true,
            "top_logprobs": 5,
            "stream": false,
        });
        let response = match self
            .http
            .post(&url)
            .timeout(self.attempt_timeout)
            .json(&body)
            .send()
            .await
        {
            Ok(response) => response,
            Err(err) => return transport_failure(&url, err),
        };
        let status = response.status();
        if status.is_success() {
            return match response.json::<Value>().await {
                Ok(body) => parse_chat_completion(&body),
                Err(err) if err.is_timeout() => Attempt::Transient {
                    error: format!("timed out reading the response from {url}"),
                    outcome: Outcome::Timeout,
                    wait: None,
                },
                Err(err) => Attempt::Transient {
                    error: format!("malformed response body from {url}: {err}"),
                    outcome: Outcome::EndpointError,
                    wait: None,
                },
            };
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(|seconds| Duration::from_secs(seconds).min(MAX_RETRY_AFTER));
        let detail = response.text().await.unwrap_or_default();
        let error = format!(
            "HTTP {} from {url}: {}",
            status.as_u16(),
            openai_error_message(&detail)
        );
        if status.as_u16() == 429 || status.is_server_error() {
            Attempt::Transient {
                error,
                outcome: Outcome::EndpointError,
                wait: retry_after,
            }
        } else {
            Attempt::Permanent(error)
        }
    }
}

fn elapsed_ms(started: Instant) -> i64 {
    i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX)
}

fn transport_failure(url: &str, err: reqwest::Error) -> Attempt {
    if err.is_timeout() {
        return Attempt::Transient {
            error: format!("no response from {url} within the attempt timeout"),
            outcome: Outcome::Timeout,
            wait: None,
        };
    }
    let reason = if err.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    // The innermost cause says what happened (e.g. "Connection refused").
    let mut cause: &dyn std::error::Error = &err;
    while let Some(source) = cause.source() {
        cause = source;
    }
    Attempt::Transient {
        error: format!("{reason} to {url}: {cause}"),
        outcome: Outcome::EndpointError,
        wait: None,
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

fn parse_chat_completion(body: &Value) -> Attempt {
    let Some(choice) = body["choices"].get(0) else {
        return Attempt::Transient {
            error: "the response has no choices".into(),
            outcome: Outcome::EndpointError,
            wait: None,
        };
    };
    let output = choice["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let finish_reason = choice["finish_reason"].as_str().map(str::to_string);
    let outcome = if finish_reason.as_deref() == Some("length") {
        Outcome::Truncated
    } else if output.trim().is_empty() {
        Outcome::Empty
    } else {
        Outcome::Ok
    };
    let logprobs = &choice["logprobs"];
    Attempt::Done(Box::new(Generation {
        outcome,
        output,
        finish_reason,
        error: None,
        latency_ms: 0,
        attempts: 0,
        prompt_tokens: body["usage"]["prompt_tokens"].as_i64(),
        completion_tokens: body["usage"]["completion_tokens"].as_i64(),
        logprobs_json: (!logprobs.is_null()).then(|| logprobs.to_string()),
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn truncation_and_empty_answers_are_outcomes() {
        let truncated =
            json!({"choices": [{"message": {"content": "abc"}, "finish_reason": "length"}]});
        let Attempt::Done(generation) = parse_chat_completion(&truncated) else {
            panic!("expected a generation")
        };
        assert_eq!(generation.outcome, Outcome::Truncated);
        let empty = json!({"choices": [{"message": {"content": "  "}, "finish_reason": "stop"}]});
        let Attempt::Done(generation) = parse_chat_completion(&empty) else {
            panic!("expected a generation")
        };
        assert_eq!(generation.outcome, Outcome::Empty);
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_an_error_after_retries_not_a_hang() {
        // Bind then drop a listener so the port is (very likely) closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = ModelClient::new(Duration::from_secs(5));
        let generation = client
            .generate(&GenerationRequest {
                base_url: format!("http://127.0.0.1:{port}/v1"),
                model: "m".into(),
                prompt: "hi".into(),
                max_tokens: 8,
                temperature: 0.0,
                seed: 1,
            })
            .await;
        assert_eq!(generation.outcome, Outcome::EndpointError);
        assert_eq!(generation.attempts, i64::from(MAX_ATTEMPTS));
        assert!(generation.error.unwrap().contains("could not connect"));
    }
}
