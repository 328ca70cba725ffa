//! Several answers per judge call, end to end with `arbiter sim` as the model under test and
//! as the judge: a judge grading eight answers per call gives every answer the verdict a
//! judge grading one per call gives it, for a fraction of the calls and the cost; an answer
//! the batch reply skips is asked again alone, and only those are; a re-run is free.

use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
use arbiter_domain::ids::{CheckpointId, RunId};
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use arbiter_sim::{SimConfig, SimModel, SimModelKind};
use arbiter_store::Store;
use arbiter_testkit::pipeline::*;
use std::collections::HashMap;

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");
/// Never decides, so every answer reaches the judge.
const UNDECIDING_GRADER: &str =
    r#"{"kind": "regex_match", "pattern": "NEVER-IN-AN-ANSWER (\\d+)"}"#;
const REPETITIONS: u32 = 5;
const ITEMS: i64 = 60 * REPETITIONS as i64;
const BATCH: i64 = 8;

fn sim(model: SimModel) -> SimConfig {
    SimConfig {
        models: vec![model],
        latency_ms_min: 1,
        latency_ms_max: 3,
        ..SimConfig::demo()
    }
}

/// Generation requests a simulator has received (`arbiter_sim_requests_total`).
async fn requests(endpoint: &str) -> u64 {
    let url = format!("{}/metrics", endpoint.trim_end_matches("/v1"));
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("arbiter_sim_requests_total "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap()
}

async fn checkpoint(store: &dyn Store, name: &str, endpoint: &str, model: &str) -> CheckpointId {
    let form = CheckpointForm {
        name: name.into(),
        endpoint_url: endpoint.into(),
        model: model.into(),
        input_usd_per_mtok: "1".into(),
        output_usd_per_mtok: "1".into(),
        ..CheckpointForm::default()
    };
    arbiter_engine::catalog::register_checkpoint(store, &form, None)
        .await
        .unwrap()
}

/// The default rubric after grading guidelines, as rubrics in use have: the part of every
/// one-item prompt a batch sends once.
fn rubric() -> String {
    let guideline = "Judge only the final answer line, not the working before it. An answer \
        that names the reference in other words, with other capitals or with surrounding \
        punctuation is correct. An answer that gives several candidates is incorrect even when \
        one of them is the reference. Ignore spelling mistakes that leave the meaning clear.";
    format!("{guideline}\n{guideline}\n{guideline}\n\n{DEFAULT_RUBRIC}")
}

fn judge_form(name: &str, checkpoint_id: CheckpointId, batch_items: i64) -> JudgeForm {
    JudgeForm {
        name: name.into(),
        checkpoint_id,
        rubric: rubric(),
        max_tokens: 16,
        scale_rubric: String::new(),
        scale_dimension: String::new(),
        scale_pass_at_least: String::new(),
        pairwise: false,
        batch_items,
    }
}

/// (case, repetition) → (verdict, decided by, reason).
async fn verdicts(
    store: &dyn Store,
    run: RunId,
) -> HashMap<(String, i64), (String, String, String)> {
    store
        .run_results(run, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            (
                (row.case_id, row.repetition),
                (
                    row.verdict,
                    row.decided_by.unwrap_or_default(),
                    row.grade_reason,
                ),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_judge_agrees_with_one_item_calls_for_fewer_calls_and_re_asks_only_what_it_skipped()
{
    let directory = tempfile::tempdir().unwrap();
    let shared = open_store(&directory).await;
    let store = shared.as_ref();
    let answers = start_sim(sim(SimModel {
        name: "answerer".into(),
        kind: SimModelKind::Answerer,
        accuracy: 0.8,
        unparseable_rate: 0.0,
        calibrated_confidence: None,
    }))
    .await;
    // A judge that cannot decide one answer in ten: its batch replies leave those out.
    let judge_endpoint = start_sim(sim(SimModel {
        name: "judge".into(),
        kind: SimModelKind::Judge,
        accuracy: 0.8,
        unparseable_rate: 0.1,
        calibrated_confidence: Some((0.5, 1.0)),
    }))
    .await;
    let answerer = checkpoint(store, "answerer", &answers, "answerer").await;
    let judge_checkpoint = checkpoint(store, "judge", &judge_endpoint, "judge").await;

    // Batches are for PASS/FAIL judges, of 1 to 16 answers.
    for (form, refused) in [
        (
            judge_form("too-many", judge_checkpoint, 17),
            "between 1 and 16",
        ),
        (judge_form("none", judge_checkpoint, 0), "between 1 and 16"),
        (
            JudgeForm {
                pairwise: true,
                ..judge_form("pairs", judge_checkpoint, 4)
            },
            "only a PASS/FAIL judge",
        ),
    ] {
        let error = grading::define_judge(store, &form, None).await.unwrap_err();
        assert_eq!(error.status_code(), 400);
        assert!(error.to_string().contains(refused), "{error}");
    }
    assert!(store.list_judges().await.unwrap().is_empty());

    let one_at_a_time =
        grading::define_judge(store, &judge_form("single", judge_checkpoint, 1), None)
            .await
            .unwrap();
    let batched =
        grading::define_judge(store, &judge_form("batched", judge_checkpoint, BATCH), None)
            .await
            .unwrap();
    assert_eq!(batched.batch_items, BATCH);
    let revision = arbiter_engine::catalog::upload_dataset(store, "qa", "qa.jsonl", SAMPLE, None)
        .await
        .unwrap();
    let mut runs = Vec::new();
    let mut calls = Vec::new();
    for judge in [&one_at_a_time, &batched] {
        let eval = arbiter_engine::catalog::define_eval(
            store,
            &EvalForm {
                name: format!("qa {}", judge.name),
                dataset_id: revision.dataset_id,
                prompt_template: "Question: {input}".into(),
                max_tokens: 64,
                temperature: 0.0,
                repetitions: REPETITIONS,
                seed: 0,
                grader: UNDECIDING_GRADER.into(),
                options: arbiter_engine::catalog::EvalOptions::default(),
            },
            None,
        )
        .await
        .unwrap();
        // Every verdict the judge gives is accepted, so each answer's verdict is the judge's.
        let policy = PolicyForm {
            cheap_judge: judge.id.to_string(),
            accept_threshold: "0.5".into(),
            escalate_threshold: "0.5".into(),
            audit_rate: "0".into(),
            judge_samples: "1".into(),
            human_usd_per_label: "0.5".into(),
            ..PolicyForm::default()
        };
        grading::save_policy(store, eval, &policy, None)
            .await
            .unwrap();
        let before = requests(&judge_endpoint).await;
        let run = launch(store, eval, answerer).await;
        let finished = work_until_complete(shared.clone(), &[run], test_worker("batches")).await;
        assert_eq!(
            (finished[0].done, finished[0].errors),
            (ITEMS, 0),
            "{:?}",
            finished[0]
        );
        calls.push(requests(&judge_endpoint).await - before);
        runs.push(run);
    }

    // The same verdict for every answer, by the same stage.
    let single = verdicts(store, runs[0]).await;
    let together = verdicts(store, runs[1]).await;
    assert_eq!(single.len() as i64, ITEMS);
    let agreeing = single
        .iter()
        .filter(|(key, (verdict, stage, _))| {
            together
                .get(*key)
                .is_some_and(|(other, other_stage, _)| other == verdict && other_stage == stage)
        })
        .count();
    assert_eq!(
        agreeing as i64, ITEMS,
        "batched verdicts agree with one-item verdicts"
    );
    // Batched verdicts carry their line of the reply as the reason.
    let from_lines = together
        .values()
        .filter(|(_, stage, reason)| stage == "cheap_judge" && reason.starts_with("Item "))
        .count() as i64;
    let undecided = single
        .values()
        .filter(|(_, stage, _)| stage == "pending")
        .count() as i64;
    assert!(
        (10..=60).contains(&undecided),
        "about one in ten undecided: {undecided}"
    );
    assert_eq!(
        from_lines,
        ITEMS - undecided,
        "every decided verdict came from a batch line"
    );

    // One call per answer, against one per batch plus one per skipped answer (asked alone,
    // where it is undecided again): a batch is never re-asked whole.
    // Repeated answers share one judgement, so one-item calls number the distinct answers.
    assert!(
        calls[0] <= ITEMS as u64 && calls[0] > ITEMS as u64 / 2,
        "{calls:?}"
    );
    assert!(
        calls[1] <= calls[0].div_ceil(BATCH as u64) + undecided as u64 + 8,
        "{} calls for {} distinct answers, {undecided} of them skipped",
        calls[1],
        calls[0]
    );
    let single_costs = store.run_costs(runs[0]).await.unwrap();
    let batched_costs = store.run_costs(runs[1]).await.unwrap();
    assert_eq!(batched_costs.judge_grades, ITEMS);
    eprintln!(
        "judge calls {calls:?}, judging USD {} one at a time, {} batched",
        single_costs.judging_usd, batched_costs.judging_usd
    );
    assert!(
        batched_costs.judging_usd < single_costs.judging_usd * 0.7,
        "the rubric is paid once per batch: {} against {}",
        batched_costs.judging_usd,
        single_costs.judging_usd
    );

    // A re-run of the batched eval asks the judge nothing: batched verdicts and the answers
    // asked alone both come from the grade cache.
    let eval = store.run_manifest(runs[1]).await.unwrap().unwrap().eval_id;
    let before = requests(&judge_endpoint).await;
    let rerun = launch(store, eval, answerer).await;
    let finished = work_until_complete(shared.clone(), &[rerun], test_worker("batches")).await;
    assert_eq!(finished[0].done, ITEMS);
    assert_eq!(requests(&judge_endpoint).await, before, "a re-run is free");
    assert_eq!(verdicts(store, rerun).await, together);
}
