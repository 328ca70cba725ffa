//! Outgoing email: alerts to leads and invitations to raters, through lettre.
//!
//! The transport is chosen by the operator with one setting: `smtp://user:pass@host:587`
//! (STARTTLS, required: a server that does not offer it gets nothing, not even the password)
//! or `smtps://…:465` (TLS from the first byte) for a real mail server; `smtp+cleartext://host:25`
//! for a local relay that speaks no TLS (an explicit opt-out, which refuses credentials, since
//! they would cross the wire in clear text); `file:DIR` to write each message as an `.eml` file
//! (the demo's), or `log` to note recipients and subject in the server log (never the body,
//! which may hold a first password). A mail server whose certificate comes from a private CA
//! is trusted with that CA's PEM file (`--mail-ca-file`). A failed send is reported to the
//! caller, who decides whether to retry (the queue monitor does, on its next round, because an
//! alert counts as emailed only once it was sent).

use anyhow::Context;
use lettre::message::Mailbox;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::path::{Path, PathBuf};

/// Sends mail through the configured transport.
pub struct Mailer {
    from: Mailbox,
    transport: Transport,
}

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>, SmtpSecurity),
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

/// How an SMTP transport protects what it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SmtpSecurity {
    /// `smtp://`: STARTTLS, required before authentication and the message.
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Tls,
    /// `smtp+cleartext://`: none, to a local relay, without credentials.
    Cleartext,
}

/// The scheme of the explicit opt-out from TLS, for a local relay.
const CLEARTEXT_SCHEME: &str = "smtp+cleartext";

/// An SMTP transport from the operator's URL, trusting `ca` besides the public roots.
fn smtp_transport(
    url: &str,
    ca: Option<&Certificate>,
) -> anyhow::Result<(AsyncSmtpTransport<Tokio1Executor>, SmtpSecurity)> {
    // The URL holds a password: errors never quote it.
    let mut parsed = url::Url::parse(url).map_err(|err| {
        anyhow::anyhow!("the SMTP URL is not valid ({err}): use smtp://user:password@host:port")
    })?;
    let host = parsed
        .host_str()
        .filter(|host| !host.is_empty())
        .context("the SMTP URL names no host")?
        .to_string();
    let tls_mode = parsed
        .query_pairs()
        .find(|(key, _)| key == "tls")
        .map(|(_, value)| value.into_owned());
    let security = match (parsed.scheme(), tls_mode.as_deref()) {
        ("smtp", None | Some("required")) => SmtpSecurity::StartTls,
        ("smtp", Some(mode)) => anyhow::bail!(
            "`tls={mode}` is not accepted: with it mail may go out in clear text. `smtp://` \
             always requires STARTTLS; use {CLEARTEXT_SCHEME}://host:port for a local relay \
             without TLS"
        ),
        ("smtps", None) => SmtpSecurity::Tls,
        (CLEARTEXT_SCHEME, None) => SmtpSecurity::Cleartext,
        (scheme, _) => anyhow::bail!(
            "`{scheme}://` with a `tls` setting is not accepted: use smtp:// (STARTTLS), \
             smtps:// (TLS) or {CLEARTEXT_SCHEME}:// (a local relay, no TLS)"
        ),
    };
    if security == SmtpSecurity::Cleartext {
        if !parsed.username().is_empty() || parsed.password().is_some() {
            anyhow::bail!(
                "{CLEARTEXT_SCHEME}:// sends everything in clear text, so it takes no user or \
                 password: use smtp:// (STARTTLS) or smtps:// to authenticate"
            );
        }
        // lettre's own URL form: `smtp://` without a `tls` setting is plain SMTP on port 25.
        parsed
            .set_scheme("smtp")
            .map_err(|()| anyhow::anyhow!("the SMTP URL cannot be read"))?;
    } else if security == SmtpSecurity::StartTls && tls_mode.is_none() {
        parsed.query_pairs_mut().append_pair("tls", "required");
    }
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(parsed.as_str())
        .context("the SMTP URL is not valid (smtp://user:password@host:port)")?;
    if let Some(ca) = ca {
        let parameters = TlsParameters::builder(host)
            .add_root_certificate(ca.clone())
            .build()
            .context("the mail CA certificate cannot be used")?;
        builder = match security {
            SmtpSecurity::StartTls => builder.tls(Tls::Required(parameters)),
            SmtpSecurity::Tls => builder.tls(Tls::Wrapper(parameters)),
            SmtpSecurity::Cleartext => builder,
        };
    }
    Ok((builder.build(), security))
}

impl Mailer {
    /// A mailer from the operator's transport setting and sender address. Call it inside the
    /// Tokio runtime: the SMTP transport's connection pool runs on it.
    pub fn from_config(transport: &str, from: &str) -> anyhow::Result<Mailer> {
        Self::from_settings(transport, from, None)
    }

    /// [`Mailer::from_config`], also trusting the CA certificates in the PEM file `ca_file`
    /// (a mail server with a certificate from a private CA).
    pub fn from_settings(
        transport: &str,
        from: &str,
        ca_file: Option<&Path>,
    ) -> anyhow::Result<Mailer> {
        let ca = ca_file
            .map(|path| {
                let pem = std::fs::read(path)
                    .with_context(|| format!("cannot read the mail CA file {}", path.display()))?;
                Certificate::from_pem(&pem).with_context(|| {
                    format!(
                        "the mail CA file {} holds no PEM certificate",
                        path.display()
                    )
                })
            })
            .transpose()?;
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
        } else if ["smtp://", "smtps://", "smtp+cleartext://"]
            .iter()
            .any(|scheme| transport.starts_with(scheme))
        {
            let (smtp, security) = smtp_transport(transport, ca.as_ref())?;
            if security == SmtpSecurity::Cleartext {
                tracing::warn!("mail goes to the relay in clear text (smtp+cleartext://)");
            }
            Transport::Smtp(smtp, security)
        } else {
            anyhow::bail!(
                "unknown mail transport `{transport}`: use smtp://… (STARTTLS), smtps://…, \
                 smtp+cleartext://… (a local relay), file:DIRECTORY or log"
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
            Transport::Smtp(_, SmtpSecurity::StartTls) => "SMTP (STARTTLS required)".to_string(),
            Transport::Smtp(_, SmtpSecurity::Tls) => "SMTP over TLS".to_string(),
            Transport::Smtp(_, SmtpSecurity::Cleartext) => {
                "SMTP in clear text to a local relay".to_string()
            }
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
            Transport::Smtp(smtp, _) => {
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
