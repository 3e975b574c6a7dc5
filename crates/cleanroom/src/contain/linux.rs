//! Linux containment primitives: the child-subreaper flag, cgroup v2 leaves, and reaping.
//!
//! The cgroup2 mount is found in `/proc/self/mountinfo` and our own cgroup in `/proc/self/cgroup`
//! (never hard-coded: it is `/sys/fs/cgroup` on systemd hosts, `/sys/fs/cgroup/unified` here).
//! A run's leaf is `cleanroom-<run id>` beside... below our own cgroup; the child joins it in
//! `pre_exec` by writing "0" to an already-open `cgroup.procs`, a single async-signal-safe write.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use crate::error::IoContext;
use crate::process::{self, ProcessInfo};
use crate::{Error, Result};

/// Makes the calling process a child subreaper: orphaned descendants re-parent to it.
pub fn set_subreaper() -> Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| Error::sys("become a child subreaper", e))
}

/// Reaps exited children of this process that `keep` does not claim (for processes that share
/// their children with a runtime such as tokio, which must reap its own).
pub fn reap_orphans(keep: &dyn Fn(i32) -> bool) {
    let me = std::process::id() as i32;
    for child in process::children(me) {
        if keep(child) || !process::is_dead_or_zombie(child) {
            continue;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(child) {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
        }
    }
}

/// The cgroup v2 directory this process lives in, if cgroup2 is mounted.
pub fn cgroup_root() -> Result<PathBuf> {
    let unsupported = |reason: String| Error::Unsupported {
        what: "cgroup v2",
        reason,
    };
    let mountinfo =
        fs::read_to_string("/proc/self/mountinfo").at("read", "/proc/self/mountinfo")?;
    let mount = mountinfo
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            (fstype == "cgroup2").then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .ok_or_else(|| unsupported("no cgroup2 filesystem is mounted".into()))?;
    let own = fs::read_to_string("/proc/self/cgroup").at("read", "/proc/self/cgroup")?;
    let relative = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| unsupported("this process has no cgroup v2 membership".into()))?;
    Ok(mount.join(relative.trim_start_matches('/')))
}

/// A run's cgroup leaf.
#[derive(Debug)]
pub(super) struct Cgroup {
    path: PathBuf,
    /// `cgroup.procs`, open for writing, for the child to join in pre_exec.
    procs: OwnedFd,
}

impl Cgroup {
    pub(super) fn create(run_id: &str) -> Result<Cgroup> {
        let parent = cgroup_root()?;
        let controllers =
            fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        if !controllers.trim().is_empty()
            && parent.join("cgroup.procs").exists()
            && !is_root_cgroup(&parent)
        {
            return Err(Error::Unsupported {
                what: "a cgroup leaf",
                reason: format!(
                    "{} has controllers enabled ({}), so the runner cannot stay in it while its children move below it",
                    parent.display(),
                    controllers.trim()
                ),
            });
        }
        let path = parent.join(format!("cleanroom-{run_id}"));
        fs::create_dir(&path).at("create cgroup", &path)?;
        let procs_path = path.join("cgroup.procs");
        let procs =
            match rustix::fs::open(&procs_path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) => {
                    let _ = fs::remove_dir(&path);
                    return Err(Error::io("open", &procs_path, e));
                }
            };
        Ok(Cgroup { path, procs })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn configure(&self, command: &mut Command) {
        let fd = self.procs.as_raw_fd();
        // SAFETY: the closure runs between fork and exec and makes a single write(2) on a
        // descriptor that stays open in the parent for the Command's lifetime; no allocation.
        unsafe {
            command.pre_exec(move || {
                let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
                if rc == 1 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }

    pub(super) fn members(&self) -> Vec<ProcessInfo> {
        cgroup_members(&self.path)
    }

    pub(super) fn kill(&self) -> std::io::Result<()> {
        fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.kill"))?
            .write_all(b"1")
    }

    /// Removes the (empty) leaf, retrying briefly while the kernel finishes tearing tasks down.
    pub(super) fn remove(self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) if Instant::now() >= deadline => {
                    tracing::warn!("cannot remove cgroup {}: {e}", self.path.display());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

fn is_root_cgroup(path: &Path) -> bool {
    !path.join("cgroup.type").exists()
}

/// Living processes of the cgroup at `path` and of every cgroup below it.
fn cgroup_members(path: &Path) -> Vec<ProcessInfo> {
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter_map(process::info),
            );
        }
        if let Ok(entries) = fs::read_dir(&dir) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out
}

/// Kills everything in a dead run's cgroup and removes it. Only a directory named after the run,
/// directly below a cgroup2 mount path we can see, is touched.
pub fn kill_cgroup_path(path: &Path, run_id: &str) -> Vec<ProcessInfo> {
    let expected = format!("cleanroom-{run_id}");
    if path.file_name().and_then(|n| n.to_str()) != Some(expected.as_str())
        || !path.join("cgroup.kill").exists()
    {
        return Vec::new();
    }
    let members = cgroup_members(path);
    if let Ok(mut f) = fs::OpenOptions::new()
        .write(true)
        .open(path.join("cgroup.kill"))
    {
        let _ = f.write_all(b"1");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while !cgroup_members(path).is_empty() && Instant::now() < deadline {
        reap_orphans(&|_| false);
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = fs::remove_dir(path);
    members
}
