//! Hooks a forked `Command` runs between fork and exec (`pre_exec`, which is unsafe because the
//! child of a multi-threaded process may only make async-signal-safe calls there). Each
//! function here registers one fixed hook that keeps that rule.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::hook::ChildHook;

/// Makes the child a session leader with its stdin (a terminal's slave) as its controlling
/// terminal.
pub fn take_terminal_on_exec(command: &mut Command) {
    // SAFETY: runs between fork and exec and makes two raw system calls (setsid, ioctl) that do
    // not allocate or take locks.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid()?;
            rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
            Ok(())
        });
    }
}

/// Makes the child set its limit on open descriptors to `limit` before exec.
pub fn set_descriptor_limit_on_exec(command: &mut Command, limit: libc::rlimit) {
    // SAFETY: runs between fork and exec and makes one async-signal-safe system call on a value
    // copied into the closure; no allocation.
    unsafe {
        command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        });
    }
}

/// Makes the child run `hook` (a policy's confinement), after the hooks registered before it.
pub fn run_hook_on_exec(command: &mut Command, hook: ChildHook) {
    // SAFETY: a `ChildHook` is async-signal-safe (`sys::hook` builds it from a sandbox's hook
    // and the capability drops only): raw system calls on data captured before the fork.
    unsafe {
        command.pre_exec(move || hook.run());
    }
}
