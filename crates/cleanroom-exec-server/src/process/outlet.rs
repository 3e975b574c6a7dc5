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
    /// The session is ending: nothing attaches any more.
    closed: bool,
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

    /// Attaches `queue` unless a connection is attached already or the session is ending
    /// ([`Outlet::is_closed`] tells which); returns the new generation.
    pub fn attach(&self, queue: Sender) -> Option<u64> {
        let mut inner = self.lock();
        if inner.queue.is_some() || inner.closed {
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

    /// Closes the outlet for good if nothing is attached (and, with `generation`, if no
    /// attachment came after that one): the session may then be ended, as no resume can slip
    /// in between. False when a connection is attached, or re-attached since.
    pub fn close_if_detached(&self, generation: Option<u64>) -> bool {
        let mut inner = self.lock();
        let current = generation.is_none_or(|g| g == inner.generation);
        if inner.queue.is_some() || !current {
            return false;
        }
        inner.closed = true;
        true
    }

    /// Whether the session is ending ([`Outlet::close_if_detached`] succeeded).
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Since when the session has been detached, if it was attached once and is not now.
    pub fn detached_since(&self) -> Option<Instant> {
        // `None` while attached: `attach` clears it as it sets the queue.
        self.lock().detached_at
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

#[cfg(test)]
mod tests {
    use super::Outlet;
    use crate::transport::channel;

    #[test]
    fn a_closed_outlet_takes_no_attachment_and_only_a_detached_current_one_closes() {
        let outlet = Outlet::default();
        let first = outlet.attach(channel().0).unwrap();
        assert!(outlet.detached_since().is_none());
        assert!(!outlet.close_if_detached(None), "closed while attached");
        assert!(outlet.detach(first));
        assert!(outlet.detached_since().is_some());
        let second = outlet.attach(channel().0).unwrap();
        assert!(outlet.detach(second));
        assert!(
            !outlet.close_if_detached(Some(first)),
            "closed by the timer of an attachment that a resume replaced"
        );
        assert!(outlet.close_if_detached(Some(second)));
        assert!(outlet.is_closed());
        assert!(
            outlet.attach(channel().0).is_none(),
            "a resume after the close"
        );
    }
}
