//! Hooks a `Command`'s child runs between fork and exec (`pre_exec`, which is unsafe because the
//! child of a multi-threaded process may only make async-signal-safe calls there). A closed set
//! registers one fixed hook each ([`reset_signals_on_exec`], [`join_cgroup_on_exec`],
//! [`take_terminal_on_exec`]); [`run_on_exec`] and [`hook`] take the sandbox's steps, under the
//! contract of every child program (`sys::linux`'s module docs).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

use super::fork::InChild;
use super::signal;

/// Makes `command`'s child run `program` between fork and exec, after the hooks registered
/// before it.
///
/// # Safety
/// `program` must be async-signal-safe, as [`super::fork::fork`]'s.
pub(crate) unsafe fn run_on_exec(
    command: &mut Command,
    program: impl Fn(&InChild) -> io::Result<()> + Send + Sync + 'static,
) {
    // SAFETY: the standard library runs the hook in the child between fork and exec, which
    // then executes or exits; `program` is async-signal-safe by this function's contract.
    unsafe {
        command.pre_exec(move || program(&InChild::new()));
    }
}

/// `program` as the function a spawner that does not use `Command` (tokio's `pre_exec`, the
/// exec-server's vfork-style clone) calls in its child between fork and exec; the returned
/// function may be called only there.
///
/// # Safety
/// `program` must be async-signal-safe, as [`super::fork::fork`]'s.
pub(crate) unsafe fn hook(
    program: impl Fn(&InChild) -> io::Result<()> + Send + Sync + 'static,
) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
    move || program(&InChild::new())
}

/// Makes `command` start with default signal dispositions and no blocked signal (SIGKILL and
/// SIGSTOP aside, every signal from 1 to 31 gets its default action; the mask is emptied).
pub(crate) fn reset_signals_on_exec(command: &mut Command) {
    // SAFETY: sigaction and sigprocmask on a set built on the stack: async-signal-safe.
    unsafe {
        run_on_exec(command, |_| {
            signal::reset_dispositions();
            signal::set_mask(&signal::SignalSet::empty())
        })
    };
}

/// Makes `command`'s child join the cgroup whose `cgroup.procs` is `procs` (one write of "0")
/// before exec; the hook keeps `procs` open for as long as the command does.
pub(crate) fn join_cgroup_on_exec(command: &mut Command, procs: Arc<OwnedFd>) {
    // SAFETY: one write(2) on a descriptor opened before the fork: async-signal-safe.
    unsafe {
        run_on_exec(command, move |_| match rustix::io::write(&*procs, b"0") {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
            Err(e) => Err(e.into()),
        })
    };
}

/// Makes `command`'s child take the foreground of the terminal on its stdin (`tcsetpgrp` to its
/// own pid, with SIGTTOU blocked), right after it became a group leader; a failure is ignored,
/// as a shell's job control would.
pub(crate) fn take_terminal_on_exec(command: &mut Command) {
    // SAFETY: sigprocmask, tcsetpgrp and getpid: async-signal-safe system calls.
    unsafe {
        run_on_exec(command, |_| {
            signal::with_blocked(libc::SIGTTOU, || {
                let _ =
                    rustix::termios::tcsetpgrp(rustix::stdio::stdin(), rustix::process::getpid());
            });
            Ok(())
        })
    };
}
