//! Processes: signals through a pidfd with flags and to a process group by number with any
//! signal (rustix's take a `Signal` and no flags).

use std::ffi::{c_int, c_uint};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::{last_error, zero_or_errno};

/// `pidfd_send_signal(pidfd, signal, NULL, flags)`: `signal` (0 only checks) to the process
/// `pidfd` names, or with `PIDFD_SIGNAL_PROCESS_GROUP` to its process group. Async-signal-safe.
pub(crate) fn pidfd_send_signal(
    pidfd: BorrowedFd<'_>,
    signal: c_int,
    flags: c_uint,
) -> io::Result<()> {
    // SAFETY: a null siginfo is allowed (the kernel fills one in) and no memory of ours is read;
    // the descriptor is borrowed, so open.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            flags,
        )
    };
    zero_or_errno(rc)
}

/// `kill(-group, signal)`: `signal` to every process of the process group `group` (positive;
/// anything else is `EINVAL`, never a kill of the caller's own group or of every process).
/// Async-signal-safe.
pub(crate) fn kill_process_group(group: i32, signal: c_int) -> io::Result<()> {
    if group <= 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill takes integers only.
    match unsafe { libc::kill(-group, signal) } {
        0 => Ok(()),
        _ => Err(last_error()),
    }
}
