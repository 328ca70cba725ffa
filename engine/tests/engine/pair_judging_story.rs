//! Story test for a pairwise judge in front of raters, on both backends, with `arbiter sim`
//! answering and judging: a researcher sends pairs of a strong and a weak checkpoint's answers
//! with a pairwise judge first. The judge is asked each pair in both orders; the pairs it
//! decides confidently need no rater (but an audit share goes to raters anyway), the rest wait
//! for raters only until judged. The raters' decided pairs calibrate the judge, and the pairs it
//! decided count in the ratings as the judge's labels.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::GOLD_RATE_SETTING;
use arbiter_domain::annotation::preference::Preference;
use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
use arbiter_domain::grading::pairwise::DEFAULT_PAIRWISE_RUBRIC;
use arbiter_domain::ids::CheckpointId;
use arbiter_engine::error::ServiceError;
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use arbiter_engine::pair_judging::{judge_waiting_pairs, pairwise_calibrations};
use arbiter_engine::preferences::{preference_reports, send_pairs, PairRequestForm};
use arbiter_sim::{SimConfig, SimModelKind};
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{launch, start_sim, test_worker, work_until_complete};
use arbiter_testkit::stories;
use std::sync::Arc;

stories!(a_pairwise_judge_decides_confident_pairs_and_is_calibrated_by_raters,);

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");
const PAIRS: i64 = 40;

fn judge_form(checkpoint_id: CheckpointId, pairwise: bool) -> JudgeForm {
    JudgeForm {
        name: if pairwise { "which" } else { "qa" }.into(),
        checkpoint_id,
        // The PASS/FAIL default the form starts from becomes the pairwise default.
        rubric: DEFAULT_RUBRIC.into(),
        max_tokens: 16,
        scale_rubric: String::new(),
        scale_dimension: String::new(),
        scale_pass_at_least: String::new(),
        pairwise,
        batch_items: 1,
    }
}

fn invalid<T: std::fmt::Debug>(result: Result<T, ServiceError>) -> String {
    match result {
        Err(ServiceError::Invalid(message)) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Which side of a pair the simulated answerer got right: `Some(true)` the left only,
/// `Some(false)` the right only, `None` both or neither.
fn right_side(task: &arbiter_domain::annotation::task::AnnotationTask) -> Option<bool> {
    let right = |output: &str| {
        output
            .lines()
            .any(|line| line.trim() == format!("Answer: {}", task.target))
    };
    let pair = task.pair.as_ref().expect("a pair");
    match (right(&task.output), right(&pair.right_output)) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    }
}

async fn a_pairwise_judge_decides_confident_pairs_and_is_calibrated_by_raters(
    store: Arc<dyn Store>,
) {
    let model = arbiter_testkit::pipeline::sim_model;
    let endpoint = start_sim(SimConfig {
        models: vec![
            model("strong", SimModelKind::Answerer, 0.9, None),
            model("weak", SimModelKind::Answerer, 0.3, None),
            model("judge", SimModelKind::Judge, 0.0, Some((0.6, 1.0))),
        ],
        latency_ms_min: 1,
        latency_ms_max: 2,
        ..SimConfig::demo()
    })
    .await;
    let register = |name: &'static str| {
        let (store, endpoint) = (store.clone(), endpoint.clone());
        async move {
            arbiter_engine::catalog::register_simple_checkpoint(
                &*store, name, &endpoint, name, None,
            )
            .await
            .unwrap()
        }
    };
    let (strong, weak, judging) = (
        register("strong").await,
        register("weak").await,
        register("judge").await,
    );
    let revision = arbiter_engine::catalog::upload_dataset(&*store, "qa", "qa.jsonl", SAMPLE, None)
        .await
        .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        &*store,
        &eval_form("qa", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let runs = [
        launch(&*store, eval, strong).await,
        launch(&*store, eval, weak).await,
    ];
    work_until_complete(store.clone(), &runs, test_worker("w")).await;

    // A pairwise judge: the default prompt, refused in a triage policy of single answers.
    let judge = grading::define_judge(&*store, &judge_form(judging, true), None)
        .await
        .unwrap();
    assert!(judge.pairwise);
    assert_eq!(judge.rubric, DEFAULT_PAIRWISE_RUBRIC);
    let mut unplaced = judge_form(judging, true);
    unplaced.rubric = "Which is better, {output}?".into();
    assert!(invalid(grading::define_judge(&*store, &unplaced, None).await).contains("{output_a}"));
    let policy = PolicyForm {
        cheap_judge: judge.id.to_string(),
        accept_threshold: "0.9".into(),
        escalate_threshold: "0.7".into(),
        audit_rate: "0".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0".into(),
        review_rate: "0".into(),
        ..PolicyForm::default()
    };
    let refused = invalid(grading::save_policy(&*store, eval, &policy, None).await);
    assert!(refused.contains("compares two answers"), "{refused}");

    // Pairs need a pairwise judge, and a threshold of at least a half.
    let single = grading::define_judge(&*store, &judge_form(judging, false), None)
        .await
        .unwrap();
    let researcher = new_user(&*store, "rita", Role::Researcher).await;
    let researcher = store.get_user(researcher).await.unwrap().unwrap();
    let form = |judge_id: i64, threshold: &str| PairRequestForm {
        run_a: runs[0],
        run_b: runs[1],
        selection: "random".into(),
        pairs: PAIRS.to_string(),
        raters: "1".into(),
        note: String::new(),
        rubric: String::new(),
        judge: judge_id.to_string(),
        judge_threshold: threshold.into(),
        audit_rate: "0.25".into(),
    };
    let refused = invalid(send_pairs(&*store, &form(single.id, "0.8"), &researcher).await);
    assert!(refused.contains("pairwise judge"), "{refused}");
    let refused = invalid(send_pairs(&*store, &form(judge.id, "0.3"), &researcher).await);
    assert!(refused.contains("at least 0.5"), "{refused}");
    let sent = send_pairs(&*store, &form(judge.id, "0.8"), &researcher)
        .await
        .unwrap();
    assert_eq!(sent.pairs, PAIRS);
    assert_eq!(sent.judge.as_deref(), Some("judge:which@1"));

    // Until judged, no pair is offered to raters.
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let rater = new_user(&*store, "rae", Role::Annotator).await;
    assert!(store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
        .is_none());

    // Two workers judge the pairs at once, each its own claims (a round claims 32): together
    // every pair, once.
    let (first, second) = tokio::join!(
        judge_waiting_pairs(&store, "judge-1"),
        judge_waiting_pairs(&store, "judge-2")
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!((first + second) as i64, PAIRS, "{first} + {second}");
    assert!(first.min(second) >= 8, "{first} and {second}");
    let summary = store.pair_requests(10).await.unwrap().remove(0);
    let alone = summary.judge_decided;
    assert!(alone > 0 && alone < PAIRS, "decided alone: {alone}");
    assert_eq!(summary.pairs_done, alone);

    // The raters label the rest (and the audit share), by the truth; the judge's decided pairs
    // are never offered.
    let mut labelled = 0;
    while let Some(task) = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        let choice = match right_side(&task) {
            Some(true) => Preference::A,
            Some(false) => Preference::B,
            None => Preference::Tie,
        };
        store
            .submit_preference(&task.handle, rater, choice, None, "")
            .await
            .unwrap();
        labelled += 1;
    }
    assert_eq!(labelled + alone, PAIRS);

    // The calibration: the simulated judge follows the answers, not their order (its orders
    // always agree), and matches the raters on most pairs.
    let calibrations = pairwise_calibrations(&*store).await.unwrap();
    assert_eq!(calibrations.len(), 1);
    let (name, calibration) = &calibrations[0];
    assert_eq!(name, "judge:which@1");
    assert_eq!(calibration.judged, PAIRS as u64);
    assert_eq!(calibration.consistency, Some(1.0));
    assert_eq!(calibration.pairs, labelled as u64);
    let agreement = calibration.agreement.unwrap();
    assert!(agreement > 0.5, "agreement {agreement}");

    // The report counts the raters' labels and the judge's decided pairs, the judge as a rater
    // of its own.
    let report = &preference_reports(&*store, None).await.unwrap()[0];
    assert_eq!(report.report.labels, PAIRS as u64);
    assert!(report
        .raters
        .iter()
        .any(|(_, name)| name == "judge:which@1"));
    // The strong checkpoint is rated above the weak one.
    let best = report.report.ratings[0].contestant;
    assert_eq!(report.checkpoints[best], "strong");

    // Nothing waits for the judge any more, and a second round judges nothing again.
    assert_eq!(judge_waiting_pairs(&store, "judge-1").await.unwrap(), 0);
}
