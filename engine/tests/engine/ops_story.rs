//! Story tests for operating Arbiter, on both backends: API tokens, and the system health the
//! monitor reads (queue, answers, latency, errors, spending, endpoints, workers) with the
//! alert rules it raises and resolves.

use arbiter_domain::accounts::{Role, User};
use arbiter_domain::answer::{ErrorCategory, Generation};
use arbiter_domain::health::rules::{AlertRules, RuleTexts};
use arbiter_domain::health::HealthSample;
use arbiter_domain::ids::{EvalId, UserId};
use arbiter_domain::run::{Priority, RunStatus};
use arbiter_engine::accounts::api_tokens;
use arbiter_engine::clients::mail::Mailer;
use arbiter_engine::health;
use arbiter_engine::jobs::queue_monitor::monitor_once;
use arbiter_engine::suites::announcements::scan_once;
use arbiter_engine::suites::{self, Announcement, SuiteForm};
use arbiter_store::{now_ms, Store};
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    a_retracted_checkpoint_stops_its_runs_and_leaves_trends_and_baselines,
    retention_clears_raw_answers_then_deletes_expired_runs,
    webhooks_deliver_signed_events_with_retries_and_give_up_in_the_end,
    new_checkpoints_trigger_tiered_suites_from_the_api_or_a_watched_folder,
    api_tokens_are_hashed_scoped_and_revocable,
    system_health_is_read_from_the_store_and_rules_raise_and_resolve_alerts,
);

async fn user(store: &dyn Store, name: &str, role: Role) -> User {
    let id = store
        .create_user(name, &stand_in_hash(name), role)
        .await
        .unwrap();
    store.get_user(id).await.unwrap().unwrap()
}

async fn api_tokens_are_hashed_scoped_and_revocable(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let alice = user(store, "alice", Role::Researcher).await;
    let bob = user(store, "bob", Role::Researcher).await;
    let admin = user(store, "root", Role::Admin).await;
    let now = now_ms();
    let (token, text) = api_tokens::create_token(store, &alice, "nightly-ci", None, now)
        .await
        .unwrap();
    assert_eq!(
        (token.username.as_str(), token.name.as_str()),
        ("alice", "nightly-ci")
    );
    assert_eq!(token.last_used_at, None);
    assert_eq!(
        api_tokens::authenticate(store, &text, now)
            .await
            .unwrap()
            .id,
        alice.id
    );
    // Use is noted, at most once a minute.
    let used = store.api_tokens(Some(alice.id)).await.unwrap()[0].last_used_at;
    assert_eq!(used, Some(now));
    api_tokens::authenticate(store, &text, now + 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.api_tokens(Some(alice.id)).await.unwrap()[0].last_used_at,
        Some(now)
    );
    api_tokens::authenticate(store, &text, now + 61_000)
        .await
        .unwrap();
    assert_eq!(
        store.api_tokens(Some(alice.id)).await.unwrap()[0].last_used_at,
        Some(now + 61_000)
    );

    // Each user sees their own; admins see everyone's.
    api_tokens::create_token(store, &bob, "bob-ci", Some(30), now)
        .await
        .unwrap();
    let names = |tokens: Vec<arbiter_domain::accounts::ApiToken>| {
        tokens
            .into_iter()
            .map(|token| token.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(api_tokens::visible_tokens(store, &alice).await.unwrap()),
        ["nightly-ci"]
    );
    assert_eq!(
        names(api_tokens::visible_tokens(store, &admin).await.unwrap()),
        ["bob-ci", "nightly-ci"]
    );

    // Bob cannot revoke Alice's token; Alice can, once.
    assert_eq!(
        api_tokens::revoke_token(store, &bob, token.id, now)
            .await
            .unwrap_err()
            .status_code(),
        404
    );
    api_tokens::revoke_token(store, &alice, token.id, now)
        .await
        .unwrap();
    assert_eq!(
        api_tokens::revoke_token(store, &alice, token.id, now)
            .await
            .unwrap_err()
            .status_code(),
        404
    );
    assert_eq!(
        api_tokens::authenticate(store, &text, now)
            .await
            .unwrap_err()
            .status_code(),
        401
    );
    // Nothing stored names the token itself.
    let stored = serde_json::to_string(&store.api_tokens(None).await.unwrap()).unwrap();
    assert!(!stored.contains(&text[4..]));
    // Unknown users get no token.
    assert!(store
        .insert_api_token(UserId(9_999), "x", "hash", "arb_x", None, now)
        .await
        .is_err());
}

fn failure(category: ErrorCategory, latency_ms: i64) -> Generation {
    Generation {
        latency_ms,
        error_category: Some(category),
        ..endpoint_failure("connection refused")
    }
}

async fn system_health_is_read_from_the_store_and_rules_raise_and_resolve_alerts(
    store: Arc<dyn Store>,
) {
    let run = launch_one_run(store.as_ref(), SAMPLE, 2).await;
    let expected = progress(store.as_ref(), run).await.expected;
    assert_eq!(expected, 120);
    let (waiting, claimed) = store.queue_depth().await.unwrap();
    assert_eq!((waiting, claimed), (120, 0));

    // A worker claims 100 identities and answers them: 60 in ~40 ms at a cent each, and 40
    // failures that took 40 s (a slow, failing endpoint).
    let ids = store.claim_work("w1", 100, LONG_LEASE_MS).await.unwrap();
    assert_eq!(ids.len(), 100);
    assert_eq!(store.queue_depth().await.unwrap(), (20, 100));
    let loads = store.endpoint_loads().await.unwrap();
    assert_eq!(loads.len(), 1);
    assert_eq!(
        (loads[0].claimed, loads[0].checkpoints.clone()),
        (100, vec!["base".to_string()])
    );
    assert_eq!(loads[0].server_waiting, None);
    store
        .heartbeat("w1", 100, LONG_LEASE_MS, 60_000)
        .await
        .unwrap();
    for (index, &id) in ids.iter().enumerate() {
        let generation = if index < 60 {
            Generation {
                latency_ms: 40,
                cost_usd: Some(0.01),
                ..answered("Answer: 42")
            }
        } else if index < 90 {
            failure(ErrorCategory::Connect, 40_000)
        } else {
            failure(ErrorCategory::RateLimited, 40_000)
        };
        store.record_result(id, &generation, None).await.unwrap();
    }
    assert_eq!(store.queue_depth().await.unwrap(), (20, 0));

    let now = now_ms();
    let window = store
        .answer_window(now - 3_600_000, &health::LATENCY_EDGES_MS)
        .await
        .unwrap();
    assert_eq!((window.answers, window.errors), (100, 40));
    assert_eq!(
        window.errors_by_category,
        vec![
            ("connect".to_string(), 30),
            ("rate_limited".to_string(), 10)
        ]
    );
    assert_eq!(window.latency_buckets.iter().sum::<i64>(), 100);
    assert_eq!(
        window.latency_buckets[1], 60,
        "40 ms is in the 25–50 ms bucket"
    );
    // Nothing in a window that starts after the answers.
    assert_eq!(
        store
            .answer_window(now + 1, &health::LATENCY_EDGES_MS)
            .await
            .unwrap()
            .answers,
        0
    );

    let costs = store.costs_since(now - 86_400_000).await.unwrap();
    assert_eq!(costs.len(), 1);
    assert_eq!(
        (
            costs[0].eval_name.as_str(),
            costs[0].team.as_str(),
            costs[0].answers
        ),
        ("qa-exact", "default", 100)
    );
    assert!((costs[0].answer_usd - 0.60).abs() < 1e-9, "{costs:?}");

    // The endpoint's own queue, as a worker read it.
    let url = loads[0].base_url.clone();
    assert!(url.starts_with(ENDPOINT), "{url}");
    let reading = arbiter_domain::health::PrefixCacheReading {
        hit_rate: 0.75,
        queried_tokens: Some(40_000.0),
    };
    store
        .observe_endpoint_queue(&url, (7.0, 32.0), None, now)
        .await
        .unwrap();
    store
        .observe_endpoint_queue(&url, (3.0, 30.0), Some(reading), now + 1)
        .await
        .unwrap();
    let load = &store.endpoint_loads().await.unwrap()[0];
    assert_eq!(
        (load.server_waiting, load.server_running, load.observed_at),
        (Some(3.0), Some(30.0), Some(now + 1))
    );
    assert_eq!(load.prefix_cache, Some(reading));
    let workers = store.worker_statuses().await.unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(
        (workers[0].name.as_str(), workers[0].in_flight),
        ("w1", 100)
    );

    // The whole picture, and the rules: 40% errors and a p99 of ~40 s fire; the rest do not.
    let figures = health::system_health(store.as_ref(), now).await.unwrap();
    assert_eq!(figures.error_rate, Some(0.4));
    let p99 = figures.p99_latency_ms.unwrap();
    assert!((30_000.0..=45_000.0).contains(&p99), "{p99}");
    assert!(figures.p50_latency_ms.unwrap() < 50.0);
    assert_eq!(figures.live_workers, 1);
    assert!((figures.cost_last_day_usd - 0.60).abs() < 1e-9);
    let lead = user(store.as_ref(), "lead", Role::Lead).await;
    store
        .update_rater(
            lead.id,
            &arbiter_domain::annotation::pool::RaterUpdate {
                email: Some(Some("lead@example.com".into())),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let outbox = tempfile::tempdir().unwrap();
    let mailer = Mailer::from_config(
        &format!("file:{}", outbox.path().display()),
        "Arbiter <arbiter@localhost>",
    )
    .unwrap();
    let round = monitor_once(store.as_ref(), &mailer, now).await.unwrap();
    let open: Vec<(String, String)> = store
        .alerts(0)
        .await
        .unwrap()
        .into_iter()
        .filter(|alert| alert.resolved_at.is_none())
        .map(|alert| (alert.kind, alert.subject))
        .collect();
    assert!(
        open.contains(&("error_rate".into(), "answers".into())),
        "{open:?}"
    );
    assert!(
        open.contains(&("p99_latency".into(), "answers".into())),
        "{open:?}"
    );
    assert!(
        !open
            .iter()
            .any(|(kind, _)| kind == "daily_cost" || kind == "queue_growing"),
        "{open:?}"
    );
    assert!(round.alerts_raised >= 2);
    assert!(round.emails_sent >= 2, "{round:?}");
    let mails: Vec<String> = std::fs::read_dir(outbox.path())
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    assert!(
        mails
            .iter()
            .any(|mail| mail.contains("Error rate") && mail.contains("connect 30")),
        "{mails:?}"
    );
    // The round kept a sample.
    let samples = store.health_samples(now - 1).await.unwrap();
    assert_eq!(samples.len(), 1);
    assert_eq!(
        (
            samples[0].queue_depth,
            samples[0].answers_last_hour,
            samples[0].errors_last_hour
        ),
        (20, 100, 40)
    );

    // A second round raises nothing new and sends nothing again.
    let again = monitor_once(store.as_ref(), &mailer, now + 60_000)
        .await
        .unwrap();
    assert_eq!(
        (again.alerts_raised, again.emails_sent),
        (0, 0),
        "{again:?}"
    );

    // Leads raise the thresholds: the alerts resolve on the next round. A tight budget fires.
    let refused = health::set_alert_rules(
        store.as_ref(),
        &RuleTexts {
            max_error_rate: "150%".into(),
            ..AlertRules::default().texts()
        },
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("error rate"));
    assert_eq!(
        health::alert_rules(store.as_ref()).await.unwrap(),
        Default::default()
    );
    health::set_alert_rules(
        store.as_ref(),
        &RuleTexts {
            max_error_rate: "50%".into(),
            max_p99_latency_s: "".into(),
            daily_budget_usd: "0.5".into(),
            ..AlertRules::default().texts()
        },
    )
    .await
    .unwrap();
    let round = monitor_once(store.as_ref(), &mailer, now + 120_000)
        .await
        .unwrap();
    assert!(round.alerts_resolved >= 2, "{round:?}");
    let open: Vec<String> = store
        .alerts(0)
        .await
        .unwrap()
        .into_iter()
        .filter(|alert| alert.resolved_at.is_none())
        .map(|alert| alert.kind)
        .collect();
    assert_eq!(open, ["daily_cost"]);

    // Samples older than a week are dropped when a new one is kept.
    let old = HealthSample {
        taken_at: now - 8 * 86_400_000,
        queue_depth: 1,
        claimed: 0,
        answers_last_hour: 0,
        errors_last_hour: 0,
        p99_latency_ms: None,
        live_workers: 0,
    };
    store.record_health_sample(&old, 0).await.unwrap();
    assert_eq!(store.health_samples(0).await.unwrap().len(), 4);
    let newest = HealthSample {
        taken_at: now + 180_000,
        ..old
    };
    store
        .record_health_sample(&newest, now - 7 * 86_400_000)
        .await
        .unwrap();
    let kept = store.health_samples(0).await.unwrap();
    assert_eq!(kept.len(), 4);
    assert!(kept
        .iter()
        .all(|sample| sample.taken_at > now - 7 * 86_400_000));
}

fn announcement(name: &str, step: i64) -> Announcement {
    Announcement {
        name: name.into(),
        endpoint_url: ENDPOINT.into(),
        model: "m".into(),
        training_run: Some("pretrain".into()),
        training_step: Some(step),
        ..Announcement::default()
    }
}

async fn new_checkpoints_trigger_tiered_suites_from_the_api_or_a_watched_folder(
    store: Arc<dyn Store>,
) {
    let store = store.as_ref();
    let researcher = user(store, "res", Role::Researcher).await;
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        "qa",
        "qa.jsonl",
        FIVE_CASES.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let smoke_eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("smoke-eval", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let full_eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("full-eval", revision.dataset_id, 2),
        None,
    )
    .await
    .unwrap();
    let form = |name: &str, tier: &str, every_nth: Option<i64>, evals: Vec<EvalId>| SuiteForm {
        name: name.into(),
        tier: tier.into(),
        every_nth,
        training_run: "pretrain".into(),
        team: String::new(),
        eval_ids: evals,
    };
    // Refusals store nothing.
    for (bad, words) in [
        (form("", "smoke", None, vec![smoke_eval]), "name"),
        (form("x", "medium", None, vec![smoke_eval]), "tier"),
        (form("x", "full", Some(-1), vec![smoke_eval]), "every"),
        (form("x", "smoke", None, vec![]), "evals"),
    ] {
        let refused = suites::create_suite(store, &bad, "default", false, None)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains(words), "{refused}");
    }
    let unknown = suites::create_suite(
        store,
        &form("x", "smoke", None, vec![smoke_eval, EvalId(999)]),
        "default",
        false,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(unknown.status_code(), 404);
    assert!(store.suites().await.unwrap().is_empty());

    suites::create_suite(
        store,
        &form("smoke", "smoke", None, vec![smoke_eval]),
        &researcher.team,
        false,
        Some(researcher.id),
    )
    .await
    .unwrap();
    suites::create_suite(
        store,
        &form("full", "full", Some(2), vec![full_eval]),
        "default",
        false,
        None,
    )
    .await
    .unwrap();
    // Researchers charge suites to their own team; leads may name another (a valid name).
    let other_team = SuiteForm {
        team: "vision".into(),
        ..form("other-team", "smoke", None, vec![smoke_eval])
    };
    let refused = suites::create_suite(store, &other_team, "default", false, None)
        .await
        .unwrap_err();
    assert_eq!(refused.status_code(), 403, "{refused}");
    let bad_name = SuiteForm {
        team: "no spaces!".into(),
        ..other_team.clone()
    };
    assert_eq!(
        suites::create_suite(store, &bad_name, "default", true, None)
            .await
            .unwrap_err()
            .status_code(),
        400
    );
    let by_lead = suites::create_suite(store, &other_team, "default", true, None)
        .await
        .unwrap();
    assert!(store.delete_suite(by_lead).await.unwrap());
    let taken = suites::create_suite(
        store,
        &form("full", "smoke", None, vec![smoke_eval]),
        "default",
        false,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(taken.status_code(), 409);

    // First checkpoint: smoke only. Second: smoke and full (every 2nd), at promotion priority.
    let first = suites::register_announced(store, &announcement("step-1", 1), None)
        .await
        .unwrap();
    let suites: Vec<&str> = first.runs.iter().map(|run| run.suite.as_str()).collect();
    assert_eq!(suites, ["smoke"]);
    assert!(first.runs[0].created && first.runs[0].error.is_none());
    let second = suites::register_announced(
        store,
        &Announcement {
            decision: Some("promotion".into()),
            ..announcement("step-2", 2)
        },
        None,
    )
    .await
    .unwrap();
    let mut suites: Vec<&str> = second.runs.iter().map(|run| run.suite.as_str()).collect();
    suites.sort();
    assert_eq!(suites, ["full", "smoke"]);
    for run in &second.runs {
        let summary = store
            .list_runs()
            .await
            .unwrap()
            .into_iter()
            .find(|summary| Some(summary.id) == run.run_id)
            .unwrap();
        assert_eq!(summary.priority, Priority::Promotion);
    }
    // A bad decision value or a duplicate name stores nothing and launches nothing.
    let runs_before = store.list_runs().await.unwrap().len();
    let refused = suites::register_announced(
        store,
        &Announcement {
            decision: Some("urgent".into()),
            ..announcement("step-3", 3)
        },
        None,
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("decision"));
    assert!(
        suites::register_announced(store, &announcement("step-2", 2), None)
            .await
            .is_err()
    );
    assert_eq!(store.list_runs().await.unwrap().len(), runs_before);
    assert_eq!(store.list_checkpoints().await.unwrap().len(), 2);

    // On demand: the full suite on the first checkpoint.
    let researcher = user(store, "rhea", Role::Researcher).await;
    let on_demand = suites::run_suite_on_demand(
        store,
        &researcher,
        first.checkpoint_id,
        "full",
        Priority::Promotion,
    )
    .await
    .unwrap();
    assert_eq!(on_demand.len(), 1);
    assert!(on_demand[0].run_id.is_some());
    assert!(suites::run_suite_on_demand(
        store,
        &researcher,
        first.checkpoint_id,
        "nope",
        Priority::Scheduled,
    )
    .await
    .is_err());
    let launches = store.suite_launches(10).await.unwrap();
    assert_eq!(launches.len(), 4);
    assert_eq!(launches[0].reason, "on demand");
    assert!(
        launches
            .iter()
            .any(|launch| launch.reason.contains("every 2nd")),
        "{launches:?}"
    );

    // A watched folder: two good announcements and one bad; each handled once.
    let folder = tempfile::tempdir().unwrap();
    let write = |file: &str, text: String| std::fs::write(folder.path().join(file), text).unwrap();
    write(
        "step-3.json",
        serde_json::to_string(&announcement("step-3", 3)).unwrap(),
    );
    write(
        "step-4.json",
        serde_json::to_string(&announcement("step-4", 4)).unwrap(),
    );
    write("broken.json", "{\"name\": \"half-writ".into());
    let scan = scan_once(store, folder.path()).await.unwrap();
    assert_eq!(scan.registered.len(), 2, "{scan:?}");
    assert_eq!(scan.refused.len(), 1);
    assert!(scan.refused[0].1.contains("not a checkpoint announcement"));
    // step-4 is the 4th checkpoint of the run: smoke and full.
    let step_four = scan
        .registered
        .iter()
        .find(|(source, ..)| source.ends_with("step-4.json"))
        .unwrap();
    assert_eq!(step_four.2, 2);
    let again = scan_once(store, folder.path()).await.unwrap();
    assert_eq!(again, Default::default(), "nothing is handled twice");
    // The broken file is finished: it is read again because its content changed.
    write(
        "broken.json",
        serde_json::to_string(&announcement("step-5", 5)).unwrap(),
    );
    let fixed = scan_once(store, folder.path()).await.unwrap();
    assert_eq!(fixed.registered.len(), 1);
    assert_eq!(store.list_checkpoints().await.unwrap().len(), 5);
    // Deleting a suite keeps its runs; new checkpoints no longer trigger it.
    let full_id = store
        .suites()
        .await
        .unwrap()
        .into_iter()
        .find(|suite| suite.name == "full")
        .unwrap()
        .id;
    let runs_now = store.list_runs().await.unwrap().len();
    assert!(store.delete_suite(full_id).await.unwrap());
    assert!(!store.delete_suite(full_id).await.unwrap());
    assert_eq!(store.list_runs().await.unwrap().len(), runs_now);
    let sixth = suites::register_announced(store, &announcement("step-6", 6), None)
        .await
        .unwrap();
    assert_eq!(sixth.runs.len(), 1);

    // Time to results: no smoke run has an answer yet. Early they are on track; past half
    // their hour they are at risk, past it late, and the monitor raises one alert per suite
    // and checkpoint (the at-risk ones resolved once late).
    let registered = store
        .list_checkpoints()
        .await
        .unwrap()
        .iter()
        .map(|checkpoint| checkpoint.created_at)
        .max()
        .unwrap();
    let smoke_at = |health: &health::SystemHealth| {
        let row = health
            .results
            .iter()
            .find(|row| row.tier == "smoke")
            .unwrap()
            .clone();
        (row.on_track, row.at_risk, row.late, row.met)
    };
    let early = health::system_health(store, registered + 60_000)
        .await
        .unwrap();
    assert_eq!(smoke_at(&early), (6, 0, 0, 0));
    let open_alerts = |kind: &'static str| async move {
        store
            .alerts(0)
            .await
            .unwrap()
            .into_iter()
            .filter(|alert| alert.kind == kind && alert.resolved_at.is_none())
            .map(|alert| alert.subject)
            .collect::<Vec<_>>()
    };
    for (minutes, at_risk, late) in [(40, 6, 0), (120, 0, 6)] {
        let now = registered + minutes * 60_000;
        let report = arbiter_engine::annotation::queue::queue_report(store, now, false)
            .await
            .unwrap();
        health::check_rules(store, now, &report).await.unwrap();
        assert_eq!(
            open_alerts("results_at_risk").await.len(),
            at_risk,
            "{minutes} min"
        );
        assert_eq!(
            open_alerts("results_late").await.len(),
            late,
            "{minutes} min"
        );
    }
    assert!(open_alerts("results_late")
        .await
        .contains(&"smoke suite `smoke` on `step-6`".to_string()));
    let late = health::system_health(store, registered + 120 * 60_000)
        .await
        .unwrap();
    assert_eq!(smoke_at(&late), (0, 0, 6, 0));
    assert_eq!(
        late.results
            .iter()
            .find(|row| row.tier == "smoke")
            .unwrap()
            .attainment,
        Some(0.0)
    );
    // One suite delivers (within its hour by the wall clock it finished on: met) and its
    // alert resolves; a paused one is left out.
    let delivered = sixth.runs[0].run_id.unwrap();
    let claimed = store
        .claim_identities("w", delivered, 100, LONG_LEASE_MS, true)
        .await
        .unwrap();
    for job in &claimed {
        assert!(reply(store, job.identity_id, Reply::Correct).await);
    }
    assert_eq!(
        progress(store, delivered).await.status,
        RunStatus::Completed
    );
    let paused = first.runs[0].run_id.unwrap();
    assert!(store
        .set_run_status(paused, &[RunStatus::Running], RunStatus::Paused)
        .await
        .unwrap());
    let now = registered + 121 * 60_000;
    let report = arbiter_engine::annotation::queue::queue_report(store, now, false)
        .await
        .unwrap();
    health::check_rules(store, now, &report).await.unwrap();
    let open = open_alerts("results_late").await;
    assert_eq!(open.len(), 4, "{open:?}");
    assert!(!open
        .iter()
        .any(|subject| subject.ends_with("`step-6`") || subject.ends_with("`step-1`")));
    let after = health::system_health(store, now).await.unwrap();
    let smoke = after
        .results
        .iter()
        .find(|row| row.tier == "smoke")
        .unwrap();
    assert_eq!((smoke.late, smoke.missed, smoke.met), (4, 0, 1));
}

type Received = Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, String)>>>;

/// A receiver that answers 500 to its first request and 200 afterwards, keeping what it got.
async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let mut all = kept.lock().unwrap();
                all.push((headers, body));
                if all.len() == 1 {
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

async fn webhooks_deliver_signed_events_with_retries_and_give_up_in_the_end(store: Arc<dyn Store>) {
    use arbiter_engine::secrets::SecretBox;
    use arbiter_engine::webhooks::{self, create_webhook, deliver_due};
    let store = store.as_ref();
    let secrets = SecretBox::from_hex(&SecretBox::generate_key()).unwrap();
    let http = arbiter_engine::clients::egress::GuardedClient::for_process(|builder| builder);
    let (url, received) = receiver().await;
    let start = now_ms();
    let events = |names: &[&str]| {
        names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>()
    };

    // Refusals store nothing.
    for (bad_url, bad_events) in [
        ("ftp://host/x", events(&["run.completed"])),
        ("not a url", events(&["run.completed"])),
        // The egress policy: the metadata service and fragments are refused when stored.
        (
            "http://169.254.169.254/latest/meta-data",
            events(&["run.completed"]),
        ),
        ("http://10.0.0.8/hook", events(&["run.completed"])),
        ("https://hooks.example.com/in#x", events(&["run.completed"])),
        (url.as_str(), events(&["run.exploded"])),
        (url.as_str(), events(&[])),
    ] {
        assert!(create_webhook(
            store,
            &secrets,
            bad_url,
            &bad_events,
            false,
            true,
            None,
            start
        )
        .await
        .is_err());
    }
    let unsigned_needs_key = create_webhook(
        store,
        &SecretBox::without_key(),
        &url,
        &events(&["run.completed"]),
        true,
        true,
        None,
        start,
    )
    .await
    .unwrap_err();
    assert!(unsigned_needs_key
        .to_string()
        .contains("ARBITER_SECRET_KEY"));
    // Alert events can name raters: only those who manage the pool may subscribe to them.
    let researcher_alerts = create_webhook(
        store,
        &secrets,
        &url,
        &events(&["alert.raised"]),
        false,
        false,
        None,
        start,
    )
    .await
    .unwrap_err();
    assert_eq!(researcher_alerts.status_code(), 403);
    create_webhook(
        store,
        &secrets,
        &url,
        &events(&["run.completed"]),
        false,
        false,
        None,
        start,
    )
    .await
    .unwrap();
    for hook in store.webhooks().await.unwrap() {
        assert!(store.delete_webhook(hook.id).await.unwrap());
    }
    assert!(store.webhooks().await.unwrap().is_empty());

    let (hook, secret) = create_webhook(
        store,
        &secrets,
        &url,
        &events(&["run.completed", "alert.raised"]),
        true,
        true,
        None,
        start,
    )
    .await
    .unwrap();
    let secret = secret.expect("a signed webhook shows its secret once");
    assert!(secret.starts_with("whsec_"));
    assert!(hook.signed);
    assert!(!serde_json::to_string(&store.webhooks().await.unwrap())
        .unwrap()
        .contains(&secret));
    // A receiver that is down.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (dead, _) = create_webhook(
        store,
        &secrets,
        &format!("http://127.0.0.1:{dead_port}/x"),
        &events(&["run.completed"]),
        false,
        true,
        None,
        start,
    )
    .await
    .unwrap();

    // A run completes and an alert opens after the webhooks were made.
    let run = launch_one_run(store, FIVE_CASES.as_bytes(), 1).await;
    for id in store.claim_work("w", 10, LONG_LEASE_MS).await.unwrap() {
        reply(store, id, Reply::Correct).await;
    }
    store.finish_run_if_done(run).await.unwrap();
    assert_eq!(progress(store, run).await.status, RunStatus::Completed);
    store
        .raise_alert("error_rate", "answers", "9% failed", now_ms())
        .await
        .unwrap();

    // Too fresh to queue yet: events settle for a few seconds first.
    let round = deliver_due(store, &secrets, &http, now_ms()).await.unwrap();
    assert_eq!(round.queued, 0, "{round:?}");
    let later = now_ms() + 10_000;
    let first = deliver_due(store, &secrets, &http, later).await.unwrap();
    assert_eq!(first.queued, 3, "{first:?}");
    // The receiver failed its first request; the dead one failed too.
    assert_eq!(
        (first.delivered, first.failed_attempts),
        (1, 2),
        "{first:?}"
    );
    // Nothing is queued twice, and nothing is due before its backoff.
    let again = deliver_due(store, &secrets, &http, later + 1_000)
        .await
        .unwrap();
    assert_eq!(again, Default::default());
    let retried = deliver_due(store, &secrets, &http, later + 31_000)
        .await
        .unwrap();
    assert_eq!(
        (retried.delivered, retried.failed_attempts),
        (1, 1),
        "{retried:?}"
    );

    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 3);
    let mut events_seen = Vec::new();
    for (headers, body) in &got {
        let signature = headers["x-arbiter-signature"].to_str().unwrap();
        let timestamp: i64 = signature
            .trim_start_matches("t=")
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(signature, webhooks::signature(&secret, timestamp, body));
        assert!(headers.contains_key("x-arbiter-delivery"));
        let payload: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            payload["event"],
            headers["x-arbiter-event"].to_str().unwrap()
        );
        events_seen.push(payload["event"].as_str().unwrap().to_string());
        if payload["event"] == "run.completed" {
            assert_eq!(payload["run"]["id"], run.get());
            assert_eq!(payload["report"]["completeness"], "COMPLETE");
            assert_eq!(payload["report"]["pass_rate"], 1.0);
        } else {
            assert_eq!(payload["alert"]["kind"], "error_rate");
            assert_eq!(payload["alert"]["title"], "Error rate");
        }
    }
    events_seen.sort();
    events_seen.dedup();
    assert_eq!(events_seen, ["alert.raised", "run.completed"]);

    // The dead receiver's delivery is given up after eight attempts.
    let mut now = later + 31_000;
    let mut given_up = 0;
    for _ in 0..10 {
        now += 3_600_000;
        given_up += deliver_due(store, &secrets, &http, now)
            .await
            .unwrap()
            .given_up;
    }
    assert_eq!(given_up, 1);
    let deliveries = store.recent_deliveries(10).await.unwrap();
    let dead_delivery = deliveries
        .iter()
        .find(|delivery| delivery.webhook_id == dead.id)
        .unwrap();
    assert_eq!(dead_delivery.attempts, webhooks::MAX_ATTEMPTS);
    assert!(dead_delivery.failed_at.is_some() && dead_delivery.delivered_at.is_none());
    assert!(dead_delivery
        .last_error
        .as_deref()
        .unwrap()
        .contains("could not reach"));
    assert!(deliveries
        .iter()
        .filter(|delivery| delivery.webhook_id == hook.id)
        .all(|delivery| delivery.delivered_at.is_some()));
    // Deleting a webhook removes its outbox.
    assert!(store.delete_webhook(dead.id).await.unwrap());
    assert!(store
        .recent_deliveries(10)
        .await
        .unwrap()
        .iter()
        .all(|delivery| delivery.webhook_id != dead.id));
}

fn with_logprobs(output: &str, logprob: f32) -> Generation {
    Generation {
        logprobs: Some(arbiter_domain::logprobs::encode(&[
            arbiter_domain::logprobs::TokenLogprob {
                bytes: output.as_bytes().to_vec(),
                logprob,
                top: Vec::new(),
            },
        ])),
        ..answered(output)
    }
}

async fn retention_clears_raw_answers_then_deletes_expired_runs(store: Arc<dyn Store>) {
    use arbiter_domain::grading::grade_exact_match;
    use arbiter_domain::grading::record::Grading;
    use arbiter_engine::retention::{self, RetentionPolicy};
    use arbiter_store::FinishedIdentity;
    let store = store.as_ref();
    const DAY: i64 = 86_400_000;

    // Run A: five answers with logprobs, one of them sent to a human.
    let old = launch_one_run(store, FIVE_CASES.as_bytes(), 1).await;
    let old_items = store.claim_work("w", 10, LONG_LEASE_MS).await.unwrap();
    assert_eq!(old_items.len(), 5);
    for &id in &old_items[..4] {
        let job = store.load_identity(id).await.unwrap();
        let output = format!("Answer: {}", job.target);
        store
            .record_results(&[FinishedIdentity {
                identity_id: id,
                generation: with_logprobs(&output, -0.25),
                grading: Grading::deterministic_only(Some(grade_exact_match(&output, &job.target))),
                generation_key: Some(format!("key-{id}")),
                cached_from: None,
                next_turn_waits: false,
            }])
            .await
            .unwrap();
    }
    escalate_to_humans(store, &old_items[4..], 1).await;
    assert!(store.finish_run_if_done(old).await.unwrap());
    let (_, report_before) = arbiter_engine::reports::runs::run_report(store, old)
        .await
        .unwrap();

    // Run B (another eval on the same data) answers one item from A's cache and stays running.
    let revision = store.list_datasets().await.unwrap()[0]
        .latest_revision
        .clone()
        .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("second", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let checkpoint = store.list_checkpoints().await.unwrap()[0].id;
    let newer = arbiter_engine::runs::launch_run(
        store,
        eval,
        checkpoint,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .unwrap()
    .run_id;
    let newer_items = store.claim_work("w", 10, LONG_LEASE_MS).await.unwrap();
    assert_eq!(newer_items.len(), 5);
    let cached = store.load_identity(newer_items[0]).await.unwrap();
    store
        .record_results(&[FinishedIdentity {
            identity_id: newer_items[0],
            generation: answered("Answer: 2"),
            grading: Grading::deterministic_only(Some(grade_exact_match(
                "Answer: 2",
                &cached.target,
            ))),
            generation_key: None,
            cached_from: Some(old_items[0]),
            next_turn_waits: false,
        }])
        .await
        .unwrap();
    assert!(store
        .generation_logprobs(old_items[0])
        .await
        .unwrap()
        .is_some());

    // A year and a day on: A's raw answers go, except the logprobs B's cached answer reads.
    let now = now_ms();
    let policy = RetentionPolicy::default();
    let report = retention::enforce(store, policy, now + 366 * DAY)
        .await
        .unwrap();
    assert_eq!(report.runs_raw_purged, 1, "{report:?}");
    assert_eq!(report.generations_cleared, 5);
    assert_eq!(report.cache_entries_deleted, 4);
    assert_eq!(
        (report.logprobs_deleted, report.logprobs_kept_in_use),
        (3, 1),
        "{report:?}"
    );
    assert_eq!(report.runs_deleted, 0);
    assert!(store
        .generation_logprobs(old_items[1])
        .await
        .unwrap()
        .is_none());
    assert!(store
        .generation_logprobs(old_items[0])
        .await
        .unwrap()
        .is_some());
    // Verdicts and the report survive.
    let (_, report_after) = arbiter_engine::reports::runs::run_report(store, old)
        .await
        .unwrap();
    assert_eq!(report_after.overall, report_before.overall);
    assert_eq!(report_after.completeness, report_before.completeness);
    let rows = store.run_results(old, 100).await.unwrap();
    assert!(rows.iter().all(|row| row.output.is_empty()), "{rows:?}");
    // Enforcing again removes nothing more, and the report is kept.
    let again = retention::enforce(store, policy, now + 367 * DAY)
        .await
        .unwrap();
    assert_eq!(again.runs_raw_purged + again.runs_deleted, 0);
    assert_eq!(retention::last_report(store).await.unwrap(), Some(again));

    // Four years on: A has expired but B still reads its answers, so A stays.
    let report = retention::enforce(store, policy, now + 4 * 365 * DAY)
        .await
        .unwrap();
    assert_eq!(
        (report.runs_deleted, report.runs_kept_in_use),
        (0, 1),
        "{report:?}"
    );
    // B finishes; both expire; B goes first, then A on the next round.
    for &id in &newer_items[1..] {
        reply(store, id, Reply::Correct).await;
    }
    assert!(store.finish_run_if_done(newer).await.unwrap());
    let report = retention::enforce(store, policy, now + 4 * 365 * DAY)
        .await
        .unwrap();
    assert_eq!(report.runs_deleted, 1, "{report:?}");
    let report = retention::enforce(store, policy, now + 4 * 365 * DAY)
        .await
        .unwrap();
    assert_eq!(report.runs_deleted, 1, "{report:?}");
    assert!(report.rows_deleted > 10, "{report:?}");
    assert!(store.list_runs().await.unwrap().is_empty());
    assert!(store.run_header(old).await.unwrap().is_none());
    let queue = store.annotation_queue_counts().await.unwrap();
    assert_eq!((queue.open, queue.leased, queue.done), (0, 0, 0));
    // Datasets, evals and checkpoints are not run data: they stay.
    assert_eq!(store.list_evals().await.unwrap().len(), 2);

    // The policy is editable and checked.
    assert!(retention::set_policy(store, "30", "7").await.is_err());
    assert_eq!(
        retention::policy(store).await.unwrap(),
        RetentionPolicy::default()
    );
    retention::set_policy(store, "30", "90").await.unwrap();
    assert_eq!(
        retention::policy(store).await.unwrap(),
        RetentionPolicy {
            raw_days: 30,
            summary_days: 90
        }
    );
}

/// A checkpoint rolled back: retracting it needs a reason and the right to change it, cancels
/// its unfinished runs for good, refuses new launches, takes it out of trends and baselines,
/// and leaves its results readable, marked retracted.
async fn a_retracted_checkpoint_stops_its_runs_and_leaves_trends_and_baselines(
    store: Arc<dyn Store>,
) {
    let store = store.as_ref();
    let finished = launch_one_run(
        store,
        b"{\"id\": \"q1\", \"input\": \"2+2\", \"target\": \"4\"}\n",
        1,
    )
    .await;
    let claimed = store.claim_work("w", 10, LONG_LEASE_MS).await.unwrap();
    assert!(reply(store, claimed[0], Reply::Correct).await);
    assert_eq!(progress(store, finished).await.status, RunStatus::Completed);
    let eval = progress(store, finished).await.eval_id;
    let base = store.list_checkpoints().await.unwrap()[0].id;
    let other = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "other",
        ENDPOINT,
        "other-model",
        None,
    )
    .await
    .unwrap();
    let running =
        arbiter_engine::runs::launch_run(store, eval, other, Priority::Scheduled, "default", None)
            .await
            .unwrap()
            .run_id;
    assert_eq!(store.trend_runs(eval, "").await.unwrap().len(), 2);

    let lead = user(store, "lead", Role::Lead).await;
    let researcher = user(store, "researcher", Role::Researcher).await;
    use arbiter_engine::catalog::retract_checkpoint;
    use arbiter_engine::error::ServiceError;
    // Refusals change nothing.
    match retract_checkpoint(store, &lead, other, "  ").await {
        Err(ServiceError::Invalid(message)) => assert!(message.contains("say why"), "{message}"),
        other => panic!("an empty reason is refused: {other:?}"),
    }
    match retract_checkpoint(store, &researcher, other, "bad conversion").await {
        Err(ServiceError::Forbidden(message)) => {
            assert!(message.contains("may retract it"), "{message}")
        }
        other => panic!("only leads retract the operator's checkpoints: {other:?}"),
    }
    assert!(matches!(
        retract_checkpoint(
            store,
            &lead,
            arbiter_domain::ids::CheckpointId(9999),
            "gone"
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));
    assert_eq!(progress(store, running).await.status, RunStatus::Running);

    // The running run is cancelled with it, and stays so.
    let cancelled = retract_checkpoint(store, &lead, other, "the tokenizer lost its chat template")
        .await
        .unwrap();
    assert_eq!(cancelled, vec![running]);
    let shown = progress(store, running).await;
    assert_eq!(shown.status, RunStatus::Cancelled);
    assert_eq!(
        shown.checkpoint_retracted.as_deref(),
        Some("the tokenizer lost its chat template")
    );
    match arbiter_engine::runs::change_run_state(store, &lead, running, "resume").await {
        Err(ServiceError::Conflict(message)) => assert!(message.contains("retracted"), "{message}"),
        other => panic!("a retracted checkpoint's run is not resumed: {other:?}"),
    }
    assert_eq!(progress(store, running).await.status, RunStatus::Cancelled);
    match arbiter_engine::runs::launch_run(store, eval, other, Priority::Scheduled, "default", None)
        .await
    {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("was retracted"), "{message}")
        }
        other => panic!("no launch against a retracted checkpoint: {other:?}"),
    }
    assert!(matches!(
        retract_checkpoint(store, &lead, other, "again").await,
        Err(ServiceError::Conflict(_))
    ));
    let checkpoint = store
        .list_checkpoints()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.id == other)
        .unwrap();
    let retraction = checkpoint.retraction.expect("marked retracted");
    assert_eq!(
        (retraction.reason.as_str(), retraction.by.as_deref()),
        ("the tokenizer lost its chat template", Some("lead"))
    );

    // A finished run's checkpoint retracted: nothing to cancel; out of trends and baselines,
    // its results still readable.
    assert!(
        retract_checkpoint(store, &lead, base, "trained on the test set")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.trend_runs(eval, "").await.unwrap().is_empty());
    let summaries = store.list_runs().await.unwrap();
    assert!(
        summaries.iter().all(|run| run.checkpoint_retracted),
        "{summaries:?}"
    );
    assert_eq!(progress(store, finished).await.status, RunStatus::Completed);
    assert_eq!(
        arbiter_engine::runs::run_results(store, finished, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}
