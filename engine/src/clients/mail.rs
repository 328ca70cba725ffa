//! Outgoing email: alerts to leads and invitations to raters, through lettre.
//!
//! The transport is chosen by the operator with one setting: `smtp://user:pass@host:587`
//! (STARTTLS) or `smtps://…:465` (TLS) for a real mail server, `file:DIR` to write each message
//! as an `.eml` file (the demo's), or `log` to note recipients and subject in the server log
//! (never the body, which may hold a first password). A failed
//! send is reported to the caller, who decides whether to retry (the queue monitor does, on its
//! next round, because an alert counts as emailed only once it was sent).

use anyhow::Context;
use lettre::message::Mailbox;
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::path::PathBuf;

/// Sends mail through the configured transport.
pub struct Mailer {
    from: Mailbox,
    transport: Transport,
}

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    File(AsyncFileTransport<Tokio1Executor>, PathBuf),
    Log,
}

impl std::fmt::Debug for Mailer {
    // The SMTP URL holds a password: say only what kind of transport this is.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Mailer")
            .field("from", &self.from.to_string())
            .field("transport", &self.describe())
            .finish()
    }
}

impl Mailer {
    /// A mailer from the operator's transport setting and sender address. Call it inside the
    /// Tokio runtime: the SMTP transport's connection pool runs on it.
    pub fn from_config(transport: &str, from: &str) -> anyhow::Result<Mailer> {
        let from: Mailbox = from
            .parse()
            .with_context(|| format!("the sender address `{from}` is not an email address"))?;
        let transport = transport.trim();
        let transport = if transport == "log" {
            Transport::Log
        } else if let Some(directory) = transport.strip_prefix("file:") {
            let directory = PathBuf::from(directory);
            std::fs::create_dir_all(&directory).with_context(|| {
                format!("cannot create the mail directory {}", directory.display())
            })?;
            Transport::File(AsyncFileTransport::new(&directory), directory)
        } else if transport.starts_with("smtp://") || transport.starts_with("smtps://") {
            Transport::Smtp(
                AsyncSmtpTransport::<Tokio1Executor>::from_url(transport)
                    .context("the SMTP URL is not valid (smtp://user:password@host:port)")?
                    .build(),
            )
        } else {
            anyhow::bail!(
                "unknown mail transport `{transport}`: use smtp://…, smtps://…, file:DIRECTORY or log"
            );
        };
        Ok(Mailer { from, transport })
    }

    /// Writes mail to the log only (tests and tools).
    pub fn log_only() -> Mailer {
        Mailer {
            from: "Arbiter <arbiter@localhost>"
                .parse()
                .expect("a valid address"),
            transport: Transport::Log,
        }
    }

    /// What kind of transport this is, without credentials.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Smtp(_) => "SMTP".to_string(),
            Transport::File(_, directory) => format!("files in {}", directory.display()),
            Transport::Log => "the log".to_string(),
        }
    }

    /// Sends one plain-text message to each address in `to` (one message, all recipients).
    pub async fn send(&self, to: &[String], subject: &str, body: &str) -> anyhow::Result<()> {
        if to.is_empty() {
            return Ok(());
        }
        let mut message = Message::builder().from(self.from.clone()).subject(subject);
        for address in to {
            let mailbox: Mailbox = address
                .parse()
                .with_context(|| format!("`{address}` is not an email address"))?;
            message = message.to(mailbox);
        }
        let message = message
            .body(body.to_string())
            .context("the message cannot be built")?;
        match &self.transport {
            Transport::Smtp(smtp) => {
                smtp.send(message)
                    .await
                    .context("the SMTP server refused the message")?;
            }
            Transport::File(file, directory) => {
                file.send(message).await.with_context(|| {
                    format!("cannot write the message into {}", directory.display())
                })?;
            }
            Transport::Log => {
                // Recipients and subject only: bodies can hold a first password.
                tracing::info!(to = %to.join(", "), %subject, body_chars = body.chars().count(), "mail (log transport; body not logged)");
            }
        }
        Ok(())
    }
}

/// Checks an address typed by a person: `name@domain`, as lettre reads it.
pub fn parse_address(text: &str) -> Result<String, String> {
    let text = text.trim();
    text.parse::<lettre::Address>()
        .map(|address| address.to_string())
        .map_err(|_| format!("`{text}` is not an email address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_file_transport_writes_one_message_per_send() {
        let directory = tempfile::tempdir().unwrap();
        let spec = format!("file:{}", directory.path().display());
        let mailer = Mailer::from_config(&spec, "Arbiter <alerts@arbiter.test>").unwrap();
        mailer
            .send(
                &["lead@arbiter.test".into(), "second@arbiter.test".into()],
                "SLA at risk: qa",
                "3 tasks are forecast to miss their deadline.",
            )
            .await
            .unwrap();
        let files: Vec<_> = std::fs::read_dir(directory.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        let text = std::fs::read_to_string(&files[0]).unwrap();
        assert!(text.contains("Subject: SLA at risk: qa"), "{text}");
        assert!(
            text.contains("To: lead@arbiter.test, second@arbiter.test"),
            "{text}"
        );
        assert!(text.contains("forecast to miss"), "{text}");
        // Nobody to tell: nothing is written.
        mailer.send(&[], "nothing", "nothing").await.unwrap();
        assert_eq!(std::fs::read_dir(directory.path()).unwrap().count(), 1);
    }

    // The SMTP transport's connection pool starts a task: it needs a runtime, as in the server.
    #[tokio::test]
    async fn bad_settings_and_addresses_are_refused_with_a_reason() {
        let unknown = Mailer::from_config("carrier-pigeon", "a@b.c").unwrap_err();
        assert!(
            unknown.to_string().contains("unknown mail transport"),
            "{unknown}"
        );
        assert!(Mailer::from_config("log", "not an address").is_err());
        assert!(Mailer::from_config("smtp://user:secret@mail.example:587", "a@b.c").is_ok());
        assert_eq!(
            parse_address(" lead@example.org "),
            Ok("lead@example.org".to_string())
        );
        assert!(parse_address("lead at example").is_err());
        let debug = format!(
            "{:?}",
            Mailer::from_config("smtp://user:secret@mail.example:587", "a@b.c").unwrap()
        );
        assert!(!debug.contains("secret"), "{debug}");
    }
}
