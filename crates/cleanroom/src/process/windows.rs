//! Windows' side of [`super`]: a process's creation time (`GetProcessTimes`, 100 ns ticks since
//! 1601) and whether it has exited, through a process handle; the boot (`BootId`) and host a
//! record was made on.
//!
//! Invariant: a pid that cannot be opened for a reason other than "no such process" (access
//! denied) is [`Observed::Unreadable`], which the liveness rule counts as alive.

use std::io;
use std::os::windows::io::{AsRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{ERROR_INVALID_PARAMETER, FILETIME, WAIT_OBJECT_0};
use windows_sys::Win32::System::Registry::{RegGetValueW, HKEY_LOCAL_MACHINE, RRF_RT_REG_DWORD};
use windows_sys::Win32::System::SystemInformation::{
    ComputerNamePhysicalDnsHostname, GetComputerNameExW,
};
use windows_sys::Win32::System::Threading::{
    GetProcessTimes, OpenProcess, QueryFullProcessImageNameW, WaitForSingleObject,
    PROCESS_NAME_WIN32, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE,
};

use super::{Host, Observed, ProcessId, ProcessInfo};
use crate::sys::windows as win;

/// The current boot and host; Windows has no pid namespaces (`pid_ns` 0).
pub(super) fn current_host() -> io::Result<Host> {
    Ok(Host {
        boot_id: boot_id().map(|n| n.to_string()).unwrap_or_default(),
        pid_ns: 0,
        hostname: hostname()?,
    })
}

/// The creation time of the process `pid`, if there is one we may query.
pub(super) fn start_time(pid: u32) -> io::Result<u64> {
    creation_time(&open(pid)?)
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
    match creation_time(&handle) {
        Ok(t) if has_exited(&handle) => Observed::Exited(t),
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
            start_time: creation_time(&handle).ok()?,
        },
        command: image_path(&handle).unwrap_or_else(|e| format!("<image unknown: {e}>")),
    })
}

/// Whether the process behind `handle` (opened with SYNCHRONIZE) has exited.
fn has_exited(handle: &OwnedHandle) -> bool {
    // SAFETY: `handle` is an open process handle; a zero timeout only polls.
    unsafe { WaitForSingleObject(handle.as_raw_handle(), 0) == WAIT_OBJECT_0 }
}

/// Opens `pid` for querying and waiting.
fn open(pid: u32) -> io::Result<OwnedHandle> {
    // SAFETY: no pointers; the handle returned is owned below.
    win::owned(unsafe {
        OpenProcess(
            PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_SYNCHRONIZE,
            0,
            pid,
        )
    })
}

/// The creation time of the process behind `handle`.
fn creation_time(handle: &OwnedHandle) -> io::Result<u64> {
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: `handle` is an open process handle; the four out-parameters are valid.
    win::check(unsafe {
        GetProcessTimes(
            handle.as_raw_handle(),
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    })?;
    Ok(win::ticks(created))
}

/// The executable path of the process behind `handle`.
fn image_path(handle: &OwnedHandle) -> io::Result<String> {
    let mut buf = vec![0u16; 32 * 1024];
    let mut len = buf.len() as u32;
    // SAFETY: `buf` is writable for `len` units; `len` is updated to the length written.
    win::check(unsafe {
        QueryFullProcessImageNameW(
            handle.as_raw_handle(),
            PROCESS_NAME_WIN32,
            buf.as_mut_ptr(),
            &mut len,
        )
    })?;
    Ok(String::from_utf16_lossy(&buf[..len as usize]))
}

/// The boot counter Windows keeps in the registry, if any.
fn boot_id() -> Option<u32> {
    let key = win::wide(
        r"SYSTEM\CurrentControlSet\Control\Session Manager\Memory Management\PrefetchParameters",
    );
    let value = win::wide("BootId");
    let mut data = 0u32;
    let mut size = 4u32;
    // SAFETY: both names are NUL-terminated; `data` is a 4-byte buffer as `size` says.
    let rc = unsafe {
        RegGetValueW(
            HKEY_LOCAL_MACHINE,
            key.as_ptr(),
            value.as_ptr(),
            RRF_RT_REG_DWORD,
            std::ptr::null_mut(),
            (&mut data as *mut u32).cast(),
            &mut size,
        )
    };
    (rc == 0).then_some(data)
}

/// The host's DNS host name.
fn hostname() -> io::Result<String> {
    let mut buf = vec![0u16; 256];
    let mut len = buf.len() as u32;
    // SAFETY: `buf` is writable for `len` units.
    win::check(unsafe {
        GetComputerNameExW(ComputerNamePhysicalDnsHostname, buf.as_mut_ptr(), &mut len)
    })?;
    Ok(String::from_utf16_lossy(&buf[..len as usize]))
}
