//! Story tests for the store: what a researcher, a worker fleet and annotators do, told once
//! and run against both backends (SQLite in a temporary directory, PostgreSQL in a fresh
//! database per test), so the two implementations cannot drift apart unnoticed.
//!
//! PostgreSQL: `eval "$(scripts/start-postgres)"` exports `ARBITER_TEST_POSTGRES_URL`, a
//! superuser URL of a throwaway server. Without it the PostgreSQL tests fail; they never skip.

use arbiter_domain::accounts::{Role, User};
use arbiter_domain::annotation::task::QueueCounts;
use arbiter_domain::answer::Generation;
use arbiter_domain::dataset::{parse_dataset, DatasetFormat};
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::{grade_exact_match, Verdict};
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, IdentityId, RunId, TaskId, UserId};
use arbiter_domain::logprobs::TokenLogprob;
use arbiter_domain::reports::compare::{Change, DiffFilter};
use arbiter_domain::reports::trend::BaselinePolicy;
use arbiter_domain::reports::Completeness;
use arbiter_domain::run::{Priority, RunStatus};
use arbiter_domain::stats::correction::Correction;
use arbiter_engine::catalog::EvalForm;
use arbiter_engine::error::ServiceError;
use arbiter_engine::reports::trends;
use arbiter_store::{now_ms, FinishedIdentity, Store, StoreError};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arbiter_testkit::backend::*;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    users_sign_up_and_reset_passwords,
    dataset_uploads_are_revisioned_and_atomic,
    checkpoints_evals_and_launches,
    work_queue_hands_out_and_records_each_item_once,
    concurrent_workers_record_every_item_exactly_once,
    batched_commits_across_categories_never_deadlock,
    uncertain_answers_go_to_one_annotator_at_a_time,
    comparing_two_checkpoints_finds_the_flips,
    a_training_run_trend_flags_regressions_and_promotions_need_complete_reports,
    racing_workers_never_both_commit_one_identity,
    judges_policies_and_the_grade_cache,
    overlap_review_and_the_rater_pool,
    concurrent_raters_fill_each_item_exactly_to_its_overlap,
    the_scheduler_sees_running_and_expanding_runs_and_claims_longest_first,
    an_unchanged_manifest_copies_a_finished_run_whose_answers_all_stand,
);

/// An infrastructure failure says which store method it happened in (the log's only clue when
/// a query fails in production), on both backends' shared SQL.
#[tokio::test]
async fn a_failed_query_names_its_operation() {
    let backend = TestBackend::sqlite().await;
    let arbiter_store::Database::Sqlite(sqlite) = &backend.database else {
        unreachable!("an SQLite backend")
    };
    sqlx::query("DROP TABLE settings")
        .execute(sqlite.pool())
        .await
        .unwrap();
    let err = backend.database.store().setting("x").await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Database {
                operation: "setting",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("database error in setting:"),
        "{err}"
    );
    backend.tear_down().await;
}

// ---------------------------------------------------------------------------------------------
// Stories.
// ---------------------------------------------------------------------------------------------

async fn users_sign_up_and_reset_passwords(store: Arc<dyn Store>) {
    let store = &*store;
    let alice_hash = stand_in_hash("alice");
    let alice = store
        .create_user("alice", &alice_hash, Role::Researcher)
        .await
        .unwrap();
    let bob = store
        .create_user("bob", &stand_in_hash("bob"), Role::Annotator)
        .await
        .unwrap();
    assert_ne!(alice, bob);

    let credentials = store
        .find_user_credentials("alice")
        .await
        .unwrap()
        .expect("alice can log in");
    let mut alice_user = User {
        team: "default".into(),
        id: alice,
        username: "alice".into(),
        role: Role::Researcher,
        active: true,
        must_change_password: false,
        session_epoch: 0,
    };
    assert_eq!(credentials.user, alice_user);
    assert_eq!(credentials.password_hash.as_phc(), alice_hash.as_phc());
    assert!(store
        .find_user_credentials("mallory")
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        store.get_user(alice).await.unwrap(),
        Some(alice_user.clone())
    );
    assert_eq!(
        store
            .get_user(UserId(alice.get() + bob.get() + 1000))
            .await
            .unwrap(),
        None
    );

    match store
        .create_user("alice", &stand_in_hash("again"), Role::Admin)
        .await
    {
        Err(StoreError::Conflict(message)) => assert!(
            message.contains("alice"),
            "the conflict should name the username: {message}"
        ),
        other => panic!("a second `alice` must be a conflict, got {other:?}"),
    }

    // An operator's reset ends alice's sessions (her epoch moves on) and revokes her tokens.
    let token = store
        .insert_api_token(alice, "ci", "hash-of-alice-token", "arb_alice123", None, 1)
        .await
        .unwrap();
    assert_eq!(
        store
            .reset_password("mallory", &stand_in_hash("x"), 2)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .reset_password("alice", &stand_in_hash("new"), 2)
            .await
            .unwrap(),
        Some(1)
    );
    assert!(store
        .user_for_token("hash-of-alice-token", 3)
        .await
        .unwrap()
        .is_none());
    let revoked = store.api_tokens(Some(alice)).await.unwrap();
    assert_eq!((revoked[0].id, revoked[0].revoked_at), (token.id, Some(2)));
    alice_user.session_epoch = 1;
    // The operator chose the new password: alice must choose her own at sign-in.
    alice_user.must_change_password = true;
    let credentials = store.find_user_credentials("alice").await.unwrap().unwrap();
    assert_eq!(
        credentials.password_hash.as_phc(),
        stand_in_hash("new").as_phc()
    );
    // The refused duplicate changed nothing about the first alice.
    assert_eq!(credentials.user, alice_user);

    let bob_user = User {
        team: "default".into(),
        id: bob,
        username: "bob".into(),
        role: Role::Annotator,
        active: true,
        must_change_password: false,
        session_epoch: 0,
    };
    assert_eq!(
        store.list_users().await.unwrap(),
        vec![alice_user, bob_user]
    );

    // Teams set the fair share of runs; names are checked, unknown users reported.
    arbiter_engine::accounts::set_team(store, "bob", "vision-team")
        .await
        .unwrap();
    assert_eq!(
        store
            .find_user_credentials("bob")
            .await
            .unwrap()
            .unwrap()
            .user
            .team,
        "vision-team"
    );
    assert!(matches!(
        arbiter_engine::accounts::set_team(store, "bob", "no spaces").await,
        Err(ServiceError::Invalid(_))
    ));
    assert!(matches!(
        arbiter_engine::accounts::set_team(store, "nobody", "x").await,
        Err(ServiceError::NotFound(_))
    ));
}

async fn dataset_uploads_are_revisioned_and_atomic(store: Arc<dyn Store>) {
    let store = &*store;
    let parsed = parse_dataset(SAMPLE, DatasetFormat::Jsonl).unwrap();
    let first =
        arbiter_engine::catalog::upload_dataset(store, "qa-basic", "qa-basic.jsonl", SAMPLE, None)
            .await
            .unwrap();
    assert_eq!(first.content_hash, parsed.content_hash);
    assert_eq!(first.item_count, 60);
    assert_eq!(first.source_name, "qa-basic.jsonl");
    assert_eq!(
        store.list_items(first.id, 1000, 0).await.unwrap(),
        parsed.items
    );
    assert_eq!(
        store.list_items(first.id, 10, 50).await.unwrap(),
        parsed.items[50..60].to_vec(),
        "items page in file order"
    );

    let again =
        arbiter_engine::catalog::upload_dataset(store, "qa-basic", "copy.jsonl", SAMPLE, None)
            .await
            .unwrap();
    assert_eq!(again.id, first.id, "identical bytes are the same revision");
    assert_eq!(
        store.list_revisions(first.dataset_id).await.unwrap().len(),
        1
    );

    let mut changed = String::from_utf8(SAMPLE.to_vec()).unwrap();
    changed.push_str(r#"{"id": "extra-001", "input": "What is 1 + 1?", "target": "2"}"#);
    changed.push('\n');
    let second = arbiter_engine::catalog::upload_dataset(
        store,
        "qa-basic",
        "qa-basic-v2.jsonl",
        changed.as_bytes(),
        None,
    )
    .await
    .unwrap();
    assert_ne!(second.id, first.id);
    assert_eq!(second.dataset_id, first.dataset_id);
    assert_eq!(second.item_count, 61);
    assert_ne!(second.content_hash, first.content_hash);
    let summary = store.get_dataset(first.dataset_id).await.unwrap().unwrap();
    assert_eq!(summary.name, "qa-basic");
    assert_eq!(summary.revision_count, 2);
    assert_eq!(summary.latest_revision.as_ref(), Some(&second));
    assert_eq!(
        store.list_revisions(first.dataset_id).await.unwrap(),
        vec![second.clone(), first.clone()],
        "newest revision first"
    );
    assert_eq!(
        store.list_items(first.id, 1000, 0).await.unwrap().len(),
        60,
        "the old revision is immutable"
    );
    assert_eq!(
        store.list_items(second.id, 1000, 0).await.unwrap().len(),
        61
    );

    // Re-uploading the first content is a revert: its revision becomes current again.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let reverted =
        arbiter_engine::catalog::upload_dataset(store, "qa-basic", "qa-basic.jsonl", SAMPLE, None)
            .await
            .unwrap();
    assert_eq!(reverted.id, first.id, "no new revision for known content");
    let summary = store.get_dataset(first.dataset_id).await.unwrap().unwrap();
    assert_eq!(summary.revision_count, 2);
    assert_eq!(
        summary.latest_revision.as_ref().map(|revision| revision.id),
        Some(first.id),
        "the re-uploaded revision is the latest again"
    );

    let datasets_before = store.list_datasets().await.unwrap();
    assert_eq!(datasets_before, vec![summary]);

    let bad_json = "{\"id\": \"a\", \"input\": \"x\", \"target\": \"y\"}\n{not json\n";
    match arbiter_engine::catalog::upload_dataset(
        store,
        "broken",
        "broken.jsonl",
        bad_json.as_bytes(),
        None,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(
                message.contains("line 2"),
                "the error should name line 2: {message}"
            )
        }
        other => panic!("bad JSON must be refused as invalid, got {other:?}"),
    }
    let duplicate_ids = "{\"id\": \"a\", \"input\": \"x\", \"target\": \"y\"}\n\
                         {\"id\": \"b\", \"input\": \"x\", \"target\": \"y\"}\n\
                         {\"id\": \"a\", \"input\": \"z\", \"target\": \"y\"}\n";
    match arbiter_engine::catalog::upload_dataset(
        store,
        "qa-basic",
        "dup.jsonl",
        duplicate_ids.as_bytes(),
        None,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => assert!(
            message.contains("line 3") && message.contains("duplicate case id `a`"),
            "the error should name the line and the id: {message}"
        ),
        other => panic!("duplicate case ids must be refused as invalid, got {other:?}"),
    }
    assert_eq!(
        store.list_datasets().await.unwrap(),
        datasets_before,
        "a refused upload stores nothing: no dataset, no revision"
    );
}

async fn checkpoints_evals_and_launches(store: Arc<dyn Store>) {
    let store = &*store;
    let revision =
        arbiter_engine::catalog::upload_dataset(store, "qa-basic", "qa-basic.jsonl", SAMPLE, None)
            .await
            .unwrap();

    let base = arbiter_engine::catalog::register_simple_checkpoint(
        store, "base-7b", ENDPOINT, "base", None,
    )
    .await
    .unwrap();
    // The same server typed differently shares its endpoint row.
    let tuned = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "tuned-7b",
        "http://127.0.0.1:9/v1/",
        "tuned",
        None,
    )
    .await
    .unwrap();
    let checkpoints = store.list_checkpoints().await.unwrap();
    let summary: Vec<(CheckpointId, &str, &str, &str)> = checkpoints
        .iter()
        .map(|c| (c.id, c.name.as_str(), c.base_url.as_str(), c.model.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (base, "base-7b", "http://127.0.0.1:9/v1", "base"),
            (tuned, "tuned-7b", "http://127.0.0.1:9/v1", "tuned"),
        ]
    );
    match arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "base-7b",
        "http://127.0.0.1:10",
        "other",
        None,
    )
    .await
    {
        Err(ServiceError::Conflict(message)) => {
            assert!(
                message.contains("base-7b"),
                "the conflict should name the checkpoint: {message}"
            )
        }
        other => panic!("a duplicate checkpoint name must be a conflict, got {other:?}"),
    }
    assert!(matches!(
        arbiter_engine::catalog::register_simple_checkpoint(
            store,
            "ftp-7b",
            "ftp://127.0.0.1",
            "m",
            None
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));
    assert_eq!(store.list_checkpoints().await.unwrap().len(), 2);

    let mut no_placeholder = eval_form("qa-exact", revision.dataset_id, 2);
    no_placeholder.prompt_template = "Answer the question.".into();
    match arbiter_engine::catalog::define_eval(store, &no_placeholder, None).await {
        Err(ServiceError::Invalid(message)) => assert!(message.contains("{input}"), "{message}"),
        other => panic!("a template without {{input}} must be invalid, got {other:?}"),
    }
    assert!(
        store.list_evals().await.unwrap().is_empty(),
        "an invalid eval stores nothing"
    );

    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("qa-exact", revision.dataset_id, 2),
        None,
    )
    .await
    .unwrap();
    let evals = store.list_evals().await.unwrap();
    assert_eq!(evals.len(), 1);
    assert_eq!(
        (
            evals[0].id,
            evals[0].dataset_name.as_str(),
            evals[0].repetitions,
            evals[0].grader.id_version()
        ),
        (eval, "qa-basic", 2, "exact_match@1")
    );
    assert!(matches!(
        arbiter_engine::catalog::define_eval(
            store,
            &eval_form("qa-exact", revision.dataset_id, 1),
            None
        )
        .await,
        Err(ServiceError::Conflict(_))
    ));
    assert!(matches!(
        arbiter_engine::catalog::define_eval(
            store,
            &eval_form("orphan", DatasetId(revision.dataset_id.get() + 1000), 1),
            None
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));

    let launched =
        arbiter_engine::runs::launch_run(store, eval, base, Priority::Scheduled, "default", None)
            .await
            .unwrap();
    assert!(launched.created);
    let run = progress(store, launched.run_id).await;
    assert_eq!((run.expected, run.done, run.in_flight), (120, 0, 0));
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(
        (run.passed, run.failed, run.uncertain, run.errors),
        (0, 0, 0, 0)
    );
    assert_eq!(run.last_error, None);
    assert_eq!(run.finished_at, None);
    assert_eq!(run.eval_id, eval);
    assert_eq!(run.checkpoint_name, "base-7b");
    assert_eq!(run.endpoint_url, "http://127.0.0.1:9/v1");
    assert_eq!(run.dataset_revision, revision.content_hash);

    let relaunched =
        arbiter_engine::runs::launch_run(store, eval, base, Priority::Scheduled, "default", None)
            .await
            .unwrap();
    assert_eq!(
        relaunched.run_id, launched.run_id,
        "an unchanged manifest is the same run"
    );
    assert!(!relaunched.created);
    let identities: HashSet<(String, i64)> = store
        .run_outcomes(launched.run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            assert_eq!(row.verdict, "pending");
            (row.case_id, row.repetition)
        })
        .collect();
    assert_eq!(
        identities.len(),
        120,
        "every case at every repetition, once"
    );
    let queued = store
        .claim_work("counter", 1000, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(queued.len(), 120, "the relaunch added no work items");
    assert_eq!(store.list_runs().await.unwrap().len(), 1);

    // A new revision changes the manifest, so the next launch is a new run on the new items.
    let mut changed = String::from_utf8(SAMPLE.to_vec()).unwrap();
    changed.push_str("{\"id\": \"extra-001\", \"input\": \"What is 1 + 1?\", \"target\": \"2\"}\n");
    let newer = arbiter_engine::catalog::upload_dataset(
        store,
        "qa-basic",
        "v2.jsonl",
        changed.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let on_newer =
        arbiter_engine::runs::launch_run(store, eval, base, Priority::Scheduled, "default", None)
            .await
            .unwrap();
    assert!(on_newer.created);
    assert_ne!(on_newer.run_id, launched.run_id);
    let run = progress(store, on_newer.run_id).await;
    assert_eq!(run.expected, 122);
    assert_eq!(run.dataset_revision, newer.content_hash);
    let on_tuned =
        arbiter_engine::runs::launch_run(store, eval, tuned, Priority::Scheduled, "default", None)
            .await
            .unwrap();
    assert!(on_tuned.created);
    assert_eq!(
        progress(store, on_tuned.run_id).await.checkpoint_name,
        "tuned-7b"
    );
    assert_eq!(store.list_runs().await.unwrap().len(), 3);
}

async fn work_queue_hands_out_and_records_each_item_once(store: Arc<dyn Store>) {
    let store = &*store;
    let run_id = launch_one_run(store, FIVE_CASES.as_bytes(), 2).await;

    let first = store.claim_work("w1", 4, LONG_LEASE_MS).await.unwrap();
    let second = store.claim_work("w2", 4, LONG_LEASE_MS).await.unwrap();
    assert_eq!(
        (first.len(), second.len()),
        (4, 4),
        "a claim takes up to its limit"
    );
    assert!(
        first.iter().all(|id| !second.contains(id)),
        "a leased item went to two workers: {first:?} and {second:?}"
    );
    // Expansion is repetition-major: every case gets its first answer before any second one.
    for &id in &first {
        assert_eq!(store.load_identity(id).await.unwrap().repetition, 0);
    }

    // A 0 ms lease has expired by the next millisecond: the reaper (every worker's heartbeat)
    // returns it to the queue and another worker takes the items. Live leases stay put.
    let abandoned = store.claim_work("w3", 4, 0).await.unwrap();
    assert_eq!(abandoned.len(), 2, "only two items were left");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(
        store
            .claim_work("w4", 10, LONG_LEASE_MS)
            .await
            .unwrap()
            .is_empty(),
        "expired but not yet reaped"
    );
    assert_eq!(store.reap_expired_leases().await.unwrap(), 2);
    let taken_over = store.claim_work("w4", 10, LONG_LEASE_MS).await.unwrap();
    assert_eq!(sorted(taken_over.clone()), sorted(abandoned.clone()));
    assert!(store
        .claim_work("w5", 10, LONG_LEASE_MS)
        .await
        .unwrap()
        .is_empty());
    let run = progress(store, run_id).await;
    assert_eq!((run.done, run.in_flight), (0, 10));

    // RETURNING order is unspecified; the lowest id is the first case's first repetition.
    let lowest = *first.iter().min().unwrap();
    let job = store.load_identity(lowest).await.unwrap();
    assert_eq!(job.run_id, run_id);
    assert_eq!(job.prompt_template, PROMPT_TEMPLATE);
    assert_eq!(job.grader, "exact_match@1");
    assert_eq!((job.max_tokens, job.seed), (64, 7));
    assert_eq!(
        (job.base_url.as_str(), job.model.as_str()),
        ("http://127.0.0.1:9/v1", "base-model")
    );
    assert_eq!(job.case_id, "c1");
    assert_eq!(
        (job.input.as_str(), job.target.as_str()),
        ("What is 1 + 1?", "2")
    );

    // One endpoint failure, then passes, fails and unsure answers in turn.
    let all: Vec<IdentityId> = first
        .iter()
        .chain(&second)
        .chain(&taken_over)
        .copied()
        .collect();
    let failed_job = store.load_identity(all[0]).await.unwrap();
    let error_text = "HTTP 503 from the endpoint: model is loading";
    assert!(store
        .record_result(all[0], &endpoint_failure(error_text), None)
        .await
        .unwrap());
    let plan = [Reply::Unsure, Reply::Correct, Reply::Wrong];
    for (index, &id) in all.iter().enumerate().skip(1) {
        assert!(
            reply(store, id, plan[index % 3]).await,
            "the first commit of {id} counts"
        );
        if index == 4 {
            let run = progress(store, run_id).await;
            assert_eq!((run.done, run.status.as_str()), (5, "running"));
        }
    }

    let before_duplicates = progress(store, run_id).await;
    // all[1] passed; a late second commit, even with another verdict, changes nothing.
    assert!(
        !reply(store, all[1], Reply::Wrong).await,
        "a second commit is a no-op"
    );
    // The worker whose lease expired finishes after the one that took over.
    assert!(!reply(store, abandoned[0], Reply::Correct).await);
    assert!(!store
        .record_result(all[0], &endpoint_failure("another failure"), None)
        .await
        .unwrap());
    let run = progress(store, run_id).await;
    assert_eq!(run, before_duplicates);

    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.finished_at.is_some());
    assert_eq!((run.expected, run.done, run.in_flight), (10, 10, 0));
    assert_eq!(
        (run.passed, run.failed, run.uncertain, run.errors),
        (3, 3, 3, 1)
    );
    assert_eq!(
        run.passed + run.failed + run.uncertain + run.errors,
        run.done
    );
    assert_eq!(run.last_error.as_deref(), Some(error_text));
    assert!(store
        .claim_work("w6", 10, LONG_LEASE_MS)
        .await
        .unwrap()
        .is_empty());

    let results = store.run_results(run_id, 1000).await.unwrap();
    assert_eq!(results.len(), 10);
    let errored = results
        .iter()
        .find(|row| row.case_id == failed_job.case_id && row.repetition == failed_job.repetition)
        .expect("the failed identity is listed");
    assert_eq!(
        (errored.outcome.as_str(), errored.verdict.as_str()),
        ("endpoint_error", "error")
    );
    assert_eq!(errored.error.as_deref(), Some(error_text));
    assert_eq!(store.run_results(run_id, 3).await.unwrap().len(), 3);
    // Each uncertain answer waits for a human.
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        QueueCounts {
            open: 3,
            leased: 0,
            done: 0
        }
    );
}

async fn concurrent_workers_record_every_item_exactly_once(store: Arc<dyn Store>) {
    let run_id = launch_one_run(store.as_ref(), SAMPLE, 2).await;
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let name = format!("worker-{worker}");
                let mut claimed = Vec::new();
                let mut recorded = 0;
                loop {
                    let ids = store.claim_work(&name, 5, LONG_LEASE_MS).await.unwrap();
                    if ids.is_empty() {
                        break;
                    }
                    assert!(ids.len() <= 5, "a claim exceeded its limit: {ids:?}");
                    for id in ids {
                        if reply(store.as_ref(), id, Reply::Correct).await {
                            recorded += 1;
                        }
                        claimed.push(id);
                    }
                }
                (claimed, recorded)
            })
        })
        .collect();

    let mut seen = HashSet::new();
    let mut recorded = 0;
    for worker in workers {
        let (claimed, worker_recorded) = worker.await.expect("a worker panicked");
        for id in claimed {
            assert!(seen.insert(id), "work item {id} was handed to two workers");
        }
        recorded += worker_recorded;
    }
    assert_eq!(seen.len(), 120);
    assert_eq!(recorded, 120);

    let run = progress(store.as_ref(), run_id).await;
    assert_eq!(
        (run.expected, run.done, run.passed, run.in_flight),
        (120, 120, 120, 0)
    );
    assert_eq!(run.status, RunStatus::Completed);
    let outcomes = store.run_outcomes(run_id).await.unwrap();
    assert!(outcomes
        .iter()
        .all(|row| row.verdict == "pass" && row.outcome == "ok"));
    let identities: HashSet<(&str, i64)> = outcomes
        .iter()
        .map(|row| (row.case_id.as_str(), row.repetition))
        .collect();
    assert_eq!(identities.len(), 120);
}

/// Workers commit batches whose items touch the per-category tallies in opposite orders: on
/// PostgreSQL every commit must still go through (no deadlock between the tally rows).
async fn batched_commits_across_categories_never_deadlock(store: Arc<dyn Store>) {
    let dataset: String = (0..240)
        .map(|i| {
            format!(
                "{{\"id\": \"k{i}\", \"input\": \"q{i}\", \"target\": \"{i}\", \"category\": \"cat{}\"}}\n",
                i % 4
            )
        })
        .collect();
    let run_id = launch_one_run(store.as_ref(), dataset.as_bytes(), 1).await;
    let ids = store
        .claim_work("worker", 1_000, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(ids.len(), 240);
    let mut jobs = Vec::new();
    for id in ids {
        let job = store.load_identity(id).await.unwrap();
        let number: usize = job.case_id[1..].parse().unwrap();
        jobs.push((number % 4, id, job.target));
    }
    // 24 batches of 10, each spanning all four categories, half in ascending and half in
    // descending category order.
    let mut batches: Vec<Vec<FinishedIdentity>> = Vec::new();
    for (index, chunk) in jobs.chunks(10).enumerate() {
        let mut chunk = chunk.to_vec();
        chunk.sort_by_key(|(category, _, _)| *category);
        if index % 2 == 1 {
            chunk.reverse();
        }
        batches.push(
            chunk
                .into_iter()
                .map(|(category, id, target)| {
                    let output = if category % 2 == 0 {
                        format!("Answer: {target}")
                    } else {
                        "Answer: no".into()
                    };
                    FinishedIdentity {
                        identity_id: id,
                        grading: Grading::deterministic_only(Some(grade_exact_match(
                            &output, &target,
                        ))),
                        generation: answered(&output),
                        generation_key: None,
                        cached_from: None,
                        next_turn_waits: false,
                    }
                })
                .collect(),
        );
    }
    let queue = Arc::new(std::sync::Mutex::new(batches));
    let committers: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                loop {
                    let Some(batch) = queue.lock().unwrap().pop() else {
                        return;
                    };
                    store.record_results(&batch).await.expect("a commit failed");
                }
            })
        })
        .collect();
    for committer in committers {
        committer.await.expect("a committer panicked");
    }
    let run = progress(store.as_ref(), run_id).await;
    assert_eq!((run.done, run.passed, run.failed), (240, 120, 120));
    let tallied: i64 = store
        .run_tallies(run_id)
        .await
        .unwrap()
        .iter()
        .filter(|row| row.field == "verdict")
        .map(|row| row.count)
        .sum();
    assert_eq!(tallied, 240);
}

async fn uncertain_answers_go_to_one_annotator_at_a_time(store: Arc<dyn Store>) {
    let store = &*store;
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ann = store
        .create_user("ann", &stand_in_hash("ann"), Role::Annotator)
        .await
        .unwrap();
    let ben = store
        .create_user("ben", &stand_in_hash("ben"), Role::Reviewer)
        .await
        .unwrap();
    let mut item_of_case = HashMap::new();
    for id in store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap() {
        item_of_case.insert(store.load_identity(id).await.unwrap().case_id, id);
    }
    assert_eq!(item_of_case.len(), 3);

    let grade = grade_exact_match(UNSURE, "42");
    assert_eq!(grade.verdict, Verdict::Uncertain);
    assert!(store
        .record_result(item_of_case["q1"], &answered(UNSURE), Some(&grade))
        .await
        .unwrap());
    assert!(reply(store, item_of_case["q2"], Reply::Correct).await);
    let counts = |open, leased, done| QueueCounts { open, leased, done };
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts(1, 0, 0)
    );
    let run = progress(store, run_id).await;
    assert_eq!((run.done, run.passed, run.uncertain), (2, 1, 1));

    let task = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("the uncertain item is offered");
    assert_eq!(
        (
            task.input.as_str(),
            task.target.as_str(),
            task.output.as_str()
        ),
        ("What is 6 times 7?", "42", UNSURE)
    );
    assert!(task.lease_expires_at > now_ms());
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts(0, 1, 0)
    );
    assert_eq!(
        store
            .next_annotation_task(ben, LONG_LEASE_MS)
            .await
            .unwrap(),
        None,
        "the only task is leased to ann"
    );
    let again = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("ann keeps her task");
    assert_eq!(
        again.task_id, task.task_id,
        "asking again renews, never leases a second item"
    );
    assert_eq!(
        again.handle, task.handle,
        "a renewed claim keeps its handle"
    );
    assert!(again.lease_expires_at >= task.lease_expires_at);
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts(0, 1, 0)
    );

    assert!(matches!(
        store.submit_label(&task.handle, ben, false, "wrong").await,
        Err(StoreError::Conflict(_))
    ));
    store
        .submit_label(&task.handle, ann, true, "42 is meant")
        .await
        .unwrap();
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts(0, 0, 1)
    );
    let run = progress(store, run_id).await;
    assert_eq!((run.done, run.passed, run.uncertain), (2, 2, 0));
    let outcomes = store.run_outcomes(run_id).await.unwrap();
    let labelled = outcomes.iter().find(|row| row.case_id == "q1").unwrap();
    assert_eq!(labelled.verdict, "pass");
    assert_eq!(labelled.output, UNSURE);
    assert_eq!(labelled.grade_reason, "human label (pass): 42 is meant");
    assert!(matches!(
        store
            .submit_label(&task.handle, ann, false, "changed my mind")
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store
            .next_annotation_task(ann, LONG_LEASE_MS)
            .await
            .unwrap(),
        None
    );

    // A skipped item goes back to the queue, but not to the one who skipped it.
    assert!(reply(store, item_of_case["q3"], Reply::Unsure).await);
    let skipped = store
        .next_annotation_task(ben, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("the new uncertain item is offered");
    assert_ne!(skipped.task_id, task.task_id);
    assert_eq!(skipped.target, "8");
    assert!(matches!(
        store.skip_task(&skipped.handle, ann).await,
        Err(StoreError::Conflict(_))
    ));
    store.skip_task(&skipped.handle, ben).await.unwrap();
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts(1, 0, 1)
    );
    assert_eq!(
        store
            .next_annotation_task(ben, LONG_LEASE_MS)
            .await
            .unwrap(),
        None
    );
    let taken = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("another annotator gets the skipped item");
    assert_eq!(taken.task_id, skipped.task_id);
    store
        .submit_label(&taken.handle, ann, false, "  ")
        .await
        .unwrap();
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts(0, 0, 2)
    );
    let run = progress(store, run_id).await;
    assert_eq!(
        (run.done, run.passed, run.failed, run.uncertain),
        (3, 2, 1, 0)
    );
    assert_eq!(run.status, RunStatus::Completed);
    let outcomes = store.run_outcomes(run_id).await.unwrap();
    let q3 = outcomes.iter().find(|row| row.case_id == "q3").unwrap();
    assert_eq!(
        (q3.verdict.as_str(), q3.grade_reason.as_str()),
        ("fail", "human label: fail")
    );
}

async fn comparing_two_checkpoints_finds_the_flips(store: Arc<dyn Store>) {
    let store = &*store;
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "arith",
        "arith.jsonl",
        FIVE_CASES.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let base =
        arbiter_engine::catalog::register_simple_checkpoint(store, "base", ENDPOINT, "base", None)
            .await
            .unwrap();
    let candidate = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "candidate",
        "http://127.0.0.1:8002",
        "cand",
        None,
    )
    .await
    .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("arith-exact", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let other_eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("arith-other", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let base_run =
        arbiter_engine::runs::launch_run(store, eval, base, Priority::Scheduled, "default", None)
            .await
            .unwrap()
            .run_id;
    let candidate_run = arbiter_engine::runs::launch_run(
        store,
        eval,
        candidate,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
    .run_id;
    let other_run = arbiter_engine::runs::launch_run(
        store,
        other_eval,
        base,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
    .run_id;

    // c5 is unsure on the candidate, so it is not a pass/fail pair.
    let replies_of = |run_id: RunId| -> [Reply; 5] {
        use Reply::*;
        if run_id == base_run {
            [Correct, Correct, Wrong, Wrong, Correct]
        } else if run_id == candidate_run {
            [Correct, Wrong, Correct, Wrong, Unsure]
        } else {
            [Correct; 5]
        }
    };
    let ids = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(ids.len(), 15);
    for id in ids {
        let job = store.load_identity(id).await.unwrap();
        let case_number: usize = job.case_id[1..].parse().unwrap();
        assert!(reply(store, id, replies_of(job.run_id)[case_number - 1]).await);
    }

    // The baseline's report: complete, pooled, with the grader and model checked.
    let (_, report) = arbiter_engine::reports::runs::run_report(store, base_run)
        .await
        .unwrap();
    assert_eq!(
        report.completeness,
        Completeness::Complete,
        "{:?}",
        report.explanations()
    );
    assert_eq!((report.overall.passed, report.overall.failed), (3, 2));
    assert_eq!(report.overall.outcomes[0], 5, "five ok answers");
    // The candidate still waits for a human on c5: partial, with the reason.
    let (_, report) = arbiter_engine::reports::runs::run_report(store, candidate_run)
        .await
        .unwrap();
    assert_eq!(report.completeness, Completeness::Partial);
    assert_eq!(report.completed, 4);
    assert!(report.explanations()[0].contains("1 results have no final verdict"));

    let summary = arbiter_engine::reports::compare::compare_checkpoints(
        store,
        base_run,
        &[candidate_run],
        Correction::Holm,
    )
    .await
    .unwrap();
    assert_eq!(summary.baseline.id, base_run);
    let comparison = &summary.candidates[0].comparison;
    let table = comparison.overall.table;
    assert_eq!(
        (
            table.both_pass,
            table.pass_to_fail,
            table.fail_to_pass,
            table.both_fail
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(comparison.changed, 3, "c5 went from pass to uncertain");
    assert_eq!(comparison.overall.p_value, 1.0);

    let page = arbiter_engine::reports::diff::diff_page(
        store,
        base_run,
        candidate_run,
        &DiffFilter::default(),
        "",
        0,
    )
    .await
    .unwrap();
    let changes: Vec<(&str, Change)> = page
        .rows
        .iter()
        .map(|row| (row.candidate.case_id.as_str(), row.change))
        .collect();
    assert_eq!(
        changes,
        vec![
            ("c2", Change::Regression),
            ("c5", Change::LostPass),
            ("c3", Change::Improvement)
        ]
    );
    let regression = &page.rows[0];
    assert_eq!(regression.baseline.output, Reply::Correct.output("4"));
    assert_eq!(regression.candidate.output, Reply::Wrong.output("4"));
    assert!(regression.candidate.grades[0].reason.contains("differs"));
    // Text search reads the texts of changed items only.
    let found = arbiter_engine::reports::diff::diff_page(
        store,
        base_run,
        candidate_run,
        &DiffFilter::default(),
        "3 + 3",
        0,
    )
    .await
    .unwrap();
    assert_eq!(found.rows.len(), 1);
    assert_eq!(found.rows[0].candidate.case_id, "c3");
    let detail = arbiter_engine::reports::diff::diff_detail(
        store,
        regression.baseline.identity_id,
        regression.candidate.identity_id,
    )
    .await
    .unwrap();
    assert_eq!(
        detail.divergence_note.as_deref(),
        Some("no logprobs were stored for one of the answers")
    );
    assert!(matches!(
        arbiter_engine::reports::diff::diff_detail(
            store,
            regression.baseline.identity_id,
            page.rows[1].candidate.identity_id
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));

    // A human decides c5: the tallies move, the snapshot is rebuilt, the candidate completes.
    label_by_a_human(store).await;
    let (_, report) = arbiter_engine::reports::runs::run_report(store, candidate_run)
        .await
        .unwrap();
    assert_eq!(
        report.completeness,
        Completeness::Complete,
        "{:?}",
        report.explanations()
    );
    let summary = arbiter_engine::reports::compare::compare_checkpoints(
        store,
        base_run,
        &[candidate_run],
        Correction::Holm,
    )
    .await
    .unwrap();
    assert_eq!(summary.candidates[0].comparison.overall.table.both_pass, 2);

    // Finished runs get their snapshots built in the background: only the third run lacks one.
    // (Workers mark a run completed after their last commit; here the test does.)
    assert!(store.finish_run_if_done(other_run).await.unwrap());
    assert_eq!(
        arbiter_engine::reports::runs::warm_snapshots(store, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        arbiter_engine::reports::runs::warm_snapshots(store, 10)
            .await
            .unwrap(),
        0
    );

    match arbiter_engine::reports::compare::compare_checkpoints(
        store,
        base_run,
        &[other_run],
        Correction::Holm,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => assert!(message.contains("same eval"), "{message}"),
        other => panic!("runs of different evals must not be compared, got {other:?}"),
    }
    assert!(matches!(
        arbiter_engine::reports::compare::compare_checkpoints(
            store,
            base_run,
            &[base_run],
            Correction::Holm
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));
    assert!(matches!(
        arbiter_engine::reports::compare::compare_checkpoints(
            store,
            base_run,
            &[RunId(other_run.get() + 1000)],
            Correction::Holm
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));
}

/// Checkpoints along a training run, each evaluated once: the trend orders them by step,
/// compares each with its policy's baseline, lists the prompts that flipped, and a watch on it
/// raises (then resolves) a regression alert. Promotion decisions need two complete reports.
async fn a_training_run_trend_flags_regressions_and_promotions_need_complete_reports(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let dataset: String = (1..=12)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"input\": \"What is {i} + 1?\", \"target\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "plus",
        "plus.jsonl",
        dataset.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("plus-exact", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let register =
        |name: &'static str, step: &'static str| arbiter_engine::catalog::CheckpointForm {
            name: name.into(),
            endpoint_url: ENDPOINT.into(),
            // Distinct served models: no answer is reused from another checkpoint's cache.
            model: name.into(),
            training_run: if step.is_empty() {
                String::new()
            } else {
                "tr-1".into()
            },
            training_step: step.into(),
            ..arbiter_engine::catalog::CheckpointForm::default()
        };
    for bad_step in ["-5", "ten"] {
        match arbiter_engine::catalog::register_checkpoint(store, &register("bad", bad_step), None)
            .await
        {
            Err(ServiceError::Invalid(message)) => {
                assert!(message.contains("training step"), "{message}")
            }
            other => panic!("step `{bad_step}` must be refused, got {other:?}"),
        }
    }
    // Registered out of training order: the trend sorts by step.
    let mut checkpoints = HashMap::new();
    for (name, step) in [
        ("step-300", "300"),
        ("step-100", "100"),
        ("step-200", "200"),
        ("prod", ""),
    ] {
        let id = arbiter_engine::catalog::register_checkpoint(store, &register(name, step), None)
            .await
            .unwrap();
        checkpoints.insert(name, id);
    }
    let listed = store.list_checkpoints().await.unwrap();
    let step_300 = listed.iter().find(|c| c.name == "step-300").unwrap();
    assert_eq!(
        (step_300.training_run.as_str(), step_300.training_step),
        ("tr-1", Some(300))
    );
    assert_eq!(
        store.training_runs().await.unwrap(),
        vec!["tr-1".to_string()]
    );

    // Every checkpoint answers everything right, except step-300, wrong on t1..t9.
    let mut runs = HashMap::new();
    for name in ["step-100", "step-200", "step-300"] {
        let run = arbiter_engine::runs::launch_run(
            store,
            eval,
            checkpoints[name],
            Priority::Scheduled,
            "default",
            None,
        )
        .await
        .unwrap()
        .run_id;
        runs.insert(name, run);
    }
    let answer_all = |wrong_run: Option<RunId>| async move {
        for id in store
            .claim_work("worker", 100, LONG_LEASE_MS)
            .await
            .unwrap()
        {
            let job = store.load_identity(id).await.unwrap();
            let number: usize = job.case_id[1..].parse().unwrap();
            let answer = if Some(job.run_id) == wrong_run && number <= 9 {
                Reply::Wrong
            } else {
                Reply::Correct
            };
            assert!(reply(store, id, answer).await);
        }
    };
    answer_all(Some(runs["step-300"])).await;

    let trend = trends::trend(store, eval, "tr-1", BaselinePolicy::Previous)
        .await
        .unwrap();
    let names: Vec<&str> = trend
        .points
        .iter()
        .map(|p| p.checkpoint_name.as_str())
        .collect();
    assert_eq!(names, ["step-100", "step-200", "step-300"]);
    assert!(
        trend.points[0].note.contains("no baseline yet"),
        "{}",
        trend.points[0].note
    );
    assert_eq!(trend.points[1].baseline.as_ref().unwrap().1, "step-100");
    assert!(trend.points[1].regressions().is_empty());
    let last = &trend.points[2];
    assert_eq!(last.baseline.as_ref().unwrap().1, "step-200");
    assert!(
        last.regressions().contains(&"all".to_string()),
        "{:?}",
        last.comparison
    );
    assert_eq!(
        last.comparison.as_ref().unwrap().overall.table.pass_to_fail,
        9
    );
    assert_eq!((last.overall.passed, last.overall.failed), (3, 9));
    // Pinned to the first checkpoint: it is the baseline of itself.
    let pinned = trends::trend(
        store,
        eval,
        "tr-1",
        BaselinePolicy::Pinned(checkpoints["step-100"]),
    )
    .await
    .unwrap();
    assert_eq!(pinned.points[0].note, "this is the baseline");
    assert_eq!(pinned.points[2].baseline.as_ref().unwrap().1, "step-100");
    assert!(matches!(
        trends::trend(
            store,
            eval,
            "tr-1",
            BaselinePolicy::Pinned(checkpoints["prod"])
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));
    assert!(matches!(
        trends::trend(store, eval, "no-such-run", BaselinePolicy::First).await,
        Err(ServiceError::NotFound(_))
    ));

    // The flaky view: the nine prompts that flipped once, each with its history.
    let flaky = trends::flaky_prompts(store, eval, "tr-1", 5).await.unwrap();
    assert_eq!(flaky.checkpoints, ["step-100", "step-200", "step-300"]);
    assert_eq!(flaky.prompts.len(), 5);
    assert_eq!(flaky.prompts[0].case_id, "t1");
    assert_eq!(flaky.prompts[0].input, "What is 1 + 1?");
    assert_eq!(flaky.prompts[0].record.flips, 1);
    assert_eq!(
        flaky.prompts[0].record.history,
        vec![(1, 1), (1, 1), (0, 1)]
    );

    // A watch raises one alert for the regression, once; a fixed checkpoint resolves it.
    trends::watch_trend(store, eval, "tr-1", BaselinePolicy::Previous, None)
        .await
        .unwrap();
    assert_eq!(
        trends::check_watches(store, now_ms()).await.unwrap(),
        (1, 0)
    );
    assert_eq!(
        trends::check_watches(store, now_ms()).await.unwrap(),
        (0, 0)
    );
    let alert = store
        .alerts(0)
        .await
        .unwrap()
        .into_iter()
        .find(|alert| alert.kind == arbiter_domain::health::ALERT_REGRESSION)
        .unwrap();
    assert_eq!(alert.subject, "eval `plus-exact` on training run `tr-1`");
    assert!(
        alert.message.contains("`step-300` regressed"),
        "{}",
        alert.message
    );
    let step_400 =
        arbiter_engine::catalog::register_checkpoint(store, &register("step-400", "400"), None)
            .await
            .unwrap();
    arbiter_engine::runs::launch_run(store, eval, step_400, Priority::Scheduled, "default", None)
        .await
        .unwrap();
    answer_all(None).await;
    assert_eq!(
        trends::check_watches(store, now_ms()).await.unwrap(),
        (0, 1)
    );
    assert!(!store
        .alerts(0)
        .await
        .unwrap()
        .iter()
        .any(|a| a.kind == arbiter_domain::health::ALERT_REGRESSION));
    assert!(matches!(
        trends::watch_trend(
            store,
            eval,
            "tr-1",
            BaselinePolicy::Pinned(checkpoints["prod"]),
            None
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));

    // Promotion decisions: recorded on two complete reports with the comparison kept ...
    let decision = arbiter_engine::reports::compare::decide_promotion(
        store,
        runs["step-100"],
        runs["step-300"],
        false,
        "regressed on t1-t9",
        None,
    )
    .await
    .unwrap();
    let decisions = store.promotion_decisions(runs["step-300"]).await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].id, decision);
    assert_eq!(
        (
            decisions[0].decision.as_str(),
            decisions[0].candidate_checkpoint.as_str()
        ),
        ("reject", "step-300")
    );
    assert!(
        decisions[0].summary_json.contains("\"pass_to_fail\":9"),
        "{}",
        decisions[0].summary_json
    );
    // ... and refused on a partial one, with nothing stored.
    let partial = arbiter_engine::runs::launch_run(
        store,
        eval,
        checkpoints["prod"],
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
    .run_id;
    match arbiter_engine::reports::compare::decide_promotion(
        store,
        runs["step-100"],
        partial,
        true,
        "",
        None,
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("PARTIAL (0 of 12 results)"), "{message}");
            assert!(message.contains("needs two complete reports"), "{message}");
        }
        other => panic!("a partial report must not back a promotion, got {other:?}"),
    }
    assert!(store.promotion_decisions(partial).await.unwrap().is_empty());
}

/// A rater takes the one open human task (c5's uncertain answer) and labels it pass.
async fn label_by_a_human(store: &dyn Store) {
    let rater = store
        .create_user("rita", &stand_in_hash("rita"), Role::Annotator)
        .await
        .unwrap();
    let task = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("the uncertain answer waits for a human");
    assert_eq!(task.target, "10", "c5 asks for 5 + 5");
    store
        .submit_label(&task.handle, rater, true, "right after all")
        .await
        .unwrap();
}

/// Worker A's lease expires mid-request and worker B takes the same batch; both finish and
/// commit at the same moment. Exactly one result per identity counts.
async fn racing_workers_never_both_commit_one_identity(store: Arc<dyn Store>) {
    let run_id = launch_one_run(store.as_ref(), FIVE_CASES.as_bytes(), 4).await;
    let first = store.claim_work("worker-a", 100, 0).await.unwrap();
    assert_eq!(first.len(), 20);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(store.reap_expired_leases().await.unwrap(), 20);
    let second = store
        .claim_work("worker-b", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(
        sorted(first.clone()),
        sorted(second.clone()),
        "the same batch, twice"
    );

    let finished = |output: &str, ids: &[IdentityId]| answered_all(ids, output, "2");
    let batch_a = finished("Answer: 2", &first);
    let batch_b = finished("Answer: 3", &second);
    let (a, b) = tokio::join!(
        {
            let store = store.clone();
            async move { store.record_results(&batch_a).await.unwrap() }
        },
        {
            let store = store.clone();
            async move { store.record_results(&batch_b).await.unwrap() }
        },
    );
    assert_eq!(
        a.inserted + b.inserted,
        20,
        "each identity counted once: {a:?} {b:?}"
    );
    let again = store
        .record_results(&finished("Answer: 4", &first))
        .await
        .unwrap();
    assert_eq!(again.inserted, 0, "a late third commit is a no-op");
    let rows = store.run_outcomes(run_id).await.unwrap();
    assert_eq!(rows.len(), 20);
    assert!(rows
        .iter()
        .all(|row| row.output == "Answer: 2" || row.output == "Answer: 3"));
    let run = progress(store.as_ref(), run_id).await;
    assert_eq!(
        (run.done, run.in_flight, run.status.as_str()),
        (20, 0, "completed")
    );
}

/// A launch that died part-way leaves its run expanding: once its launch has written nothing
/// for a while, workers leave the run (it could never finish) until a relaunch plans the rest
/// and sets it running. Both backends; the run's planning time is aged in SQL.
#[tokio::test]
async fn a_run_whose_launch_went_silent_waits_for_a_relaunch() {
    for backend in [TestBackend::sqlite().await, TestBackend::postgres().await] {
        let store = backend.database.store();
        let store = store.as_ref();
        let run_id = launch_one_run(store, FIVE_CASES.as_bytes(), 1).await;
        assert!(store
            .set_run_status(run_id, &[RunStatus::Running], RunStatus::Expanding)
            .await
            .unwrap());
        assert_eq!(store.active_runs().await.unwrap().len(), 1);
        assert_eq!(store.queue_depth().await.unwrap(), (5, 0));
        backend
            .execute(&format!(
                "UPDATE runs SET planned_at = planned_at - {}",
                arbiter_store::runs::PLANNING_STALE_MS + 1
            ))
            .await;
        assert!(store.active_runs().await.unwrap().is_empty());
        assert_eq!(
            store.queue_depth().await.unwrap(),
            (0, 0),
            "no worker can take its identities"
        );
        assert!(store
            .claim_identities("w", run_id, 10, LONG_LEASE_MS, true)
            .await
            .unwrap()
            .is_empty());
        assert!(store
            .claim_work("w", 10, LONG_LEASE_MS)
            .await
            .unwrap()
            .is_empty());
        // Launching the eval again finishes planning the run and sets it running.
        let relaunched = relaunch(store, run_id).await;
        assert_eq!(
            (relaunched.run_id, relaunched.status),
            (run_id, RunStatus::Running)
        );
        assert_eq!(
            store
                .claim_work("w", 10, LONG_LEASE_MS)
                .await
                .unwrap()
                .len(),
            5
        );
        backend.tear_down().await;
    }
}

/// Launches a run's eval on its checkpoint again, as `default`.
async fn relaunch(store: &dyn Store, run_id: RunId) -> arbiter_domain::run::LaunchedRun {
    let manifest = store.run_manifest(run_id).await.unwrap().unwrap();
    arbiter_engine::runs::launch_run(
        store,
        manifest.eval_id,
        manifest.checkpoint_id,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
}

/// A run cancelled (or held) while it expanded, after its launch died part-way, is planned
/// whole before it runs again: relaunched, or resumed on its page. Both backends; the dead
/// launch is staged in SQL (two of five identities written, the run left expanding).
#[tokio::test]
async fn a_run_cancelled_while_it_expanded_is_planned_whole_before_it_runs_again() {
    for backend in [TestBackend::sqlite().await, TestBackend::postgres().await] {
        let store = backend.database.store();
        let store = store.as_ref();
        let run_id = launch_one_run(store, FIVE_CASES.as_bytes(), 1).await;
        let planned = || async { store.run_results(run_id, 100).await.unwrap().len() };
        let owner = team_member(store, "runner", Role::Researcher, "default").await;
        let owner = &owner;
        let act = |action: &'static str| async move {
            arbiter_engine::runs::change_run_state(store, owner, run_id, action)
                .await
                .unwrap()
        };
        // A launch that ran to its end says so, and a resume trusts it (counts nothing): an
        // identity deleted behind its back is not planned again.
        assert!(store.planned_in_full(run_id).await.unwrap());
        backend
            .execute(&format!(
                "DELETE FROM work_items WHERE run_id = {run_id} AND case_id = 'c5'"
            ))
            .await;
        act("cancel").await;
        act("resume").await;
        assert_eq!(planned().await, 4);

        let launch_died_part_way = || async {
            backend
                .execute(&format!(
                    "DELETE FROM work_items WHERE run_id = {run_id} AND case_id IN ('c3', 'c4', 'c5')"
                ))
                .await;
            backend
                .execute(&format!(
                    "UPDATE runs SET status = 'expanding', planned_in_full_at = NULL WHERE id = {run_id}"
                ))
                .await;
            assert_eq!(planned().await, 2);
        };

        // Cancelled, then launched again: the relaunch plans the rest.
        launch_died_part_way().await;
        assert!(store
            .set_run_status(run_id, &[RunStatus::Expanding], RunStatus::Cancelled)
            .await
            .unwrap());
        let relaunched = relaunch(store, run_id).await;
        assert_eq!(
            (relaunched.run_id, relaunched.status),
            (run_id, RunStatus::Running)
        );
        assert_eq!(planned().await, 5);

        // Cancelled on its page, then resumed there: planned whole before it runs.
        launch_died_part_way().await;
        act("cancel").await;
        act("resume").await;
        assert_eq!(progress(store, run_id).await.status, RunStatus::Running);
        assert_eq!(planned().await, 5);

        // Paused by a serving canary's hold while it was planned, then resumed: planned whole,
        // and it completes once its five identities are answered.
        launch_died_part_way().await;
        assert!(store
            .set_run_status(run_id, &[RunStatus::Expanding], RunStatus::Paused)
            .await
            .unwrap());
        act("resume").await;
        assert_eq!(planned().await, 5);
        let claimed = store.claim_work("w", 10, LONG_LEASE_MS).await.unwrap();
        assert_eq!(claimed.len(), 5, "every identity runs");
        let recorded = store
            .record_results(&answered_all(&claimed, "Answer: 2", "2"))
            .await
            .unwrap();
        for run in recorded.runs {
            store.finish_run_if_done(run).await.unwrap();
        }
        assert_eq!(progress(store, run_id).await.status, RunStatus::Completed);
        backend.tear_down().await;
    }
}

/// Paused and cancelled runs hand out nothing; a running run hands out its longest items
/// first; a resumed run is claimable again; a run still expanding hands out what is planned
/// and completes only once expanded.
async fn the_scheduler_sees_running_and_expanding_runs_and_claims_longest_first(
    store: Arc<dyn Store>,
) {
    let lengths = r#"{"id": "short", "input": "Hi?", "target": "x"}
{"id": "long", "input": "A much longer question that goes on and on and on, well past the others?", "target": "x"}
{"id": "medium", "input": "A medium-sized question?", "target": "x"}
"#;
    let run_id = launch_one_run(store.as_ref(), lengths.as_bytes(), 1).await;
    let active = store.active_runs().await.unwrap();
    assert_eq!(
        active.iter().map(|run| run.id).collect::<Vec<_>>(),
        vec![run_id]
    );
    assert_eq!(
        active[0].team_weight, 1.0,
        "a team without a weight weighs 1"
    );
    // Leads weigh teams for fair share; weights out of range are refused, nothing stored.
    arbiter_engine::accounts::set_team_weight(store.as_ref(), "default", 2.5)
        .await
        .unwrap();
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1000.0] {
        assert!(matches!(
            arbiter_engine::accounts::set_team_weight(store.as_ref(), "default", bad).await,
            Err(ServiceError::Invalid(_))
        ));
    }
    assert!(matches!(
        arbiter_engine::accounts::set_team_weight(store.as_ref(), "bad team", 1.0).await,
        Err(ServiceError::Invalid(_))
    ));
    assert_eq!(store.active_runs().await.unwrap()[0].team_weight, 2.5);

    // Runs are paused, resumed and cancelled by their team (here `default`'s researcher).
    let owner_id = store
        .create_user(
            "runner",
            &arbiter_testkit::fixtures::stand_in_hash("runner"),
            Role::Researcher,
        )
        .await
        .unwrap();
    let owner = store.get_user(owner_id).await.unwrap().unwrap();
    arbiter_engine::runs::change_run_state(store.as_ref(), &owner, run_id, "pause")
        .await
        .unwrap();
    assert!(store.active_runs().await.unwrap().is_empty());
    assert!(
        store
            .claim_identities("w", run_id, 10, LONG_LEASE_MS, true)
            .await
            .unwrap()
            .is_empty(),
        "a worker with a stale list of runs still gets nothing from a paused run"
    );
    assert!(
        store
            .claim_work("w", 10, LONG_LEASE_MS)
            .await
            .unwrap()
            .is_empty(),
        "a paused run hands out nothing"
    );
    assert!(matches!(
        arbiter_engine::runs::change_run_state(store.as_ref(), &owner, run_id, "pause").await,
        Err(ServiceError::Conflict(_))
    ));
    arbiter_engine::runs::change_run_state(store.as_ref(), &owner, run_id, "resume")
        .await
        .unwrap();

    let claimed = store
        .claim_identities("w", run_id, 2, LONG_LEASE_MS, true)
        .await
        .unwrap();
    let order: Vec<&str> = claimed.iter().map(|job| job.case_id.as_str()).collect();
    assert_eq!(order, vec!["long", "medium"], "longest expected first");
    assert!(claimed[0].cost > claimed[1].cost);
    assert!(claimed.iter().all(|job| job
        .generation_key
        .as_ref()
        .is_some_and(|key| key.len() == 64)));

    arbiter_engine::runs::change_run_state(store.as_ref(), &owner, run_id, "cancel")
        .await
        .unwrap();
    assert!(store.active_runs().await.unwrap().is_empty());
    assert!(
        store
            .claim_work("w", 10, LONG_LEASE_MS)
            .await
            .unwrap()
            .is_empty(),
        "a cancelled run hands out nothing"
    );
    assert_eq!(
        progress(store.as_ref(), run_id).await.status,
        RunStatus::Cancelled
    );
    // A cancelled run can be picked up again, where it stopped.
    arbiter_engine::runs::change_run_state(store.as_ref(), &owner, run_id, "resume")
        .await
        .unwrap();
    assert_eq!(store.active_runs().await.unwrap().len(), 1);
    let rest = store
        .claim_identities("w", run_id, 10, LONG_LEASE_MS, true)
        .await
        .unwrap();
    assert_eq!(
        rest.iter()
            .map(|job| job.case_id.as_str())
            .collect::<Vec<_>>(),
        vec!["short"]
    );

    // The short question turns out to need a long answer and the long one a short answer.
    let completion_tokens = HashMap::from([("short", 60), ("medium", 10), ("long", 2)]);
    let finished: Vec<FinishedIdentity> = claimed
        .iter()
        .chain(&rest)
        .map(|job| FinishedIdentity {
            identity_id: job.identity_id,
            generation: Generation {
                completion_tokens: Some(completion_tokens[job.case_id.as_str()]),
                logprobs: Some(arbiter_domain::logprobs::encode(&[TokenLogprob {
                    bytes: job.case_id.as_bytes().to_vec(),
                    logprob: -0.5,
                    top: Vec::new(),
                }])),
                ..answered("Answer: x")
            },
            grading: Grading::deterministic_only(Some(grade_exact_match("Answer: x", "x"))),
            generation_key: job.generation_key.clone(),
            cached_from: None,
            next_turn_waits: false,
        })
        .collect();
    store.record_results(&finished).await.unwrap();
    assert!(store.finish_run_if_done(run_id).await.unwrap());
    // Logprobs are stored with each answer and read back token for token.
    let stored = store
        .generation_logprobs(claimed[0].identity_id)
        .await
        .unwrap()
        .expect("the answer's logprobs are stored");
    let tokens = arbiter_domain::logprobs::decode(&stored).unwrap();
    assert_eq!(tokens[0].text(), claimed[0].case_id);
    assert_eq!(tokens[0].logprob, -0.5);
    let revision_id = store
        .run_manifest(run_id)
        .await
        .unwrap()
        .expect("the run has a manifest")
        .dataset_revision_id;
    let observed = store
        .observed_completion_tokens(
            revision_id,
            &[
                "short".to_string(),
                "long".to_string(),
                "unseen".to_string(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        observed,
        HashMap::from([("short".to_string(), 60.0), ("long".to_string(), 2.0)])
    );

    // A later run of the same cases (another seed, so nothing comes from the cache) claims
    // by what was observed.
    let dataset_id = store.list_datasets().await.unwrap()[0].id;
    let checkpoint = store.list_checkpoints().await.unwrap()[0].id;
    let form = EvalForm {
        seed: 8,
        ..eval_form("qa-again", dataset_id, 1)
    };
    let again = arbiter_engine::catalog::define_eval(store.as_ref(), &form, None)
        .await
        .unwrap();
    let second = arbiter_engine::runs::launch_run(
        store.as_ref(),
        again,
        checkpoint,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap();
    // Its launch is taken back to `expanding`, as if its later items were still being
    // planned: what is planned already is handed out, and the run does not complete until
    // its launch has planned everything and set it running.
    assert!(store
        .set_run_status(second.run_id, &[RunStatus::Running], RunStatus::Expanding)
        .await
        .unwrap());
    assert_eq!(
        store
            .active_runs()
            .await
            .unwrap()
            .iter()
            .map(|run| run.id)
            .collect::<Vec<_>>(),
        vec![second.run_id],
        "a run still expanding is worked"
    );
    let planned = store
        .claim_identities("w", second.run_id, 10, LONG_LEASE_MS, true)
        .await
        .unwrap();
    let order: Vec<&str> = planned.iter().map(|job| job.case_id.as_str()).collect();
    assert_eq!(order, vec!["short", "long", "medium"]);
    let answers: Vec<FinishedIdentity> = planned
        .iter()
        .map(|job| FinishedIdentity {
            identity_id: job.identity_id,
            generation: answered("Answer: x"),
            grading: Grading::deterministic_only(Some(grade_exact_match("Answer: x", "x"))),
            generation_key: job.generation_key.clone(),
            cached_from: None,
            next_turn_waits: false,
        })
        .collect();
    store.record_results(&answers).await.unwrap();
    assert!(!store.finish_run_if_done(second.run_id).await.unwrap());
    let expanding = progress(store.as_ref(), second.run_id).await;
    assert_eq!(
        (expanding.status, expanding.done, expanding.passed),
        (RunStatus::Expanding, 3, 3)
    );
    assert!(store
        .set_run_status(second.run_id, &[RunStatus::Expanding], RunStatus::Running)
        .await
        .unwrap());
    assert!(store.finish_run_if_done(second.run_id).await.unwrap());
}

/// A judge and a triage policy are versioned; a judged result is recorded with its grades,
/// its cached judge call, the stage that decided it and an audit task; human labels turn
/// into calibration data and the run's cost splits by stage.
async fn judges_policies_and_the_grade_cache(store: Arc<dyn Store>) {
    use arbiter_domain::grading::judge::{JudgeCall, NewJudge};
    use arbiter_domain::grading::record::{GradeRecord, HumanTask};
    use arbiter_domain::grading::triage::{HumanKind, Stage, TriagePolicy};
    use arbiter_domain::grading::Grade;
    let store = &*store;
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let checkpoint = store.list_checkpoints().await.unwrap()[0].id;
    let eval_id = store.list_evals().await.unwrap()[0].id;
    assert_eq!(
        store.get_eval(eval_id).await.unwrap().unwrap().name,
        "qa-exact"
    );
    assert_eq!(store.get_eval(EvalId(9_999)).await.unwrap(), None);

    // Prices are per checkpoint and can be changed.
    let prices = arbiter_domain::checkpoint::TokenPrices {
        input_usd_per_mtok: 2.5,
        output_usd_per_mtok: 10.0,
    };
    store
        .set_checkpoint_prices(checkpoint, &prices)
        .await
        .unwrap();
    assert_eq!(store.list_checkpoints().await.unwrap()[0].prices, prices);
    assert!(matches!(
        store
            .set_checkpoint_prices(CheckpointId(9_999), &prices)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Judges: a second save under one name is version 2; an unknown checkpoint is refused.
    let new_judge = |rubric: &str| NewJudge {
        name: "qa-judge".into(),
        checkpoint_id: checkpoint,
        rubric: rubric.into(),
        max_tokens: 16,
        scale: None,
        pairwise: false,
        batch_items: 1,
    };
    let v1 = store
        .create_judge(&new_judge("v1 {output}"), None)
        .await
        .unwrap();
    let v2 = store
        .create_judge(
            &NewJudge {
                batch_items: 8,
                ..new_judge("v2 {output}")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!((v1.version, v2.version), (1, 2));
    assert_eq!(
        store.get_judge(v2.id).await.unwrap().unwrap().batch_items,
        8,
        "how many answers a version grades per call is kept with it"
    );
    assert_eq!(v2.grader_id(), "judge:qa-judge@2");
    let listed = store.list_judges().await.unwrap();
    assert_eq!(
        listed.iter().map(|judge| judge.version).collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(
        store.get_judge(v1.id).await.unwrap().unwrap().rubric,
        "v1 {output}"
    );
    let orphan = NewJudge {
        checkpoint_id: CheckpointId(9_999),
        ..new_judge("x {output}")
    };
    assert!(matches!(
        store.create_judge(&orphan, None).await,
        Err(StoreError::NotFound(_))
    ));

    // Policies: versions count up per eval; an unknown judge stores nothing.
    let policy = TriagePolicy {
        cheap_judge: Some(v2.id),
        ..TriagePolicy::default()
    };
    assert_eq!(
        store
            .save_grading_policy(eval_id, &policy, "first", None, None)
            .await
            .unwrap(),
        1
    );
    let bad = TriagePolicy {
        strong_judge: Some(9_999),
        ..policy.clone()
    };
    assert!(matches!(
        store
            .save_grading_policy(eval_id, &bad, "", None, None)
            .await,
        Err(StoreError::NotFound(_))
    ));
    let stricter = TriagePolicy {
        accept_threshold: 0.95,
        ..policy.clone()
    };
    assert_eq!(
        store
            .save_grading_policy(eval_id, &stricter, "stricter", Some("{\"old\":0.9}"), None)
            .await
            .unwrap(),
        2
    );
    let history = store.grading_policies(eval_id).await.unwrap();
    assert_eq!(
        history.iter().map(|p| p.version).collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(
        (history[0].policy.accept_threshold, history[0].note.as_str()),
        (0.95, "stricter")
    );
    assert_eq!(
        history[0].calibration_json.as_deref(),
        Some("{\"old\":0.9}")
    );

    // A judged result: accepted by the judge, audited, its judge call cached.
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    // An identity handed back unrecorded (its judge was down) is queued again, once.
    assert!(store.release_lease("worker", ids[2]).await.unwrap());
    assert!(!store.release_lease("worker", ids[2]).await.unwrap());
    assert!(
        !store.release_lease("other", ids[1]).await.unwrap(),
        "only the holder releases"
    );
    let judge_grade = |verdict: Verdict| GradeRecord {
        stage: Stage::CheapJudge,
        grade: Grade {
            grader: v2.grader_id(),
            verdict,
            extracted_answer: None,
            reason: "PASS: right city".into(),
        },
        confidence: Some(0.93),
        agreement: None,
        cost_usd: Some(0.002),
        prompt_tokens: Some(100),
        completion_tokens: Some(3),
        latency_ms: Some(40),
        model_used: Some("judge-model".into()),
        fallback_used: false,
        from_cache: false,
        instructions: Vec::new(),
        score: None,
    };
    let call = JudgeCall {
        cache_key: "sha256:judge-call".into(),
        output: "PASS: right city".into(),
        pass: Some(true),
        confidence: Some(0.93),
        prompt_tokens: Some(100),
        completion_tokens: Some(3),
        model_used: Some("judge-model".into()),
        // A scale judge's reading is cached with the call (a PASS/FAIL judge's has none).
        score: Some(arbiter_domain::grading::scale::ScoreReading {
            point: 4,
            probabilities: Some(vec![0.0, 0.05, 0.1, 0.6, 0.25]),
        }),
    };
    let mut audited = Grading {
        verdict: Some(Verdict::Pass),
        decided_by: Some(Stage::CheapJudge),
        human: Some(HumanTask {
            kind: HumanKind::Audit,
            reason: "audit: 2% of verdicts".into(),
            sampling_rate: 0.02,
            routing: Default::default(),
        }),
        judge_calls: vec![call.clone()],
        ..Grading::deterministic_only(Some(grade_exact_match(UNSURE, "42")))
    };
    audited.grades.push(judge_grade(Verdict::Pass));
    let mut generation = answered(UNSURE);
    generation.cost_usd = Some(0.001);
    let recorded = store
        .record_results(&[FinishedIdentity {
            identity_id: ids[0],
            generation,
            grading: audited,
            generation_key: None,
            cached_from: None,
            next_turn_waits: false,
        }])
        .await
        .unwrap();
    assert_eq!(recorded.inserted, 1);
    assert_eq!(
        store.cached_judge_call("sha256:judge-call").await.unwrap(),
        Some(call)
    );
    assert_eq!(store.cached_judge_call("sha256:other").await.unwrap(), None);
    assert_eq!(
        progress(store, run_id).await.passed,
        1,
        "an audited verdict stands meanwhile"
    );

    // An escalated one waits for a human.
    let mut escalated = Grading::deterministic_only(Some(grade_exact_match(UNSURE, "42")));
    escalated.grades.push(judge_grade(Verdict::Fail));
    escalated.human = Some(HumanTask {
        kind: HumanKind::Escalation,
        reason: "below 0.9".into(),
        sampling_rate: 1.0,
        routing: Default::default(),
    });
    escalated.verdict = Some(Verdict::Uncertain);
    escalated.human.as_mut().unwrap().reason =
        "the cheap judge said fail at confidence 0.93".into();
    store
        .record_results(&[FinishedIdentity {
            identity_id: ids[1],
            generation: answered(UNSURE),
            grading: escalated,
            generation_key: None,
            cached_from: None,
            next_turn_waits: false,
        }])
        .await
        .unwrap();
    let costs = store.run_costs(run_id).await.unwrap();
    let decided: HashMap<String, i64> = costs.decided_by.iter().cloned().collect();
    assert_eq!(
        (
            decided.get("cheap_judge"),
            decided.get("pending"),
            decided.get("unanswered")
        ),
        (Some(&1), Some(&1), Some(&1))
    );
    assert!((costs.generation_usd - 0.001).abs() < 1e-12);
    assert!((costs.judging_usd - 0.004).abs() < 1e-12);
    assert_eq!(
        (
            costs.judge_grades,
            costs.generation_calls,
            costs.human_labels
        ),
        (2, 2, 0)
    );

    // Humans label both: the audited pass is confirmed, the escalated fail was wrong.
    let ann = store
        .create_user("ann", &stand_in_hash("ann"), Role::Annotator)
        .await
        .unwrap();
    while let Some(task) = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        store
            .submit_label(&task.handle, ann, true, "")
            .await
            .unwrap();
    }
    let mut checked = store
        .human_checked_judgements(&v2.grader_id())
        .await
        .unwrap();
    checked.sort_by_key(|checked| checked.judge_pass);
    assert_eq!(
        checked
            .iter()
            .map(|c| (c.judge_pass, c.human_pass, c.sampling_rate))
            .collect::<Vec<_>>(),
        [(false, true, 1.0), (true, true, 0.02)]
    );
    assert!(store
        .human_checked_judgements(&v1.grader_id())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.judge_usage(&v2.grader_id()).await.unwrap().0, 2);
    let costs = store.run_costs(run_id).await.unwrap();
    let decided: HashMap<String, i64> = costs.decided_by.iter().cloned().collect();
    assert_eq!((decided.get("human"), costs.human_labels), (Some(&2), 2));
}

/// Items that need two raters get exactly two, whatever the order of claims, expired leases and
/// double submissions; an even split waits for a reviewer, whose correction decides; a
/// rejected label reopens its item; a paused rater gets nothing and a lead sees the pool.
async fn overlap_review_and_the_rater_pool(store: Arc<dyn Store>) {
    use arbiter_domain::annotation::pool::RaterUpdate;
    use arbiter_domain::annotation::review::ReviewDecision;
    let store = &*store;
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_to_humans(store, &ids, 2).await;
    let rater = |name: &'static str| async move {
        store
            .create_user(name, &stand_in_hash(name), Role::Annotator)
            .await
            .unwrap()
    };
    let (ann, ben, cal, dan) = (
        rater("ann").await,
        rater("ben").await,
        rater("cal").await,
        rater("dan").await,
    );
    let rev = store
        .create_user("rev", &stand_in_hash("rev"), Role::Reviewer)
        .await
        .unwrap();
    let next = |user: UserId, lease_ms: i64| async move {
        store
            .next_annotation_task(user, lease_ms)
            .await
            .unwrap()
            .expect("an item is offered")
    };

    // Two raters share the first item; the third gets the next one.
    let ann_first = next(ann, LONG_LEASE_MS).await;
    let ben_first = next(ben, LONG_LEASE_MS).await;
    let first = ann_first.task_id;
    assert_eq!(ben_first.task_id, first);
    let cal_second = next(cal, LONG_LEASE_MS).await;
    let second = cal_second.task_id;
    assert_ne!(second, first, "the first item has both its raters");
    assert_eq!(
        next(ann, LONG_LEASE_MS).await.handle,
        ann_first.handle,
        "asking again renews the same lease"
    );

    // Ann and Ben disagree: an even split waits for a reviewer.
    store
        .submit_label(&ann_first.handle, ann, true, "looks right")
        .await
        .unwrap();
    assert!(
        matches!(
            store
                .submit_label(&ann_first.handle, ann, true, "again")
                .await,
            Err(StoreError::Conflict(_))
        ),
        "a second submission changes nothing"
    );
    assert!(
        matches!(
            store.submit_label(&cal_second.handle, ann, true, "").await,
            Err(StoreError::Conflict(_))
        ),
        "ann does not hold the second item"
    );
    store
        .submit_label(&ben_first.handle, ben, false, "wrong")
        .await
        .unwrap();
    assert_eq!(progress(store, run_id).await.uncertain, 3);
    let review = store
        .next_review(rev)
        .await
        .unwrap()
        .expect("the split is up for review");
    assert_eq!((review.rater.as_str(), review.pass), ("ann", true));
    assert!(review.why.contains("disagree"));
    assert!(
        matches!(
            store
                .review_label(review.label_id, ann, ReviewDecision::Accept, "")
                .await,
            Err(StoreError::Conflict(_))
        ),
        "no one reviews their own label"
    );
    store
        .review_label(
            review.label_id,
            rev,
            ReviewDecision::Correct { pass: true },
            "42 it is",
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .review_label(review.label_id, rev, ReviewDecision::Accept, "")
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        progress(store, run_id).await.passed,
        1,
        "the correction decides the item"
    );

    // An expired lease counts for nothing: its label is refused and the slot is free again.
    let stale = next(dan, 1).await;
    assert_eq!(stale.task_id, second);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(matches!(
        store.submit_label(&stale.handle, dan, true, "").await,
        Err(StoreError::Conflict(_))
    ));
    store
        .submit_label(&cal_second.handle, cal, false, "")
        .await
        .unwrap();
    let dan_second = next(dan, LONG_LEASE_MS).await;
    assert_eq!(
        dan_second.task_id, second,
        "the expired slot is offered again"
    );
    assert_ne!(dan_second.handle, stale.handle, "a new claim, a new handle");
    store
        .submit_label(&dan_second.handle, dan, false, "")
        .await
        .unwrap();
    let run = progress(store, run_id).await;
    assert_eq!(
        (run.failed, run.uncertain),
        (1, 1),
        "two fails decide the second item"
    );

    let records = store.raters().await.unwrap();
    let dan_record = records
        .iter()
        .find(|record| record.username == "dan")
        .unwrap();
    assert_eq!(dan_record.labels.len(), 1);
    assert_eq!(dan_record.labels[0].matches_final, Some(true));

    // Only labels drawn for review are decided: Dan's was not.
    let labels_before = store.run_labels(run_id).await.unwrap();
    let dan_label = labels_before
        .iter()
        .find(|label| label.rater == "dan")
        .unwrap();
    assert_eq!(dan_label.task_id, second);
    assert!(matches!(
        store
            .review_label(dan_label.label_id, rev, ReviewDecision::Reject, "")
            .await,
        Err(StoreError::Conflict(message)) if message.contains("not drawn")
    ));

    // A rejected label (Ben's, the other half of the split) reopens its item and takes its
    // verdict back.
    let other = store
        .next_review(rev)
        .await
        .unwrap()
        .expect("the other half of the split");
    assert_eq!(other.rater, "ben");
    store
        .review_label(
            other.label_id,
            rev,
            ReviewDecision::Reject,
            "did not read the question",
        )
        .await
        .unwrap();
    let run = progress(store, run_id).await;
    assert_eq!(
        (run.passed, run.failed, run.uncertain),
        (0, 1, 2),
        "the item is undecided again"
    );
    assert_eq!(
        store.run_labels(run_id).await.unwrap().len(),
        labels_before.len() - 1
    );
    let ed = rater("ed").await;
    assert_eq!(
        next(ed, LONG_LEASE_MS).await.task_id,
        first,
        "the reopened item needs one more rater"
    );

    // A paused rater is refused and loses their lease; a deactivated one cannot use a session.
    store
        .update_rater(
            ed,
            &RaterUpdate {
                paused: Some(true),
                ..RaterUpdate::default()
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        store.next_annotation_task(ed, LONG_LEASE_MS).await,
        Err(StoreError::Conflict(message)) if message.contains("paused")
    ));
    assert_eq!(store.annotation_queue_counts().await.unwrap().leased, 0);
    store
        .update_rater(
            ed,
            &RaterUpdate {
                active: Some(false),
                ..RaterUpdate::default()
            },
        )
        .await
        .unwrap();
    assert!(!store.get_user(ed).await.unwrap().unwrap().active);
    assert!(matches!(
        store
            .update_rater(
                UserId(9_999),
                &RaterUpdate {
                    paused: Some(true),
                    ..RaterUpdate::default()
                }
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
    let pool = store.raters().await.unwrap();
    let ed_record = pool.iter().find(|record| record.username == "ed").unwrap();
    assert!(ed_record.paused && !ed_record.active);
    let ann_record = pool.iter().find(|record| record.username == "ann").unwrap();
    assert_eq!(ann_record.labels[0].review.as_deref(), Some("corrected"));
}

/// Twelve raters claiming and labelling at once, some letting leases lapse: every item ends
/// with exactly its three labels from three distinct raters.
async fn concurrent_raters_fill_each_item_exactly_to_its_overlap(store: Arc<dyn Store>) {
    let dataset: String = (0..20)
        .map(|i| {
            format!("{{\"id\": \"q{i}\", \"input\": \"question {i}\", \"target\": \"{i}\"}}\n")
        })
        .collect();
    let run_id = launch_one_run(&*store, dataset.as_bytes(), 1).await;
    let ids = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    escalate_to_humans(&*store, &ids, 3).await;
    let mut raters = Vec::new();
    for index in 0..12 {
        let name = format!("rater{index}");
        raters.push(
            store
                .create_user(&name, &stand_in_hash(&name), Role::Annotator)
                .await
                .unwrap(),
        );
    }
    let mut handles = Vec::new();
    for (index, rater) in raters.into_iter().enumerate() {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut round = 0;
            loop {
                round += 1;
                // Every third rater lets its first lease lapse before going on.
                let lease_ms = if index % 3 == 0 && round == 1 {
                    1
                } else {
                    LONG_LEASE_MS
                };
                let task = match store.next_annotation_task(rater, lease_ms).await {
                    Ok(Some(task)) => task,
                    Ok(None) => break,
                    Err(other) => panic!("{other}"),
                };
                if lease_ms == 1 {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                match store
                    .submit_label(&task.handle, rater, index % 2 == 0, "")
                    .await
                {
                    Ok(_) | Err(StoreError::Conflict(_)) => {}
                    Err(other) => panic!("{other}"),
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let labels = store.run_labels(run_id).await.unwrap();
    let mut per_task: HashMap<TaskId, HashSet<UserId>> = HashMap::new();
    for label in &labels {
        assert!(
            per_task
                .entry(label.task_id)
                .or_default()
                .insert(label.rater_id),
            "a rater labelled an item twice"
        );
    }
    assert_eq!(per_task.len(), 20);
    assert!(
        per_task.values().all(|raters| raters.len() == 3),
        "{per_task:?}"
    );
    assert_eq!(labels.len(), 60);
    let counts = store.annotation_queue_counts().await.unwrap();
    assert_eq!((counts.open, counts.leased, counts.done), (0, 0, 20));
}

/// What a copied identity must carry over from its twin: the answer, its grade and the
/// stage that decided it (attempts, latency and the cache flag are the copy's own).
fn carried_over(
    result: arbiter_domain::run::IdentityResult,
) -> (String, i64, String, String, String, String, Option<String>) {
    (
        result.case_id,
        result.repetition,
        result.output,
        result.outcome,
        result.verdict,
        result.grade_reason,
        result.decided_by,
    )
}

async fn an_unchanged_manifest_copies_a_finished_run_whose_answers_all_stand(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    // Evals of one seed send the same requests (seed 7 is the first run's).
    let define = |name: &'static str, repetitions: u32, seed: u64| async move {
        let dataset_id = store.list_datasets().await.unwrap()[0].id;
        let form = EvalForm {
            seed,
            ..eval_form(name, dataset_id, repetitions)
        };
        arbiter_engine::catalog::define_eval(store, &form, None)
            .await
            .unwrap()
    };
    let launch = |eval: EvalId| async move {
        let checkpoint = store.list_checkpoints().await.unwrap()[0].id;
        arbiter_testkit::pipeline::launched(store, eval, checkpoint).await
    };
    // Answers every queued item of the run as a worker does (entering the generation cache),
    // right or wrong in turn; the first one unreadable when asked (a person decides it).
    let answer_all = |run_id: RunId, expected: usize, first_unreadable: bool| async move {
        let mut claimed = store
            .claim_identities("w", run_id, 100, LONG_LEASE_MS, false)
            .await
            .unwrap();
        assert_eq!(claimed.len(), expected);
        claimed.sort_by_key(|job| job.identity_id);
        let finished: Vec<FinishedIdentity> = claimed
            .into_iter()
            .enumerate()
            .map(|(n, job)| {
                let answer = match n {
                    0 if first_unreadable => Reply::Unsure,
                    n if n % 3 == 0 => Reply::Wrong,
                    _ => Reply::Correct,
                };
                let output = answer.output(&job.item.target);
                let grade = grade_exact_match(&output, &job.item.target);
                FinishedIdentity {
                    identity_id: job.identity_id,
                    generation: answered(&output),
                    grading: Grading::deterministic_only(Some(grade)),
                    generation_key: job.generation_key,
                    cached_from: None,
                    next_turn_waits: false,
                }
            })
            .collect();
        store.record_results(&finished).await.unwrap();
        assert!(store.finish_run_if_done(run_id).await.unwrap());
    };
    // A new run of `source`'s manifest under another eval, copied if the store will.
    let copy_of = |source: RunId, name: &'static str| async move {
        let mut manifest = store.run_manifest(source).await.unwrap().unwrap();
        let seed = manifest.eval.generation.seed;
        manifest.eval_id = define(name, manifest.eval.repetitions, seed).await;
        manifest.eval.name = name.into();
        let run = store
            .create_run(&arbiter_store::NewRun {
                manifest: &manifest,
                priority: Priority::Scheduled,
                team: "default",
                created_by: None,
            })
            .await
            .unwrap();
        assert_eq!((run.created, run.status), (true, RunStatus::Expanding));
        let copied = store
            .reuse_finished_run(run.run_id, &manifest)
            .await
            .unwrap();
        (run.run_id, manifest, copied)
    };

    // A run one of whose answers waits for a person is not copied (a person would be asked
    // again): its relaunch under another eval is planned item by item from the cache, and
    // the unreadable answer goes to a person once more.
    let with_a_person = launch_one_run(store, FIVE_CASES.as_bytes(), 2).await;
    answer_all(with_a_person, 10, true).await;
    assert_eq!(progress(store, with_a_person).await.uncertain, 1);
    let (_, _, copied) = copy_of(with_a_person, "qa-exact copied").await;
    assert_eq!(copied, None);
    let planned = launch(define("qa-exact again", 2, 7).await).await;
    assert_eq!(planned.status, RunStatus::Completed);
    let planned_progress = progress(store, planned.run_id).await;
    assert_eq!(
        (planned_progress.from_cache, planned_progress.uncertain),
        (10, 1)
    );
    assert_eq!(store.annotation_queue_counts().await.unwrap().open, 2);

    // A run whose deterministic grader decided every answer: the unchanged manifest under
    // another eval is copied whole, inside the database, with nothing claimed or asked.
    let once = launch(define("qa-once", 1, 8).await).await;
    assert_eq!(once.status, RunStatus::Running);
    answer_all(once.run_id, 5, false).await;
    let (copy, manifest, copied) = copy_of(once.run_id, "qa-once copied").await;
    assert_eq!(copied, Some(5));
    assert!(
        store.planned_in_full(copy).await.unwrap(),
        "a copy is planned whole"
    );
    assert!(store
        .set_run_status(copy, &[RunStatus::Expanding], RunStatus::Running)
        .await
        .unwrap());
    assert!(store.finish_run_if_done(copy).await.unwrap());
    assert!(store
        .claim_identities("w", copy, 100, LONG_LEASE_MS, false)
        .await
        .unwrap()
        .is_empty());
    let source = progress(store, once.run_id).await;
    let copied = progress(store, copy).await;
    assert!(source.passed > 0 && source.failed > 0, "{source:?}");
    assert_eq!(
        (
            copied.expected,
            copied.done,
            copied.from_cache,
            copied.errors
        ),
        (5, 5, 5, 0)
    );
    assert_eq!(
        (copied.passed, copied.failed, copied.uncertain),
        (source.passed, source.failed, 0)
    );
    assert_eq!(copied.outcome_mix, source.outcome_mix);
    let results = |run_id: RunId| async move {
        let mut rows: Vec<_> = store
            .run_outcomes(run_id)
            .await
            .unwrap()
            .into_iter()
            .map(carried_over)
            .collect();
        rows.sort();
        rows
    };
    let copied_results = results(copy).await;
    assert_eq!(copied_results, results(once.run_id).await);
    // The copy's tallies count its own rows.
    let verdicts =
        |verdict: &str| copied_results.iter().filter(|row| row.4 == verdict).count() as i64;
    assert_eq!(
        (copied.passed, copied.failed),
        (verdicts("pass"), verdicts("fail"))
    );
    let copied_rows = store.run_results(copy, 100).await.unwrap();
    assert!(copied_rows
        .iter()
        .all(|row| row.from_cache && row.attempts == 0 && row.served_by.is_none()));
    let source_costs = store.run_costs(once.run_id).await.unwrap();
    let copied_costs = store.run_costs(copy).await.unwrap();
    assert_eq!(
        (
            copied_costs.generation_calls,
            copied_costs.cached_generations
        ),
        (0, 5)
    );
    assert_eq!(copied_costs.decided_by, source_costs.decided_by);
    assert_eq!(
        store.run_graders(copy).await.unwrap(),
        store.run_graders(once.run_id).await.unwrap()
    );
    // A run is copied into once: a second try finds it filled.
    assert_eq!(
        store.reuse_finished_run(copy, &manifest).await.unwrap(),
        None
    );
    // Launched through the engine, an unchanged manifest completes at launch all the same.
    let relaunched = launch(define("qa-once again", 1, 8).await).await;
    assert_eq!(relaunched.status, RunStatus::Completed);
    assert_eq!(results(relaunched.run_id).await, copied_results);

    // Answers whose texts were purged (and so left the cache) are never copied, from that
    // run or from the copies that point at them.
    store
        .purge_raw_outputs(once.run_id, now_ms(), now_ms())
        .await
        .unwrap();
    let (_, _, copied) = copy_of(once.run_id, "qa-once after the purge").await;
    assert_eq!(copied, None);
}
