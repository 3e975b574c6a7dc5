//! The real Codex client: `codex app-server` (JSON-RPC, one JSON message a line on stdio) with a
//! private CODEX_HOME whose config.toml points the model provider at the loopback stand-in.
//!
//! The client's requests to us (approvals and the like) are declined and recorded: with
//! `approval_policy = "never"` none should come, and the test reports any that does.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::exec_server::base_env;

/// The model the config names: one of the client's bundled models whose metadata gives it the
/// freeform `apply_patch` tool (an unknown model gets fallback metadata without it).
pub const MODEL: &str = "gpt-5.5";

/// How long any one answer of the client may take before the test says so.
const PATIENCE: Duration = Duration::from_secs(120);

/// A running `codex app-server`.
pub struct AppServer {
    child: Child,
    /// Lines for the client's stdin, written by a task of their own (so that no wait for a
    /// message is ever cancelled halfway through a write); dropping it closes stdin.
    outgoing: mpsc::UnboundedSender<String>,
    incoming: mpsc::UnboundedReceiver<Value>,
    /// Notifications that arrived while waiting for a response.
    queued: VecDeque<Value>,
    next_id: i64,
    /// Requests the client sent us (method and params), all declined.
    pub client_requests: Vec<Value>,
}

/// The client's config: the stand-in as the only model provider, no retries (a failure shows at
/// once), Codex's default sandbox and no approvals.
pub fn config_toml(model_base_url: &str) -> String {
    format!(
        r#"model = "{MODEL}"
model_provider = "standin"
approval_policy = "never"
sandbox_mode = "workspace-write"

[model_providers.standin]
name = "cleanroom interop stand-in"
base_url = "{model_base_url}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
supports_websockets = false

[analytics]
enabled = false
"#
    )
}

impl AppServer {
    /// Starts the client with its CODEX_HOME and HOME under `work`, in `cwd`.
    pub async fn start(codex: &Path, work: &Path, cwd: &Path, model_base_url: &str) -> AppServer {
        let codex_home = work.join("codex-home");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(codex_home.join("config.toml"), config_toml(model_base_url)).unwrap();
        let stderr = std::fs::File::create(work.join("app-server.stderr")).unwrap();
        let mut child = Command::new(codex)
            .arg("app-server")
            .env_clear()
            .envs(base_env(work))
            .env("CODEX_HOME", &codex_home)
            .current_dir(cwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start codex app-server");
        super::client::assert_runs(child.id().unwrap(), codex);
        let mut stdin = child.stdin.take().unwrap();
        let (outgoing, mut lines_out) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(line) = lines_out.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (sender, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let message = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("app-server sent a line that is not JSON ({e}): {line}")
                });
                if sender.send(message).is_err() {
                    break;
                }
            }
        });
        AppServer {
            child,
            outgoing,
            incoming,
            queued: VecDeque::new(),
            next_id: 0,
            client_requests: Vec::new(),
        }
    }

    fn send(&self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        // A client that exited shows in the next receive.
        let _ = self.outgoing.send(line);
    }

    /// A request; its result, or the error object the client answered with.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"id": id, "method": method, "params": params}));
        loop {
            let message = self
                .receive()
                .await
                .unwrap_or_else(|e| panic!("{method}: {e}"));
            if message.get("method").is_some() {
                self.queued.push_back(message);
            } else if message["id"] == id {
                return match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message["result"].clone()),
                };
            }
        }
    }

    /// [`AppServer::call`] that must succeed.
    pub async fn must(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params)
            .await
            .unwrap_or_else(|error| panic!("app-server {method}: {error}"))
    }

    pub fn notify(&self, method: &str) {
        self.send(json!({"method": method}));
    }

    /// The next notification of the client (cancel-safe: nothing is lost when the wait is
    /// dropped).
    pub async fn notification(&mut self) -> Result<Value, String> {
        match self.queued.pop_front() {
            Some(message) => Ok(message),
            None => self.receive().await,
        }
    }

    /// The next message, with the client's own requests answered (declined) on the way.
    async fn receive(&mut self) -> Result<Value, String> {
        loop {
            let message = match tokio::time::timeout(PATIENCE, self.incoming.recv()).await {
                Ok(Some(message)) => message,
                Ok(None) => return Err("codex app-server exited (see app-server.stderr)".into()),
                Err(_) => return Err(format!("codex app-server said nothing for {PATIENCE:?}")),
            };
            if message.get("method").is_some() && message.get("id").is_some() {
                let id = message["id"].clone();
                self.client_requests.push(message);
                let error = json!({"code": -32601, "message": "the interop test approves nothing"});
                self.send(json!({"id": id, "error": error}));
                continue;
            }
            return Ok(message);
        }
    }

    /// Closes its stdin (the client's signal to exit) and waits; kills it after 30 s.
    pub async fn stop(mut self) {
        drop(self.outgoing);
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
