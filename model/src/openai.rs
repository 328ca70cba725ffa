//! The OpenAI wire format: request bodies checked into one [`Job`], and response bodies and
//! stream chunks in the chat and legacy completions shapes that vLLM also serves.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::chat::ChatMessage;
use crate::generate::{Finished, Piece, SamplingParams};
use crate::scoring::{ScoredToken, TokenLogprob};

/// OpenAI's documented upper bound for `top_logprobs` (and for completions' `logprobs`).
pub const MAX_TOP_LOGPROBS: u64 = 20;

/// Limits on `stop` (OpenAI allows 4 strings; vLLM sets none).
pub const MAX_STOP_STRINGS: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

/// An error in OpenAI's shape, with its HTTP status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub message: String,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: None,
            message: message.into(),
        }
    }

    pub fn model_not_found(requested: &str, served: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: Some("model_not_found"),
            message: format!(
                "The model `{requested}` does not exist; this server serves `{served}`."
            ),
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            code: None,
            message: message.into(),
        }
    }

    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": null,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// The two request shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Chat,
    Completion,
}

/// What a request asks for, once its JSON is understood and checked.
#[derive(Debug)]
pub struct Job {
    pub model: String,
    pub prompt: Prompt,
    /// `None`: as many as the context has room for, as vLLM does.
    pub max_tokens: Option<usize>,
    pub params: SamplingParams,
    pub stream: bool,
    pub include_usage: bool,
    /// Completions: return the prompt, with every token's logprob after the first, before the
    /// completion (what likelihood scoring reads).
    pub echo: bool,
}

#[derive(Debug)]
pub enum Prompt {
    Chat(Vec<ChatMessage>),
    Text(String),
    /// Completions: token ids as the client tokenized them (vLLM accepts these; lm-eval sends
    /// them).
    Tokens(Vec<u32>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum StopField {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

/// Fields both shapes share.
#[derive(Deserialize)]
struct Common {
    model: String,
    max_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<i64>,
    stop: Option<StopField>,
    n: Option<i64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(flatten)]
    common: Common,
    messages: Vec<WireMessage>,
    max_completion_tokens: Option<i64>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
}

#[derive(Deserialize)]
struct CompletionRequest {
    #[serde(flatten)]
    common: Common,
    prompt: Value,
    logprobs: Option<i64>,
    echo: Option<bool>,
}

/// Parses and checks a request body. `default_seed` is used when the request names no seed.
pub fn parse(format: Format, body: &[u8], default_seed: u64) -> Result<Job, ApiError> {
    let invalid_json =
        |err: serde_json::Error| ApiError::invalid(format!("Invalid request body: {err}"));
    match format {
        Format::Chat => {
            let request: ChatRequest = serde_json::from_slice(body).map_err(invalid_json)?;
            let top_logprobs = match (request.logprobs, request.top_logprobs) {
                (Some(true), top) => Some(count("top_logprobs", top.unwrap_or(0))?),
                (_, Some(top)) if top > 0 => {
                    return Err(ApiError::invalid(
                        "top_logprobs requires logprobs to be true",
                    ))
                }
                _ => None,
            };
            if request.messages.is_empty() {
                return Err(ApiError::invalid("messages must not be empty"));
            }
            let messages = request
                .messages
                .into_iter()
                .map(chat_message)
                .collect::<Result<Vec<_>, _>>()?;
            let max_tokens = request.max_completion_tokens.or(request.common.max_tokens);
            finish(
                request.common,
                max_tokens,
                Prompt::Chat(messages),
                top_logprobs,
                default_seed,
            )
        }
        Format::Completion => {
            let request: CompletionRequest = serde_json::from_slice(body).map_err(invalid_json)?;
            let echo = request.echo == Some(true);
            if echo && request.common.stream == Some(true) {
                return Err(ApiError::invalid("echo is not supported with stream"));
            }
            let prompt = match request.prompt {
                Value::String(text) => Prompt::Text(text),
                Value::Array(items) => match items.as_slice() {
                    [Value::String(text)] => Prompt::Text(text.clone()),
                    [Value::Array(ids)] => Prompt::Tokens(token_ids(ids)?),
                    ids if !ids.is_empty() && ids.iter().all(Value::is_number) => {
                        Prompt::Tokens(token_ids(ids)?)
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            "prompt must be a string, a list of token ids, or a list of exactly one of either",
                        ))
                    }
                },
                _ => return Err(ApiError::invalid("prompt must be a string")),
            };
            let top_logprobs = request
                .logprobs
                .map(|top| count("logprobs", top))
                .transpose()?;
            let max_tokens = request.common.max_tokens;
            let mut job = finish(
                request.common,
                // With echo, max_tokens 0 returns the prompt alone, as vLLM does.
                max_tokens.filter(|&limit| !(echo && limit == 0)),
                prompt,
                top_logprobs,
                default_seed,
            )?;
            if echo && max_tokens == Some(0) {
                job.max_tokens = Some(0);
                job.params.max_tokens = 0;
            }
            job.echo = echo;
            Ok(job)
        }
    }
}

fn finish(
    common: Common,
    max_tokens: Option<i64>,
    prompt: Prompt,
    top_logprobs: Option<usize>,
    default_seed: u64,
) -> Result<Job, ApiError> {
    if common.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("only n = 1 is supported"));
    }
    let max_tokens = match max_tokens {
        None => None,
        Some(limit) if limit >= 1 => Some(usize::try_from(limit).unwrap_or(usize::MAX)),
        Some(limit) => {
            return Err(ApiError::invalid(format!(
                "max_tokens must be at least 1, got {limit}"
            )))
        }
    };
    let temperature = common.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(format!(
            "temperature must be between 0 and 2, got {temperature}"
        )));
    }
    let top_p = common.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(format!(
            "top_p must be in (0, 1], got {top_p}"
        )));
    }
    let stop = match common.stop {
        None => Vec::new(),
        Some(StopField::One(stop)) => vec![stop],
        Some(StopField::Many(stops)) => stops,
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop strings must not be empty"));
    }
    // Every generated token is checked against every stop string, so both are bounded.
    if stop.len() > MAX_STOP_STRINGS || stop.iter().any(|stop| stop.len() > MAX_STOP_BYTES) {
        return Err(ApiError::invalid(format!(
            "stop takes at most {MAX_STOP_STRINGS} strings of at most {MAX_STOP_BYTES} bytes"
        )));
    }
    Ok(Job {
        model: common.model,
        prompt,
        max_tokens,
        params: SamplingParams {
            max_tokens: max_tokens.unwrap_or(usize::MAX),
            temperature,
            top_p,
            // Negative seeds are accepted and reinterpreted, as vLLM does.
            seed: common.seed.map_or(default_seed, |seed| seed as u64),
            stop,
            top_logprobs,
        },
        stream: common.stream.unwrap_or(false),
        include_usage: common
            .stream_options
            .is_some_and(|options| options.include_usage),
        echo: false,
    })
}

/// A prompt's token ids; the vocabulary bound is checked when the prompt is prepared.
fn token_ids(ids: &[Value]) -> Result<Vec<u32>, ApiError> {
    ids.iter()
        .map(|id| {
            id.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| ApiError::invalid("token ids must be whole numbers from 0"))
        })
        .collect()
}

fn count(field: &str, value: i64) -> Result<usize, ApiError> {
    u64::try_from(value)
        .ok()
        .filter(|value| *value <= MAX_TOP_LOGPROBS)
        .map(|value| value as usize)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "{field} must be between 0 and {MAX_TOP_LOGPROBS}, got {value}"
            ))
        })
}

fn chat_message(message: WireMessage) -> Result<ChatMessage, ApiError> {
    if !matches!(
        message.role.as_str(),
        "system" | "developer" | "user" | "assistant"
    ) {
        return Err(ApiError::invalid(format!(
            "unsupported message role `{}`",
            message.role
        )));
    }
    let content = match message.content {
        Value::String(text) => text,
        Value::Null => String::new(),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(part))) => text.push_str(part),
                    _ => return Err(ApiError::invalid("only text message parts are supported")),
                }
            }
            text
        }
        _ => {
            return Err(ApiError::invalid(
                "message content must be a string or a list of parts",
            ))
        }
    };
    // Templates know `system`; OpenAI's newer `developer` role means the same.
    let role = match message.role.as_str() {
        "developer" => "system".to_string(),
        _ => message.role,
    };
    Ok(ChatMessage { role, content })
}

// ---------------------------------------------------------------------------------------------
// Response bodies
// ---------------------------------------------------------------------------------------------

/// The identity of one response, shared by its body or all its chunks.
pub struct Envelope<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub fingerprint: &'a str,
}

impl Envelope<'_> {
    fn wrap(&self, object: &str, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        })
    }
}

pub fn usage(finished: &Finished) -> Value {
    json!({
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
    })
}

/// A whole answer, not streamed.
pub fn body(
    format: Format,
    envelope: &Envelope<'_>,
    answer: &Piece,
    finished: &Finished,
    logprobs: bool,
) -> Value {
    let reason = finished.finish_reason.as_str();
    let choice = match format {
        Format::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": answer.text},
            "logprobs": logprobs.then(|| chat_logprobs(&answer.tokens)),
            "finish_reason": reason,
        }),
        Format::Completion => json!({
            "index": 0,
            "text": answer.text,
            "logprobs": logprobs.then(|| completion_logprobs(&answer.tokens, 0)),
            "finish_reason": reason,
        }),
    };
    let mut body = envelope.wrap(object(format, false), json!([choice]));
    body["usage"] = usage(finished);
    body
}

/// Streaming: the chunk that opens a chat answer (its role), or `None` for completions.
pub fn opening_chunk(format: Format, envelope: &Envelope<'_>) -> Option<Value> {
    (format == Format::Chat).then(|| {
        let choice = json!({
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": null,
            "finish_reason": null,
        });
        envelope.wrap(object(format, true), json!([choice]))
    })
}

/// Streaming: one piece of text. `offset` is the answer's length so far, in characters, for
/// the completions format's `text_offset`.
pub fn piece_chunk(
    format: Format,
    envelope: &Envelope<'_>,
    piece: &Piece,
    logprobs: bool,
    offset: usize,
) -> Value {
    let choice = match format {
        Format::Chat => json!({
            "index": 0,
            "delta": {"content": piece.text},
            "logprobs": logprobs.then(|| chat_logprobs(&piece.tokens)),
            "finish_reason": null,
        }),
        Format::Completion => json!({
            "index": 0,
            "text": piece.text,
            "logprobs": logprobs.then(|| completion_logprobs(&piece.tokens, offset)),
            "finish_reason": null,
        }),
    };
    envelope.wrap(object(format, true), json!([choice]))
}

/// Streaming: the chunk that carries the finish reason.
pub fn closing_chunk(format: Format, envelope: &Envelope<'_>, finished: &Finished) -> Value {
    let reason = finished.finish_reason.as_str();
    let choice = match format {
        Format::Chat => json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason}),
        Format::Completion => {
            json!({"index": 0, "text": "", "logprobs": null, "finish_reason": reason})
        }
    };
    envelope.wrap(object(format, true), json!([choice]))
}

/// Streaming, when `stream_options.include_usage`: the last chunk, with no choices.
pub fn usage_chunk(format: Format, envelope: &Envelope<'_>, finished: &Finished) -> Value {
    let mut chunk = envelope.wrap(object(format, true), json!([]));
    chunk["usage"] = usage(finished);
    chunk
}

fn object(format: Format, streamed: bool) -> &'static str {
    match (format, streamed) {
        (Format::Chat, false) => "chat.completion",
        (Format::Chat, true) => "chat.completion.chunk",
        (Format::Completion, _) => "text_completion",
    }
}

fn chat_entry(token: &TokenLogprob) -> Value {
    json!({"token": token.label, "logprob": token.logprob, "bytes": token.bytes})
}

fn chat_logprobs(tokens: &[ScoredToken]) -> Value {
    let content: Vec<Value> = tokens
        .iter()
        .map(|token| {
            let mut entry = chat_entry(&token.chosen);
            entry["top_logprobs"] = token.top.iter().map(chat_entry).collect();
            entry
        })
        .collect();
    json!({"content": content})
}

/// The legacy shape: four parallel lists. `top_logprobs` maps each alternative's text to its
/// logprob, so alternatives with the same text (possible for byte fragments) keep the likelier.
/// `text_offset` counts characters, as Python clients index text; a token holding part of a
/// character counts as its replacement character.
fn completion_logprobs(tokens: &[ScoredToken], mut offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(tokens.len());
    for token in tokens {
        text_offset.push(offset);
        offset += token.chosen.label.chars().count();
    }
    let top: Vec<Value> = tokens
        .iter()
        .map(|token| {
            // An echoed prompt's first token follows nothing: no logprob, no alternatives.
            if token.chosen.logprob.is_nan() {
                return Value::Null;
            }
            let mut alternatives = serde_json::Map::new();
            for alternative in &token.top {
                alternatives
                    .entry(alternative.label.clone())
                    .or_insert(json!(alternative.logprob));
            }
            Value::Object(alternatives)
        })
        .collect();
    json!({
        "tokens": tokens.iter().map(|token| &token.chosen.label).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|token| token.chosen.logprob).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": text_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<Job, ApiError> {
        parse(Format::Chat, body.to_string().as_bytes(), 7)
    }

    #[test]
    fn a_chat_request_becomes_a_job_with_openai_defaults() {
        let job = chat(json!({
            "model": "m",
            "messages": [{"role": "developer", "content": "Be brief."},
                         {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "logprobs": true, "top_logprobs": 3, "stop": "\n", "max_completion_tokens": 5,
        }))
        .unwrap();
        assert_eq!(job.max_tokens, Some(5));
        assert_eq!(job.params.temperature, 1.0);
        assert_eq!(job.params.top_p, 1.0);
        assert_eq!(job.params.seed, 7);
        assert_eq!(job.params.stop, ["\n"]);
        assert_eq!(job.params.top_logprobs, Some(3));
        let Prompt::Chat(messages) = job.prompt else {
            panic!("a chat prompt")
        };
        assert_eq!(messages[0].role, "system");
        assert_eq!(messages[1].content, "Hi");
    }

    #[test]
    fn out_of_range_settings_are_refused_with_the_field_named() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        let with = |field: &str, value: Value| {
            let mut body = base.clone();
            body[field] = value;
            chat(body).unwrap_err()
        };
        for (field, value) in [
            ("temperature", json!(2.5)),
            ("top_p", json!(0)),
            ("max_tokens", json!(0)),
            ("n", json!(2)),
            ("top_logprobs", json!(3)),
            ("stop", json!(vec!["x"; 17])),
            ("stop", json!("y".repeat(257))),
        ] {
            let error = with(field, value);
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
            assert!(error.message.contains(field), "{field}: {}", error.message);
        }
        let mut body = base.clone();
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(21);
        assert!(chat(body).unwrap_err().message.contains("top_logprobs"));
        assert!(chat(json!({"model": "m", "messages": []})).is_err());
        assert!(
            chat(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})).is_err()
        );
        assert!(parse(Format::Chat, b"{", 0).is_err());
    }

    #[test]
    fn completions_take_one_prompt_and_an_integer_logprobs() {
        let job = parse(
            Format::Completion,
            br#"{"model": "m", "prompt": ["2+2="], "logprobs": 2, "seed": -1}"#,
            0,
        )
        .unwrap();
        assert_eq!(job.params.top_logprobs, Some(2));
        assert_eq!(job.params.seed, u64::MAX);
        assert!(matches!(job.prompt, Prompt::Text(ref text) if text == "2+2="));
        let tokens = parse(
            Format::Completion,
            br#"{"model": "m", "prompt": [[1, 2, 3]], "echo": true, "max_tokens": 1}"#,
            0,
        )
        .unwrap();
        assert!(matches!(tokens.prompt, Prompt::Tokens(ref ids) if ids == &[1, 2, 3]));
        for body in [
            r#"{"model": "m", "prompt": ["a", "b"]}"#,
            r#"{"model": "m", "prompt": [1, -2]}"#,
            r#"{"model": "m", "prompt": [[1], [2]]}"#,
            r#"{"model": "m", "prompt": "a", "echo": true, "stream": true}"#,
            r#"{"model": "m", "prompt": "a", "logprobs": 21}"#,
        ] {
            assert!(
                parse(Format::Completion, body.as_bytes(), 0).is_err(),
                "{body}"
            );
        }
    }

    #[test]
    fn echo_returns_the_prompt_and_may_generate_nothing() {
        let job = parse(
            Format::Completion,
            br#"{"model": "m", "prompt": "A: Paris", "echo": true, "logprobs": 1, "max_tokens": 0}"#,
            0,
        )
        .unwrap();
        assert!(job.echo);
        assert_eq!((job.max_tokens, job.params.max_tokens), (Some(0), 0));
        // Without echo, no tokens is no answer.
        assert!(parse(
            Format::Completion,
            br#"{"model": "m", "prompt": "A", "max_tokens": 0}"#,
            0
        )
        .is_err());
        let first = ScoredToken {
            chosen: TokenLogprob {
                label: "A".into(),
                bytes: b"A".to_vec(),
                logprob: f32::NAN,
            },
            top: Vec::new(),
        };
        let logprobs = completion_logprobs(&[first], 0);
        assert_eq!(logprobs["token_logprobs"], json!([null]));
        assert_eq!(logprobs["top_logprobs"], json!([null]));
    }

    #[test]
    fn completion_logprobs_are_parallel_lists_with_byte_offsets() {
        let token = |label: &str, logprob: f32| TokenLogprob {
            label: label.into(),
            bytes: label.as_bytes().to_vec(),
            logprob,
        };
        let tokens = [
            ScoredToken {
                chosen: token("Par", -0.1),
                top: vec![token("Par", -0.1), token("Lon", -2.5)],
            },
            ScoredToken {
                chosen: token("is", -0.01),
                top: vec![token("is", -0.01)],
            },
        ];
        let logprobs = completion_logprobs(&tokens, 4);
        assert_eq!(logprobs["tokens"], json!(["Par", "is"]));
        assert_eq!(logprobs["text_offset"], json!([4, 7]));
        let accented = [ScoredToken {
            chosen: token("é", -0.2),
            top: Vec::new(),
        }];
        let both: Vec<ScoredToken> = accented.iter().chain(&tokens).cloned().collect();
        assert_eq!(
            completion_logprobs(&both, 0)["text_offset"],
            json!([0, 1, 4])
        );
        assert_eq!(logprobs["top_logprobs"][0]["Lon"], json!(-2.5f32));
        let chat = chat_logprobs(&tokens);
        assert_eq!(chat["content"][0]["bytes"], json!([80, 97, 114]));
        assert_eq!(chat["content"][0]["top_logprobs"][1]["token"], "Lon");
    }
}
