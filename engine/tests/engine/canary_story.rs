//! Story test for the drift canary, on both backends, with `arbiter sim` answering and judging:
//! a judge's first version is checked by humans; each later version re-grades that reference
//! set when the canary runs. A version that judges as the first did has not drifted; one that
//! contradicts it has, and raises an alert; one whose endpoint is down fails with the reason.
//! Each version's canary runs once, whichever process claims it.

use arbiter_domain::accounts::Role;
use arbiter_domain::grading::canary::JudgeCanary;
use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
use arbiter_domain::health::ALERT_JUDGE_DRIFT;
use arbiter_domain::ids::CheckpointId;
use arbiter_engine::canary::{run_next_canary, CanaryRound};
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use arbiter_sim::{SimConfig, SimModelKind};
use arbiter_store::{now_ms, Store};
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{
    launch, sim_answer_is_right, start_sim, test_worker, work_until_complete,
};
use arbiter_testkit::stories;
use std::sync::Arc;

stories!(new_judge_versions_regrade_the_reference_set_and_drift_is_alerted,);

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");
const ITEMS: u64 = 60;
/// A deterministic grader that never decides, so every answer reaches the judge.
const UNDECIDING_GRADER: &str =
    r#"{"kind": "regex_match", "pattern": "NEVER-IN-AN-ANSWER (\\d+)"}"#;

async fn judge_version(store: &dyn Store, checkpoint_id: CheckpointId) -> i64 {
    let form = JudgeForm {
        name: "qa-judge".into(),
        checkpoint_id,
        rubric: DEFAULT_RUBRIC.into(),
        max_tokens: 8,
        scale_rubric: String::new(),
        scale_dimension: String::new(),
        scale_pass_at_least: String::new(),
        pairwise: false,
        batch_items: 1,
    };
    grading::define_judge(store, &form, None).await.unwrap().id
}

async fn canary_of(store: &dyn Store, judge_id: i64) -> JudgeCanary {
    store
        .judge_canaries()
        .await
        .unwrap()
        .into_iter()
        .find(|canary| canary.judge_id == judge_id)
        .unwrap_or_else(|| panic!("judge {judge_id} has a canary"))
}

async fn new_judge_versions_regrade_the_reference_set_and_drift_is_alerted(store: Arc<dyn Store>) {
    let model = arbiter_testkit::pipeline::sim_model;
    let endpoint = start_sim(SimConfig {
        models: vec![
            model("answerer", SimModelKind::Answerer, 0.7, None),
            model("judge", SimModelKind::Judge, 0.0, Some((0.7, 1.0))),
            // Wrong on every answer it can check.
            model("contrarian", SimModelKind::Judge, 0.0, None),
        ],
        latency_ms_min: 1,
        latency_ms_max: 2,
        ..SimConfig::demo()
    })
    .await;
    let register = |name: &'static str, url: String| {
        let store = store.clone();
        async move {
            arbiter_engine::catalog::register_simple_checkpoint(&*store, name, &url, name, None)
                .await
                .unwrap()
        }
    };
    let answerer = register("answerer", endpoint.clone()).await;
    let judging = register("judge", endpoint.clone()).await;
    let contrarian = register("contrarian", endpoint.clone()).await;
    let down = register("down", "http://127.0.0.1:9/v1".into()).await;

    // Version 1 judges a run; humans label every item (the audit takes all accepted ones).
    let first = judge_version(&*store, judging).await;
    let revision = arbiter_engine::catalog::upload_dataset(&*store, "qa", "qa.jsonl", SAMPLE, None)
        .await
        .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        &*store,
        &arbiter_engine::catalog::EvalForm {
            grader: UNDECIDING_GRADER.into(),
            ..eval_form("judged", revision.dataset_id, 1)
        },
        None,
    )
    .await
    .unwrap();
    let policy = PolicyForm {
        cheap_judge: first.to_string(),
        accept_threshold: "0.9".into(),
        escalate_threshold: "0.9".into(),
        audit_rate: "1".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0".into(),
        review_rate: "0".into(),
        ..PolicyForm::default()
    };
    grading::save_policy(&*store, eval, &policy, None)
        .await
        .unwrap();
    let run = launch(&*store, eval, answerer).await;
    work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let rater = new_user(&*store, "rae", Role::Annotator).await;
    let mut labelled = 0;
    while let Some(task) = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        let right = sim_answer_is_right(&task);
        store
            .submit_label(&task.handle, rater, right, "")
            .await
            .unwrap();
        labelled += 1;
    }
    assert_eq!(labelled, ITEMS);

    // A first version has nothing to be compared with.
    assert_eq!(
        run_next_canary(&store, "a").await.unwrap(),
        CanaryRound::Idle
    );

    // Version 2 is version 1 again; 3 asks a contrarian model; 4 a model that is down.
    let same = judge_version(&*store, judging).await;
    let flipped = judge_version(&*store, contrarian).await;
    let unreachable = judge_version(&*store, down).await;

    // Two processes run canaries at once: each version's canary runs in one of them, once.
    // (The one that loses the race for a version finds nothing else yet and is idle.)
    let (a, b) = tokio::join!(run_next_canary(&store, "a"), run_next_canary(&store, "b"));
    let mut rounds: Vec<CanaryRound> = [a.unwrap(), b.unwrap()]
        .into_iter()
        .filter(|round| *round != CanaryRound::Idle)
        .collect();
    loop {
        match run_next_canary(&store, "a").await.unwrap() {
            CanaryRound::Idle => break,
            round => rounds.push(round),
        }
    }
    let mut judged: Vec<i64> = rounds
        .iter()
        .map(|round| match round {
            CanaryRound::Done { judge_id, .. } | CanaryRound::Failed { judge_id, .. } => *judge_id,
            CanaryRound::Idle => unreachable!("idle rounds were left out"),
        })
        .collect();
    judged.sort();
    assert_eq!(judged, vec![same, flipped, unreachable], "{rounds:?}");

    let agreeing = canary_of(&*store, same).await;
    let report = agreeing.report.clone().expect("a report");
    assert_eq!(
        (agreeing.state.as_str(), agreeing.baseline.as_str()),
        ("done", "judge:qa-judge@1")
    );
    assert_eq!(report.items, ITEMS);
    assert_eq!(agreeing.reference_items.len() as u64, ITEMS);
    assert!(agreeing
        .reference_items
        .windows(2)
        .all(|pair| pair[0] < pair[1]));
    // The same model asked the same prompts gives the same verdicts.
    assert_eq!(report.agreement_with_old, Some(1.0));
    assert_eq!(report.new_accuracy, report.old_accuracy);
    assert!(!report.drifted(), "{report:?}");

    // The contrarian is compared with version 1 (version 2 judged nothing humans checked).
    let drifted = canary_of(&*store, flipped).await;
    let report = drifted.report.clone().expect("a report");
    assert_eq!(drifted.baseline, "judge:qa-judge@1");
    assert_eq!(drifted.reference_items, agreeing.reference_items);
    assert!(report.drifted(), "{report:?}");
    assert!(report.agreement_with_old.unwrap() < 0.5, "{report:?}");
    assert_eq!(report.new_accuracy, Some(0.0), "{report:?}");
    let alerts: Vec<_> = store
        .alerts(0)
        .await
        .unwrap()
        .into_iter()
        .filter(|alert| alert.kind == ALERT_JUDGE_DRIFT)
        .collect();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].subject, "judge:qa-judge@3");
    assert!(
        alerts[0]
            .message
            .contains("judge:qa-judge@3 drifted from judge:qa-judge@1"),
        "{}",
        alerts[0].message
    );

    let failed = canary_of(&*store, unreachable).await;
    assert_eq!(failed.state, "failed");
    assert!(failed.report.is_none());
    assert!(
        failed
            .error
            .unwrap()
            .contains("endpoint failed on 60 of 60 reference items"),
        "{:?}",
        canary_of(&*store, unreachable).await
    );
    assert_eq!(
        canary_of(&*store, unreachable).await.note(),
        "canary failed"
    );

    // A canary claimed by a process that died is taken over once stale, and the dead
    // process's late finish is refused.
    let orphaned = judge_version(&*store, judging).await;
    assert_eq!(
        store.claim_judge_canary("dead", 0, -1).await.unwrap(),
        Some((orphaned, unreachable))
    );
    match run_next_canary(&store, "alive").await.unwrap() {
        CanaryRound::Done { judge_id, report } => {
            assert_eq!(judge_id, orphaned);
            assert_eq!(report.agreement_with_old, Some(1.0));
        }
        other => panic!("{other:?}"),
    }
    // Only the process holding a claim finishes it.
    let held = judge_version(&*store, judging).await;
    assert_eq!(
        store
            .claim_judge_canary("holder", now_ms(), 0)
            .await
            .unwrap(),
        Some((held, orphaned))
    );
    let late = arbiter_store::grading::CanaryEnd::Failed {
        error: "late".into(),
    };
    assert!(!store
        .finish_judge_canary(held, "dead", &late, now_ms())
        .await
        .unwrap());
    assert_eq!(canary_of(&*store, held).await.state, "running");
    assert!(store
        .finish_judge_canary(held, "holder", &late, now_ms())
        .await
        .unwrap());
    // A failed canary (its endpoint was down) is tried again once stale.
    let later = now_ms() + 1;
    let retried = store
        .claim_judge_canary("retry", later, later)
        .await
        .unwrap();
    assert_eq!(retried, Some((unreachable, flipped)));
    let again = canary_of(&*store, unreachable).await;
    assert_eq!((again.state.as_str(), again.error), ("running", None));
}
