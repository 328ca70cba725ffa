//! Before the fix only the operator could bind an endpoint key from the environment to hosts
//! (its `…_HOSTS` variable); issue 19 asks that a lead or admin may too, in the UI. Now a
//! lead's binding (stored, and read by every process) lets the key go to those hosts and no
//! others; researchers cannot bind; the operator's variable, when set, wins.

use arbiter_domain::accounts::{Role, User};
use arbiter_engine::catalog::{self, CheckpointForm};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(operator_keys_go_only_where_a_lead_bound_them);

async fn operator_keys_go_only_where_a_lead_bound_them(store: Arc<dyn Store>) {
    let store = &*store;
    // One variable per backend: the two stories share this process's bindings.
    let variable = format!(
        "ARBITER_ENDPOINT_KEY_LEADBOUND_{}",
        store.backend().to_ascii_uppercase()
    );
    let user = |name: &'static str, role| async move {
        let id = store
            .create_user(name, &stand_in_hash(name), role)
            .await
            .unwrap();
        store.get_user(id).await.unwrap().unwrap()
    };
    let (lea, rita): (User, User) = (
        user("lea", Role::Lead).await,
        user("rita", Role::Researcher).await,
    );
    let register_as = |name: &'static str, url: &'static str, by: Option<&User>| {
        let key = format!("env:{variable}");
        let by = by.map(|user| user.id);
        async move {
            catalog::register_checkpoint(
                store,
                &CheckpointForm {
                    name: name.into(),
                    endpoint_url: url.into(),
                    model: "m".into(),
                    api_key: key.as_str().into(),
                    ..CheckpointForm::default()
                },
                by,
            )
            .await
        }
    };
    let register = |name: &'static str, url: &'static str| register_as(name, url, None);

    // Unbound, the key goes nowhere, and the refusal says who may bind it.
    let refused = register("first", "http://127.0.0.1:9/v1")
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a lead or admin binds it under Checkpoints"),
        "{refused}"
    );
    // Researchers cannot bind; malformed host lists and variables are refused by name.
    assert!(matches!(
        catalog::bind_endpoint_key(store, &rita, &variable, "127.0.0.1:9").await,
        Err(ServiceError::Forbidden(_))
    ));
    for (name, hosts, naming) in [
        (
            variable.as_str(),
            "http://127.0.0.1:9/v1",
            "is not a host or host:port",
        ),
        ("HOME", "127.0.0.1:9", "is not an endpoint key variable"),
    ] {
        match catalog::bind_endpoint_key(store, &lea, name, hosts).await {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(naming), "{message}"),
            other => panic!("expected a refusal naming {naming}, got {other:?}"),
        }
    }
    assert!(store.key_bindings().await.unwrap().is_empty());

    // A lead binds it to one server: that server may have it, no other. The server was first
    // registered by rita without a key, so only rita (its owner) may give it one: the key would
    // go to every checkpoint and team on it.
    catalog::register_checkpoint(
        store,
        &CheckpointForm {
            name: "keyless".into(),
            endpoint_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            ..CheckpointForm::default()
        },
        Some(rita.id),
    )
    .await
    .unwrap();
    catalog::bind_endpoint_key(store, &lea, &variable, "127.0.0.1:9")
        .await
        .unwrap();
    let taken = register("not-the-owner", "http://127.0.0.1:9/v1")
        .await
        .unwrap_err();
    assert_eq!(taken.status_code(), 409, "{taken}");
    assert!(
        taken.to_string().contains("only its owner may give it one"),
        "{taken}"
    );
    register_as("bound", "http://127.0.0.1:9/v1", Some(&rita))
        .await
        .unwrap();
    let elsewhere = register("elsewhere", "http://localhost:9/v1")
        .await
        .unwrap_err();
    assert!(
        elsewhere
            .to_string()
            .contains("may not be sent to localhost"),
        "{elsewhere}"
    );
    let listed = catalog::key_bindings(store).await.unwrap();
    let row = listed.iter().find(|row| row.variable == variable).unwrap();
    assert_eq!(
        (row.hosts.as_str(), row.set_by.as_str(), row.editable),
        ("127.0.0.1:9", "a lead", true)
    );

    // The binding lives in the store: another process (here: a cleared copy) reads it back.
    arbiter_engine::secrets::set_ui_bindings(Vec::new());
    catalog::refresh_key_bindings(store).await.unwrap();
    assert!(arbiter_engine::secrets::check_endpoint_key_binding(
        Some(&format!("env:{variable}")),
        "http://127.0.0.1:9/v1/chat/completions"
    )
    .is_ok());

    // Cleared, the key goes nowhere again.
    catalog::bind_endpoint_key(store, &lea, &variable, "")
        .await
        .unwrap();
    assert!(register("after", "http://127.0.0.1:9/v1").await.is_err());
}
