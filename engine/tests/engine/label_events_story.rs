//! Story test for the `label.completed` webhook, on both backends: items are sent once when
//! their raters agree, a split is sent only when a reviewer settles it, every event carries
//! the item's outcome and all its labels, and only leads and admins may subscribe (the events
//! name raters).

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::GOLD_RATE_SETTING;
use arbiter_domain::annotation::review::ReviewDecision;
use arbiter_engine::secrets::SecretBox;
use arbiter_engine::webhooks::{create_webhook, enqueue_new_events, EVENT_LABEL_COMPLETED};
use arbiter_store::{now_ms, Store};
use serde_json::Value;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(decided_items_go_to_webhooks_once_per_decision_with_their_labels);

/// The `label.completed` payloads queued so far, by task id then decision time.
async fn queued_items(store: &dyn Store) -> Vec<Value> {
    let mut items: Vec<Value> = store
        .due_deliveries(i64::MAX, 1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|delivery| delivery.event == EVENT_LABEL_COMPLETED)
        .map(|delivery| {
            let payload: Value = serde_json::from_str(&delivery.payload).unwrap();
            assert_eq!(payload["event"], EVENT_LABEL_COMPLETED);
            payload["item"].clone()
        })
        .collect();
    items.sort_by_key(|item| {
        (
            item["task_id"].as_i64().unwrap(),
            item["decided_at"].as_i64().unwrap(),
        )
    });
    items
}

async fn decided_items_go_to_webhooks_once_per_decision_with_their_labels(store: Arc<dyn Store>) {
    let store = &*store;
    let secrets = SecretBox::without_key();
    let start = now_ms();
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_to_humans(store, &ids, 2).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let ann = new_user(store, "ann", Role::Annotator).await;
    let ben = new_user(store, "ben", Role::Annotator).await;
    let rev = new_user(store, "rev", Role::Reviewer).await;
    let events = vec![EVENT_LABEL_COMPLETED.to_string()];

    // The events name raters: a researcher's webhook may not have them.
    let refused = create_webhook(
        store,
        &secrets,
        "https://hooks.example.com/labels",
        &events,
        false,
        false,
        None,
        start,
    )
    .await
    .unwrap_err();
    assert_eq!(refused.status_code(), 403, "{refused}");
    assert!(refused.to_string().contains("label events"), "{refused}");
    create_webhook(
        store,
        &secrets,
        "https://hooks.example.com/labels",
        &events,
        false,
        true,
        None,
        start,
    )
    .await
    .unwrap();

    // Ann passes all three items; Ben passes the first two he is served and fails the third.
    for _ in 0..3 {
        label_next(store, ann, true).await;
    }
    let mut split_case = None;
    for served in 0..3 {
        let task = store
            .next_annotation_task(ben, LONG_LEASE_MS)
            .await
            .unwrap()
            .expect("an item is offered");
        let pass = served < 2;
        if !pass {
            split_case = task.identity_id;
        }
        store
            .submit_label(&task.handle, ben, pass, "my reason")
            .await
            .unwrap();
    }
    let split_case = split_case.unwrap();

    // Two items are decided (the raters agreed); the split one waits for a reviewer.
    let queued = enqueue_new_events(store, now_ms() + 10_000).await.unwrap();
    assert_eq!(queued, 2);
    let items = queued_items(store).await;
    assert_eq!(items.len(), 2);
    for item in &items {
        assert_eq!(item["run_id"], run_id.get());
        assert_eq!(item["kind"], "escalation");
        assert_eq!(item["verdict"], "pass");
        assert_ne!(item["work_item_id"], split_case.get());
        let labels = item["labels"].as_array().unwrap();
        let raters: Vec<&str> = labels
            .iter()
            .map(|label| label["rater"].as_str().unwrap())
            .collect();
        assert_eq!(raters, ["ann", "ben"]);
        assert_eq!(labels[1]["rationale"], "my reason");
        assert!(labels
            .iter()
            .all(|label| label["verdict"] == "pass" && label["state"] == "standing"));
        assert!(labels[0]["duration_ms"].as_i64().unwrap() >= 0);
    }
    // Scanning again queues nothing twice.
    assert_eq!(
        enqueue_new_events(store, now_ms() + 10_000).await.unwrap(),
        0
    );

    // The reviewer settles the split as a fail: that decision is sent, with both labels.
    let review = store.next_review(rev).await.unwrap().unwrap();
    store
        .review_label(
            review.label_id,
            rev,
            ReviewDecision::Correct { pass: false },
            "the unit is missing",
        )
        .await
        .unwrap();
    assert_eq!(
        enqueue_new_events(store, now_ms() + 10_000).await.unwrap(),
        1
    );
    let items = queued_items(store).await;
    let settled = items
        .iter()
        .find(|item| item["work_item_id"] == split_case.get())
        .expect("the settled split is sent");
    assert_eq!(settled["verdict"], "fail");
    let verdicts: Vec<&str> = settled["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|label| label["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["pass", "fail"]);
    assert_eq!(items.len(), 3);
}
