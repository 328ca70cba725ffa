//! Sessions and passwords: before the fix nobody could change their own password (so a lead
//! kept knowing every invitee's), an operator's reset left the old sessions and API tokens
//! working, and a session lived as long as it was used.

use crate::support::{TestApp, PASSWORD};
use arbiter_domain::accounts::Role;
use arbiter_engine::annotation::raters::{invite_rater, Invitation};
use reqwest::{header, StatusCode};

const NEW_PASSWORD: &str = "a-better-password";

async fn change(
    app: &TestApp,
    client: &reqwest::Client,
    current: &str,
    new: &str,
    confirmation: &str,
) -> StatusCode {
    app.call(
        client,
        "change_password",
        &[
            ("current", current),
            ("new", new),
            ("confirmation", confirmation),
        ],
    )
    .await
}

#[tokio::test]
async fn changing_a_password_needs_the_current_one_and_ends_the_other_sessions() {
    let app = TestApp::spawn().await;
    let here = app.client_as(Role::Researcher).await;
    let elsewhere = app.client_as(Role::Researcher).await;
    assert_eq!(
        app.call(&elsewhere, "api_tokens", &[]).await,
        StatusCode::OK
    );

    // Refusals change nothing.
    assert_eq!(
        change(&app, &here, "wrong-password", NEW_PASSWORD, NEW_PASSWORD).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        change(&app, &here, PASSWORD, NEW_PASSWORD, "a-typo-password").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        change(&app, &here, PASSWORD, "short", "short").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        change(
            &app,
            &TestApp::client(),
            PASSWORD,
            NEW_PASSWORD,
            NEW_PASSWORD
        )
        .await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.call(&elsewhere, "api_tokens", &[]).await,
        StatusCode::OK
    );

    assert_eq!(
        change(&app, &here, PASSWORD, NEW_PASSWORD, NEW_PASSWORD).await,
        StatusCode::OK
    );
    // This session goes on; the other one is signed out, for pages and server functions.
    assert_eq!(app.call(&here, "api_tokens", &[]).await, StatusCode::OK);
    assert_eq!(
        app.call(&elsewhere, "api_tokens", &[]).await,
        StatusCode::UNAUTHORIZED
    );
    let page = elsewhere.get(app.url("/runs")).send().await.unwrap();
    assert_eq!(page.headers()[header::LOCATION], "/login");
    let probe = TestApp::client();
    assert_eq!(
        app.login(&probe, "researcher", PASSWORD).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        app.login(&probe, "researcher", NEW_PASSWORD).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn invited_raters_choose_their_own_password_before_anything_else() {
    let app = TestApp::spawn().await;
    let mailer = arbiter_engine::clients::mail::Mailer::log_only();
    let invited = invite_rater(
        app.store.as_ref(),
        &mailer,
        &Invitation {
            username: "newbie".into(),
            role: "annotator".into(),
            email: String::new(),
            skills: String::new(),
            weekly_capacity_hours: String::new(),
            training: false,
        },
    )
    .await
    .unwrap();
    let client = TestApp::client();
    let signed_in = app.login(&client, "newbie", &invited.password).await;
    assert_eq!(signed_in.status(), StatusCode::OK);
    let answer: serde_json::Value = signed_in.json().await.unwrap();
    assert_eq!(answer["must_change_password"], true);
    // Every page leads to the password page; server functions refuse, naming it.
    let page = client.get(app.url("/annotate")).send().await.unwrap();
    assert_eq!(page.headers()[header::LOCATION], "/account/password");
    let page = client
        .get(app.url("/account/password"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(
        app.call(&client, "api_tokens", &[]).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        change(&app, &client, &invited.password, NEW_PASSWORD, NEW_PASSWORD).await,
        StatusCode::OK
    );
    assert_eq!(app.call(&client, "api_tokens", &[]).await, StatusCode::OK);
    let page = client.get(app.url("/annotate")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    // The lead's password for them no longer works.
    assert_eq!(
        app.login(&TestApp::client(), "newbie", &invited.password)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn an_operators_reset_ends_the_users_sessions_and_revokes_their_tokens() {
    let app = TestApp::spawn().await;
    let client = app.client_as(Role::Researcher).await;
    let token = app.token_for(Role::Researcher).await;
    let me = |token: String| {
        let url = app.url("/api/v1/me");
        async move {
            TestApp::client()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(me(token.clone()).await, StatusCode::OK);
    // What `arbiter user reset-password` runs.
    let revoked = arbiter_engine::accounts::reset_password(
        app.store.as_ref(),
        "researcher",
        NEW_PASSWORD,
        arbiter_store::now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(revoked, 1);
    assert_eq!(me(token).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        app.call(&client, "api_tokens", &[]).await,
        StatusCode::UNAUTHORIZED
    );
    // The operator knows the new password, so the user must choose their own at sign-in.
    let credentials = app
        .store
        .find_user_credentials("researcher")
        .await
        .unwrap()
        .unwrap();
    assert!(credentials.user.must_change_password);
}

/// Before the fix the current password on the change form could be guessed without limit
/// from a stolen session; now wrong ones count against the account like failed sign-ins.
#[tokio::test]
async fn the_current_password_cannot_be_guessed_from_a_session() {
    let app = TestApp::spawn().await;
    let stolen = app.client_as(Role::Researcher).await;
    for guess in 0..10 {
        assert_eq!(
            change(
                &app,
                &stolen,
                &format!("guess-{guess}"),
                NEW_PASSWORD,
                NEW_PASSWORD
            )
            .await,
            StatusCode::FORBIDDEN,
            "guess {guess}"
        );
    }
    // The account is locked now, even for the right password.
    assert_eq!(
        change(&app, &stolen, PASSWORD, NEW_PASSWORD, NEW_PASSWORD).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
