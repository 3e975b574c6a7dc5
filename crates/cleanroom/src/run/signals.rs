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
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::terminal::KeyRelay;
use crate::error::{Error, Result};

/// Signals forwarded to the run.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Blocked signals, readable through a descriptor.
pub struct RunnerSignals {
    /// The signalfd; `None` once closed (the signals stay blocked).
    fd: Option<OwnedFd>,
    /// The blocked signals.
    set: libc::sigset_t,
    previous: libc::sigset_t,
    previous_sigchld: libc::sigaction,
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
        // SAFETY: sigset_t and sigaction are plain data; the libc calls only fill and read the
        // local values.
        unsafe {
            // A runner started with SIGCHLD ignored would have its children reaped by the
            // kernel and never learn how the command ended: take the default action back.
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            let mut previous_sigchld: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGCHLD, &default, &mut previous_sigchld) != 0 {
                return Err(Error::sys("reset SIGCHLD", std::io::Error::last_os_error()));
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in FORWARDED.iter().chain([libc::SIGCHLD].iter()) {
                libc::sigaddset(&mut set, *sig);
            }
            let mut previous: libc::sigset_t = std::mem::zeroed();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
            if rc != 0 {
                return Err(Error::sys(
                    "block signals",
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                let err = std::io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
                libc::sigaction(libc::SIGCHLD, &previous_sigchld, std::ptr::null_mut());
                return Err(Error::sys("open signalfd", err));
            }
            Ok(RunnerSignals {
                fd: Some(OwnedFd::from_raw_fd(fd)),
                set,
                previous,
                previous_sigchld,
                keys: None,
            })
        }
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
            // SAFETY: signalfd_siginfo is plain data; read(2) fills at most its size.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: the buffer is valid for `size` bytes and the descriptor is ours.
            let n = unsafe {
                libc::read(
                    fd.as_fd().as_raw_fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    size,
                )
            };
            if n != size as isize {
                return out;
            }
            let signo = info.ssi_signo as libc::c_int;
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
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: sigtimedwait only reads the set and the timeout; a null info is allowed.
        while unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &zero) } > 0 {}
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
        // SAFETY: restores the mask and SIGCHLD action saved in `block`.
        unsafe {
            libc::sigaction(libc::SIGCHLD, &self.previous_sigchld, std::ptr::null_mut());
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}
