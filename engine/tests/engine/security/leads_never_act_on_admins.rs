//! Before the fix a lead could pause, deactivate, retrain or re-address an admin from the rater
//! pool (only a change of role was refused), locking the operator out or taking over their
//! mail. Now only an admin changes an admin's account.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::pool::RaterRecord;
use arbiter_engine::annotation::raters::{update_rater, RaterForm};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(leads_never_change_an_admins_account);

async fn leads_never_change_an_admins_account(store: Arc<dyn Store>) {
    let store = &*store;
    let user = |name: &'static str, role| async move {
        store
            .create_user(name, &stand_in_hash(name), role)
            .await
            .unwrap()
    };
    let (root, ada, lea, ann) = (
        user("root", Role::Admin).await,
        user("ada", Role::Admin).await,
        user("lea", Role::Lead).await,
        user("ann", Role::Annotator).await,
    );
    let record = |name: &'static str| async move {
        let records = store.raters().await.unwrap();
        records
            .into_iter()
            .find(|record| record.username == name)
            .unwrap()
    };
    let action = |action: &str| RaterForm {
        action: action.into(),
        ..RaterForm::default()
    };
    let root_before: RaterRecord = record("root").await;

    for (form, what) in [
        (action("pause"), "pause"),
        (action("deactivate"), "deactivate"),
        (action("train"), "send to training"),
        (
            RaterForm {
                email: Some("lea@elsewhere.test".into()),
                ..RaterForm::default()
            },
            "email",
        ),
        (
            RaterForm {
                skills: Some("math".into()),
                ..RaterForm::default()
            },
            "skills",
        ),
    ] {
        match update_rater(store, lea, root, &form).await {
            Err(ServiceError::Forbidden(message)) => {
                assert!(message.contains("`root` is an admin"), "{what}: {message}")
            }
            other => panic!("a lead's {what} on an admin: {other:?}"),
        }
    }
    assert_eq!(record("root").await, root_before, "nothing changed");

    // The lead still manages the rest of the pool, and an admin manages admins (but their
    // role stays with `arbiter user`).
    update_rater(store, lea, ann, &action("pause"))
        .await
        .unwrap();
    assert!(record("ann").await.paused);
    update_rater(store, ada, root, &action("pause"))
        .await
        .unwrap();
    assert!(record("root").await.paused);
    let demote = RaterForm {
        role: Some("lead".into()),
        ..RaterForm::default()
    };
    assert!(matches!(
        update_rater(store, ada, root, &demote).await,
        Err(ServiceError::Invalid(_))
    ));
}
