//! Server-side request forgery: a researcher's checkpoint or webhook URL may not point Arbiter
//! at its own API, the cloud's metadata service or the private network, nor choose the path
//! Arbiter appends to with a `?` or `#`. (The test process allows loopback, as the demo allows
//! its simulator; the default policy's refusal of loopback is tested in the engine's
//! `clients::egress` and `clients::model` units.)

use crate::api::send;
use crate::support::TestApp;
use arbiter_domain::accounts::Role;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn a_checkpoint_url_cannot_choose_arbiters_own_paths_or_reach_internal_addresses() {
    let app = TestApp::spawn().await;
    let token = app.token_for(Role::Researcher).await;
    let own_api = format!("http://{}/api/v1/nothing#", app.address);
    for (url, expected) in [
        // Reproduced in the issue: the run's last error quoted Arbiter's own 404 body.
        (own_api.as_str(), "fragment"),
        ("http://127.0.0.1:9/v1?x=/admin", "query"),
        ("http://169.254.169.254/latest/v1", "ARBITER_EGRESS_ALLOW"),
        ("http://[fd00:ec2::254]/v1", "ARBITER_EGRESS_ALLOW"),
        ("http://10.0.0.8:8000/v1", "not a public address"),
        ("http://user:pw@models.example.com/v1", "credentials"),
    ] {
        let (status, answer) = send(
            &app,
            Method::POST,
            "/checkpoints",
            Some(&token),
            Some(json!({"name": "probe", "endpoint_url": url, "model": "m"})),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(expected), "{url}: {message}");
    }
    // A replica is held to the same policy.
    let (status, answer) = send(
        &app,
        Method::POST,
        "/checkpoints",
        Some(&token),
        Some(
            json!({"name": "probe", "endpoint_url": "http://127.0.0.1:9/v1", "model": "m",
            "replica_urls": ["http://169.254.169.254/v1"]}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(app.store.list_checkpoints().await.unwrap().is_empty());
}
