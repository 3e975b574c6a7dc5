//! macOS's side of [`super`]: a process's start time from `proc_pidinfo(PROC_PIDTBSDINFO)`
//! (microseconds since the epoch), and the boot (`kern.bootsessionuuid`) and host a record was
//! made on. macOS has no pid namespaces, so `pid_ns` is always 0. Type-checked only
//! (docs/macos.md).

use std::io;

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
    Ok(started(&darwin::proc_bsd_info(pid)?))
}

/// What `proc_pidinfo` says about `pid` now.
pub(super) fn observe(pid: u32) -> Observed {
    match darwin::proc_bsd_info(pid) {
        Ok(info) => Observed::Running(started(&info)),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Observed::Absent,
        Err(_) => Observed::Unreadable,
    }
}

/// Reads `ProcessInfo` for `pid`, or `None` when it does not exist or is a zombie (it has
/// exited; only its parent's wait is missing).
pub(super) fn info(pid: u32) -> Option<ProcessInfo> {
    let info = darwin::proc_bsd_info(pid)
        .ok()
        .filter(|i| i.pbi_status != libc::SZOMB)?;
    // The kernel NUL-terminates pbi_comm within its MAXCOMLEN bytes.
    let command: Vec<u8> = info
        .pbi_comm
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(ProcessInfo {
        id: ProcessId {
            pid,
            start_time: started(&info),
        },
        command: String::from_utf8_lossy(&command).into_owned(),
    })
}

fn started(info: &libc::proc_bsdinfo) -> u64 {
    info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec
}
