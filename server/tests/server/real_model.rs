//! The bundled model end to end: `arbiter model serve` runs SmolLM2-135M-Instruct on CPU, its
//! OpenAI-compatible answers are checked field by field, and a small eval runs through
//! Arbiter's workers against it.
//!
//! Floating-point sums differ between CPUs, so no test here asserts an exact answer; they
//! assert structure (greedy decoding picks the top alternative, logprobs are log-probabilities,
//! usage adds up, `finish_reason` says why the answer ended) and behaviour (seeds repeat,
//! stop strings cut, streaming matches the whole answer, the queue is reported).
//!
//! Needs the model file: `scripts/fetch-model` puts it in the cache folder this test looks in
//! (or set ARBITER_TEST_GGUF). Without it the test says so and passes, unless
//! ARBITER_REQUIRE_MODEL=1, which `scripts/test` sets once it has fetched the file.

// The model crate's lookup of the test model file, shared rather than copied.
#[path = "../../../model/tests/model/common.rs"]
pub(crate) mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use arbiter_domain::grading::judge::read_reply;
use arbiter_domain::grading::scale::{JudgeScale, SCALE_TOP_LOGPROBS};
use arbiter_domain::ids::IdentityId;
use arbiter_domain::logprobs;
use arbiter_domain::run::RunStatus;
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_engine::clients::model::{GenerationRequest, ModelClient};
use arbiter_engine::dispatch::{run_worker, WorkerConfig};
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use arbiter_engine::reports::export::{export_run, ExportFormat};
use arbiter_store::{Database, Store};
use serde_json::{json, Value};
use tokio::sync::watch;

pub(crate) const MODEL: &str = "smollm2";

/// `arbiter model serve` as a child process, killed when dropped.
pub(crate) struct ModelProcess {
    child: Child,
    pub(crate) base_url: String,
}

impl ModelProcess {
    pub(crate) fn start(gguf: &PathBuf) -> ModelProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args(["model", "serve", "--addr", "127.0.0.1:0", "--name", MODEL])
            .args(["--parallel", "2", "--gguf"])
            .arg(gguf)
            .stdout(Stdio::piped())
            .spawn()
            .expect("arbiter starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let base_url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_end_matches(',')
            .to_string();
        ModelProcess { child, base_url }
    }
}

impl Drop for ModelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    http: reqwest::Client,
    base_url: String,
}

impl Client {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn chat(&self, body: Value) -> Value {
        let (status, answer) = self.post("/chat/completions", body).await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    async fn metrics(&self) -> String {
        let root = self.base_url.trim_end_matches("/v1");
        let response = self
            .http
            .get(format!("{root}/metrics"))
            .send()
            .await
            .unwrap();
        response.text().await.unwrap()
    }
}

fn user(content: &str) -> Value {
    json!([{"role": "user", "content": content}])
}

fn gauge(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

/// Logprobs of a chat answer: each is a log-probability, the alternatives come most likely
/// first and number `top`, and greedy decoding chose the most likely one. The tokens' bytes
/// spell the answer.
fn check_chat_logprobs(choice: &Value, top: usize, greedy: bool) -> usize {
    let content = choice["logprobs"]["content"].as_array().unwrap();
    let mut bytes = Vec::new();
    for token in content {
        let logprob = token["logprob"].as_f64().unwrap();
        assert!(logprob <= 0.0, "{token}");
        let alternatives = token["top_logprobs"].as_array().unwrap();
        assert_eq!(alternatives.len(), top, "{token}");
        let values: Vec<f64> = alternatives
            .iter()
            .map(|alternative| alternative["logprob"].as_f64().unwrap())
            .collect();
        assert!(values.windows(2).all(|pair| pair[0] >= pair[1]), "{token}");
        assert!(values.iter().all(|value| *value <= 0.0));
        if greedy {
            assert_eq!(alternatives[0]["token"], token["token"], "{token}");
            assert_eq!(alternatives[0]["logprob"], token["logprob"]);
        }
        let token_bytes: Vec<u8> = serde_json::from_value(token["bytes"].clone()).unwrap();
        bytes.extend(token_bytes);
    }
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        choice["message"]["content"].as_str().unwrap()
    );
    content.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_model_serves_the_openai_api_and_answers_an_eval() {
    let Some(gguf) = common::model_file() else {
        return;
    };
    let server = ModelProcess::start(&gguf);
    let client = Client {
        http: reqwest::Client::new(),
        base_url: server.base_url.clone(),
    };

    let models: Value = client
        .http
        .get(format!("{}/models", client.base_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
    // The file says 8192, but candle's Llama has position tables for 4096.
    assert_eq!(models["data"][0]["max_model_len"], 4096);
    assert!(models["data"][0]["root"]
        .as_str()
        .unwrap()
        .starts_with("SmolLM2-135M-Instruct.Q4_1.gguf@sha256:b179c952"));

    // Cut off by max_tokens: `length`, exactly that many tokens, all reported.
    let cut = client
        .chat(
            json!({"model": MODEL, "messages": user("Write a long poem about the sea."),
                     "max_tokens": 5, "temperature": 0, "logprobs": true, "top_logprobs": 3}),
        )
        .await;
    assert_eq!(cut["choices"][0]["finish_reason"], "length", "{cut}");
    assert_eq!(check_chat_logprobs(&cut["choices"][0], 3, true), 5);
    assert_eq!(cut["usage"]["completion_tokens"], 5);
    let prompt_tokens = cut["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens > 10,
        "the chat template adds the system prompt: {cut}"
    );
    assert_eq!(cut["usage"]["total_tokens"], prompt_tokens + 5);

    // A short question ends by itself: `stop`, and the end token counts as a completion token.
    let short = client
        .chat(
            json!({"model": MODEL, "messages": user("What is the capital of France?"),
                     "max_tokens": 48, "temperature": 0, "logprobs": true, "top_logprobs": 2}),
        )
        .await;
    let choice = &short["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{short}");
    assert!(!choice["message"]["content"]
        .as_str()
        .unwrap()
        .trim()
        .is_empty());
    let tokens = check_chat_logprobs(choice, 2, true);
    assert_eq!(short["usage"]["completion_tokens"], tokens as u64 + 1);

    // Streaming gives the same greedy answer piece by piece, then the usage, then [DONE].
    let streamed = client
        .http
        .post(format!("{}/chat/completions", client.base_url))
        .json(
            &json!({"model": MODEL, "messages": user("What is the capital of France?"),
                      "max_tokens": 48, "temperature": 0, "stream": true,
                      "stream_options": {"include_usage": true}}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<&str> = streamed
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|event| serde_json::from_str(event).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, choice["message"]["content"].as_str().unwrap());
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage, &short["usage"]);

    // The same seed samples the same answer at temperature 1.
    let sampled = json!({"model": MODEL, "messages": user("Tell me about cats."),
                         "max_tokens": 12, "temperature": 1.0, "top_p": 0.9, "seed": 42});
    let first = client.chat(sampled.clone()).await;
    let second = client.chat(sampled).await;
    assert_eq!(
        first["choices"][0]["message"]["content"],
        second["choices"][0]["message"]["content"]
    );

    // Legacy completions: four parallel lists; a stop string ends the text before itself.
    let (status, counted) = client
        .post(
            "/completions",
            json!({"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 16,
                   "temperature": 0, "logprobs": 2, "stop": [","]}),
        )
        .await;
    assert_eq!(status, 200, "{counted}");
    let choice = &counted["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{counted}");
    let text = choice["text"].as_str().unwrap();
    assert!(!text.is_empty() && !text.contains(','), "{counted}");
    let logprobs = &choice["logprobs"];
    let listed = logprobs["tokens"].as_array().unwrap().len();
    assert!(listed >= 1);
    for list in ["token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(logprobs[list].as_array().unwrap().len(), listed, "{list}");
    }
    assert!(logprobs["top_logprobs"][0].as_object().unwrap().len() <= 2);

    // Refusals in OpenAI's shape.
    let (status, unknown) = client
        .post(
            "/chat/completions",
            json!({"model": "gpt-4", "messages": user("hi")}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(unknown["error"]["code"], "model_not_found");
    // One token past the context is refused before any work; the prompt's size comes from a
    // one-token answer to the same messages.
    let probe = client
        .chat(json!({"model": MODEL, "messages": user("hi"), "max_tokens": 1}))
        .await;
    let room = 4096 - probe["usage"]["prompt_tokens"].as_u64().unwrap();
    let (status, too_long) = client
        .post(
            "/chat/completions",
            json!({"model": MODEL, "messages": user("hi"), "max_tokens": room + 1}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(too_long["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 4096 tokens"));
    let (status, _) = client
        .post(
            "/chat/completions",
            json!({"model": MODEL, "messages": user("hi"),
                                         "logprobs": true, "top_logprobs": 21}),
        )
        .await;
    assert_eq!(status, 400);

    // Three long answers with two slots: one waits, and /metrics says so.
    let long = json!({"model": MODEL, "messages": user("Write a long story about a dragon."),
                      "max_tokens": 40, "temperature": 0});
    let requests: Vec<_> = (0..3)
        .map(|_| {
            let http = client.http.clone();
            let url = format!("{}/chat/completions", client.base_url);
            let body = long.clone();
            tokio::spawn(async move { http.post(url).json(&body).send().await.unwrap().status() })
        })
        .collect();
    let mut saw_queue = false;
    for _ in 0..400 {
        let metrics = client.metrics().await;
        if gauge(&metrics, "vllm:num_requests_running") == 2
            && gauge(&metrics, "vllm:num_requests_waiting") == 1
        {
            saw_queue = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for request in requests {
        assert_eq!(request.await.unwrap(), 200);
    }
    assert!(saw_queue, "two running and one waiting was never reported");
    let metrics = client.metrics().await;
    assert_eq!(gauge(&metrics, "vllm:num_requests_running"), 0);
    assert_eq!(gauge(&metrics, "vllm:num_requests_waiting"), 0);

    // vLLM's tokenizer endpoints (lm-eval's local-completions tokenizes through them), and a
    // prompt of token ids echoed with its logprobs.
    let root = client.base_url.trim_end_matches("/v1");
    let info: Value = client
        .http
        .get(format!("{root}/tokenizer_info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(info["eos_token"].is_string(), "{info}");
    let tokenized: Value = client
        .http
        .post(format!("{root}/tokenize"))
        .json(&json!({"prompt": "The capital of France is Paris", "add_special_tokens": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids = tokenized["tokens"].as_array().unwrap().clone();
    assert_eq!(tokenized["count"], ids.len());
    let detokenized: Value = client
        .http
        .post(format!("{root}/detokenize"))
        .json(&json!({"tokens": ids}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detokenized["prompt"], "The capital of France is Paris");
    let echoed: Value = client
        .http
        .post(format!("{}/completions", client.base_url))
        .json(
            &json!({"model": MODEL, "prompt": [ids], "echo": true, "logprobs": 1,
                      "max_tokens": 1, "temperature": 0}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let logprobs = &echoed["choices"][0]["logprobs"];
    assert_eq!(logprobs["tokens"].as_array().unwrap().len(), ids.len() + 1);
    assert!(logprobs["token_logprobs"][0].is_null());
    assert!(logprobs["token_logprobs"][1].as_f64().unwrap() < 0.0);
    assert!(echoed["choices"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("The capital of France is Paris"));
    assert_eq!(echoed["usage"]["completion_tokens"], 1);

    run_an_eval(&server.base_url).await;
    a_scale_judge_reads_the_models_points(&server.base_url).await;
    score_choices_by_likelihood(&server.base_url).await;
    score_texts_by_rolling_likelihood(&server.base_url).await;
    a_busy_server_is_fed_without_claiming_ahead(&server.base_url).await;
}

/// Forty questions against the server's two slots: the worker claims only what its limiter
/// lets out soon (two rounds of its limit, at most 8 here, which falls to the server's share
/// at the first `/metrics` reading), not everything at once; the time each answer waited
/// inside Arbiter is kept apart from its time at the server, and the run's load is sampled.
/// Before, the worker claimed all forty at once and their wait counted as latency.
async fn a_busy_server_is_fed_without_claiming_ahead(base_url: &str) {
    const QUESTIONS: usize = 40;
    let (_directory, store, checkpoint) = store_with_the_model(base_url).await;
    // The endpoint's ceiling at the limiter's starting value, so no reading order lets the
    // limit (and so the claims) grow past it.
    let endpoint = store.list_endpoints().await.unwrap()[0].id;
    store.set_endpoint_max_in_flight(endpoint, 8).await.unwrap();
    let dataset: String = (0..QUESTIONS)
        .map(|n| json!({"id": format!("q{n}"), "input": format!("What is {n} + {n}?"), "target": (2 * n).to_string()}).to_string() + "\n")
        .collect();
    let eval = greedy_eval(&store, "sums", &dataset, 6).await;
    let run = arbiter_testkit::pipeline::launch(store.as_ref(), eval, checkpoint).await;
    let mut most_claimed = 0;
    let progress = work_while_watching(&store, run, "busy-server", async || {
        let (_, claimed) = store.queue_depth().await.unwrap();
        most_claimed = most_claimed.max(claimed);
    })
    .await;
    assert_eq!(progress.status, RunStatus::Completed, "{progress:?}");
    assert!(
        most_claimed <= 16,
        "at most two rounds of the starting limit of 8 are claimed, not all {QUESTIONS}: {most_claimed}"
    );

    let (exported, rows) = export_run(store.as_ref(), run, ExportFormat::Jsonl, Vec::new())
        .await
        .unwrap();
    assert_eq!(rows, QUESTIONS as u64);
    let rows: Vec<Value> = String::from_utf8(exported)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let waited: Vec<i64> = rows
        .iter()
        .map(|row| {
            row["waited_ms"]
                .as_i64()
                .expect("every answer's wait is kept")
        })
        .collect();
    assert!(
        waited.iter().any(|&ms| ms > 0),
        "with more claimed than the server runs, some answers wait for a slot: {waited:?}"
    );

    let samples = store.run_load(run).await.unwrap();
    assert!(!samples.is_empty(), "the worker samples the run's load");
    assert!(
        samples
            .iter()
            .all(|sample| sample.claimed <= 16 && sample.sending <= sample.claimed),
        "{samples:?}"
    );
    assert_eq!(
        samples.iter().map(|sample| sample.answers).sum::<i64>(),
        QUESTIONS as i64,
        "each answer is counted in one sample: {samples:?}"
    );
    assert!(
        samples.iter().any(|sample| sample.server_waiting.is_some()),
        "the server's queue is read from its /metrics: {samples:?}"
    );
}

/// The model as a judge on a five-point scale, asked as Arbiter asks a scale judge (twenty
/// alternatives at each token). Points are one token each in its vocabulary (the digits are
/// listed among the first token's alternatives), but a 135M model does not put a point first:
/// it starts "The answer is …", which is read as no point (a judge failure that sends the item
/// to humans), never as the point later in the reply.
async fn a_scale_judge_reads_the_models_points(base_url: &str) {
    arbiter_testkit::egress::allow_loopback();
    let scale = JudgeScale {
        rubric_id: 1,
        rubric_name: "quality".into(),
        rubric_version: 1,
        dimension: "helpful".into(),
        points: 5,
        pass_at_least: 4,
    };
    let prompt = "Rate how helpful the answer is on a scale of 1 to 5. Reply with one digit.\n\n\
                  Question: What is the capital of France?\n\
                  Answer: The capital of France is Paris.";
    let request = GenerationRequest {
        top_logprobs: Some(SCALE_TOP_LOGPROBS),
        ..GenerationRequest::user_message(MODEL, prompt.into(), 6, 0.0, 0)
    };
    let generation = ModelClient::new()
        .attempt(base_url, None, &request, Duration::from_secs(120))
        .await
        .unwrap();
    let tokens = logprobs::decode(generation.logprobs.as_deref().unwrap()).unwrap();
    assert_eq!(tokens[0].top.len(), usize::from(SCALE_TOP_LOGPROBS));
    let points_listed = tokens[0]
        .top
        .iter()
        .filter(|alternative| ["1", "2", "3", "4", "5"].contains(&&*alternative.text()))
        .count();
    assert!(points_listed >= 2, "{:?}", tokens[0].top);
    assert!(
        generation.output.starts_with("The answer is"),
        "{:?}",
        generation.output
    );
    let (reading, score) = read_reply(Some(&scale), &generation.output, Some(&tokens));
    assert_eq!(
        (reading.pass, score),
        (None, None),
        "{:?}",
        generation.output
    );
}

/// Two texts scored by rolling log-likelihood in 16-token requests: the server tokenises, the
/// launch reads the prefix token from its `/tokenizer_info` as lm-eval does, every token is
/// scored once, and a text that fits one window scores what a direct echo of it says.
async fn score_texts_by_rolling_likelihood(base_url: &str) {
    use arbiter_domain::rolling::RollingSpec;
    use arbiter_testkit::pipeline::{launch, work_until_complete};
    let (_directory, store, checkpoint) = store_with_the_model(base_url).await;
    let short = "The cat sat on the mat.";
    let long = "The river leaves the hills in early spring, brown with melted snow. By summer \
                it runs clear over pale stones, and children wade across it where the old ford \
                used to be.";
    let dataset = [
        json!({"id": "short", "text": short}),
        json!({"id": "long", "text": long}),
    ];
    let eval = scoring_eval(
        store.as_ref(),
        "prose",
        &dataset,
        "{{ text }}",
        arbiter_engine::catalog::EvalOptions {
            api: arbiter_domain::prompt::Api::Completions,
            mapping: Some(arbiter_domain::fields::FieldMapping {
                input: "text".into(),
                target: None,
                ..Default::default()
            }),
            rolling: Some(RollingSpec {
                max_length: 16,
                ..RollingSpec::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let run = launch(store.as_ref(), eval, checkpoint).await;
    let progress = work_until_complete(store.clone(), &[run], model_worker()).await;
    assert_eq!(
        (progress[0].scored, progress[0].errors),
        (2, 0),
        "{:?}",
        progress[0]
    );
    let prefix = store
        .run_manifest(run)
        .await
        .unwrap()
        .unwrap()
        .rolling_prefix_token
        .expect("the launch froze a prefix token");
    let http = reqwest::Client::new();
    let root = base_url.trim_end_matches("/v1");
    let tokenize = |text: &str| {
        let request = http
            .post(format!("{root}/tokenize"))
            .json(&json!({"prompt": text, "add_special_tokens": false}));
        async move {
            let answer: Value = request.send().await.unwrap().json().await.unwrap();
            answer["tokens"].as_array().unwrap().clone()
        }
    };
    let scores = store.run_rolling_scores(run).await.unwrap();
    for (case, _, score) in &scores {
        let text = if case == "short" { short } else { long };
        assert_eq!(score.tokens, tokenize(text).await.len() as u64, "{case}");
        assert_eq!(
            score.windows,
            score.tokens.div_ceil(14),
            "{case}: {score:?}"
        );
        assert!(score.logprob < 0.0 && score.logprob.is_finite(), "{case}");
        assert_eq!(score.bytes, text.len() as u64);
    }
    let short_score = &scores
        .iter()
        .find(|(case, _, _)| case == "short")
        .unwrap()
        .2;
    assert_eq!(short_score.windows, 1);
    let mut prompt = vec![json!(prefix)];
    prompt.extend(tokenize(short).await);
    let echoed: Value = http
        .post(format!("{base_url}/completions"))
        .json(
            &json!({"model": MODEL, "prompt": [prompt.clone()], "echo": true, "logprobs": 1,
                      "max_tokens": 1, "temperature": 0}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let direct: f64 = echoed["choices"][0]["logprobs"]["token_logprobs"]
        .as_array()
        .unwrap()[1..prompt.len()]
        .iter()
        .map(|logprob| logprob.as_f64().unwrap())
        .sum();
    assert!(
        (short_score.logprob - direct).abs() < 1e-9,
        "{short_score:?} against {direct}"
    );
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), run)
        .await
        .unwrap();
    let bits = report.rolling.unwrap().bits_per_byte.unwrap();
    assert!(bits > 0.0 && bits < 8.0, "{bits}");
}

/// Three multiple-choice questions scored by the likelihood of each choice, through the
/// model's echoed prompt logprobs (the launch's probe passes on this server).
async fn score_choices_by_likelihood(base_url: &str) {
    use arbiter_domain::likelihood::LikelihoodSpec;
    use arbiter_testkit::pipeline::{launch, work_until_complete};
    let (_directory, store, checkpoint) = store_with_the_model(base_url).await;
    let dataset = [
        json!({"id": "france", "question": "What is the capital of France?", "choices": ["London", "Paris", "Tokyo"], "answer": 1}),
        json!({"id": "sky", "question": "What color is the sky on a clear day?", "choices": ["blue", "green"], "answer": 0}),
        json!({"id": "sum", "question": "What is 2 + 2?", "choices": ["4", "7", "22"], "answer": 0}),
    ];
    let eval = scoring_eval(
        store.as_ref(),
        "mc",
        &dataset,
        "Question: {{ question }}\nAnswer:",
        arbiter_engine::catalog::EvalOptions {
            api: arbiter_domain::prompt::Api::Completions,
            mapping: Some(arbiter_domain::fields::FieldMapping {
                input: "question".into(),
                target: Some("answer".into()),
                choices: Some("choices".into()),
                ..Default::default()
            }),
            likelihood: Some(LikelihoodSpec::default()),
            ..Default::default()
        },
    )
    .await;
    let run = launch(store.as_ref(), eval, checkpoint).await;
    let progress = work_until_complete(store.clone(), &[run], model_worker()).await;
    assert_eq!(
        (progress[0].done, progress[0].errors),
        (3, 0),
        "{:?}",
        progress[0]
    );
    let scores = store.run_choice_scores(run).await.unwrap();
    assert_eq!(scores.len(), 3);
    for (case, _, scored) in &scores {
        for choice in &scored.choices {
            assert!(choice.score.tokens >= 1, "{case}: {choice:?}");
            assert!(choice.score.logprob < 0.0 && choice.score.logprob.is_finite());
        }
    }
    let france = &scores
        .iter()
        .find(|(case, _, _)| case == "france")
        .unwrap()
        .2;
    assert_eq!(
        france.correct(arbiter_domain::likelihood::Selection::Raw),
        Some(true),
        "{france:?}"
    );
}

/// Uploads `items` (as JSON Lines) and defines an eval over it that scores instead of
/// generating (one token at most), with `options` saying how.
async fn scoring_eval(
    store: &dyn Store,
    name: &str,
    items: &[Value],
    template: &str,
    options: arbiter_engine::catalog::EvalOptions,
) -> arbiter_domain::ids::EvalId {
    let dataset: String = items.iter().map(|item| item.to_string() + "\n").collect();
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        name,
        &format!("{name}.jsonl"),
        dataset.as_bytes(),
        None,
    )
    .await
    .unwrap();
    arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: name.into(),
            dataset_id: revision.dataset_id,
            prompt_template: template.into(),
            max_tokens: 1,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: String::new(),
            options,
        },
        None,
    )
    .await
    .unwrap()
}

/// A fresh SQLite store (in a folder kept while the returned guard lives) with the model
/// server registered as a checkpoint.
async fn store_with_the_model(
    base_url: &str,
) -> (
    tempfile::TempDir,
    Arc<dyn Store>,
    arbiter_domain::ids::CheckpointId,
) {
    arbiter_testkit::egress::allow_loopback();
    let directory = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
    let store: Arc<dyn Store> = Database::open(&url).await.unwrap().store();
    let checkpoint = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &CheckpointForm {
            name: "smollm2/135m".into(),
            endpoint_url: base_url.into(),
            model: MODEL.into(),
            ..CheckpointForm::default()
        },
        None,
    )
    .await
    .unwrap();
    (directory, store, checkpoint)
}

/// An eval of `jsonl` with the `{input}` prompt, greedy answers of at most `max_tokens`
/// tokens and the exact-match grader.
async fn greedy_eval(
    store: &Arc<dyn Store>,
    name: &str,
    jsonl: &str,
    max_tokens: u32,
) -> arbiter_domain::ids::EvalId {
    let file = format!("{name}.jsonl");
    let revision = arbiter_engine::catalog::upload_dataset(
        store.as_ref(),
        name,
        &file,
        jsonl.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let form = EvalForm {
        name: name.into(),
        dataset_id: revision.dataset_id,
        prompt_template: "{input}".into(),
        max_tokens,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: String::new(),
        options: arbiter_engine::catalog::EvalOptions::default(),
    };
    arbiter_engine::catalog::define_eval(store.as_ref(), &form, None)
        .await
        .unwrap()
}

/// The test worker, with time for a CPU model's answers when other tests share the CPU (the
/// test worker's two-second attempts time out there).
fn model_worker() -> WorkerConfig {
    let mut config = arbiter_testkit::pipeline::test_worker("model");
    config.retry.attempt_timeout = Duration::from_secs(60);
    config
}

/// Runs a worker named `name` until `run` completes (or five minutes pass), calling
/// `each_poll` between readings of its progress; returns the last reading.
async fn work_while_watching(
    store: &Arc<dyn Store>,
    run: arbiter_domain::ids::RunId,
    name: &str,
    mut each_poll: impl AsyncFnMut(),
) -> arbiter_domain::run::RunProgress {
    let (stop, shutdown) = watch::channel(false);
    let mut config = WorkerConfig::named(name);
    config.idle_poll = Duration::from_millis(50);
    let worker = tokio::spawn(run_worker(store.clone(), config, shutdown));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let progress = loop {
        each_poll().await;
        let progress = arbiter_engine::runs::run_progress(store.as_ref(), run)
            .await
            .unwrap();
        if progress.status == RunStatus::Completed || tokio::time::Instant::now() > deadline {
            break progress;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.send(true).unwrap();
    worker.await.unwrap();
    progress
}

/// Five questions through Arbiter's scheduler and workers, with logprobs stored.
async fn run_an_eval(base_url: &str) {
    const MAX_TOKENS: i64 = 24;
    let (_directory, store, checkpoint) = store_with_the_model(base_url).await;
    let dataset: String = [
        ("q1", "What is the capital of France?", "Paris"),
        ("q2", "What is 2 + 2?", "4"),
        ("q3", "What color is the sky on a clear day?", "blue"),
        (
            "q4",
            "Write a long essay about the history of Rome.",
            "Rome",
        ),
        ("q5", "Name a fruit that is yellow.", "banana"),
    ]
    .iter()
    .map(|(id, input, target)| {
        json!({"id": id, "input": input, "target": target}).to_string() + "\n"
    })
    .collect();
    let eval = greedy_eval(&store, "tiny", &dataset, MAX_TOKENS as u32).await;
    // The model also judges the answers the exact-match grader cannot pass, with the demo's
    // one-word rubric; its confidence comes from its own logprobs.
    let judge = grading::define_judge(
        store.as_ref(),
        &JudgeForm {
            name: "smollm2-judge".into(),
            checkpoint_id: checkpoint,
            rubric: server::demo::REAL_JUDGE_RUBRIC.into(),
            max_tokens: 4,
            scale_rubric: String::new(),
            scale_dimension: String::new(),
            scale_pass_at_least: String::new(),
            pairwise: false,
            batch_items: 1,
        },
        None,
    )
    .await
    .unwrap();
    let policy = PolicyForm {
        cheap_judge: judge.id.to_string(),
        accept_threshold: "0.9".into(),
        escalate_threshold: "0.75".into(),
        audit_rate: "0".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0".into(),
        ..PolicyForm::default()
    };
    grading::save_policy(store.as_ref(), eval, &policy, None)
        .await
        .unwrap();
    let run = arbiter_testkit::pipeline::launch(store.as_ref(), eval, checkpoint).await;
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    assert!(
        manifest
            .fingerprint
            .served_model
            .as_deref()
            .unwrap_or_default()
            .contains("sha256:b179c952"),
        "{:?}",
        manifest.fingerprint
    );

    let progress = work_while_watching(&store, run, "real-model", async || {}).await;
    assert_eq!(progress.status, RunStatus::Completed, "{progress:?}");
    assert_eq!((progress.done, progress.errors), (5, 0), "{progress:?}");

    let (exported, rows) = export_run(store.as_ref(), run, ExportFormat::Jsonl, Vec::new())
        .await
        .unwrap();
    assert_eq!(rows, 5);
    let mut lengths = 0;
    for line in String::from_utf8(exported).unwrap().lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        assert!(!row["output"].as_str().unwrap().trim().is_empty(), "{row}");
        let completion_tokens = row["completion_tokens"].as_i64().unwrap();
        let finished_by_length = row["finish_reason"] == "length";
        assert_eq!(finished_by_length, completion_tokens == MAX_TOKENS, "{row}");
        lengths += usize::from(finished_by_length);
        let stored = store
            .generation_logprobs(IdentityId(row["work_item_id"].as_i64().unwrap()))
            .await
            .unwrap()
            .expect("logprobs are stored");
        let tokens = logprobs::decode(&stored).unwrap();
        // The end token is counted in usage but is not text, so it has no logprob entry.
        let expected = completion_tokens - i64::from(!finished_by_length);
        assert_eq!(tokens.len() as i64, expected, "{row}");
        for token in &tokens {
            assert!(token.logprob <= 0.0);
            // Arbiter asks for five alternatives; greedy decoding chose the first.
            assert_eq!(token.top.len(), 5);
            assert_eq!(token.top[0].bytes, token.bytes);
            assert!(token
                .top
                .windows(2)
                .all(|pair| pair[0].logprob >= pair[1].logprob));
        }
        let spelled: Vec<u8> = tokens
            .iter()
            .flat_map(|token| token.bytes.clone())
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&spelled),
            row["output"].as_str().unwrap()
        );
    }
    // The essay question runs into the limit; the short ones do not all do so.
    assert!(
        (1..5).contains(&lengths),
        "{lengths} answers hit max_tokens"
    );

    // The judge's verdicts carry confidences read from its logprobs.
    let items: Vec<IdentityId> = String::from_utf8(
        export_run(store.as_ref(), run, ExportFormat::Jsonl, Vec::new())
            .await
            .unwrap()
            .0,
    )
    .unwrap()
    .lines()
    .map(|line| {
        IdentityId(
            serde_json::from_str::<Value>(line).unwrap()["work_item_id"]
                .as_i64()
                .unwrap(),
        )
    })
    .collect();
    let judged: Vec<_> = store
        .diff_sides(&items)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|side| side.grades)
        .filter(|grade| grade.stage == "cheap_judge")
        .collect();
    assert!(!judged.is_empty(), "no answer reached the judge");
    let confident: Vec<f64> = judged.iter().filter_map(|grade| grade.confidence).collect();
    assert!(
        !confident.is_empty(),
        "no judge verdict had a confidence: {judged:?}"
    );
    assert!(
        confident.iter().all(|c| *c > 0.0 && *c <= 1.0),
        "{confident:?}"
    );
}

/// The local launcher serves a checkpoint with the bundled model for real: `arbiter model
/// serve` started from its command template, healthy, the serving canary read from it (a
/// perplexity a small instruct model has on plain prose, greedy answers, a chat answer), and
/// retired once idle with its process stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_served_by_the_bundled_model_answers_its_canary_and_retires() {
    use arbiter_domain::serving::launch::{LaunchPolicy, LaunchState};
    use arbiter_domain::serving::ServingEngine;
    use arbiter_engine::serving::config::LocalLauncherConfig;
    use arbiter_engine::serving::local::LocalLauncher;
    let Some(gguf) = common::model_file() else {
        return;
    };
    let backend = arbiter_testkit::backend::TestBackend::sqlite().await;
    let store = backend.database.store();
    let logs = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut launcher = LocalLauncher::new(LocalLauncherConfig {
        id: "model".into(),
        host: "127.0.0.1".into(),
        ports: (port, port),
        log_dir: logs.path().to_path_buf(),
        policy: LaunchPolicy {
            health_timeout_ms: 120_000,
            idle_ms: 0,
            max_restarts: 0,
        },
        gpus: 0,
        engines: std::collections::BTreeMap::from([(
            ServingEngine::ArbiterModel,
            format!(
                "'{}' model serve --gguf {{path}} --name {{model}} --addr {{host}}:{{port}}",
                env!("CARGO_BIN_EXE_arbiter")
            ),
        )]),
    });
    launcher.round(store.as_ref()).await.unwrap();
    let registered = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &arbiter_engine::suites::Announcement {
            name: "smollm-served".into(),
            model: "smollm".into(),
            serve: Some(arbiter_engine::serving::ServeRequest {
                engine: "arbiter_model".into(),
                path: gguf.display().to_string(),
                plan: Default::default(),
            }),
            trigger_suites: Some(false),
            ..Default::default()
        },
        None,
    )
    .await
    .unwrap();
    // The first run on it requests its servers; cancelled once they are healthy (no worker
    // answers it here), it leaves them idle, to be retired.
    let revision = arbiter_engine::catalog::upload_dataset(
        store.as_ref(),
        "served-one",
        "one.jsonl",
        br#"{"id":"1","input":"Say hi.","target":"hi"}"#,
        None,
    )
    .await
    .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &arbiter_testkit::fixtures::eval_form("served-one", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let run = arbiter_engine::runs::launch_run(
        store.as_ref(),
        eval,
        registered.checkpoint_id,
        arbiter_domain::run::Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
    .run_id;
    let launch = || async {
        store
            .list_launches(Some(registered.checkpoint_id), 1)
            .await
            .unwrap()
            .remove(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while launch().await.state != LaunchState::Retired {
        if launch().await.state == LaunchState::Healthy {
            store
                .set_run_status(run, &[RunStatus::Running], RunStatus::Cancelled)
                .await
                .unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not retired: {:?}",
            launch().await
        );
        launcher.round(store.as_ref()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let served = launch().await;
    let reading = served.canary.clone().expect("the canary was read");
    let perplexity = reading
        .perplexity
        .expect("the model scores the canary text");
    // Plain prose for a 135M-parameter instruct model: far from 1, far from broken.
    assert!((2.0..60.0).contains(&perplexity), "{reading:?}");
    assert!(reading.answers[0].contains("Paris"), "{reading:?}");
    assert_eq!(reading.chat_error, None);
    let times = served.startup(arbiter_store::now_ms());
    assert!(times.load_ms.unwrap() > 0, "{times:?}");
    println!(
        "bundled model served: start-up {} ms (load {} ms), canary perplexity {perplexity:.2}, answers {:?}",
        times.startup_ms.unwrap(),
        times.load_ms.unwrap(),
        reading.answers
    );
    assert!(
        reqwest::get(format!("http://127.0.0.1:{port}/health"))
            .await
            .is_err(),
        "the model server stopped"
    );
    backend.tear_down().await;
}
