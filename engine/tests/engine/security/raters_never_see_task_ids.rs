//! Before the fix an item was served under its task id, which reached the browser: a gold
//! item's real, usually old, id gave it away. Now each claim has its own random handle.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::task::ClaimHandle;
use arbiter_store::{Store, StoreError};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(items_are_served_under_a_handle_per_claim);

async fn items_are_served_under_a_handle_per_claim(store: Arc<dyn Store>) {
    let store = &*store;
    launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_to_humans(store, &ids, 2).await;
    let ann = store
        .create_user("ann", &stand_in_hash("ann"), Role::Annotator)
        .await
        .unwrap();
    let ben = store
        .create_user("ben", &stand_in_hash("ben"), Role::Annotator)
        .await
        .unwrap();
    let claim = |rater| async move {
        store
            .next_annotation_task(rater, LONG_LEASE_MS)
            .await
            .unwrap()
            .expect("an item is offered")
    };
    let (for_ann, for_ben) = (claim(ann).await, claim(ben).await);
    assert_eq!(for_ann.task_id, for_ben.task_id, "both rate the first item");

    // What the browser receives names no task.
    let sent = serde_json::to_value(&for_ann).unwrap();
    let fields: Vec<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(!fields.contains(&"task_id"), "{fields:?}");
    let handle = sent["handle"].as_str().unwrap();
    assert!(
        handle.len() == 32 && handle.chars().all(|c| c.is_ascii_hexdigit()),
        "{handle}"
    );
    assert_ne!(
        for_ann.handle, for_ben.handle,
        "each claim has its own handle"
    );

    // A handle is good only for its own rater's live claim.
    for (handle, rater) in [
        (&for_ann.handle, ben),
        (&ClaimHandle(for_ann.task_id.to_string()), ann),
        (&ClaimHandle("0".repeat(32)), ann),
    ] {
        assert!(matches!(
            store.submit_label(handle, rater, true, "").await,
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.skip_task(handle, rater).await,
            Err(StoreError::Conflict(_))
        ));
    }
    store
        .submit_label(&for_ann.handle, ann, true, "")
        .await
        .unwrap();
    store.skip_task(&for_ben.handle, ben).await.unwrap();
    let next = claim(ann).await;
    assert_ne!(next.handle, for_ann.handle, "a new claim, a new handle");
}
