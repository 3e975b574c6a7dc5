//! Terminal handoff: when the runner is the terminal's foreground job, the command's process
//! group becomes the foreground group (as a shell would do), so interactive tools read the
//! terminal and Ctrl-C reaches them; the runner takes the terminal back afterwards.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The terminal on stdin, when the runner owns its foreground.
pub struct Foreground {
    runner_group: libc::pid_t,
}

impl Foreground {
    /// Returns a handle when stdin is a terminal whose foreground group is the runner's.
    pub fn detect() -> Option<Foreground> {
        let stdin = std::io::stdin();
        let fd = stdin.as_fd();
        if !rustix::termios::isatty(fd) {
            return None;
        }
        let foreground = rustix::termios::tcgetpgrp(fd).ok()?;
        let own = rustix::process::getpgrp();
        (foreground == own).then(|| Foreground {
            runner_group: own.as_raw_nonzero().get(),
        })
    }

    /// Makes the child take the terminal's foreground right after it became a group leader.
    pub fn configure(&self, command: &mut Command) {
        // SAFETY: runs between fork and exec; only sigprocmask, getpid and tcsetpgrp, all
        // async-signal-safe, on stack data.
        unsafe {
            command.pre_exec(|| {
                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
                Ok(())
            });
        }
    }

    /// Gives the terminal back to the runner's group.
    pub fn restore(&self) {
        let group = self.runner_group;
        // SAFETY: tcsetpgrp on stdin with SIGTTOU blocked so the background runner is not stopped.
        unsafe {
            with_sigttou_blocked(|| libc::tcsetpgrp(std::io::stdin().as_raw_fd(), group));
        }
    }
}

/// Runs `f` with SIGTTOU blocked (tcsetpgrp from a background group would otherwise stop us).
///
/// # Safety
/// Only async-signal-safe calls; usable between fork and exec.
unsafe fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) {
    let mut set: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, libc::SIGTTOU);
    libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
    f();
    libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
}
