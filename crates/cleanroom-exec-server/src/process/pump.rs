//! Output pumps: one task per output descriptor (pipe or terminal master) that reads chunks and
//! hands them to the process's emitter, and answers the emitter's exit barrier.
//!
//! Invariant: when the barrier is raised, a pump hands over everything its descriptor holds
//! before answering `Drained`, so output written before the exit precedes `exited`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::pty::Master;

/// Largest chunk read from a pipe or terminal at once.
const READ_CHUNK: usize = 64 * 1024;
/// How long a streaming pipe's chunk may wait to fill up.
const COALESCE: Duration = Duration::from_millis(1);

/// Which descriptor a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StreamKind {
    Stdout,
    Stderr,
    Pty,
}

impl StreamKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            StreamKind::Stdout => "stdout",
            StreamKind::Stderr => "stderr",
            StreamKind::Pty => "pty",
        }
    }
}

pub(super) enum Event {
    Output(StreamKind, Vec<u8>),
    /// Output descriptor `i` reached EOF.
    Eof(usize),
    /// Output descriptor `i` has handed over everything it held when asked (see `Drain`).
    Drained(usize),
    Exited(i32),
}

/// The barrier the emitter raises when the main process has exited: each pump hands over what
/// its descriptor already holds, then answers `Drained` (or `Eof`), so output written before the
/// exit always precedes `exited`, however late the pump is scheduled.
pub(super) type Drain = Arc<tokio::sync::Notify>;

/// Something a pump reads output from: a pipe, or the terminal's master side.
pub(super) trait Source {
    async fn read_into(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
}

impl<R: AsyncRead + Unpin> Source for R {
    async fn read_into(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read(buf).await
    }
}

/// The terminal's master side as a [`Source`].
pub(super) struct Terminal(pub(super) Arc<Master>);

impl Source for Terminal {
    async fn read_into(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).await
    }
}

/// Reads one output descriptor and hands its chunks to the emitter.
pub(super) struct Pump {
    pub(super) kind: StreamKind,
    pub(super) index: usize,
    pub(super) drain: Drain,
    /// How long the barrier waits for output still on its way: the terminal's line discipline
    /// hands written bytes to the master side asynchronously; a pipe needs no wait.
    pub(super) drain_grace: Option<Duration>,
    pub(super) tx: mpsc::Sender<Event>,
}

impl Pump {
    pub(super) async fn run(self, mut source: impl Source) {
        let mut buf = vec![0u8; READ_CHUNK];
        let mut last_sent: Option<Instant> = None;
        'pump: loop {
            let first = tokio::select! {
                biased;
                () = self.drain.notified() => {
                    // The main process has exited: hand over everything already there (as many
                    // buffers as it takes), without waiting for more.
                    let mut grace = self.drain_grace.map(|g| Instant::now() + g);
                    loop {
                        let (n, eof) = self.fill(&mut source, &mut buf, 0, grace.take()).await;
                        if !self.send(&buf[..n]).await {
                            return;
                        }
                        if eof {
                            break 'pump;
                        }
                        if n < buf.len() {
                            break;
                        }
                    }
                    if self.tx.send(Event::Drained(self.index)).await.is_err() {
                        return;
                    }
                    continue;
                }
                read = source.read_into(&mut buf) => read,
            };
            let n = match first {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // A child that is streaming (a chunk went out within COALESCE) gets up to COALESCE to
            // fill the chunk: fewer, larger chunks under load. An occasional write goes out at
            // once.
            let streaming = last_sent.is_some_and(|t| t.elapsed() < COALESCE);
            let deadline = streaming.then(|| Instant::now() + COALESCE);
            let (n, eof) = self.fill(&mut source, &mut buf, n, deadline).await;
            if !self.send(&buf[..n]).await {
                return;
            }
            last_sent = Some(Instant::now());
            if eof {
                break;
            }
        }
        let _ = self.tx.send(Event::Eof(self.index)).await;
    }

    /// Reads more into `buf[n..]`: what is already there, and until `deadline` if given.
    /// Returns the new length and whether EOF was reached.
    async fn fill(
        &self,
        source: &mut impl Source,
        buf: &mut [u8],
        mut n: usize,
        deadline: Option<Instant>,
    ) -> (usize, bool) {
        while n < buf.len() {
            let more = match source.read_into(&mut buf[n..]).now_or_never() {
                Some(result) => result,
                None => match deadline {
                    Some(deadline) => {
                        match tokio::time::timeout_at(deadline, source.read_into(&mut buf[n..]))
                            .await
                        {
                            Ok(result) => result,
                            Err(_) => return (n, false),
                        }
                    }
                    None => return (n, false),
                },
            };
            match more {
                Ok(0) | Err(_) => return (n, true),
                Ok(more) => n += more,
            }
        }
        (n, false)
    }

    async fn send(&self, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        self.tx
            .send(Event::Output(self.kind, data.to_vec()))
            .await
            .is_ok()
    }
}
