//! Processes: signals through a pidfd with flags and to a process group by number with any
//! signal (rustix's take a `Signal` and no flags), and new namespaces (rustix's `unshare` is
//! `unsafe` for `CLONE_FILES`, which is not one).

use std::ffi::{c_int, c_uint};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::{last_error, zero_or_errno};

/// The `unshare` flags that only make new namespaces.
const NAMESPACES: c_int = libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWTIME;

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

/// `unshare(flags)` of namespace flags only (`CLONE_NEWNS`, `CLONE_NEWNET`, `CLONE_NEWUSER`,
/// ...; any other flag is `EINVAL`). Async-signal-safe.
pub(crate) fn unshare(flags: c_int) -> io::Result<()> {
    if flags & !NAMESPACES != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: unshare takes an integer; new namespaces unshare no descriptor table (no
    // CLONE_FILES), so no descriptor of another thread changes meaning.
    match unsafe { libc::unshare(flags) } {
        0 => Ok(()),
        _ => Err(last_error()),
    }
}

/// Sets `IFF_UP` on the interface `name` of the caller's network namespace (SIOCGIFFLAGS, then
/// SIOCSIFFLAGS on `socket`, an `AF_INET` datagram socket). A name too long for an interface is
/// `EINVAL`. Async-signal-safe.
pub(crate) fn set_interface_up(socket: BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value (empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = name.to_bytes();
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    for (to, &from) in req.ifr_name.iter_mut().zip(name) {
        *to = from as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq naming the interface (NUL-terminated: zeroed past the
    // name); SIOCGIFFLAGS fills ifru_flags.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
        return Err(last_error());
    }
    // SAFETY: SIOCGIFFLAGS succeeded, so ifru_flags is the initialised union member.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: `req` is a valid ifreq; SIOCSIFFLAGS only reads it.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } != 0 {
        return Err(last_error());
    }
    Ok(())
}
