//! Terminal handoff: when the runner is the terminal's foreground job, the command's process
//! group becomes the foreground group (as a shell would do), so interactive tools read the
//! terminal and Ctrl-C reaches them; the runner takes the terminal back afterwards.
//!
//! The runner, in a background group then, would never see Ctrl-C: a [`KeyRelay`] in the
//! command's group passes on what the terminal sends, and the runner takes it as its own signal
//! when the command ignores it (so Ctrl-C, twice if need be, stops such a command) and leaves it
//! to the command otherwise (a REPL, a pager, a test runner's own handler).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::process::Command;

use rustix::io::Errno;
use rustix::net::SendFlags;
use rustix::process::{Pid, Signal};

use crate::sys::linux::fork::{self, InChild};
use crate::sys::linux::{exec, signal};

/// The terminal on stdin, when the runner owns its foreground.
pub struct Foreground {
    runner_group: Pid,
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
        (foreground == own).then_some(Foreground { runner_group: own })
    }

    /// Makes the child take the terminal's foreground right after it became a group leader.
    pub fn configure(&self, command: &mut Command) {
        exec::take_terminal_on_exec(command);
    }

    /// Gives the terminal back to the runner's group (with SIGTTOU blocked, so the background
    /// runner is not stopped).
    pub fn restore(&self) {
        signal::with_blocked(libc::SIGTTOU, || {
            let _ = rustix::termios::tcsetpgrp(std::io::stdin().as_fd(), self.runner_group);
        });
    }
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
        let runner = rustix::process::getpid();
        // SAFETY: the child runs `relay`, which makes only async-signal-safe calls on stack
        // data (the contract of `fork`).
        #[allow(unsafe_code)]
        let relay = unsafe {
            fork::fork(|child| {
                relay(child, write.as_fd(), group, runner);
                Ok(())
            })
        };
        match relay {
            Err(e) => {
                tracing::warn!("no relay of Ctrl-C from the terminal: fork: {e}");
                None
            }
            Ok(pid) => {
                // Also here, so the relay is in the group before anything is typed (a shell
                // does the same for its jobs); the loser of the race gets EACCES or nothing.
                let _ = rustix::process::setpgid(Some(pid), Pid::from_raw(group));
                let pid = pid.as_raw_nonzero().get();
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
        // The relay is our child and unreaped (the runner's reaping skips it), so the pid is
        // still its own.
        if let Some(pid) = Pid::from_raw(self.pid) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
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
/// Runs in the child of a fork of the runner, before anything else runs there (`child`): it
/// closes every descriptor but `write`, and the child exits when it returns. The runner may have
/// had other threads, so it makes only async-signal-safe calls on its own stack.
fn relay(child: &InChild, write: BorrowedFd<'_>, group: libc::pid_t, runner: Pid) {
    let _ = rustix::process::setpgid(None, Pid::from_raw(group));
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let _ = rustix::thread::set_name(c"cr-keys");
    if rustix::process::getppid() != Some(runner) {
        return;
    }
    child.close_from(0, [write.as_raw_fd()]);
    // Blocked (the runner's mask already blocks them; said again here), so they wait for
    // sigwaitinfo instead of killing the relay.
    let typed = signal::SignalSet::of(&TYPED);
    let _ = signal::block(&typed);
    loop {
        let Some((signal, code)) = signal::wait_for(&typed) else {
            continue;
        };
        if code != signal::SI_KERNEL {
            continue;
        }
        match rustix::net::send(write, &[signal as u8], SendFlags::NOSIGNAL) {
            Err(e) if e != Errno::AGAIN => return,
            _ => {}
        }
    }
}
