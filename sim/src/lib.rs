//! `arbiter sim`: a simulated OpenAI-compatible model endpoint for tests, benchmarks and the demo.
//!
//! This crate owns the simulator's HTTP surface (`/v1/models`, `/v1/chat/completions`,
//! `/v1/completions`, `/metrics`, `/health`) and the reply generation behind it. A reply is a pure
//! function of (model, prompt, seed): every random-looking choice is a stable xxh3 hash of that
//! identity plus a purpose tag, never the process-seeded std hasher. Only fault injection also
//! hashes a request counter, so that a client's retry of a failed request can succeed.
//!
//! The simulator knows the bundled sample dataset (`public/samples/qa-basic.jsonl`), so an
//! answerer model is right, wrong or unparseable at configured rates, and a judge model can tell
//! a correct candidate from a wrong one. It is a stand-in for a model server: it touches no store
//! and no real model client, and every response carries `x-arbiter-simulator: true`.

//!
//! # Layout
//! - this file: the simulated models and faults as configured (`--model ckpt:0.7`, …);
//! - `replies`: what a model answers, as a pure function of its identity;
//! - `server`: the OpenAI-shaped HTTP surface, fault injection and `/metrics`.

mod prefix_cache;
mod replies;
mod server;
pub mod vocab;

pub use server::{router, serve};

/// How often `judge:name` agrees with the truth when the truth is knowable.
const DEFAULT_JUDGE_ACCURACY: f64 = 0.9;

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
    /// Whether prompt prefixes read before are cached (their modelled reading cost skipped),
    /// as vLLM's automatic prefix caching does; off for benchmarks whose bound assumes every
    /// prompt byte is read.
    pub prefix_cache: bool,
}

/// Per-request probabilities of each injected failure; they are tried in field order and
/// should sum to at most 1.
#[derive(Clone, Debug, Default)]
pub struct SimFaults {
    /// `429 Too Many Requests` with `Retry-After: 1`.
    pub rate_429: f64,
    /// `500 Internal Server Error`.
    pub rate_500: f64,
    /// No answer for two minutes (`server::SIMULATED_TIMEOUT`), then a 504.
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
            prefix_cache: true,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The sample dataset
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Deterministic draws
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Reply generation
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Tokens, limits and logprobs
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Faults and latency
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Server state and HTTP handlers
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Response bodies
// ---------------------------------------------------------------------------------------------
//
// Bodies are typed structs that borrow from the outcome and serialize straight to bytes:
// building a `serde_json::Value` tree for every token's `top_logprobs` was most of the
// simulator's CPU time, and benchmarks need it to answer ~10,000 requests/s on two cores.
// Fields are declared in alphabetical order because that is the order the earlier `Value`
// maps (sorted `BTreeMap`s) wrote them in, so responses stay byte-for-byte the same.

// Chat bodies and chunks.

// Legacy completion bodies and chunks.

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const TEMPLATE: &str =
        "Answer the question. Reply with a final line `Answer: <answer>`.\n\nQuestion: ";

    pub(crate) fn answerer(accuracy: f64, unparseable_rate: f64) -> SimModel {
        SimModel {
            name: "test-answerer".to_string(),
            kind: SimModelKind::Answerer,
            accuracy,
            unparseable_rate,
            calibrated_confidence: None,
        }
    }

    pub(crate) fn judge_model() -> SimModel {
        SimModel {
            name: "test-judge".to_string(),
            kind: SimModelKind::Judge,
            accuracy: 1.0,
            unparseable_rate: 0.0,
            calibrated_confidence: None,
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
}
