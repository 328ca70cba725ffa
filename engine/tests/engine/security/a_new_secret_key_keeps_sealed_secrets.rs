//! Before `arbiter rekey`, changing ARBITER_SECRET_KEY made every sealed endpoint key and
//! webhook signing secret unreadable. Now they are re-sealed under the new key in one
//! transaction, and a secret that does not open with the old key changes nothing.

use arbiter_domain::checkpoint::NewCheckpoint;
use arbiter_engine::secrets::{rekey, SecretBox};
use arbiter_store::Store;
use std::sync::Arc;

use arbiter_testkit::stories;

stories!(rekeying_reseals_every_secret_or_none);

fn fresh_key() -> SecretBox {
    SecretBox::from_hex(&SecretBox::generate_key()).unwrap()
}

async fn rekeying_reseals_every_secret_or_none(store: Arc<dyn Store>) {
    let store = &*store;
    let (old, new, stranger) = (fresh_key(), fresh_key(), fresh_key());
    for (name, url) in [("a", "http://a.test:8000"), ("b", "http://b.test:8000")] {
        store
            .register_checkpoint(
                &NewCheckpoint {
                    name: name.into(),
                    base_url: url.into(),
                    model: "m".into(),
                    api_key_ref: Some(old.seal(&format!("sk-{name}")).unwrap()),
                    ..NewCheckpoint::default()
                },
                None,
            )
            .await
            .unwrap();
    }
    let webhook = store
        .create_webhook(
            "https://hooks.example.test/in",
            &["run.completed".to_string()],
            Some(&old.seal("whsec_1").unwrap()),
            None,
            0,
        )
        .await
        .unwrap();
    let key_of = |url: &'static str| async move { store.endpoint_api_key_ref(url).await.unwrap() };
    let before = (
        key_of("http://a.test:8000").await,
        key_of("http://b.test:8000").await,
    );

    // The wrong old key opens nothing, and nothing changes.
    let refused = rekey(store, &stranger, &new).await.unwrap_err();
    assert!(refused.contains("nothing was changed"), "{refused}");
    assert!(refused.contains("does not open"), "{refused}");
    assert_eq!(
        (
            key_of("http://a.test:8000").await,
            key_of("http://b.test:8000").await
        ),
        before
    );

    assert_eq!(rekey(store, &old, &new).await.unwrap(), (2, 1));
    for (url, key) in [
        ("http://a.test:8000", "sk-a"),
        ("http://b.test:8000", "sk-b"),
    ] {
        let stored = key_of(url).await;
        assert_eq!(
            new.resolve(stored.as_deref()).unwrap().as_deref(),
            Some(key)
        );
        assert!(
            old.resolve(stored.as_deref()).is_err(),
            "the old key opens it no more"
        );
    }
    let hooks = store.webhooks().await.unwrap();
    let secret = hooks.iter().find(|hook| hook.id == webhook.id).unwrap();
    assert_eq!(
        new.resolve(secret.secret_ref.as_deref())
            .unwrap()
            .as_deref(),
        Some("whsec_1")
    );
}
