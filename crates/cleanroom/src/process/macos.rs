//! macOS's side of [`super`]: a process's start time from `proc_pidinfo(PROC_PIDTBSDINFO)`
//! (microseconds since the epoch), and the boot (`kern.bootsessionuuid`) and host a record was
//! made on. macOS has no pid namespaces, so `pid_ns` is always 0. Type-checked only
//! (docs/macos.md).

use std::ffi::CStr;
use std::io;
use std::mem;

use super::{Host, Observed, ProcessId, ProcessInfo};
use crate::sys::macos as darwin;

/// The current machine and boot.
pub(super) fn current_host() -> io::Result<Host> {
    let hostname = super::unix_hostname();
    Ok(Host {
        boot_id: darwin::sysctl_string(c"kern.bootsessionuuid")?,
        pid_ns: 0,
        hostname,
    })
}

/// The start time of `pid`.
pub(super) fn start_time(pid: u32) -> io::Result<u64> {
    Ok(started(&bsd_info(pid)?))
}

/// What `proc_pidinfo` says about `pid` now.
pub(super) fn observe(pid: u32) -> Observed {
    match bsd_info(pid) {
        Ok(info) => Observed::Running(started(&info)),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Observed::Absent,
        Err(_) => Observed::Unreadable,
    }
}

/// Reads `ProcessInfo` for `pid`, or `None` when it does not exist or is a zombie (it has
/// exited; only its parent's wait is missing).
pub(super) fn info(pid: u32) -> Option<ProcessInfo> {
    let info = bsd_info(pid).ok().filter(|i| i.pbi_status != libc::SZOMB)?;
    // SAFETY: the kernel NUL-terminates pbi_comm within its MAXCOMLEN bytes.
    let command = unsafe { CStr::from_ptr(info.pbi_comm.as_ptr()) };
    Some(ProcessInfo {
        id: ProcessId {
            pid,
            start_time: started(&info),
        },
        command: command.to_string_lossy().into_owned(),
    })
}

fn started(info: &libc::proc_bsdinfo) -> u64 {
    info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec
}

/// `proc_pidinfo(pid, PROC_PIDTBSDINFO)`; ESRCH when `pid` names no process.
fn bsd_info(pid: u32) -> io::Result<libc::proc_bsdinfo> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: proc_bsdinfo is plain old data; the kernel fills at most `size` bytes of it.
    let mut info: libc::proc_bsdinfo = unsafe { mem::zeroed() };
    let size = mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: the buffer is `info`, of exactly `size` bytes, on our stack; the kernel writes at
    // most that many and reads nothing of ours.
    let written =
        unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    match written {
        n if n == size => Ok(info),
        0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short proc_pidinfo answer",
        )),
    }
}
