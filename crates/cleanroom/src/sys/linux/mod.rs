//! Linux's system interface below the library's parts: every raw system call, fork and signal
//! call of the Linux files, behind small safe functions (owned or borrowed descriptors, checked
//! lengths, `io::Result`s), as rustix wraps the kernel. What rustix has safely the parts call
//! directly; this is what it lacks:
//! - [`fork`]: the library's forked children (the watchdog, the terminal's key relay, the
//!   namespace holder, the probes), the child born in a cgroup (`clone3`), and what only such a
//!   child may do ([`fork::InChild`]);
//! - [`exec`]: the hooks a `Command`'s child runs between fork and exec: a closed set (signal
//!   reset, cgroup join, terminal foreground) and the sandbox's;
//! - [`signal`]: signal sets, the thread's mask, dispositions, the signalfd;
//! - [`fd`]: descriptors a plan's children find in memory (slots, a lent report pipe), the
//!   working directory read into a buffer, and a file the kernel generates read whole;
//! - [`process`]: signals through pidfds and to process groups, new namespaces, and bringing a
//!   network interface up (the loopback of a new network namespace);
//! - [`mount`]: `mount_setattr`; [`landlock`]: the Landlock system calls.
//!
//! Invariant: `sys` imports nothing of the crate above it. Every `unsafe` block wraps what it
//! names with a `// SAFETY:` note on the contract it keeps. Code that runs in a child between
//! fork (or a vfork-style clone) and exec, or instead of exec until `_exit`, makes only raw,
//! async-signal-safe system calls on data prepared before the fork or on its stack: it never
//! allocates, locks, panics or touches Rust's standard I/O. That is the contract of every
//! function that takes a child's code ([`fork::fork`], [`exec::run_on_exec`], [`exec::hook`]),
//! and what their callers keep: the sandbox's steps (`protect::linux::child`), the namespace
//! holder (`protect::linux::shared`), the probes (`protect::linux`), the watchdog
//! (`contain::watchdog`) and the key relay (`run::terminal`), each stating it in its own docs.
//! Everything else here is safe to call anywhere.

pub(crate) mod exec;
pub(crate) mod fd;
pub(crate) mod fork;
pub(crate) mod landlock;
pub(crate) mod mount;
pub(crate) mod process;
pub(crate) mod signal;

use std::io;

/// The error of a call that returned -1 and set errno.
fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// `Ok` for a return code of 0, else the errno (`last_error`).
fn zero_or_errno(rc: libc::c_long) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}
