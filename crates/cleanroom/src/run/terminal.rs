//! Terminal handoff: when the runner is the terminal's foreground job, the command's process
//! group becomes the foreground group (as a shell would do), so interactive tools read the
//! terminal and Ctrl-C reaches them; the runner takes the terminal back afterwards.
//!
//! The runner, in a background group then, would never see Ctrl-C: a [`KeyRelay`] in the
//! command's group passes on what the terminal sends, and the runner takes it as its own signal
//! when the command ignores it (so Ctrl-C, twice if need be, stops such a command) and leaves it
//! to the command otherwise (a REPL, a pager, a test runner's own handler).

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
/// Async-signal-safe itself (two sigprocmask calls on stack sets), so usable between fork and
/// exec when `f` is.
fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) {
    // SAFETY: sigset_t is plain data for which all zeroes is a valid (empty) value; the set
    // functions and pthread_sigmask write only to these two stack variables.
    let old = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    f();
    // SAFETY: restores the mask saved above, read from the stack.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
}

/// The keys the terminal turns into signals for its foreground group (Ctrl-C, Ctrl-\).
const TYPED: [libc::c_int; 2] = [libc::SIGINT, libc::SIGQUIT];

/// A process of the runner's in the command's process group that tells the runner, through a
/// socket, of every [`TYPED`] signal the terminal sends that group: with the command in the
/// foreground, the runner (a background group) would never see them, so a command that ignores
/// Ctrl-C could not be stopped from the terminal.
///
/// It is a fork of the runner (no exec) that keeps only its end of a socket pair (a socket,
/// unlike a pipe, cannot be reopened through `/proc/<pid>/fd`, so the command cannot write to
/// it) and waits for the signals; one sent by anyone but the terminal (the runner forwarding,
/// the command's own `kill 0`) is not relayed. It is never a member of the run (the container keeps it, see
/// `Container::keep`), dies with the runner (`PR_SET_PDEATHSIG`, and the watchdog's kill of the
/// command's group), and is killed and reaped by [`KeyRelay::stop`].
pub struct KeyRelay {
    pid: libc::pid_t,
    group: libc::pid_t,
}

impl Foreground {
    /// Starts the relay in process group `group` (the command's, already made); returns it with
    /// the runner's end of the socket (non-blocking; one byte per typed signal, its number).
    /// `None`, with a warning, when it cannot be started: the run goes on without it.
    pub fn relay_keys(&self, group: libc::pid_t) -> Option<(KeyRelay, std::os::fd::OwnedFd)> {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
        let (read, write) =
            match rustix::net::socketpair(AddressFamily::UNIX, SocketType::STREAM, flags, None) {
                Ok(ends) => ends,
                Err(e) => {
                    tracing::warn!("no relay of Ctrl-C from the terminal: socketpair: {e}");
                    return None;
                }
            };
        // SAFETY: getpid cannot fail.
        let runner = unsafe { libc::getpid() };
        // SAFETY: the child runs `relay`, which makes only async-signal-safe calls on stack
        // data, and leaves by `_exit`.
        match unsafe { libc::fork() } {
            -1 => {
                let e = std::io::Error::last_os_error();
                tracing::warn!("no relay of Ctrl-C from the terminal: fork: {e}");
                None
            }
            // SAFETY: see above; never returns.
            0 => unsafe { relay(write.as_raw_fd(), group, runner) },
            pid => {
                // Also here, so the relay is in the group before anything is typed (a shell
                // does the same for its jobs); the loser of the race gets EACCES or nothing.
                // SAFETY: setpgid on our own child, into a group of our session.
                unsafe { libc::setpgid(pid, group) };
                Some((KeyRelay { pid, group }, read))
            }
        }
    }
}

impl KeyRelay {
    /// The relay's pid, for the container to keep out of the run's members.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Whether `signal`, typed at the terminal, is the command's business: true unless the
    /// command (its group's leader) ignores it and no process of its group catches it or has
    /// it blocked (to read it later, from a signalfd for instance). A pager under `git log`
    /// catches Ctrl-C while git ignores it: that Ctrl-C is the pager's, not a request to stop.
    pub fn left_to_the_command(&self, signal: libc::c_int) -> bool {
        if !TYPED.contains(&signal) {
            return true;
        }
        let bit = 1u64 << (signal - 1);
        let Some(leader) = SignalMasks::of(self.group) else {
            return true;
        };
        if leader.ignored & bit == 0 {
            return true;
        }
        crate::process::all_pids()
            .into_iter()
            .filter_map(|pid| libc::pid_t::try_from(pid).ok())
            .filter(|&pid| pid != self.pid && process_group(pid) == Some(self.group))
            .filter_map(SignalMasks::of)
            .any(|masks| {
                masks.caught & bit != 0 || (masks.blocked & bit != 0 && masks.ignored & bit == 0)
            })
    }

    /// Kills the relay and reaps it.
    pub fn stop(self) {
        // SAFETY: the relay is our child and unreaped (the runner's reaping skips it), so the
        // pid is still its own.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The process group of `pid` (field 5 of `/proc/<pid>/stat`).
fn process_group(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = crate::process::read_kernel_text(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// A process's signal dispositions, from `/proc/<pid>/status`.
struct SignalMasks {
    ignored: u64,
    caught: u64,
    blocked: u64,
}

impl SignalMasks {
    fn of(pid: libc::pid_t) -> Option<SignalMasks> {
        let status = crate::process::read_kernel_text(format!("/proc/{pid}/status")).ok()?;
        let mask = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        };
        Some(SignalMasks {
            ignored: mask("SigIgn:")?,
            caught: mask("SigCgt:")?,
            blocked: mask("SigBlk:")?,
        })
    }
}

/// The relay's life: join `group`, keep only `write` (its end of the socket), and write the
/// number of every [`TYPED`] signal the kernel sent (`SI_KERNEL`: the terminal) until the runner
/// is gone.
///
/// # Safety
/// Only in the child of a fork of the runner, before anything else runs there: it closes every
/// descriptor but `write` (so no Rust object of the parent's may use one again) and never
/// returns (`_exit`). The runner may have had other threads, so it makes only async-signal-safe
/// calls on its own stack.
unsafe fn relay(write: libc::c_int, group: libc::pid_t, runner: libc::pid_t) -> ! {
    // SAFETY: setpgid, prctl and getppid take no memory but the static C string; `_exit` is
    // what a forked child must leave by (no atexit handlers, no unwinding into the parent's code).
    unsafe {
        libc::setpgid(0, group);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::prctl(libc::PR_SET_NAME, c"cr-keys".as_ptr());
        if libc::getppid() != runner {
            libc::_exit(0);
        }
    }
    // SAFETY: the caller's contract: nothing in this process uses the closed descriptors again.
    unsafe {
        if write > 0 {
            libc::syscall(libc::SYS_close_range, 0, write as libc::c_uint - 1, 0);
        }
        libc::syscall(
            libc::SYS_close_range,
            write as libc::c_uint + 1,
            libc::c_uint::MAX,
            0,
        );
    }
    // SAFETY: sigset_t is plain data (all zeroes is a valid value); the calls write only to it.
    let typed = unsafe {
        let mut typed: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut typed);
        for signal in TYPED {
            libc::sigaddset(&mut typed, signal);
        }
        typed
    };
    // Blocked (the runner's mask already blocks them; said again here), so they wait for
    // sigwaitinfo instead of killing the relay.
    // SAFETY: reads the set on our stack.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &typed, std::ptr::null_mut()) };
    loop {
        // SAFETY: siginfo_t is plain data (all zeroes is valid); sigwaitinfo reads `typed` and
        // writes `info`, both on our stack.
        let (signal, info) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            (libc::sigwaitinfo(&typed, &mut info), info)
        };
        if signal <= 0 || info.si_code != libc::SI_KERNEL {
            continue;
        }
        let byte = signal as u8;
        // SAFETY: send reads one byte from `byte` on our stack; errno is this thread's own;
        // `_exit` as above.
        unsafe {
            if libc::send(write, (&byte as *const u8).cast(), 1, libc::MSG_NOSIGNAL) < 0
                && *libc::__errno_location() != libc::EAGAIN
            {
                libc::_exit(0);
            }
        }
    }
}
