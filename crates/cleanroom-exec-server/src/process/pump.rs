//! Output pumps: one task per output descriptor (pipe or terminal master) that reads chunks and
//! publishes them itself (through the process's publisher, a [`Publish`]: one hop from pipe to
//! the connection's queue), and answers the emitter's exit barrier.
//!
//! Invariant: when the barrier is raised, a pump publishes everything its descriptor holds
//! before answering `Drained`, so output written before the exit precedes `exited`.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::Interest;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::pty::Master;

/// Largest chunk read from a pipe or terminal at once: a streaming child's output goes out in
/// chunks this large (fewer notifications, so fewer wake-ups per byte on every hop).
const READ_CHUNK: usize = 256 * 1024;
/// The read buffer a pump starts with; it grows to [`READ_CHUNK`] the first time a read fills
/// it. Most processes write a few lines: zeroing two 256 KiB buffers per process cost more than
/// their whole output.
const FIRST_CHUNK: usize = 16 * 1024;
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

/// What a pump or the waiter tells the emitter.
pub(super) enum Event {
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
    /// Reads what is there, waiting for something if nothing is.
    async fn read_into(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;

    /// Reads what is there without waiting; `None` if nothing is.
    fn try_read(&mut self, buf: &mut [u8]) -> Option<std::io::Result<usize>> {
        self.read_into(buf).now_or_never()
    }

    /// Reads more for a chunk that may fill up until `deadline`; `None` if nothing came by then.
    async fn read_by(
        &mut self,
        buf: &mut [u8],
        deadline: Instant,
    ) -> Option<std::io::Result<usize>> {
        tokio::time::timeout_at(deadline, self.read_into(buf))
            .await
            .ok()
    }
}

/// An output pipe's read end (non-blocking), registered with the reactor only while the pump
/// waits on an empty pipe: a registered pipe wakes the reactor on each of the child's writes
/// (`head` writes 4 KiB at a time), whether or not anyone waits, and a streaming pipe would cost
/// dozens of thread wake-ups per chunk.
pub(super) struct Pipe(OwnedFd);

impl Pipe {
    /// Takes a pipe's read end (never registered with the reactor) and makes it non-blocking.
    pub(super) fn new(fd: OwnedFd) -> std::io::Result<Pipe> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(Pipe(fd))
    }
}

impl Source for Pipe {
    async fn read_into(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(read) = self.try_read(buf) {
                return read;
            }
            // Readiness the pipe had before the registration is reported at once.
            // The registration ends with this iteration (`self.0` outlives it).
            let registered = crate::sys::reactor::register(self.0.as_fd(), Interest::READABLE)?;
            let _ = registered.readable().await?;
        }
    }

    fn try_read(&mut self, buf: &mut [u8]) -> Option<std::io::Result<usize>> {
        loop {
            match rustix::io::read(&self.0, &mut *buf) {
                Ok(n) => return Some(Ok(n)),
                Err(rustix::io::Errno::AGAIN) => return None,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Some(Err(e.into())),
            }
        }
    }

    /// Sleeps until `deadline`, then takes what the pipe holds: waiting for readability instead
    /// would wake up on each of the child's writes.
    async fn read_by(
        &mut self,
        buf: &mut [u8],
        deadline: Instant,
    ) -> Option<std::io::Result<usize>> {
        tokio::time::sleep_until(deadline).await;
        self.try_read(buf)
    }
}

/// The terminal's master side as a [`Source`].
pub(super) struct Terminal(pub(super) Arc<Master>);

impl Source for Terminal {
    async fn read_into(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).await
    }
}

/// Where a pump's chunks go: the process's publisher, which numbers, retains and queues them
/// (in `child.rs`; a trait so that the pump does not depend on the process).
pub(super) trait Publish {
    /// Publishes one chunk, once it is in the connection's queue.
    fn output<'a>(
        &'a self,
        stream: StreamKind,
        data: &'a [u8],
    ) -> impl std::future::Future<Output = ()> + Send + 'a;
}

/// Reads one output descriptor and publishes its chunks.
pub(super) struct Pump<P> {
    pub(super) kind: StreamKind,
    pub(super) index: usize,
    pub(super) drain: Drain,
    /// How long the barrier waits for output still on its way: the terminal's line discipline
    /// hands written bytes to the master side asynchronously; a pipe needs no wait.
    pub(super) drain_grace: Option<Duration>,
    pub(super) tx: mpsc::Sender<Event>,
    pub(super) publisher: P,
}

impl<P: Publish> Pump<P> {
    pub(super) async fn run(self, mut source: impl Source) {
        let mut buf = vec![0u8; FIRST_CHUNK];
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
                        self.publish(&buf[..n]).await;
                        if eof {
                            break 'pump;
                        }
                        if n < buf.len() {
                            break;
                        }
                        buf.resize(READ_CHUNK, 0);
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
            self.publish(&buf[..n]).await;
            last_sent = Some(Instant::now());
            if eof {
                break;
            }
            if n == buf.len() {
                buf.resize(READ_CHUNK, 0);
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
            let more = match source.try_read(&mut buf[n..]) {
                Some(result) => result,
                None => match deadline {
                    Some(deadline) => match source.read_by(&mut buf[n..], deadline).await {
                        Some(result) => result,
                        None => return (n, false),
                    },
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

    /// Publishes `data`, then lets the runtime's other tasks run: a child that writes as fast
    /// as its chunks are encoded (or a detached session's, whose chunks are never waited for)
    /// would otherwise keep the one runtime thread for itself, and the server deaf.
    async fn publish(&self, data: &[u8]) {
        if !data.is_empty() {
            self.publisher.output(self.kind, data).await;
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (Pipe, OwnedFd) {
        let (read, write) = rustix::pipe::pipe().unwrap();
        (Pipe::new(read).unwrap(), write)
    }

    /// A pipe off the reactor still wakes its pump: at once when it holds data, on the next
    /// write when it is empty, and with EOF when the writer closes.
    #[tokio::test]
    async fn a_pipe_is_read_when_written_and_at_eof() {
        let (mut pipe, write) = pipe();
        let mut buf = [0u8; 16];
        assert!(pipe.try_read(&mut buf).is_none());
        rustix::io::write(&write, b"ab").unwrap();
        assert_eq!(pipe.read_into(&mut buf).await.unwrap(), 2);
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            rustix::io::write(&write, b"cde").unwrap();
            write
        });
        let woken = tokio::time::timeout(Duration::from_secs(30), pipe.read_into(&mut buf));
        assert_eq!(woken.await.expect("a write wakes the pump").unwrap(), 3);
        assert_eq!(&buf[..3], b"cde");
        drop(writer.await.unwrap());
        assert_eq!(pipe.read_into(&mut buf).await.unwrap(), 0);
    }

    /// A chunk that may fill up until a deadline takes, in one read, every write made by then;
    /// an empty pipe gives nothing.
    #[tokio::test]
    async fn a_pipe_read_by_a_deadline_takes_every_write_made_by_then() {
        let (mut pipe, write) = pipe();
        let mut buf = [0u8; 16];
        for part in [&b"12"[..], b"34", b"5"] {
            rustix::io::write(&write, part).unwrap();
        }
        let deadline = Instant::now() + Duration::from_millis(2);
        let read = pipe.read_by(&mut buf, deadline).await.unwrap().unwrap();
        assert_eq!(&buf[..read], b"12345");
        let deadline = Instant::now() + Duration::from_millis(2);
        assert!(pipe.read_by(&mut buf, deadline).await.is_none());
    }
}
