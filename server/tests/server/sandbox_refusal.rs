//! Model-written code never runs unsandboxed: an `arbiter worker` process whose sandbox cannot
//! start grades no code answer. Each goes back to the queue, and after a few claims to a human
//! with the reason; none is passed or failed.

use arbiter_domain::grading::code_tests::SandboxRuntime;
use arbiter_domain::prompt::Api;
use arbiter_engine::catalog::{EvalForm, EvalOptions};
use arbiter_engine::sandbox::Sandbox;
use arbiter_testkit::pipeline::{checkpoint, launch, open_store, start_sim};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CODE: &[u8] = include_bytes!("../../../public/samples/code-basic.jsonl");

#[tokio::test]
async fn a_worker_without_a_sandbox_grades_no_code() {
    // The launch freezes this process's sandbox; without one there is nothing to launch.
    let Ok(sandbox) = Sandbox::shared().await else {
        assert!(
            std::env::var("ARBITER_REQUIRE_SANDBOX").as_deref() != Ok("1"),
            "ARBITER_REQUIRE_SANDBOX=1 but the sandbox cannot run"
        );
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim(arbiter_sim::SimConfig::demo()).await;
    let revision =
        arbiter_engine::catalog::upload_dataset(store.as_ref(), "code", "code.jsonl", CODE, None)
            .await
            .unwrap();
    let form = EvalForm {
        name: "code".into(),
        dataset_id: revision.dataset_id,
        prompt_template: "{{ prompt }}".into(),
        max_tokens: 128,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: r#"{"kind": "code_tests", "extract": "whole", "prefix_field": "prompt",
                    "tests_field": "test", "entry_point_field": "entry_point"}"#
            .into(),
        options: EvalOptions {
            api: Api::Completions,
            mapping: Some(arbiter_domain::fields::FieldMapping {
                input: "prompt".into(),
                target: None,
                ..Default::default()
            }),
            ..EvalOptions::default()
        },
    };
    let eval = arbiter_engine::catalog::define_eval(store.as_ref(), &form, None)
        .await
        .unwrap();
    let model = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let run = launch(store.as_ref(), eval, model).await;
    let frozen: Option<SandboxRuntime> = store.run_manifest(run).await.unwrap().unwrap().sandbox;
    assert_eq!(frozen.as_ref(), Some(sandbox.runtime()));

    let database_url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
    let mut worker = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args([
            "worker",
            "--database-url",
            &database_url,
            "--lease-seconds",
            "5",
        ])
        .env("RUST_LOG", "warn")
        .env("ARBITER_SANDBOX_BWRAP", "/nonexistent/bwrap")
        .env(
            arbiter_engine::clients::egress::EGRESS_ALLOW_VARIABLE,
            arbiter_testkit::egress::TEST_EGRESS_ALLOW,
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("arbiter worker starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let progress = loop {
        let progress = arbiter_engine::runs::run_progress(store.as_ref(), run)
            .await
            .unwrap();
        if progress.done == 8 || Instant::now() > deadline {
            break progress;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(progress.done, 8, "{progress:?}");
    assert_eq!((progress.passed, progress.failed), (0, 0), "{progress:?}");
    assert_eq!(progress.uncertain, 8);
    for result in store.run_results(run, 10).await.unwrap() {
        assert_eq!(result.decided_by.as_deref(), Some("pending"));
        assert!(
            result
                .grade_reason
                .starts_with("the sandbox could not run the tests: none runs on this worker"),
            "{}",
            result.grade_reason
        );
        assert!(result.grade_reason.contains("/nonexistent/bwrap"));
    }
}
