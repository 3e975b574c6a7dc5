//! Windows' side of [`super`]: a process's creation time (`GetProcessTimes`, 100 ns ticks since
//! 1601) and whether it has exited, through a process handle; the boot (`BootId`) and host a
//! record was made on.
//!
//! Invariant: a pid that cannot be opened for a reason other than "no such process" (access
//! denied) is [`Observed::Unreadable`], which the liveness rule counts as alive.

use std::io;
use std::os::windows::io::{AsHandle, OwnedHandle};

use windows_sys::Win32::Foundation::ERROR_INVALID_PARAMETER;
use windows_sys::Win32::System::Threading::{
    PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE,
};

use super::{Host, Observed, ProcessId, ProcessInfo};
use crate::sys::windows as win;

/// Where Windows keeps its boot counter (`BootId`, a `REG_DWORD`).
const BOOT_ID_KEY: &str =
    r"SYSTEM\CurrentControlSet\Control\Session Manager\Memory Management\PrefetchParameters";

/// The current boot and host; Windows has no pid namespaces (`pid_ns` 0).
pub(super) fn current_host() -> io::Result<Host> {
    Ok(Host {
        boot_id: win::machine_registry_value(BOOT_ID_KEY, "BootId").unwrap_or_default(),
        pid_ns: 0,
        hostname: win::dns_hostname()?,
    })
}

/// The creation time of the process `pid`, if there is one we may query.
pub(super) fn start_time(pid: u32) -> io::Result<u64> {
    win::process_creation_time(open(pid)?.as_handle())
}

/// What a handle to `pid` says now: an exited process keeps its pid while a handle holds it.
pub(super) fn observe(pid: u32) -> Observed {
    let handle = match open(pid) {
        Ok(h) => h,
        Err(e) if e.raw_os_error() == Some(ERROR_INVALID_PARAMETER as i32) => {
            return Observed::Absent
        }
        Err(_) => return Observed::Unreadable,
    };
    match win::process_creation_time(handle.as_handle()) {
        Ok(t) if win::wait_signalled(handle.as_handle(), 0) => Observed::Exited(t),
        Ok(t) => Observed::Running(t),
        Err(_) => Observed::Unreadable,
    }
}

/// Describes the process `pid` (its image path), if it can be opened.
pub(super) fn info(pid: u32) -> Option<ProcessInfo> {
    let handle = open(pid).ok()?;
    Some(ProcessInfo {
        id: ProcessId {
            pid,
            start_time: win::process_creation_time(handle.as_handle()).ok()?,
        },
        command: win::process_image_path(handle.as_handle())
            .unwrap_or_else(|e| format!("<image unknown: {e}>")),
    })
}

/// Opens `pid` for querying and waiting.
fn open(pid: u32) -> io::Result<OwnedHandle> {
    win::open_process(pid, PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_SYNCHRONIZE)
}
