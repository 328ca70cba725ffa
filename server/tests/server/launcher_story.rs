//! Served checkpoints, end to end with real processes on SQLite and PostgreSQL: a checkpoint
//! announced with `serve` has its servers (two `arbiter sim` replicas) started by the local
//! launcher, its suite waits for them, runs, survives a replica killed mid-run with nothing
//! lost or duplicated, and the servers retire when it is done; a later run starts them once
//! more. A server that never becomes healthy fails its launch with its log's tail, and its
//! runs are cancelled with the reason instead of waiting for ever.

use arbiter_domain::run::RunStatus;
use arbiter_domain::serving::launch::{LaunchPolicy, LaunchState};
use arbiter_domain::serving::ServingEngine;
use arbiter_engine::catalog::EvalForm;
use arbiter_engine::dispatch::run_worker;
use arbiter_engine::serving::config::LocalLauncherConfig;
use arbiter_engine::serving::local::LocalLauncher;
use arbiter_engine::serving::ServeRequest;
use arbiter_engine::suites::{Announcement, SuiteForm};
use arbiter_store::Store;
use arbiter_testkit::backend::TestBackend;
use arbiter_testkit::fixtures::latest_launch;
use arbiter_testkit::pipeline::launched;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");

/// `count` consecutive ports nothing listens on now.
fn free_ports(count: u16) -> (u16, u16) {
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let first = 20_000 + (nanos % 30_000) as u16;
        let listeners: Vec<_> = (first..first + count)
            .map(|port| std::net::TcpListener::bind(("127.0.0.1", port)))
            .collect();
        if listeners.iter().all(Result::is_ok) {
            return (first, first + count - 1);
        }
    }
}

fn launcher(
    id: &str,
    engine: ServingEngine,
    command: String,
    policy: LaunchPolicy,
    logs: &std::path::Path,
) -> LocalLauncher {
    LocalLauncher::new(LocalLauncherConfig {
        id: id.into(),
        host: "127.0.0.1".into(),
        ports: free_ports(4),
        log_dir: logs.to_path_buf(),
        policy,
        gpus: 2,
        engines: BTreeMap::from([(engine, command)]),
    })
}

/// Launcher rounds until `done` holds, at most `seconds`.
async fn rounds_until<F, Fut>(
    launcher: &mut LocalLauncher,
    store: &dyn Store,
    seconds: u64,
    mut done: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        launcher.round(store).await.unwrap();
        if done().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the launcher did not get there in {seconds} s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn scenario(backend: TestBackend) {
    let store: Arc<dyn Store> = backend.database.store();
    let logs = tempfile::tempdir().unwrap();
    let sim = format!(
        "'{}' sim --addr {{host}}:{{port}} --model {{model}}:0.8 --latency-ms-min 20 --latency-ms-max 60",
        env!("CARGO_BIN_EXE_arbiter")
    );
    let policy = LaunchPolicy {
        health_timeout_ms: 30_000,
        idle_ms: 1_000,
        max_restarts: 2,
    };
    let mut sims = launcher("sims", ServingEngine::Simulator, sim, policy, logs.path());
    sims.round(store.as_ref()).await.unwrap();

    let revision =
        arbiter_engine::catalog::upload_dataset(store.as_ref(), "qa", "qa.jsonl", SAMPLE, None)
            .await
            .unwrap();
    let qa = EvalForm {
        name: "qa".into(),
        dataset_id: revision.dataset_id,
        prompt_template: "Question: {input}".into(),
        max_tokens: 32,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: String::new(),
        options: arbiter_engine::catalog::EvalOptions::default(),
    };
    let eval = arbiter_engine::catalog::define_eval(store.as_ref(), &qa, None)
        .await
        .unwrap();
    arbiter_engine::suites::create_suite(
        store.as_ref(),
        &SuiteForm {
            name: "smoke".into(),
            tier: "smoke".into(),
            every_nth: None,
            training_run: String::new(),
            team: String::new(),
            eval_ids: vec![eval],
        },
        "default",
        false,
        None,
    )
    .await
    .unwrap();

    // Announced with `serve`: registered on two reserved ports, its suite launched at once.
    let announcement = Announcement {
        name: "served-step-100".into(),
        model: "served-model".into(),
        training_run: Some("served".into()),
        training_step: Some(100),
        serve: Some(ServeRequest {
            engine: "simulator".into(),
            path: "weights/step-100".into(),
            plan: arbiter_domain::serving::plan::PlanRequest {
                replicas: Some(2),
                ..Default::default()
            },
        }),
        ..Announcement::default()
    };
    let registered =
        arbiter_engine::suites::register_announced(store.as_ref(), &announcement, None)
            .await
            .unwrap();
    let checkpoint = registered.checkpoint_id;
    assert_eq!(registered.runs.len(), 1, "{registered:?}");
    let run = registered.runs[0]
        .run_id
        .expect("the suite's run is launched");
    let listed = store.list_checkpoints().await.unwrap();
    let served = listed.iter().find(|c| c.id == checkpoint).unwrap();
    assert_eq!(served.parallel_layout, "tp=1 dp=2");
    assert_eq!(served.replica_urls.len(), 1);
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    assert_eq!(
        manifest.serving.as_ref().unwrap().plan.replicas,
        2,
        "the plan is in the manifest"
    );
    assert_eq!(
        manifest.fingerprint.served_model.as_deref(),
        Some("weights/step-100")
    );
    assert_eq!(
        latest_launch(store.as_ref(), checkpoint).await.state,
        LaunchState::Requested
    );
    assert!(
        !store
            .active_runs()
            .await
            .unwrap()
            .iter()
            .any(|active| active.id == run),
        "no worker claims from a run whose servers are not healthy"
    );
    let views = arbiter_engine::serving::launches(store.as_ref(), Some(checkpoint))
        .await
        .unwrap();
    assert_eq!(
        views[0].tokens_to_generate,
        Some(60 * 32),
        "60 answers of at most 32 tokens"
    );
    // A second checkpoint on the same launcher gets ports of its own.
    let neighbour = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &Announcement {
            name: "served-neighbour".into(),
            training_run: Some("elsewhere".into()),
            trigger_suites: Some(false),
            ..announcement.clone()
        },
        None,
    )
    .await
    .unwrap();
    let checkpoints = store.list_checkpoints().await.unwrap();
    let neighbour = checkpoints
        .iter()
        .find(|c| c.id == neighbour.checkpoint_id)
        .unwrap();
    assert!(
        ![&served.base_url, &served.replica_urls[0]].contains(&&neighbour.base_url),
        "{} and {:?}",
        neighbour.base_url,
        served
    );
    // A second registration on the same engine gets other ports; an engine no launcher
    // offers is refused and stores nothing.
    let refused = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &Announcement {
            name: "served-elsewhere".into(),
            serve: Some(ServeRequest {
                engine: "vllm".into(),
                path: "/w".into(),
                plan: arbiter_domain::serving::plan::PlanRequest {
                    params_billions: Some(8.0),
                    gpus_per_node: Some(1),
                    gpu_memory_gib: Some(80.0),
                    ..Default::default()
                },
            }),
            ..announcement.clone()
        },
        None,
    )
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("no running launcher starts `vllm`"),
        "{refused}"
    );
    assert!(!store
        .list_checkpoints()
        .await
        .unwrap()
        .iter()
        .any(|c| c.name == "served-elsewhere"));

    // A worker runs throughout; the run waits for its servers.
    let (stop, shutdown) = watch::channel(false);
    let worker = tokio::spawn(run_worker(
        store.clone(),
        arbiter_testkit::pipeline::test_worker("served"),
        shutdown,
    ));
    sims.round(store.as_ref()).await.unwrap();
    let launch = latest_launch(store.as_ref(), checkpoint).await;
    if launch.state == LaunchState::Starting {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let progress = arbiter_engine::runs::run_progress(store.as_ref(), run)
            .await
            .unwrap();
        assert_eq!(
            progress.done, 0,
            "nothing is claimed before the servers are healthy"
        );
    }
    rounds_until(&mut sims, store.as_ref(), 30, || async {
        latest_launch(store.as_ref(), checkpoint).await.state == LaunchState::Healthy
    })
    .await;

    // A replica killed mid-run is restarted; the run finishes with every identity once.
    let launch_id = latest_launch(store.as_ref(), checkpoint).await.id;
    rounds_until(&mut sims, store.as_ref(), 60, || async {
        arbiter_engine::runs::run_progress(store.as_ref(), run)
            .await
            .unwrap()
            .done
            >= 5
    })
    .await;
    let pid = sims.replica_pids(launch_id)[0].expect("replica 0 runs");
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    rounds_until(&mut sims, store.as_ref(), 30, || async {
        latest_launch(store.as_ref(), checkpoint).await.restarts == 1
    })
    .await;
    rounds_until(&mut sims, store.as_ref(), 120, || async {
        store.finish_run_if_done(run).await.unwrap()
    })
    .await;
    let progress = arbiter_engine::runs::run_progress(store.as_ref(), run)
        .await
        .unwrap();
    assert_eq!((progress.done, progress.expected), (60, 60), "nothing lost");
    assert_eq!(progress.errors, 0, "no answer failed: {progress:?}");
    assert_eq!(
        store.run_outcomes(run).await.unwrap().len(),
        60,
        "none duplicated"
    );

    // Idle for a second after its last run: retired, its servers stopped.
    rounds_until(&mut sims, store.as_ref(), 30, || async {
        latest_launch(store.as_ref(), checkpoint).await.state == LaunchState::Retired
    })
    .await;
    let retired = latest_launch(store.as_ref(), checkpoint).await;
    let times = retired.startup(arbiter_store::now_ms());
    assert!(
        times.startup_ms.is_some() && times.load_ms.is_some() && times.serving_ms.unwrap() > 0,
        "{times:?}"
    );
    assert!(
        retired
            .failure
            .as_deref()
            .unwrap_or_default()
            .contains("replica 0 exited"),
        "{retired:?}"
    );
    assert!(sims.replica_pids(retired.id).is_empty());
    assert!(
        reqwest::get(retired.urls[0].replace("/v1", "/health"))
            .await
            .is_err(),
        "the server stopped"
    );

    // A later run on the checkpoint starts its servers once more, and they retire again.
    let again = launched(store.as_ref(), eval, checkpoint).await;
    assert_eq!(again.run_id, run, "the same manifest is the same run");
    // The same requests under another eval were all answered before: that run completes at
    // launch, and no server is started for it.
    let same_requests = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            name: "qa again".into(),
            ..qa.clone()
        },
        None,
    )
    .await
    .unwrap();
    let answered = launched(store.as_ref(), same_requests, checkpoint).await;
    assert_eq!(answered.status, arbiter_domain::run::RunStatus::Completed);
    assert_eq!(
        latest_launch(store.as_ref(), checkpoint).await.id,
        retired.id
    );
    let other_eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            name: "qa-once".into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Q: {input}".into(),
            max_tokens: 16,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: String::new(),
            options: Default::default(),
        },
        None,
    )
    .await
    .unwrap();
    let second = launched(store.as_ref(), other_eval, checkpoint)
        .await
        .run_id;
    let relaunch = latest_launch(store.as_ref(), checkpoint).await;
    assert_ne!(relaunch.id, retired.id);
    assert_eq!(
        relaunch.urls,
        [served.base_url.clone(), served.replica_urls[0].clone()],
        "the ports it was registered on, so the URLs frozen in its runs hold"
    );
    rounds_until(&mut sims, store.as_ref(), 120, || async {
        store.finish_run_if_done(second).await.unwrap()
    })
    .await;
    rounds_until(&mut sims, store.as_ref(), 30, || async {
        latest_launch(store.as_ref(), checkpoint).await.state == LaunchState::Retired
    })
    .await;
    stop.send(true).unwrap();
    worker.await.unwrap();
    // The first launch answered the serving canary; the relaunch did not ask it again.
    let first = store
        .list_launches(Some(checkpoint), 10)
        .await
        .unwrap()
        .pop()
        .unwrap();
    let reading = first.canary.expect("the first launch's canary reading");
    assert!(reading.perplexity.is_some_and(|p| p > 1.0), "{reading:?}");
    assert!(
        reading.answers.iter().all(|answer| !answer.is_empty()),
        "{reading:?}"
    );
    assert_eq!(reading.chat_error, None);
    assert!(latest_launch(store.as_ref(), checkpoint)
        .await
        .canary
        .is_none());

    // A later checkpoint of the run whose servers score the canary text far worse (a broken
    // conversion: here a simulator that knows nothing) is held, its suite paused with the
    // reason; a person who resumes it runs it anyway, without asking the canary again.
    let weak_sim = format!(
        "'{}' sim --addr {{host}}:{{port}} --model {{model}}:0.0",
        env!("CARGO_BIN_EXE_arbiter")
    );
    let mut weak = launcher(
        "weak",
        ServingEngine::ArbiterModel,
        weak_sim,
        policy,
        logs.path(),
    );
    weak.round(store.as_ref()).await.unwrap();
    let step_200 = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &Announcement {
            name: "served-step-200".into(),
            training_step: Some(200),
            serve: Some(ServeRequest {
                engine: "arbiter_model".into(),
                path: "weights/step-200".into(),
                plan: Default::default(),
            }),
            ..announcement.clone()
        },
        None,
    )
    .await
    .unwrap();
    let held_run = step_200.runs[0]
        .run_id
        .expect("the suite's run is launched");
    // A second run on it, as if its launch were still planning it when the canary holds the
    // checkpoint: the hold pauses it too.
    let launch_other_eval = || {
        arbiter_engine::runs::launch_run(
            store.as_ref(),
            other_eval,
            step_200.checkpoint_id,
            arbiter_domain::run::Priority::Scheduled,
            "default",
            None,
        )
    };
    let planning = launch_other_eval().await.unwrap().run_id;
    backend
        .execute(&format!(
            "UPDATE runs SET status = 'expanding' WHERE id = {planning}"
        ))
        .await;
    rounds_until(&mut weak, store.as_ref(), 60, || async {
        latest_launch(store.as_ref(), step_200.checkpoint_id)
            .await
            .state
            == LaunchState::Held
    })
    .await;
    let held = latest_launch(store.as_ref(), step_200.checkpoint_id).await;
    let reason = held.failure.clone().unwrap();
    assert!(
        reason.contains("perplexity") && reason.contains("served-step-100"),
        "{reason}"
    );
    let paused = arbiter_engine::runs::run_progress(store.as_ref(), held_run)
        .await
        .unwrap();
    assert_eq!(paused.status, RunStatus::Paused);
    assert!(paused
        .last_error
        .unwrap_or_default()
        .contains("held by the serving canary"));
    assert_eq!(
        arbiter_engine::runs::run_progress(store.as_ref(), planning)
            .await
            .unwrap()
            .status,
        RunStatus::Paused,
        "a run still being planned is held too"
    );
    // A new run would start its servers past the hold: refused, with the reason.
    let refused = launch_other_eval().await.unwrap_err();
    assert!(
        refused.to_string().contains("held by the serving canary"),
        "{refused}"
    );
    let lead = arbiter_testkit::fixtures::team_member(
        store.as_ref(),
        "lead",
        arbiter_domain::accounts::Role::Lead,
        "default",
    )
    .await;
    arbiter_engine::runs::change_run_state(store.as_ref(), &lead, planning, "cancel")
        .await
        .unwrap();
    arbiter_engine::runs::change_run_state(store.as_ref(), &lead, held_run, "resume")
        .await
        .unwrap();
    rounds_until(&mut weak, store.as_ref(), 30, || async {
        latest_launch(store.as_ref(), step_200.checkpoint_id)
            .await
            .state
            == LaunchState::Healthy
    })
    .await;
    assert!(latest_launch(store.as_ref(), step_200.checkpoint_id)
        .await
        .canary
        .is_none());
    weak.stop_all(store.as_ref()).await;

    // A server that never answers its health check: the launch fails with the log's tail and
    // the run waiting for it is cancelled with the reason.
    let broken = launcher(
        "broken",
        ServingEngine::Sglang,
        "sh -c 'echo loading {path} on port {port}; echo error: the weights are corrupt >&2; sleep 30'".into(),
        LaunchPolicy { health_timeout_ms: 1_500, ..policy },
        logs.path(),
    );
    let mut broken = broken;
    broken.round(store.as_ref()).await.unwrap();
    let bad = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &Announcement {
            name: "served-broken".into(),
            serve: Some(ServeRequest {
                engine: "sglang".into(),
                path: "/weights/broken.gguf".into(),
                plan: arbiter_domain::serving::plan::PlanRequest {
                    params_billions: Some(1.0),
                    gpus_per_node: Some(1),
                    gpu_memory_gib: Some(80.0),
                    ..Default::default()
                },
            }),
            ..announcement.clone()
        },
        None,
    )
    .await
    .unwrap();
    let waiting = bad.runs[0].run_id.expect("the suite's run is launched");
    rounds_until(&mut broken, store.as_ref(), 30, || async {
        latest_launch(store.as_ref(), bad.checkpoint_id).await.state == LaunchState::Failed
    })
    .await;
    let failed = latest_launch(store.as_ref(), bad.checkpoint_id).await;
    assert!(
        failed.failure.as_deref().unwrap().contains("not healthy"),
        "{failed:?}"
    );
    let tail = failed.log_tail.unwrap();
    assert!(
        tail.contains("loading /weights/broken.gguf") && tail.contains("the weights are corrupt"),
        "{tail}"
    );
    let cancelled = arbiter_engine::runs::run_progress(store.as_ref(), waiting)
        .await
        .unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert!(
        cancelled
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("its servers failed: not healthy"),
        "{cancelled:?}"
    );

    // A launcher that stopped beating for good: its launches fail (the monitor's round does
    // this), and their runs are cancelled with the reason rather than left waiting.
    let ghost = launcher(
        "ghost",
        ServingEngine::Vllm,
        "vllm serve {path}".into(),
        policy,
        logs.path(),
    );
    store
        .heartbeat_launcher(&ghost.info(), arbiter_store::now_ms())
        .await
        .unwrap();
    let orphaned = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &Announcement {
            name: "served-orphaned".into(),
            training_run: Some("elsewhere".into()),
            serve: Some(ServeRequest {
                engine: "vllm".into(),
                path: "/weights/orphaned".into(),
                plan: arbiter_domain::serving::plan::PlanRequest {
                    params_billions: Some(1.0),
                    gpus_per_node: Some(1),
                    gpu_memory_gib: Some(80.0),
                    ..Default::default()
                },
            }),
            ..announcement.clone()
        },
        None,
    )
    .await
    .unwrap();
    let stranded = orphaned.runs[0]
        .run_id
        .expect("the suite's run is launched");
    let long_ago = arbiter_store::now_ms() - arbiter_domain::serving::LAUNCHER_GONE_MS - 1;
    store
        .heartbeat_launcher(&ghost.info(), long_ago)
        .await
        .unwrap();
    let now = arbiter_store::now_ms();
    let failed = store
        .fail_abandoned_launches(now - arbiter_domain::serving::LAUNCHER_GONE_MS, now)
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    let stranded = arbiter_engine::runs::run_progress(store.as_ref(), stranded)
        .await
        .unwrap();
    assert_eq!(stranded.status, RunStatus::Cancelled);
    assert!(stranded
        .last_error
        .unwrap_or_default()
        .contains("launcher `ghost` stopped"));
    backend.tear_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_checkpoints_start_run_recover_and_retire_on_sqlite() {
    scenario(TestBackend::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_checkpoints_start_run_recover_and_retire_on_postgres() {
    scenario(TestBackend::postgres().await).await;
}
