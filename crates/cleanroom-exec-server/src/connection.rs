//! One client connection, whatever its transport: decoding, `initialize` and resume, method
//! dispatch, and what happens to the session when the connection goes away (spec §1–5, §7).
//!
//! Invariants: every method but `initialize` is refused before it; requests run as their own
//! tasks (at most [`INFLIGHT`] per connection, further frames wait), so a long-poll never delays
//! another request; a connection acts on its session only while it holds the session's current
//! attachment generation; when the connection ends, its session is detached (resumable for
//! `--session-ttl`) or ended at once, which reaps every process of it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

use crate::outlet::Outbound;
use crate::protocol::{self, Incoming, Params, RequestId, RpcError};
use crate::server::Shared;
use crate::session::Session;
use crate::start::{self, EnvContext};

/// Requests of one connection running at once.
pub const INFLIGHT: usize = 64;

/// Methods this server answers (everything else is -32601, the fs methods included).
const METHODS: &[&str] = &[
    "environment/info",
    "environment/status",
    "process/start",
    "process/read",
    "process/write",
    "process/signal",
    "process/terminate",
    "http/request",
];

/// A connected client.
pub struct Connection {
    shared: Arc<Shared>,
    queue: mpsc::Sender<Outbound>,
    binding: Mutex<Option<(Arc<Session>, u64)>>,
    inflight: Arc<Semaphore>,
}

impl Connection {
    /// A connection whose messages are written through `queue`.
    pub fn new(shared: Arc<Shared>, queue: mpsc::Sender<Outbound>) -> Arc<Connection> {
        Arc::new(Connection {
            shared,
            queue,
            binding: Mutex::new(None),
            inflight: Arc::new(Semaphore::new(INFLIGHT)),
        })
    }

    /// Handles one inbound message.
    pub async fn handle(self: &Arc<Self>, bytes: &[u8]) {
        match protocol::decode(bytes) {
            Incoming::Invalid(response) => self.send(response).await,
            Incoming::Notification { method } => {
                if method != "initialized" {
                    tracing::debug!("ignoring notification {method:?}");
                }
            }
            Incoming::Request { id, method, params } => {
                if method == "initialize" {
                    let result = self.initialize(&params);
                    self.respond(&id, result).await;
                    return;
                }
                if !METHODS.contains(&method.as_str())
                    && !crate::fs::METHODS.contains(&method.as_str())
                {
                    let error = RpcError::new(
                        protocol::METHOD_NOT_FOUND,
                        format!("Unsupported cleanroom exec-server method: {method}"),
                    );
                    self.respond(&id, Err(error)).await;
                    return;
                }
                let Some((session, generation)) = self.binding() else {
                    let error = RpcError::invalid_request("client must call initialize first");
                    self.respond(&id, Err(error)).await;
                    return;
                };
                let Ok(permit) = self.inflight.clone().acquire_owned().await else {
                    return;
                };
                let this = self.clone();
                tokio::spawn(async move {
                    this.call(session, generation, id, &method, params).await;
                    drop(permit);
                });
            }
        }
    }

    /// The connection is gone: detach the session, and end it now or after the resume window.
    pub async fn close(&self) {
        let binding = self
            .binding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((session, generation)) = binding else {
            return;
        };
        if !session.outlet().detach(generation) {
            return;
        }
        let ttl = self.shared.session_ttl;
        if ttl.is_zero() {
            self.shared.end_session(&session).await;
            return;
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if session.outlet().state() == (false, generation) {
                shared.end_session(&session).await;
            }
        });
    }

    fn binding(&self) -> Option<(Arc<Session>, u64)> {
        self.binding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn initialize(&self, params: &Value) -> Result<Value, RpcError> {
        let p = Params::new(params)?;
        p.opt_string("clientName")?;
        let resume = p.opt_string("resumeSessionId")?;
        let mut binding = self.binding.lock().unwrap_or_else(PoisonError::into_inner);
        if binding.is_some() {
            return Err(RpcError::invalid_request(
                "initialize was already called on this connection",
            ));
        }
        let shared = &self.shared;
        let (session, generation) = match resume {
            Some(id) => {
                let session = shared
                    .sessions
                    .get(id)
                    .ok_or_else(|| RpcError::invalid_request(format!("unknown session id {id}")))?;
                let generation = session.outlet().attach(self.queue.clone()).ok_or_else(|| {
                    RpcError::new(
                        protocol::SESSION_ATTACHED,
                        format!("session {id} is attached to another connection"),
                    )
                })?;
                (session, generation)
            }
            None => {
                let session = shared
                    .sessions
                    .create(start::new_uuid()?, shared.max_sessions)?;
                let generation = session
                    .outlet()
                    .attach(self.queue.clone())
                    .ok_or_else(|| RpcError::internal("a new session was already attached"))?;
                (session, generation)
            }
        };
        let result = json!({"sessionId": session.id(), "environmentInfo": shared.env.info()});
        *binding = Some((session, generation));
        Ok(result)
    }

    async fn call(
        &self,
        session: Arc<Session>,
        generation: u64,
        id: RequestId,
        method: &str,
        params: Value,
    ) {
        if session.outlet().state().1 != generation {
            let error = RpcError::invalid_request(
                "this connection's session was resumed by another connection",
            );
            self.respond(&id, Err(error)).await;
            return;
        }
        let shared = &self.shared;
        let result = match method {
            "environment/info" => Ok(shared.env.info()),
            "environment/status" => Ok(json!({"status": "ready"})),
            "process/start" => return self.start(&session, &id, &params).await,
            "process/read" => read(&session, &params).await,
            "http/request" => match crate::http::call(&params).await {
                Err(e) => Err(e),
                Ok(reply) => {
                    self.respond(&id, Ok(reply.result)).await;
                    if let Some(stream) = reply.stream {
                        tokio::spawn(stream.run(session.outlet().clone()));
                    }
                    return;
                }
            },
            m if m.starts_with("fs/") => {
                crate::fs::call(m, &params, shared.env.policy_base(), session.fs()).await
            }
            "process/write" => write(&session, &params).await,
            "process/signal" => signal(&session, &params),
            "process/terminate" => match Params::new(&params).and_then(|p| p.string("processId")) {
                Err(e) => Err(e),
                Ok(pid) => match session.process(pid) {
                    None => Ok(json!({"running": false})),
                    Some(process) => process
                        .terminate(&shared.reaper, false)
                        .await
                        .map(|running| json!({"running": running})),
                },
            },
            _ => Err(RpcError::new(
                protocol::METHOD_NOT_FOUND,
                format!("Unsupported cleanroom exec-server method: {method}"),
            )),
        };
        self.respond(&id, result).await;
    }

    /// `process/start`: the response is queued before the process's pumps start, so it
    /// precedes every notification of the process.
    async fn start(&self, session: &Arc<Session>, id: &RequestId, params: &Value) {
        let shared = &self.shared;
        let context = EnvContext {
            base: shared.env.base(),
            allow_secret_env: shared.allow_secret_env,
            run_id: shared.env.run_id(),
            policy: shared.env.policy_base(),
        };
        let started = start::validate(params, &context).and_then(|spec| {
            session
                .start(&spec, &shared.env, &shared.reaper, shared.max_processes)
                .map(|(process, started)| (spec, process, started))
        });
        match started {
            Err(e) => self.respond(id, Err(e)).await,
            Ok((spec, process, started)) => {
                let result = json!({"processId": spec.process_id, "sandboxType": spec.confinement.sandbox_type()});
                self.respond(id, Ok(result)).await;
                process.begin(started, shared.reaper.clone());
                session.forget_later(process);
            }
        }
    }

    async fn respond(&self, id: &RequestId, result: Result<Value, RpcError>) {
        let text = match result {
            Ok(value) => protocol::result_response(id, value),
            Err(error) => protocol::error_response(Some(id), &error),
        };
        self.send(text).await;
    }

    async fn send(&self, text: String) {
        let _ = self.queue.send(Outbound::Text(text)).await;
    }
}

async fn read(session: &Session, params: &Value) -> Result<Value, RpcError> {
    let p = Params::new(params)?;
    let id = p.string("processId")?;
    let after = p.opt_u64("afterSeq")?.unwrap_or(0);
    let max_bytes = p.opt_u64("maxBytes")?;
    let wait = Duration::from_millis(p.opt_u64("waitMs")?.unwrap_or(0));
    let process = session
        .process(id)
        .ok_or_else(|| RpcError::invalid_request(format!("unknown process id {id}")))?;
    Ok(process.read(after, max_bytes, wait).await)
}

async fn write(session: &Session, params: &Value) -> Result<Value, RpcError> {
    let p = Params::new(params)?;
    let id = p.string("processId")?;
    let chunk = p.string("chunk")?;
    let data = BASE64
        .decode(chunk)
        .map_err(|e| RpcError::invalid_params(format!("chunk must be base64: {e}")))?;
    let write_id = p.opt_string("writeId")?;
    let status = match session.process(id) {
        None => "unknownProcess",
        Some(process) => process.write(&data, write_id).await,
    };
    Ok(json!({"status": status}))
}

fn signal(session: &Session, params: &Value) -> Result<Value, RpcError> {
    let p = Params::new(params)?;
    let id = p.string("processId")?;
    match p.string("signal")? {
        "interrupt" => {}
        other => {
            return Err(RpcError::invalid_params(format!(
                "signal {other:?} is not supported; the only signal is \"interrupt\""
            )))
        }
    }
    if let Some(process) = session.process(id) {
        process.interrupt()?;
    }
    Ok(json!({}))
}
