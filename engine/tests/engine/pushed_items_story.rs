//! Story test for items pushed from outside, on both backends: a push queues each new item
//! once (by content hash, also when two pushes race), a bad push stores nothing, a queue is
//! its team's, raters label pushed items and pairs like any item (a pair's sides as drawn), a
//! reviewer settles a split on one, and the outcomes come back through the API's read and the `label.completed` webhook.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::GOLD_RATE_SETTING;
use arbiter_domain::annotation::preference::Preference;
use arbiter_domain::annotation::pushed::{first_on_left, PushedItem, PUSHED_QUEUE};
use arbiter_domain::annotation::review::ReviewDecision;
use arbiter_engine::annotation::pushed::{push_items, pushed_items, PushRequest};
use arbiter_engine::rubrics;
use arbiter_engine::secrets::SecretBox;
use arbiter_engine::webhooks::{create_webhook, enqueue_new_events, EVENT_LABEL_COMPLETED};
use arbiter_store::{now_ms, Store};
use serde_json::{json, Value};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(pushed_items_are_queued_once_labelled_and_read_back);

const QUEUE: &str = "support/prod-traces";

fn item(input: &str, outputs: &[&str], metadata: Value) -> PushedItem {
    PushedItem {
        input: input.into(),
        outputs: outputs.iter().map(|output| output.to_string()).collect(),
        target: String::new(),
        metadata,
    }
}

fn push(items: Vec<PushedItem>) -> PushRequest {
    PushRequest {
        queue: QUEUE.into(),
        rubric: None,
        raters: 2,
        priority: String::new(),
        skill: None,
        items,
    }
}

async fn pushed_items_are_queued_once_labelled_and_read_back(store: Arc<dyn Store>) {
    let store = &*store;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let rita = team_member(store, "rita", Role::Researcher, "alpha").await;
    let sam = team_member(store, "sam", Role::Researcher, "beta").await;
    let ann = team_member(store, "ann", Role::Annotator, "default")
        .await
        .id;
    let ben = team_member(store, "ben", Role::Annotator, "default")
        .await
        .id;
    let rev = team_member(store, "rev", Role::Reviewer, "default")
        .await
        .id;

    let first = vec![
        item(
            "Capital of France?",
            &["Paris."],
            json!({"trace": "t-1", "model": "m-3"}),
        ),
        item("2 + 2?", &["5"], json!({"trace": "t-2"})),
        item(
            "Write a haiku.",
            &["Leaves fall…", "Roses are red…"],
            json!({"trace": "t-3"}),
        ),
    ];
    let receipts = push_items(store, &rita, push(first.clone())).await.unwrap();
    assert_eq!(receipts.len(), 3);
    assert!(receipts.iter().all(|receipt| receipt.created));
    // Tasks are made in push order (whatever the items' content hashes), so the queue serves
    // and reads back a push as it was sent.
    assert!(
        receipts
            .windows(2)
            .all(|pair| pair[0].task_id < pair[1].task_id),
        "{receipts:?}"
    );

    // The same content again (metadata keys in another order) finds the items; a new item is
    // added.
    let mut again = first.clone();
    again[0].metadata = json!({"model": "m-3", "trace": "t-1"});
    again.push(item("Largest planet?", &["Jupiter"], json!({})));
    let second = push_items(store, &rita, push(again)).await.unwrap();
    for (before, after) in receipts.iter().zip(&second) {
        assert_eq!((before.task_id, after.created), (after.task_id, false));
    }
    assert!(second[3].created);

    // Two pushes of the same new content at once queue it once.
    let racing = || {
        push(vec![item(
            "Boiling point of water?",
            &["100 °C"],
            json!({}),
        )])
    };
    let (left, right) = tokio::join!(
        push_items(store, &rita, racing()),
        push_items(store, &rita, racing())
    );
    let (left, right) = (left.unwrap(), right.unwrap());
    assert_eq!(left[0].task_id, right[0].task_id);
    assert_eq!(
        usize::from(left[0].created) + usize::from(right[0].created),
        1
    );
    let all = pushed_items(store, &rita, QUEUE, 0, 100).await.unwrap();
    assert_eq!(all.len(), 5);

    // The lead's queue report counts them under one queue, summed and task by task alike.
    let (mut summed, mut one_by_one) = ((0, 0), (0, 0));
    store
        .scan_open_groups(now_ms(), &mut |group| {
            assert_eq!(group.queue, PUSHED_QUEUE);
            summed.0 += group.tasks;
            summed.1 += group.labels_missing;
        })
        .await
        .unwrap();
    store
        .scan_open_tasks(&mut |task| {
            assert_eq!(task.queue, PUSHED_QUEUE);
            one_by_one.0 += 1;
            one_by_one.1 += task.labels_missing as u64;
        })
        .await
        .unwrap();
    assert_eq!((summed, one_by_one), ((5, 10), (5, 10)));

    // A bad push names the item and stores nothing, even its good items.
    let bad = push(vec![
        item("fine", &["ok"], json!({})),
        item("three?", &["a", "b", "c"], json!({})),
    ]);
    let refused = push_items(store, &rita, bad).await.unwrap_err();
    assert_eq!(refused.status_code(), 400, "{refused}");
    assert!(
        refused.to_string().contains("item 1 has 3 outputs"),
        "{refused}"
    );
    let mut with_rubric = push(vec![item("fine", &["ok"], json!({}))]);
    with_rubric.rubric = Some("no-such-rubric".into());
    let refused = push_items(store, &rita, with_rubric).await.unwrap_err();
    assert_eq!(refused.status_code(), 404, "{refused}");
    let mut paired_rubric = push(first[2..].to_vec());
    paired_rubric.rubric = Some("any".into());
    let refused = push_items(store, &rita, paired_rubric).await.unwrap_err();
    assert!(
        refused.to_string().contains("item 0 has two outputs"),
        "{refused}"
    );
    assert_eq!(
        pushed_items(store, &rita, QUEUE, 0, 100)
            .await
            .unwrap()
            .len(),
        5
    );

    // The queue is team alpha's: another team's researcher may neither push nor read.
    let refused = push_items(store, &sam, push(first.clone()))
        .await
        .unwrap_err();
    assert_eq!(refused.status_code(), 403, "{refused}");
    let refused = pushed_items(store, &sam, QUEUE, 0, 100).await.unwrap_err();
    assert_eq!(refused.status_code(), 403, "{refused}");
    let missing = pushed_items(store, &rita, "nope", 0, 100)
        .await
        .unwrap_err();
    assert_eq!(missing.status_code(), 404, "{missing}");

    let webhook_events = vec![EVENT_LABEL_COMPLETED.to_string()];
    let secrets = SecretBox::without_key();
    create_webhook(
        store,
        &secrets,
        "https://hooks.example.com/labels",
        &webhook_events,
        false,
        true,
        None,
        now_ms(),
    )
    .await
    .unwrap();

    // Both raters label every item: singles pass except "2 + 2?", which fails; the pair's
    // first output (the haiku) is preferred, whichever side it was shown on.
    let pair_hash = first[2].content_hash();
    let haiku_on_left = first_on_left(&pair_hash);
    for rater in [ann, ben] {
        for _ in 0..5 {
            let task = store
                .next_annotation_task(rater, LONG_LEASE_MS)
                .await
                .unwrap()
                .expect("a pushed item is offered");
            assert_eq!(task.identity_id, None);
            match &task.pair {
                Some(pair) => {
                    assert_eq!(task.input, "Write a haiku.");
                    let (a, b) = (task.output.as_str(), pair.right_output.as_str());
                    let haiku_is_a = a == "Leaves fall…";
                    assert_eq!(haiku_is_a, haiku_on_left);
                    assert_eq!(if haiku_is_a { b } else { a }, "Roses are red…");
                    let choice = if haiku_is_a {
                        Preference::A
                    } else {
                        Preference::B
                    };
                    store
                        .submit_preference(&task.handle, rater, choice, None, "it is a haiku")
                        .await
                        .unwrap();
                }
                None => {
                    // On "2 + 2?" the raters split: Ann passes it, Ben fails it.
                    let pass = task.input != "2 + 2?" || rater == ann;
                    assert!(!task.output.is_empty());
                    store
                        .submit_label(&task.handle, rater, pass, "checked")
                        .await
                        .unwrap();
                }
            }
        }
        assert!(store
            .next_annotation_task(rater, LONG_LEASE_MS)
            .await
            .unwrap()
            .is_none());
    }

    // The split item waits for a reviewer, who is shown it as pushed and settles it.
    let open = pushed_items(store, &rita, QUEUE, 0, 100).await.unwrap();
    let split = open
        .iter()
        .find(|record| record.origin.metadata["trace"] == "t-2")
        .unwrap();
    assert_eq!(
        (split.state.as_str(), split.verdict.as_deref()),
        ("awaiting_review", None)
    );
    // (Any label drawn for the random QC sample is served too: those are accepted.)
    let review = loop {
        let review = store
            .next_review(rev)
            .await
            .unwrap()
            .expect("the split is served");
        assert_eq!(review.identity_id, None);
        if review.input == "2 + 2?" {
            break review;
        }
        store
            .review_label(review.label_id, rev, ReviewDecision::Accept, "")
            .await
            .unwrap();
    };
    assert_eq!(review.output, "5");
    store
        .review_label(
            review.label_id,
            rev,
            ReviewDecision::Correct { pass: false },
            "2 + 2 is 4",
        )
        .await
        .unwrap();

    // Read back: every item done, with its outcome and both labels.
    let records = pushed_items(store, &rita, QUEUE, 0, 100).await.unwrap();
    assert_eq!(records.len(), 5);
    for record in &records {
        assert_eq!(record.state, "decided", "{record:?}");
        assert!(record.decided_at.is_some());
        assert_eq!(record.labels.len(), 2);
        assert_eq!(record.origin.queue, QUEUE);
    }
    let by_trace = |trace: &str| {
        records
            .iter()
            .find(|record| record.origin.metadata["trace"] == trace)
            .unwrap()
    };
    assert_eq!(by_trace("t-1").verdict.as_deref(), Some("pass"));
    assert_eq!(by_trace("t-1").origin.metadata["model"], "m-3");
    assert_eq!(by_trace("t-2").verdict.as_deref(), Some("fail"));
    assert_eq!(by_trace("t-2").labels[0].rationale, "checked");
    let pair = by_trace("t-3");
    assert_eq!(pair.origin.content_hash, pair_hash);
    assert_eq!(pair.origin.first_on_left, Some(haiku_on_left));
    assert_eq!(pair.origin.preferred_output, Some(0));
    assert_eq!(pair.verdict, None);
    assert!(pair.labels.iter().all(|label| label.choice.is_some()));
    // Paging: after the second item, the last three.
    let page = pushed_items(store, &rita, QUEUE, records[1].task_id, 100)
        .await
        .unwrap();
    assert_eq!(page.len(), 3);
    assert_eq!(page[0].task_id, records[2].task_id);

    // Every decided item goes to the webhook with its origin, and no run.
    assert_eq!(
        enqueue_new_events(store, now_ms() + 10_000).await.unwrap(),
        5
    );
    let events: Vec<Value> = store
        .due_deliveries(i64::MAX, 1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|delivery| delivery.event == EVENT_LABEL_COMPLETED)
        .map(|delivery| serde_json::from_str::<Value>(&delivery.payload).unwrap())
        .collect();
    assert_eq!(events.len(), 5);
    for event in &events {
        let item = &event["item"];
        assert_eq!(item["pushed"]["queue"], QUEUE, "{event}");
        assert!(item["run_id"].is_null() && event["path"].is_null());
        assert_eq!(item["labels"].as_array().unwrap().len(), 2);
    }
    let pair_event = events
        .iter()
        .find(|event| event["item"]["pushed"]["metadata"]["trace"] == "t-3")
        .unwrap();
    assert_eq!(pair_event["item"]["kind"], "pair");
    assert_eq!(pair_event["item"]["pushed"]["preferred_output"], 0);
    let fail_event = events
        .iter()
        .find(|event| event["item"]["pushed"]["metadata"]["trace"] == "t-2")
        .unwrap();
    assert_eq!(fail_event["item"]["kind"], "pushed");
    assert_eq!(fail_event["item"]["verdict"], "fail");

    // A rubric queue: single outputs answered by the rubric's dimensions, decided by its
    // verdict dimension, with the consensus per dimension read back.
    rubrics::create_rubric(store, "correctness", CORRECTNESS, "", None)
        .await
        .unwrap();
    let mut by_rubric = push(vec![item("3 * 3?", &["9"], json!({"trace": "t-9"}))]);
    by_rubric.queue = "graded".into();
    by_rubric.rubric = Some("correctness".into());
    push_items(store, &rita, by_rubric).await.unwrap();
    for rater in [ann, ben] {
        let task = store
            .next_annotation_task(rater, LONG_LEASE_MS)
            .await
            .unwrap()
            .expect("the rubric item is offered");
        assert_eq!(task.rubric.as_ref().unwrap().version.name, "correctness");
        let answers = r#"{"correct": true, "helpful": 2}"#;
        rubrics::submit_answers(store, &task.handle, rater, answers, "fine", None)
            .await
            .unwrap();
    }
    let graded = pushed_items(store, &rita, "graded", 0, 10).await.unwrap();
    assert_eq!(graded.len(), 1);
    let graded = &graded[0];
    assert_eq!(graded.state, "decided");
    assert_eq!(graded.verdict.as_deref(), Some("pass"));
    assert_eq!(
        (graded.rubric.as_deref(), graded.rubric_version),
        (Some("correctness"), Some(1))
    );
    let consensus = graded.consensus.as_ref().unwrap();
    assert_eq!(consensus["helpful"]["answer"], 2.0, "{consensus}");
    assert!(graded
        .labels
        .iter()
        .all(|label| label.answers.as_ref().unwrap()["helpful"] == 2.0));
}

const CORRECTNESS: &str = r#"{
    "dimensions": [
        {"key": "correct", "question": "Is the answer correct?", "kind": "binary"},
        {"key": "helpful", "question": "How helpful is it?", "kind": "ordinal", "scale": [
            {"label": "Poor", "description": "Does not help."},
            {"label": "Good", "description": "Answers the question."}
        ]}
    ],
    "verdict": {"dimension": "correct"}
}"#;
