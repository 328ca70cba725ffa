//! HTTP-level tests of the real router: login and sessions, and a table-driven authorization
//! matrix proving that every server function and form route refuses the wrong role.

use arbiter_domain::accounts::Role;
use arbiter_domain::ids::DatasetId;
use arbiter_domain::run::Priority;
use reqwest::{header, StatusCode};

use crate::support::{TestApp, PASSWORD};

#[tokio::test]
async fn failed_logins_do_not_reveal_whether_the_account_exists() {
    let app = TestApp::spawn().await;
    let client = TestApp::client();
    let wrong_password = app.login(&client, "researcher", "not-the-password").await;
    assert_eq!(wrong_password.status(), StatusCode::UNAUTHORIZED);
    let wrong_password = wrong_password.text().await.unwrap();
    let unknown_user = app.login(&client, "nobody", "not-the-password").await;
    assert_eq!(unknown_user.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(unknown_user.text().await.unwrap(), wrong_password);
    assert!(wrong_password.contains("unknown username or wrong password"));

    // The browser form gets the same message on the login page.
    let form = client
        .post(app.url("/login"))
        .form(&[("username", "nobody"), ("password", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::SEE_OTHER);
    let location = form.headers()[header::LOCATION].to_str().unwrap();
    assert_eq!(
        location,
        "/login?error=unknown%20username%20or%20wrong%20password"
    );
}

#[tokio::test]
async fn repeated_failed_logins_lock_the_account_for_a_while_whether_or_not_it_exists() {
    let app = TestApp::spawn().await;
    let client = TestApp::client();
    for account in ["lead", "nobody"] {
        for _ in 0..arbiter_engine::accounts::login_throttle::ACCOUNT_FAILURES {
            let response = app.login(&client, account, "not-the-password").await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        }
        // Now even the right password is refused, with how long to wait.
        let refused = app.login(&client, account, PASSWORD).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{account}");
        let retry_after: u64 = refused.headers()[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=15 * 60).contains(&retry_after));
        let body: serde_json::Value = refused.json().await.unwrap();
        assert!(body["error"]
            .as_str()
            .unwrap()
            .starts_with("too many failed sign-ins for this account; try again in "));
    }
    // The browser form says so on the login page; other accounts sign in as usual.
    let form = client
        .post(app.url("/login"))
        .form(&[("username", "Lead"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert!(form.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .starts_with("/login?error=too%20many%20failed%20sign-ins%20for%20this%20account"));
    assert_eq!(
        app.login(&client, "researcher", PASSWORD).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn login_rotates_the_session_and_logout_ends_it() {
    let app = TestApp::spawn().await;
    let client = TestApp::client();
    let first = app.login(&client, "researcher", PASSWORD).await;
    let first_cookie = first.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        first_cookie.contains("HttpOnly") && first_cookie.contains("SameSite=Lax"),
        "{first_cookie}"
    );
    let second = app.login(&client, "researcher", PASSWORD).await;
    let second_cookie = second.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_string();
    let id = |cookie: &str| cookie.split(';').next().unwrap().to_string();
    assert_ne!(
        id(&first_cookie),
        id(&second_cookie),
        "a login gets a fresh session id"
    );
    assert_eq!(app.call(&client, "list_runs", &[]).await, StatusCode::OK);

    let logout = client.post(app.url("/logout")).send().await.unwrap();
    assert_eq!(logout.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        app.call(&client, "list_runs", &[]).await,
        StatusCode::UNAUTHORIZED
    );
    let page = client.get(app.url("/runs")).send().await.unwrap();
    assert_eq!(
        page.status(),
        StatusCode::SEE_OTHER,
        "pages send anonymous visitors to /login"
    );
}

/// Which roles may call a route: one row per server function or form route.
enum Allowed {
    Researchers,
    Annotators,
    Reviewers,
    Leads,
    /// Anyone signed in (their own account's settings).
    Everyone,
}

impl Allowed {
    fn includes(&self, role: Role) -> bool {
        match self {
            Allowed::Researchers => matches!(role, Role::Researcher | Role::Lead | Role::Admin),
            Allowed::Annotators => matches!(
                role,
                Role::Annotator | Role::Reviewer | Role::Lead | Role::Admin
            ),
            Allowed::Reviewers => matches!(role, Role::Reviewer | Role::Lead | Role::Admin),
            Allowed::Leads => matches!(role, Role::Lead | Role::Admin),
            Allowed::Everyone => true,
        }
    }
}

/// (endpoint, arguments, who may call it). Arguments are valid, so an allowed call succeeds or
/// fails for a reason other than authorization (never 401/403).
/// Form arguments of one call.
type Args = &'static [(&'static str, &'static str)];

const SERVER_FUNCTIONS: &[(&str, Args, Allowed)] = &[
    ("list_datasets", &[], Allowed::Researchers),
    ("dataset_detail", &[("id", "1")], Allowed::Researchers),
    ("list_checkpoints", &[], Allowed::Researchers),
    (
        "register_checkpoint",
        &[
            ("name", "NAME"),
            ("endpoint_url", "http://127.0.0.1:9/v1"),
            ("model", "m"),
        ],
        Allowed::Researchers,
    ),
    (
        "set_checkpoint_prices",
        &[
            ("checkpoint_id", "1"),
            ("input_usd_per_mtok", "1"),
            ("output_usd_per_mtok", "2"),
        ],
        Allowed::Researchers,
    ),
    (
        "retract_checkpoint",
        &[("checkpoint_id", "999"), ("reason", "rolled back")],
        Allowed::Researchers,
    ),
    ("run_load", &[("id", "1")], Allowed::Researchers),
    ("serving_launches", &[], Allowed::Researchers),
    (
        "serve_checkpoint",
        &[
            ("name", "NAME"),
            ("model", "m"),
            ("serve[engine]", "simulator"),
            ("serve[path]", "/weights"),
            ("preview", "1"),
        ],
        Allowed::Researchers,
    ),
    ("list_endpoints", &[], Allowed::Researchers),
    ("key_bindings", &[], Allowed::Leads),
    (
        "bind_endpoint_key",
        &[
            ("variable", "ARBITER_ENDPOINT_KEY_MATRIX"),
            ("hosts", "vllm.internal:8000"),
        ],
        Allowed::Leads,
    ),
    (
        "set_endpoint_limit",
        &[("endpoint_id", "1"), ("max_in_flight", "16")],
        Allowed::Researchers,
    ),
    ("evals_page", &[], Allowed::Researchers),
    (
        "create_eval",
        &[
            ("name", "NAME"),
            ("dataset_id", "1"),
            ("prompt_template", "Q: {input}"),
            ("max_tokens", "16"),
            ("temperature", "0"),
            ("repetitions", "1"),
            ("seed", "0"),
        ],
        Allowed::Researchers,
    ),
    (
        "check_prompt",
        &[("dataset_id", "1"), ("prompt_template", "Q: {{ input }}")],
        Allowed::Researchers,
    ),
    ("preview_eval", &[("eval_id", "1")], Allowed::Researchers),
    (
        "launch_run",
        &[("eval_id", "1"), ("checkpoint_id", "1")],
        Allowed::Researchers,
    ),
    ("list_runs", &[], Allowed::Researchers),
    ("run_detail", &[("id", "1")], Allowed::Researchers),
    (
        "change_run",
        &[("id", "1"), ("action", "pause")],
        Allowed::Researchers,
    ),
    (
        "compare_checkpoints",
        &[
            ("baseline", "1"),
            ("candidates", "2"),
            ("correction", "holm"),
        ],
        Allowed::Researchers,
    ),
    (
        "diff_page",
        &[
            ("baseline", "1"),
            ("candidate", "2"),
            ("category", ""),
            ("change", "regression"),
            ("outcome", ""),
            ("search", ""),
            ("offset", "0"),
        ],
        Allowed::Researchers,
    ),
    (
        "diff_divergence",
        &[("baseline_item", "1"), ("candidate_item", "2")],
        Allowed::Researchers,
    ),
    ("run_report", &[("run", "1")], Allowed::Researchers),
    (
        "decide_promotion",
        &[
            ("baseline", "1"),
            ("candidate", "2"),
            ("decision", "reject"),
            ("note", "n"),
        ],
        Allowed::Researchers,
    ),
    ("promotion_decisions", &[("run", "1")], Allowed::Researchers),
    ("trend_options", &[], Allowed::Researchers),
    (
        "trend",
        &[("eval", "1"), ("training_run", ""), ("policy", "previous")],
        Allowed::Researchers,
    ),
    (
        "flaky_prompts",
        &[("eval", "1"), ("training_run", "")],
        Allowed::Researchers,
    ),
    (
        "watch_trend",
        &[("eval", "1"), ("training_run", ""), ("policy", "first")],
        Allowed::Researchers,
    ),
    (
        "unwatch_trend",
        &[("eval", "1"), ("training_run", "")],
        Allowed::Researchers,
    ),
    ("judges_page", &[], Allowed::Researchers),
    (
        "create_judge",
        &[
            ("name", "NAME"),
            ("checkpoint_id", "1"),
            ("rubric", "PASS or FAIL? {output}"),
            ("max_tokens", "8"),
        ],
        Allowed::Researchers,
    ),
    ("judge_detail", &[("id", "1")], Allowed::Researchers),
    ("eval_detail", &[("id", "1")], Allowed::Researchers),
    (
        "save_policy",
        &[
            ("eval_id", "1"),
            ("cheap_judge", ""),
            ("accept_threshold", "0.9"),
            ("escalate_threshold", "0.7"),
            ("audit_rate", "0.02"),
            ("judge_samples", "1"),
            ("human_usd_per_label", "0.4"),
        ],
        Allowed::Researchers,
    ),
    (
        "recalibrate_policy",
        &[("eval_id", "1"), ("target_error_percent", "2")],
        Allowed::Researchers,
    ),
    ("run_costs", &[("id", "1")], Allowed::Researchers),
    ("next_task", &[], Allowed::Annotators),
    (
        "submit_label",
        &[("handle", "0"), ("verdict", "pass"), ("rationale", "")],
        Allowed::Annotators,
    ),
    ("skip_task", &[("handle", "0")], Allowed::Annotators),
    (
        "submit_rubric_label",
        &[("handle", "0"), ("answers", "{}")],
        Allowed::Annotators,
    ),
    ("own_labels", &[], Allowed::Annotators),
    (
        "submit_preference",
        &[("handle", "0"), ("choice", "a")],
        Allowed::Annotators,
    ),
    (
        "send_pairs",
        &[
            ("run_a", "1"),
            ("run_b", "2"),
            ("selection", "random"),
            ("pairs", "1"),
            ("raters", "1"),
        ],
        Allowed::Researchers,
    ),
    ("preferences_page", &[], Allowed::Researchers),
    ("pairwise_judges", &[], Allowed::Researchers),
    (
        "edit_label",
        &[("label_id", "999999"), ("verdict", "pass")],
        Allowed::Annotators,
    ),
    ("rubrics_page", &[], Allowed::Researchers),
    (
        "create_rubric",
        &[
            ("name", "NAME"),
            (
                "definition",
                r#"{"dimensions": [{"key": "ok", "question": "OK?", "kind": "binary"}]}"#,
            ),
        ],
        Allowed::Leads,
    ),
    (
        "add_guidelines",
        &[("rubric_name", "NAME"), ("markdown", "Be kind.")],
        Allowed::Leads,
    ),
    ("queue_size", &[], Allowed::Annotators),
    ("next_review", &[], Allowed::Reviewers),
    (
        "review_label",
        &[("label_id", "1"), ("decision", "accept")],
        Allowed::Reviewers,
    ),
    (
        "review_preference",
        &[("label_id", "1"), ("decision", "accept")],
        Allowed::Reviewers,
    ),
    ("raters_page", &[], Allowed::Leads),
    ("pay_page", &[], Allowed::Leads),
    ("create_pay_pool", &[("name", "NAME")], Allowed::Leads),
    (
        "set_pay_rate",
        &[
            ("pool_id", "1"),
            ("basis", "hour"),
            ("rate", "12.50"),
            ("currency", "USD"),
        ],
        Allowed::Leads,
    ),
    (
        "assign_pay_pool",
        &[("rater_id", "1"), ("pool_id", "0")],
        Allowed::Leads,
    ),
    ("own_pay", &[], Allowed::Annotators),
    (
        "update_rater",
        &[("rater_id", "999"), ("action", "pause")],
        Allowed::Leads,
    ),
    (
        "set_quality_threshold",
        &[("threshold", "0.7")],
        Allowed::Leads,
    ),
    ("run_agreement", &[("id", "1")], Allowed::Researchers),
    ("run_dimensions", &[("id", "1")], Allowed::Researchers),
    (
        "check_review",
        &[("review_id", "1"), ("decision", "uphold")],
        Allowed::Reviewers,
    ),
    (
        "invite_rater",
        &[("username", "NAME"), ("role", "annotator")],
        Allowed::Leads,
    ),
    ("queue_page", &[], Allowed::Leads),
    (
        "set_queue_settings",
        &[
            ("gold_rate", "0.05"),
            ("review_check_rate", "0.1"),
            ("agreement_floor", "0.6"),
        ],
        Allowed::Leads,
    ),
    (
        "create_gold",
        &[("task_id", "1"), ("answer", "pass")],
        Allowed::Leads,
    ),
    ("retire_gold", &[("gold_id", "1")], Allowed::Leads),
    ("system_health", &[], Allowed::Researchers),
    ("suites_page", &[], Allowed::Researchers),
    (
        "save_retention",
        &[("raw_days", "365"), ("summary_days", "1095")],
        Allowed::Leads,
    ),
    ("webhooks_page", &[], Allowed::Researchers),
    (
        "create_webhook",
        &[
            ("url", "http://127.0.0.1:9/hook"),
            ("events[run.completed]", "on"),
        ],
        Allowed::Researchers,
    ),
    ("delete_webhook", &[("id", "999")], Allowed::Researchers),
    (
        "create_suite",
        &[("name", "NAME"), ("tier", "smoke"), ("evals[1]", "on")],
        Allowed::Researchers,
    ),
    ("delete_suite", &[("id", "999")], Allowed::Researchers),
    (
        "run_suite",
        &[("checkpoint_id", "1"), ("suite", "nope"), ("priority", "")],
        Allowed::Researchers,
    ),
    (
        "save_alert_rules",
        &[
            ("queue_growth_minutes", "60"),
            ("max_error_rate", "0.05"),
            ("max_p99_latency_s", "30"),
            ("daily_budget_usd", "1000"),
            ("min_rater_availability", "0.6"),
            ("worker_silence_s", "180"),
            ("min_answers", "50"),
        ],
        Allowed::Leads,
    ),
    ("api_tokens", &[], Allowed::Everyone),
    (
        "create_api_token",
        &[("name", "NAME"), ("days", "30")],
        Allowed::Everyone,
    ),
    ("revoke_api_token", &[("id", "999999")], Allowed::Everyone),
    (
        "change_password",
        &[
            ("current", "not-checked"),
            ("new", "new-password-1"),
            ("confirmation", "new-password-2"),
        ],
        Allowed::Everyone,
    ),
];

/// The matrix covers every server function the app registers, so a new one cannot be added
/// without saying who may call it.
#[test]
fn the_matrix_lists_every_registered_server_function() {
    let listed: std::collections::BTreeSet<String> = SERVER_FUNCTIONS
        .iter()
        .map(|(endpoint, _, _)| format!("/api/{endpoint}"))
        .collect();
    let registered: std::collections::BTreeSet<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_string())
        .filter(|path| path != "/api/current_user" && path != "/api/logout")
        .collect();
    let missing: Vec<&String> = registered.difference(&listed).collect();
    assert!(missing.is_empty(), "not in the matrix: {missing:?}");
    assert!(registered.len() >= 48, "{registered:?}");
}

#[tokio::test]
async fn every_server_function_refuses_the_wrong_role_and_anonymous_callers() {
    let app = TestApp::spawn().await;
    let anonymous = TestApp::client();
    for (endpoint, args, _) in SERVER_FUNCTIONS {
        assert_eq!(
            app.call(&anonymous, endpoint, args).await,
            StatusCode::UNAUTHORIZED,
            "anonymous {endpoint}"
        );
    }
    for role in Role::ALL {
        let client = app.client_as(role).await;
        for (endpoint, args, allowed) in SERVER_FUNCTIONS {
            // Unique names so a second allowed role does not collide with the first.
            let args: Vec<(&str, String)> = args
                .iter()
                .map(|(key, value)| (*key, value.replace("NAME", &format!("{endpoint}-{role}"))))
                .collect();
            let args: Vec<(&str, &str)> = args
                .iter()
                .map(|(key, value)| (*key, value.as_str()))
                .collect();
            let status = app.call(&client, endpoint, &args).await;
            if allowed.includes(role) {
                assert!(
                    status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
                    "{role} may call {endpoint}, got {status}"
                );
            } else {
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{role} must not call {endpoint}"
                );
            }
        }
    }
}

/// The object-level rows: a researcher of another team holds the right role for every one of
/// these calls, and is still refused on objects that belong to team `default`; nothing changes
/// until the owning team (or a lead) acts.
#[tokio::test]
async fn server_functions_change_only_the_callers_teams_objects() {
    let app = TestApp::spawn().await;
    let objects = app.team_objects().await;
    let eval = objects.eval.to_string();
    let (checkpoint, endpoint, suite, run) = (
        objects.checkpoint.to_string(),
        objects.endpoint.to_string(),
        objects.suite.to_string(),
        objects.run.to_string(),
    );
    let calls: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "set_checkpoint_prices",
            vec![
                ("checkpoint_id", &checkpoint),
                ("input_usd_per_mtok", "9"),
                ("output_usd_per_mtok", "9"),
            ],
        ),
        (
            "set_endpoint_limit",
            vec![("endpoint_id", &endpoint), ("max_in_flight", "512")],
        ),
        (
            "run_suite",
            vec![
                ("checkpoint_id", &checkpoint),
                ("suite", "ours"),
                ("priority", "promotion"),
            ],
        ),
        ("change_run", vec![("id", &run), ("action", "cancel")]),
        (
            "save_policy",
            vec![
                ("eval_id", &eval),
                ("cheap_judge", ""),
                ("accept_threshold", "0.9"),
                ("escalate_threshold", "0.5"),
                ("audit_rate", "0"),
                ("judge_samples", "1"),
                ("human_usd_per_label", "0"),
            ],
        ),
        (
            "unwatch_trend",
            vec![("eval", &eval), ("training_run", "run-a")],
        ),
        ("delete_suite", vec![("id", &suite)]),
        // Last: it cancels the team's run and refuses later launches on the checkpoint.
        (
            "retract_checkpoint",
            vec![("checkpoint_id", &checkpoint), ("reason", "rolled back")],
        ),
    ];
    let runs_before = app.store.list_runs().await.unwrap().len();
    let vera = app.signed_in("vera").await;
    // A promotion decision on the team's run is the team's to record.
    assert_eq!(
        app.call(
            &vera,
            "decide_promotion",
            &[
                ("baseline", &run),
                ("candidate", &run),
                ("decision", "promote")
            ]
        )
        .await,
        StatusCode::FORBIDDEN
    );
    for (endpoint, args) in &calls {
        assert_eq!(
            app.call(&vera, endpoint, args).await,
            StatusCode::FORBIDDEN,
            "another team's researcher must not {endpoint}"
        );
    }
    // Registering one more checkpoint on the shared URL cannot change its limit either.
    let other_limit = app
        .call(
            &vera,
            "register_checkpoint",
            &[
                ("name", "theirs"),
                ("endpoint_url", "http://127.0.0.1:9/v1"),
                ("model", "m"),
                ("options[max_in_flight]", "512"),
            ],
        )
        .await;
    assert_eq!(other_limit, StatusCode::CONFLICT);
    let store = app.store.as_ref();
    assert_eq!(store.list_endpoints().await.unwrap()[0].max_in_flight, 8);
    assert_eq!(store.list_checkpoints().await.unwrap().len(), 1);
    assert_eq!(
        store.list_checkpoints().await.unwrap()[0]
            .prices
            .input_usd_per_mtok,
        0.0
    );
    assert_eq!(store.list_runs().await.unwrap().len(), runs_before);
    assert_ne!(
        store
            .run_progress(arbiter_domain::ids::RunId(objects.run))
            .await
            .unwrap()
            .unwrap()
            .status,
        arbiter_domain::run::RunStatus::Cancelled
    );
    assert_eq!(store.suites().await.unwrap().len(), 1);
    assert!(store.list_checkpoints().await.unwrap()[0]
        .retraction
        .is_none());

    let owner = app.client_as(Role::Researcher).await;
    for (endpoint, args) in &calls {
        assert_eq!(
            app.call(&owner, endpoint, args).await,
            StatusCode::OK,
            "the owning team may {endpoint}"
        );
    }
    assert_eq!(store.list_endpoints().await.unwrap()[0].max_in_flight, 512);
    assert!(store.suites().await.unwrap().is_empty());
    assert!(store.list_checkpoints().await.unwrap()[0]
        .retraction
        .is_some());
}

#[tokio::test]
async fn dataset_upload_checks_the_role_and_stores_good_files() {
    let app = TestApp::spawn().await;
    let good = b"{\"id\":\"1\",\"input\":\"2+2?\",\"target\":\"4\"}\n".to_vec();
    let (status, _) = app
        .upload(&TestApp::client(), "anon", "a.jsonl", good.clone())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let annotator = app.client_as(Role::Annotator).await;
    let (status, body) = app
        .upload(&annotator, "by-annotator", "a.jsonl", good.clone())
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["error"].as_str().unwrap().contains("annotator"));

    let researcher = app.client_as(Role::Researcher).await;
    let (status, body) = app.upload(&researcher, "good", "good.jsonl", good).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(body["content_hash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(body["item_count"], 1);
    let (status, body) = app
        .upload(
            &researcher,
            "good-csv",
            "good.csv",
            b"id,input,target\n1,2+2?,4\n".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn bad_dataset_files_get_a_clear_message_and_store_nothing() {
    let app = TestApp::spawn().await;
    let researcher = app.client_as(Role::Researcher).await;
    let line = |id: &str| format!("{{\"id\":\"{id}\",\"input\":\"x\",\"target\":\"y\"}}\n");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "bad-json",
            format!("{}{{oops\n", line("a")).into_bytes(),
            "line 2: invalid JSON",
        ),
        (
            "missing-id",
            format!("{}{{\"input\":\"x\"}}\n", line("a")).into_bytes(),
            "line 2: missing field `id`",
        ),
        (
            "not-an-object",
            b"[\"a\", \"b\"]\n".to_vec(),
            "line 1: each line must be a JSON object",
        ),
        (
            "duplicate-ids",
            format!("{}{}{}", line("a"), line("b"), line("a")).into_bytes(),
            "line 3: duplicate case id `a` (first seen on line 1)",
        ),
        ("empty", Vec::new(), "the file is empty"),
        (
            "binary",
            vec![0x89, b'P', b'N', b'G', 0, 0, 0xff, 0xfe],
            "the file is not text",
        ),
        // 50 MB, beyond the 20 MB the form once took: streamed to disk and read through (the
        // operator's limit, ARBITER_MAX_UPLOAD_MB, is 1 GB by default), only to hold no item.
        (
            "large-and-blank",
            [b' '; 1023]
                .iter()
                .chain(b"\n")
                .copied()
                .cycle()
                .take(50 * 1024 * 1024)
                .collect(),
            "the file is empty",
        ),
    ];
    for (name, body, expected) in cases {
        let (status, body) = app.upload(&researcher, name, "data.jsonl", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let message = body["error"].as_str().unwrap();
        assert!(
            message.contains(expected),
            "{name}: `{message}` should contain `{expected}`"
        );
    }
    let datasets = researcher
        .post(app.url("/api/list_datasets"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !datasets.contains("bad-json") && !datasets.contains("huge"),
        "{datasets}"
    );
    assert!(datasets.contains("\"sample\""), "{datasets}");
}

#[tokio::test]
async fn the_checkpoint_form_takes_replicas_fingerprint_and_limits() {
    let app = TestApp::spawn().await;
    let researcher = app.client_as(Role::Researcher).await;
    let form = [
        ("name", "replicated"),
        ("endpoint_url", "http://127.0.0.1:9"),
        ("model", "m"),
        (
            "options[replica_urls]",
            "http://127.0.0.1:10/v1, http://127.0.0.1:11",
        ),
        ("options[engine_build]", "vllm 0.6.3"),
        ("options[parallel_layout]", "tp=2"),
        ("options[max_in_flight]", "96"),
    ];
    let response = researcher
        .post(app.url("/api/register_checkpoint"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "{}",
        response.text().await.unwrap()
    );
    let listed: serde_json::Value = researcher
        .post(app.url("/api/list_checkpoints"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let checkpoint = &listed[0];
    assert_eq!(checkpoint["base_url"], "http://127.0.0.1:9/v1");
    assert_eq!(
        checkpoint["replica_urls"],
        serde_json::json!(["http://127.0.0.1:10/v1", "http://127.0.0.1:11/v1"])
    );
    assert_eq!(
        (
            checkpoint["engine_build"].as_str(),
            checkpoint["max_in_flight"].as_i64()
        ),
        (Some("vllm 0.6.3"), Some(96))
    );

    let bad = [
        ("name", "bad"),
        ("endpoint_url", "http://127.0.0.1:9"),
        ("model", "m"),
        ("options[max_in_flight]", "lots"),
    ];
    let response = researcher
        .post(app.url("/api/register_checkpoint"))
        .form(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.text().await.unwrap().contains("max in flight"));
    let unknown_fallback = [
        ("name", "bad"),
        ("endpoint_url", "http://127.0.0.1:9"),
        ("model", "m"),
        ("options[fallback_checkpoint]", "nope"),
    ];
    let response = researcher
        .post(app.url("/api/register_checkpoint"))
        .form(&unknown_fallback)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn grading_forms_check_their_input_and_keep_policy_versions() {
    let app = TestApp::spawn().await;
    let researcher = app.client_as(Role::Researcher).await;
    let post = |endpoint: &'static str, form: Vec<(&'static str, &'static str)>| {
        let request = researcher
            .post(app.url(&format!("/api/{endpoint}")))
            .form(&form);
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let (status, body) = post(
        "register_checkpoint",
        vec![
            ("name", "judge-model"),
            ("endpoint_url", "http://127.0.0.1:9/v1"),
            ("model", "m"),
            ("options[input_usd_per_mtok]", "2.5"),
            ("options[output_usd_per_mtok]", "ten"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("completion token price"), "{body}");
    let (status, body) = post(
        "register_checkpoint",
        vec![
            ("name", "judge-model"),
            ("endpoint_url", "http://127.0.0.1:9/v1"),
            ("model", "m"),
            ("options[input_usd_per_mtok]", "2.5"),
            ("options[output_usd_per_mtok]", "10"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // An eval whose grader has an invalid regex is refused when saved.
    let eval_form = |grader: &'static str| {
        vec![
            ("name", "graded"),
            ("dataset_id", "1"),
            ("prompt_template", "Q: {input}"),
            ("max_tokens", "16"),
            ("temperature", "0"),
            ("repetitions", "1"),
            ("seed", "0"),
            ("grader", grader),
        ]
    };
    let (status, body) = post(
        "create_eval",
        eval_form(r#"{"kind":"regex_match","pattern":"(open"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("grader is invalid"), "{body}");
    let (status, body) = post(
        "create_eval",
        eval_form(r#"{"kind":"numeric","absolute_tolerance":0.5}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = post(
        "set_checkpoint_prices",
        vec![
            ("checkpoint_id", "1"),
            ("input_usd_per_mtok", "-1"),
            ("output_usd_per_mtok", "1"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = post(
        "set_checkpoint_prices",
        vec![
            ("checkpoint_id", "99"),
            ("input_usd_per_mtok", "1"),
            ("output_usd_per_mtok", "1"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = post(
        "set_checkpoint_prices",
        vec![
            ("checkpoint_id", "1"),
            ("input_usd_per_mtok", "3"),
            ("output_usd_per_mtok", ""),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = post("list_checkpoints", vec![]).await;
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            listed[0]["prices"]["input_usd_per_mtok"].as_f64(),
            listed[0]["prices"]["output_usd_per_mtok"].as_f64()
        ),
        (Some(3.0), Some(0.0))
    );

    let (status, body) = post(
        "create_judge",
        vec![
            ("name", "j"),
            ("checkpoint_id", "1"),
            ("rubric", "PASS or FAIL?"),
            ("max_tokens", "8"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("{output}"), "{body}");
    let (status, body) = post(
        "create_judge",
        vec![
            ("name", "j"),
            ("checkpoint_id", "1"),
            ("rubric", "Judge: {output}"),
            ("max_tokens", "8"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A judge on a rubric's scale names a rubric that exists, and stores nothing otherwise.
    let (status, body) = post(
        "create_judge",
        vec![
            ("name", "scaled"),
            ("checkpoint_id", "1"),
            ("rubric", ""),
            ("max_tokens", "8"),
            ("scale_rubric", "no-such-rubric"),
            ("scale_dimension", "helpful"),
            ("scale_pass_at_least", ""),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("no rubric `no-such-rubric`"), "{body}");

    let policy = |accept: &'static str| {
        vec![
            ("eval_id", "1"),
            ("cheap_judge", "1"),
            ("accept_threshold", accept),
            ("escalate_threshold", "0.7"),
            ("audit_rate", "0.02"),
            ("judge_samples", "1"),
            ("human_usd_per_label", "0.4"),
            ("note", "first"),
        ]
    };
    let (status, body) = post("save_policy", policy("0.5")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("must not be above"), "{body}");
    let (status, body) = post("save_policy", policy("0.92")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = post(
        "recalibrate_policy",
        vec![("eval_id", "1"), ("target_error_percent", "2")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no labels yet: {body}");

    let (status, body) = post("eval_detail", vec![("id", "1")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).unwrap();
    // The eval's grader spec as saved (the page names it `numeric@1` from its kind).
    assert_eq!(detail["eval"]["grader"]["kind"], "numeric");
    assert_eq!(detail["policies"].as_array().unwrap().len(), 1);
    assert_eq!(detail["policies"][0]["policy"]["accept_threshold"], 0.92);
    let (status, body) = post("judge_detail", vec![("id", "1")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(report["reliability_svg"]
        .as_str()
        .unwrap()
        .starts_with("<svg"));
    assert_eq!(report["accuracy"]["items"], 0);
    assert!(
        report["accuracy"]["kappa"].is_null(),
        "undefined without labels, not 1.0 or an error"
    );
}

#[tokio::test]
async fn a_deactivated_account_can_neither_use_its_session_nor_sign_in() {
    let app = TestApp::spawn().await;
    let annotator = app.client_as(Role::Annotator).await;
    assert_eq!(
        app.call(&annotator, "queue_size", &[]).await,
        StatusCode::OK
    );
    let lead = app.client_as(Role::Lead).await;
    let pool: serde_json::Value = lead
        .post(app.url("/api/raters_page"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let annotator_id = pool["raters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rater| rater["username"] == "annotator")
        .unwrap()["id"]
        .to_string();
    let lead_id = pool["raters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rater| rater["username"] == "lead")
        .unwrap()["id"]
        .to_string();
    let status = app
        .call(
            &lead,
            "update_rater",
            &[("rater_id", &lead_id), ("action", "deactivate")],
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a lead cannot lock themselves out"
    );
    let status = app
        .call(
            &lead,
            "update_rater",
            &[("rater_id", &annotator_id), ("action", "sleep")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let status = app
        .call(
            &lead,
            "update_rater",
            &[("rater_id", &annotator_id), ("skills", "Math, c++")],
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "skills are letters, digits and dashes"
    );
    let status = app
        .call(
            &lead,
            "update_rater",
            &[("rater_id", &annotator_id), ("action", "deactivate")],
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    assert_eq!(
        app.call(&annotator, "queue_size", &[]).await,
        StatusCode::FORBIDDEN
    );
    let response = app.login(&TestApp::client(), "annotator", PASSWORD).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(response.text().await.unwrap().contains("deactivated"));
    let response = app
        .login(&TestApp::client(), "annotator", "a-wrong-password")
        .await;
    assert_eq!(
        response.status(),
        StatusCode::UNAUTHORIZED,
        "nothing revealed without the password"
    );

    // The pool as CSV: for leads only.
    let csv = lead.get(app.url("/raters.csv")).send().await.unwrap();
    assert_eq!(csv.status(), StatusCode::OK);
    let text = csv.text().await.unwrap();
    assert!(text.starts_with("username,role,active"));
    assert!(text.contains("annotator,annotator,false"), "{text}");
    let researcher = app.client_as(Role::Researcher).await;
    let refused = researcher.get(app.url("/raters.csv")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn run_results_export_as_csv_jsonl_and_parquet() {
    let app = TestApp::spawn().await;
    let store = app.store.as_ref();
    let checkpoint = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "ckpt",
        "http://127.0.0.1:9",
        "m",
        None,
    )
    .await
    .unwrap();
    let form = arbiter_engine::catalog::EvalForm {
        name: "export".into(),
        dataset_id: DatasetId(1),
        prompt_template: "{input}".into(),
        max_tokens: 8,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: String::new(),
        options: arbiter_engine::catalog::EvalOptions::default(),
    };
    let eval = arbiter_engine::catalog::define_eval(store, &form, None)
        .await
        .unwrap();
    let run = arbiter_engine::runs::launch_run(
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
    for id in store.claim_work("w", 10, 60_000).await.unwrap() {
        let generation = arbiter_domain::answer::Generation {
            outcome: arbiter_domain::answer::Outcome::Ok,
            output: "Answer: t, \"quoted\"".into(),
            ..Default::default()
        };
        let grade = arbiter_domain::grading::grade_exact_match(&generation.output, "t");
        store
            .record_result(id, &generation, Some(&grade))
            .await
            .unwrap();
    }
    let export = |client: reqwest::Client, path: String| {
        let url = app.url(&path);
        async move {
            let response = client.get(url).send().await.unwrap();
            let status = response.status();
            let kind = response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            (status, kind, response.bytes().await.unwrap())
        }
    };
    let researcher = app.client_as(Role::Researcher).await;

    let (status, kind, body) = export(researcher.clone(), format!("/runs/{run}/export/csv")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(kind.starts_with("text/csv"));
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.starts_with("run_id,work_item_id,case_id,"), "{text}");
    assert!(
        text.contains("\"Answer: t, \"\"quoted\"\"\""),
        "quoted CSV field: {text}"
    );

    let (status, _, body) = export(researcher.clone(), format!("/runs/{run}/export/jsonl")).await;
    assert_eq!(status, StatusCode::OK);
    let line: serde_json::Value =
        serde_json::from_slice(body.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(
        (line["case_id"].as_str(), line["checkpoint"].as_str()),
        (Some("a"), Some("ckpt"))
    );

    let (status, kind, body) =
        export(researcher.clone(), format!("/runs/{run}/export/parquet")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kind, "application/vnd.apache.parquet");
    assert!(body.starts_with(b"PAR1") && body.ends_with(b"PAR1"));

    // The run's human labels (none here), for leads: the header, and the refusals.
    let lead = app.client_as(Role::Lead).await;
    let (status, _, _) = export(researcher.clone(), format!("/runs/{run}/labels/csv")).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "raters' records are for leads"
    );
    let (status, kind, body) = export(lead.clone(), format!("/runs/{run}/labels/csv")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(kind.starts_with("text/csv"));
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        text.starts_with("label_id,run_id,work_item_id,case_id,"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1);
    let (status, _, _) = export(lead, format!("/runs/{}/labels/jsonl", run.get() + 100)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = export(
        app.client_as(Role::Annotator).await,
        format!("/runs/{run}/labels/csv"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let (status, _, body) = export(researcher.clone(), format!("/runs/{run}/export/xlsx")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("use csv, jsonl or parquet"));
    let (status, _, _) = export(researcher, format!("/runs/{}/export/csv", run.get() + 100)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = export(
        app.client_as(Role::Annotator).await,
        format!("/runs/{run}/export/csv"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Anonymous visitors are sent to the login page, as for any page.
    let response = TestApp::client()
        .get(app.url(&format!("/runs/{run}/export/csv")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[header::LOCATION], "/login");
}

#[tokio::test]
async fn cross_site_posts_are_refused_even_with_a_valid_session() {
    let app = TestApp::spawn().await;
    let client = app.client_as(Role::Researcher).await;
    let forged = client
        .post(app.url("/api/register_checkpoint"))
        .header(header::ORIGIN, "https://evil.example")
        .form(&[
            ("name", "forged"),
            ("endpoint_url", "http://127.0.0.1:9/v1"),
            ("model", "m"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let forged_logout = client
        .post(app.url("/logout"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(forged_logout.status(), StatusCode::FORBIDDEN);
    assert!(app.store.list_checkpoints().await.unwrap().is_empty());
    // The same call from the app's own page goes through, and the session survived.
    let own = client
        .post(app.url("/api/register_checkpoint"))
        .header(header::ORIGIN, format!("http://{}", app.address))
        .form(&[
            ("name", "own"),
            ("endpoint_url", "http://127.0.0.1:9/v1"),
            ("model", "m"),
        ])
        .send()
        .await
        .unwrap();
    assert!(own.status().is_success(), "{}", own.status());
    assert_eq!(app.store.list_checkpoints().await.unwrap().len(), 1);
}

/// Static files keep their own status whatever pages are rendered around them. An
/// annotator's `/datasets` page refuses its data (403; the page itself may have started
/// streaming with 200 by then), and that refusal's status once reached a static file served
/// at the same moment, so a browser
/// fetching the app's wasm got `403 Forbidden` and the page never hydrated. Many of both at
/// once, on two threads, as browsers loading pages do (without the fix, most runs fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_are_not_given_the_status_of_a_refused_call() {
    let site = tempfile::tempdir().unwrap();
    std::fs::create_dir(site.path().join("pkg")).unwrap();
    std::fs::write(site.path().join("pkg/arbiter.wasm"), vec![7u8; 1 << 20]).unwrap();
    let app = TestApp::spawn_serving(site.path().to_str().unwrap()).await;
    let annotator = app.client_as(Role::Annotator).await;
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let page = annotator.get(app.url("/datasets")).send();
        let wasm = annotator.get(app.url("/pkg/arbiter.wasm")).send();
        tasks.push(tokio::spawn(async move {
            let (page, wasm) = tokio::join!(page, wasm);
            (page.unwrap().status(), wasm.unwrap().status())
        }));
    }
    for task in tasks {
        let (page, wasm) = task.await.unwrap();
        assert!(
            [StatusCode::OK, StatusCode::FORBIDDEN].contains(&page),
            "{page}"
        );
        assert_eq!(wasm, StatusCode::OK);
    }
    // Unknown paths and bare directories are still the app's own "not found" page.
    for path in ["/pkg/missing.js", "/pkg"] {
        let missing = annotator.get(app.url(path)).send().await.unwrap();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(
            missing.text().await.unwrap().contains("Page not found"),
            "{path}"
        );
    }
}
