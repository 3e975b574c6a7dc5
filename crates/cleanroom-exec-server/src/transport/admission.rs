//! Admission of WebSocket connections: a small, separate budget for connections that have not
//! yet shown the capability, so idle or slow unauthenticated sockets cannot take the places of
//! authenticated clients.
//!
//! Owns: the pending set ([`PENDING`] places; when it is full the oldest pending connection is
//! evicted, so a real client's handshake, which takes milliseconds, always finds a place unless
//! [`PENDING`] newer connections arrive before it completes), the authenticated places
//! (`--max-connections`; beyond them a client is closed with 1013), and one rate-limited warning
//! for everything refused or evicted.
//!
//! Invariant: an unauthenticated connection holds no authenticated place, and at most
//! [`PENDING`] of them exist at once, each for at most the handshake deadline.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Connections authenticating at once.
pub const PENDING: usize = 256;
/// At most one warning about refused connections per this interval.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The places of a listener.
pub struct Admission {
    pending: Mutex<Pending>,
    authenticated: Arc<Semaphore>,
    max_connections: usize,
    warning: Mutex<Warning>,
}

#[derive(Default)]
struct Pending {
    next: u64,
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
}

#[derive(Default)]
struct Warning {
    last: Option<Instant>,
    count: u64,
}

/// A pending connection's place; leaving it (drop) frees the place.
pub struct Ticket {
    id: u64,
    admission: Arc<Admission>,
    evicted: oneshot::Receiver<()>,
}

impl Admission {
    /// Places for `max_connections` authenticated connections.
    pub fn new(max_connections: usize) -> Arc<Admission> {
        Arc::new(Admission {
            pending: Mutex::default(),
            authenticated: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            warning: Mutex::default(),
        })
    }

    /// A place among the pending connections, evicting the oldest when all are taken.
    pub fn enter(self: &Arc<Self>) -> Ticket {
        let mut pending = lock(&self.pending);
        if pending.waiting.len() >= PENDING {
            if let Some((_, evict)) = pending.waiting.pop_front() {
                let _ = evict.send(());
            }
            self.warn("unauthenticated connections evicted (too many pending handshakes)");
        }
        let (tx, evicted) = oneshot::channel();
        let id = pending.next;
        pending.next += 1;
        pending.waiting.push_back((id, tx));
        Ticket {
            id,
            admission: self.clone(),
            evicted,
        }
    }

    /// Trades a pending place for an authenticated one; `None` when `--max-connections` are
    /// open.
    pub fn authenticate(&self, ticket: Ticket) -> Option<OwnedSemaphorePermit> {
        drop(ticket);
        let place = self.authenticated.clone().try_acquire_owned().ok();
        if place.is_none() {
            self.warn(&format!(
                "connections refused with 1013: {} open (--max-connections)",
                self.max_connections
            ));
        }
        place
    }

    /// Counts one refusal; logs at most once per [`WARN_EVERY`].
    pub fn warn(&self, what: &str) {
        let mut warning = lock(&self.warning);
        warning.count += 1;
        if warning.last.is_none_or(|last| last.elapsed() >= WARN_EVERY) {
            tracing::warn!(
                "{} connection(s) since the last warning: {what}",
                warning.count
            );
            warning.count = 0;
            warning.last = Some(Instant::now());
        }
    }
}

impl Ticket {
    /// Resolves when a newer connection took this place.
    pub async fn evicted(&mut self) {
        let _ = (&mut self.evicted).await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut pending = lock(&self.admission.pending);
        if let Some(i) = pending.waiting.iter().position(|(id, _)| *id == self.id) {
            pending.waiting.remove(i);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
