//! Transports (spec §1): WebSocket with a capability path, and newline-delimited stdio.
//!
//! Owns: accepting connections (a small pending budget for unauthenticated ones, see
//! `admission`; `--max-connections` for authenticated ones), the HTTP side (`GET /readyz`, the
//! capability check with close 1008), frame size limits (close 1009 before parsing), pings, and
//! each connection's writer, whose queue is bounded by messages and by bytes (`queue`) and whose
//! sends time out when the client stops reading. It knows nothing of JSON-RPC: each connection
//! is handed to a [`Service`]'s [`Peer`], which gets every message and may queue [`Outbound`]
//! messages.
//!
//! Invariant: anything a client does ends at most its own connection: errors of one socket are
//! logged and that socket is dropped; the listener keeps accepting.

use std::future::Future;

mod admission;
mod queue;
mod stdio;
mod websocket;

#[cfg(test)]
pub(crate) use queue::channel;
pub use queue::Sender;
pub use stdio::serve_stdio;
pub use tokio_tungstenite::tungstenite::Utf8Bytes;
pub use websocket::serve_websocket;

/// Close codes the server sends (RFC 6455 §7.4).
pub mod close {
    /// The client closed; we complete the handshake.
    pub const NORMAL: u16 = 1000;
    /// The server is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// Wrong capability path.
    pub const POLICY: u16 = 1008;
    /// A frame or message over the limit.
    pub const TOO_BIG: u16 = 1009;
    /// `--max-connections` authenticated connections are open.
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// One message for a connection's writer (closing is the transport's own business).
#[derive(Debug)]
pub enum Outbound {
    /// A JSON-RPC message: immutable text that clones without copying, so a process's retention
    /// buffer and the queue hold the very same bytes, and the WebSocket frame is built from them.
    Text(Utf8Bytes),
}

/// Limits every transport applies.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Authenticated connections open at once (unauthenticated ones have their own budget).
    pub max_connections: usize,
    /// Largest message (and frame), in bytes.
    pub max_message_bytes: usize,
}

/// What a transport serves: one [`Peer`] per connection.
pub trait Service: Send + Sync + 'static {
    /// The per-connection handler.
    type Peer: Peer;
    /// A new connection whose outbound messages go to `queue`.
    fn connect(&self, queue: Sender) -> Self::Peer;
}

/// One connection's handler.
pub trait Peer: Send + Sync + 'static {
    /// One inbound message (a frame's or line's bytes); returns when the next may be read.
    fn handle(&self, message: &[u8]) -> impl Future<Output = ()> + Send;
    /// The connection is gone.
    fn close(&self) -> impl Future<Output = ()> + Send;
}
