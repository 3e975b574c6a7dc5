//! JSON-RPC sessions over any transport (spec §2–5): the state every connection shares, the
//! connection itself (handshake, resume, what a lost connection does), sessions, and the one
//! table where method names map to their handlers.
//!
//! - `connection`: one client: `initialize`, resume, ordering and limits of its requests;
//! - `session`: sessions, their registry, and their ends;
//! - `methods`: the handlers of `environment/*`, `process/*`, `fs/*` and `http/request`.
//!
//! Adding a method is one line in [`handler`], e.g. `"fs/readFile" => |c|
//! answer(crate::fs::read_file(c))` (a handler takes the [`Call`] by value and returns a
//! `Send + 'static` future of its result).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::Value;

use crate::environment::Environment;
use crate::process::Reaper;
use crate::protocol::RpcError;
use crate::transport::{Sender, Service};

mod connection;
mod methods;
mod session;

pub use connection::Connection;
pub use session::{Registry, Session};

/// State shared by every connection.
pub struct Shared {
    pub(crate) env: Environment,
    pub(crate) reaper: Reaper,
    pub(crate) sessions: Registry,
    pub(crate) session_ttl: Duration,
    pub(crate) process_retention: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) max_processes: usize,
    pub(crate) allow_secret_env: bool,
}

impl Shared {
    /// Ends `session`: it leaves the registry now (it can no longer be resumed), and every
    /// process of it is reaped in a task of its own, during which it counts as ending. A
    /// session no longer registered was ended already: nothing happens.
    pub(crate) fn end_session(self: &Arc<Self>, session: Arc<Session>) {
        let Some(ending) = self.sessions.remove(&session, self.clone()) else {
            return;
        };
        tokio::spawn(async move {
            session.end(&ending.shared().reaper).await;
            drop(ending);
        });
    }

    /// At the `--max-sessions` limit, ends the session detached longest so that a live client
    /// is admitted: a detached session's client is gone, and it is only resumable until
    /// `--session-ttl`; an attached session is never ended for room (then `initialize` is
    /// refused).
    pub(crate) fn make_room(self: &Arc<Self>) {
        let oldest = self.sessions.longest_detached_if_full(self.max_sessions);
        // Closed first: a resume that came after the choice keeps its session.
        if let Some(oldest) = oldest.filter(|s| s.outlet().close_if_detached(None)) {
            tracing::info!(
                "session {}: ended before its --session-ttl, to admit a new client at \
                 --max-sessions {}",
                oldest.id(),
                self.max_sessions
            );
            self.end_session(oldest);
        }
    }
}

/// The shared state serves connections; each gets a [`Connection`].
pub struct Rpc(pub Arc<Shared>);

impl Service for Rpc {
    type Peer = Arc<Connection>;

    fn connect(&self, queue: Sender) -> Arc<Connection> {
        Connection::new(self.0.clone(), queue)
    }
}

/// One request of an initialized connection, as its handler gets it.
pub struct Call {
    /// The server's state.
    pub shared: Arc<Shared>,
    /// The connection's session.
    pub session: Arc<Session>,
    /// The request's params (`{}` when absent).
    pub params: Value,
    /// Tells the connection this request is about to wait.
    pub(crate) parker: Parker,
}

impl Call {
    /// Runs `work`; if it cannot finish at once (a long-poll, a full stdin pipe, a termination),
    /// the connection is told to go on with later requests meanwhile. Requests are handled in
    /// order, one at a time, up to such a wait.
    pub async fn unless_ready<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        match work.as_mut().now_or_never() {
            Some(done) => done,
            None => {
                self.parker.park();
                work.await
            }
        }
    }
}

/// The sending side of a request's "I am waiting" signal.
pub(crate) struct Parker(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl Parker {
    /// A parker and the signal the connection waits for.
    pub(crate) fn new() -> (Parker, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Parker(std::sync::Mutex::new(Some(tx))), rx)
    }

    fn park(&self) {
        let sender = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}

/// A handler's answer, and what to do once it is queued.
pub struct Reply {
    /// The result or error sent back.
    pub result: Result<Value, RpcError>,
    /// Runs after the response is queued (`process/start` starts its pumps there, so the
    /// result precedes every notification of the process).
    pub then: Option<Box<dyn FnOnce() + Send>>,
}

impl From<Result<Value, RpcError>> for Reply {
    fn from(result: Result<Value, RpcError>) -> Reply {
        Reply { result, then: None }
    }
}

/// Answers one request.
pub type Handler = fn(Call) -> BoxFuture<'static, Reply>;

/// The handler of `method`, or `None` for a method this server does not have (-32601).
/// The one place where method names map to handlers.
pub fn handler(method: &str) -> Option<Handler> {
    let handler: Handler = match method {
        "environment/info" => |c| answer(methods::environment_info(c)),
        "environment/status" => |c| answer(methods::environment_status(c)),
        "process/start" => |c| methods::start(c).boxed(),
        "process/read" => |c| answer(methods::read(c)),
        "process/write" => |c| answer(methods::write(c)),
        "process/signal" => |c| answer(methods::signal(c)),
        "process/terminate" => |c| methods::terminate(c).boxed(),
        "fs/getMetadata" => |c| answer(methods::fs("fs/getMetadata", c)),
        "fs/readFile" => |c| answer(methods::fs("fs/readFile", c)),
        "fs/writeFile" => |c| answer(methods::fs("fs/writeFile", c)),
        "fs/createDirectory" => |c| answer(methods::fs("fs/createDirectory", c)),
        "fs/readDirectory" => |c| answer(methods::fs("fs/readDirectory", c)),
        "fs/remove" => |c| answer(methods::fs("fs/remove", c)),
        "fs/copy" => |c| answer(methods::fs("fs/copy", c)),
        "fs/canonicalize" => |c| answer(methods::fs("fs/canonicalize", c)),
        "fs/open" => |c| answer(methods::fs("fs/open", c)),
        "fs/readBlock" => |c| answer(methods::fs_handle("fs/readBlock", c)),
        "fs/close" => |c| answer(methods::fs_handle("fs/close", c)),
        "http/request" => |c| methods::http(c).boxed(),
        _ => return None,
    };
    Some(handler)
}

/// A handler that only returns a result.
fn answer(
    result: impl std::future::Future<Output = Result<Value, RpcError>> + Send + 'static,
) -> BoxFuture<'static, Reply> {
    result.map(Reply::from).boxed()
}
