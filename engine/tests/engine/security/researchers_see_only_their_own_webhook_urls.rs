//! Before the fix every researcher listed every webhook's whole URL (receivers often carry
//! their secret in the path) and could delete the leads' alert webhooks. Now only a webhook's
//! creator, leads and admins see its URL whole and delete it.

use arbiter_domain::accounts::{Role, User};
use arbiter_engine::error::ServiceError;
use arbiter_engine::secrets::SecretBox;
use arbiter_engine::webhooks::{
    create_webhook, delete_webhook, deliveries_seen_by, webhooks_seen_by,
};
use arbiter_store::Store;
use std::sync::Arc;

use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(webhook_urls_and_deletion_belong_to_their_creator_and_the_leads);

const LEADS_HOOK: &str = "https://hooks.example.test/services/T0/B0/leads-secret";
const RITAS_HOOK: &str = "https://ci.example.test/hook?token=rita-secret";

async fn webhook_urls_and_deletion_belong_to_their_creator_and_the_leads(store: Arc<dyn Store>) {
    let store = &*store;
    let user = |name: &'static str, role| async move {
        let id = store
            .create_user(name, &stand_in_hash(name), role)
            .await
            .unwrap();
        store.get_user(id).await.unwrap().unwrap()
    };
    let (lea, rita, sam): (User, User, User) = (
        user("lea", Role::Lead).await,
        user("rita", Role::Researcher).await,
        user("sam", Role::Researcher).await,
    );
    let add = |url: &'static str, events: &'static [&'static str], by: &User| {
        let (id, leads) = (
            by.id,
            by.role
                .can(arbiter_domain::accounts::Permission::ManageUsers),
        );
        async move {
            let events: Vec<String> = events.iter().map(|event| event.to_string()).collect();
            create_webhook(
                store,
                &SecretBox::without_key(),
                url,
                &events,
                false,
                leads,
                Some(id),
                1_000,
            )
            .await
            .unwrap()
            .0
        }
    };
    let leads_hook = add(LEADS_HOOK, &["alert.raised"], &lea).await;
    let ritas_hook = add(RITAS_HOOK, &["run.completed"], &rita).await;

    let urls = |viewer: &User| {
        let viewer = viewer.clone();
        async move {
            webhooks_seen_by(store, &viewer)
                .await
                .unwrap()
                .into_iter()
                .map(|webhook| webhook.url)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(urls(&lea).await, [LEADS_HOOK, RITAS_HOOK]);
    assert_eq!(
        urls(&rita).await,
        ["https://hooks.example.test/…", RITAS_HOOK]
    );
    assert_eq!(
        urls(&sam).await,
        ["https://hooks.example.test/…", "https://ci.example.test/…"]
    );

    // The deliveries list shows their receivers the same way.
    for hook in [&leads_hook, &ritas_hook] {
        store
            .enqueue_delivery(
                hook.id,
                "run.completed",
                &format!("run:{}", hook.id),
                "{}",
                2_000,
            )
            .await
            .unwrap();
    }
    // A failed attempt's error can quote the whole URL: others see only that it failed.
    for delivery in store.recent_deliveries(10).await.unwrap() {
        let attempt = arbiter_store::DeliveryAttempt {
            delivered: false,
            status: None,
            error: Some(format!("not sent: {} is refused", delivery.url)),
            retry_at: Some(60_000),
        };
        store
            .finish_delivery(delivery.id, &attempt, 3_000)
            .await
            .unwrap();
    }
    for delivery in deliveries_seen_by(store, &sam, 10).await.unwrap() {
        let error = delivery.last_error.unwrap();
        assert!(!error.contains("secret"), "{error}");
    }
    let ritas_error = deliveries_seen_by(store, &rita, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|delivery| delivery.webhook_id == ritas_hook.id)
        .unwrap()
        .last_error
        .unwrap();
    assert!(ritas_error.contains(RITAS_HOOK), "{ritas_error}");
    let delivery_urls = |viewer: &User| {
        let viewer = viewer.clone();
        async move {
            let mut urls: Vec<String> = deliveries_seen_by(store, &viewer, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|delivery| delivery.url)
                .collect();
            urls.sort();
            urls
        }
    };
    assert_eq!(
        delivery_urls(&sam).await,
        ["https://ci.example.test/…", "https://hooks.example.test/…"]
    );
    assert_eq!(
        delivery_urls(&rita).await,
        [RITAS_HOOK, "https://hooks.example.test/…"]
    );

    // Another researcher deletes neither; the creator and a lead do.
    for id in [leads_hook.id, ritas_hook.id] {
        assert!(matches!(
            delete_webhook(store, &sam, id).await,
            Err(ServiceError::Forbidden(_))
        ));
    }
    assert!(matches!(
        delete_webhook(store, &rita, leads_hook.id).await,
        Err(ServiceError::Forbidden(_))
    ));
    assert_eq!(store.webhooks().await.unwrap().len(), 2, "nothing deleted");
    delete_webhook(store, &rita, ritas_hook.id).await.unwrap();
    delete_webhook(store, &lea, leads_hook.id).await.unwrap();
    assert!(matches!(
        delete_webhook(store, &lea, leads_hook.id).await,
        Err(ServiceError::NotFound(_))
    ));
}
