//! The lead's queue figures on both backends: the open queue summed by serving slot in SQL
//! (what the queue report and the monitor read) finds what the task-by-task scan finds, over
//! queues of several evals and priorities, partly labelled and partly escalated, at times and
//! labelling velocities that put slots wholly on time, wholly late, past their deadline, and
//! crossing their deadline part-way.

use arbiter_domain::accounts::Role;
use arbiter_domain::run::Priority;
use arbiter_engine::annotation::queue::{scan_open_queue, scan_task_by_task};
use arbiter_store::{now_ms, Store};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(summed_slots_give_the_figures_of_the_task_by_task_scan);

const HOUR_MS: i64 = 3_600_000;

async fn summed_slots_give_the_figures_of_the_task_by_task_scan(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let revision = arbiter_engine::catalog::upload_dataset(store, "qa", "qa.jsonl", SAMPLE, None)
        .await
        .unwrap();
    let checkpoint = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "base",
        ENDPOINT,
        "base-model",
        None,
    )
    .await
    .unwrap();
    // Three queues: one urgent (a 24-hour SLA at a higher priority), two scheduled (48 hours).
    for (name, priority) in [
        ("urgent", Priority::Promotion),
        ("nightly", Priority::Scheduled),
        ("weekly", Priority::Scheduled),
    ] {
        let eval = arbiter_engine::catalog::define_eval(
            store,
            &eval_form(name, revision.dataset_id, 1),
            None,
        )
        .await
        .unwrap();
        arbiter_engine::runs::launch_run(store, eval, checkpoint, priority, "default", None)
            .await
            .unwrap();
    }
    let ids = store
        .claim_work("worker", 500, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(ids.len(), 180);
    // Three batches a few milliseconds apart, so each run's tasks fall into several slots and
    // the scheduled queues share them; overlaps of 2, 1 and 3.
    for (batch, raters) in [(0..50, 2), (50..130, 1), (130..180, 3)] {
        escalate_to_humans(store, &ids[batch], raters).await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // A rater labels a few items (partly covering overlaps); the monitor escalates some tasks,
    // which raises them into slots of their own.
    let rater = store
        .create_user("ann", &stand_in_hash("ann"), Role::Annotator)
        .await
        .unwrap();
    for _ in 0..25 {
        label_next(store, rater, true).await;
    }
    let now = now_ms();
    let late = scan_task_by_task(store, now + 30 * HOUR_MS, 0.0)
        .await
        .unwrap();
    assert!(late.figures.to_escalate.len() > 20);
    store
        .escalate_tasks(&late.figures.to_escalate[..20], now)
        .await
        .unwrap();

    let counts = store.annotation_queue_counts().await.unwrap();
    let open = counts.open + counts.leased;
    let (mut crossed, mut breached, mut on_time) = (false, false, false);
    for hours_later in [0, 10, 20, 23, 30, 45, 47, 60] {
        for labels_per_hour in [0.0, 1.0, 7.5, 40.0, 1_000.0] {
            let at = now + hours_later * HOUR_MS;
            let grouped = scan_open_queue(store, at, labels_per_hour).await.unwrap();
            let one_by_one = scan_task_by_task(store, at, labels_per_hour).await.unwrap();
            assert_eq!(
                grouped.figures, one_by_one.figures,
                "{hours_later} hours later at {labels_per_hour} labels an hour"
            );
            let figures = &one_by_one.figures;
            assert_eq!(figures.backlog_tasks as i64, open);
            breached |= figures.breached > 0;
            on_time |= figures.at_risk + figures.breached == 0;
            crossed |= figures.at_risk > 0 && figures.at_risk + figures.breached < 100;
        }
    }
    assert!(crossed && breached && on_time);
}
