//! A stand-in model endpoint that records every request body it is sent, for tests that check
//! what Arbiter puts on the wire (rendered prompts, routes, sampling settings). It serves
//! `/v1/models` (one model), `/v1/chat/completions` and `/v1/completions`, answering each
//! request with the text its `reply` function gives.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// A reply that makes the recorder refuse the request with HTTP 400 (recorded all the same):
/// a failure no retry can help, for tests of what follows an endpoint error.
pub const REFUSE: &str = "\u{0}refuse with 400";

/// One request as received: the route after `/v1/`, and the JSON body.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub route: String,
    pub body: Value,
}

/// A running recorder: its base URL (ending in `/v1`) and what it has received so far.
pub struct Recorder {
    pub base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    probes: Arc<std::sync::atomic::AtomicUsize>,
}

impl Recorder {
    /// Starts a recorder serving `model`, answering each request with `reply(body)`.
    pub async fn start(model: &str, reply: fn(&Value) -> String) -> Recorder {
        crate::egress::allow_loopback();
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let probes: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let probed = probes.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let model = model.to_string();
        let seen = requests.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                let model = model.clone();
                let probed = probed.clone();
                tokio::spawn(serve_one(stream, seen, probed, model, reply));
            }
        });
        Recorder {
            base_url: format!("http://{address}/v1"),
            requests,
            probes,
        }
    }

    /// How many times `/v1/models` was asked (probes of the endpoint).
    pub fn probes(&self) -> usize {
        self.probes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves the HTTP/1.1 requests of one connection (keep-alive), by hand: the test needs no
/// more of HTTP than a JSON body with a Content-Length.
async fn serve_one(
    stream: tokio::net::TcpStream,
    seen: Arc<Mutex<Vec<Recorded>>>,
    probed: Arc<std::sync::atomic::AtomicUsize>,
    model: String,
    reply: fn(&Value) -> String,
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        let route = path.trim_start_matches("/v1/").to_string();
        let mut status = "200 OK";
        let response = match route.as_str() {
            "models" => {
                probed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                json!({"object": "list", "data": [{"id": model, "object": "model"}]})
            }
            "chat/completions" | "completions" => {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let text = reply(&body);
                seen.lock().unwrap().push(Recorded {
                    route: route.clone(),
                    body,
                });
                if text == REFUSE {
                    status = "400 Bad Request";
                }
                let choice = if route == "completions" {
                    json!({"index": 0, "text": text, "finish_reason": "stop"})
                } else {
                    json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"})
                };
                json!({"id": "rec", "object": "completion", "model": model, "choices": [choice],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 3}})
            }
            _ => json!({"error": {"message": "not found"}}),
        };
        let payload = response.to_string();
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            payload.len()
        );
        if write.write_all(head.as_bytes()).await.is_err()
            || write.write_all(payload.as_bytes()).await.is_err()
        {
            return;
        }
    }
}
