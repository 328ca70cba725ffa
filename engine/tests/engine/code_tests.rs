//! Code evals end to end: HumanEval-shaped items, a base checkpoint completing the functions,
//! the `code_tests` grader running each answer against the item's tests in the sandbox, the
//! outcomes kept apart with their evidence, and the outcomes cached by program and sandbox.

use arbiter_domain::grading::code_tests::CodeOutcome;
use arbiter_domain::prompt::Api;
use arbiter_engine::catalog::{self, EvalForm, EvalOptions};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{checkpoint, launch, test_worker, work_until_complete};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::{json, Value};
use std::sync::Arc;

stories!(code_answers_are_run_against_the_items_tests_in_the_sandbox);

fn problem(id: &str, prompt: &str, test: &str, entry_point: &str) -> Value {
    json!({"id": id, "prompt": prompt, "test": test, "entry_point": entry_point})
}

/// Four problems in HumanEval's shape.
fn problems() -> String {
    [
        problem(
            "add",
            "def add(a, b):\n    \"\"\"Sum of a and b.\"\"\"\n",
            "def check(candidate):\n    assert candidate(2, 3) == 5\n",
            "add",
        ),
        problem(
            "sub",
            "def sub(a, b):\n    \"\"\"a minus b.\"\"\"\n",
            "def check(candidate):\n    assert candidate(1, 1) == 0\n    assert candidate(5, 3) == 2\n",
            "sub",
        ),
        problem(
            "spin",
            "def spin():\n    \"\"\"Returns 1.\"\"\"\n",
            "def check(candidate):\n    assert candidate() == 1\n",
            "spin",
        ),
        problem(
            "missing",
            "def twice(x):\n    \"\"\"Doubles x.\"\"\"\n",
            "def check(candidate):\n    assert candidate(2) == 4\n",
            "twice",
        ),
    ]
    .iter()
    .map(|item| item.to_string() + "\n")
    .collect()
}

/// A base model completing each function: right for `add`, wrong for `sub` (passing only its
/// first test), an endless loop for `spin`, a name error for `twice`.
fn completes(body: &Value) -> String {
    let prompt = body["prompt"].as_str().unwrap_or_default();
    if prompt.starts_with("def add") {
        "    return a + b\n".into()
    } else if prompt.starts_with("def sub") {
        "    return b - a\n".into()
    } else if prompt.starts_with("def spin") {
        "    while True:\n        pass\n".into()
    } else {
        "    return x * factor\n".into()
    }
}

fn code_form(dataset_id: arbiter_domain::ids::DatasetId) -> EvalForm {
    EvalForm {
        prompt_template: "{{ prompt }}".into(),
        grader: json!({
            "kind": "code_tests",
            "extract": "whole",
            "prefix_field": "prompt",
            "tests_field": "test",
            "entry_point_field": "entry_point",
            "limits": {"cpu_seconds": 1, "wall_seconds": 5},
        })
        .to_string(),
        options: EvalOptions {
            api: Api::Completions,
            mapping: Some(arbiter_domain::fields::FieldMapping {
                input: "prompt".into(),
                target: None,
                category: None,
                ..Default::default()
            }),
            ..EvalOptions::default()
        },
        ..eval_form("code", dataset_id, 1)
    }
}

async fn code_answers_are_run_against_the_items_tests_in_the_sandbox(store: Arc<dyn Store>) {
    let Some(sandbox) = crate::sandbox::sandbox().await else {
        return;
    };
    let recorder = Recorder::start("base-coder", completes).await;
    let revision = catalog::upload_dataset(
        store.as_ref(),
        "code",
        "code.jsonl",
        problems().as_bytes(),
        None,
    )
    .await
    .unwrap();
    // A grader reading a field some item lacks, or nested in a combinator, is refused.
    let mut without_tests = code_form(revision.dataset_id);
    without_tests.grader = without_tests.grader.replace("\"test\"", "\"tests\"");
    match catalog::define_eval(store.as_ref(), &without_tests, None).await {
        Err(ServiceError::Invalid(message)) => assert!(
            message.contains("item `add` has no field `tests`"),
            "{message}"
        ),
        other => panic!("expected the missing field to be named, got {other:?}"),
    }
    let nested = EvalForm {
        grader: format!(
            "{{\"kind\": \"all_of\", \"graders\": [{}]}}",
            code_form(revision.dataset_id).grader
        ),
        ..code_form(revision.dataset_id)
    };
    match catalog::define_eval(store.as_ref(), &nested, None).await {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("code_tests runs alone"), "{message}")
        }
        other => panic!("expected a nested code grader to be refused, got {other:?}"),
    }

    let eval = catalog::define_eval(store.as_ref(), &code_form(revision.dataset_id), None)
        .await
        .unwrap();
    let model = checkpoint(
        store.as_ref(),
        "coder",
        &recorder.base_url,
        "base-coder",
        "",
    )
    .await;
    let run = launch(store.as_ref(), eval, model).await;
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    assert_eq!(manifest.sandbox.as_ref(), Some(sandbox.runtime()));
    work_until_complete(store.clone(), &[run], test_worker("w")).await;

    let results = store.run_results(run, 10).await.unwrap();
    let result = |case: &str| {
        results
            .iter()
            .find(|result| result.case_id == case)
            .unwrap_or_else(|| panic!("no result for {case}"))
    };
    assert_eq!(
        result("add").verdict,
        "pass",
        "{}",
        result("add").grade_reason
    );
    let sub = result("sub");
    assert_eq!(sub.verdict, "fail");
    assert!(
        sub.grade_reason
            .starts_with("the tests failed at `assert candidate(5, 3) == 2`: AssertionError"),
        "{}",
        sub.grade_reason
    );
    assert!(
        sub.grade_reason.contains("Traceback"),
        "{}",
        sub.grade_reason
    );
    let spin = result("spin");
    assert_eq!(spin.verdict, "fail");
    assert_eq!(
        spin.grade_reason,
        "the tests did not finish within 1 s of CPU time"
    );
    let missing = result("missing");
    assert_eq!(missing.verdict, "fail");
    assert!(
        missing
            .grade_reason
            .contains("NameError: name 'factor' is not defined"),
        "{}",
        missing.grade_reason
    );
    for result in &results {
        assert_eq!(result.decided_by.as_deref(), Some("deterministic"));
    }

    // Each outcome is in the grade cache under its program, limits and sandbox, so a second
    // checkpoint giving the same answers costs no sandbox run.
    let grader = arbiter_domain::grading::GraderSpec::compile(&manifest.eval.grader).unwrap();
    let code = grader.code_tests().unwrap();
    let item = json!({
        "prompt": "def add(a, b):\n    \"\"\"Sum of a and b.\"\"\"\n",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
        "entry_point": "add",
    });
    let program = code
        .program("    return a + b\n", item.as_object().unwrap())
        .unwrap();
    let cached = store
        .cached_judge_call(&code.cache_key(sandbox.runtime(), &program))
        .await
        .unwrap()
        .expect("the outcome is cached");
    assert_eq!(
        serde_json::from_str::<CodeOutcome>(&cached.output).unwrap(),
        CodeOutcome::Passed
    );
    let twin = checkpoint(
        store.as_ref(),
        "coder-twin",
        &recorder.base_url,
        "base-coder",
        "",
    )
    .await;
    let rerun = launch(store.as_ref(), eval, twin).await;
    work_until_complete(store.clone(), &[rerun], test_worker("w2")).await;
    let again = store.run_results(rerun, 10).await.unwrap();
    for result in &again {
        let first = results
            .iter()
            .find(|first| first.case_id == result.case_id)
            .unwrap();
        assert_eq!(
            (&result.verdict, &result.grade_reason),
            (&first.verdict, &first.grade_reason)
        );
    }
}
