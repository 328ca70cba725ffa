//! Clients of the outside world: model endpoints ([`model`]) and mail ([`mail`]), every HTTP
//! request under the egress policy ([`egress`]).

pub mod egress;
pub mod mail;
pub mod model;

/// A one-shot HTTP server on loopback for the clients' tests.
#[cfg(test)]
pub(crate) mod test_server {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Listens on a free loopback port, answers the first request with `answer` (a whole
    /// HTTP/1.1 response) and returns the port.
    pub async fn answer_once(answer: String) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket.write_all(answer.as_bytes()).await;
        });
        port
    }
}
