//! Before the fix a reviewer could decide any label (drawn for review or not, served to them
//! or not) and was served labels on items they had labelled themselves.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::review::ReviewDecision;
use arbiter_store::{Store, StoreError};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(reviewers_decide_only_labels_served_to_them_on_items_they_did_not_label);

async fn reviewers_decide_only_labels_served_to_them_on_items_they_did_not_label(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_to_humans(store, &ids, 2).await;
    let ann = new_user(store, "ann", Role::Annotator).await;
    // A reviewer labels too; that item's review is someone else's.
    let sam = new_user(store, "sam", Role::Reviewer).await;
    let (rev, ria) = (
        new_user(store, "rev", Role::Reviewer).await,
        new_user(store, "ria", Role::Reviewer).await,
    );
    // Ann and Sam split the first item, so both labels wait for review; Ann's label on the
    // second item is not drawn for review (the rate is 0).
    label_next(store, ann, true).await;
    label_next(store, sam, false).await;
    label_next(store, ann, true).await;
    let labels = store.run_labels(run_id).await.unwrap();
    let first_task = labels
        .iter()
        .find(|label| label.rater == "sam")
        .unwrap()
        .task_id;
    let on_first = |rater: &str| {
        labels
            .iter()
            .find(|label| label.rater == rater && label.task_id == first_task)
            .unwrap()
            .label_id
    };
    let (ann_label, sam_label) = (on_first("ann"), on_first("sam"));
    let unsampled = labels
        .iter()
        .find(|label| label.task_id != first_task)
        .unwrap()
        .label_id;

    assert_eq!(
        store.next_review(sam).await.unwrap(),
        None,
        "Sam labelled the item, so neither of its labels is his to review"
    );
    assert!(matches!(
        store
            .review_label(ann_label, sam, ReviewDecision::Reject, "")
            .await,
        Err(StoreError::Conflict(_))
    ));

    // Each reviewer is served a label of their own, and keeps it until they decide.
    let for_rev = store
        .next_review(rev)
        .await
        .unwrap()
        .expect("a label")
        .label_id;
    let for_ria = store
        .next_review(ria)
        .await
        .unwrap()
        .expect("a label")
        .label_id;
    assert_ne!(for_rev, for_ria, "one reviewer at a time per label");
    let mut served = vec![for_rev, for_ria];
    served.sort_unstable();
    assert_eq!(
        served,
        vec![ann_label.min(sam_label), ann_label.max(sam_label)]
    );
    assert_eq!(
        store
            .next_review(rev)
            .await
            .unwrap()
            .map(|item| item.label_id),
        Some(for_rev),
        "asking again serves the same label"
    );
    assert!(
        matches!(
            store.review_label(for_ria, rev, ReviewDecision::Accept, "").await,
            Err(StoreError::Conflict(message)) if message.contains("not served to you")
        ),
        "Ria's label is not Rev's to decide"
    );
    assert!(matches!(
        store.review_label(unsampled, rev, ReviewDecision::Reject, "").await,
        Err(StoreError::Conflict(message)) if message.contains("not drawn")
    ));
    assert!(matches!(
        store
            .review_label(999_999, rev, ReviewDecision::Accept, "")
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.run_labels(run_id).await.unwrap(),
        labels,
        "the refusals changed nothing"
    );

    store
        .review_label(for_rev, rev, ReviewDecision::Accept, "")
        .await
        .unwrap();
    store
        .review_label(for_ria, ria, ReviewDecision::Accept, "")
        .await
        .unwrap();
    assert!(matches!(
        store
            .review_label(for_rev, rev, ReviewDecision::Accept, "")
            .await,
        Err(StoreError::Conflict(_))
    ));
}
