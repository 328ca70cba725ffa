//! A burst of concurrent wrong passwords for one account: before the fix every one of them
//! was checked (the failure was recorded only after Argon2 answered), so 40 guesses got
//! through a limit of 10. Now an attempt counts before its check.

use crate::support::{TestApp, PASSWORD};
use arbiter_engine::accounts::login_throttle::ACCOUNT_FAILURES;
use reqwest::StatusCode;

#[tokio::test]
async fn fifty_concurrent_wrong_passwords_are_checked_at_most_the_limit() {
    let app = TestApp::spawn().await;
    let app = &app;
    let attempts = (0..50).map(|guess| async move {
        let client = TestApp::client();
        app.login(&client, "annotator", &format!("guess-number-{guess}"))
            .await
            .status()
    });
    let statuses = futures::future::join_all(attempts).await;
    let checked = statuses
        .iter()
        .filter(|&&status| status == StatusCode::UNAUTHORIZED)
        .count();
    let refused = statuses
        .iter()
        .filter(|&&status| status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(checked, ACCOUNT_FAILURES, "{statuses:?}");
    assert_eq!(refused, 50 - ACCOUNT_FAILURES, "{statuses:?}");
    // The account is locked now, even for its right password; others are not.
    let client = TestApp::client();
    assert_eq!(
        app.login(&client, "annotator", PASSWORD).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        app.login(&client, "reviewer", PASSWORD).await.status(),
        StatusCode::OK
    );
}
