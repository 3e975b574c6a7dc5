//! A recording WebSocket proxy on loopback between the Codex client and an exec-server.
//!
//! The client is given the proxy's URL in `environment/add`; every connection it opens is
//! relayed, frame for frame and close code for close code, to the exec-server's URL. On the way
//! it records each request the client sends (method, params) with the server's answer (result or
//! error code and message), and counts notifications by method: what the test reports as "which
//! method the real client used, and what each server said". Each request is stamped with when
//! it was sent and how long its answer took, and each notification with when it passed, so a
//! dump shows where a run's time goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{Sink, SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// What the server answered to one request.
#[derive(Clone, Debug)]
pub enum Answer {
    Result(Value),
    Error {
        code: i64,
        message: String,
    },
    /// The connection ended before an answer.
    None,
}

/// One request of the client and the server's answer.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: String,
    pub params: Value,
    pub answer: Answer,
    /// When the client sent it, since the proxy started.
    pub at: Duration,
    /// How long the server took to answer it.
    pub took: Option<Duration>,
}

/// A notification as it passed: when (since the proxy started), who sent it, its method and
/// the process it names.
#[derive(Clone, Debug)]
pub struct Passed {
    pub at: Duration,
    pub from: String,
    pub method: String,
    pub process_id: Option<String>,
}

struct Log {
    start: Instant,
    exchanges: Vec<Exchange>,
    /// (connection, request id) → index in `exchanges`, until answered.
    pending: HashMap<(usize, String), usize>,
    /// "client: METHOD" / "server: METHOD" → count.
    notifications: BTreeMap<String, usize>,
    /// Close frames seen, "who code reason".
    closes: Vec<String>,
    /// Every notification, in order.
    passed: Vec<Passed>,
}

impl Log {
    fn new() -> Log {
        Log {
            start: Instant::now(),
            exchanges: Vec::new(),
            pending: HashMap::new(),
            notifications: BTreeMap::new(),
            closes: Vec::new(),
            passed: Vec::new(),
        }
    }
}

/// The running proxy.
pub struct Proxy {
    port: u16,
    log: Arc<Mutex<Log>>,
    accept: tokio::task::JoinHandle<()>,
}

/// No size limit of its own: the proxy must never be the one that closes with 1009.
fn unlimited() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None)
}

impl Proxy {
    /// Relays every connection to `upstream` (the exec-server's full URL).
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Log::new()));
        let shared = log.clone();
        let accept = tokio::spawn(async move {
            let mut connection = 0;
            while let Ok((stream, _)) = listener.accept().await {
                connection += 1;
                let (upstream, log) = (upstream.clone(), shared.clone());
                tokio::spawn(relay(stream, upstream, log, connection));
            }
        });
        Proxy { port, log, accept }
    }

    /// The URL to give the client.
    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/", self.port)
    }

    /// Every request seen so far, in order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.log.lock().unwrap().exchanges.clone()
    }

    /// Notifications seen so far, counted by method.
    pub fn notifications(&self) -> BTreeMap<String, usize> {
        self.log.lock().unwrap().notifications.clone()
    }

    /// Notifications seen so far, in order, with when they passed.
    pub fn passed(&self) -> Vec<Passed> {
        self.log.lock().unwrap().passed.clone()
    }

    /// Close frames seen so far.
    pub fn closes(&self) -> Vec<String> {
        self.log.lock().unwrap().closes.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(
    stream: tokio::net::TcpStream,
    upstream: String,
    log: Arc<Mutex<Log>>,
    connection: usize,
) {
    let Ok(client) = tokio_tungstenite::accept_async_with_config(stream, Some(unlimited())).await
    else {
        return;
    };
    let server =
        match tokio_tungstenite::connect_async_with_config(&upstream, Some(unlimited()), false)
            .await
        {
            Ok((server, _)) => server,
            Err(e) => {
                log.lock()
                    .unwrap()
                    .closes
                    .push(format!("proxy cannot reach the server: {e}"));
                return;
            }
        };
    let (mut to_client, mut from_client) = client.split();
    let (mut to_server, mut from_server) = server.split();
    loop {
        let go_on = tokio::select! {
            message = from_client.next() => {
                forward(&log, connection, "client", message, &mut to_server).await
            }
            message = from_server.next() => {
                forward(&log, connection, "server", message, &mut to_client).await
            }
        };
        if !go_on {
            break;
        }
    }
    let _ = to_client.close().await;
    let _ = to_server.close().await;
}

/// Records and relays one message; false when the relay is over (end, error or close).
async fn forward<E>(
    log: &Mutex<Log>,
    connection: usize,
    from: &str,
    message: Option<Result<Message, E>>,
    to: &mut (impl Sink<Message> + Unpin),
) -> bool {
    let Some(Ok(message)) = message else {
        return false;
    };
    record(log, connection, from, &message);
    let closing = message.is_close();
    to.send(message).await.is_ok() && !closing
}

fn record(log: &Mutex<Log>, connection: usize, from: &str, message: &Message) {
    let text = match message {
        Message::Text(text) => text.as_str().to_string(),
        Message::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Message::Close(frame) => {
            let close = match frame {
                Some(frame) => format!("{from} closed {} {}", u16::from(frame.code), frame.reason),
                None => format!("{from} closed without a code"),
            };
            log.lock().unwrap().closes.push(close);
            return;
        }
        _ => return,
    };
    let Ok(value) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let mut log = log.lock().unwrap();
    let at = log.start.elapsed();
    let id = value.get("id").map(|id| (connection, id.to_string()));
    match (value["method"].as_str(), id) {
        (Some(method), Some(id)) if from == "client" => {
            let index = log.exchanges.len();
            log.exchanges.push(Exchange {
                method: method.to_string(),
                params: value["params"].clone(),
                answer: Answer::None,
                at,
                took: None,
            });
            log.pending.insert(id, index);
        }
        (Some(method), None) => {
            *log.notifications
                .entry(format!("{from}: {method}"))
                .or_default() += 1;
            log.passed.push(Passed {
                at,
                from: from.to_string(),
                method: method.to_string(),
                process_id: value["params"]["processId"].as_str().map(String::from),
            });
        }
        (None, Some(id)) => {
            let Some(index) = log.pending.remove(&id) else {
                return;
            };
            let exchange = &mut log.exchanges[index];
            exchange.took = Some(at - exchange.at);
            exchange.answer = match value.get("error") {
                Some(error) => Answer::Error {
                    code: error["code"].as_i64().unwrap_or(0),
                    message: error["message"].as_str().unwrap_or("").to_string(),
                },
                None => Answer::Result(value["result"].clone()),
            };
        }
        _ => {}
    }
}
