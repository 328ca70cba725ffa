//! Contamination checks end to end: a training corpus indexed into 13-grams, an eval naming the
//! index, its items checked as the run expands, the index's hash in the manifest, and the
//! report's scores with and without the items found in the corpus. A model that memorised the
//! leaked items passes exactly those.

use arbiter_domain::contamination::ContaminationSpec;
use arbiter_engine::catalog::{self, EvalOptions};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{checkpoint, launch, test_worker, work_until_complete};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::{json, Value};
use std::sync::Arc;

stories!(items_found_in_the_training_corpus_are_flagged_and_reported_apart);

const LEAKED: [&str; 2] = [
    "A farmer plants seven rows of barley with twelve plants in each row; how many plants are there?",
    "A merchant counts forty silver coins and gives away nine of them to a friend; how many remain?",
];
const CLEAN: [&str; 2] = [
    "A baker bakes five trays of bread rolls with eight rolls on each tray; how many rolls are baked?",
    "A ferry carries thirty cars across the wide river and eleven of them are red; how many are not red?",
];

/// A model that memorised its training data: right on the leaked items only.
fn memorised(body: &Value) -> String {
    let prompt = body["messages"][0]["content"].as_str().unwrap_or_default();
    if prompt.contains("barley") {
        "Answer: 84".into()
    } else if prompt.contains("silver") {
        "Answer: 31".into()
    } else {
        "Answer: 0".into()
    }
}

async fn items_found_in_the_training_corpus_are_flagged_and_reported_apart(store: Arc<dyn Store>) {
    let directory = tempfile::tempdir().unwrap();
    // The corpus holds the leaked questions inside other text, in other case and punctuation.
    let corpus = directory.path().join("web.jsonl");
    let pages: String = LEAKED
        .iter()
        .map(|question| {
            json!({"url": "https://example.test", "text": format!("Homework help!! {} ANSWER BELOW.", question.to_uppercase())})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&corpus, pages).unwrap();
    let index = directory.path().join("web.ngrams");
    let built = arbiter_engine::contamination::build_index(&[corpus], &index, 13, 1000).unwrap();
    let targets = ["84", "31", "40", "19"];
    let dataset: String = LEAKED
        .iter()
        .chain(&CLEAN)
        .zip(targets)
        .enumerate()
        .map(|(i, (input, target))| {
            json!({"id": format!("w{i}"), "input": input, "target": target}).to_string() + "\n"
        })
        .collect();
    let revision = catalog::upload_dataset(
        store.as_ref(),
        "word problems",
        "w.jsonl",
        dataset.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let form = |index: &str| catalog::EvalForm {
        options: EvalOptions {
            contamination: Some(ContaminationSpec {
                index: index.to_string(),
                check_target: false,
            }),
            ..EvalOptions::default()
        },
        ..eval_form(&format!("words {}", index.len()), revision.dataset_id, 1)
    };
    let recorder = Recorder::start("memoriser", memorised).await;
    let model = checkpoint(
        store.as_ref(),
        "memoriser",
        &recorder.base_url,
        "memoriser",
        "",
    )
    .await;
    // An index that cannot be read refuses the launch, naming the file.
    let missing = directory.path().join("missing.ngrams");
    let broken = catalog::define_eval(store.as_ref(), &form(&missing.display().to_string()), None)
        .await
        .unwrap();
    match arbiter_engine::runs::launch_run(
        store.as_ref(),
        broken,
        model,
        arbiter_domain::run::Priority::Scheduled,
        "default",
        None,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("missing.ngrams"), "{message}")
        }
        other => panic!("expected the missing index to refuse the launch, got {other:?}"),
    }

    let eval = catalog::define_eval(store.as_ref(), &form(&index.display().to_string()), None)
        .await
        .unwrap();
    let run = launch(store.as_ref(), eval, model).await;
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    let frozen = manifest.contamination.expect("the check is frozen");
    assert_eq!(frozen.content_hash, built.content_hash);
    assert_eq!(frozen.n, 13);
    work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), run)
        .await
        .unwrap();
    let contamination = report.contamination.expect("a contamination report");
    assert_eq!(contamination.flagged_items, 2);
    assert_eq!(contamination.index_hash, built.content_hash);
    assert_eq!(contamination.pass_rate, Some(0.5));
    assert_eq!(
        contamination.flagged_pass_rate,
        Some(1.0),
        "the memorised items pass"
    );
    assert_eq!(contamination.clean_pass_rate, Some(0.0), "the rest do not");
    assert_eq!(
        (contamination.flagged_answers, contamination.clean_answers),
        (2, 2)
    );
}
