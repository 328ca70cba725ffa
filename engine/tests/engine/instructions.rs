//! Instruction following (IFEval's checks) end to end, against the simulator: items that
//! cannot be checked are refused when the eval is saved, each answer's instructions are graded
//! strictly and loosely, the results are stored per instruction and reported as IFEval's four
//! accuracies, and a re-run answered from the cache is graded again from the item's own list.

use arbiter_domain::fields::FieldMapping;
use arbiter_engine::catalog::{self, EvalForm, EvalOptions};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{checkpoint, launch, start_sim, test_worker, work_until_complete};
use arbiter_testkit::stories;
use std::sync::Arc;

stories!(instructions_are_checked_and_reported_as_ifeval_does);

const SUITE: &[u8] = include_bytes!("../../../public/samples/instructions-basic.jsonl");

fn instructions_form(dataset_id: arbiter_domain::ids::DatasetId) -> EvalForm {
    EvalForm {
        prompt_template: "{{ prompt }}".into(),
        grader: r#"{"kind": "instructions"}"#.into(),
        options: EvalOptions {
            mapping: Some(FieldMapping {
                input: "prompt".into(),
                target: Some("response".into()),
                category: Some("category".into()),
                ..FieldMapping::default()
            }),
            ..EvalOptions::default()
        },
        ..eval_form("instructions", dataset_id, 1)
    }
}

async fn instructions_are_checked_and_reported_as_ifeval_does(store: Arc<dyn Store>) {
    // An item whose instruction lacks a parameter is refused by name: the reference would
    // draw one at random, and a verdict must not depend on a draw.
    let broken = br#"{"id": "x", "prompt": "Write.", "response": "Words.", "category": "length", "instruction_id_list": ["length_constraints:number_words"], "kwargs": [{"num_words": null, "relation": "at least"}]}"#;
    let bad = catalog::upload_dataset(store.as_ref(), "bad", "bad.jsonl", broken, None)
        .await
        .unwrap();
    match catalog::define_eval(store.as_ref(), &instructions_form(bad.dataset_id), None).await {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("item `x`"), "{message}");
            assert!(message.contains("has `num_words` = null"), "{message}");
        }
        other => panic!("expected a refusal naming the item, got {other:?}"),
    }

    let revision = catalog::upload_dataset(store.as_ref(), "ifeval", "ifeval.jsonl", SUITE, None)
        .await
        .unwrap();
    let items = revision.item_count as usize;
    let eval = catalog::define_eval(
        store.as_ref(),
        &instructions_form(revision.dataset_id),
        None,
    )
    .await
    .unwrap();
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
        // The checks always decide: nothing goes to people.
        assert_eq!((run.errors, run.uncertain), (0, 0), "{run:?}");
    }

    // Each answer keeps every instruction's result; the verdict is prompt-level strict.
    let results = store.run_results(runs[0], 100).await.unwrap();
    let checked = store.run_instruction_results(runs[0]).await.unwrap();
    assert_eq!(checked.len(), items);
    let suite: Vec<serde_json::Value> = std::str::from_utf8(SUITE)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    for (case_id, _, instructions) in &checked {
        let item = suite.iter().find(|item| item["id"] == **case_id).unwrap();
        let ids: Vec<&str> = item["instruction_id_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap())
            .collect();
        let found: Vec<&str> = instructions.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(found, ids);
        let result = results.iter().find(|r| &r.case_id == case_id).unwrap();
        let all_strict = instructions.iter().all(|r| r.strict);
        assert_eq!(result.verdict, if all_strict { "pass" } else { "fail" });
        assert!(instructions.iter().all(|r| r.loose || !r.strict));
        // The simulator answers with the item's following answer (perhaps after a chatty
        // first line, which only loose reading forgives) or its flawed one.
        let following = item["response"].as_str().unwrap();
        if result.output == following {
            assert_eq!(result.verdict, "pass");
        } else if result.output.ends_with(following) {
            assert!(instructions.iter().all(|r| r.loose), "{result:?}");
        }
    }

    // The report: IFEval's four accuracies, prompt-level strict being the pass rate.
    let (run, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), runs[0])
        .await
        .unwrap();
    let report = report.instructions.expect("an instructions report");
    assert_eq!(report.answers, items as u64);
    let accuracy = |name: &str| {
        report
            .accuracies
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("{name}"))
            .clone()
    };
    let prompt_strict = accuracy("prompt_level_strict_acc");
    assert_eq!(prompt_strict.followed, run.passed as u64);
    assert_eq!(prompt_strict.of, items as u64);
    let instructions_asked: u64 = checked.iter().map(|(_, _, r)| r.len() as u64).sum();
    let inst_strict = accuracy("inst_level_strict_acc");
    assert_eq!(inst_strict.of, instructions_asked);
    assert!(accuracy("prompt_level_loose_acc").followed >= prompt_strict.followed);
    assert!(accuracy("inst_level_loose_acc").followed >= inst_strict.followed);
    assert!(prompt_strict.interval.is_some());
    let per_id: u64 = report.instructions.iter().map(|row| row.asked).sum();
    assert_eq!(per_id, instructions_asked);

    // A twin checkpoint's answers come from the cache and are graded again from each item's
    // own instructions, to the same results.
    let twin = checkpoint(store.as_ref(), "a-twin", &endpoint, "sim-ckpt-a", "").await;
    let rerun = launch(store.as_ref(), eval, twin).await;
    work_until_complete(store.clone(), &[rerun], test_worker("w2")).await;
    assert_eq!(store.run_instruction_results(rerun).await.unwrap(), checked);
    let cached = store.run_results(rerun, 100).await.unwrap();
    assert!(cached.iter().all(|result| result.from_cache), "{cached:?}");
}
