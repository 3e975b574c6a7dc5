//! A connection's outbound queue: bounded by messages ([`QUEUE`]) and by bytes ([`QUEUE_BYTES`]).
//!
//! Owns: the byte budget of one connection's queued messages. A sender takes its message's
//! bytes from the budget (at most the whole budget: a larger message waits until the queue is
//! empty of bytes, then goes through alone), then a place in the queue; the bytes come back when
//! the writer drops the [`Queued`] message it has written (or when the queue is dropped).
//!
//! Invariants: the bytes of messages sent but not yet written never exceed [`QUEUE_BYTES`], save
//! one larger message alone; messages are received in the order their `send`s completed (one
//! sender's in its order); once the [`Receiver`] is gone every waiting and later `send` fails at
//! once, so no sender waits on a queue nobody drains.

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::{Outbound, Utf8Bytes};

/// Messages queued per connection before senders wait.
pub const QUEUE: usize = 64;

/// Bytes of messages queued per connection before senders wait (a dozen full output chunks).
pub const QUEUE_BYTES: usize = 4 << 20;

/// A new connection's queue.
pub fn channel() -> (Sender, Receiver) {
    let (messages, receiver) = mpsc::channel(QUEUE);
    let bytes = Arc::new(Semaphore::new(QUEUE_BYTES));
    let sender = Sender {
        messages,
        bytes: bytes.clone(),
    };
    (sender, Receiver { receiver, bytes })
}

/// Queues messages for one connection's writer.
#[derive(Clone, Debug)]
pub struct Sender {
    messages: mpsc::Sender<Queued>,
    bytes: Arc<Semaphore>,
}

/// The connection's writer is gone.
#[derive(Debug)]
pub struct Closed;

impl Sender {
    /// Queues `message`, waiting while the queue is full (by messages or by bytes).
    pub async fn send(&self, message: Outbound) -> Result<(), Closed> {
        let Outbound::Text(text) = &message;
        let cost = u32::try_from(text.len().min(QUEUE_BYTES)).expect("QUEUE_BYTES fits in u32");
        let bytes = self.bytes.clone().acquire_many_owned(cost).await;
        let queued = Queued {
            message,
            bytes: bytes.map_err(|_| Closed)?,
        };
        self.messages.send(queued).await.map_err(|_| Closed)
    }
}

/// The writer's end.
#[derive(Debug)]
pub struct Receiver {
    receiver: mpsc::Receiver<Queued>,
    bytes: Arc<Semaphore>,
}

impl Receiver {
    /// The next message; `None` once every [`Sender`] is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Queued> {
        self.receiver.recv().await
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Option<Queued> {
        self.receiver.try_recv().ok()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.bytes.close();
    }
}

/// A queued message; its bytes return to the budget when it is dropped (once written).
#[derive(Debug)]
pub struct Queued {
    message: Outbound,
    bytes: OwnedSemaphorePermit,
}

impl Queued {
    /// The message's text (the bytes stay taken until the `Queued` is dropped).
    pub fn text(&self) -> &str {
        let Outbound::Text(text) = &self.message;
        text
    }

    /// The message's text, and its bytes, which return to the budget when dropped: after the
    /// text has been written.
    pub fn into_parts(self) -> (Utf8Bytes, Written) {
        let Outbound::Text(text) = self.message;
        (text, Written { _bytes: self.bytes })
    }
}

/// The bytes of a message taken from the writer's queue; dropping it returns them to the budget.
#[derive(Debug)]
pub struct Written {
    _bytes: OwnedSemaphorePermit,
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn message(len: usize) -> Outbound {
        Outbound::Text("x".repeat(len).into())
    }

    /// Whether `send` of a message of `len` bytes completes without waiting.
    fn sends_now(sender: &Sender, len: usize) -> bool {
        match sender.send(message(len)).now_or_never() {
            Some(result) => {
                result.unwrap();
                true
            }
            None => false,
        }
    }

    #[tokio::test]
    async fn a_reader_that_does_not_read_holds_at_most_the_byte_budget() {
        let (sender, mut receiver) = channel();
        let chunk = QUEUE_BYTES / 8;
        for _ in 0..8 {
            assert!(sends_now(&sender, chunk));
        }
        // Far fewer than QUEUE messages, but the budget is spent.
        assert!(!sends_now(&sender, chunk));
        assert!(!sends_now(&sender, 1));
        // Received but not yet written: the bytes are still taken.
        let written = receiver.recv().await.unwrap();
        assert!(!sends_now(&sender, chunk));
        drop(written);
        assert!(sends_now(&sender, chunk));
    }

    #[tokio::test]
    async fn a_message_larger_than_the_budget_goes_through_alone() {
        let (sender, mut receiver) = channel();
        assert!(sends_now(&sender, 1));
        let large = 3 * QUEUE_BYTES;
        let mut send_large = Box::pin(sender.send(message(large)));
        assert!(
            (&mut send_large).now_or_never().is_none(),
            "waits for the queue to empty"
        );
        drop(receiver.recv().await.unwrap());
        send_large.now_or_never().unwrap().unwrap();
        assert!(!sends_now(&sender, 1), "nothing beside it");
        assert_eq!(receiver.recv().await.unwrap().text().len(), large);
        assert!(sends_now(&sender, 1));
    }

    #[tokio::test]
    async fn order_is_kept_and_a_dropped_receiver_releases_every_sender() {
        let (sender, mut receiver) = channel();
        for len in 1..=3 {
            sender.send(message(len)).await.unwrap();
        }
        for len in 1..=3 {
            assert_eq!(receiver.recv().await.unwrap().into_parts().0.len(), len);
        }
        assert!(sends_now(&sender, QUEUE_BYTES));
        let mut waiting = Box::pin(sender.send(message(1)));
        assert!((&mut waiting).now_or_never().is_none());
        drop(receiver);
        assert!(matches!(waiting.now_or_never(), Some(Err(Closed))));
        assert!(matches!(
            sender.send(message(1)).now_or_never(),
            Some(Err(Closed))
        ));
    }
}
