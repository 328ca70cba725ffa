//! A local SMTP sink that records what each client did: the commands it sent, whether each came
//! over TLS, and the messages it delivered. It may offer STARTTLS (with a certificate made for
//! 127.0.0.1 by a CA of its own, whose PEM file the test gives to the mailer) or not.
//!
//! Enough SMTP for lettre: greeting, EHLO, STARTTLS, AUTH (accepted), MAIL, RCPT, DATA,
//! RSET, NOOP and QUIT. Nothing is relayed anywhere.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One command a client sent, and whether it came over TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmtpCommand {
    /// The verb (`EHLO`, `AUTH`, `MAIL`, …), upper-cased; arguments are not kept (AUTH carries
    /// the password).
    pub verb: String,
    pub over_tls: bool,
}

/// A message the sink accepted.
#[derive(Clone, Debug)]
pub struct SmtpMessage {
    pub data: String,
    pub over_tls: bool,
}

#[derive(Default)]
struct Recorded {
    commands: Vec<SmtpCommand>,
    messages: Vec<SmtpMessage>,
}

/// A running sink; it stops with the test's runtime.
pub struct SmtpSink {
    pub port: u16,
    /// The PEM file of the CA that signed the sink's certificate (when it offers STARTTLS).
    pub ca_file: Option<PathBuf>,
    recorded: Arc<Mutex<Recorded>>,
    _directory: tempfile::TempDir,
}

impl SmtpSink {
    /// A sink on a random loopback port, offering STARTTLS or not.
    pub async fn start(offers_starttls: bool) -> SmtpSink {
        let directory = tempfile::tempdir().unwrap();
        let (acceptor, ca_file) = if offers_starttls {
            let (acceptor, ca_pem) = tls_acceptor();
            let ca_file = directory.path().join("ca.pem");
            std::fs::write(&ca_file, ca_pem).unwrap();
            (Some(acceptor), Some(ca_file))
        } else {
            (None, None)
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let recorded = Arc::new(Mutex::new(Recorded::default()));
        let shared = recorded.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, recorded) = (acceptor.clone(), shared.clone());
                tokio::spawn(async move {
                    let mut plain = BufReader::new(stream);
                    if reply(&mut plain, "220 arbiter-test-sink ESMTP")
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let upgrade = converse(&mut plain, acceptor.is_some(), false, &recorded).await;
                    if let (Some(acceptor), Conversation::StartTls) = (acceptor, upgrade) {
                        let Ok(tls) = acceptor.accept(plain.into_inner()).await else {
                            return;
                        };
                        converse(&mut BufReader::new(tls), false, true, &recorded).await;
                    }
                });
            }
        });
        SmtpSink {
            port,
            ca_file,
            recorded,
            _directory: directory,
        }
    }

    pub fn commands(&self) -> Vec<SmtpCommand> {
        self.recorded.lock().unwrap().commands.clone()
    }

    pub fn messages(&self) -> Vec<SmtpMessage> {
        self.recorded.lock().unwrap().messages.clone()
    }
}

/// How a conversation ended.
enum Conversation {
    StartTls,
    Closed,
}

async fn reply<S: AsyncWrite + Unpin>(stream: &mut S, line: &str) -> std::io::Result<()> {
    stream.write_all(format!("{line}\r\n").as_bytes()).await?;
    stream.flush().await
}

/// Serves commands until the client quits, disconnects or asks for STARTTLS.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut BufReader<S>,
    offers_starttls: bool,
    over_tls: bool,
    recorded: &Mutex<Recorded>,
) -> Conversation {
    let mut line = String::new();
    loop {
        line.clear();
        match stream.read_line(&mut line).await {
            Ok(0) | Err(_) => return Conversation::Closed,
            Ok(_) => {}
        }
        let verb = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        recorded.lock().unwrap().commands.push(SmtpCommand {
            verb: verb.clone(),
            over_tls,
        });
        let answer = match verb.as_str() {
            "EHLO" | "HELO" if offers_starttls => {
                "250-arbiter-test-sink\r\n250-STARTTLS\r\n250 8BITMIME"
            }
            "EHLO" | "HELO" => "250-arbiter-test-sink\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME",
            "STARTTLS" if offers_starttls => {
                let _ = reply(stream, "220 ready to start TLS").await;
                return Conversation::StartTls;
            }
            "AUTH" => "235 accepted",
            "MAIL" | "RCPT" | "RSET" | "NOOP" => "250 ok",
            "DATA" => {
                if reply(stream, "354 end with <CRLF>.<CRLF>").await.is_err() {
                    return Conversation::Closed;
                }
                let mut data = String::new();
                loop {
                    let mut data_line = String::new();
                    match stream.read_line(&mut data_line).await {
                        Ok(0) | Err(_) => return Conversation::Closed,
                        Ok(_) if data_line == ".\r\n" => break,
                        Ok(_) => data.push_str(&data_line),
                    }
                }
                recorded
                    .lock()
                    .unwrap()
                    .messages
                    .push(SmtpMessage { data, over_tls });
                "250 queued"
            }
            "QUIT" => {
                let _ = reply(stream, "221 bye").await;
                return Conversation::Closed;
            }
            _ => "502 not implemented",
        };
        if reply(stream, answer).await.is_err() {
            return Conversation::Closed;
        }
    }
}

/// A TLS acceptor for 127.0.0.1 and the PEM of the CA that signed its certificate.
fn tls_acceptor() -> (tokio_rustls::TlsAcceptor, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![server.der().clone(), ca.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
        )
        .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca.pem())
}
