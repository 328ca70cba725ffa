//! Before the fix, `--mail smtp://user:password@host:587` (which the README called STARTTLS)
//! used no TLS at all: lettre's URL form asks for none unless told, so the password and every
//! alert went over the wire in clear text. Now `smtp://` requires STARTTLS, and clear text is
//! an explicit, credential-free opt-out for a local relay (`smtp+cleartext://`).

use arbiter_engine::clients::mail::Mailer;
use arbiter_testkit::smtp::SmtpSink;

const FROM: &str = "Arbiter <alerts@arbiter.test>";

async fn send(mailer: &Mailer) -> anyhow::Result<()> {
    mailer
        .send(
            &["lead@arbiter.test".to_string()],
            "SLA at risk: qa",
            "3 tasks are forecast to miss their deadline.",
        )
        .await
}

fn verbs(sink: &SmtpSink, over_tls: bool) -> Vec<String> {
    sink.commands()
        .into_iter()
        .filter(|command| command.over_tls == over_tls)
        .map(|command| command.verb)
        .collect()
}

#[tokio::test]
async fn smtp_sends_credentials_and_mail_only_after_starttls() {
    let sink = SmtpSink::start(true).await;
    let mailer = Mailer::from_settings(
        &format!("smtp://alerts:hunter2@127.0.0.1:{}", sink.port),
        FROM,
        sink.ca_file.as_deref(),
    )
    .unwrap();
    assert_eq!(mailer.describe(), "SMTP (STARTTLS required)");
    send(&mailer).await.unwrap();
    // In clear text: only the greeting's EHLO and the request to start TLS.
    assert_eq!(verbs(&sink, false), ["EHLO", "STARTTLS"]);
    let encrypted = verbs(&sink, true);
    for verb in ["EHLO", "AUTH", "MAIL", "RCPT", "DATA"] {
        assert!(encrypted.iter().any(|sent| sent == verb), "{encrypted:?}");
    }
    let messages = sink.messages();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].over_tls);
    assert!(messages[0].data.contains("SLA at risk: qa"));
}

#[tokio::test]
async fn a_server_without_starttls_gets_neither_the_password_nor_the_mail() {
    let sink = SmtpSink::start(false).await;
    let mailer = Mailer::from_config(
        &format!("smtp://alerts:hunter2@127.0.0.1:{}", sink.port),
        FROM,
    )
    .unwrap();
    assert!(send(&mailer).await.is_err());
    assert!(sink.messages().is_empty());
    let sent = verbs(&sink, false);
    assert!(
        !sent.iter().any(|verb| verb == "AUTH" || verb == "MAIL"),
        "{sent:?}"
    );
    // Asking for the downgradable mode is refused when the mailer is configured.
    let opportunistic = Mailer::from_config(
        &format!(
            "smtp://alerts:hunter2@127.0.0.1:{}?tls=opportunistic",
            sink.port
        ),
        FROM,
    )
    .unwrap_err();
    assert!(
        opportunistic.to_string().contains("clear text"),
        "{opportunistic}"
    );
    assert!(!opportunistic.to_string().contains("hunter2"));
}

#[tokio::test]
async fn a_local_relay_in_clear_text_is_an_explicit_opt_out_without_credentials() {
    let sink = SmtpSink::start(false).await;
    let relay =
        Mailer::from_config(&format!("smtp+cleartext://127.0.0.1:{}", sink.port), FROM).unwrap();
    assert_eq!(relay.describe(), "SMTP in clear text to a local relay");
    send(&relay).await.unwrap();
    let messages = sink.messages();
    assert_eq!(messages.len(), 1);
    assert!(!messages[0].over_tls);
    let with_password = Mailer::from_config(
        &format!("smtp+cleartext://alerts:hunter2@127.0.0.1:{}", sink.port),
        FROM,
    )
    .unwrap_err();
    assert!(
        with_password.to_string().contains("no user or password"),
        "{with_password}"
    );
    assert!(!with_password.to_string().contains("hunter2"));
}
