//! Story tests for quality control and the lead's watch over the human queue, on both
//! backends: gold items and training, spot checks of reviewers' decisions, the queue monitor's
//! SLA escalation, alerts and email, and invitations and settings that refuse bad input.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::{GoldAnswer, GOLD_RATE_SETTING, REVIEW_CHECK_RATE_SETTING};
use arbiter_domain::annotation::pool::RaterUpdate;
use arbiter_domain::annotation::review::ReviewDecision;
use arbiter_domain::health::ALERT_LOW_AGREEMENT;
use arbiter_domain::health::ALERT_SLA_AT_RISK;
use arbiter_domain::ids::{RunId, TaskId, UserId};
use arbiter_engine::annotation::queue::queue_report;
use arbiter_engine::annotation::raters::{Invitation, RaterForm};
use arbiter_engine::clients::mail::Mailer;
use arbiter_engine::error::ServiceError;
use arbiter_engine::jobs::queue_monitor::monitor_once;
use arbiter_store::{now_ms, Store, StoreError};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    gold_items_measure_raters_and_train_new_ones,
    reviewers_decisions_are_spot_checked,
    the_monitor_escalates_at_risk_tasks_and_alerts_leads,
    invitations_and_settings_refuse_bad_input,
);

/// Launches the 60-case sample and sends every item to `raters` human raters.
async fn sixty_human_items(store: &dyn Store, raters: i64) -> RunId {
    let run_id = launch_one_run(store, SAMPLE, 1).await;
    let ids = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    assert_eq!(ids.len(), 60);
    escalate_to_humans(store, &ids, raters).await;
    run_id
}

async fn claim(
    store: &dyn Store,
    rater: UserId,
) -> arbiter_domain::annotation::task::AnnotationTask {
    store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("an item is offered")
}

fn rater<'a>(
    records: &'a [arbiter_domain::annotation::pool::RaterRecord],
    name: &str,
) -> &'a arbiter_domain::annotation::pool::RaterRecord {
    records
        .iter()
        .find(|record| record.username == name)
        .unwrap()
}

async fn gold_items_measure_raters_and_train_new_ones(store: Arc<dyn Store>) {
    let store = &*store;
    sixty_human_items(store, 1).await;
    let lead = new_user(store, "lead", Role::Lead).await;
    let ann = new_user(store, "ann", Role::Annotator).await;
    let trainee = new_user(store, "tim", Role::Annotator).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();

    // Ann labels the head of the queue; a lead makes eleven items gold, that one included.
    let first = claim(store, ann).await;
    assert_eq!(
        store
            .submit_label(&first.handle, ann, true, "")
            .await
            .unwrap(),
        None
    );
    let first = first.task_id;
    let mut gold_tasks = vec![first];
    gold_tasks.extend((1..=10).map(|offset| TaskId(first.get() + offset)));
    for &task_id in &gold_tasks {
        arbiter_engine::annotation::quality::create_gold(
            store,
            lead,
            task_id,
            "pass",
            "the reference says so",
        )
        .await
        .unwrap();
    }
    assert!(matches!(
        store
            .create_gold(first, GoldAnswer::Verdict(true), "", lead)
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store
            .create_gold(TaskId(999_999), GoldAnswer::Verdict(true), "", lead)
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        arbiter_engine::annotation::quality::create_gold(
            store,
            lead,
            TaskId(first.get() + 20),
            "maybe",
            ""
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));
    assert_eq!(store.gold_items().await.unwrap().len(), 11);

    // Tim goes to training: only gold items, each answer told right or wrong at once.
    store
        .update_rater(
            trainee,
            &RaterUpdate {
                training: Some(true),
                ..RaterUpdate::default()
            },
        )
        .await
        .unwrap();
    let counts_before = store.annotation_queue_counts().await.unwrap();
    let mut served = Vec::new();
    for answer in 0..11 {
        let task = claim(store, trainee).await;
        assert!(task.training, "a trainee is told they are in training");
        assert!(
            gold_tasks.contains(&task.task_id),
            "trainees get gold items only"
        );
        served.push(task.task_id);
        // Four wrong, then right: after ten answers 6 of 10 are right (not enough at the
        // default threshold of 70%); the eleventh makes the latest ten 7 right.
        let pass = answer >= 4;
        let feedback = store
            .submit_label(&task.handle, trainee, pass, "")
            .await
            .unwrap()
            .expect("training answers get feedback");
        assert_eq!(feedback.correct, pass);
        assert_eq!(feedback.answer, GoldAnswer::Verdict(true));
        assert_eq!(feedback.note, "the reference says so");
        assert_eq!(feedback.graduated, answer == 10, "answer {answer}");
        if answer == 9 {
            assert_eq!((feedback.answered, feedback.latest_right), (10, 6));
        }
    }
    served.sort_unstable();
    served.dedup();
    assert_eq!(served.len(), 11, "each gold item once per rater");
    assert_eq!(
        store.annotation_queue_counts().await.unwrap(),
        counts_before,
        "gold answers are not labels: the queue is as it was"
    );
    // Graduated: real items now, and nothing says they are in training.
    let real = claim(store, trainee).await;
    assert!(!real.training);
    store.skip_task(&real.handle, trainee).await.unwrap();
    let records = store.raters().await.unwrap();
    let tim = rater(&records, "tim");
    assert_eq!((tim.gold_right, tim.gold_answered), (7, 11));
    assert_eq!(tim.training_since, None);

    // Outside training, gold comes at the gold rate and looks like any other item.
    store.set_setting(GOLD_RATE_SETTING, "1").await.unwrap();
    let open_before = store.annotation_queue_counts().await.unwrap().open;
    let served = claim(store, ann).await;
    assert!(!served.training);
    assert!(gold_tasks.contains(&served.task_id) && served.task_id != first);
    assert_eq!(
        store.annotation_queue_counts().await.unwrap().open,
        open_before,
        "a gold lease takes no slot of the item's overlap"
    );
    // A skipped gold item is a skip like any other: it never comes back.
    let skipped = served.task_id;
    store.skip_task(&served.handle, ann).await.unwrap();
    let served = claim(store, ann).await;
    assert_ne!(served.task_id, skipped);
    let answered = served.task_id;
    assert_eq!(
        store
            .submit_label(&served.handle, ann, false, "")
            .await
            .unwrap(),
        None,
        "no feedback outside training: gold stays indistinguishable"
    );
    let records = store.raters().await.unwrap();
    assert_eq!(
        (
            rater(&records, "ann").gold_right,
            rater(&records, "ann").gold_answered
        ),
        (0, 1)
    );

    // A gold item brought back with the other answer re-scores the answers it had: Ann's fail
    // on it is right now.
    let answered_gold = store
        .gold_items()
        .await
        .unwrap()
        .into_iter()
        .find(|gold| gold.task_id == answered)
        .unwrap()
        .id;
    store.retire_gold(answered_gold).await.unwrap();
    arbiter_engine::annotation::quality::create_gold(store, lead, answered, "fail", "re-checked")
        .await
        .unwrap();
    let records = store.raters().await.unwrap();
    assert_eq!(
        (
            rater(&records, "ann").gold_right,
            rater(&records, "ann").gold_answered
        ),
        (1, 1)
    );

    // Retiring a gold item stops it and releases leases on it.
    let served = claim(store, ann).await;
    let gold_id = store
        .gold_items()
        .await
        .unwrap()
        .into_iter()
        .find(|gold| gold.task_id == served.task_id)
        .expect("ann holds a gold item")
        .id;
    store.retire_gold(gold_id).await.unwrap();
    assert!(matches!(
        store.submit_label(&served.handle, ann, true, "").await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.retire_gold(gold_id).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.retire_gold(999_999).await,
        Err(StoreError::NotFound(_))
    ));
    let gold = store.gold_items().await.unwrap();
    assert!(
        gold.last().unwrap().retired_at.is_some(),
        "retired items are listed last"
    );
}

async fn reviewers_decisions_are_spot_checked(store: Arc<dyn Store>) {
    let store = &*store;
    let run_id = launch_one_run(store, THREE_CASES.as_bytes(), 1).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_to_humans(store, &ids, 2).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    store
        .set_setting(REVIEW_CHECK_RATE_SETTING, "1")
        .await
        .unwrap();
    let ann = new_user(store, "ann", Role::Annotator).await;
    let ben = new_user(store, "ben", Role::Annotator).await;
    let rev = new_user(store, "rev", Role::Reviewer).await;
    let lead = new_user(store, "lead", Role::Lead).await;

    // Ann and Ben split: both labels go to a reviewer.
    let (for_ann, for_ben) = (claim(store, ann).await, claim(store, ben).await);
    assert_eq!(for_ben.task_id, for_ann.task_id);
    assert_ne!(
        for_ben.handle, for_ann.handle,
        "each claim has its own handle"
    );
    store
        .submit_label(&for_ann.handle, ann, true, "")
        .await
        .unwrap();
    assert!(
        matches!(
            store.submit_label(&for_ann.handle, ben, false, "").await,
            Err(StoreError::Conflict(_))
        ),
        "a handle is good only for the rater it was served to"
    );
    store
        .submit_label(&for_ben.handle, ben, false, "")
        .await
        .unwrap();
    let first = store
        .next_review(rev)
        .await
        .unwrap()
        .expect("a label to review");
    assert!(first.check.is_none());
    // A pass/fail label comes with no rubric, and answers cannot correct it.
    assert!(first.rubric.is_none());
    match arbiter_engine::annotation::review::review(
        store,
        first.label_id,
        rev,
        "correct",
        "",
        r#"{"correct": false}"#,
        "",
    )
    .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("pass or fail, not a rubric"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    store
        .review_label(
            first.label_id,
            rev,
            ReviewDecision::Correct { pass: false },
            "wrong number",
        )
        .await
        .unwrap();
    assert_eq!(
        progress(store, run_id).await.failed,
        1,
        "the correction decides the item"
    );
    let second = store
        .next_review(rev)
        .await
        .unwrap()
        .expect("the other label");
    store
        .review_label(second.label_id, rev, ReviewDecision::Accept, "")
        .await
        .unwrap();
    assert_eq!(
        store.next_review(rev).await.unwrap(),
        None,
        "no one spot-checks their own decisions"
    );

    // The lead gets both decisions to check, oldest first.
    let check = store
        .next_review(lead)
        .await
        .unwrap()
        .expect("a decision to check");
    let spot = check.check.clone().expect("a spot check");
    assert_eq!(
        (spot.reviewer.as_str(), spot.decision.as_str()),
        ("rev", "corrected")
    );
    assert_eq!(spot.corrected_to, Some(false));
    assert!(matches!(
        store.check_review(spot.review_id, rev, None, "").await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        arbiter_engine::annotation::review::check_review(
            store,
            spot.review_id,
            lead,
            "overturn",
            "maybe",
            ""
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));
    assert!(matches!(
        arbiter_engine::annotation::review::check_review(
            store,
            spot.review_id,
            lead,
            "shrug",
            "",
            ""
        )
        .await,
        Err(ServiceError::Invalid(_))
    ));
    // Overturned: the checker's verdict decides the item.
    arbiter_engine::annotation::review::check_review(
        store,
        spot.review_id,
        lead,
        "overturn",
        "pass",
        "42 is right",
    )
    .await
    .unwrap();
    let after = progress(store, run_id).await;
    assert_eq!((after.passed, after.failed), (1, 0));
    assert!(matches!(
        store.check_review(spot.review_id, lead, None, "").await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.check_review(999_999, lead, None, "").await,
        Err(StoreError::NotFound(_))
    ));
    let other = store
        .next_review(lead)
        .await
        .unwrap()
        .unwrap()
        .check
        .unwrap();
    assert_eq!(other.decision, "accepted");
    arbiter_engine::annotation::review::check_review(
        store,
        other.review_id,
        lead,
        "uphold",
        "",
        "",
    )
    .await
    .unwrap();
    assert_eq!(store.next_review(lead).await.unwrap(), None);
    let records = store.raters().await.unwrap();
    let reviewer = rater(&records, "rev");
    assert_eq!((reviewer.reviews_upheld, reviewer.reviews_checked), (1, 2));
}

async fn the_monitor_escalates_at_risk_tasks_and_alerts_leads(store: Arc<dyn Store>) {
    let store = &*store;
    sixty_human_items(store, 2).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let lead = new_user(store, "lead", Role::Lead).await;
    let ann = new_user(store, "ann", Role::Annotator).await;
    let ben = new_user(store, "ben", Role::Annotator).await;
    let rev = new_user(store, "rev", Role::Reviewer).await;
    for (id, hours) in [(ann, 10.0), (ben, 10.0)] {
        let update = RaterUpdate {
            weekly_capacity_hours: Some(hours),
            ..RaterUpdate::default()
        };
        store.update_rater(id, &update).await.unwrap();
    }
    let update = RaterUpdate {
        email: Some(Some("lead@arbiter.test".into())),
        ..RaterUpdate::default()
    };
    store.update_rater(lead, &update).await.unwrap();
    let outbox = tempfile::tempdir().unwrap();
    let mailer = Mailer::from_config(
        &format!("file:{}", outbox.path().display()),
        "arbiter@arbiter.test",
    )
    .unwrap();
    let sent = || std::fs::read_dir(outbox.path()).unwrap().count();

    // One label in the last hour: 119 labels to go at one an hour misses a 48-hour SLA.
    let claimed = claim(store, ann).await;
    let task = claimed.task_id;
    store
        .submit_label(&claimed.handle, ann, true, "")
        .await
        .unwrap();
    let report = queue_report(store, now_ms(), false).await.unwrap();
    assert_eq!((report.backlog_tasks, report.backlog_labels), (60, 119));
    assert_eq!(report.ages.iter().map(|(_, count)| count).sum::<u64>(), 60);
    assert_eq!(report.forecast_hours, Some(119.0));
    assert!(report.at_risk > 0 && report.breached == 0);
    assert_eq!(report.availability.capacity_hours_per_week, 20.0);
    let round = monitor_once(store, &mailer, now_ms()).await.unwrap();
    assert_eq!(round.escalated, report.at_risk);
    assert_eq!((round.alerts_raised, round.emails_sent), (1, 1));
    assert_eq!(sent(), 1);
    let mail = std::fs::read_to_string(
        std::fs::read_dir(outbox.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(
        mail.contains("lead@arbiter.test") && mail.contains("SLA at risk"),
        "{mail}"
    );
    let alerts = store.alerts(10).await.unwrap();
    assert_eq!(alerts.len(), 1);
    assert_eq!(
        (alerts[0].kind.as_str(), alerts[0].subject.as_str()),
        (ALERT_SLA_AT_RISK, "qa-exact")
    );
    // Escalated tasks lead the queue, and a senior rater is served one first.
    let escalated = report.to_escalate.clone();
    let senior_task = claim(store, rev).await;
    assert!(escalated.contains(&senior_task.task_id));
    store.skip_task(&senior_task.handle, rev).await.unwrap();
    // Escalated tasks jump the queue, so tasks behind them may now be forecast late and are
    // escalated in turn; no task twice, so the rounds settle. The open alert is updated, not
    // raised or mailed again.
    let mut rounds = 0;
    loop {
        let again = monitor_once(store, &mailer, now_ms()).await.unwrap();
        assert_eq!((again.alerts_raised, again.emails_sent), (0, 0));
        rounds += 1;
        if again.escalated == 0 {
            break;
        }
        assert!(rounds < 10, "escalation settles");
    }
    let settled = queue_report(store, now_ms(), false).await.unwrap();
    assert!(settled.to_escalate.is_empty());
    assert_eq!(sent(), 1);

    // Ann and Ben label 24 shared items and agree on half: agreement is low. The velocity
    // rises, so the SLA alert resolves itself.
    let for_ben = claim(store, ben).await;
    assert_eq!(for_ben.task_id, task);
    store
        .submit_label(&for_ben.handle, ben, true, "")
        .await
        .unwrap();
    for index in 0..24 {
        let (for_ann, for_ben) = (claim(store, ann).await, claim(store, ben).await);
        assert_eq!(
            for_ben.task_id, for_ann.task_id,
            "overlap 2: ben shares ann's item"
        );
        store
            .submit_label(&for_ann.handle, ann, true, "")
            .await
            .unwrap();
        store
            .submit_label(&for_ben.handle, ben, index % 2 == 0, "")
            .await
            .unwrap();
    }
    let round = monitor_once(store, &mailer, now_ms()).await.unwrap();
    assert!(round.alerts_resolved >= 1, "{round:?}");
    let alerts = store.alerts(10).await.unwrap();
    let open: Vec<_> = alerts
        .iter()
        .filter(|alert| alert.resolved_at.is_none())
        .collect();
    assert_eq!(open.len(), 1, "{alerts:?}");
    assert_eq!(open[0].kind, ALERT_LOW_AGREEMENT);
    assert!(
        open[0].message.contains("ann and ben"),
        "{}",
        open[0].message
    );
    assert!(
        open[0].message.contains("(pass/fail verdicts)"),
        "{}",
        open[0].message
    );
    assert!(open[0].emailed_at.is_some());
    assert_eq!(sent(), 2);
    let report = queue_report(store, now_ms(), false).await.unwrap();
    assert_eq!(
        report.attainment_7d,
        Some(1.0),
        "25 items finished, all on time"
    );
    assert_eq!(
        report.sla_days.iter().map(|day| day.completed).sum::<u64>(),
        25
    );
}

async fn invitations_and_settings_refuse_bad_input(store: Arc<dyn Store>) {
    let store = &*store;
    let lead = new_user(store, "lead", Role::Lead).await;
    let outbox = tempfile::tempdir().unwrap();
    let mailer = Mailer::from_config(
        &format!("file:{}", outbox.path().display()),
        "arbiter@arbiter.test",
    )
    .unwrap();
    let invitation = Invitation {
        username: "nina".into(),
        role: "reviewer".into(),
        email: "nina@arbiter.test".into(),
        skills: "Math, code".into(),
        weekly_capacity_hours: "12".into(),
        training: true,
    };
    for (change, why) in [
        (
            Invitation {
                email: "nina at home".into(),
                ..invitation.clone()
            },
            "bad email",
        ),
        (
            Invitation {
                role: "admin".into(),
                ..invitation.clone()
            },
            "admin",
        ),
        (
            Invitation {
                role: "boss".into(),
                ..invitation.clone()
            },
            "unknown role",
        ),
        (
            Invitation {
                skills: "c++".into(),
                ..invitation.clone()
            },
            "bad skill",
        ),
        (
            Invitation {
                weekly_capacity_hours: "200".into(),
                ..invitation.clone()
            },
            "hours",
        ),
        (
            Invitation {
                username: "".into(),
                ..invitation.clone()
            },
            "no name",
        ),
    ] {
        assert!(
            matches!(
                arbiter_engine::annotation::raters::invite_rater(store, &mailer, &change).await,
                Err(ServiceError::Invalid(_))
            ),
            "{why}"
        );
    }
    assert!(
        store.find_user_credentials("nina").await.unwrap().is_none(),
        "nothing stored"
    );
    let invited = arbiter_engine::annotation::raters::invite_rater(store, &mailer, &invitation)
        .await
        .unwrap();
    assert!(
        invited.emailed.contains("nina@arbiter.test"),
        "{}",
        invited.emailed
    );
    let credentials = store.find_user_credentials("nina").await.unwrap().unwrap();
    assert_eq!(credentials.user.role, Role::Reviewer);
    assert!(arbiter_engine::accounts::passwords::verify_password(
        Some(&credentials.password_hash),
        &invited.password
    ));
    let mail_files: Vec<_> = std::fs::read_dir(outbox.path()).unwrap().collect();
    assert_eq!(mail_files.len(), 1);
    let records = store.raters().await.unwrap();
    let nina = rater(&records, "nina");
    assert_eq!(nina.skills, vec!["math".to_string(), "code".to_string()]);
    assert_eq!(nina.weekly_capacity_hours, 12.0);
    assert_eq!(nina.email.as_deref(), Some("nina@arbiter.test"));
    assert!(nina.training_since.is_some());
    assert!(matches!(
        arbiter_engine::annotation::raters::invite_rater(store, &mailer, &invitation).await,
        Err(ServiceError::Conflict(_))
    ));

    // Roles, email and training from the pool page.
    let form = |action: &str, role: Option<&str>, email: Option<&str>| RaterForm {
        action: action.into(),
        role: role.map(str::to_string),
        email: email.map(str::to_string),
        ..RaterForm::default()
    };
    let nina_id = credentials.user.id;
    // The pool row always sends the role shown: the lead's own row saves when it is unchanged.
    arbiter_engine::annotation::raters::update_rater(
        store,
        lead,
        lead,
        &form("", Some("lead"), Some("lead@arbiter.test")),
    )
    .await
    .unwrap();
    for (form, why) in [(form("", Some("lead"), None), "own role")] {
        assert!(
            matches!(
                arbiter_engine::annotation::raters::update_rater(store, lead, lead, &form).await,
                Err(ServiceError::Invalid(_))
            ),
            "{why}"
        );
    }
    for (form, why) in [
        (form("", Some("admin"), None), "admin"),
        (form("", None, Some("not-an-address")), "email"),
        (form("promote", None, None), "unknown action"),
    ] {
        assert!(
            matches!(
                arbiter_engine::annotation::raters::update_rater(store, lead, nina_id, &form).await,
                Err(ServiceError::Invalid(_))
            ),
            "{why}"
        );
    }
    arbiter_engine::annotation::raters::update_rater(
        store,
        lead,
        nina_id,
        &form("end-training", Some("annotator"), Some("")),
    )
    .await
    .unwrap();
    let records = store.raters().await.unwrap();
    let nina = rater(&records, "nina");
    assert_eq!(
        (nina.role.as_str(), nina.email.clone(), nina.training_since),
        ("annotator", None, None)
    );

    // QC settings change together or not at all.
    let before = arbiter_engine::annotation::quality::queue_settings(store)
        .await
        .unwrap();
    assert!(matches!(
        arbiter_engine::annotation::quality::set_queue_settings(store, "10%", "0.2", "1.5").await,
        Err(ServiceError::Invalid(_))
    ));
    assert!(matches!(
        arbiter_engine::annotation::quality::set_queue_settings(store, "0.9", "0.2", "0.5").await,
        Err(ServiceError::Invalid(_))
    ));
    assert_eq!(
        arbiter_engine::annotation::quality::queue_settings(store)
            .await
            .unwrap(),
        before
    );
    arbiter_engine::annotation::quality::set_queue_settings(store, "10%", "0.2", "0.5")
        .await
        .unwrap();
    let after = arbiter_engine::annotation::quality::queue_settings(store)
        .await
        .unwrap();
    assert_eq!(
        (
            after.gold_rate,
            after.review_check_rate,
            after.agreement_floor
        ),
        (0.1, 0.2, 0.5)
    );
}
