//! The Kubernetes launcher against a recorded API conversation (`kubernetes/conversation.json`):
//! a stand-in API server answers each request with the conversation's next response and
//! notes any request the conversation does not expect. The launcher tidies a stale replica,
//! applies a served checkpoint's two replicas, waits for their pods, reads the canary, lets the
//! run finish; a new launcher process takes the servers over (tidying nothing live, counting
//! no restart); it counts a container killed for memory as a restart (with its crashed log in
//! the tail), retires and deletes them; a second checkpoint whose image cannot be pulled fails at
//! once with the reason, its run cancelled and its objects deleted. The replicas' "pods" are
//! two simulators on the ports the Services would have.

use arbiter_domain::run::RunStatus;
use arbiter_domain::serving::kubernetes::{replica_objects, ReplicaSet};
use arbiter_domain::serving::launch::LaunchState;
use arbiter_domain::serving::ServingEngine;
use arbiter_engine::serving::config::{ClusterLauncherConfig, LauncherConfig};
use arbiter_engine::serving::kubernetes::{ClusterLauncher, ClusterServers};
use arbiter_engine::serving::lifecycle::Servers as _;
use arbiter_engine::serving::ServeRequest;
use arbiter_engine::suites::Announcement;
use arbiter_sim::SimConfig;
use arbiter_store::Store;
use arbiter_testkit::fixtures::latest_launch;
use arbiter_testkit::pipeline::{open_store, sim_model, work_until_complete};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CONVERSATION: &str = include_str!("kubernetes/conversation.json");
const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");

/// The conversation so far: what was asked, and what did not match.
#[derive(Default)]
struct Replay {
    exchanges: Vec<Value>,
    next: usize,
    unexpected: Vec<String>,
    /// Each apply's body, by path.
    applied: BTreeMap<String, Value>,
    apply_types: Vec<String>,
}

type Shared = Arc<Mutex<Replay>>;

fn query_map(uri: &Uri) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

async fn answer(
    axum::extract::State(replay): axum::extract::State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let mut replay = replay.lock().unwrap();
    let asked = format!("{method} {uri}");
    let Some(exchange) = replay.exchanges.get(replay.next).cloned() else {
        replay
            .unexpected
            .push(format!("{asked}: the conversation is over"));
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the conversation is over",
        )
            .into_response();
    };
    let query = query_map(&uri);
    let expected_query = exchange["query"].as_object().unwrap();
    let query_matches = query.len() == expected_query.len()
        && expected_query
            .iter()
            .all(|(key, value)| query.get(key).map(String::as_str) == value.as_str());
    if exchange["method"] != method.as_str() || exchange["path"] != uri.path() || !query_matches {
        let step = replay.next;
        replay.unexpected.push(format!(
            "{asked} where step {step} expected {} {} {}",
            exchange["method"], exchange["path"], exchange["query"]
        ));
        return (StatusCode::INTERNAL_SERVER_ERROR, "not in the conversation").into_response();
    }
    replay.next += 1;
    let status = StatusCode::from_u16(exchange["status"].as_u64().unwrap() as u16).unwrap();
    if exchange["echo"] == true {
        // The API answers an apply with the object as stored: what was sent, plus the fields
        // the server sets.
        let mut object: Value = serde_json::from_slice(&body).unwrap();
        object["metadata"]["uid"] = Value::from(format!("uid-{}", replay.next));
        object["metadata"]["resourceVersion"] = Value::from("48150");
        object["metadata"]["creationTimestamp"] = Value::from("2026-12-06T08:00:00Z");
        replay.apply_types.push(
            headers
                .get("content-type")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_string(),
        );
        replay
            .applied
            .insert(uri.path().to_string(), object.clone());
        return (status, axum::Json(object)).into_response();
    }
    if let Some(text) = exchange["text"].as_str() {
        return (status, text.to_string()).into_response();
    }
    (status, axum::Json(exchange["json"].clone())).into_response()
}

/// The conversation with the replicas' names filled in.
fn conversation(names: &[(&str, String)]) -> Vec<Value> {
    let mut text = CONVERSATION.to_string();
    for (placeholder, name) in names {
        text = text.replace(placeholder, name);
    }
    let document: Value = serde_json::from_str(&text).unwrap();
    document["exchanges"].as_array().unwrap().clone()
}

async fn api_server(replay: Shared) -> String {
    let app = axum::Router::new().fallback(answer).with_state(replay);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

/// Three consecutive ports nothing listens on, the first two held by listeners for the
/// replicas' simulators.
async fn replica_ports() -> (u16, Vec<tokio::net::TcpListener>) {
    loop {
        let first = 20_000 + (rand_port() % 30_000);
        let mut listeners = Vec::new();
        for port in first..first + 2 {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => listeners.push(listener),
                Err(_) => break,
            }
        }
        let third_free = std::net::TcpListener::bind(("127.0.0.1", first + 2)).is_ok();
        if listeners.len() == 2 && third_free {
            return (first, listeners);
        }
    }
}

fn rand_port() -> u16 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u16
}

fn config(first_port: u16) -> ClusterLauncherConfig {
    let file = format!(
        r#"
kind = "kubernetes"
id = "cluster-test"
namespace = "evals"
ports = "{first_port}-{}"
model_claim = "checkpoints"
model_mount = "/models"
replica_url = "http://127.0.0.1:{{port}}/v1"
health_timeout_seconds = 600
idle_seconds = 0
max_restarts = 2

[engines.simulator]
image = "arbiter:test"
command = "arbiter sim --addr {{host}}:{{port}} --model {{model}}:0.8"
"#,
        first_port + 2
    );
    match LauncherConfig::parse(&file).unwrap() {
        LauncherConfig::Kubernetes(config) => config,
        LauncherConfig::Local(_) => unreachable!(),
    }
}

async fn round(launcher: &mut ClusterLauncher, store: &dyn Store) {
    launcher.round(store).await.unwrap();
}

fn announce(name: &str, replicas: u32) -> Announcement {
    Announcement {
        name: name.into(),
        model: "k8s-model".into(),
        trigger_suites: Some(false),
        serve: Some(ServeRequest {
            engine: "simulator".into(),
            path: format!("/models/{name}"),
            plan: arbiter_domain::serving::plan::PlanRequest {
                replicas: Some(replicas),
                ..Default::default()
            },
        }),
        ..Announcement::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_launcher_applies_watches_restarts_retires_and_fails_through_the_api() {
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let (first_port, listeners) = replica_ports().await;
    for listener in listeners {
        let sim = SimConfig {
            models: vec![sim_model(
                "k8s-model",
                arbiter_sim::SimModelKind::Answerer,
                0.8,
                None,
            )],
            latency_ms_min: 1,
            latency_ms_max: 3,
            ..SimConfig::demo()
        };
        tokio::spawn(arbiter_sim::serve(sim, listener));
    }
    let step_name =
        |port: u16| arbiter_domain::serving::kubernetes::replica_name("k8s-step-100", port);
    let names = [
        ("{r0}", step_name(first_port)),
        ("{r1}", step_name(first_port + 1)),
        (
            "{b0}",
            arbiter_domain::serving::kubernetes::replica_name("k8s-broken", first_port + 2),
        ),
    ];
    let replay: Shared = Arc::new(Mutex::new(Replay {
        exchanges: conversation(&names),
        ..Replay::default()
    }));
    let api = api_server(replay.clone()).await;
    let cluster = config(first_port);
    let connect = || {
        let client = kube::Client::try_from(kube::Config::new(api.parse().unwrap())).unwrap();
        let mut launcher = ClusterServers::with_client(cluster.clone(), client);
        launcher
            .servers_mut()
            .set_tidy_every(Duration::from_secs(3600));
        launcher
    };
    let mut launcher = connect();
    let unexpected = |replay: &Shared| replay.lock().unwrap().unexpected.clone();

    // First round: announced, and the stale replica it left labelled is deleted.
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    assert_eq!(replay.lock().unwrap().next, 4);

    let registered = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &announce("k8s-step-100", 2),
        None,
    )
    .await
    .unwrap();
    let checkpoint = registered.checkpoint_id;
    let listed = store.list_checkpoints().await.unwrap();
    let served = listed.iter().find(|c| c.id == checkpoint).unwrap();
    assert_eq!(
        (served.base_url.clone(), served.replica_urls.clone()),
        (
            format!("http://127.0.0.1:{first_port}/v1"),
            vec![format!("http://127.0.0.1:{}/v1", first_port + 1)]
        ),
        "the launcher's URL rule names the replicas"
    );
    let revision =
        arbiter_engine::catalog::upload_dataset(store.as_ref(), "qa", "qa.jsonl", SAMPLE, None)
            .await
            .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &arbiter_testkit::fixtures::eval_form("qa", revision.dataset_id, 1),
        None,
    )
    .await
    .unwrap();
    let run = arbiter_testkit::pipeline::launch(store.as_ref(), eval, checkpoint).await;
    assert_eq!(
        latest_launch(store.as_ref(), checkpoint).await.id,
        1,
        "the conversation's first launch"
    );

    // Applied: two Deployments and two Services, server-side, exactly the domain's objects.
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    assert_eq!(
        latest_launch(store.as_ref(), checkpoint).await.state,
        LaunchState::Starting
    );
    let expected = replica_objects(
        &cluster.engines[&ServingEngine::Simulator],
        &ReplicaSet {
            launcher: "cluster-test",
            launch: 1,
            checkpoint: "k8s-step-100",
            served_model: "k8s-model",
            ports: &[first_port, first_port + 1],
        },
        &store.serving_of(checkpoint).await.unwrap().unwrap(),
    )
    .unwrap();
    {
        let replay = replay.lock().unwrap();
        assert!(replay
            .apply_types
            .iter()
            .all(|kind| kind == "application/apply-patch+yaml"));
        for object in &expected {
            let name = object["metadata"]["name"].as_str().unwrap();
            let path = match object["kind"].as_str().unwrap() {
                "Deployment" => format!("/apis/apps/v1/namespaces/evals/deployments/{name}"),
                _ => format!("/api/v1/namespaces/evals/services/{name}"),
            };
            let mut sent = replay.applied[&path].clone();
            for field in ["uid", "resourceVersion", "creationTimestamp"] {
                sent["metadata"].as_object_mut().unwrap().remove(field);
            }
            assert_eq!(&sent, object, "{path}");
        }
    }

    // Pods pending: still starting. Both ready: the canary is read off the replicas and the
    // launch is healthy.
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(
        latest_launch(store.as_ref(), checkpoint).await.state,
        LaunchState::Starting
    );
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    let healthy = latest_launch(store.as_ref(), checkpoint).await;
    assert_eq!(healthy.state, LaunchState::Healthy, "{healthy:?}");
    assert!(healthy
        .canary
        .is_some_and(|reading| reading.perplexity.is_some()));

    let progress = work_until_complete(
        store.clone(),
        &[run],
        arbiter_testkit::pipeline::test_worker("k8s"),
    )
    .await;
    assert_eq!(
        (progress[0].status, progress[0].done, progress[0].errors),
        (RunStatus::Completed, 60, 0),
        "{progress:?}"
    );

    // The launcher's process is replaced: the new one finds every object live (deletes none),
    // applies them again and, every replica still ready, keeps the launch healthy.
    launcher.stop_all(store.as_ref()).await;
    let mut launcher = connect();
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    let taken_over = latest_launch(store.as_ref(), checkpoint).await;
    assert_eq!(
        (taken_over.state, taken_over.restarts),
        (LaunchState::Healthy, 0)
    );

    // A container killed for memory: a restart, with the crashed container's log kept.
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    let restarting = latest_launch(store.as_ref(), checkpoint).await;
    assert_eq!(
        (restarting.state, restarting.restarts),
        (LaunchState::Restarting, 1)
    );
    assert_eq!(
        restarting.failure.as_deref(),
        Some("replica 1 exited (exit code 137, OOMKilled)")
    );
    let tail = restarting.log_tail.unwrap();
    assert!(
        tail.contains("CUDA out of memory")
            && tail.contains("waits: CrashLoopBackOff")
            && tail.contains("Uvicorn running"),
        "{tail}"
    );
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(
        latest_launch(store.as_ref(), checkpoint).await.state,
        LaunchState::Healthy
    );

    // Idle with nothing left to run: retired, its objects deleted (one already gone).
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    let retired = latest_launch(store.as_ref(), checkpoint).await;
    assert_eq!(retired.state, LaunchState::Retired);
    let tail = retired.log_tail.unwrap();
    assert!(
        tail.contains("before its last restart:\nRuntimeError: CUDA out of memory")
            && tail.contains("200 OK /v1/chat/completions"),
        "{tail}"
    );
    assert!(launcher.servers().held().is_empty());

    // An image that cannot be pulled fails the launch at once, with the reason; its run is
    // cancelled and its objects deleted.
    let broken = arbiter_engine::suites::register_announced(
        store.as_ref(),
        &announce("k8s-broken", 1),
        None,
    )
    .await
    .unwrap();
    let waiting =
        arbiter_testkit::pipeline::launch(store.as_ref(), eval, broken.checkpoint_id).await;
    assert_eq!(
        latest_launch(store.as_ref(), broken.checkpoint_id).await.id,
        2
    );
    round(&mut launcher, store.as_ref()).await;
    round(&mut launcher, store.as_ref()).await;
    assert_eq!(unexpected(&replay), Vec::<String>::new());
    let failed = latest_launch(store.as_ref(), broken.checkpoint_id).await;
    assert_eq!(failed.state, LaunchState::Failed);
    assert_eq!(
        failed.failure.as_deref(),
        Some("replica 0 cannot start: ImagePullBackOff: Back-off pulling image \"registry.internal/arbiter:nope\"")
    );
    assert!(
        failed.log_tail.as_deref().unwrap().contains("no log:")
            && failed.log_tail.as_deref().unwrap().contains("is Pending"),
        "{failed:?}"
    );
    let cancelled = arbiter_engine::runs::run_progress(store.as_ref(), waiting)
        .await
        .unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);

    // The cluster's servers outlive the launcher's process: stopping asks nothing of the API.
    launcher.stop_all(store.as_ref()).await;
    let replay = replay.lock().unwrap();
    assert_eq!(replay.unexpected, Vec::<String>::new());
    assert_eq!(
        replay.next,
        replay.exchanges.len(),
        "the whole conversation was held"
    );
}
