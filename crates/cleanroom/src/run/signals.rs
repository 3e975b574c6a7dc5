//! The runner's signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD are blocked and read from a
//! signalfd, so the run loop handles them synchronously with no handler code.
//!
//! Invariant: the mask is restored when [`RunnerSignals`] is dropped; children start with an empty
//! mask. The standard library does not reset the mask between fork and exec (the child of a
//! blocked runner would otherwise never see the TERM of a timeout or a forwarded Ctrl-C), so the
//! run installs `contain::reset_signals_on_exec`.
//!
//! With the command in the terminal's foreground, Ctrl-C and Ctrl-\ reach the command's group,
//! not the runner: a [`KeyRelay`] tells the runner of them, and one the command's group leaves
//! unhandled (it ignores it) counts as that signal sent to the runner; one it handles is its own.

use std::cell::Cell;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use super::terminal::KeyRelay;
use crate::error::{Error, Result};
use crate::sys::linux::signal::{self, SavedAction, SignalSet};

/// Signals forwarded to the run.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Blocked signals, readable through a descriptor.
pub struct RunnerSignals {
    /// The signalfd; `None` once closed (the signals stay blocked).
    fd: Option<OwnedFd>,
    /// The blocked signals.
    set: SignalSet,
    previous: SignalSet,
    previous_sigchld: SavedAction,
    /// The terminal's keys, relayed from the command's group (see [`KeyRelay`]).
    keys: Option<TypedKeys>,
}

/// A relay and the runner's end of its socket.
struct TypedKeys {
    relay: KeyRelay,
    socket: OwnedFd,
    /// Until the socket reaches its end (the relay died: killed with the command's group).
    open: Cell<bool>,
}

/// What the runner was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A child changed state.
    Child,
    /// One of [`FORWARDED`].
    Forward(libc::c_int),
}

impl RunnerSignals {
    /// Blocks the runner's signals in the calling thread and opens a signalfd for them.
    pub fn block() -> Result<RunnerSignals> {
        // A runner started with SIGCHLD ignored would have its children reaped by the kernel
        // and never learn how the command ended: take the default action back.
        let previous_sigchld = signal::set_default_action(libc::SIGCHLD)
            .map_err(|e| Error::sys("reset SIGCHLD", e))?;
        let mut set = SignalSet::of(&FORWARDED);
        set.add(libc::SIGCHLD);
        let previous = signal::block(&set).map_err(|e| Error::sys("block signals", e))?;
        let fd = match signal::signalfd(&set) {
            Ok(fd) => fd,
            Err(err) => {
                let _ = signal::set_mask(&previous);
                let _ = signal::restore_action(libc::SIGCHLD, &previous_sigchld);
                return Err(Error::sys("open signalfd", err));
            }
        };
        Ok(RunnerSignals {
            fd: Some(fd),
            set,
            previous,
            previous_sigchld,
            keys: None,
        })
    }

    /// Also reads the keys `relay` passes on through `socket` (the runner's non-blocking end);
    /// the relay is stopped when these signals are dropped.
    pub fn watch_keys(&mut self, relay: KeyRelay, socket: OwnedFd) {
        self.keys = Some(TypedKeys {
            relay,
            socket,
            open: Cell::new(true),
        });
    }

    /// Waits up to `timeout` (forever when `None`) and returns what arrived, possibly nothing.
    pub fn wait(&self, timeout: Option<Duration>) -> Vec<Received> {
        let Some(fd) = &self.fd else {
            return Vec::new();
        };
        let readable = rustix::event::PollFlags::IN;
        let mut pollfd = vec![rustix::event::PollFd::new(fd, readable)];
        if let Some(keys) = self.keys.as_ref().filter(|keys| keys.open.get()) {
            pollfd.push(rustix::event::PollFd::new(&keys.socket, readable));
        }
        let timeout = timeout.map(|t| {
            rustix::event::Timespec::try_from(t).unwrap_or(rustix::event::Timespec {
                tv_sec: i64::MAX / 2,
                tv_nsec: 0,
            })
        });
        let _ = rustix::event::poll(&mut pollfd, timeout.as_ref());
        self.drain()
    }

    /// Reads every pending signal without waiting.
    pub fn drain(&self) -> Vec<Received> {
        let mut out = self.typed();
        let Some(fd) = &self.fd else {
            return out;
        };
        loop {
            let Some(signo) = signal::read_signal(fd.as_fd()) else {
                return out;
            };
            out.push(if signo == libc::SIGCHLD {
                Received::Child
            } else {
                Received::Forward(signo)
            });
        }
    }

    /// Closes the signalfd once nothing more is waited for (the end of a run, whose removal may
    /// need the descriptor); the signals stay blocked, and what arrives is left pending for
    /// [`RunnerSignals::discard`].
    pub fn close_descriptor(&mut self) {
        self.fd = None;
    }

    /// Discards every pending signal of the blocked set without waiting (no descriptor needed),
    /// so that restoring the mask delivers none of them.
    pub fn discard(&self) {
        while signal::take_pending(&self.set) {}
    }

    /// The keys relayed since the last look that the command's group leaves unhandled, as
    /// signals to the runner.
    fn typed(&self) -> Vec<Received> {
        let mut out = Vec::new();
        let Some(keys) = self.keys.as_ref().filter(|keys| keys.open.get()) else {
            return out;
        };
        let mut bytes = [0u8; 16];
        loop {
            match rustix::io::read(&keys.socket, &mut bytes) {
                Ok(0) => {
                    keys.open.set(false);
                    return out;
                }
                Ok(n) => {
                    for &byte in &bytes[..n] {
                        let signal = libc::c_int::from(byte);
                        if keys.relay.left_to_the_command(signal) {
                            tracing::info!(
                                "signal {signal} typed at the terminal: the command handles it"
                            );
                        } else {
                            tracing::info!(
                                "signal {signal} typed at the terminal, which the command \
                                 ignores: taken as a signal to the runner"
                            );
                            out.push(Received::Forward(signal));
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return out,
            }
        }
    }
}

impl Drop for RunnerSignals {
    fn drop(&mut self) {
        if let Some(keys) = self.keys.take() {
            keys.relay.stop();
        }
        // Restores the mask and SIGCHLD action saved in `block`.
        let _ = signal::restore_action(libc::SIGCHLD, &self.previous_sigchld);
        let _ = signal::set_mask(&self.previous);
    }
}
