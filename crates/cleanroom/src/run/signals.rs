//! The runner's signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD are blocked and read from a
//! signalfd, so the run loop handles them synchronously with no handler code.
//!
//! Invariant: the mask is restored when [`RunnerSignals`] is dropped; children start with an empty
//! mask. The standard library does not reset the mask between fork and exec (the child of a
//! blocked runner would otherwise never see the TERM of a timeout or a forwarded Ctrl-C), so the
//! run installs `contain::reset_signals_on_exec`.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::{Error, Result};

/// Signals forwarded to the run.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Blocked signals, readable through a descriptor.
pub struct RunnerSignals {
    fd: OwnedFd,
    previous: libc::sigset_t,
    previous_sigchld: libc::sigaction,
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
                fd: OwnedFd::from_raw_fd(fd),
                previous,
                previous_sigchld,
            })
        }
    }

    /// Waits up to `timeout` (forever when `None`) and returns what arrived, possibly nothing.
    pub fn wait(&self, timeout: Option<Duration>) -> Vec<Received> {
        let mut pollfd = [rustix::event::PollFd::new(
            &self.fd,
            rustix::event::PollFlags::IN,
        )];
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
        let mut out = Vec::new();
        loop {
            // SAFETY: signalfd_siginfo is plain data; read(2) fills at most its size.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: the buffer is valid for `size` bytes and the descriptor is ours.
            let n = unsafe {
                libc::read(
                    self.fd.as_fd().as_raw_fd(),
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
}

impl Drop for RunnerSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask and SIGCHLD action saved in `block`.
        unsafe {
            libc::sigaction(libc::SIGCHLD, &self.previous_sigchld, std::ptr::null_mut());
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}
