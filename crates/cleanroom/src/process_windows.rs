//! Processes on Windows, named by pid + creation time (`GetProcessTimes`, 100 ns ticks since
//! 1601), and the boot and host a record was made on.
//!
//! Invariant: a recorded owner is provably dead only when the boot differs, the pid names no
//! process, the pid names a process created at another time, or that process has exited.
//! Anything uncertain (access denied) counts as alive.

use std::io;
use std::os::windows::io::{AsRawHandle, OwnedHandle};

use serde::{Deserialize, Serialize};
use windows_sys::Win32::Foundation::{ERROR_INVALID_PARAMETER, FILETIME, WAIT_OBJECT_0};
use windows_sys::Win32::System::Registry::{RegGetValueW, HKEY_LOCAL_MACHINE, RRF_RT_REG_DWORD};
use windows_sys::Win32::System::SystemInformation::{
    ComputerNamePhysicalDnsHostname, GetComputerNameExW,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcessId, GetProcessTimes, OpenProcess, QueryFullProcessImageNameW,
    WaitForSingleObject, PROCESS_NAME_WIN32, PROCESS_QUERY_LIMITED_INFORMATION,
    PROCESS_SYNCHRONIZE,
};

use crate::win;

/// A process, named so that a reused pid is never mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessId {
    /// The process id.
    pub pid: u32,
    /// Its creation time (`GetProcessTimes`, 100 ns ticks since 1601-01-01 UTC).
    pub creation_time: u64,
}

/// A process and its command (image path), for reports.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessInfo {
    /// Who.
    pub id: ProcessId,
    /// Its executable's path (Windows keeps no argv another process may read safely).
    pub command: String,
}

/// The boot and host a process lives on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// The boot counter (`BootId` under `Session Manager\Memory Management\PrefetchParameters`);
    /// empty where the system keeps none (Wine): then only pid + creation time decide.
    pub boot_id: String,
    /// The host name.
    pub hostname: String,
}

/// What is known about a recorded process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It may be running (or we may not look): never reclaimed.
    Alive,
    /// Provably gone, and why.
    Dead(String),
}

impl Host {
    /// The current boot and host.
    pub fn current() -> io::Result<Host> {
        Ok(Host {
            boot_id: boot_id().map(|n| n.to_string()).unwrap_or_default(),
            hostname: hostname()?,
        })
    }
}

impl ProcessId {
    /// This process.
    pub fn current() -> io::Result<ProcessId> {
        // SAFETY: no preconditions.
        let pid = unsafe { GetCurrentProcessId() };
        let handle = open(pid)?;
        Ok(ProcessId {
            pid,
            creation_time: creation_time(&handle)?,
        })
    }

    /// The process with `pid` now, if there is one we may query.
    pub fn of(pid: u32) -> Option<ProcessId> {
        let handle = open(pid).ok()?;
        Some(ProcessId {
            pid,
            creation_time: creation_time(&handle).ok()?,
        })
    }

    /// Whether this process, recorded on `recorded_host`, can still be alive on `here`.
    pub fn liveness(&self, recorded_host: &Host, here: &Host) -> Liveness {
        if !recorded_host.boot_id.is_empty()
            && !here.boot_id.is_empty()
            && recorded_host.boot_id != here.boot_id
        {
            return Liveness::Dead(format!(
                "it ran in boot {} and this is boot {}",
                recorded_host.boot_id, here.boot_id
            ));
        }
        let handle = match open(self.pid) {
            Ok(h) => h,
            Err(e) if e.raw_os_error() == Some(ERROR_INVALID_PARAMETER as i32) => {
                return Liveness::Dead(format!("no process has pid {}", self.pid))
            }
            Err(_) => return Liveness::Alive,
        };
        match creation_time(&handle) {
            Ok(t) if t != self.creation_time => Liveness::Dead(format!(
                "pid {} is another process (created at {t}, not {})",
                self.pid, self.creation_time
            )),
            Ok(_) if has_exited(&handle) => Liveness::Dead(format!("pid {} has exited", self.pid)),
            _ => Liveness::Alive,
        }
    }
}

/// Describes the process `pid` (its image path), if it can be opened.
pub fn info(pid: u32) -> Option<ProcessInfo> {
    let handle = open(pid).ok()?;
    Some(ProcessInfo {
        id: ProcessId {
            pid,
            creation_time: creation_time(&handle).ok()?,
        },
        command: image_path(&handle).unwrap_or_else(|e| format!("<image unknown: {e}>")),
    })
}

/// Whether the process behind `handle` (opened with SYNCHRONIZE) has exited.
pub fn has_exited(handle: &OwnedHandle) -> bool {
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
