//! Processes on macOS, named by pid + start time (`proc_pidinfo(PROC_PIDTBSDINFO)`, microseconds
//! since the epoch), and the boot and host a record was made on (`kern.bootsessionuuid`).
//!
//! Invariant: as on Linux, a pid alone never identifies a process: a recorded owner is judged
//! alive only when the pid still names a process started at the recorded time, in the same boot.
//! macOS has no pid namespaces, so `pid_ns` is always 0. Type-checked only (docs/macos.md).

use std::ffi::CStr;
use std::io;
use std::mem;

use serde::{Deserialize, Serialize};

use crate::darwin;

/// A process named so that pid reuse cannot confuse it with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessId {
    /// The pid.
    pub pid: i32,
    /// Start time in microseconds since the Unix epoch.
    pub start_time: u64,
}

/// Facts about one process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// The process.
    #[serde(flatten)]
    pub id: ProcessId,
    /// Its short command name (`pbi_comm`).
    pub command: String,
}

/// Where the process that wrote a record was running, to judge later whether it still lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// `kern.bootsessionuuid`, new on every boot.
    pub boot_id: String,
    /// Always 0: macOS has no pid namespaces (kept so records have one shape on every Unix).
    pub pid_ns: u64,
    /// The UTS hostname.
    pub hostname: String,
}

impl Host {
    /// Reads the current machine and boot.
    pub fn current() -> io::Result<Host> {
        let hostname = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Ok(Host {
            boot_id: darwin::sysctl_string(c"kern.bootsessionuuid")?,
            pid_ns: 0,
            hostname,
        })
    }
}

/// What can be said about a recorded process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It exists (same pid, same start time, same boot).
    Alive,
    /// It provably no longer exists.
    Dead,
    /// It cannot be decided from here (another host, a process we may not inspect, ...).
    Unknown,
}

impl ProcessId {
    /// The calling process.
    pub fn current() -> io::Result<ProcessId> {
        let pid = std::process::id() as i32;
        Ok(ProcessId {
            pid,
            start_time: start_time(&bsd_info(pid)?),
        })
    }

    /// Reads the identity of `pid` now, or `None` if it does not exist.
    pub fn of(pid: i32) -> Option<ProcessId> {
        let info = bsd_info(pid).ok()?;
        Some(ProcessId {
            pid,
            start_time: start_time(&info),
        })
    }

    /// Judges whether this process, recorded on `recorded_host`, is alive when seen from `here`.
    pub fn liveness(&self, recorded_host: &Host, here: &Host) -> Liveness {
        if recorded_host.boot_id != here.boot_id {
            return Liveness::Dead;
        }
        if recorded_host.hostname != here.hostname {
            return Liveness::Unknown;
        }
        match bsd_info(self.pid) {
            Ok(info) if start_time(&info) == self.start_time => Liveness::Alive,
            Ok(_) => Liveness::Dead,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Liveness::Dead,
            Err(_) => Liveness::Unknown,
        }
    }
}

/// Reads `ProcessInfo` for `pid`, or `None` when it does not exist.
pub fn info(pid: i32) -> Option<ProcessInfo> {
    let info = bsd_info(pid).ok()?;
    // SAFETY: the kernel NUL-terminates pbi_comm within its MAXCOMLEN bytes.
    let command = unsafe { CStr::from_ptr(info.pbi_comm.as_ptr()) };
    Some(ProcessInfo {
        id: ProcessId {
            pid,
            start_time: start_time(&info),
        },
        command: command.to_string_lossy().into_owned(),
    })
}

fn start_time(info: &libc::proc_bsdinfo) -> u64 {
    info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec
}

/// `proc_pidinfo(pid, PROC_PIDTBSDINFO)`; ESRCH when `pid` names no process.
fn bsd_info(pid: i32) -> io::Result<libc::proc_bsdinfo> {
    // SAFETY: proc_bsdinfo is plain old data; the kernel fills at most `size` bytes of it.
    let mut info: libc::proc_bsdinfo = unsafe { mem::zeroed() };
    let size = mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
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
