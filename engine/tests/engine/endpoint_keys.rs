//! Endpoint API keys end to end: a key kept outside the database (`env:NAME`) reaches an
//! endpoint that demands one (the simulator with an API key, like vLLM's `--api-key`), the
//! same endpoint refuses calls without it, the key goes only to the hosts the operator bound
//! it to, and no key is ever stored or shown in clear.
//!
//! Several keys on one endpoint share its requests, each keeping its own rate limit.
//!
//! Each test sets environment variables no other test reads.

use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_sim::SimConfig;
use arbiter_testkit::pipeline::*;

const KEY: &str = "sk-test-2f8c1e";
const VARIABLE: &str = "ARBITER_ENDPOINT_KEY_TEST";

#[tokio::test]
async fn keys_from_the_environment_reach_the_endpoint_and_are_never_stored_in_clear() {
    // Before anything else runs in this process (a current-thread runtime, one test).
    std::env::set_var(VARIABLE, KEY);
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let endpoint = start_sim(SimConfig {
        latency_ms_min: 1,
        latency_ms_max: 3,
        api_key: Some(KEY.into()),
        ..SimConfig::demo()
    })
    .await;
    // The operator binds the key to the simulator's host and port, and to nothing else.
    let bound_host = endpoint
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    std::env::set_var(format!("{VARIABLE}_HOSTS"), &bound_host);
    std::env::set_var("ARBITER_ENDPOINT_KEY_OTHER_HOSTS", &bound_host);
    // The same server under another name: an endpoint registered without the key.
    let keyless = endpoint.replace("127.0.0.1", "localhost");
    let register = |name: &str, url: &str, key: &str| CheckpointForm {
        name: name.into(),
        endpoint_url: url.into(),
        model: "sim-ckpt-a".into(),
        api_key: key.into(),
        ..CheckpointForm::default()
    };
    // A key typed in clear is refused when this deployment has no sealing key.
    let refused = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &register("clear", &endpoint, KEY),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("ARBITER_SECRET_KEY"),
        "{refused}"
    );
    assert!(store.list_checkpoints().await.unwrap().is_empty());

    // Keys of the operator's go only where the operator bound them: a researcher naming the
    // variable on an endpoint of their own (here the same server under another name, or a
    // replica elsewhere) is refused, and the key is never sent there.
    for (name, url, replicas) in [
        ("elsewhere", keyless.as_str(), ""),
        ("replica-elsewhere", endpoint.as_str(), keyless.as_str()),
    ] {
        let refused = arbiter_engine::catalog::register_checkpoint(
            store.as_ref(),
            &CheckpointForm {
                replica_urls: replicas.into(),
                ..register(name, url, &format!("env:{VARIABLE}"))
            },
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(refused.status_code(), 400, "{refused}");
        assert!(
            refused.to_string().contains("may not be sent to localhost"),
            "{refused}"
        );
    }
    let unbound = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &register("unbound", &endpoint, "env:ARBITER_ENDPOINT_KEY_UNBOUND"),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        unbound
            .to_string()
            .contains("ARBITER_ENDPOINT_KEY_UNBOUND_HOSTS"),
        "{unbound}"
    );
    assert!(store.list_checkpoints().await.unwrap().is_empty());
    assert!(arbiter_engine::secrets::process()
        .resolve_endpoint_key(Some(&format!("env:{VARIABLE}")), &keyless)
        .unwrap_err()
        .contains("may not be sent"));

    let with_key = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &register("with-key", &endpoint, &format!("env:{VARIABLE}")),
        None,
    )
    .await
    .unwrap();
    // The endpoint's key is set once: another checkpoint there may not swap it for everyone.
    let swap = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &register("swap", &endpoint, "env:ARBITER_ENDPOINT_KEY_OTHER"),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(swap.status_code(), 409, "{swap}");
    arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &register("same-endpoint", &endpoint, ""),
        None,
    )
    .await
    .unwrap();
    let without_key = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &register("without-key", &keyless, ""),
        None,
    )
    .await
    .unwrap();
    let revision = arbiter_engine::catalog::upload_dataset(
        store.as_ref(),
        "qa",
        "qa.jsonl",
        include_bytes!("../../../public/samples/qa-basic.jsonl"),
        None,
    )
    .await
    .unwrap();
    let eval = arbiter_engine::catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            name: "qa".into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Question: {input}".into(),
            max_tokens: 32,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        None,
    )
    .await
    .unwrap();
    let runs = [
        launch(store.as_ref(), eval, with_key).await,
        launch(store.as_ref(), eval, without_key).await,
    ];
    let finished = work_until_complete(store.clone(), &runs, test_worker("keys")).await;
    assert_eq!(finished[0].errors, 0, "{:?}", finished[0]);
    assert_eq!(finished[0].done, 60);
    assert_eq!(finished[1].errors, 60, "{:?}", finished[1]);
    assert!(
        finished[1]
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("401"),
        "{:?}",
        finished[1].last_error
    );

    // The fingerprint probe of /v1/models used the key too.
    let probed = |run| {
        let store = store.clone();
        async move { store.run_manifest(run).await.unwrap().unwrap().fingerprint }
    };
    let fingerprint = probed(runs[0]).await;
    assert_eq!(
        fingerprint.served_model.as_deref(),
        Some("sim-ckpt-a"),
        "{fingerprint:?}"
    );
    let refused_probe = probed(runs[1]).await;
    assert!(refused_probe
        .probe_error
        .unwrap_or_default()
        .contains("401"));

    // Nothing stored or shown holds the key.
    let listed = serde_json::to_string(&store.list_checkpoints().await.unwrap()).unwrap();
    assert!(
        !listed.contains(KEY) && !listed.contains(VARIABLE),
        "{listed}"
    );
    let stored = store
        .endpoint_api_key_ref(
            &store
                .list_checkpoints()
                .await
                .unwrap()
                .into_iter()
                .find(|checkpoint| checkpoint.id == with_key)
                .unwrap()
                .base_url,
        )
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Some("env:ARBITER_ENDPOINT_KEY_TEST"));
    assert_eq!(
        arbiter_engine::secrets::describe(stored.as_deref()),
        "from the environment (ARBITER_ENDPOINT_KEY_TEST)"
    );
}

/// A provider that limits each API key on its own, as hosted APIs do: a key in `limited`
/// answers 429 with a minute's `Retry-After`, the others answer; requests are counted by key.
#[derive(Default)]
struct Provider {
    served: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    limited: std::sync::Mutex<std::collections::HashSet<String>>,
    revoked: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Provider {
    fn served(&self, key: &str) -> u64 {
        self.served.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    fn reset(&self, limited: &[&str], revoked: &[&str]) {
        self.served.lock().unwrap().clear();
        *self.limited.lock().unwrap() = limited.iter().map(|key| key.to_string()).collect();
        *self.revoked.lock().unwrap() = revoked.iter().map(|key| key.to_string()).collect();
    }
}

async fn start_provider(provider: std::sync::Arc<Provider>) -> String {
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    let chat = {
        let provider = provider.clone();
        move |headers: HeaderMap| {
            let provider = provider.clone();
            async move {
                let key = headers
                    .get("authorization")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.strip_prefix("Bearer "))
                    .unwrap_or_default()
                    .to_string();
                *provider
                    .served
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default() += 1;
                if !key.starts_with("sk-") || provider.revoked.lock().unwrap().contains(&key) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                if provider.limited.lock().unwrap().contains(&key) {
                    return (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "60")],
                        "rate limit reached for this key",
                    )
                        .into_response();
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                axum::Json(serde_json::json!({
                    "model": "provider-model",
                    "choices": [{"message": {"content": "Paris"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 1},
                }))
                .into_response()
            }
        }
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .route(
            "/v1/models",
            axum::routing::get(|| async {
                axum::Json(serde_json::json!({"data": [{"id": "provider-model"}]}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/v1")
}

#[tokio::test]
async fn several_keys_on_one_endpoint_share_its_requests_and_keep_their_own_rate_limits() {
    const KEYS_VARIABLE: &str = "ARBITER_ENDPOINT_KEY_POOLED";
    let provider = std::sync::Arc::new(Provider::default());
    let endpoint = start_provider(provider.clone()).await;
    std::env::set_var(KEYS_VARIABLE, "sk-a, sk-b");
    std::env::set_var(
        format!("{KEYS_VARIABLE}_HOSTS"),
        endpoint
            .trim_start_matches("http://")
            .trim_end_matches("/v1"),
    );
    let directory = tempfile::tempdir().unwrap();
    let store = open_store(&directory).await;
    let checkpoint = arbiter_engine::catalog::register_checkpoint(
        store.as_ref(),
        &CheckpointForm {
            name: "pooled".into(),
            endpoint_url: endpoint.clone(),
            model: "provider-model".into(),
            api_key: format!("env:{KEYS_VARIABLE}").as_str().into(),
            ..CheckpointForm::default()
        },
        None,
    )
    .await
    .unwrap();
    let revision = arbiter_engine::catalog::upload_dataset(
        store.as_ref(),
        "qa",
        "qa.jsonl",
        include_bytes!("../../../public/samples/qa-basic.jsonl"),
        None,
    )
    .await
    .unwrap();
    let define = |template: &str| EvalForm {
        name: template.to_lowercase().replace([' ', ':', '{', '}'], "-"),
        dataset_id: revision.dataset_id,
        prompt_template: template.into(),
        max_tokens: 32,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: String::new(),
        options: arbiter_engine::catalog::EvalOptions::default(),
    };

    // A fresh eval each time (nothing from the cache), run until every item is answered.
    let answer_all = |template: &'static str| {
        let (store, form) = (store.clone(), define(template));
        async move {
            let eval = arbiter_engine::catalog::define_eval(store.as_ref(), &form, None)
                .await
                .unwrap();
            let run = launch(store.as_ref(), eval, checkpoint).await;
            let finished = work_until_complete(store.clone(), &[run], test_worker("keys")).await;
            assert_eq!(
                (finished[0].done, finished[0].errors),
                (60, 0),
                "{:?}",
                finished[0]
            );
        }
    };

    // One key is at its provider's rate limit for the next minute: its 429 pauses that key
    // alone, and every item is answered with the other at once, not a minute later.
    provider.reset(&["sk-a"], &[]);
    let started = std::time::Instant::now();
    answer_all("Q: {input}").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the other key answered without waiting out the first key's minute: {:?}",
        started.elapsed()
    );
    assert_eq!(provider.served("sk-b"), 60);
    let limited = provider.served("sk-a");
    assert!(
        (1..=8).contains(&limited),
        "the limited key is tried, then left alone while it waits out its Retry-After: {limited}"
    );
    assert_eq!(provider.served(""), 0, "every request carried a key");
    assert_eq!(
        provider.served("sk-a, sk-b"),
        0,
        "keys are sent one at a time"
    );

    // Both keys free: requests are spread over them.
    provider.reset(&[], &[]);
    answer_all("Question: {input}").await;
    let (first, second) = (provider.served("sk-a"), provider.served("sk-b"));
    assert_eq!(first + second, 60);
    assert!(
        first >= 20 && second >= 20,
        "spread over both keys: {first} and {second}"
    );

    // One key revoked: refused once or a few times, then set aside; the other answers all.
    provider.reset(&[], &["sk-b"]);
    answer_all("Q. {input}").await;
    assert_eq!(provider.served("sk-a"), 60);
    let refused = provider.served("sk-b");
    assert!(
        (1..=8).contains(&refused),
        "the revoked key is set aside after it is refused: {refused}"
    );
}
