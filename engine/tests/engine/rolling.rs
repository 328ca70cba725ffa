//! Rolling log-likelihood (perplexity, bits per byte) end to end against the simulator: each
//! document tokenised by the server and scored in windows of token ids, every identity recorded
//! as scored (done, never an error, never in a pass rate), the corpus metrics reported as
//! lm-eval names them, the paired test between checkpoints, the cache on a re-run, and the
//! refusal of an endpoint without a tokenizer route.

use arbiter_domain::fields::FieldMapping;
use arbiter_domain::likelihood::LikelihoodSpec;
use arbiter_domain::prompt::Api;
use arbiter_domain::reports::Completeness;
use arbiter_domain::rolling::{RollingScore, RollingSpec};
use arbiter_engine::catalog::{self, EvalForm, EvalOptions};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{checkpoint, launch, start_sim, test_worker, work_until_complete};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

stories!(
    documents_are_scored_by_rolling_likelihood_and_reported_as_lm_eval_does,
    an_lm_eval_rolling_task_imports_as_a_perplexity_eval
);

const PROSE: &[u8] = include_bytes!("../../../public/samples/prose.jsonl");

fn rolling_form(
    name: &str,
    dataset_id: arbiter_domain::ids::DatasetId,
    rolling: RollingSpec,
) -> EvalForm {
    EvalForm {
        name: name.into(),
        prompt_template: "{{ text }}".into(),
        options: EvalOptions {
            api: Api::Completions,
            mapping: Some(FieldMapping {
                input: "text".into(),
                target: None,
                category: Some("category".into()),
                ..FieldMapping::default()
            }),
            rolling: Some(rolling),
            ..EvalOptions::default()
        },
        ..eval_form(name, dataset_id, 1)
    }
}

fn windowed(max_length: u32, stride: Option<u32>) -> RollingSpec {
    RollingSpec {
        max_length,
        stride,
        prefix_token: None,
    }
}

fn by_case(rows: Vec<(String, i64, RollingScore)>) -> BTreeMap<String, RollingScore> {
    rows.into_iter()
        .map(|(case, _, score)| (case, score))
        .collect()
}

fn not_found(_: &Value) -> String {
    "no".into()
}

async fn documents_are_scored_by_rolling_likelihood_and_reported_as_lm_eval_does(
    store: Arc<dyn Store>,
) {
    let revision = catalog::upload_dataset(store.as_ref(), "prose", "prose.jsonl", PROSE, None)
        .await
        .unwrap();
    let documents = revision.item_count as usize;

    // Chat APIs return no prompt logprobs; an eval scores choices or texts, not both; the
    // stride fits the window.
    let mut chat = rolling_form("chat", revision.dataset_id, windowed(16, None));
    chat.options.api = Api::Chat;
    let mut both = rolling_form("both", revision.dataset_id, windowed(16, None));
    both.options.likelihood = Some(LikelihoodSpec::default());
    both.options.mapping.as_mut().unwrap().choices = Some("category".into());
    let wide = rolling_form("wide", revision.dataset_id, windowed(16, Some(15)));
    let mut repeated = rolling_form("repeated", revision.dataset_id, windowed(16, None));
    repeated.repetitions = 3;
    for (form, naming) in [
        (chat, "needs the completions API"),
        (both, "not both"),
        (wide, "from 1 to max_length - 2 (14)"),
        (repeated, "use one repetition"),
    ] {
        match catalog::define_eval(store.as_ref(), &form, None).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(naming), "{message}"),
            other => panic!("expected a refusal naming {naming}, got {other:?}"),
        }
    }
    // Short windows: most documents take several requests.
    let eval = catalog::define_eval(
        store.as_ref(),
        &rolling_form(
            "prose, 16-token windows",
            revision.dataset_id,
            windowed(16, None),
        ),
        None,
    )
    .await
    .unwrap();

    // An endpoint without the tokenizer route is refused at launch, by name.
    let recorder = Recorder::start("plain", not_found).await;
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
            assert!(message.contains("/tokenize"), "{message}");
        }
        other => panic!("expected the launch to be refused, got {other:?}"),
    }
    assert!(recorder.requests().is_empty(), "nothing was scored");

    // The simulated checkpoints know 80% and 65%: the stronger finds the text likelier.
    let endpoint = start_sim(arbiter_sim::SimConfig::demo()).await;
    let strong = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let weak = checkpoint(store.as_ref(), "b", &endpoint, "sim-ckpt-b", "").await;
    let runs = [
        launch(store.as_ref(), eval, strong).await,
        launch(store.as_ref(), eval, weak).await,
    ];
    let progress = work_until_complete(store.clone(), &runs, test_worker("w")).await;
    for run in &progress {
        assert_eq!(run.done, documents as i64);
        assert_eq!(run.scored, documents as i64, "{run:?}");
        assert_eq!(
            (run.passed, run.failed, run.uncertain, run.errors),
            (0, 0, 0, 0)
        );
    }
    // The manifest froze lm-eval's prefix: the simulator names no BOS, so its EOS (id 0).
    let manifest = store.run_manifest(runs[0]).await.unwrap().unwrap();
    assert_eq!(manifest.rolling_prefix_token, Some(0));
    let results = store.run_results(runs[0], 100).await.unwrap();
    assert!(results.iter().all(|result| result.verdict == "scored"));
    let scores = by_case(store.run_rolling_scores(runs[0]).await.unwrap());
    assert_eq!(scores.len(), documents);
    let mut windows = 0;
    for score in scores.values() {
        assert!(
            score.logprob < 0.0 && score.tokens >= score.words - 1,
            "{score:?}"
        );
        // Fourteen new tokens a window at most, every token scored once.
        assert_eq!(score.windows, score.tokens.div_ceil(14), "{score:?}");
        windows += score.windows;
    }
    assert!(
        windows > 2 * documents as u64,
        "several windows per document"
    );

    // The report: complete, no pass rate, lm-eval's corpus metrics.
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), runs[0])
        .await
        .unwrap();
    assert_eq!(report.completeness, Completeness::Complete, "{report:?}");
    assert_eq!(report.overall.pass_rate, None);
    assert_eq!(report.overall.scored, documents as u64);
    let rolling = report.rolling.expect("a rolling report");
    assert_eq!(rolling.documents, documents as u64);
    let logprob: f64 = scores.values().map(|score| score.logprob).sum();
    let bytes: u64 = scores.values().map(|score| score.bytes).sum();
    assert_eq!(bytes as usize, {
        let text = String::from_utf8(PROSE.to_vec()).unwrap();
        text.lines()
            .map(|line| {
                serde_json::from_str::<Value>(line).unwrap()["text"]
                    .as_str()
                    .unwrap()
                    .len()
            })
            .sum::<usize>()
    });
    let bits = rolling.bits_per_byte.unwrap();
    assert!((bits - (-logprob / bytes as f64 / std::f64::consts::LN_2)).abs() < 1e-12);
    let interval = rolling.bits_per_byte_interval.unwrap();
    assert!(
        interval.lower < bits && bits < interval.upper,
        "{interval:?}"
    );
    let (_, weak_report) = arbiter_engine::reports::runs::run_report(store.as_ref(), runs[1])
        .await
        .unwrap();
    let weak_bits = weak_report.rolling.unwrap().bits_per_byte.unwrap();
    assert!(bits < weak_bits, "strong {bits} against weak {weak_bits}");

    // Paired over the documents: the weaker candidate has more bits per byte.
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
        .rolling
        .as_ref()
        .expect("a paired test on bits per byte");
    assert_eq!(paired.documents, documents as u64);
    assert!((paired.difference - (weak_bits - bits)).abs() < 1e-12);
    assert!(paired.interval.unwrap().lower > 0.0, "{paired:?}");

    // The simulator scores a token by the one before it, so one window per document (a wide
    // max_length) sums to the same log-likelihood as many: every token was scored exactly once.
    let whole = catalog::define_eval(
        store.as_ref(),
        &rolling_form(
            "prose, whole documents",
            revision.dataset_id,
            windowed(512, None),
        ),
        None,
    )
    .await
    .unwrap();
    let strided = catalog::define_eval(
        store.as_ref(),
        &rolling_form(
            "prose, stride 5",
            revision.dataset_id,
            windowed(12, Some(5)),
        ),
        None,
    )
    .await
    .unwrap();
    let other_runs = [
        launch(store.as_ref(), whole, strong).await,
        launch(store.as_ref(), strided, strong).await,
    ];
    work_until_complete(store.clone(), &other_runs, test_worker("w2")).await;
    for run in other_runs {
        let other = by_case(store.run_rolling_scores(run).await.unwrap());
        for (case, score) in &scores {
            let again = &other[case];
            assert_eq!(again.tokens, score.tokens, "{case}");
            assert!((again.logprob - score.logprob).abs() < 1e-9, "{case}");
        }
    }

    // A twin checkpoint (same endpoint, same fingerprint) is answered from the cache.
    let twin = checkpoint(store.as_ref(), "a-twin", &endpoint, "sim-ckpt-a", "").await;
    let rerun = launch(store.as_ref(), eval, twin).await;
    let progress = work_until_complete(store.clone(), &[rerun], test_worker("w3")).await;
    assert_eq!(progress[0].scored, documents as i64);
    assert_eq!(
        by_case(store.run_rolling_scores(rerun).await.unwrap()),
        scores
    );
    let cached = store.run_results(rerun, 100).await.unwrap();
    assert!(cached.iter().all(|result| result.from_cache), "{cached:?}");
}

/// A perplexity task in the harness's shape over the demo's prose.
const ROLLING_TASK: &str = r#"
task: prose_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: prose.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"#;

async fn an_lm_eval_rolling_task_imports_as_a_perplexity_eval(store: Arc<dyn Store>) {
    use arbiter_engine::import::{import_lm_eval_task, ImportOptions};
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("prose.jsonl"), PROSE).unwrap();
    let path = directory.path().join("prose.yaml");
    std::fs::write(&path, ROLLING_TASK).unwrap();
    let options = ImportOptions {
        // Asked for chat, scored on completions: only it returns prompt logprobs.
        api: Api::Chat,
        name: String::new(),
        max_length: Some(24),
    };
    let imported = import_lm_eval_task(store.as_ref(), &path, &options, None)
        .await
        .unwrap();
    assert_eq!(imported.evals.len(), 1);
    assert!(imported.notes.iter().any(|note| note.contains("rolling")));
    let eval = store.get_eval(imported.evals[0].0).await.unwrap().unwrap();
    assert_eq!(eval.prompt.api, Api::Completions);
    assert_eq!(eval.prompt.rolling, Some(windowed(24, None)));
    let endpoint = start_sim(arbiter_sim::SimConfig::demo()).await;
    let model = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let run = launch(store.as_ref(), eval.id, model).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w")).await;
    assert_eq!((progress[0].scored, progress[0].errors), (16, 0));
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), run)
        .await
        .unwrap();
    assert_eq!(report.rolling.unwrap().documents, 16);
}
