//! `arbiter sim`: a simulated OpenAI-compatible model endpoint for tests, benchmarks and the demo.
//!
//! This module owns the simulator's HTTP surface (`/v1/models`, `/v1/chat/completions`,
//! `/v1/completions`, `/metrics`, `/health`) and the reply generation behind it. A reply is a pure
//! function of (model, prompt, seed): every random-looking choice is a stable xxh3 hash of that
//! identity plus a purpose tag, never the process-seeded std hasher. Only fault injection also
//! hashes a request counter, so that a client's retry of a failed request can succeed.
//!
//! The simulator knows the bundled sample dataset (`public/samples/qa-basic.jsonl`), so an
//! answerer model is right, wrong or unparseable at configured rates, and a judge model can tell
//! a correct candidate from a wrong one. It is a stand-in for a model server: it touches no store
//! and no real model client, and every response carries `x-arbiter-simulator: true`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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
use xxhash_rust::xxh3::Xxh3Default;

/// The dataset the simulator can answer; the same file the demo offers for upload.
const SAMPLE_DATASET: &str = include_str!("../../public/samples/qa-basic.jsonl");
/// OpenAI's default when a request names no limit would be "unbounded"; a small cap keeps
/// runaway test prompts cheap.
const DEFAULT_MAX_TOKENS: usize = 256;
/// OpenAI's documented upper bound for `top_logprobs`.
const MAX_TOP_LOGPROBS: usize = 20;
/// How often `judge:name` agrees with the truth when the truth is knowable.
const DEFAULT_JUDGE_ACCURACY: f64 = 0.9;
const FINGERPRINT: &str = "arbiter-sim";
/// Labels every response, so a simulated result can never pass for a real model's.
const SIMULATOR_HEADER: &str = "x-arbiter-simulator";
/// Long enough that any sane client timeout fires first.
const SIMULATED_TIMEOUT: Duration = Duration::from_secs(120);
const PASS: &str = "PASS";
const FAIL: &str = "FAIL";

const UNKNOWN_QUESTION_REPLY: &str =
    "I do not recognise this question, so I cannot work it out.\nAnswer: unknown";
const UNDECIDED_VERDICT_REPLY: &str =
    "The response is partly right and partly unclear.\nI cannot give a firm verdict either way.";
/// Replies with no line starting with `Answer:`, so answer extraction must fail on them.
const RAMBLING_REPLIES: [&str; 3] = [
    "I am not completely sure.\nIt could be several things, depending on how the question is read.\nI would want to check a reference before committing to one.",
    "Let me think about this.\nThere are a few ways to approach it, and they point in different directions.\nI cannot settle on a single answer with confidence.",
    "Hmm, this is a tricky one.\nMy first instinct and my second thought disagree.\nPerhaps the question is asking about something slightly different.",
];
/// Plausible runner-up tokens for `top_logprobs`; more than `MAX_TOP_LOGPROBS` of them, so a
/// full list never runs out even after skipping the chosen token.
const ALTERNATIVE_TOKENS: [&str; 24] = [
    " the", " a", " is", " it", " answer", " of", " to", " and", "\n", " I", " so", " that", " be",
    " this", " we", " number", " about", " in", " not", " one", " two", " three", ".", ",",
];

/// One simulated model and how it behaves.
#[derive(Clone, Debug)]
pub struct SimModel {
    /// The name clients pass as `model`.
    pub name: String,
    /// Whether it answers questions or grades answers.
    pub kind: SimModelKind,
    /// Answerer: probability that a parseable reply is correct. Judge: probability that the
    /// verdict agrees with the truth when the prompt lets the simulator know it.
    pub accuracy: f64,
    /// Probability that a reply has nothing to parse: no `Answer:` line, or no verdict.
    pub unparseable_rate: f64,
    /// Judges only: a calibrated judge. Its confidence is drawn uniformly from this range and
    /// its verdict agrees with the truth with exactly that probability (`accuracy` is then
    /// unused), so a threshold `t` accepts `(high - t) / (high - low)` of its verdicts.
    /// `None`: verdicts agree with the truth at `accuracy`, confidence in [0.55, 0.99).
    pub calibrated_confidence: Option<(f64, f64)>,
}

/// What a simulated model does with a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimModelKind {
    /// Answers dataset questions with a final `Answer: …` line.
    Answerer,
    /// Replies `PASS` or `FAIL`, with the verdict's confidence in its logprobs.
    Judge,
}

/// Everything one simulator instance serves.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The models listed by `/v1/models`; any other name is a 404.
    pub models: Vec<SimModel>,
    /// Lower bound of the per-request delay, in milliseconds.
    pub latency_ms_min: u64,
    /// Upper bound (inclusive) of the per-request delay, in milliseconds.
    pub latency_ms_max: u64,
    /// Failure rates to inject; all zero by default.
    pub faults: SimFaults,
    /// Requests served at once, like a GPU server's batch slots; the rest wait in a queue
    /// (reported as `vllm:num_requests_waiting`). `None`: every request runs at once.
    pub max_concurrency: Option<usize>,
    /// Extra delay per byte of prompt, in microseconds: long prompts take longer, as long
    /// problems do on a real server (the long-tail benchmark).
    pub latency_us_per_prompt_byte: u64,
    /// When set, `/v1/*` requests must carry `Authorization: Bearer <key>`, as vLLM's
    /// `--api-key` demands; others get 401.
    pub api_key: Option<String>,
}

/// Per-request probabilities of each injected failure; they are tried in field order and
/// should sum to at most 1.
#[derive(Clone, Debug, Default)]
pub struct SimFaults {
    /// `429 Too Many Requests` with `Retry-After: 1`.
    pub rate_429: f64,
    /// `500 Internal Server Error`.
    pub rate_500: f64,
    /// No answer for [`SIMULATED_TIMEOUT`], then a 504.
    pub rate_timeout: f64,
    /// `200 OK` whose body is cut-off JSON.
    pub rate_malformed: f64,
    /// A reply cut after half its tokens with `finish_reason: "length"`.
    pub rate_truncate: f64,
}

impl SimModel {
    /// Parses a command-line model spec: `name:accuracy`, `name:accuracy:unparseable_rate` or
    /// `judge:name` or `judge:name:low:high` (a calibrated judge whose confidence is drawn from
    /// `[low, high)`). Rates are probabilities in `[0, 1]`.
    pub fn parse_spec(spec: &str) -> Result<SimModel, String> {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix("judge:") {
            let (name, calibrated_confidence) = match rest.split(':').collect::<Vec<_>>()[..] {
                [name] => (name, None),
                [name, low, high] => {
                    let low = parse_probability(low, "confidence low", spec)?;
                    let high = parse_probability(high, "confidence high", spec)?;
                    if !(0.5..=high).contains(&low) {
                        return Err(format!(
                            "judge spec `{spec}` needs 0.5 <= low <= high <= 1 for its confidence range"
                        ));
                    }
                    (name, Some((low, high)))
                }
                _ => {
                    return Err(format!(
                        "judge spec `{spec}` must be `judge:name` or `judge:name:low:high`"
                    ))
                }
            };
            return Ok(SimModel {
                name: checked_name(name, spec)?,
                kind: SimModelKind::Judge,
                accuracy: DEFAULT_JUDGE_ACCURACY,
                unparseable_rate: 0.0,
                calibrated_confidence,
            });
        }
        let (name, accuracy, unparseable_rate) = match spec.split(':').collect::<Vec<_>>()[..] {
            [name, accuracy] => (name, accuracy, None),
            [name, accuracy, unparseable_rate] => (name, accuracy, Some(unparseable_rate)),
            _ => {
                return Err(format!(
                    "model spec `{spec}` must be `name:accuracy`, \
                     `name:accuracy:unparseable_rate`, `judge:name` or `judge:name:low:high`"
                ))
            }
        };
        Ok(SimModel {
            name: checked_name(name, spec)?,
            kind: SimModelKind::Answerer,
            accuracy: parse_probability(accuracy, "accuracy", spec)?,
            unparseable_rate: match unparseable_rate {
                Some(rate) => parse_probability(rate, "unparseable_rate", spec)?,
                None => 0.0,
            },
            calibrated_confidence: None,
        })
    }
}

fn checked_name(name: &str, spec: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("model spec `{spec}` has an empty model name"));
    }
    if name.contains(char::is_whitespace) {
        return Err(format!(
            "model name `{name}` in spec `{spec}` contains whitespace"
        ));
    }
    Ok(name.to_string())
}

fn parse_probability(text: &str, field: &str, spec: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{field} `{text}` in model spec `{spec}` is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!(
            "{field} `{text}` in model spec `{spec}` must be between 0 and 1"
        ));
    }
    Ok(value)
}

impl SimConfig {
    /// Two checkpoints of different quality and two judges: enough for the demo's comparison
    /// and its triage.
    pub fn demo() -> SimConfig {
        SimConfig {
            models: vec![
                SimModel {
                    name: "sim-ckpt-a".to_string(),
                    kind: SimModelKind::Answerer,
                    accuracy: 0.80,
                    unparseable_rate: 0.08,
                    calibrated_confidence: None,
                },
                SimModel {
                    name: "sim-ckpt-b".to_string(),
                    kind: SimModelKind::Answerer,
                    accuracy: 0.65,
                    unparseable_rate: 0.08,
                    calibrated_confidence: None,
                },
                // A cheap judge that is often unsure and a strong one that rarely is; both
                // calibrated, so the demo's triage thresholds mean what they say.
                SimModel {
                    name: "sim-judge".to_string(),
                    kind: SimModelKind::Judge,
                    accuracy: DEFAULT_JUDGE_ACCURACY,
                    unparseable_rate: 0.02,
                    calibrated_confidence: Some((0.6, 1.0)),
                },
                SimModel {
                    name: "sim-judge-strong".to_string(),
                    kind: SimModelKind::Judge,
                    accuracy: DEFAULT_JUDGE_ACCURACY,
                    unparseable_rate: 0.0,
                    calibrated_confidence: Some((0.85, 1.0)),
                },
            ],
            latency_ms_min: 20,
            latency_ms_max: 120,
            faults: SimFaults::default(),
            max_concurrency: None,
            latency_us_per_prompt_byte: 0,
            api_key: None,
        }
    }
}

/// The simulator's routes, every response labelled with `x-arbiter-simulator: true`.
pub fn router(config: SimConfig) -> Router {
    let required_key = config.api_key.clone();
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
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

// ---------------------------------------------------------------------------------------------
// The sample dataset
// ---------------------------------------------------------------------------------------------

/// One question of the bundled dataset, as far as the simulator cares.
#[derive(Debug, Deserialize)]
struct SampleItem {
    input: String,
    target: String,
    category: String,
}

fn sample_items() -> &'static [SampleItem] {
    static ITEMS: OnceLock<Vec<SampleItem>> = OnceLock::new();
    ITEMS.get_or_init(|| {
        // The file is compiled in and checked by a unit test, so a bad line is a build-time
        // mistake; skipping it keeps the simulator serving rather than panicking.
        SAMPLE_DATASET
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    })
}

/// The group of [`items_by_first_byte`] for text with no first byte.
const EMPTY_TEXT_GROUP: usize = 256;

/// The sample items grouped by the first byte of their question, each group in dataset order.
fn items_by_first_byte() -> &'static [Vec<&'static SampleItem>] {
    static GROUPS: OnceLock<Vec<Vec<&'static SampleItem>>> = OnceLock::new();
    GROUPS.get_or_init(|| {
        let mut groups = vec![Vec::new(); EMPTY_TEXT_GROUP + 1];
        for item in sample_items() {
            groups[first_byte_group(item.input.as_bytes())].push(item);
        }
        groups
    })
}

fn first_byte_group(text: &[u8]) -> usize {
    text.first()
        .map_or(EMPTY_TEXT_GROUP, |byte| usize::from(*byte))
}

/// The dataset question asked in `prompt`. Few-shot prompts quote earlier questions first, so
/// the one that occurs last is the one being asked; when two start at the same place (one is
/// a prefix of the other), the later dataset item wins.
fn find_question(prompt: &str) -> Option<&'static SampleItem> {
    // Walking start positions back from the end stops at the asked question, usually a few
    // dozen bytes from the end, rather than running a substring search per dataset item over
    // the whole prompt, which was the costliest step of a simulated request. Scanning each
    // group backwards makes the later dataset item win a tie.
    let prompt = prompt.as_bytes();
    let groups = items_by_first_byte();
    (0..=prompt.len()).rev().find_map(|start| {
        let rest = &prompt[start..];
        groups[first_byte_group(rest)]
            .iter()
            .rev()
            .find(|item| rest.starts_with(item.input.as_bytes()))
            .copied()
    })
}

// ---------------------------------------------------------------------------------------------
// Deterministic draws
// ---------------------------------------------------------------------------------------------

/// The identity of one generation; every draw hashes it, so a reply is a pure function of it.
#[derive(Clone, Copy)]
struct Generation<'a> {
    model: &'a SimModel,
    prompt: &'a str,
    seed: i64,
}

impl Generation<'_> {
    /// The hash state after this generation's model and prompt; every draw continues from it.
    fn identity(&self) -> HashedIdentity {
        let mut state = Xxh3Default::new();
        for part in [self.model.name.as_bytes(), self.prompt.as_bytes()] {
            hash_length_prefixed(&mut state, part);
        }
        HashedIdentity {
            state,
            seed: self.seed,
        }
    }

    fn hash(&self, purpose: &str, index: u64) -> u64 {
        self.identity().hash(purpose, index)
    }

    /// A uniform draw in `[0, 1)`, independent across purposes and indices.
    fn draw(&self, purpose: &str, index: u64) -> f64 {
        self.identity().draw(purpose, index)
    }
}

/// A generation's identity already fed to xxh3. Scoring draws several times per token;
/// cloning this state instead of rehashing the prompt for each draw gives the same hashes
/// (a streaming hash depends only on the bytes fed) for much less work.
#[derive(Clone)]
struct HashedIdentity {
    state: Xxh3Default,
    seed: i64,
}

impl HashedIdentity {
    fn hash(&self, purpose: &str, index: u64) -> u64 {
        let mut hasher = self.state.clone();
        hash_length_prefixed(&mut hasher, purpose.as_bytes());
        hasher.update(&self.seed.to_le_bytes());
        hasher.update(&index.to_le_bytes());
        hasher.digest()
    }

    /// A uniform draw in `[0, 1)`, independent across purposes and indices.
    fn draw(&self, purpose: &str, index: u64) -> f64 {
        // The top 53 bits fill an f64 mantissa exactly, so every value is equally likely.
        (self.hash(purpose, index) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Length prefixes keep ("ab", "c") and ("a", "bc") from hashing alike.
fn hash_length_prefixed(hasher: &mut Xxh3Default, part: &[u8]) {
    hasher.update(&(part.len() as u64).to_le_bytes());
    hasher.update(part);
}

/// The element of `choices` that a uniform draw `u` in `[0, 1)` lands on.
fn pick<T>(choices: &[T], u: f64) -> Option<&T> {
    let index = (u * choices.len() as f64) as usize;
    choices.get(index.min(choices.len().saturating_sub(1)))
}

// ---------------------------------------------------------------------------------------------
// Reply generation
// ---------------------------------------------------------------------------------------------

/// A reply before the request's limits (`max_tokens`, `stop`) are applied.
struct Reply {
    text: String,
    /// A judge's probability for its verdict token, which the logprobs report.
    verdict_confidence: Option<f64>,
}

fn generate_reply(generation: Generation<'_>) -> Reply {
    match generation.model.kind {
        SimModelKind::Answerer => Reply {
            text: answer(generation),
            verdict_confidence: None,
        },
        SimModelKind::Judge => judge(generation),
    }
}

fn answer(generation: Generation<'_>) -> String {
    let Some(item) = find_question(generation.prompt) else {
        return UNKNOWN_QUESTION_REPLY.to_string();
    };
    let model = generation.model;
    if generation.draw("unparseable", 0) < model.unparseable_rate {
        let rambling = pick(&RAMBLING_REPLIES, generation.draw("rambling", 0));
        return rambling.copied().unwrap_or(RAMBLING_REPLIES[0]).to_string();
    }
    let final_answer = if generation.draw("correct", 0) < model.accuracy {
        item.target.clone()
    } else {
        wrong_answer(generation, item)
    };
    // Right and wrong replies share the reasoning line, so only the answer tells them apart.
    format!("{}\nAnswer: {final_answer}", reasoning_line(&item.category))
}

fn reasoning_line(category: &str) -> &'static str {
    match category {
        "arithmetic" => "Working through the arithmetic step by step.",
        "capitals" => "Recalling the seat of government of that country.",
        "units" => "Applying the standard conversion factor.",
        _ => "Thinking it through carefully.",
    }
}

/// A mistake a model could plausibly make: a number slightly off, or a real answer to a
/// different question of the same kind.
fn wrong_answer(generation: Generation<'_>, item: &SampleItem) -> String {
    if let Ok(target) = item.target.parse::<i64>() {
        let offset = (1 + (generation.draw("wrong-offset", 0) * 5.0) as i64).min(5);
        let wrong = if generation.draw("wrong-sign", 0) < 0.5 {
            target - offset
        } else {
            target + offset
        };
        return wrong.to_string();
    }
    let others: Vec<&SampleItem> = sample_items()
        .iter()
        .filter(|other| other.category == item.category && other.target != item.target)
        .collect();
    pick(&others, generation.draw("wrong-pick", 0))
        .map_or_else(|| "unknown".to_string(), |other| other.target.clone())
}

fn judge(generation: Generation<'_>) -> Reply {
    let model = generation.model;
    if generation.draw("unparseable", 0) < model.unparseable_rate {
        return Reply {
            text: UNDECIDED_VERDICT_REPLY.to_string(),
            verdict_confidence: None,
        };
    }
    // Real judges are rarely certain and rarely coin-flips; [0.55, 0.99) looks like one.
    let (low, high) = model.calibrated_confidence.unwrap_or((0.55, 0.99));
    let confidence = low + (high - low) * generation.draw("confidence", 0);
    // A calibrated judge is right exactly as often as it says.
    let accuracy = match model.calibrated_confidence {
        Some(_) => confidence,
        None => model.accuracy,
    };
    let pass = match candidate_is_correct(generation.prompt) {
        Some(correct) if generation.draw("verdict", 0) < accuracy => correct,
        Some(correct) => !correct,
        None => generation.draw("verdict", 0) < 0.5,
    };
    Reply {
        text: if pass { PASS } else { FAIL }.to_string(),
        verdict_confidence: Some(confidence),
    }
}

/// Whether the candidate quoted in a judge prompt answered a known question correctly: the
/// prompt must contain the question and a line `Answer: <target>` (the answerer's final line).
/// `None` when the prompt quotes no known question.
fn candidate_is_correct(prompt: &str) -> Option<bool> {
    let item = find_question(prompt)?;
    let expected = format!("Answer: {}", item.target);
    Some(
        prompt
            .lines()
            .any(|line| line.trim().eq_ignore_ascii_case(&expected)),
    )
}

// ---------------------------------------------------------------------------------------------
// Tokens, limits and logprobs
// ---------------------------------------------------------------------------------------------

/// Splits text into words that carry their leading space, with each newline its own token;
/// concatenating the tokens gives back the text.
fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    for character in text.chars() {
        if character == '\n' {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            tokens.push("\n".to_string());
        } else if character == ' ' && current.chars().any(|c| c != ' ') {
            tokens.push(std::mem::take(&mut current));
            current.push(character);
        } else {
            current.push(character);
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// The request's limits on one generation.
struct Limits {
    max_tokens: usize,
    stop: Vec<String>,
    /// An injected truncation fault: stop after half the tokens.
    force_truncate: bool,
}

/// The tokens a request gets back and why generation ended.
struct Finished {
    tokens: Vec<String>,
    finish_reason: &'static str,
}

fn apply_limits(text: &str, limits: &Limits) -> Finished {
    // A real model checks stop sequences as it goes, so a stop that comes before the token
    // limit wins and one after it never happens.
    let mut tokens = tokenize(cut_at_stop(text, &limits.stop));
    let mut finish_reason = "stop";
    if limits.force_truncate {
        tokens.truncate(tokens.len() / 2);
        finish_reason = "length";
    }
    if tokens.len() > limits.max_tokens {
        tokens.truncate(limits.max_tokens);
        finish_reason = "length";
    }
    Finished {
        tokens,
        finish_reason,
    }
}

/// `text` up to (not including) the earliest stop string; empty stop strings are ignored.
fn cut_at_stop<'a>(text: &'a str, stop: &[String]) -> &'a str {
    stop.iter()
        .filter(|stop| !stop.is_empty())
        .filter_map(|stop| text.find(stop.as_str()))
        .min()
        .map_or(text, |end| &text[..end])
}

/// One returned token with its logprob and its `top_logprobs` list (chosen token first).
struct ScoredToken {
    text: String,
    logprob: f64,
    top: Vec<(String, f64)>,
}

fn score_tokens(
    generation: Generation<'_>,
    reply: &Reply,
    tokens: Vec<String>,
    top_count: usize,
) -> Vec<ScoredToken> {
    let identity = generation.identity();
    tokens
        .into_iter()
        .enumerate()
        .map(|(index, text)| match (reply.verdict_confidence, index) {
            (Some(confidence), 0) if text == PASS || text == FAIL => {
                score_verdict(&identity, text, confidence, top_count)
            }
            _ => score_token(&identity, index as u64, text, top_count),
        })
        .collect()
}

fn score_token(
    identity: &HashedIdentity,
    index: u64,
    text: String,
    top_count: usize,
) -> ScoredToken {
    // In (-2.5, -0.01]: sure enough to look like a tuned model, never exactly certain.
    let logprob = -0.01 - 2.49 * identity.draw("logprob", index);
    let top = top_alternatives(identity, index, vec![(text.clone(), logprob)], top_count);
    ScoredToken { text, logprob, top }
}

fn score_verdict(
    identity: &HashedIdentity,
    text: String,
    confidence: f64,
    top_count: usize,
) -> ScoredToken {
    let logprob = confidence.ln();
    let other = if text == PASS { FAIL } else { PASS };
    let leaders = vec![
        (text.clone(), logprob),
        (other.to_string(), (1.0 - confidence).ln()),
    ];
    // Graders read a judge's confidence from the PASS/FAIL pair, so both are always listed.
    let top = top_alternatives(identity, 0, leaders, top_count.max(2));
    ScoredToken { text, logprob, top }
}

/// Extends `leaders` (most likely first) with filler tokens, each strictly less likely than
/// the one before, up to `count` entries in all; no token appears twice.
fn top_alternatives(
    identity: &HashedIdentity,
    index: u64,
    mut leaders: Vec<(String, f64)>,
    count: usize,
) -> Vec<(String, f64)> {
    let start =
        (identity.draw("alternative-start", index) * ALTERNATIVE_TOKENS.len() as f64) as usize;
    let candidates = ALTERNATIVE_TOKENS
        .iter()
        .cycle()
        .skip(start)
        .take(ALTERNATIVE_TOKENS.len());
    for candidate in candidates {
        if leaders.len() >= count {
            break;
        }
        if leaders.iter().any(|(token, _)| token == candidate) {
            continue;
        }
        let previous = leaders.last().map_or(0.0, |(_, logprob)| *logprob);
        // Room for MAX_TOP_LOGPROBS positions per token keeps each gap's draw independent.
        let position = index * (MAX_TOP_LOGPROBS as u64 + 1) + leaders.len() as u64;
        let gap = 0.05 + 0.95 * identity.draw("alternative-gap", position);
        leaders.push(((*candidate).to_string(), previous - gap));
    }
    leaders.truncate(count);
    leaders
}

// ---------------------------------------------------------------------------------------------
// Faults and latency
// ---------------------------------------------------------------------------------------------

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

/// A delay in `[min_ms, max_ms]` (a reversed range means `min_ms`).
fn latency(generation: Generation<'_>, min_ms: u64, max_ms: u64) -> Duration {
    let span = max_ms.saturating_sub(min_ms);
    let offset = (generation.draw("latency", 0) * (span as f64 + 1.0)) as u64;
    Duration::from_millis(min_ms + offset.min(span))
}

// ---------------------------------------------------------------------------------------------
// Server state and HTTP handlers
// ---------------------------------------------------------------------------------------------

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
}

struct ModelSlot {
    model: SimModel,
    /// Requests in flight, reported as `vllm:num_requests_running`.
    running: AtomicU64,
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

/// The legacy completions prompt: one string, or a list holding exactly one.
#[derive(Deserialize)]
#[serde(untagged)]
enum PromptField {
    One(String),
    Many(Vec<String>),
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
        })
    }
}

impl CompletionRequest {
    fn into_generation(self) -> Result<GenerationRequest, ApiError> {
        let prompt = match self.prompt {
            PromptField::One(prompt) => prompt,
            PromptField::Many(prompts) => match <[String; 1]>::try_from(prompts) {
                Ok([prompt]) => prompt,
                Err(_) => {
                    return Err(ApiError::invalid_request(
                        "The simulator answers exactly one prompt per request.",
                    ))
                }
            },
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
    let delay = latency(generation, state.latency_ms_min, state.latency_ms_max)
        + Duration::from_micros(state.latency_us_per_prompt_byte * request.prompt.len() as u64);
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

// ---------------------------------------------------------------------------------------------
// Response bodies
// ---------------------------------------------------------------------------------------------
//
// Bodies are typed structs that borrow from the outcome and serialize straight to bytes:
// building a `serde_json::Value` tree for every token's `top_logprobs` was most of the
// simulator's CPU time, and benchmarks need it to answer ~10,000 requests/s on two cores.
// Fields are declared in alphabetical order because that is the order the earlier `Value`
// maps (sorted `BTreeMap`s) wrote them in, so responses stay byte-for-byte the same.

/// Everything a response body needs, in either format, streamed or not.
struct Outcome<'a> {
    id: String,
    model: &'a str,
    tokens: Vec<ScoredToken>,
    finish_reason: &'static str,
    prompt_tokens: usize,
    logprobs: bool,
    include_usage: bool,
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
        Usage {
            completion_tokens: self.tokens.len(),
            prompt_tokens: self.prompt_tokens,
            total_tokens: self.prompt_tokens + self.tokens.len(),
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
    Outcome {
        id: format!("{prefix}-{:016x}", generation.hash("id", 0)),
        model: &request.model,
        tokens: score_tokens(generation, &reply, finished.tokens, top_count),
        finish_reason: finished.finish_reason,
        prompt_tokens: request.prompt.split_whitespace().count(),
        logprobs: request.top_logprobs.is_some(),
        include_usage: request.include_usage,
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

// Chat bodies and chunks.

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

// Legacy completion bodies and chunks.

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
    serializer.collect_seq(tokens.iter().map(|token| TopLogprobMap(&token.top)))
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

    const TEMPLATE: &str =
        "Answer the question. Reply with a final line `Answer: <answer>`.\n\nQuestion: ";

    fn answerer(accuracy: f64, unparseable_rate: f64) -> SimModel {
        SimModel {
            name: "test-answerer".to_string(),
            kind: SimModelKind::Answerer,
            accuracy,
            unparseable_rate,
            calibrated_confidence: None,
        }
    }

    fn judge_model() -> SimModel {
        SimModel {
            name: "test-judge".to_string(),
            kind: SimModelKind::Judge,
            accuracy: 1.0,
            unparseable_rate: 0.0,
            calibrated_confidence: None,
        }
    }

    fn reply_for(model: &SimModel, prompt: &str, seed: i64) -> Reply {
        generate_reply(Generation {
            model,
            prompt,
            seed,
        })
    }

    fn final_answer(text: &str) -> Option<&str> {
        text.lines().find_map(|line| line.strip_prefix("Answer: "))
    }

    fn limits(max_tokens: usize, stop: &[&str]) -> Limits {
        Limits {
            max_tokens,
            stop: stop.iter().map(|stop| (*stop).to_string()).collect(),
            force_truncate: false,
        }
    }

    #[test]
    fn bundled_dataset_has_sixty_items_in_three_categories() {
        let items = sample_items();
        assert_eq!(items.len(), 60);
        for category in ["arithmetic", "capitals", "units"] {
            let count = items
                .iter()
                .filter(|item| item.category == category)
                .count();
            assert_eq!(count, 20, "category {category}");
        }
    }

    #[test]
    fn every_question_is_found_in_its_prompt() {
        for item in sample_items() {
            let prompt = format!("{TEMPLATE}{}", item.input);
            let found = find_question(&prompt).map(|found| found.input.as_str());
            assert_eq!(found, Some(item.input.as_str()));
        }
    }

    #[test]
    fn few_shot_prompts_answer_the_last_question() {
        let prompt = format!(
            "{TEMPLATE}What is 17 + 25?\nAnswer: 42\n\n{TEMPLATE}What is the capital of Japan?"
        );
        assert_eq!(
            find_question(&prompt).map(|item| item.target.as_str()),
            Some("Tokyo")
        );
    }

    #[test]
    fn question_lookup_agrees_with_a_search_per_item() {
        // The plain definition: the item whose question occurs last, the later item on a tie.
        let by_search = |prompt: &str| {
            sample_items()
                .iter()
                .filter_map(|item| prompt.rfind(&item.input).map(|position| (position, item)))
                .max_by_key(|(position, _)| *position)
                .map(|(_, item)| item.input.as_str())
        };
        let items = sample_items();
        let mut prompts = vec![
            String::new(),
            "Who painted the ceiling?".to_string(),
            "Ünïcödé What is 17 + 25? ✓".to_string(),
        ];
        for (index, item) in items.iter().enumerate() {
            let other = &items[(index * 7 + 3) % items.len()].input;
            prompts.push(format!("{}{TEMPLATE}{other}\nAnswer: 1\n\n", item.input));
            prompts.push(format!(
                "{other} {} {other}{}",
                item.input,
                &item.input[..5]
            ));
            prompts.push(format!(
                "Question: {}\nResponse:\nAnswer: {}",
                item.input, item.target
            ));
        }
        for prompt in &prompts {
            let found = find_question(prompt).map(|item| item.input.as_str());
            assert_eq!(found, by_search(prompt), "{prompt}");
        }
    }

    #[test]
    fn same_model_prompt_and_seed_give_the_same_reply() {
        let model = answerer(0.5, 0.2);
        for item in sample_items() {
            let prompt = format!("{TEMPLATE}{}", item.input);
            assert_eq!(
                reply_for(&model, &prompt, 7).text,
                reply_for(&model, &prompt, 7).text
            );
        }
    }

    #[test]
    fn different_seeds_can_give_different_replies() {
        let model = answerer(0.5, 0.2);
        let prompt = format!("{TEMPLATE}What is 48 + 37?");
        let replies: std::collections::HashSet<String> = (0..20)
            .map(|seed| reply_for(&model, &prompt, seed).text)
            .collect();
        assert!(replies.len() > 1);
    }

    #[test]
    fn accuracy_lands_near_the_configured_rate() {
        let model = answerer(0.8, 0.0);
        let correct = sample_items()
            .iter()
            .filter(|item| {
                let reply = reply_for(&model, &format!("{TEMPLATE}{}", item.input), 0);
                final_answer(&reply.text) == Some(item.target.as_str())
            })
            .count();
        // 60 Bernoulli(0.8) draws: mean 48, standard deviation about 3.1.
        assert!((36..=58).contains(&correct), "{correct} of 60 correct");
    }

    #[test]
    fn wrong_answers_are_plausible_and_never_the_target() {
        let model = answerer(0.0, 0.0);
        for item in sample_items() {
            let reply = reply_for(&model, &format!("{TEMPLATE}{}", item.input), 3);
            let answer = final_answer(&reply.text).expect("a wrong reply still has an answer");
            assert_ne!(answer, item.target);
            match item.target.parse::<i64>() {
                Ok(target) => {
                    let wrong: i64 = answer.parse().expect("a numeric wrong answer");
                    assert!(
                        (1..=5).contains(&(wrong - target).abs()),
                        "{answer} vs {target}"
                    );
                }
                Err(_) => assert!(sample_items()
                    .iter()
                    .any(|other| other.category == item.category && other.target == answer)),
            }
        }
    }

    #[test]
    fn unparseable_replies_have_no_answer_line() {
        let model = answerer(1.0, 1.0);
        for item in sample_items() {
            let reply = reply_for(&model, &format!("{TEMPLATE}{}", item.input), 1);
            assert!(reply.text.lines().count() > 1);
            assert!(!reply.text.lines().any(|line| line.starts_with("Answer:")));
        }
    }

    #[test]
    fn unknown_prompts_get_a_generic_answer() {
        let reply = reply_for(&answerer(1.0, 0.0), "Who painted the ceiling?", 0);
        assert_eq!(final_answer(&reply.text), Some("unknown"));
    }

    #[test]
    fn tokens_concatenate_back_to_the_text() {
        let text = "Working through  it.\nAnswer: 42";
        let tokens = tokenize(text);
        assert_eq!(tokens.concat(), text);
        assert!(tokens.contains(&"\n".to_string()));
        assert_eq!(tokens.last().map(String::as_str), Some(" 42"));
    }

    #[test]
    fn max_tokens_truncates_with_finish_reason_length() {
        let text = "Working through the arithmetic step by step.\nAnswer: 42";
        let cut = apply_limits(text, &limits(3, &[]));
        assert_eq!(cut.tokens.concat(), "Working through the");
        assert_eq!(cut.finish_reason, "length");
        let whole = apply_limits(text, &limits(256, &[]));
        assert_eq!(whole.tokens.concat(), text);
        assert_eq!(whole.finish_reason, "stop");
    }

    #[test]
    fn stop_strings_cut_at_the_earliest_match() {
        let text = "Working through it.\nAnswer: 42";
        let cut = apply_limits(text, &limits(256, &["Answer:", "through"]));
        assert_eq!(cut.tokens.concat(), "Working ");
        assert_eq!(cut.finish_reason, "stop");
    }

    #[test]
    fn truncation_fault_keeps_half_the_tokens() {
        let text = "one two three four\nfive";
        let mut fault_limits = limits(256, &[]);
        fault_limits.force_truncate = true;
        let cut = apply_limits(text, &fault_limits);
        assert_eq!(cut.tokens.len(), tokenize(text).len() / 2);
        assert_eq!(cut.finish_reason, "length");
    }

    #[test]
    fn token_logprobs_are_in_range_with_decreasing_alternatives() {
        let model = answerer(1.0, 0.0);
        let generation = Generation {
            model: &model,
            prompt: "What is 7 * 8?",
            seed: 0,
        };
        let reply = generate_reply(generation);
        let scored = score_tokens(generation, &reply, tokenize(&reply.text), MAX_TOP_LOGPROBS);
        for token in &scored {
            assert!(token.logprob > -2.5 && token.logprob <= -0.01);
            assert_eq!(token.top.len(), MAX_TOP_LOGPROBS);
            assert_eq!(token.top[0], (token.text.clone(), token.logprob));
            assert!(token.top.windows(2).all(|pair| pair[1].1 < pair[0].1));
            let distinct: std::collections::HashSet<&str> =
                token.top.iter().map(|(text, _)| text.as_str()).collect();
            assert_eq!(distinct.len(), token.top.len());
        }
    }

    #[test]
    fn judge_gives_a_verdict_with_both_tokens_listed() {
        let model = judge_model();
        let right =
            "Question: What is 17 + 25?\nResponse:\nWorking.\nAnswer: 42\nReply PASS or FAIL.";
        let wrong =
            "Question: What is 17 + 25?\nResponse:\nWorking.\nAnswer: 43\nReply PASS or FAIL.";
        assert_eq!(reply_for(&model, right, 0).text, PASS);
        assert_eq!(reply_for(&model, wrong, 0).text, FAIL);
        let generation = Generation {
            model: &model,
            prompt: right,
            seed: 0,
        };
        let reply = generate_reply(generation);
        let confidence = reply
            .verdict_confidence
            .expect("a verdict has a confidence");
        assert!((0.55..0.99).contains(&confidence));
        let scored = score_tokens(generation, &reply, tokenize(&reply.text), 0);
        let tokens: Vec<&str> = scored[0]
            .top
            .iter()
            .map(|(text, _)| text.as_str())
            .collect();
        assert_eq!(tokens, [PASS, FAIL]);
        assert!((scored[0].logprob.exp() - confidence).abs() < 1e-9);
    }

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

    #[test]
    fn latency_stays_within_bounds() {
        let model = answerer(1.0, 0.0);
        for seed in 0..50 {
            let generation = Generation {
                model: &model,
                prompt: "anything",
                seed,
            };
            let delay = latency(generation, 20, 120);
            assert!((20..=120).contains(&delay.as_millis()));
        }
    }

    #[test]
    fn model_specs_parse_or_explain_why_not() {
        let model = SimModel::parse_spec("ckpt:0.7").expect("valid spec");
        assert_eq!((model.name.as_str(), model.accuracy), ("ckpt", 0.7));
        assert_eq!(model.unparseable_rate, 0.0);
        let model = SimModel::parse_spec("ckpt:0.7:0.1").expect("valid spec");
        assert_eq!(model.unparseable_rate, 0.1);
        let model = SimModel::parse_spec("judge:grader").expect("valid spec");
        assert_eq!(
            (model.name.as_str(), model.kind),
            ("grader", SimModelKind::Judge)
        );

        for (spec, complaint) in [
            ("ckpt", "must be"),
            ("ckpt:0.1:0.2:0.3", "must be"),
            (":0.5", "empty model name"),
            ("judge:", "empty model name"),
            ("ckpt:high", "not a number"),
            ("ckpt:1.5", "between 0 and 1"),
            ("ckpt:0.5:-0.1", "between 0 and 1"),
        ] {
            let error = SimModel::parse_spec(spec).expect_err(spec);
            assert!(error.contains(complaint), "{spec}: {error}");
        }
    }

    #[tokio::test]
    async fn serves_openai_shaped_responses_over_http() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let base = format!("http://{}", listener.local_addr().expect("local address"));
        let config = SimConfig {
            latency_ms_min: 0,
            latency_ms_max: 1,
            ..SimConfig::demo()
        };
        let server = tokio::spawn(serve(config, listener));
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
