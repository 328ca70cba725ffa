//! The REST API and the CI commands end to end: token authentication and revocation, the
//! API's authorization matrix, its OpenAPI description, refusals that store nothing, and
//! `arbiter submit`'s verdict against a simulated better and worse checkpoint.

use crate::support::TestApp;
use arbiter_domain::accounts::Role;
use arbiter_domain::run::{RunProgress, RunStatus};
use arbiter_engine::dispatch::{run_worker, RetryPolicy, WorkerConfig};
use arbiter_sim::{SimConfig, SimModel};
use reqwest::{header, Method, StatusCode};
use serde_json::{json, Value};
use server::ci::{self, ApiClient, Baseline, SubmitManifest, Verdict};
use std::time::Duration;

const SAMPLE: &[u8] = include_bytes!("../../../public/samples/qa-basic.jsonl");

pub(crate) async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = TestApp::client().request(method, app.url(&format!("/api/v1{path}")));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    // An empty body (204) reads as null; any other body must be JSON.
    let value = match text.as_str() {
        "" => Value::Null,
        text => serde_json::from_str(text)
            .unwrap_or_else(|_| panic!("{path} answered {status} with non-JSON: {text}")),
    };
    (status, value)
}

#[tokio::test]
async fn tokens_authenticate_until_revoked_expired_or_the_owner_is_deactivated() {
    let app = TestApp::spawn().await;
    let token = app.token_for(Role::Researcher).await;

    let (status, me) = send(&app, Method::GET, "/me", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["username"], "researcher");
    assert_eq!(me["role"], "researcher");

    // Missing, malformed, unknown and wrong-scheme credentials all read the same.
    let response = TestApp::client()
        .get(app.url("/api/v1/me"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()[header::WWW_AUTHENTICATE],
        "Bearer realm=\"arbiter\""
    );
    let refused = response.json::<Value>().await.unwrap()["error"].clone();
    assert!(refused.as_str().unwrap().contains("Bearer"), "{refused}");
    let unknown = format!("arb_{}", "x".repeat(40));
    for bad in ["nonsense", unknown.as_str(), &token[..token.len() - 1]] {
        let (status, body) = send(&app, Method::GET, "/me", Some(bad), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}");
        assert_eq!(body["error"], refused);
    }
    let basic = TestApp::client()
        .get(app.url("/api/v1/me"))
        .header(header::AUTHORIZATION, format!("Basic {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), StatusCode::UNAUTHORIZED);

    // The store keeps a hash and a prefix, never the token.
    let stored = app.store.api_tokens(None).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert!(token.starts_with(&stored[0].prefix));
    assert!(stored[0].last_used_at.is_some(), "use is recorded");
    let listing = serde_json::to_string(&stored).unwrap();
    assert!(!listing.contains(&token[12..]), "{listing}");

    // Revoked: refused at once. Another user cannot revoke it; an admin can.
    let researcher = app
        .store
        .find_user_credentials("researcher")
        .await
        .unwrap()
        .unwrap()
        .user;
    let annotator = app
        .store
        .find_user_credentials("annotator")
        .await
        .unwrap()
        .unwrap()
        .user;
    let now = arbiter_store::now_ms();
    let other = arbiter_engine::accounts::api_tokens::revoke_token(
        app.store.as_ref(),
        &annotator,
        stored[0].id,
        now,
    )
    .await
    .unwrap_err();
    assert_eq!(other.status_code(), 404);
    arbiter_engine::accounts::api_tokens::revoke_token(
        app.store.as_ref(),
        &researcher,
        stored[0].id,
        now,
    )
    .await
    .unwrap();
    let (status, _) = send(&app, Method::GET, "/me", Some(&token), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Expired: a token made with a 1-day lifetime is refused a day later.
    let (short, short_text) = arbiter_engine::accounts::api_tokens::create_token(
        app.store.as_ref(),
        &researcher,
        "short",
        Some(1),
        now,
    )
    .await
    .unwrap();
    let tomorrow = now + 86_400_000 + 1;
    assert!(app
        .store
        .user_for_token(
            &arbiter_engine::accounts::api_tokens::hash_token(&short_text),
            now
        )
        .await
        .unwrap()
        .is_some());
    assert!(app
        .store
        .user_for_token(
            &arbiter_engine::accounts::api_tokens::hash_token(&short_text),
            tomorrow
        )
        .await
        .unwrap()
        .is_none());
    assert!(!short.is_live(tomorrow));
    // Lifetimes and names are checked.
    for (name, days) in [("", None), ("ok", Some(0)), ("ok", Some(100_000))] {
        let refused = arbiter_engine::accounts::api_tokens::create_token(
            app.store.as_ref(),
            &researcher,
            name,
            days,
            now,
        )
        .await
        .unwrap_err();
        assert_eq!(refused.status_code(), 400, "{name:?} {days:?}");
    }

    // A deactivated owner's live token stops working.
    let lead_token = app.token_for(Role::Lead).await;
    assert_eq!(
        send(&app, Method::GET, "/me", Some(&lead_token), None)
            .await
            .0,
        StatusCode::OK
    );
    let lead = app
        .store
        .find_user_credentials("lead")
        .await
        .unwrap()
        .unwrap()
        .user;
    app.store
        .update_rater(
            lead.id,
            &arbiter_domain::annotation::pool::RaterUpdate {
                active: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        send(&app, Method::GET, "/me", Some(&lead_token), None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
}

/// (method, path, body, may annotators and reviewers call it, expected success status).
fn api_routes() -> Vec<(Method, &'static str, Option<Value>, bool, StatusCode)> {
    vec![
        (Method::GET, "/me", None, true, StatusCode::OK),
        (Method::GET, "/datasets", None, false, StatusCode::OK),
        (Method::GET, "/datasets/1", None, false, StatusCode::OK),
        (Method::GET, "/checkpoints", None, false, StatusCode::OK),
        (Method::GET, "/endpoints", None, false, StatusCode::OK),
        (Method::GET, "/launches", None, false, StatusCode::OK),
        (
            Method::POST,
            "/serving/plan",
            Some(
                json!({"engine": "vllm", "path": "/m", "params_billions": 8, "gpus_per_node": 8, "gpu_memory_gib": 80}),
            ),
            false,
            StatusCode::OK,
        ),
        (
            Method::PATCH,
            "/endpoints/999",
            Some(json!({"max_in_flight": 8})),
            false,
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/evals", None, false, StatusCode::OK),
        (
            Method::GET,
            "/evals/999",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/runs", None, false, StatusCode::OK),
        (Method::GET, "/suites", None, false, StatusCode::OK),
        (Method::GET, "/webhooks", None, false, StatusCode::OK),
        (
            Method::GET,
            "/webhooks/deliveries",
            None,
            false,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/webhooks",
            Some(json!({"url": "http://127.0.0.1:9/hook", "events": ["run.completed"]})),
            false,
            StatusCode::CREATED,
        ),
        (
            Method::DELETE,
            "/webhooks/999",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/suites",
            Some(json!({"name": "NAME", "tier": "smoke", "eval_ids": [999]})),
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/suites/999",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/checkpoints/999/suites/nope",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/runs/999", None, false, StatusCode::NOT_FOUND),
        (
            Method::GET,
            "/runs/999/report",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/runs/999/agreement",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/runs/999/pause",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/compare?baseline=998&candidates=999",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/checkpoints",
            Some(json!({"name": "NAME", "endpoint_url": "http://127.0.0.1:9/v1", "model": "m"})),
            false,
            StatusCode::CREATED,
        ),
        (
            Method::POST,
            "/evals",
            Some(json!({"name": "NAME", "dataset_id": 1, "prompt_template": "Q: {input}"})),
            false,
            StatusCode::CREATED,
        ),
        (
            Method::POST,
            "/runs",
            Some(json!({"eval_id": 999, "checkpoint_id": 999})),
            false,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/annotation/items",
            Some(json!({"queue": "NAME", "items": [{"input": "q", "outputs": ["a"]}]})),
            false,
            StatusCode::CREATED,
        ),
        (
            Method::GET,
            "/annotation/items?queue=nope",
            None,
            false,
            StatusCode::NOT_FOUND,
        ),
    ]
}

#[tokio::test]
async fn every_api_route_refuses_anonymous_callers_and_the_wrong_role() {
    let app = TestApp::spawn().await;
    for (method, path, body, _, _) in api_routes() {
        let (status, answer) = send(&app, method.clone(), path, None, body).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "anonymous {method} {path}"
        );
        assert!(answer["error"].is_string());
    }
    for role in Role::ALL {
        let token = app.token_for(role).await;
        let results_role = matches!(role, Role::Researcher | Role::Lead | Role::Admin);
        for (method, path, body, open_to_all, success) in api_routes() {
            let body = body.map(|body| {
                serde_json::from_str(&body.to_string().replace("NAME", &format!("{path}-{role}")))
                    .unwrap()
            });
            let (status, answer) = send(&app, method.clone(), path, Some(&token), body).await;
            if results_role || open_to_all {
                assert_eq!(status, success, "{role} {method} {path}: {answer}");
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "{role} {method} {path}");
                assert!(answer["error"].as_str().unwrap().contains(role.as_str()));
            }
        }
    }
}

/// The object-level rows: another team's researcher has the right role for each route and is
/// still refused (403) on team `default`'s objects, which stay as they were; their owner is not.
#[tokio::test]
async fn api_routes_change_only_the_callers_teams_objects() {
    let app = TestApp::spawn().await;
    let objects = app.team_objects().await;
    let routes = [
        (
            Method::PATCH,
            format!("/endpoints/{}", objects.endpoint),
            Some(json!({"max_in_flight": 512})),
            StatusCode::OK,
        ),
        (
            Method::POST,
            format!(
                "/checkpoints/{}/suites/ours?priority=promotion",
                objects.checkpoint
            ),
            None,
            StatusCode::OK,
        ),
        (
            Method::POST,
            format!("/runs/{}/cancel", objects.run),
            None,
            StatusCode::NO_CONTENT,
        ),
        (
            Method::DELETE,
            format!("/suites/{}", objects.suite),
            None,
            StatusCode::NO_CONTENT,
        ),
    ];
    let runs_before = app.store.list_runs().await.unwrap().len();
    let vera = app.token_of("vera").await;
    for (method, path, body, _) in &routes {
        let (status, answer) = send(&app, method.clone(), path, Some(&vera), body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("team `default`")
                || answer["error"].as_str().unwrap().contains("owner"),
            "{answer}"
        );
    }
    assert_eq!(
        app.store.list_endpoints().await.unwrap()[0].max_in_flight,
        8
    );
    assert_eq!(app.store.list_runs().await.unwrap().len(), runs_before);
    assert_eq!(app.store.suites().await.unwrap().len(), 1);

    let owner = app.token_for(Role::Researcher).await;
    for (method, path, body, success) in routes {
        let (status, answer) = send(&app, method.clone(), &path, Some(&owner), body).await;
        assert_eq!(status, success, "{method} {path}: {answer}");
    }
    assert_eq!(
        app.store.list_endpoints().await.unwrap()[0].max_in_flight,
        512
    );
}

#[tokio::test]
async fn the_openapi_description_lists_every_route_and_is_public() {
    let app = TestApp::spawn().await;
    let (status, document) = send(&app, Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        document["components"]["securitySchemes"]["token"]["scheme"],
        "bearer"
    );
    let paths = document["paths"].as_object().unwrap();
    for (method, path, ..) in api_routes() {
        let template = path
            .split('?')
            .next()
            .unwrap()
            .replace("/999/pause", "/{id}/{action}")
            .replace("/suites/nope", "/suites/{suite}")
            .replace("/webhooks/999", "/webhooks/{id}")
            .replace("999", "{id}")
            .replace("/1", "/{id}");
        let operation = &paths[&format!("/api/v1{template}")][method.as_str().to_lowercase()];
        assert!(
            operation.is_object(),
            "{method} {template} is not documented"
        );
        assert!(operation["responses"].is_object());
    }
    // Every documented operation is served: without a token it is refused, never missing.
    for (path, operations) in paths {
        for method in operations.as_object().unwrap().keys() {
            let concrete = path
                .trim_start_matches("/api/v1")
                .replace("{id}", "1")
                .replace("{action}", "pause")
                .replace("{suite}", "smoke");
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, _) = send(&app, method.clone(), &concrete, None, None).await;
            let expected = if concrete == "/openapi.json" {
                StatusCode::OK
            } else {
                StatusCode::UNAUTHORIZED
            };
            assert_eq!(status, expected, "{method} {path}");
        }
    }
    // The report schema is spelled out, down to its intervals.
    let schemas = &document["components"]["schemas"];
    for name in [
        "Report",
        "CategoryReport",
        "Interval",
        "PairedCategory",
        "RunProgress",
        "Checkpoint",
    ] {
        assert!(schemas[name].is_object(), "schema {name} missing");
    }
    // Unknown API paths answer JSON 404, never the app's HTML page.
    let (status, answer) = send(&app, Method::GET, "/nothing-here", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(answer["error"].as_str().unwrap().contains("openapi.json"));
}

#[tokio::test]
async fn bad_requests_are_explained_and_store_nothing() {
    let app = TestApp::spawn().await;
    let token = app.token_for(Role::Researcher).await;
    let datasets_before = app.store.list_datasets().await.unwrap().len();

    // A dataset file with a broken line: 400 naming the file; nothing stored.
    let response = TestApp::client()
        .post(app.url("/api/v1/datasets?name=broken&file_name=b.jsonl"))
        .bearer_auth(&token)
        .body("{\"id\":\"a\",\"input\":\"q\",\"target\":\"t\"}\n{not json\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let answer: Value = response.json().await.unwrap();
    assert!(
        answer["error"].as_str().unwrap().starts_with("b.jsonl:"),
        "{answer}"
    );
    assert_eq!(
        app.store.list_datasets().await.unwrap().len(),
        datasets_before
    );

    // A good file: 201, then 200 with the same revision when uploaded again.
    let upload = |body: &'static [u8]| {
        TestApp::client()
            .post(app.url("/api/v1/datasets?name=qa&file_name=qa.jsonl"))
            .bearer_auth(&token)
            .body(body)
            .send()
    };
    let first = upload(SAMPLE).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["item_count"], 60);
    let again = upload(SAMPLE).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);

    // Malformed JSON, unknown fields and wrong types: JSON errors, not plain text.
    let response = TestApp::client()
        .post(app.url("/api/v1/checkpoints"))
        .bearer_auth(&token)
        .header(header::CONTENT_TYPE, "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("JSON"));
    let (status, answer) = send(
        &app,
        Method::POST,
        "/checkpoints",
        Some(&token),
        Some(json!({"name": "c", "endpoint_url": "http://h/v1", "model": "m", "modle": "typo"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("modle"),
        "{answer}"
    );
    let (status, answer) = send(&app, Method::GET, "/runs/abc", Some(&token), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");

    // Service-level refusals: a bad URL, a duplicate name, an unknown grader, an unknown
    // correction, names that match nothing. None stores anything.
    let checkpoints_before = app.store.list_checkpoints().await.unwrap().len();
    for (body, expected) in [
        (
            json!({"name": "c", "endpoint_url": "not a url", "model": "m"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "c", "endpoint_url": "http://h/v1", "model": "m", "training_step": -1}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "c", "endpoint_url": "http://h/v1", "model": "m", "input_usd_per_mtok": 1e9}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, answer) = send(
            &app,
            Method::POST,
            "/checkpoints",
            Some(&token),
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, expected, "{body}: {answer}");
    }
    assert_eq!(
        app.store.list_checkpoints().await.unwrap().len(),
        checkpoints_before
    );
    let (status, answer) = send(
        &app,
        Method::POST,
        "/evals",
        Some(&token),
        Some(json!({"name": "e", "dataset_id": first["dataset_id"], "prompt_template": "{input}", "grader": {"kind": "no_such_grader"}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("grader"));
    assert!(app.store.list_evals().await.unwrap().is_empty());
    let (status, answer) = send(
        &app,
        Method::POST,
        "/runs",
        Some(&token),
        Some(json!({"eval": "nope", "checkpoint": "nope"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("no eval named `nope`"));
    let (status, _) = send(
        &app,
        Method::POST,
        "/runs",
        Some(&token),
        Some(json!({"eval_id": 1, "eval": "x", "checkpoint_id": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, answer) = send(
        &app,
        Method::GET,
        "/compare?baseline=1&candidates=2&correction=magic",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["error"].as_str().unwrap().contains("holm"));
    assert!(app.store.list_runs().await.unwrap().is_empty());
}

fn fast_worker() -> WorkerConfig {
    let mut config = WorkerConfig::named("api-test");
    config.idle_poll = Duration::from_millis(20);
    config.retry = RetryPolicy {
        base_backoff: Duration::from_millis(20),
        attempt_timeout: Duration::from_secs(2),
        ..RetryPolicy::default()
    };
    config
}

#[tokio::test]
async fn submit_waits_reports_and_exits_non_zero_on_a_significant_regression() {
    let app = TestApp::spawn().await;
    let mut config = SimConfig::demo();
    config.models = vec![
        SimModel::parse_spec("strong:0.95").unwrap(),
        SimModel::parse_spec("weak:0.3").unwrap(),
    ];
    config.latency_ms_min = 1;
    config.latency_ms_max = 3;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(arbiter_sim::serve(config, listener));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(run_worker(app.store.clone(), fast_worker(), shutdown));

    // Everything through the API, as a CI job would.
    let token = app.token_for(Role::Researcher).await;
    let client = ApiClient::new(&format!("http://{}", app.address), &token).unwrap();
    let response = TestApp::client()
        .post(app.url("/api/v1/datasets?name=qa&file_name=qa.jsonl"))
        .bearer_auth(&token)
        .body(SAMPLE)
        .send()
        .await
        .unwrap();
    let revision: Value = response.json().await.unwrap();
    for (name, model, step) in [
        ("step-1000", "strong", 1000),
        ("step-2000", "weak", 2000),
        ("step-3000", "strong", 3000),
    ] {
        let _: Value = client
            .post(
                "registering",
                "/checkpoints",
                &json!({"name": name, "endpoint_url": sim_url, "model": model, "training_run": "pretrain", "training_step": step}),
            )
            .await
            .unwrap();
    }
    let _: Value = client
        .post(
            "defining",
            "/evals",
            &json!({"name": "qa-eval", "dataset_id": revision["dataset_id"], "prompt_template": "Question: {input}", "max_tokens": 64}),
        )
        .await
        .unwrap();

    let manifest = |checkpoint: &str, baseline: Option<Baseline>| SubmitManifest {
        launch: server::http::rest::LaunchRequest {
            eval: Some("qa-eval".into()),
            checkpoint: Some(checkpoint.into()),
            priority: Some("promotion".into()),
            ..Default::default()
        },
        baseline,
    };
    let submit_and_judge = |manifest: SubmitManifest| {
        let client = &client;
        async move {
            let run = ci::submit(client, &manifest).await.unwrap();
            let progress = ci::wait(client, run, Duration::from_secs(90))
                .await
                .unwrap()
                .expect("the run finishes");
            assert_eq!(progress.status, RunStatus::Completed);
            let verdict = ci::report(client, run, manifest.baseline.as_ref(), true)
                .await
                .unwrap();
            (run, verdict)
        }
    };

    let (baseline_run, verdict) = submit_and_judge(manifest("step-1000", None)).await;
    assert_eq!(
        verdict,
        Verdict {
            regressed: false,
            complete: true
        }
    );
    assert_eq!(verdict.exit_code(true), ci::EXIT_OK);

    // `wait` followed the run's server-sent events; a finished run's stream is one progress
    // event showing it finished, and then it ends.
    let events = TestApp::client()
        .get(app.url(&format!("/api/v1/runs/{baseline_run}/events")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(
        events.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let body = events.text().await.unwrap();
    let progress: Vec<&str> = body
        .split("\n\n")
        .filter(|event| event.starts_with("event: progress"))
        .collect();
    assert_eq!(progress.len(), 1, "{body}");
    let data: RunProgress =
        serde_json::from_str(progress[0].split_once("data: ").unwrap().1).unwrap();
    assert_eq!((data.id, data.status), (baseline_run, RunStatus::Completed));
    for (path, bearer, status) in [
        ("/api/v1/runs/999999/events", Some(&token), 404),
        (&*format!("/api/v1/runs/{baseline_run}/events"), None, 401),
    ] {
        let mut request = TestApp::client().get(app.url(path));
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        assert_eq!(request.send().await.unwrap().status(), status, "{path}");
    }

    // The weak checkpoint against the strong one, named by checkpoint: a regression, exit 1.
    let (weak_run, verdict) = submit_and_judge(manifest(
        "step-2000",
        Some(Baseline::Checkpoint("step-1000".into())),
    ))
    .await;
    assert!(verdict.regressed, "{verdict:?}");
    assert_eq!(verdict.exit_code(false), ci::EXIT_REGRESSION);

    // The strong one against the weak one, by run id: an improvement, exit 0.
    let (_, verdict) = submit_and_judge(manifest("step-3000", Some(Baseline::Run(weak_run)))).await;
    assert!(!verdict.regressed, "{verdict:?}");
    assert_eq!(verdict.exit_code(true), ci::EXIT_OK);

    // Submitting an identical manifest again finds the same run.
    let again = ci::submit(&client, &manifest("step-1000", None))
        .await
        .unwrap();
    assert_eq!(again, baseline_run);

    // The comparison's findings as the API reports them.
    let comparison: server::http::rest::ComparisonResponse = client
        .get(
            "comparing",
            &format!("/compare?baseline={baseline_run}&candidates={weak_run}"),
        )
        .await
        .unwrap();
    assert!(comparison.all_complete);
    assert!(comparison
        .regressions
        .iter()
        .any(|finding| finding.category == "all"));
    assert!(comparison
        .regressions
        .iter()
        .all(|finding| finding.delta.unwrap() < 0.0 && finding.adjusted_p < 0.05));
    let text = ci::format_comparison(&comparison);
    assert!(text.contains("REGRESSION"), "{text}");

    // A perplexity eval has no verdicts: more bits per byte is its regression.
    let _: Value = client
        .post(
            "defining",
            "/evals",
            &json!({"name": "qa-perplexity", "dataset_id": revision["dataset_id"], "prompt_template": "Question: {input}",
                    "max_tokens": 1, "api": "completions", "rolling": {"max_length": 16}}),
        )
        .await
        .unwrap();
    let perplexity = |checkpoint: &str, baseline: Option<Baseline>| SubmitManifest {
        launch: server::http::rest::LaunchRequest {
            eval: Some("qa-perplexity".into()),
            ..manifest(checkpoint, None).launch
        },
        baseline,
    };
    let (strong_bits, verdict) = submit_and_judge(perplexity("step-1000", None)).await;
    assert_eq!(verdict.exit_code(true), ci::EXIT_OK);
    let (weak_bits, verdict) = submit_and_judge(perplexity(
        "step-2000",
        Some(Baseline::Checkpoint("step-1000".into())),
    ))
    .await;
    assert!(verdict.regressed, "{verdict:?}");
    assert_eq!(verdict.exit_code(true), ci::EXIT_REGRESSION);
    let comparison: server::http::rest::ComparisonResponse = client
        .get(
            "comparing",
            &format!("/compare?baseline={strong_bits}&candidates={weak_bits}"),
        )
        .await
        .unwrap();
    let text = ci::format_comparison(&comparison);
    assert!(
        text.lines()
            .any(|line| line.contains("bits per byte") && line.ends_with("REGRESSION")),
        "{text}"
    );
    let report: server::http::rest::RunReport = client
        .get("reading the report", &format!("/runs/{weak_bits}/report"))
        .await
        .unwrap();
    assert!(ci::format_report(&report).contains("rolling likelihood over"));

    // A baseline checkpoint with no completed run of the eval is an error (exit 2), not a pass.
    let report = ci::report(
        &client,
        weak_run,
        Some(&Baseline::Checkpoint("nope".into())),
        true,
    )
    .await;
    assert!(report.unwrap_err().to_string().contains("no completed run"));

    // A rolled-back checkpoint is retracted with a reason: never a baseline again, and no
    // run is launched on it; refusals say why and change nothing.
    let checkpoints: Vec<Value> = client.get("listing", "/checkpoints").await.unwrap();
    let step_1000 = checkpoints
        .iter()
        .find(|checkpoint| checkpoint["name"] == "step-1000")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    let (app_ref, token_ref) = (&app, token.as_str());
    let retract = |id: i64, reason: &'static str| async move {
        let path = format!("/checkpoints/{id}/retract");
        let body = json!({ "reason": reason });
        send(app_ref, Method::POST, &path, Some(token_ref), Some(body)).await
    };
    let (status, answer) = retract(step_1000, " ").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("say why"),
        "{answer}"
    );
    let (status, _) = retract(999_999, "gone").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, answer) = retract(step_1000, "converted with the wrong tokenizer").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["checkpoint"]["retraction"]["reason"],
        "converted with the wrong tokenizer"
    );
    assert_eq!(answer["cancelled_runs"], json!([]), "its runs had finished");
    let (status, _) = retract(step_1000, "again").await;
    assert_eq!(status, StatusCode::CONFLICT);
    let report = ci::report(
        &client,
        weak_run,
        Some(&Baseline::Checkpoint("step-1000".into())),
        true,
    )
    .await;
    assert!(report
        .unwrap_err()
        .to_string()
        .contains("retracted checkpoint's runs are never baselines"),);
    let run: RunProgress = client
        .get("reading", &format!("/runs/{baseline_run}"))
        .await
        .unwrap();
    assert_eq!(
        run.checkpoint_retracted.as_deref(),
        Some("converted with the wrong tokenizer")
    );
    let (status, answer) = send(
        &app,
        Method::POST,
        "/runs",
        Some(&token),
        Some(json!({"eval": "qa-eval", "checkpoint": "step-1000"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("was retracted"),
        "{answer}"
    );

    // Manifest files parse with the same fields; unknown fields are refused.
    let parsed = SubmitManifest::parse(r#"{"eval": "qa-eval", "checkpoint": "step-2000", "baseline": {"checkpoint": "step-1000"}}"#).unwrap();
    assert_eq!(
        parsed.baseline,
        Some(Baseline::Checkpoint("step-1000".into()))
    );
    assert!(SubmitManifest::parse(r#"{"eval": "qa-eval", "checkpiont": "x"}"#).is_err());

    let _ = stop.send(true);
    worker.await.unwrap();
}

#[tokio::test]
async fn metrics_need_a_token_that_may_view_results_and_speak_prometheus() {
    let app = TestApp::spawn().await;
    let scrape = |token: Option<String>| {
        let mut request = TestApp::client().get(app.url("/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(
        scrape(None).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let annotator = app.token_for(Role::Annotator).await;
    assert_eq!(
        scrape(Some(annotator)).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    let researcher = app.token_for(Role::Researcher).await;
    let response = scrape(Some(researcher)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = response.text().await.unwrap();
    for metric in [
        "arbiter_queue_depth ",
        "arbiter_queue_claimed ",
        "arbiter_answers_last_hour ",
        "arbiter_workers_live ",
        "arbiter_human_backlog_tasks ",
        "arbiter_sla_breached_tasks ",
    ] {
        assert!(
            text.contains(&format!("{metric}0")),
            "{metric} missing: {text}"
        );
    }
    assert!(text.contains("# HELP arbiter_queue_depth"));
    assert!(text.trim_end().ends_with("# EOF"));
}

/// A structured suite over the REST API: items with any fields, an eval with a field mapping,
/// a Jinja template, a system prompt, stop sequences and engine parameters; its preview shows
/// the exact body; bad mappings and parameters are 400s naming the problem, storing nothing.
#[tokio::test]
async fn structured_evals_are_defined_and_previewed_over_the_api() {
    let app = TestApp::spawn().await;
    let token = app.token_for(Role::Researcher).await;
    let items = [
        json!({"id": "q1", "question": "Capital of France?", "choices": ["Berlin", "Paris"], "answer": 1, "meta": {"subject": "geography"}}),
        json!({"id": "q2", "question": "2 + 2?", "choices": ["4", "5"], "answer": 0, "meta": {"subject": "math"}}),
    ];
    let body: String = items.iter().map(|item| item.to_string() + "\n").collect();
    let response = TestApp::client()
        .post(app.url("/api/v1/datasets?name=mc&file_name=mc.jsonl"))
        .bearer_auth(&token)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let dataset_id = response.json::<Value>().await.unwrap()["dataset_id"].clone();
    let eval = |name: &str, changes: Value| {
        let mut request = json!({
            "name": name,
            "dataset_id": dataset_id,
            "prompt_template": "{{ question }}\n{{ choices | lettered }}\nAnswer:",
            "system_prompt": "Answer {{ meta.subject }} questions with a letter.",
            "fields": {"input": "question", "target": "answer", "choices": "choices", "category": "meta.subject"},
            "stop": ["\n\n"],
            "extra": {"top_k": 5},
            "grader": "multiple_choice@1"
        });
        for (key, value) in changes.as_object().unwrap() {
            request[key] = value.clone();
        }
        request
    };
    let evals_before = app.store.list_evals().await.unwrap().len();
    for (changes, naming) in [
        (
            json!({"fields": {"input": "question", "target": "answer", "choices": "question"}}),
            "item `q1` field `question` must be a list of answer options",
        ),
        (json!({"extra": {"top_k": "five"}}), "`top_k` is \"five\""),
        (
            json!({"prompt_template": "{{ question }} {{ hint }}"}),
            "uses `hint`, which the item does not have",
        ),
        (json!({"api": "completions"}), "need the chat API"),
    ] {
        let (status, answer) = send(
            &app,
            Method::POST,
            "/evals",
            Some(&token),
            Some(eval("bad", changes)),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(naming),
            "{answer}"
        );
    }
    assert_eq!(app.store.list_evals().await.unwrap().len(), evals_before);

    let (status, created) = send(
        &app,
        Method::POST,
        "/evals",
        Some(&token),
        Some(eval("mc", json!({}))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["template_syntax"], "jinja");
    assert_eq!(created["fields"]["category"], "meta.subject");
    assert_eq!(created["extra"]["top_k"], 5);
    let id = created["id"].as_i64().unwrap();
    let (status, preview) = send(
        &app,
        Method::GET,
        &format!("/evals/{id}/preview?case_id=q2"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["route"], "chat/completions");
    assert_eq!(preview["targets"], json!(["A"]));
    assert_eq!(preview["category"], "math");
    assert_eq!(
        preview["body"]["messages"],
        json!([
            {"role": "system", "content": "Answer math questions with a letter."},
            {"role": "user", "content": "2 + 2?\nA. 4\nB. 5\nAnswer:"}
        ])
    );
    assert_eq!(preview["body"]["stop"], json!(["\n\n"]));
    assert_eq!(preview["body"]["top_k"], 5);
    let (status, _) = send(
        &app,
        Method::GET,
        &format!("/evals/{id}/preview?case_id=nope"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(
        &app,
        Method::GET,
        &format!("/evals/{id}/preview?casse_id=q1"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "unknown parameters are refused"
    );
}

/// The pay ledger names what each rater earns: leads and admins read it, no one else; a bad
/// range or period is explained with a 400.
#[tokio::test]
async fn the_pay_ledger_is_for_leads_only_and_explains_bad_ranges() {
    let app = TestApp::spawn().await;
    let path = "/pay/ledger?from=2026-11-01&until=2026-11-30&period=month";
    let (status, _) = send(&app, Method::GET, path, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for role in Role::ALL {
        let token = app.token_for(role).await;
        let (status, answer) = send(&app, Method::GET, path, Some(&token), None).await;
        if matches!(role, Role::Lead | Role::Admin) {
            assert_eq!(status, StatusCode::OK, "{role}: {answer}");
            assert_eq!(answer["period"], "month");
            assert!(answer["rows"].is_array() && answer["totals"].is_array());
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "{role}: {answer}");
        }
    }
    let lead = app.token_for(Role::Lead).await;
    for (bad, says) in [
        ("from=2026-11-30&until=2026-11-01", "ends"),
        (
            "from=2026-11-01&until=2026-11-30&period=day",
            "`week` or `month`",
        ),
        ("from=2026-11-31&until=2026-12-01", "not a date"),
    ] {
        let (status, answer) = send(
            &app,
            Method::GET,
            &format!("/pay/ledger?{bad}"),
            Some(&lead),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(says), "{answer}");
    }
}

/// Pushed items over the API: a push answers 201 with a receipt per item, the same push again
/// 200 with the same ids and nothing added; a bad push is a 4xx naming what is wrong and stores
/// nothing; a queue is its team's; the read gives the items back in push order.
#[tokio::test]
async fn pushed_items_are_idempotent_explained_and_kept_to_their_team() {
    let app = TestApp::spawn().await;
    app.team_objects().await;
    let owner = app.token_for(Role::Researcher).await;
    let vera = app.token_of("vera").await;
    let body = json!({
        "queue": "prod/support",
        "raters": 2,
        "items": [
            {"input": "Capital of France?", "outputs": ["Paris"], "metadata": {"trace": "t-1"}},
            {"input": "Write a haiku.", "outputs": ["Leaves fall", "Roses are red"]},
        ],
    });
    let (status, first) = send(
        &app,
        Method::POST,
        "/annotation/items",
        Some(&owner),
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(
        (first["created"].clone(), first["existing"].clone()),
        (json!(2), json!(0))
    );
    let (status, again) = send(
        &app,
        Method::POST,
        "/annotation/items",
        Some(&owner),
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        (again["created"].clone(), again["existing"].clone()),
        (json!(0), json!(2))
    );
    for (before, after) in first["items"]
        .as_array()
        .unwrap()
        .iter()
        .zip(again["items"].as_array().unwrap())
    {
        assert_eq!(before["task_id"], after["task_id"]);
        assert_eq!(before["content_hash"], after["content_hash"]);
    }

    let item = |input: &str, outputs: Value| json!({"input": input, "outputs": outputs});
    for (bad, status, says) in [
        (
            json!({"queue": "prod/support", "items": [item("fine", json!(["ok"])), item("x", json!([]))]}),
            StatusCode::BAD_REQUEST,
            "item 1 has 0 outputs",
        ),
        (
            json!({"queue": "has space", "items": [item("fine", json!(["ok"]))]}),
            StatusCode::BAD_REQUEST,
            "queue name",
        ),
        (
            json!({"queue": "prod/support", "raters": 9, "items": [item("fine", json!(["ok"]))]}),
            StatusCode::BAD_REQUEST,
            "raters per item",
        ),
        (
            json!({"queue": "prod/support", "rubric": "nope", "items": [item("fine", json!(["ok"]))]}),
            StatusCode::NOT_FOUND,
            "no rubric",
        ),
        (
            json!({"queue": "prod/support", "items": [{"input": "q", "outputs": ["a"], "colour": "red"}]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "colour",
        ),
        (
            json!({"queue": "prod/support", "items": [{"input": "q", "outputs": ["a"], "metadata": [1]}]}),
            StatusCode::BAD_REQUEST,
            "not a JSON object",
        ),
    ] {
        let (got, answer) = send(
            &app,
            Method::POST,
            "/annotation/items",
            Some(&owner),
            Some(bad.clone()),
        )
        .await;
        assert_eq!(got, status, "{bad}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(says),
            "{says}: {answer}"
        );
    }

    // Another team's researcher may neither push to the queue nor read it.
    let (status, answer) = send(
        &app,
        Method::POST,
        "/annotation/items",
        Some(&vera),
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("team `default`"),
        "{answer}"
    );
    let path = "/annotation/items?queue=prod/support";
    let (status, _) = send(&app, Method::GET, path, Some(&vera), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Only the two good items are there, open, in push order.
    let (status, items) = send(&app, Method::GET, path, Some(&owner), None).await;
    assert_eq!(status, StatusCode::OK, "{items}");
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["task_id"], first["items"][0]["task_id"]);
    assert_eq!(items[0]["metadata"]["trace"], "t-1");
    assert_eq!(items[0]["state"], "open");
    assert_eq!(
        (items[0]["kind"].as_str(), items[1]["kind"].as_str()),
        (Some("pushed"), Some("pair"))
    );
    assert!(items[1]["first_on_left"].is_boolean());
    let (status, answer) = send(
        &app,
        Method::GET,
        &format!("{path}&limit=0"),
        Some(&owner),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
}

/// Serving over the API: a plan is previewed with its figures or refused with the reason; a
/// served checkpoint with no launcher for its engine is refused (409) and stores nothing;
/// launches are listed, and a bad filter is explained.
#[tokio::test]
async fn serving_plans_are_previewed_and_served_checkpoints_need_a_launcher() {
    let app = TestApp::spawn().await;
    let token = app.token_for(Role::Researcher).await;
    let (status, plan) = send(
        &app,
        Method::POST,
        "/serving/plan",
        Some(&token),
        Some(json!({"engine": "vllm", "path": "/models/70b", "params_billions": 70, "gpus_per_node": 8, "gpu_memory_gib": 80, "nodes": 2, "sustained_tokens_per_s": 2500})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(
        (plan["tensor_parallel"].as_i64(), plan["replicas"].as_i64()),
        (Some(4), Some(4))
    );
    for (body, expected) in [
        (
            json!({"engine": "vllm", "path": "/m", "params_billions": 405, "gpus_per_node": 8, "gpu_memory_gib": 80}),
            "across nodes",
        ),
        (
            json!({"engine": "tgi", "path": "/m"}),
            "unknown serving engine `tgi`",
        ),
        (
            json!({"engine": "simulator", "path": "--help"}),
            "may not start with `-`",
        ),
        (
            json!({"engine": "simulator", "path": "/m", "gpus": 8}),
            "unknown field",
        ),
    ] {
        let (status, answer) = send(
            &app,
            Method::POST,
            "/serving/plan",
            Some(&token),
            Some(body),
        )
        .await;
        assert!(
            status == StatusCode::BAD_REQUEST || status == StatusCode::UNPROCESSABLE_ENTITY,
            "{status} {answer}"
        );
        assert!(
            answer["error"].as_str().unwrap().contains(expected),
            "{answer}"
        );
    }
    let before = app.store.list_checkpoints().await.unwrap().len();
    let (status, answer) = send(
        &app,
        Method::POST,
        "/checkpoints",
        Some(&token),
        Some(json!({"name": "served-1", "model": "m", "serve": {"engine": "simulator", "path": "/w"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("no running launcher"),
        "{answer}"
    );
    let (status, answer) = send(
        &app,
        Method::POST,
        "/checkpoints",
        Some(&token),
        Some(json!({"name": "served-2", "model": "m", "endpoint_url": "http://127.0.0.1:9/v1", "serve": {"engine": "simulator", "path": "/w"}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("not both"),
        "{answer}"
    );
    assert_eq!(app.store.list_checkpoints().await.unwrap().len(), before);
    let (status, launches) = send(&app, Method::GET, "/launches", Some(&token), None).await;
    assert_eq!((status, launches), (StatusCode::OK, json!([])));
    let (status, _) = send(
        &app,
        Method::GET,
        "/launches?checkpoint=abc",
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
