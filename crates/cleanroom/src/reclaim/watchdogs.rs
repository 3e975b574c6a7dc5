//! Watchdogs their runner left behind. A run's watchdog (a fork of its runner titled
//! `cleanroom watchdog <run id>`, see [`crate::contain::Watchdog`]) kills the run when the
//! runner dies, then exits — unless it was stopped: the run's command, of the same uid, can
//! SIGSTOP it, and a stopped watchdog whose runner is gone stays forever, guarding nothing.
//! When gc reclaims a dead run (and kills what it left), it kills that run's watchdog too if it
//! is such a one, and only then.
//!
//! Invariant: a process is killed here only when all of this holds, read while a pidfd pins it
//! and confirmed by its start time afterwards (the signal goes through that pidfd): its real
//! uid is the namespace's; its command line is a watchdog's title with a well-formed run id;
//! it is stopped (`T` or `t`); and its runner is gone — while the runner lives the watchdog is
//! its child and holds a pidfd on it, so a process holding a pidfd on its own parent is a live
//! run's watchdog and is never touched (its runner notices it was stopped and ends it). A
//! running watchdog is doing its work (killing a dead runner's run, within its own bound) and
//! is left to finish it.

use std::os::fd::AsFd;

use crate::contain::{WATCHDOG_COMM, WATCHDOG_TITLE_PREFIX};
use crate::layout::is_valid_run_id;
use crate::process::{self, ProcessId, ProcessInfo};

/// The run id of `pid` when it is titled as a run's watchdog: for the pass over `/proc`, which
/// reads only the name (`/proc/<pid>/comm`) of processes that are not; [`kill_if_abandoned`]
/// checks the rest.
pub(super) fn titled_run_id(pid: u32) -> Option<String> {
    let comm = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
    if comm.strip_suffix(b"\n") != Some(WATCHDOG_COMM.to_bytes()) {
        return None;
    }
    run_id_of(pid)
}

/// Kills `pid` when it is a stopped watchdog of run `run_id` and of `uid` whose runner is gone
/// (see the module's invariant) and returns it; with `dry_run`, only returns it.
pub(super) fn kill_if_abandoned(
    pid: u32,
    run_id: &str,
    uid: u32,
    dry_run: bool,
) -> Option<ProcessInfo> {
    let id = ProcessId::of(pid)?;
    let pidfd = id.pidfd().ok()??;
    let abandoned = is_stopped(pid)
        && process::real_uid(pid) == Some(uid)
        && run_id_of(pid).as_deref() == Some(run_id)
        && !holds_pidfd_on_parent(pid)?;
    // The reads above were of the process the pidfd pins only if it still has its start time.
    if !abandoned || ProcessId::of(pid) != Some(id) {
        return None;
    }
    let info = ProcessInfo {
        id,
        command: process::command_line(pid),
    };
    if !dry_run {
        rustix::process::pidfd_send_signal(pidfd.as_fd(), rustix::process::Signal::KILL).ok()?;
    }
    Some(info)
}

/// Whether `pid` is stopped by a signal (`T`) or in a tracing stop (`t`).
fn is_stopped(pid: u32) -> bool {
    process::stat_fields(pid)
        .is_ok_and(|f| matches!(f.first().map(String::as_str), Some("T" | "t")))
}

/// The run id in `pid`'s watchdog title, when its command line is exactly one.
fn run_id_of(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let first = cmdline.split(|&b| b == 0).next()?;
    let run_id = std::str::from_utf8(first)
        .ok()?
        .strip_prefix(WATCHDOG_TITLE_PREFIX)?;
    is_valid_run_id(run_id).then(|| run_id.to_owned())
}

/// Whether `pid` holds a pidfd on its parent (a watchdog does on its runner, while the runner
/// lives and so is its parent); `None` when that cannot be read (nothing is then proven).
fn holds_pidfd_on_parent(pid: u32) -> Option<bool> {
    let parent = process::stat_fields(pid).ok()?.get(1)?.clone();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for fd in fds {
        let fd = fd.ok()?;
        let is_pidfd = std::fs::read_link(fd.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:[pidfd]");
        if !is_pidfd {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .ok()?;
        let names = info
            .lines()
            .filter_map(|line| line.strip_prefix("Pid:"))
            .any(|n| n.trim() == parent);
        if names {
            return Some(true);
        }
    }
    Some(false)
}
