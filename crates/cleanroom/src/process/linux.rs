//! Linux's side of [`super`]: process identity from procfs, the procfs queries containment,
//! reclaim and the exec-server build on, and safe signalling through pidfds.
//!
//! Invariant: a process is named by pid + start time (field 22 of `/proc/<pid>/stat`), and
//! signals go through a pidfd opened *before* the start time is re-checked, so a reused pid is
//! never signalled.

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use rustix::process::{Pid, PidfdFlags, Signal};

use super::{Host, Observed, ProcessId, ProcessInfo};
use crate::sys::linux::fd::read_kernel_path;
pub use crate::sys::linux::fd::{read_kernel_file, read_kernel_text};

/// The current machine, boot and pid namespace.
pub(super) fn current_host() -> io::Result<Host> {
    let boot_id = read_kernel_text("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string();
    let pid_ns = fs::metadata("/proc/self/ns/pid")?.ino();
    let hostname = super::unix_hostname();
    Ok(Host {
        boot_id,
        pid_ns,
        hostname,
    })
}

/// What procfs says about `pid` now (a zombie still holds its pid and start time).
pub(super) fn observe(pid: u32) -> Observed {
    match start_time(pid) {
        Ok(t) => Observed::Running(t),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Observed::Absent,
        Err(_) => Observed::Unreadable,
    }
}

/// `pid` as the kernel's type, or `None` for a value no process can have (0, or above
/// `i32::MAX`): a recorded pid must never turn into a process-group or broadcast signal. The
/// only way the library makes a [`Pid`] from a pid it did not get from the kernel.
fn raw_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

impl ProcessId {
    /// Sends `signal` if and only if this exact process still exists.
    ///
    /// Returns `Ok(false)` when the process is gone (or its pid now belongs to another process).
    pub fn signal(&self, signal: Signal) -> io::Result<bool> {
        let Some(pidfd) = self.pidfd()? else {
            return Ok(false);
        };
        match rustix::process::pidfd_send_signal(pidfd.as_fd(), signal) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::SRCH) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens a pidfd for this process after checking that the pid still names it.
    pub fn pidfd(&self) -> io::Result<Option<OwnedFd>> {
        let Some(pid) = raw_pid(self.pid) else {
            return Ok(None);
        };
        let fd = match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // The pidfd now pins the process it was opened for; if that is still the one we recorded,
        // every signal through it reaches the right process (or nothing, once it has exited).
        match start_time(self.pid) {
            Ok(t) if t == self.start_time => Ok(Some(fd)),
            _ => Ok(None),
        }
    }
}

/// Field 22 of `/proc/<pid>/stat`: start time in clock ticks after boot.
pub(super) fn start_time(pid: u32) -> io::Result<u64> {
    stat_fields(pid)?
        .get(19)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc stat"))
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses): index 0 is field 3 (state), index 3 field 6 (the kernel session).
pub fn stat_fields(pid: u32) -> io::Result<Vec<String>> {
    let stat = read_kernel_text(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc stat"))?;
    Ok(after.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` is alive: it exists and is not dead, where dead means gone, state `X`, or
/// state `Z` with no other thread left.
///
/// A thread-group leader that called `pthread_exit` shows `Z` while its other threads run: that
/// process is alive (and must be killed by its tgid), so a `Z` leader with more than one entry
/// in `/proc/<pid>/task` counts as alive. Every membership test goes through here.
pub fn is_alive(pid: u32) -> bool {
    match stat_fields(pid) {
        Ok(fields) => state_is_alive(pid, fields.first().map(String::as_str)),
        Err(_) => false,
    }
}

/// The liveness rule of [`is_alive`] for a state already read from `/proc/<pid>/stat`.
fn state_is_alive(pid: u32, state: Option<&str>) -> bool {
    match state {
        Some("X") | None => false,
        Some("Z") => fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| tasks.count() > 1),
        Some(_) => true,
    }
}

/// The command line of `pid`, for reports.
///
/// A process caught in the middle of `execve` briefly shows an empty command line; it is read
/// again a few times before falling back to the kernel's short name.
pub fn command_line(pid: u32) -> String {
    let path = format!("/proc/{pid}/cmdline");
    let mut raw = fs::read(&path).unwrap_or_default();
    for _ in 0..5 {
        if !raw.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        raw = fs::read(&path).unwrap_or_default();
    }
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if parts.is_empty() {
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        format!("[{}]", comm.trim())
    } else {
        parts.join(" ")
    }
}

/// Reads `ProcessInfo` for `pid`, or `None` when it is dead (see [`is_alive`]).
pub(super) fn info(pid: u32) -> Option<ProcessInfo> {
    if !is_alive(pid) {
        return None;
    }
    let id = ProcessId::of(pid)?;
    Some(ProcessInfo {
        id,
        command: command_line(pid),
    })
}

/// Direct children of `pid` (all of its threads' children).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let path = task.path().join("children");
        if let Ok(text) = read_kernel_text(&path) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Every living descendant of `pid` (children, their children, ...), the dead (see
/// [`is_alive`]) excluded.
///
/// Each is named by the start time read together with its parent pid from one read of its
/// `stat`, and kept only if that parent is the process it was listed under: a pid that exited
/// and was reused by an unrelated process between the listing and the read is not adopted.
pub fn descendants(pid: u32) -> Vec<ProcessId> {
    let mut out: Vec<ProcessId> = Vec::new();
    let mut stack: Vec<(u32, u32)> = children(pid).into_iter().map(|c| (pid, c)).collect();
    while let Some((parent, p)) = stack.pop() {
        if out.iter().any(|d| d.pid == p) {
            continue;
        }
        let Ok(fields) = stat_fields(p) else { continue };
        let ppid = fields.get(1).and_then(|f| f.parse::<u32>().ok());
        let start = fields.get(19).and_then(|f| f.parse::<u64>().ok());
        let alive = state_is_alive(p, fields.first().map(String::as_str));
        let (Some(ppid), Some(start_time)) = (ppid, start) else {
            continue;
        };
        if ppid != parent {
            continue;
        }
        stack.extend(children(p).into_iter().map(|c| (p, c)));
        if alive {
            out.push(ProcessId { pid: p, start_time });
        }
    }
    out
}

/// `ProcessInfo` for a process already identified (its command line read now).
pub fn describe(id: ProcessId) -> ProcessInfo {
    ProcessInfo {
        id,
        command: command_line(id.pid),
    }
}

/// Whether `id` still names a living process (same pid, same start time).
pub fn still_alive(id: ProcessId) -> bool {
    ProcessId::of(id.pid) == Some(id) && is_alive(id.pid)
}

/// The real uid of `pid`.
pub fn real_uid(pid: u32) -> Option<u32> {
    let status = read_kernel_text(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

/// All pids currently visible in `/proc`.
pub fn all_pids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Processes of real uid `uid` whose environment contains the entry `NAME=value`.
///
/// This is how processes of a run whose runner died are found: every contained process carries
/// `CLEANROOM_RUN_ID` (or the exec-server's `CLEANROOM_EXEC_ID`) from its spawn.
pub fn with_env_entry(name: &str, value: &str, uid: u32) -> Vec<ProcessInfo> {
    let needle = format!("{name}={value}");
    let me = std::process::id();
    // The identity is read before the uid and environment are checked and confirmed after, so
    // the process that passed the checks is the one that will be named (and maybe signalled).
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(ProcessId::of)
        .filter(|id| real_uid(id.pid) == Some(uid) && environ_has(id.pid, needle.as_bytes()))
        .filter(|&id| still_alive(id))
        .map(describe)
        .collect()
}

/// The raw environment of `pid` (`NAME=value` entries separated by NUL), or `None` when it
/// cannot be read. Every membership test by environment goes through here.
///
/// A leader that called `pthread_exit` has no memory map of its own any more, so its
/// `environ` cannot be read; the environment of a thread still running is read instead.
pub fn environ(pid: u32) -> Option<Vec<u8>> {
    match read_kernel_path(format!("/proc/{pid}/environ")) {
        Ok(env) if !env.is_empty() => Some(env),
        Ok(_) | Err(_) if !is_alive(pid) => None,
        first => fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
            .find_map(|task| {
                read_kernel_path(task.path().join("environ"))
                    .ok()
                    .filter(|e| !e.is_empty())
            })
            .or(first.ok()),
    }
}

/// Whether the environment of `pid` has exactly the entry `needle`.
pub fn environ_has(pid: u32, needle: &[u8]) -> bool {
    environ(pid).is_some_and(|env| env.split(|&b| b == 0).any(|entry| entry == needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_file_is_read_to_its_end_whatever_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &big).unwrap();
        assert_eq!(read_kernel_path(&path).unwrap(), big);
        let stat = read_kernel_text("/proc/self/stat").unwrap();
        assert!(
            stat.starts_with(&format!("{} (", std::process::id())),
            "{stat}"
        );
        assert!(stat.ends_with('\n'), "{stat}");
    }
}
