//! Story tests for side-by-side preference, on both backends: a researcher sends pairs of two
//! checkpoints' answers (verdicts that differ, then a random sample of the rest), each pair's
//! sides are drawn and recorded as shown, raters racing for pairs give each exactly the labels
//! it needs, and the report reads the labels back by checkpoint; raters who split send a pair
//! to reviewers, whose corrections decide it, whose rejections reopen it and whose decisions
//! weigh each rater's later answers; a decided pair becomes gold that measures raters.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::{GoldAnswer, GOLD_RATE_SETTING};
use arbiter_domain::annotation::pool::RaterUpdate;
use arbiter_domain::annotation::preference::Preference;
use arbiter_domain::annotation::review::PairReviewDecision;
use arbiter_domain::ids::{IdentityId, RunId, UserId};
use arbiter_engine::annotation::queue::{scan_open_queue, scan_task_by_task};
use arbiter_engine::error::ServiceError;
use arbiter_engine::preferences::{preference_reports, send_pairs, PairRequestForm};
use arbiter_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    pairs_are_drawn_recorded_shared_exactly_and_reported,
    split_pairs_go_to_reviewers_and_decided_pairs_become_gold,
    pairs_compared_per_dimension_are_checked_and_reported,
);

const CASES: usize = 12;

/// One eval over `CASES` questions, run on two checkpoints: `base` answers every case right,
/// `tuned` the even ones only, so their verdicts differ on six cases.
async fn two_checkpoints(store: &dyn Store) -> (RunId, RunId) {
    let dataset: String = (0..CASES)
        .map(|i| {
            format!(
                "{{\"id\": \"q{i}\", \"input\": \"What is {i} plus 1?\", \"target\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "sums",
        "sums.jsonl",
        dataset.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("sums", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let mut runs = Vec::new();
    for name in ["base", "tuned"] {
        let checkpoint =
            arbiter_engine::catalog::register_simple_checkpoint(store, name, ENDPOINT, name, None)
                .await
                .unwrap();
        runs.push(arbiter_testkit::pipeline::launch(store, eval, checkpoint).await);
    }
    let ids: Vec<IdentityId> = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(ids.len(), 2 * CASES);
    for id in ids {
        let job = store.load_identity(id).await.unwrap();
        let case: usize = job.case_id[1..].parse().unwrap();
        let answer = if job.run_id == runs[0] || case.is_multiple_of(2) {
            Reply::Correct
        } else {
            Reply::Wrong
        };
        assert!(reply(store, id, answer).await);
    }
    (runs[0], runs[1])
}

fn form(run_a: RunId, run_b: RunId, selection: &str, pairs: &str, raters: &str) -> PairRequestForm {
    PairRequestForm {
        run_a,
        run_b,
        selection: selection.into(),
        pairs: pairs.into(),
        raters: raters.into(),
        ..PairRequestForm::default()
    }
}

async fn pairs_are_drawn_recorded_shared_exactly_and_reported(store: Arc<dyn Store>) {
    let (base, tuned) = two_checkpoints(&*store).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let researcher = store
        .create_user("rita", &stand_in_hash("rita"), Role::Researcher)
        .await
        .unwrap();
    let researcher = &store.get_user(researcher).await.unwrap().unwrap();

    // Bad requests say what is wrong and queue nothing.
    for (bad, says) in [
        (form(base, tuned, "all", "5", "1"), "`all`"),
        (form(base, tuned, "differ", "0", "1"), "from 1 to 5000"),
        (form(base, tuned, "differ", "5", "9"), "from 1 to 5"),
        (form(base, base, "differ", "5", "1"), "two different runs"),
    ] {
        match send_pairs(&*store, &bad, researcher).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(says), "{message}"),
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    assert!(matches!(
        send_pairs(
            &*store,
            &form(base, RunId(999), "random", "5", "1"),
            researcher
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(store.pair_requests(10).await.unwrap().is_empty());

    // The six cases whose verdicts differ, however many are asked for; twice the raters each.
    let differ = send_pairs(
        &*store,
        &form(base, tuned, "differ", "100", "2"),
        researcher,
    )
    .await
    .unwrap();
    assert_eq!((differ.pairs, differ.labels_needed), (6, 2));
    assert_eq!(
        (differ.checkpoint_a.as_str(), differ.checkpoint_b.as_str()),
        ("base", "tuned")
    );
    // Asked again, nothing qualifies: those cases are paired already.
    match send_pairs(
        &*store,
        &form(base, tuned, "differ", "100", "2"),
        researcher,
    )
    .await
    {
        Err(ServiceError::Conflict(message)) => {
            assert!(message.contains("paired already"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // A random sample of three of the other six, one rater each.
    let sample = send_pairs(&*store, &form(tuned, base, "random", "3", "1"), researcher)
        .await
        .unwrap();
    assert_eq!(sample.pairs, 3);
    assert_eq!(store.pair_requests(10).await.unwrap().len(), 2);
    // The pairs are in their eval's queue: the queue figures summed by slot (through the run
    // copied onto each pair) match the task-by-task scan (through the pair's items).
    let now = arbiter_store::now_ms();
    let grouped = scan_open_queue(&*store, now, 0.25).await.unwrap();
    let one_by_one = scan_task_by_task(&*store, now, 0.25).await.unwrap();
    assert_eq!(grouped.figures, one_by_one.figures);
    assert_eq!(grouped.figures.backlog_tasks, 9);
    assert_eq!(
        grouped.figures.queues_at_risk.keys().collect::<Vec<_>>(),
        ["sums"],
        "15 labels at one every 4 hours pass the pairs' 48-hour SLA"
    );

    // Six raters race for the pairs until the queue is empty.
    let mut raters: Vec<UserId> = Vec::new();
    for i in 0..6 {
        let name = format!("rater{i}");
        raters.push(
            store
                .create_user(&name, &stand_in_hash(&name), Role::Annotator)
                .await
                .unwrap(),
        );
    }
    let mut handles = Vec::new();
    for (index, &rater) in raters.iter().enumerate() {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut round = 0;
            while let Some(task) = store
                .next_annotation_task(rater, LONG_LEASE_MS)
                .await
                .unwrap()
            {
                let pair = task.pair.clone().expect("only pairs are queued");
                // Where the outputs differ, base's (always right) tells the sides apart.
                let base_left =
                    (task.output != pair.right_output).then(|| task.output.contains("Let me see"));
                // A pass or fail label is refused on a pair.
                assert!(matches!(
                    store.submit_label(&task.handle, rater, true, "").await,
                    Err(StoreError::Conflict(message)) if message.contains("pair")
                ));
                let choice = [Preference::A, Preference::B, Preference::Tie][(index + round) % 3];
                store
                    .submit_preference(&task.handle, rater, choice, None, "reasons")
                    .await
                    .unwrap();
                answered.push((task.task_id.get(), rater, base_left, choice));
                round += 1;
            }
            answered
        }));
    }
    let mut answered: Vec<(i64, UserId, Option<bool>, Preference)> = Vec::new();
    for handle in handles {
        answered.extend(handle.await.unwrap());
    }
    // Exactly the labels each pair needs, from distinct raters.
    let labels = answered.len();
    assert_eq!(labels, 6 * 2 + 3);
    // Pair answers are paid work: the pay ledger's sums per day count them.
    let today = arbiter_store::now_ms() / arbiter_domain::annotation::pay::DAY_MS;
    let pair_answers: u64 = store
        .work_days(today - 1, today + 1, 600_000, None)
        .await
        .unwrap()
        .iter()
        .filter(|day| day.kind == arbiter_domain::annotation::pay::WorkKind::Pair)
        .map(|day| day.answers)
        .sum();
    assert_eq!(pair_answers as usize, labels);
    // Each pair whose raters agree is decided once its last answer is in (one whose raters
    // split waits for a reviewer): the `label.completed` webhook's reading has both sides as
    // raters saw them and every answer.
    let mut choices: HashMap<i64, Vec<Preference>> = HashMap::new();
    for (task, _, _, choice) in &answered {
        choices.entry(*task).or_default().push(*choice);
    }
    let agreed = choices
        .values()
        .filter(|given| given.iter().all(|choice| *choice == given[0]))
        .count();
    let decided = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(decided.len(), agreed);
    for item in &decided {
        let pair = item.pair.as_ref().expect("only pairs were decided");
        assert_eq!(
            (item.kind.as_str(), item.verdict.as_deref()),
            ("pair", None)
        );
        assert_eq!(Some(pair.left.run_id), item.run_id);
        assert_ne!(pair.left.run_id, pair.right.run_id);
        let given = answered
            .iter()
            .filter(|(task, ..)| *task == item.task_id)
            .count();
        assert_eq!(item.labels.len(), given);
        assert!(item.labels.iter().all(|label| label.choice.is_some()
            && label.verdict.is_none()
            && label.rationale == "reasons"));
        assert!(item.consensus.is_some());
    }
    let mut per_pair: HashMap<i64, Vec<UserId>> = HashMap::new();
    for (task, rater, ..) in &answered {
        per_pair.entry(*task).or_default().push(*rater);
    }
    let mut sizes: Vec<usize> = per_pair.values().map(Vec::len).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [vec![1; 3], vec![2; 6]].concat());
    for raters in per_pair.values_mut() {
        raters.sort();
        raters.dedup();
    }
    assert_eq!(per_pair.values().map(Vec::len).sum::<usize>(), labels);
    let counts = store.annotation_queue_counts().await.unwrap();
    assert_eq!((counts.open, counts.done), (0, 9));

    // Every label is placed by the side its rater saw each checkpoint on.
    let rows = store.preference_rows(None).await.unwrap();
    assert_eq!(rows.len(), labels);
    let mut sides_checked = 0;
    for (task, rater, base_left, _) in &answered {
        let row = rows
            .iter()
            .find(|row| row.task_id == *task && row.rater_id == rater.get())
            .expect("every label is read back");
        assert_ne!(row.left_checkpoint, row.right_checkpoint);
        if let Some(base_left) = base_left {
            assert_eq!(row.left_checkpoint == "base", *base_left);
            sides_checked += 1;
        }
    }
    assert_eq!(sides_checked, 12);

    let reports = preference_reports(&*store, None).await.unwrap();
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(report.report.labels as usize, labels);
    assert_eq!(report.report.pairs, 9);
    let mut names = report.checkpoints.clone();
    names.sort();
    assert_eq!(names, ["base", "tuned"]);
    let rate = &report.report.win_rates[0];
    let decisive = rows
        .iter()
        .filter(|row| matches!(row.choice, Preference::A | Preference::B))
        .count() as u64;
    assert_eq!(rate.first_wins + rate.second_wins, decisive);
    assert_eq!(
        rate.ties as usize,
        rows.iter()
            .filter(|row| row.choice == Preference::Tie)
            .count()
    );
    assert_eq!(report.report.position_bias.decisive, decisive);
    let left_wins = rows
        .iter()
        .filter(|row| row.choice == Preference::A)
        .count() as u64;
    assert_eq!(report.report.position_bias.left_wins, left_wins);
    // The queue's agreement on the pairs' choices (the Queue page and its alerts) is the
    // report's.
    let by_queue = arbiter_engine::annotation::agreement::queue_agreement(&*store, 7, false)
        .await
        .unwrap();
    let (_, on_pairs) = by_queue
        .iter()
        .find(|(_, agreement)| agreement.dimension == "preference")
        .expect("the pairs' queue has a preference row");
    assert_eq!(on_pairs.labels as usize, labels);
    assert_eq!(
        on_pairs.alpha.statistic.value(),
        report.agreement.statistic.value()
    );

    // Two requests racing for the last three unpaired cases: together they pair each once
    // (on PostgreSQL the later one may find them paired at its commit and keep nothing).
    let race = |store: Arc<dyn Store>, researcher: arbiter_domain::accounts::User| async move {
        send_pairs(
            &*store,
            &form(base, tuned, "random", "100", "1"),
            &researcher,
        )
        .await
    };
    let (first, second) = tokio::join!(
        tokio::spawn(race(store.clone(), researcher.clone())),
        tokio::spawn(race(store.clone(), researcher.clone())),
    );
    let mut raced = 0;
    for outcome in [first.unwrap(), second.unwrap()] {
        match outcome {
            Ok(sent) => raced += sent.pairs,
            Err(ServiceError::Conflict(message)) => {
                assert!(message.contains("paired"), "{message}")
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(raced, 3);
    assert_eq!(store.annotation_queue_counts().await.unwrap().open, 3);
    // Pairs still waiting for raters keep both runs from retention.
    let later = arbiter_store::now_ms() + 1;
    assert!(store.run_in_use(tuned, later).await.unwrap());
    assert!(store.run_in_use(base, later).await.unwrap());

    // Deleting a run takes its pairs along, open or done, and leaves the other run's items.
    assert!(store.finish_run_if_done(tuned).await.unwrap());
    assert!(store.delete_run(tuned).await.unwrap() > 0);
    assert!(store.preference_rows(None).await.unwrap().is_empty());
    assert!(store.pair_requests(10).await.unwrap().is_empty());
    let counts = store.annotation_queue_counts().await.unwrap();
    assert_eq!((counts.open, counts.done), (0, 0));
    assert_eq!(progress(&*store, base).await.done, CASES as i64);
}

/// A rater answers every pair the queue serves them with `choice`; returns the pairs answered.
async fn answer_all(store: &dyn Store, rater: UserId, choice: Preference) -> Vec<i64> {
    let mut answered = Vec::new();
    while let Some(task) = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        assert!(
            store
                .submit_preference(&task.handle, rater, choice, None, "mine")
                .await
                .unwrap()
                .is_none(),
            "no feedback outside training"
        );
        answered.push(task.task_id.get());
    }
    answered
}

async fn user(store: &dyn Store, name: &str, role: Role) -> UserId {
    store
        .create_user(name, &stand_in_hash(name), role)
        .await
        .unwrap()
}

async fn split_pairs_go_to_reviewers_and_decided_pairs_become_gold(store: Arc<dyn Store>) {
    let (base, tuned) = two_checkpoints(&*store).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let researcher = user(&*store, "rita", Role::Researcher).await;
    let researcher = &store.get_user(researcher).await.unwrap().unwrap();
    let ann = user(&*store, "ann", Role::Annotator).await;
    let bob = user(&*store, "bob", Role::Annotator).await;
    let rev = user(&*store, "rev", Role::Reviewer).await;
    let rev2 = user(&*store, "rev2", Role::Reviewer).await;
    send_pairs(&*store, &form(base, tuned, "differ", "3", "2"), researcher)
        .await
        .unwrap();

    // Ann says A and Bob says B on each of three pairs: every pair splits, waits undecided for
    // a reviewer, and sends no `label.completed`.
    let pairs = answer_all(&*store, ann, Preference::A).await;
    assert_eq!(pairs.len(), 3);
    assert_eq!(answer_all(&*store, bob, Preference::B).await.len(), 3);
    assert_eq!(store.annotation_queue_counts().await.unwrap().done, 3);
    let undecided = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap();
    assert!(undecided.is_empty(), "{undecided:?}");

    // The reviewer is served the raters' answers one at a time, both outputs and the choice.
    let mut reviewed = 0;
    let mut rejected_label = None;
    let mut corrected_pairs = Vec::new();
    let mut disagreeing = 0;
    while let Some(item) = store.next_review(rev).await.unwrap() {
        let pair = item.pair.clone().expect("only pairs wait for review");
        disagreeing += usize::from(item.why.contains("disagree"));
        assert!(!item.output.is_empty() && !pair.right.right_output.is_empty());
        assert_ne!(item.output, pair.right.right_output);
        // Served to this reviewer alone, and decided only by them.
        assert!(matches!(
            store
                .review_preference(item.label_id, rev2, PairReviewDecision::Accept, "")
                .await,
            Err(StoreError::Conflict(message)) if message.contains("not served to you")
        ));
        let by_ann = item.rater == "ann";
        assert_eq!(
            pair.choice,
            if by_ann { Preference::A } else { Preference::B }
        );
        let decision = if !by_ann {
            PairReviewDecision::Accept
        } else if rejected_label.is_none() {
            // Ann's answer on the first pair she is reviewed on is rejected: that pair reopens.
            rejected_label = Some(item.label_id);
            PairReviewDecision::Reject
        } else {
            PairReviewDecision::Correct(Preference::B)
        };
        if matches!(decision, PairReviewDecision::Correct(_)) {
            corrected_pairs.push(item.label_id);
        }
        // Bad input names what is wrong and decides nothing.
        for (decision, choice, reason, says) in [
            ("correct", "c", "", "`c`"),
            ("reject", "", " ", "say why"),
            ("maybe", "", "", "`maybe`"),
        ] {
            match arbiter_engine::annotation::review::review_preference(
                &*store,
                item.label_id,
                rev,
                decision,
                choice,
                reason,
            )
            .await
            {
                Err(ServiceError::Invalid(message)) => {
                    assert!(message.contains(says), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        arbiter_engine::annotation::review::review_preference(
            &*store,
            item.label_id,
            rev,
            match decision {
                PairReviewDecision::Accept => "accept",
                PairReviewDecision::Correct(_) => "correct",
                PairReviewDecision::Reject => "reject",
            },
            decision.correction().map_or("", Preference::as_str),
            "B answers the question",
        )
        .await
        .unwrap();
        // Decided once: a second decision on the same answer is refused.
        assert!(matches!(
            store
                .review_preference(item.label_id, rev, PairReviewDecision::Accept, "")
                .await,
            Err(StoreError::Conflict(message)) if message.contains("reviewed already")
        ));
        reviewed += 1;
    }
    assert_eq!(reviewed, 6, "both answers of each split pair");
    assert_eq!(
        disagreeing, 5,
        "all but Bob's answer on the pair whose other answer was rejected"
    );
    assert_eq!(corrected_pairs.len(), 2);

    // Ann reads why on her page: two choices corrected to B and one rejected, with the reason.
    let feedback = store.own_labels(ann, 50).await.unwrap();
    let outcomes: Vec<(Option<Preference>, String)> = feedback
        .iter()
        .filter_map(|label| {
            assert_eq!(label.pair.as_ref().unwrap().choice, Preference::A);
            assert!(label.editable.is_err());
            let review = label.review.as_ref()?;
            assert_eq!(review.reason, "B answers the question");
            Some((review.corrected_choice, review.decision.clone()))
        })
        .collect();
    assert_eq!(outcomes.len(), 3);
    assert_eq!(
        outcomes
            .iter()
            .filter(|(choice, decision)| *choice == Some(Preference::B) && decision == "corrected")
            .count(),
        2
    );

    // The two corrected pairs are decided B (the webhook sends each once); the rejected one is
    // open again with Bob's answer standing, and Ann's no longer counts.
    let decided = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(decided.len(), 2);
    for item in &decided {
        let consensus = item
            .consensus
            .as_ref()
            .expect("a decided pair has its choice");
        assert_eq!(consensus["choice"], "b", "{consensus}");
    }
    assert_eq!(store.annotation_queue_counts().await.unwrap().open, 1);
    assert_eq!(store.preference_rows(None).await.unwrap().len(), 5);
    // Ann may not answer the pair again (she answered it); Cy fills its slot, agreeing with
    // Bob, and the pair is decided without another review.
    assert!(answer_all(&*store, ann, Preference::A).await.is_empty());
    let cy = user(&*store, "cy", Role::Annotator).await;
    assert_eq!(answer_all(&*store, cy, Preference::B).await.len(), 1);
    assert_eq!(
        store
            .decided_items((0, i64::MAX), i64::MAX, 100)
            .await
            .unwrap()
            .len(),
        3
    );

    // Reviews weigh later answers: Ann was corrected twice and rejected once, Bob accepted
    // three times, so where they split now Bob's answer decides at once.
    send_pairs(&*store, &form(base, tuned, "random", "1", "2"), researcher)
        .await
        .unwrap();
    assert_eq!(answer_all(&*store, ann, Preference::A).await.len(), 1);
    assert_eq!(answer_all(&*store, bob, Preference::B).await.len(), 1);
    let decided = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(decided.len(), 4);
    assert_eq!(
        decided.last().unwrap().consensus.as_ref().unwrap()["choice"],
        "b"
    );

    // A split that a reviewer settles by taking one side: Dee (A) and Eve (B) have no record
    // yet, so their pair splits; "correcting" Dee's answer to its own choice decides the pair
    // A (and counts as right on Dee's record), and accepting Eve's afterwards leaves it be.
    let dee = user(&*store, "dee", Role::Annotator).await;
    let eve = user(&*store, "eve", Role::Annotator).await;
    send_pairs(&*store, &form(base, tuned, "random", "1", "2"), researcher)
        .await
        .unwrap();
    assert_eq!(answer_all(&*store, dee, Preference::A).await.len(), 1);
    assert_eq!(answer_all(&*store, eve, Preference::B).await.len(), 1);
    let decided_before = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap()
        .len();
    let mut settled = 0;
    while let Some(item) = store.next_review(rev2).await.unwrap() {
        let own = item.pair.as_ref().unwrap().choice;
        let (decision, choice) = if item.rater == "dee" {
            ("correct", own.as_str())
        } else {
            ("accept", "")
        };
        arbiter_engine::annotation::review::review_preference(
            &*store,
            item.label_id,
            rev2,
            decision,
            choice,
            "",
        )
        .await
        .unwrap();
        settled += 1;
    }
    assert_eq!(settled, 2);
    // A correction to Dee's own choice is no correction of her: her page lists none.
    assert!(store.own_labels(dee, 10).await.unwrap().is_empty());
    let decided = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(decided.len(), decided_before + 1);
    assert_eq!(
        decided.last().unwrap().consensus.as_ref().unwrap()["choice"],
        "a"
    );

    // A pair a reviewer decided is a gold candidate with its decided choice; its gold answer
    // is a choice, not a verdict.
    let candidates = store.gold_candidates(20).await.unwrap();
    let corrected = candidates
        .iter()
        .find(|candidate| {
            candidate.why.contains("reviewer")
                && candidate.answer == GoldAnswer::Pair(Preference::B)
        })
        .expect("a corrected pair is a candidate");
    assert_eq!(corrected.answer, GoldAnswer::Pair(Preference::B));
    let gold_task = corrected.task_id;
    let lead = user(&*store, "lead", Role::Lead).await;
    match arbiter_engine::annotation::quality::create_gold(&*store, lead, gold_task, "pass", "")
        .await
    {
        Err(ServiceError::Conflict(message)) => assert!(message.contains("a, b, tie"), "{message}"),
        other => panic!("{other:?}"),
    }
    let gold = arbiter_engine::annotation::quality::create_gold(
        &*store,
        lead,
        gold_task,
        "b",
        "B shows its working",
    )
    .await
    .unwrap();

    // Served as gold, the pair looks like any pair; a trainee learns the right choice, and
    // the answer measures them without counting as a preference.
    store.set_setting(GOLD_RATE_SETTING, "1").await.unwrap();
    let tim = user(&*store, "tim", Role::Annotator).await;
    store
        .update_rater(
            tim,
            &RaterUpdate {
                training: Some(true),
                ..RaterUpdate::default()
            },
        )
        .await
        .unwrap();
    let served = store
        .next_annotation_task(tim, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("the gold pair is served");
    assert_eq!(served.task_id, gold_task);
    assert!(served.pair.is_some() && served.training);
    let feedback = store
        .submit_preference(&served.handle, tim, Preference::A, None, "")
        .await
        .unwrap()
        .expect("training answers get feedback");
    assert!(!feedback.correct);
    assert_eq!(feedback.answer, GoldAnswer::Pair(Preference::B));
    assert_eq!(feedback.note, "B shows its working");
    assert_eq!(store.preference_rows(None).await.unwrap().len(), 10);
    let listed = store.gold_items().await.unwrap();
    let listed = listed.iter().find(|item| item.id == gold).unwrap();
    assert_eq!((listed.answers, listed.right), (1, 0));
    assert_eq!(listed.answer, GoldAnswer::Pair(Preference::B));
    // Brought back with another answer, the pair's answers are scored against it.
    store.retire_gold(gold).await.unwrap();
    store
        .create_gold(gold_task, GoldAnswer::Pair(Preference::A), "", lead)
        .await
        .unwrap();
    let listed = store.gold_items().await.unwrap();
    let listed = listed.iter().find(|item| item.id == gold).unwrap();
    assert_eq!((listed.answers, listed.right), (1, 1));

    // Deleting a run takes its pairs' reviews and gold along.
    assert!(store.finish_run_if_done(tuned).await.unwrap());
    assert!(store.delete_run(tuned).await.unwrap() > 0);
    assert!(store.gold_items().await.unwrap().is_empty());
    assert!(store.next_review(rev).await.unwrap().is_none());
}

async fn pairs_compared_per_dimension_are_checked_and_reported(store: Arc<dyn Store>) {
    let (base, tuned) = two_checkpoints(&*store).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let researcher = user(&*store, "rita", Role::Researcher).await;
    let researcher = &store.get_user(researcher).await.unwrap().unwrap();
    arbiter_engine::rubrics::create_rubric(
        &*store,
        "aspects",
        r#"{"dimensions": [
            {"key": "helpful", "question": "Which is more helpful?", "kind": "binary"},
            {"key": "safe", "question": "Which is safer?", "kind": "binary"}]}"#,
        "",
        None,
    )
    .await
    .unwrap();
    let per_dimension = |rubric: &str| PairRequestForm {
        rubric: rubric.into(),
        ..form(base, tuned, "differ", "4", "1")
    };
    match send_pairs(&*store, &per_dimension("nope"), researcher).await {
        Err(ServiceError::Invalid(message)) => assert!(message.contains("`nope`"), "{message}"),
        other => panic!("{other:?}"),
    }
    let sent = send_pairs(&*store, &per_dimension("aspects"), researcher)
        .await
        .unwrap();
    assert_eq!(sent.rubric.as_deref(), Some("aspects@1"));

    // The rater is asked the rubric beside the pair, and answers every dimension and overall:
    // base (always right) is more helpful and as safe, so better overall.
    let ann = user(&*store, "ann", Role::Annotator).await;
    let submit = |handle, choice: &'static str, dimensions: String| {
        let store = store.clone();
        async move {
            arbiter_engine::preferences::submit_preference(
                &*store,
                &handle,
                ann,
                choice,
                &dimensions,
                "",
            )
            .await
        }
    };
    let mut answered = 0;
    while let Some(task) = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        let pair = task.pair.as_ref().expect("a pair");
        let asked = task.rubric.as_ref().expect("the pair asks the rubric");
        assert_eq!(asked.version.name, "aspects");
        let base_side = if task.output.contains("Let me see") {
            "a"
        } else {
            assert!(pair.right_output.contains("Let me see"));
            "b"
        };
        for (dimensions, says) in [
            (String::new(), "JSON object"),
            (r#"{"helpful": "a"}"#.to_string(), "`safe`"),
            (
                r#"{"helpful": "a", "safe": "tie", "tone": "b"}"#.to_string(),
                "no dimension `tone`",
            ),
            (
                r#"{"helpful": "c", "safe": "tie"}"#.to_string(),
                "unknown variant",
            ),
        ] {
            match submit(task.handle.clone(), base_side, dimensions).await {
                Err(ServiceError::Invalid(message)) => {
                    assert!(message.contains(says), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
        // Nor does the store take one choice for a pair asked per dimension.
        assert!(matches!(
            store
                .submit_preference(&task.handle, ann, Preference::A, None, "")
                .await,
            Err(StoreError::Conflict(message)) if message.contains("each dimension")
        ));
        submit(
            task.handle.clone(),
            base_side,
            format!(r#"{{"helpful": "{base_side}", "safe": "tie"}}"#),
        )
        .await
        .unwrap();
        answered += 1;
    }
    assert_eq!(answered, 4);

    // The report rates the checkpoints overall and on each dimension.
    let reports = preference_reports(&*store, None).await.unwrap();
    let report = &reports[0];
    let base_index = report
        .checkpoints
        .iter()
        .position(|name| name == "base")
        .unwrap();
    assert_eq!(
        report.report.ratings[0].contestant, base_index,
        "base is best overall"
    );
    let keys: Vec<&str> = report.dimensions.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(keys, ["helpful", "safe"]);
    let helpful = &report.dimensions[0].report;
    assert_eq!(helpful.labels, 4);
    assert_eq!(helpful.ratings[0].contestant, base_index);
    assert!(helpful.ratings[0].rating > helpful.ratings[1].rating);
    let safe = &report.dimensions[1].report;
    assert_eq!(safe.win_rates[0].ties, 4);
    assert!((safe.ratings[0].rating - safe.ratings[1].rating).abs() < 1e-6);

    // The `label.completed` reading carries each answer's choices per dimension.
    let decided = store
        .decided_items((0, i64::MAX), i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(decided.len(), 4);
    let answers = decided[0].labels[0]
        .answers
        .as_ref()
        .expect("per dimension");
    assert_eq!(answers["safe"], "tie");
    assert_eq!(decided[0].rubric.as_deref(), Some("aspects"));

    // A pair asked one choice takes no choices per dimension.
    send_pairs(&*store, &form(base, tuned, "random", "1", "1"), researcher)
        .await
        .unwrap();
    let task = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
        .unwrap();
    assert!(task.rubric.is_none());
    match submit(task.handle.clone(), "a", r#"{"helpful": "a"}"#.into()).await {
        Err(ServiceError::Invalid(message)) => assert!(message.contains("one choice"), "{message}"),
        other => panic!("{other:?}"),
    }
    submit(task.handle.clone(), "a", String::new())
        .await
        .unwrap();
}
