//! Story tests for a rater's feedback, on both backends: a rater changes their label while its
//! item waits for the other raters and not after, reads a reviewer's correction and rejection
//! with the reasons, and a change racing the item's last label never leaves a verdict made
//! from a label that then changed.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::GOLD_RATE_SETTING;
use arbiter_domain::annotation::review::{OwnLabel, ReviewDecision};
use arbiter_domain::ids::UserId;
use arbiter_store::{Store, StoreError};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    raters_change_labels_until_their_item_is_decided_and_read_reviews,
    a_change_racing_the_last_label_never_leaves_a_stale_verdict,
);

async fn own(store: &dyn Store, rater: UserId) -> Vec<OwnLabel> {
    store.own_labels(rater, 50).await.unwrap()
}

async fn raters_change_labels_until_their_item_is_decided_and_read_reviews(store: Arc<dyn Store>) {
    let store = &*store;
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_to_humans(store, &ids, 2).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let ann = new_user(store, "ann", Role::Annotator).await;
    let ben = new_user(store, "ben", Role::Annotator).await;
    let rev = new_user(store, "rev", Role::Reviewer).await;
    assert!(own(store, ann).await.is_empty());

    // Ann labels; the item waits for a second rater, so her label can still change.
    let task = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
        .unwrap();
    store
        .submit_label(&task.handle, ann, true, "looks right")
        .await
        .unwrap();
    let labels = own(store, ann).await;
    assert_eq!(labels.len(), 1);
    let label = &labels[0];
    assert_eq!(
        (label.pass, label.rationale.as_str()),
        (true, "looks right")
    );
    assert_eq!(label.editable, Ok(()));
    assert_eq!(label.edited_at, None);
    assert_eq!(label.input, task.input);
    assert!(label.review.is_none());
    let label_id = label.label_id;

    // Nobody else can change it, nor can Ann change a label that is not hers.
    assert!(matches!(
        store.edit_label(label_id, ben, false, "").await,
        Err(StoreError::NotFound(_))
    ));
    store
        .edit_label(label_id, ann, false, "the unit is wrong")
        .await
        .unwrap();
    let label = &own(store, ann).await[0];
    assert_eq!(
        (label.pass, label.rationale.as_str()),
        (false, "the unit is wrong")
    );
    assert!(label.edited_at.is_some());

    // Ben's label completes the item: the raters split (Ann's changed label counted), both
    // labels go to a reviewer, and Ann's can no longer change.
    let for_ben = store
        .next_annotation_task(ben, LONG_LEASE_MS)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(for_ben.task_id, task.task_id);
    store
        .submit_label(&for_ben.handle, ben, true, "")
        .await
        .unwrap();
    let label = &own(store, ann).await[0];
    assert!(label.review.is_none(), "waiting for a reviewer");
    let refusal = label.editable.clone().unwrap_err();
    assert!(refusal.contains("all its labels"), "{refusal}");
    match store.edit_label(label_id, ann, true, "").await {
        Err(StoreError::Conflict(message)) => assert_eq!(message, refusal),
        other => panic!("expected a refusal, got {other:?}"),
    }

    // A reviewer corrects Ann's label and rejects Ben's; each rater reads the decision on
    // their own label, with its reason.
    let first = store.next_review(rev).await.unwrap().unwrap();
    assert_eq!(first.label_id, label_id, "the older label comes first");
    store
        .review_label(
            label_id,
            rev,
            ReviewDecision::Correct { pass: true },
            "42 is what was asked",
        )
        .await
        .unwrap();
    assert_eq!(progress(store, run_id).await.passed, 1);
    let second = store.next_review(rev).await.unwrap().unwrap();
    store
        .review_label(
            second.label_id,
            rev,
            ReviewDecision::Reject,
            "labelled in two seconds",
        )
        .await
        .unwrap();

    let labels = own(store, ann).await;
    assert_eq!(labels.len(), 1);
    let review = labels[0].review.as_ref().expect("the correction is shown");
    assert_eq!(review.decision, "corrected");
    assert_eq!(review.corrected_to, Some(true));
    assert_eq!(review.reason, "42 is what was asked");
    assert_eq!(review.overturned_to, None);

    let labels = own(store, ben).await;
    assert_eq!(labels.len(), 1);
    let review = labels[0].review.as_ref().expect("the rejection is shown");
    assert_eq!(
        (review.decision.as_str(), review.reason.as_str()),
        ("rejected", "labelled in two seconds")
    );
    let refusal = labels[0].editable.clone().unwrap_err();
    assert!(refusal.contains("rejected"), "{refusal}");
    assert!(matches!(
        store.edit_label(second.label_id, ben, false, "").await,
        Err(StoreError::Conflict(_))
    ));
    // The reviewer's own page lists nothing: they labelled nothing.
    assert!(own(store, rev).await.is_empty());

    // The label export carries the reviews, a page at a time in item then label order.
    let mut records = Vec::new();
    let mut after = (0, 0);
    while let Some(record) = store.label_records(run_id, after, 1).await.unwrap().pop() {
        after = (record.work_item_id, record.label_id);
        records.push(record);
    }
    assert_eq!(records.len(), 2);
    let (corrected, rejected) = (&records[0], &records[1]);
    assert_eq!(corrected.rater, "ann");
    assert_eq!(corrected.review_state.as_deref(), Some("corrected"));
    assert_eq!(corrected.review_decision.as_deref(), Some("corrected"));
    assert_eq!(corrected.review_verdict.as_deref(), Some("pass"));
    assert_eq!(
        corrected.review_reason.as_deref(),
        Some("42 is what was asked")
    );
    assert!(corrected.edited_at.is_some());
    assert_eq!(
        (rejected.rater.as_str(), rejected.state.as_str()),
        ("ben", "rejected")
    );
    assert_eq!(rejected.review_decision.as_deref(), Some("rejected"));
    assert_eq!(rejected.check_state, None);
}

async fn a_change_racing_the_last_label_never_leaves_a_stale_verdict(store: Arc<dyn Store>) {
    let run_id = launch_one_run(&*store, SAMPLE, 1).await;
    let ids = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    escalate_to_humans(&*store, &ids, 2).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let ann = new_user(&*store, "ann", Role::Annotator).await;
    let ben = new_user(&*store, "ben", Role::Annotator).await;

    let mut raced = Vec::new();
    for _ in 0..30 {
        // Ann says pass; then she changes it to fail while Ben's fail arrives.
        let for_ann = store
            .next_annotation_task(ann, LONG_LEASE_MS)
            .await
            .unwrap()
            .unwrap();
        store
            .submit_label(&for_ann.handle, ann, true, "")
            .await
            .unwrap();
        let label_id = own(&*store, ann).await[0].label_id;
        let for_ben = store
            .next_annotation_task(ben, LONG_LEASE_MS)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(for_ben.task_id, for_ann.task_id);
        let (edit, submit) = tokio::join!(
            {
                let store = Arc::clone(&store);
                async move { store.edit_label(label_id, ann, false, "changed").await }
            },
            {
                let store = Arc::clone(&store);
                async move { store.submit_label(&for_ben.handle, ben, false, "").await }
            },
        );
        submit.unwrap();
        raced.push((for_ann.input.clone(), edit.is_ok()));
    }

    let results = store.run_results(run_id, 100).await.unwrap();
    for (input, changed) in raced {
        let result = results.iter().find(|result| result.input == input).unwrap();
        if changed {
            // The change landed first: two fails decide the item.
            assert_eq!(result.verdict, "fail", "{input}");
        } else {
            // Ben's label landed first: pass against fail waits for a reviewer.
            assert_eq!(result.decided_by.as_deref(), Some("pending"), "{input}");
        }
    }
}
