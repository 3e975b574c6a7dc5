//! One client connection, whatever its transport: decoding, `initialize` and resume, method
//! dispatch, and what happens to the session when the connection goes away (spec §1–5, §7).
//!
//! Invariants: every method but `initialize` is refused before it; requests are handled and
//! answered in arrival order, except that one that has to wait (a long-poll, a full stdin pipe,
//! a termination) goes on as its own task (at most [`INFLIGHT`] per connection, further frames
//! wait), so a long-poll never delays another request; a connection acts on its session only while it holds the session's current
//! attachment generation; when the connection ends, its session is detached (resumable for
//! `--session-ttl`) or ended at once, which reaps every process of it.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::{handler, Call, Handler, Parker, Session, Shared};
use crate::process::start;
use crate::protocol::{self, Incoming, Params, RequestId, RpcError};
use crate::transport::{Outbound, Peer, Sender};

/// Requests of one connection running at once.
pub const INFLIGHT: usize = 64;

/// A connected client.
pub struct Connection {
    shared: Arc<Shared>,
    queue: Sender,
    binding: Mutex<Option<(Arc<Session>, u64)>>,
    inflight: Arc<Semaphore>,
}

impl Connection {
    /// A connection whose messages are written through `queue`.
    pub fn new(shared: Arc<Shared>, queue: Sender) -> Arc<Connection> {
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
                let Some(handler) = handler(&method) else {
                    let error = RpcError::new(
                        protocol::METHOD_NOT_FOUND,
                        format!("Unsupported cleanroom exec-server method: {method}"),
                    );
                    self.respond(&id, Err(error)).await;
                    return;
                };
                let Some((session, generation)) = self.binding() else {
                    let error = RpcError::invalid_request("client must call initialize first");
                    self.respond(&id, Err(error)).await;
                    return;
                };
                self.run(handler, session, generation, id, params).await;
            }
        }
    }

    /// Runs one request in order: the next frame waits until it is answered, unless it parks
    /// (see [`Call::unless_ready`]), whereupon it goes on as its own task (at most [`INFLIGHT`]).
    async fn run(
        self: &Arc<Self>,
        handler: Handler,
        session: Arc<Session>,
        generation: u64,
        id: RequestId,
        params: Value,
    ) {
        let (parker, mut parked) = Parker::new();
        let this = self.clone();
        let mut answer = Box::pin(async move {
            if session.outlet().state().1 != generation {
                let error = RpcError::invalid_request(
                    "this connection's session was resumed by another connection",
                );
                this.respond(&id, Err(error)).await;
                return;
            }
            let call = Call {
                shared: this.shared.clone(),
                session,
                params,
                parker,
            };
            let reply = handler(call).await;
            this.respond(&id, reply.result).await;
            if let Some(then) = reply.then {
                then();
            }
        });
        tokio::select! {
            biased;
            () = &mut answer => {}
            Ok(()) = &mut parked => {
                let Ok(permit) = self.inflight.clone().acquire_owned().await else {
                    return;
                };
                tokio::spawn(async move {
                    answer.await;
                    drop(permit);
                });
            }
        }
    }

    /// The connection is gone: detach the session, and end it now or after the resume window,
    /// in a task of its own: the connection (and a shutdown waiting for connections) never
    /// waits for a session's end.
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
            if session.outlet().close_if_detached(Some(generation)) {
                self.shared.end_session(session);
            }
            return;
        }
        // The timer holds the session weakly: one ended meanwhile (for room at the limit) is
        // released with its end, not kept for the rest of the TTL.
        let (shared, session) = (self.shared.clone(), Arc::downgrade(&session));
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            let Some(session) = session.upgrade() else {
                return;
            };
            if session.outlet().close_if_detached(Some(generation)) {
                shared.end_session(session);
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
                let generation = match session.outlet().attach(self.queue.clone()) {
                    Some(generation) => generation,
                    None if session.outlet().is_closed() => {
                        return Err(RpcError::invalid_request(format!(
                            "unknown session id {id} (it has ended)"
                        )))
                    }
                    None => {
                        return Err(RpcError::new(
                            protocol::SESSION_ATTACHED,
                            format!("session {id} is attached to another connection"),
                        ))
                    }
                };
                (session, generation)
            }
            None => {
                shared.make_room();
                let session = shared.sessions.create(
                    start::new_uuid()?,
                    shared.max_sessions,
                    shared.process_retention,
                    |scope| super::session::leaf_of(&shared.env, scope),
                )?;
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

    async fn respond(&self, id: &RequestId, result: Result<Value, RpcError>) {
        let text = match result {
            Ok(value) => protocol::result_response(id, value),
            Err(error) => protocol::error_response(Some(id), &error),
        };
        self.send(text).await;
    }

    async fn send(&self, text: String) {
        let _ = self.queue.send(Outbound::Text(text.into())).await;
    }
}

impl Peer for Arc<Connection> {
    async fn handle(&self, message: &[u8]) {
        Connection::handle(self, message).await;
    }

    async fn close(&self) {
        Connection::close(self).await;
    }
}
