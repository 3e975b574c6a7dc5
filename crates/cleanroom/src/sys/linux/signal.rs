//! Signals: sets, the calling thread's mask, dispositions, and the signalfd the runner reads
//! them from. rustix has none of these safely (its `sigaction` and masks are `unsafe`, for
//! handlers; here only the default action and saved actions are ever installed).
//!
//! Invariant: what is async-signal-safe says so (a child between fork and exec uses it); an
//! action is installed only as `SIG_DFL` or as an action saved from the kernel before.

use std::ffi::c_int;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::last_error;

/// `SI_KERNEL`: the kernel sent the signal (a terminal's keys), not a process.
pub(crate) const SI_KERNEL: c_int = libc::SI_KERNEL;

/// A set of signals (`sigset_t`).
#[derive(Clone, Copy)]
pub(crate) struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// The empty set. Async-signal-safe.
    pub(crate) fn empty() -> SignalSet {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the whole set it is given.
        unsafe { libc::sigemptyset(set.as_mut_ptr()) };
        // SAFETY: initialised just above.
        SignalSet(unsafe { set.assume_init() })
    }

    /// The set of `signals` (one that is no signal is left out). Async-signal-safe.
    pub(crate) fn of(signals: &[c_int]) -> SignalSet {
        let mut set = SignalSet::empty();
        for &signal in signals {
            set.add(signal);
        }
        set
    }

    /// Adds `signal` (left out if it is no signal). Async-signal-safe.
    pub(crate) fn add(&mut self, signal: c_int) {
        // SAFETY: adds to an initialised set; an invalid number is refused (EINVAL).
        unsafe { libc::sigaddset(&mut self.0, signal) };
    }
}

/// Adds `set` to the calling thread's mask (`pthread_sigmask(SIG_BLOCK)`); returns the mask it
/// had. Async-signal-safe.
pub(crate) fn block(set: &SignalSet) -> io::Result<SignalSet> {
    let mut previous = SignalSet::empty();
    // SAFETY: reads an initialised set and writes the old mask into another.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set.0, &mut previous.0) };
    match rc {
        0 => Ok(previous),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Makes `set` the calling thread's mask (`pthread_sigmask(SIG_SETMASK)`). Async-signal-safe.
pub(crate) fn set_mask(set: &SignalSet) -> io::Result<()> {
    // SAFETY: reads an initialised set; the old mask is not asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set.0, std::ptr::null_mut()) };
    match rc {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Runs `f` with `signal` blocked in the calling thread, then restores the mask (`tcsetpgrp`
/// from a background group would otherwise stop the caller with SIGTTOU). Async-signal-safe
/// itself (two `pthread_sigmask` calls on stack sets), so usable between fork and exec when `f`
/// is.
pub(crate) fn with_blocked<T>(signal: c_int, f: impl FnOnce() -> T) -> T {
    let previous = block(&SignalSet::of(&[signal]));
    let result = f();
    if let Ok(previous) = previous {
        let _ = set_mask(&previous);
    }
    result
}

/// Gives every signal but SIGKILL and SIGSTOP (1 to 31) its default action. Only for a child
/// between fork and exec ([`super::exec::reset_signals_on_exec`]): in this process it would
/// drop handlers the standard library installed. Async-signal-safe.
pub(super) fn reset_dispositions() {
    for signal in 1..32 {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: installs the default action, no handler.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

/// An action of a signal as the kernel had it (`struct sigaction`), to be put back.
#[derive(Clone, Copy)]
pub(crate) struct SavedAction(libc::sigaction);

/// Gives `signal` its default action (`sigaction` with `SIG_DFL`); returns the action it had.
pub(crate) fn set_default_action(signal: c_int) -> io::Result<SavedAction> {
    // SAFETY: sigaction is plain data; all zeroes with SIG_DFL is the default action with an
    // empty mask and no flags.
    let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
    default.sa_sigaction = libc::SIG_DFL;
    let mut previous = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: reads `default` and writes the old action into `previous`, both of their size.
    if unsafe { libc::sigaction(signal, &default, previous.as_mut_ptr()) } != 0 {
        return Err(last_error());
    }
    // SAFETY: sigaction succeeded, so it wrote the old action (and zeroes are valid anyway).
    Ok(SavedAction(unsafe { previous.assume_init() }))
}

/// Puts back an action [`set_default_action`] saved.
pub(crate) fn restore_action(signal: c_int, action: &SavedAction) -> io::Result<()> {
    // SAFETY: the action is one the kernel gave for this process (its handler, if any, is still
    // installed code of this process); the old one is not asked for.
    match unsafe { libc::sigaction(signal, &action.0, std::ptr::null_mut()) } {
        0 => Ok(()),
        _ => Err(last_error()),
    }
}

/// A signalfd for `set` (`SFD_CLOEXEC | SFD_NONBLOCK`).
pub(crate) fn signalfd(set: &SignalSet) -> io::Result<OwnedFd> {
    // SAFETY: -1 asks for a new descriptor; the set is initialised.
    let fd = unsafe { libc::signalfd(-1, &set.0, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: signalfd returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one `signalfd_siginfo` from the signalfd `fd`; its signal, or `None` when there was
/// none whole to read (nothing pending, or an error).
pub(crate) fn read_signal(fd: BorrowedFd<'_>) -> Option<c_int> {
    let mut info = MaybeUninit::<libc::signalfd_siginfo>::zeroed();
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: `info` has room for `size` bytes, the most read(2) writes.
    let n = unsafe { libc::read(fd.as_raw_fd(), info.as_mut_ptr().cast(), size) };
    if n != size as isize {
        return None;
    }
    // SAFETY: zeroed, then filled by the read (signalfd_siginfo is plain data).
    let info = unsafe { info.assume_init() };
    Some(info.ssi_signo as c_int)
}

/// Takes one pending signal of `set` without waiting (`sigtimedwait` with a zero timeout);
/// whether there was one.
pub(crate) fn take_pending(set: &SignalSet) -> bool {
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: reads the set and the timeout; a null info is allowed.
    unsafe { libc::sigtimedwait(&set.0, std::ptr::null_mut(), &zero) > 0 }
}

/// Waits for a signal of `set` (blocked by the caller: `sigwaitinfo`); the signal and its
/// `si_code`, or `None` when the wait was interrupted or failed. Async-signal-safe.
pub(crate) fn wait_for(set: &SignalSet) -> Option<(c_int, c_int)> {
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: reads the set; writes a siginfo into `info`, of its size.
    let signal = unsafe { libc::sigwaitinfo(&set.0, info.as_mut_ptr()) };
    if signal <= 0 {
        return None;
    }
    // SAFETY: zeroed, then filled by sigwaitinfo (siginfo_t is plain data).
    let info = unsafe { info.assume_init() };
    Some((signal, info.si_code))
}
