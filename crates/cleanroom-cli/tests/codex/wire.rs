//! A minimal exec-server client over WebSocket, speaking the protocol directly (no Codex in
//! between): the one client the measurements drive both servers with, so their figures compare.
//!
//! Output notifications are parsed into borrowed fields and decoded into a byte count, nothing
//! kept: the client should cost as little as it can so the figures show the server.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long one message may take before the measurement gives up.
const PATIENCE: Duration = Duration::from_secs(120);

/// One connection to an exec-server.
pub struct Wire {
    ws: Ws,
    next_id: u64,
    /// Messages that arrived while waiting for a response.
    backlog: VecDeque<String>,
}

/// What a finished process sent.
pub struct Finished {
    /// Decoded output bytes (stdout and stderr).
    pub bytes: usize,
    pub exit_code: Option<i64>,
    /// From `process/start` to `process/closed`.
    pub elapsed: Duration,
}

#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params<'a> {
    #[serde(borrow)]
    process_id: Option<&'a str>,
    #[serde(borrow)]
    chunk: Option<&'a str>,
    exit_code: Option<i64>,
}

impl Wire {
    /// Connects, `initialize`s and sends `initialized`.
    pub async fn connect(url: &str) -> Wire {
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), false)
            .await
            .unwrap_or_else(|e| panic!("connect {url}: {e}"));
        let mut wire = Wire {
            ws,
            next_id: 0,
            backlog: VecDeque::new(),
        };
        wire.call(
            "initialize",
            json!({"clientName": "cleanroom-interop-figures"}),
        )
        .await
        .expect("initialize");
        wire.send(json!({"method": "initialized"}).to_string())
            .await;
        wire
    }

    async fn send(&mut self, text: String) {
        self.ws.send(Message::text(text)).await.unwrap();
    }

    /// The next message: a kept one first, else the next frame.
    async fn receive(&mut self) -> String {
        match self.backlog.pop_front() {
            Some(text) => text,
            None => self.frame().await,
        }
    }

    async fn frame(&mut self) -> String {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.ws.next())
                .await
                .expect("the server answers within the patience")
                .expect("the socket stays open")
                .expect("a well-formed frame");
            match frame {
                Message::Text(text) => return text.as_str().to_string(),
                Message::Binary(bytes) => return String::from_utf8(bytes.to_vec()).unwrap(),
                _ => continue,
            }
        }
    }

    /// A request; its result or its error object. Notifications on the way are kept.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"id": id, "method": method, "params": params}).to_string())
            .await;
        loop {
            let text = self.frame().await;
            let value: Value = serde_json::from_str(&text).unwrap();
            if value.get("method").is_none() && value["id"] == id {
                return match value.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(value["result"].clone()),
                };
            }
            self.backlog.push_back(text);
        }
    }

    /// Starts `argv` in `cwd` (a file URI) with `sandbox` (null: none) and consumes its
    /// notifications until `process/closed`. The environment is the server's, as the Codex
    /// client asks for it (`inherit: all`).
    pub async fn run(
        &mut self,
        process_id: &str,
        argv: &[&str],
        cwd: &str,
        sandbox: &Value,
    ) -> Result<Finished, Value> {
        let started = Instant::now();
        let env_policy = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
            "set": {}, "includeOnly": []});
        let params = json!({"processId": process_id, "argv": argv, "cwd": cwd, "env": {},
            "envPolicy": env_policy, "tty": false, "arg0": null, "sandbox": sandbox});
        self.call("process/start", params).await?;
        let (mut bytes, mut exit_code) = (0, None);
        loop {
            let text = self.receive().await;
            let note: Notification = serde_json::from_str(&text).unwrap();
            let Some(params) = note.params.filter(|p| p.process_id == Some(process_id)) else {
                continue;
            };
            match note.method {
                "process/output" => bytes += decoded_len(params.chunk.unwrap_or("")),
                "process/exited" => exit_code = params.exit_code,
                "process/closed" => break,
                _ => {}
            }
        }
        Ok(Finished {
            bytes,
            exit_code,
            elapsed: started.elapsed(),
        })
    }
}

/// The decoded length of a base64 chunk (decoded for real: a server sending garbage fails).
fn decoded_len(chunk: &str) -> usize {
    BASE64.decode(chunk).expect("base64 output").len()
}
