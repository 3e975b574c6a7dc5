//! Where a session's outbound messages go: the queue of the connection it is attached to, or
//! nowhere while it is detached.
//!
//! Invariant: each attachment has a generation; detaching names the generation it ends, so a
//! connection that lost its session to a resume cannot detach the new connection. Queues are
//! bounded (by messages and by bytes): a client that does not read slows its own processes'
//! output, never the server.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::transport::{Outbound, Sender, Utf8Bytes};

/// A session's current destination.
#[derive(Debug, Default)]
pub struct Outlet {
    inner: Mutex<Attachment>,
}

#[derive(Debug, Default)]
struct Attachment {
    generation: u64,
    queue: Option<Sender>,
    /// When the last attachment ended (`None` while attached, or never attached).
    detached_at: Option<Instant>,
}

impl Outlet {
    /// Sends `text` to the attached connection, waiting while its queue is full; dropped when
    /// detached or when the connection is gone.
    pub async fn send(&self, text: Utf8Bytes) {
        let queue = self.lock().queue.clone();
        if let Some(queue) = queue {
            let _ = queue.send(Outbound::Text(text)).await;
        }
    }

    /// Attaches `queue` unless a connection is attached already; returns the new generation.
    pub fn attach(&self, queue: Sender) -> Option<u64> {
        let mut inner = self.lock();
        if inner.queue.is_some() {
            return None;
        }
        inner.generation += 1;
        inner.queue = Some(queue);
        inner.detached_at = None;
        Some(inner.generation)
    }

    /// Detaches generation `generation`; false if another attachment replaced it.
    pub fn detach(&self, generation: u64) -> bool {
        let mut inner = self.lock();
        if inner.generation != generation {
            return false;
        }
        inner.queue = None;
        inner.detached_at = Some(Instant::now());
        true
    }

    /// Detaches whatever is attached.
    pub fn detach_any(&self) {
        let mut inner = self.lock();
        if inner.queue.take().is_some() {
            inner.detached_at = Some(Instant::now());
        }
    }

    /// Since when the session has been detached, if it was attached once and is not now.
    pub fn detached_since(&self) -> Option<Instant> {
        let inner = self.lock();
        inner.queue.is_none().then_some(inner.detached_at).flatten()
    }

    /// Whether a connection is attached, and the current generation.
    pub fn state(&self) -> (bool, u64) {
        let inner = self.lock();
        (inner.queue.is_some(), inner.generation)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Attachment> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
