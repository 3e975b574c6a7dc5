//! Process identity: who a process is, whether a recorded one is still the same process, and
//! where a record of one was made. One set of types on every platform; the facts come from the
//! one private `os` child picked below (procfs on Linux, `proc_pidinfo` on macOS, process
//! handles on Windows).
//!
//! Invariant: a pid alone never proves identity (pids wrap, and are reused at once on a busy
//! machine). A process is named by pid + start time, and a record also names the boot (and on
//! Linux the pid namespace) it was made in. A recorded process is judged dead only on proof:
//! another boot, no process with its pid, a process with its pid started at another time, or
//! one that has exited. Anything uncertain is [`Liveness::Unknown`], which every caller counts
//! as alive.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
pub(crate) mod os;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
pub(crate) mod os;
#[cfg(windows)]
#[path = "windows.rs"]
pub(crate) mod os;

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

// Linux's procfs queries, used by containment, reclaim, the terminal hand-back and the
// (Linux-only) exec-server.
#[cfg(target_os = "linux")]
pub use os::{
    all_pids, children, command_line, descendants, describe, environ, environ_has, is_alive,
    read_kernel_file, read_kernel_text, real_uid, stat_fields, still_alive, with_env_entry,
};

/// A process named so that pid reuse cannot confuse it with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessId {
    /// The pid, in the pid namespace of the observer. On Unix a record naming 0 or a pid above
    /// `i32::MAX` (no `pid_t` can hold it) is refused when read.
    #[cfg_attr(unix, serde(deserialize_with = "kernel_pid"))]
    pub pid: u32,
    /// When it started, in the platform's clock: clock ticks after boot (Linux), microseconds
    /// since the Unix epoch (macOS), 100 ns ticks since 1601 (Windows). Compared, never shown.
    // Markers written by cleanroom.exe before the types were unified say `creation_time`.
    #[cfg_attr(windows, serde(alias = "creation_time"))]
    pub start_time: u64,
}

/// The host name `uname` reports (the UTS namespace's, which containers sharing a kernel set
/// apart).
#[cfg(unix)]
fn unix_hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Reads a pid a process can have: 0 (the caller's process group to `kill`) and a value no
/// `pid_t` can hold (a negative, process-group or broadcast, pid once cast) are forged.
#[cfg(unix)]
fn kernel_pid<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let pid = u32::deserialize(deserializer)?;
    match i32::try_from(pid) {
        Ok(1..) => Ok(pid),
        _ => Err(serde::de::Error::custom(format!(
            "pid {pid} is no process's"
        ))),
    }
}

/// Facts about one process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// The process.
    #[serde(flatten)]
    pub id: ProcessId,
    /// For reports: its command line, arguments joined by spaces, or `[comm]` for kernel-style
    /// names (Linux); its short name (macOS); its image path (Windows).
    pub command: String,
}

/// Where the process that wrote a record was running, to judge later whether it still lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// The boot: `/proc/sys/kernel/random/boot_id` (Linux), `kern.bootsessionuuid` (macOS),
    /// the `BootId` counter (Windows); empty where the system keeps none (Wine), and then pid
    /// and start time decide alone.
    pub boot_id: String,
    /// Inode of `/proc/self/ns/pid`: pids are only comparable within one pid namespace. Always
    /// 0 where there are no pid namespaces (macOS, Windows).
    // Markers written by cleanroom.exe before the types were unified have no `pid_ns`.
    #[cfg_attr(windows, serde(default))]
    pub pid_ns: u64,
    /// The host name.
    pub hostname: String,
}

/// What can be said about a recorded process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It exists: same pid, same start time, same boot and pid namespace.
    Alive,
    /// It provably no longer exists, and why.
    Dead(Death),
    /// It cannot be decided from here (another pid namespace or host, a process we may not
    /// inspect): counted as alive.
    Unknown,
}

impl Liveness {
    /// Whether the process is provably gone (the only verdict that lets a caller reclaim).
    pub fn is_dead(self) -> bool {
        matches!(self, Liveness::Dead(_))
    }
}

/// Why a recorded process is provably gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Death {
    /// It ran in another boot.
    OtherBoot,
    /// No process has its pid.
    Gone,
    /// Its pid names a process started at another time.
    Reused,
    /// It has exited, though its process object is still held (Windows).
    Exited,
}

impl fmt::Display for Death {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Death::OtherBoot => "it ran in another boot",
            Death::Gone => "no process has its pid",
            Death::Reused => "its pid names another process",
            Death::Exited => "it has exited",
        })
    }
}

/// What the platform can tell about a pid now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Observed {
    /// A process with this start time holds the pid (on Linux, a zombie too).
    Running(u64),
    /// A process with this start time holds the pid but has exited (Windows: a handle keeps
    /// the process object).
    #[cfg_attr(not(windows), allow(dead_code))]
    Exited(u64),
    /// No process has the pid.
    Absent,
    /// The platform would not say (permissions, an unreadable procfs, ...).
    Unreadable,
}

impl Host {
    /// The current machine, boot and pid namespace.
    pub fn current() -> io::Result<Host> {
        os::current_host()
    }
}

impl ProcessId {
    /// The calling process.
    pub fn current() -> io::Result<ProcessId> {
        let pid = std::process::id();
        Ok(ProcessId {
            pid,
            start_time: os::start_time(pid)?,
        })
    }

    /// The identity of `pid` now, or `None` if there is no such process we may inspect.
    pub fn of(pid: u32) -> Option<ProcessId> {
        os::start_time(pid)
            .ok()
            .map(|start_time| ProcessId { pid, start_time })
    }

    /// Judges whether this process, recorded on `recorded_host`, is alive when seen from `here`.
    pub fn liveness(&self, recorded_host: &Host, here: &Host) -> Liveness {
        let boots_known = !recorded_host.boot_id.is_empty() && !here.boot_id.is_empty();
        if boots_known && recorded_host.boot_id != here.boot_id {
            return Liveness::Dead(Death::OtherBoot);
        }
        if recorded_host.pid_ns != here.pid_ns || recorded_host.hostname != here.hostname {
            return Liveness::Unknown;
        }
        match os::observe(self.pid) {
            Observed::Running(t) if t == self.start_time => Liveness::Alive,
            Observed::Exited(t) if t == self.start_time => Liveness::Dead(Death::Exited),
            Observed::Running(_) | Observed::Exited(_) => Liveness::Dead(Death::Reused),
            Observed::Absent => Liveness::Dead(Death::Gone),
            Observed::Unreadable => Liveness::Unknown,
        }
    }
}

/// The start time of `pid` now, in the platform's clock (see [`ProcessId::start_time`]).
pub fn start_time(pid: u32) -> io::Result<u64> {
    os::start_time(pid)
}

/// Describes the process `pid` now, or `None` when it is gone, or dead by the platform's rule
/// (on Linux a zombie, unless it is a leader whose other threads still run).
pub fn info(pid: u32) -> Option<ProcessInfo> {
    os::info(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_is_alive_and_only_proof_makes_a_record_dead() {
        let here = Host::current().unwrap();
        let me = ProcessId::current().unwrap();
        assert_eq!(me.liveness(&here, &here), Liveness::Alive);
        let impostor = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert_eq!(
            impostor.liveness(&here, &here),
            Liveness::Dead(Death::Reused)
        );
        let other_boot = Host {
            boot_id: "another-boot".into(),
            ..here.clone()
        };
        assert_eq!(
            me.liveness(&other_boot, &here),
            Liveness::Dead(Death::OtherBoot)
        );
        // An empty boot id (Wine keeps none) proves nothing: pid and start time decide.
        let no_boot = Host {
            boot_id: String::new(),
            ..here.clone()
        };
        assert_eq!(me.liveness(&no_boot, &here), Liveness::Alive);
        assert_eq!(
            impostor.liveness(&no_boot, &here),
            Liveness::Dead(Death::Reused)
        );
        let other_ns = Host {
            pid_ns: here.pid_ns + 1,
            ..here.clone()
        };
        assert_eq!(me.liveness(&other_ns, &here), Liveness::Unknown);
    }

    #[test]
    fn identities_keep_their_json_and_refuse_a_negative_pid() {
        let info = ProcessInfo {
            id: ProcessId {
                pid: 4242,
                start_time: 123456,
            },
            command: "sleep 9".into(),
        };
        let text = serde_json::to_string(&info).unwrap();
        assert_eq!(
            text,
            r#"{"pid":4242,"start_time":123456,"command":"sleep 9"}"#
        );
        assert_eq!(
            serde_json::from_str::<ProcessInfo>(&text).unwrap().id,
            info.id
        );
        let host = Host {
            boot_id: "b".into(),
            pid_ns: 7,
            hostname: "h".into(),
        };
        assert_eq!(
            serde_json::to_string(&host).unwrap(),
            r#"{"boot_id":"b","pid_ns":7,"hostname":"h"}"#
        );
        for forged in [-1i64, 0, 2_147_483_648, 4_294_967_296] {
            let text = format!(r#"{{"pid":{forged},"start_time":1}}"#);
            assert!(serde_json::from_str::<ProcessId>(&text).is_err(), "{text}");
        }
    }
}
