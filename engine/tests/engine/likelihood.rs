//! Multiple choice scored by likelihood end to end, against the simulator's echoed prompt
//! logprobs: every choice sent with the context, the most likely one graded, every choice's
//! score stored (and copied from the cache on a re-run), the report's acc, acc_norm, acc_bytes
//! and probability on the right answer, the paired test between checkpoints, and the refusal
//! of an endpoint that returns no prompt logprobs.

use arbiter_domain::fields::FieldMapping;
use arbiter_domain::likelihood::{LikelihoodSpec, Selection};
use arbiter_domain::prompt::Api;
use arbiter_engine::catalog::{self, EvalForm, EvalOptions};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{checkpoint, launch, start_sim, test_worker, work_until_complete};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::Value;
use std::sync::Arc;

stories!(
    choices_are_scored_by_likelihood_and_reported_as_lm_eval_does,
    an_lm_eval_multiple_choice_task_imports_as_a_likelihood_eval
);

const CHOICES: &[u8] = include_bytes!("../../../public/samples/qa-choice.jsonl");

fn likelihood_form(dataset_id: arbiter_domain::ids::DatasetId) -> EvalForm {
    EvalForm {
        prompt_template: "Question: {{ question }}\nAnswer:".into(),
        options: EvalOptions {
            api: Api::Completions,
            mapping: Some(FieldMapping {
                input: "question".into(),
                target: Some("answer".into()),
                choices: Some("choices".into()),
                category: Some("subject".into()),
                ..FieldMapping::default()
            }),
            likelihood: Some(LikelihoodSpec::default()),
            ..EvalOptions::default()
        },
        ..eval_form("mc by likelihood", dataset_id, 1)
    }
}

/// A completions endpoint that answers without any logprobs, as servers without prompt
/// logprobs do.
fn no_logprobs(_: &Value) -> String {
    " B".into()
}

async fn choices_are_scored_by_likelihood_and_reported_as_lm_eval_does(store: Arc<dyn Store>) {
    let revision = catalog::upload_dataset(store.as_ref(), "mc", "mc.jsonl", CHOICES, None)
        .await
        .unwrap();
    let items = revision.item_count as usize;
    // Chat endpoints return no prompt logprobs; and there must be choices to score.
    let mut chat = likelihood_form(revision.dataset_id);
    chat.options.api = Api::Chat;
    let mut without_choices = likelihood_form(revision.dataset_id);
    without_choices.options.mapping.as_mut().unwrap().choices = None;
    for (form, naming) in [
        (chat, "needs the completions API"),
        (without_choices, "needs a choices field"),
    ] {
        match catalog::define_eval(store.as_ref(), &form, None).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(naming), "{message}"),
            other => panic!("expected a refusal naming {naming}, got {other:?}"),
        }
    }
    let eval = catalog::define_eval(store.as_ref(), &likelihood_form(revision.dataset_id), None)
        .await
        .unwrap();

    // An endpoint without prompt logprobs is refused at launch, by name, not scored at chance.
    let recorder = Recorder::start("plain", no_logprobs).await;
    let plain = checkpoint(store.as_ref(), "plain", &recorder.base_url, "plain", "").await;
    match arbiter_engine::runs::launch_run(
        store.as_ref(),
        eval,
        plain,
        arbiter_domain::run::Priority::Scheduled,
        "default",
        None,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("checkpoint `plain`"), "{message}");
            assert!(message.contains(&recorder.base_url), "{message}");
            assert!(message.contains("prompt logprobs"), "{message}");
        }
        other => panic!("expected the launch to be refused, got {other:?}"),
    }

    let endpoint = start_sim(arbiter_sim::SimConfig::demo()).await;
    let strong = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let weak = checkpoint(store.as_ref(), "b", &endpoint, "sim-ckpt-b", "").await;
    let runs = [
        launch(store.as_ref(), eval, strong).await,
        launch(store.as_ref(), eval, weak).await,
    ];
    let progress = work_until_complete(store.clone(), &runs, test_worker("w")).await;
    for run in &progress {
        assert_eq!(run.done, items as i64);
        assert_eq!((run.errors, run.uncertain), (0, 0), "{run:?}");
    }
    // The answer is the most likely choice's letter, graded against the right one's.
    let results = store.run_results(runs[0], 100).await.unwrap();
    let scores = store.run_choice_scores(runs[0]).await.unwrap();
    assert_eq!(scores.len(), items);
    for (case_id, _, scored) in &scores {
        let result = results.iter().find(|r| &r.case_id == case_id).unwrap();
        assert_eq!(scored.choices.len(), 4);
        assert_eq!(scored.gold.len(), 1);
        let chosen = scored.selected(Selection::Raw).unwrap();
        assert_eq!(result.output, ((b'A' + chosen as u8) as char).to_string());
        let right = scored.gold.contains(&chosen);
        assert_eq!(result.verdict, if right { "pass" } else { "fail" });
        assert!(scored.choices.iter().all(|choice| choice.score.tokens >= 1));
    }

    // The report: acc is the pass rate; acc_norm, acc_bytes and p(right) beside it.
    let (run, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), runs[0])
        .await
        .unwrap();
    let likelihood = report.likelihood.expect("a likelihood report");
    assert_eq!(likelihood.scored, items as u64);
    let acc = likelihood.metrics.iter().find(|m| m.name == "acc").unwrap();
    assert!((acc.mean.unwrap() - run.passed as f64 / items as f64).abs() < 1e-12);
    for name in [
        "acc_norm",
        "acc_bytes",
        "p_right",
        "right_is_greedy",
        "right_logprob",
    ] {
        assert!(likelihood.metrics.iter().any(|m| m.name == name), "{name}");
    }
    // The simulated checkpoints know 80% and 65% of the answers.
    assert!(acc.mean.unwrap() >= 0.5, "{acc:?}");

    // The comparison pairs the verdicts and the right answers' log-likelihoods.
    let comparison = arbiter_engine::reports::compare::compare_checkpoints(
        store.as_ref(),
        runs[0],
        &[runs[1]],
        Default::default(),
    )
    .await
    .unwrap();
    let paired = comparison.candidates[0]
        .comparison
        .likelihood
        .as_ref()
        .expect("a paired test on the right answer's log-likelihood");
    assert_eq!(paired.items, items as u64);
    assert!(paired.p_value.is_some());

    // A twin checkpoint (same endpoint, same fingerprint) is answered from the cache, scores
    // and all.
    let twin = checkpoint(store.as_ref(), "a-twin", &endpoint, "sim-ckpt-a", "").await;
    let rerun = launch(store.as_ref(), eval, twin).await;
    work_until_complete(store.clone(), &[rerun], test_worker("w2")).await;
    let again = store.run_choice_scores(rerun).await.unwrap();
    assert_eq!(again, scores);
    let cached = store.run_results(rerun, 100).await.unwrap();
    assert!(cached.iter().all(|result| result.from_cache), "{cached:?}");

    // Another eval over the same requests, choosing per character, shares the cached scores
    // but answers by its own selection.
    let by_chars = catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            name: "mc per character".into(),
            options: EvalOptions {
                likelihood: Some(LikelihoodSpec {
                    select_by: Selection::Chars,
                    ..LikelihoodSpec::default()
                }),
                ..likelihood_form(revision.dataset_id).options
            },
            ..likelihood_form(revision.dataset_id)
        },
        None,
    )
    .await
    .unwrap();
    let normed = launch(store.as_ref(), by_chars, strong).await;
    work_until_complete(store.clone(), &[normed], test_worker("w3")).await;
    let results = store.run_results(normed, 100).await.unwrap();
    for (case_id, _, scored) in store.run_choice_scores(normed).await.unwrap() {
        let result = results.iter().find(|r| r.case_id == case_id).unwrap();
        assert!(result.from_cache);
        let chosen = scored.selected(Selection::Chars).unwrap();
        assert_eq!(result.output, ((b'A' + chosen as u8) as char).to_string());
    }
}

/// An MMLU-style harness task over the demo's multiple-choice questions.
const MC_TASK: &str = r#"
task: mc_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: mc.jsonl
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{question}}\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
  - metric: acc_norm
    aggregation: mean
"#;

async fn an_lm_eval_multiple_choice_task_imports_as_a_likelihood_eval(store: Arc<dyn Store>) {
    use arbiter_engine::import::{import_lm_eval_task, ImportOptions};
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("mc.jsonl"), CHOICES).unwrap();
    let path = directory.path().join("mc.yaml");
    std::fs::write(&path, MC_TASK).unwrap();
    let options = ImportOptions {
        // Asked for chat, scored on completions: only it returns prompt logprobs.
        api: Api::Chat,
        name: String::new(),
        max_length: None,
    };
    let imported = import_lm_eval_task(store.as_ref(), &path, &options, None)
        .await
        .unwrap();
    assert_eq!(imported.evals.len(), 1);
    assert!(imported
        .notes
        .iter()
        .any(|note| note.contains("likelihood")));
    let eval = store.get_eval(imported.evals[0].0).await.unwrap().unwrap();
    assert_eq!(eval.prompt.api, Api::Completions);
    assert_eq!(eval.prompt.mapping.choices.as_deref(), Some("choices"));
    assert_eq!(
        eval.prompt.likelihood,
        Some(LikelihoodSpec {
            target_delimiter: " ".into(),
            select_by: Selection::Raw,
        })
    );
    let endpoint = start_sim(arbiter_sim::SimConfig::demo()).await;
    let model = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let run = launch(store.as_ref(), eval.id, model).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w")).await;
    assert_eq!((progress[0].done, progress[0].errors), (15, 0));
    assert_eq!(store.run_choice_scores(run).await.unwrap().len(), 15);
}
