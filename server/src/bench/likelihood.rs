//! `arbiter bench likelihood`: multiple choice scored by likelihood against the zero-latency
//! simulator: four scoring requests per item (each echoing the prompt's logprobs), sent side by
//! side to one replica, the answer read from the scores. Printed: items and requests per
//! second and Arbiter's CPU per item, then the same items asked as a generated lettered answer,
//! back to back, for the ratio.

use super::pipeline::{worker, Bench, RunFigures};
use super::support::{cpu_seconds, sim_requests, start_sim};
use arbiter_domain::fields::FieldMapping;
use arbiter_domain::ids::{CheckpointId, DatasetId};
use arbiter_domain::likelihood::LikelihoodSpec;
use arbiter_domain::prompt::Api;
use arbiter_engine::catalog::{EvalForm, EvalOptions};

/// MMLU-shaped items: a question, four choices, the right one's index.
fn items(count: usize) -> Vec<u8> {
    let mut jsonl = Vec::with_capacity(count * 140);
    for index in 0..count {
        let sum = index % 97 + index % 89;
        let line = serde_json::json!({
            "id": format!("mc-{index:07}"),
            "question": format!("Question {index}: what is {} + {}?", index % 97, index % 89),
            "choices": [sum.to_string(), (sum + 1).to_string(), (sum + 10).to_string(), (sum * 2 + 3).to_string()],
            "answer": index % 4,
        });
        jsonl.extend_from_slice(line.to_string().as_bytes());
        jsonl.push(b'\n');
    }
    jsonl
}

fn form(name: &str, dataset_id: DatasetId, likelihood: bool) -> EvalForm {
    EvalForm {
        name: name.into(),
        dataset_id,
        prompt_template: if likelihood {
            "Question: {{ question }}\nAnswer:".into()
        } else {
            "{{ question }}\n{{ choices | lettered }}\nAnswer with the letter.".into()
        },
        max_tokens: 32,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: String::new(),
        options: EvalOptions {
            api: if likelihood {
                Api::Completions
            } else {
                Api::Chat
            },
            mapping: Some(FieldMapping {
                input: "question".into(),
                target: Some("answer".into()),
                choices: Some("choices".into()),
                category: None,
                ..FieldMapping::default()
            }),
            likelihood: likelihood.then(LikelihoodSpec::default),
            ..EvalOptions::default()
        },
    }
}

async fn timed(
    bench: &Bench,
    eval: arbiter_domain::ids::EvalId,
    checkpoint: CheckpointId,
    label: &str,
) -> anyhow::Result<f64> {
    let cpu_before = cpu_seconds();
    let RunFigures {
        expansion,
        elapsed,
        done,
        ..
    } = bench.run(eval, checkpoint, worker(label, 256)).await?;
    let cpu = cpu_seconds() - cpu_before;
    let rate = done as f64 / elapsed;
    println!(
        "{label}: {done} items in {elapsed:.2} s from launch (the launch {expansion:.2} s)  ->  {rate:.0} items/s; Arbiter CPU {:.1} µs per item",
        cpu * 1e6 / done as f64
    );
    Ok(rate)
}

pub(crate) async fn likelihood(count: usize) -> anyhow::Result<()> {
    println!("== likelihood: {count} four-choice items, zero-latency simulator, SQLite");
    let sim = start_sim(&["--latency-ms-min", "0", "--latency-ms-max", "0"]).await?;
    let bench = Bench::sqlite().await?;
    let (dataset, checkpoint) = bench
        .prepare(&sim, "likelihood", &items(count), 1024)
        .await?;
    let store = bench.store.clone();
    let define = |name: &'static str, likelihood: bool| {
        let store = store.clone();
        async move {
            arbiter_engine::catalog::define_eval(
                store.as_ref(),
                &form(name, dataset, likelihood),
                None,
            )
            .await
            .map_err(|err| anyhow::anyhow!("eval: {err}"))
        }
    };
    let scored = define("by likelihood", true).await?;
    let before = sim_requests(&sim).await?;
    let scored_rate = timed(&bench, scored, checkpoint, "by likelihood").await?;
    let requests = sim_requests(&sim).await? - before;
    println!(
        "scoring requests: {requests} ({:.1} per item, the launch's probe included)",
        requests as f64 / count as f64
    );
    let generated = define("generated letter", false).await?;
    let generated_rate = timed(&bench, generated, checkpoint, "generated letter").await?;
    println!(
        "likelihood items/s are {:.2}x a generated answer's (each item is four requests)",
        scored_rate / generated_rate
    );
    Ok(())
}
