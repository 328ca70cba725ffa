//! `arbiter bench judge-batches`: the demo's answers judged twice by one judge, one answer
//! per call and then several per call, and what batching changed: calls, tokens, cost,
//! time, and how often the two verdicts agree.
//!
//! The judge is the demo's simulated judge, or any OpenAI-compatible endpoint given with
//! `--endpoint` and `--model` (for instance `arbiter model serve` on the bundled model). Both
//! judges are priced as the demo's cheap judge, so their costs compare token for token.

use super::pipeline::{worker, Bench};
use super::support::start_sim;
use crate::demo::{DEMO_CHECKPOINTS, SAMPLE_DATASET};
use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
use arbiter_domain::ids::CheckpointId;
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use std::collections::HashMap;

/// What the bench is told: the judge (`None`: the demo's simulated judge) and the batch size.
pub struct JudgeUnderTest {
    pub endpoint: Option<(String, String)>,
    pub batch_items: u32,
}

pub async fn run(repetitions: usize, judge: JudgeUnderTest) -> anyhow::Result<()> {
    let zero_latency = ["--latency-ms-min", "0", "--latency-ms-max", "0"];
    let sim = start_sim(&[&zero_latency[..], &["--model", "sim-ckpt-a:0.8:0.08"]].concat()).await?;
    // The judge apart from the answers, so its request count is the judge's calls.
    let judge_sim;
    let (judge_url, judge_model) = match judge.endpoint.clone() {
        Some(endpoint) => endpoint,
        None => {
            judge_sim =
                start_sim(&[&zero_latency[..], &["--model", "judge:sim-judge:0.6:1.0"]].concat())
                    .await?;
            (judge_sim.base_url.clone(), "sim-judge".into())
        }
    };
    println!(
        "== judge-batches: the demo dataset x {repetitions}, judged by `{judge_model}` at {judge_url}, 1 and then {} answers per call",
        judge.batch_items
    );
    let bench = Bench::sqlite().await?;
    let store = bench.store.as_ref();
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "qa-basic",
        "qa-basic.jsonl",
        SAMPLE_DATASET,
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("dataset: {err}"))?;
    let (_, _, input_price, output_price) = DEMO_CHECKPOINTS[2];
    let register = |name: &str, url: &str, model: &str| CheckpointForm {
        name: name.into(),
        endpoint_url: url.into(),
        model: model.into(),
        input_usd_per_mtok: input_price.into(),
        output_usd_per_mtok: output_price.into(),
        ..CheckpointForm::default()
    };
    let answerer = arbiter_engine::catalog::register_checkpoint(
        store,
        &register("answerer", &sim.base_url, "sim-ckpt-a"),
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("checkpoint: {err}"))?;
    let judge_checkpoint = arbiter_engine::catalog::register_checkpoint(
        store,
        &register("judge", &judge_url, &judge_model),
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("judge checkpoint: {err}"))?;
    let mut measured = Vec::new();
    for batch_items in [1, judge.batch_items] {
        measured.push(
            judged(
                &bench,
                (revision.dataset_id, repetitions),
                (answerer, judge_checkpoint, &judge_url),
                batch_items,
            )
            .await?,
        );
    }
    let (one, batched) = (&measured[0], &measured[1]);
    let tokens = |count: Option<f64>| count.map_or("?".to_string(), |count| format!("{count:.0}"));
    for figures in [one, batched] {
        println!(
            "{:>2} per call: {:>6.2} s, {:>5.0} judge calls, {} prompt + {} completion tokens ({} of prompt tokens from the prefix cache), ${:.6}, {} decided by the judge, {} left undecided",
            figures.batch_items,
            figures.seconds,
            figures.calls,
            tokens(figures.prompt_tokens),
            tokens(figures.completion_tokens),
            figures
                .prefix_hit_rate
                .map_or("?".to_string(), |rate| format!("{:.0}%", rate * 100.0)),
            figures.usd,
            figures.decided,
            figures.verdicts.len() as i64 - figures.decided,
        );
    }
    let both: Vec<bool> = one
        .verdicts
        .iter()
        .filter_map(|(key, (verdict, stage))| {
            let (other, other_stage) = batched.verdicts.get(key)?;
            (stage == "cheap_judge" && other_stage == "cheap_judge").then(|| verdict == other)
        })
        .collect();
    let agreeing = both.iter().filter(|same| **same).count();
    println!(
        "agreement with one-answer calls: {agreeing} of {} answers both decided ({:.1}%); batched cost {:.3} of one-answer cost, {:.3} of its calls",
        both.len(),
        100.0 * agreeing as f64 / both.len().max(1) as f64,
        batched.usd / one.usd.max(f64::MIN_POSITIVE),
        batched.calls / one.calls.max(1.0),
    );
    println!(
        "{} of the batched verdicts came from a batch reply's line; the rest were asked alone",
        batched.from_lines
    );
    Ok(())
}

/// One judged run's figures.
struct Judged {
    batch_items: u32,
    seconds: f64,
    calls: f64,
    prompt_tokens: Option<f64>,
    completion_tokens: Option<f64>,
    /// The share of the judge's prompt tokens its server found in its prefix cache.
    prefix_hit_rate: Option<f64>,
    usd: f64,
    decided: i64,
    from_lines: i64,
    /// (case, repetition) → (verdict, deciding stage).
    verdicts: HashMap<(String, i64), (String, String)>,
}

async fn judged(
    bench: &Bench,
    (dataset_id, repetitions): (arbiter_domain::ids::DatasetId, usize),
    (answerer, judge_checkpoint, judge_url): (CheckpointId, CheckpointId, &str),
    batch_items: u32,
) -> anyhow::Result<Judged> {
    let store = bench.store.as_ref();
    let judge = grading::define_judge(
        store,
        &JudgeForm {
            name: format!("judge-{batch_items}-per-call"),
            checkpoint_id: judge_checkpoint,
            rubric: DEFAULT_RUBRIC.into(),
            max_tokens: 64,
            scale_rubric: String::new(),
            scale_dimension: String::new(),
            scale_pass_at_least: String::new(),
            pairwise: false,
            batch_items: i64::from(batch_items),
        },
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("judge: {err}"))?;
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: format!("judged {batch_items} per call"),
            dataset_id,
            prompt_template: "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {input}".into(),
            max_tokens: 128,
            temperature: 0.0,
            repetitions: u32::try_from(repetitions)?,
            seed: 0,
            // Never decides, so every answer reaches the judge.
            grader: r#"{"kind": "regex_match", "pattern": "NEVER-IN-AN-ANSWER (\\d+)"}"#.into(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("eval: {err}"))?;
    // Every verdict the judge gives stands, so each answer's verdict is the judge's.
    let policy = PolicyForm {
        cheap_judge: judge.id.to_string(),
        accept_threshold: "0".into(),
        escalate_threshold: "0".into(),
        audit_rate: "0".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0".into(),
        ..PolicyForm::default()
    };
    grading::save_policy(store, eval, &policy, None)
        .await
        .map_err(|err| anyhow::anyhow!("policy: {err}"))?;
    let before = judge_counters(judge_url).await?;
    let figures = bench
        .run(eval, answerer, worker("bench-judge-batches", 256))
        .await?;
    let after = judge_counters(judge_url).await?;
    let difference = |after: Option<f64>, before: Option<f64>| Some(after? - before?);
    let costs = store.run_costs(figures.run_id).await?;
    let results = store.run_results(figures.run_id, i64::MAX).await?;
    let decided = results
        .iter()
        .filter(|row| row.decided_by.as_deref() == Some("cheap_judge"))
        .count() as i64;
    let from_lines = results
        .iter()
        .filter(|row| row.grade_reason.starts_with("Item "))
        .count() as i64;
    Ok(Judged {
        batch_items,
        seconds: figures.elapsed,
        calls: after.calls - before.calls,
        prompt_tokens: difference(after.prompt_tokens, before.prompt_tokens),
        completion_tokens: difference(after.completion_tokens, before.completion_tokens),
        prefix_hit_rate: difference(after.prefix_hits, before.prefix_hits).and_then(|hits| {
            let queried = difference(after.prefix_queried, before.prefix_queried)?;
            (queried > 0.0).then(|| hits / queried)
        }),
        usd: costs.judging_usd,
        decided,
        from_lines,
        verdicts: results
            .into_iter()
            .map(|row| {
                (
                    (row.case_id, row.repetition),
                    (row.verdict, row.decided_by.unwrap_or_default()),
                )
            })
            .collect(),
    })
}

/// The judge endpoint's counters from its `/metrics`: requests (vLLM's
/// `request_success_total`, or the simulator's request count), prompt and completion tokens
/// (`None` where the server does not count them).
async fn judge_counters(judge_url: &str) -> anyhow::Result<Counters> {
    use arbiter_engine::dispatch::prometheus_sum;
    let root = judge_url.trim_end_matches('/').trim_end_matches("/v1");
    let text = reqwest::get(format!("{root}/metrics"))
        .await?
        .text()
        .await?;
    let calls = prometheus_sum(&text, "vllm:request_success_total")
        .or_else(|| prometheus_sum(&text, "arbiter_sim_requests_total"))
        .ok_or_else(|| anyhow::anyhow!("{root}/metrics counts no requests"))?;
    Ok(Counters {
        calls,
        prompt_tokens: prometheus_sum(&text, "vllm:prompt_tokens_total"),
        completion_tokens: prometheus_sum(&text, "vllm:generation_tokens_total"),
        prefix_queried: prometheus_sum(&text, "vllm:prefix_cache_queries_total"),
        prefix_hits: prometheus_sum(&text, "vllm:prefix_cache_hits_total"),
    })
}

/// A judge server's counters; those it does not report are `None`.
struct Counters {
    calls: f64,
    prompt_tokens: Option<f64>,
    completion_tokens: Option<f64>,
    prefix_queried: Option<f64>,
    prefix_hits: Option<f64>,
}
