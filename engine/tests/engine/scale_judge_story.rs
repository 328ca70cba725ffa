//! Story test for judges on a rubric's scale, on both backends, with `arbiter sim` as the model
//! under test and as a calibrated judge: a judge is defined on a rubric's ordinal dimension
//! (bad ones refused, nothing stored), triage routes on its probability of passing, raters
//! answer the same rubric, and the judge's points are calibrated against theirs; a second run
//! answered from the grade cache gives the very same scores.

use arbiter_domain::accounts::Role;
use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
use arbiter_domain::grading::scale::JudgeScale;
use arbiter_domain::ids::{CheckpointId, EvalId};
use arbiter_engine::error::ServiceError;
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use arbiter_engine::rubrics;
use arbiter_sim::{SimConfig, SimModelKind};
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{
    launch, sim_answer_is_right, start_sim, test_worker, work_until_complete,
};
use arbiter_testkit::stories;
use std::sync::Arc;

stories!(a_judge_scores_a_rubric_dimension_and_is_calibrated_against_the_raters,);

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");
const ITEMS: u64 = 60;
/// A deterministic grader that never decides, so every answer reaches the judge.
const UNDECIDING_GRADER: &str =
    r#"{"kind": "regex_match", "pattern": "NEVER-IN-AN-ANSWER (\\d+)"}"#;

const QUALITY: &str = r#"{
  "dimensions": [
    {"key": "helpful", "question": "How helpful is the answer?", "kind": "ordinal", "scale": [
      {"label": "Useless", "description": "Wrong or no answer"},
      {"label": "Weak", "description": "Mostly wrong"},
      {"label": "Fair", "description": "Partly right"},
      {"label": "Good", "description": "Right"},
      {"label": "Excellent", "description": "Right and clear"}]},
    {"key": "tone", "question": "Tone?", "kind": "categorical", "options": ["formal", "casual"]}
  ],
  "verdict": {"dimension": "helpful", "pass_at_least": 4}
}"#;

fn judge_form(checkpoint_id: CheckpointId, rubric: &str, dimension: &str, pass: &str) -> JudgeForm {
    JudgeForm {
        name: "helpful-judge".into(),
        checkpoint_id,
        rubric: DEFAULT_RUBRIC.into(),
        max_tokens: 8,
        scale_rubric: rubric.into(),
        scale_dimension: dimension.into(),
        scale_pass_at_least: pass.into(),
        pairwise: false,
        batch_items: 1,
    }
}

/// Verdicts the judge is at least 90% sure of are accepted, half of them audited by a human;
/// the rest go to humans.
fn policy(judge: i64, rubric: &str) -> PolicyForm {
    PolicyForm {
        cheap_judge: judge.to_string(),
        accept_threshold: "0.9".into(),
        escalate_threshold: "0.9".into(),
        audit_rate: "0.5".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0.5".into(),
        review_rate: "0".into(),
        rubric: rubric.into(),
        ..PolicyForm::default()
    }
}

async fn eval(store: &dyn Store, name: &str) -> EvalId {
    let dataset_id = match store.list_datasets().await.unwrap().first() {
        Some(dataset) => dataset.id,
        None => {
            arbiter_engine::catalog::upload_dataset(store, "qa", "qa.jsonl", SAMPLE, None)
                .await
                .unwrap()
                .dataset_id
        }
    };
    let form = arbiter_engine::catalog::EvalForm {
        grader: UNDECIDING_GRADER.into(),
        ..eval_form(name, dataset_id, 1)
    };
    arbiter_engine::catalog::define_eval(store, &form, None)
        .await
        .unwrap()
}

/// Labels every open task as the truth says: `helpful` 5 for a right answer, 1 for a wrong one.
async fn label_by_truth(store: &dyn Store, rater: arbiter_domain::ids::UserId) -> u64 {
    let mut labelled = 0;
    while let Some(task) = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        let right = sim_answer_is_right(&task);
        let answers = format!(
            r#"{{"helpful": {}, "tone": ["formal"]}}"#,
            if right { 5 } else { 1 }
        );
        rubrics::submit_answers(store, &task.handle, rater, &answers, "", None)
            .await
            .unwrap();
        labelled += 1;
    }
    labelled
}

async fn a_judge_scores_a_rubric_dimension_and_is_calibrated_against_the_raters(
    store: Arc<dyn Store>,
) {
    let model = |name: &str, kind, confidence| {
        arbiter_testkit::pipeline::sim_model(name, kind, 0.7, confidence)
    };
    let endpoint = start_sim(SimConfig {
        models: vec![
            model("answerer", SimModelKind::Answerer, None),
            model("judge", SimModelKind::Judge, Some((0.7, 1.0))),
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
    let (answerer, judge_checkpoint) = (register("answerer").await, register("judge").await);
    let rubric = rubrics::create_rubric(&*store, "quality", QUALITY, "", None)
        .await
        .unwrap();

    // A judge scores an ordinal dimension of a rubric that exists, passing from a point on it.
    for (rubric_name, dimension, pass, says) in [
        ("quality", "tone", "", "not an ordinal scale"),
        ("quality", "helpful", "7", "from 2 to 5"),
        ("quality", "helpful", "x", "the pass point must be a number"),
        ("quality", "length", "", "has no dimension `length`"),
    ] {
        let form = judge_form(judge_checkpoint, rubric_name, dimension, pass);
        match grading::define_judge(&*store, &form, None).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(says), "{message}"),
            other => panic!("{dimension}: {other:?}"),
        }
    }
    let unknown = judge_form(judge_checkpoint, "nothing", "helpful", "");
    assert!(matches!(
        grading::define_judge(&*store, &unknown, None).await,
        Err(ServiceError::NotFound(message)) if message.contains("no rubric `nothing`")
    ));
    assert!(store.list_judges().await.unwrap().is_empty());

    // The pass point comes from the rubric; the prompt from the dimension's anchors.
    let judge = grading::define_judge(
        &*store,
        &judge_form(judge_checkpoint, "quality", "helpful", ""),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        judge.scale,
        Some(JudgeScale {
            rubric_id: rubric.id,
            rubric_name: "quality".into(),
            rubric_version: 1,
            dimension: "helpful".into(),
            points: 5,
            pass_at_least: 4,
        })
    );
    assert!(judge.rubric.contains("scale of 1 to 5") && judge.rubric.contains("5 — Excellent"));
    assert_eq!(
        store.get_judge(judge.id).await.unwrap().unwrap().scale,
        judge.scale
    );

    // In triage it must decide the rubric's own verdict, which its raters answer; a prompt
    // asking for PASS or FAIL is refused.
    let lenient = grading::define_judge(
        &*store,
        &JudgeForm {
            name: "lenient-judge".into(),
            ..judge_form(judge_checkpoint, "quality", "helpful", "3")
        },
        None,
    )
    .await
    .unwrap();
    let first = eval(&*store, "helpful judged").await;
    for (form, says) in [
        (policy(judge.id, ""), "scores rubric `quality`"),
        (
            policy(lenient.id, "quality"),
            "the rubric's verdict passes from 4",
        ),
    ] {
        match grading::save_policy(&*store, first, &form, None).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(says), "{message}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(store.grading_policies(first).await.unwrap().is_empty());
    let pass_fail_prompt = JudgeForm {
        name: "confused-judge".into(),
        rubric: format!("Be strict.\n{DEFAULT_RUBRIC}"),
        ..judge_form(judge_checkpoint, "quality", "helpful", "")
    };
    match grading::define_judge(&*store, &pass_fail_prompt, None).await {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("PASS or FAIL"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.list_judges().await.unwrap().len(), 2);
    grading::save_policy(&*store, first, &policy(judge.id, "quality"), None)
        .await
        .unwrap();

    let run = launch(&*store, first, answerer).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w"))
        .await
        .remove(0);
    assert_eq!(progress.done, ITEMS as i64);
    // Triage routed on the probability of passing: the sure verdicts were accepted, the rest
    // wait for humans, with the audited share of the accepted ones.
    let costs = store.run_costs(run).await.unwrap();
    assert_eq!(costs.judge_grades, ITEMS as i64, "{costs:?}");
    let decided: std::collections::HashMap<String, i64> =
        costs.decided_by.iter().cloned().collect();
    let (accepted, pending) = (decided["cheap_judge"], decided["pending"]);
    assert_eq!(accepted + pending, ITEMS as i64, "{decided:?}");
    assert!(accepted > 0 && pending > 0, "{decided:?}");
    let rater = new_user(&*store, "rae", Role::Annotator).await;
    let labelled = label_by_truth(&*store, rater).await;
    assert!(
        labelled > pending as u64 && labelled < ITEMS,
        "{labelled} labels, {decided:?}"
    );

    let report = grading::judge_report(&*store, judge.id).await.unwrap();
    let calibration = report
        .scale_calibration
        .expect("a scale judge's calibration");
    assert_eq!(calibration.items, labelled);
    let confusion = &calibration.confusion;
    assert_eq!(confusion.iter().flatten().sum::<u64>(), labelled);
    // The raters only answered 1 or 5; the judge's points fall where the sim puts them: a
    // good answer's on 4 or 5, a bad one's on 1 or 2, never 3.
    for row in confusion {
        assert_eq!(row[1] + row[2] + row[3], 0, "{confusion:?}");
    }
    assert_eq!(confusion[2], vec![0; 5], "{confusion:?}");
    // The calibrated judge is right as often as it says (uniform on [0.7, 1): 85% on
    // average, less on the unsure items humans see), so its points agree with the raters'
    // well above chance.
    let kappa = calibration.weighted_kappa.expect("a defined kappa");
    assert!(kappa > 0.2, "{calibration:?}");
    let agreeing = confusion[3][4] + confusion[4][4] + confusion[0][0] + confusion[1][0];
    assert!(agreeing as f64 / labelled as f64 > 0.55, "{confusion:?}");
    assert_eq!(calibration.pass_accuracy.items, labelled);
    // The verdict calibration reads the raters' verdicts from the rubric's verdict dimension.
    assert_eq!(report.accuracy.items, labelled);

    // The same answers and judge under another eval: every score comes from the grade cache
    // and is the same, so each cell of the confusion table doubles.
    let second = eval(&*store, "helpful judged again").await;
    grading::save_policy(&*store, second, &policy(judge.id, "quality"), None)
        .await
        .unwrap();
    let again = launch(&*store, second, answerer).await;
    work_until_complete(store.clone(), &[again], test_worker("w")).await;
    let cached = store.run_costs(again).await.unwrap();
    assert_eq!(cached.cached_judge_grades, ITEMS as i64, "{cached:?}");
    assert_eq!(label_by_truth(&*store, rater).await, labelled);
    let doubled = grading::judge_report(&*store, judge.id)
        .await
        .unwrap()
        .scale_calibration
        .unwrap();
    let twice: Vec<Vec<u64>> = confusion
        .iter()
        .map(|row| row.iter().map(|count| count * 2).collect())
        .collect();
    assert_eq!(doubled.confusion, twice);
    assert!(
        (doubled.mean_absolute_error.unwrap() - calibration.mean_absolute_error.unwrap()).abs()
            < 1e-9
    );

    // The rubric's scale changes: a launch with the judge is refused with the reason.
    let four_points = QUALITY
        .replace(
            r#"{"label": "Good", "description": "Right"},"#,
            r#"{"label": "Good", "description": "Right"}]},"#,
        )
        .replace(
            r#"      {"label": "Excellent", "description": "Right and clear"}]},"#,
            "",
        );
    rubrics::create_rubric(&*store, "quality", &four_points, "four points", None)
        .await
        .unwrap();
    match arbiter_engine::runs::launch_run(
        &*store,
        second,
        answerer,
        arbiter_domain::run::Priority::Scheduled,
        "default",
        None,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("changed that scale"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
