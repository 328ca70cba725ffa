//! Before the fix a researcher could exhaust the server's memory with prompts: templates had no
//! length limit and could repeat `{input}` thousands of times, item fields were bounded only by
//! the upload cap, and a launch rendered whatever that made. Now templates, item fields and the
//! rendered prompt are bounded, each refusal names the limit (and the item), and nothing is
//! stored from a refused eval, upload or launch.

use arbiter_domain::run::Priority;
use arbiter_engine::catalog::{self, EvalForm};
use arbiter_engine::error::ServiceError;
use arbiter_engine::runs;
use arbiter_store::Store;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    templates_and_their_prompts_are_bounded_when_saved_and_launched,
    expansion_reads_long_items_in_small_pages
);

fn invalid(result: Result<impl std::fmt::Debug, ServiceError>, naming: &[&str]) {
    match result {
        Err(ServiceError::Invalid(message)) => {
            for part in naming {
                assert!(message.contains(part), "`{part}` not in: {message}");
            }
        }
        other => panic!("expected 400 naming {naming:?}, got {other:?}"),
    }
}

fn jsonl(items: &[(&str, String)]) -> Vec<u8> {
    items
        .iter()
        .map(|(id, input)| {
            serde_json::json!({"id": id, "input": input, "target": "x"}).to_string() + "\n"
        })
        .collect::<String>()
        .into_bytes()
}

async fn templates_and_their_prompts_are_bounded_when_saved_and_launched(store: Arc<dyn Store>) {
    let store = &*store;
    let revision = catalog::upload_dataset(
        store,
        "long",
        "long.jsonl",
        &jsonl(&[("short", "2+2?".into()), ("essay", "y".repeat(2048))]),
        None,
    )
    .await
    .unwrap();
    let form = |template: String| EvalForm {
        prompt_template: template,
        ..eval_form("bounded", revision.dataset_id, 1)
    };

    // A template beyond 64 KiB, and one whose prompt for the longest item would pass 1 MiB.
    invalid(
        catalog::define_eval(
            store,
            &form(format!("{{input}}{}", "x".repeat(70_000))),
            None,
        )
        .await,
        &["the prompt template is", "the limit is 64.0 KiB"],
    );
    invalid(
        catalog::define_eval(store, &form("{input}".repeat(1000)), None).await,
        &["item `essay`", "1000 ×", "the limit is 1.0 MiB"],
    );
    assert!(store.list_evals().await.unwrap().is_empty());

    // An item field longer than any prompt is refused at upload, naming its line.
    invalid(
        catalog::upload_dataset(
            store,
            "long",
            "long.jsonl",
            &jsonl(&[("ok", "a".into()), ("huge", "z".repeat(1024 * 1024 + 1))]),
            None,
        )
        .await,
        &["line 2", "field `input`", "the limit is 1048576 bytes"],
    );
    assert_eq!(
        store
            .list_revisions(revision.dataset_id)
            .await
            .unwrap()
            .len(),
        1
    );

    // A template that fits today's items is saved; a newer revision with a longer item then
    // refuses the launch (which uses the newest revision) before anything is stored.
    let eval = catalog::define_eval(store, &form("{input}".repeat(300)), None)
        .await
        .unwrap();
    catalog::upload_dataset(
        store,
        "long",
        "long-v2.jsonl",
        &jsonl(&[("short", "2+2?".into()), ("longer", "w".repeat(8 * 1024))]),
        None,
    )
    .await
    .unwrap();
    let checkpoint = catalog::register_simple_checkpoint(store, "base", ENDPOINT, "m", None)
        .await
        .unwrap();
    invalid(
        runs::launch_run(
            store,
            eval,
            checkpoint,
            Priority::Scheduled,
            "default",
            None,
        )
        .await,
        &["item `longer`", "300 ×", "the limit is 1.0 MiB"],
    );
    assert!(store.list_runs().await.unwrap().is_empty());
}

async fn expansion_reads_long_items_in_small_pages(store: Arc<dyn Store>) {
    let store = &*store;
    let items: Vec<(String, String)> = (0..6)
        .map(|index| (format!("item-{index}"), "q".repeat(1000)))
        .collect();
    let borrowed: Vec<(&str, String)> = items
        .iter()
        .map(|(id, input)| (id.as_str(), input.clone()))
        .collect();
    let revision = catalog::upload_dataset(store, "pages", "pages.jsonl", &jsonl(&borrowed), None)
        .await
        .unwrap();
    let page = |after: i64, max_bytes: i64| async move {
        store
            .items_after(revision.id, after, 100, max_bytes)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, item)| item.case_id)
            .collect::<Vec<_>>()
    };
    // Each item is 1,001 bytes (input and target): a 2,500-byte page holds three (the third
    // starts under the budget), a tiny budget still returns one, a large one all six.
    assert_eq!(page(-1, 2_500).await, ["item-0", "item-1", "item-2"]);
    assert_eq!(page(-1, 1).await, ["item-0"]);
    assert_eq!(page(-1, 1 << 30).await.len(), 6);
    let positions: Vec<i64> = store
        .items_after(revision.id, -1, 2, 1 << 30)
        .await
        .unwrap()
        .into_iter()
        .map(|(position, _)| position)
        .collect();
    assert_eq!(
        page(positions[1], 2_500).await,
        ["item-2", "item-3", "item-4"]
    );
}
