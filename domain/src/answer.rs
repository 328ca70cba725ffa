//! What an endpoint answered for one result identity, over all its attempts, and the ways an
//! attempt can fail. Only answers are graded; an error is a value, never an answer.

use serde::{Deserialize, Serialize};

/// How a generation ended. Only answers (`Ok`, `Truncated`, `Empty`, `Refused`) are graded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// `finish_reason = length`: kept apart from wrong answers.
    Truncated,
    Empty,
    /// The model declined (`refusal` set, or `finish_reason = content_filter`).
    Refused,
    /// The default, so that a generation nobody filled in never passes for an answer.
    #[default]
    EndpointError,
    Timeout,
    /// A later turn of a conversation whose earlier turn got no answer (an endpoint error or a
    /// timeout): never sent, rather than sent with a placeholder for the missing answer.
    Stopped,
}

impl Outcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Ok,
        Outcome::Truncated,
        Outcome::Empty,
        Outcome::Refused,
        Outcome::EndpointError,
        Outcome::Timeout,
        Outcome::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Truncated => "truncated",
            Outcome::Empty => "empty",
            Outcome::Refused => "refused",
            Outcome::EndpointError => "endpoint_error",
            Outcome::Timeout => "timeout",
            Outcome::Stopped => "stopped",
        }
    }

    pub fn parse(text: &str) -> Option<Outcome> {
        Outcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == text)
    }

    pub fn is_error(self) -> bool {
        matches!(
            self,
            Outcome::EndpointError | Outcome::Timeout | Outcome::Stopped
        )
    }
}

/// Why an attempt failed. Decides whether retrying can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    Connect,
    Timeout,
    RateLimited,
    ServerError,
    MalformedResponse,
    BadRequest,
    Unauthorized,
    ModelNotFound,
    OtherHttp,
    /// Arbiter's egress policy refused the address (never sent).
    EgressRefused,
    /// The answer was longer than Arbiter reads from an endpoint.
    ResponseTooLarge,
}

impl ErrorCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Connect => "connect",
            ErrorCategory::Timeout => "timeout",
            ErrorCategory::RateLimited => "rate_limited",
            ErrorCategory::ServerError => "server_error",
            ErrorCategory::MalformedResponse => "malformed_response",
            ErrorCategory::BadRequest => "bad_request",
            ErrorCategory::Unauthorized => "unauthorized",
            ErrorCategory::ModelNotFound => "model_not_found",
            ErrorCategory::OtherHttp => "other_http",
            ErrorCategory::EgressRefused => "egress_refused",
            ErrorCategory::ResponseTooLarge => "response_too_large",
        }
    }

    /// Transient failures are retried; permanent ones (auth, bad request, unknown model) are not.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorCategory::Connect
                | ErrorCategory::Timeout
                | ErrorCategory::RateLimited
                | ErrorCategory::ServerError
                | ErrorCategory::MalformedResponse
        )
    }

    /// The category of an HTTP error status.
    pub fn from_status(status: u16) -> ErrorCategory {
        match status {
            429 => ErrorCategory::RateLimited,
            401 | 403 => ErrorCategory::Unauthorized,
            404 => ErrorCategory::ModelNotFound,
            400 | 413 | 422 => ErrorCategory::BadRequest,
            500..=599 => ErrorCategory::ServerError,
            _ => ErrorCategory::OtherHttp,
        }
    }
}

/// Everything learned from endpoints about one result identity, over all attempts.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    pub outcome: Outcome,
    pub output: String,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub error_category: Option<ErrorCategory>,
    /// Failed attempts before the final one, as JSON (category, HTTP status, milliseconds).
    pub attempt_log: Option<String>,
    pub served_by: Option<String>,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    /// Time at the endpoints: from the first request sent to the answer, over every attempt
    /// (the server's own queue, its service time and the waits between retries), without
    /// the time spent waiting inside Arbiter (`waited_ms`).
    pub latency_ms: i64,
    /// Time the identity waited inside Arbiter for a request slot: from its claim to the
    /// first request sent, and for a slot again before each retry.
    pub waited_ms: i64,
    pub attempts: i64,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    /// At the answering endpoint's prices; `None` when no endpoint was paid (cache hits,
    /// errors) or it reported no usage.
    pub cost_usd: Option<f64>,
    /// Per-token logprobs in the compact form of [`crate::logprobs`].
    pub logprobs: Option<Vec<u8>>,
    /// A scoring request's answer: the continuation's log-likelihood read from the echo.
    pub continuation: Option<crate::likelihood::ContinuationScore>,
    /// A likelihood eval's answer: every choice's score (the output is the chosen letter).
    pub choice_scores: Option<crate::likelihood::ChoiceScores>,
    /// A tokenize request's answer: the server's token ids for the text.
    pub token_ids: Option<Vec<u32>>,
    /// A rolling-likelihood eval's answer: the document's summed logprob and its units.
    pub rolling: Option<crate::rolling::RollingScore>,
}
