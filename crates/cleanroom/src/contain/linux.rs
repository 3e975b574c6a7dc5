//! Containment on Linux (the `os` module of `contain`): the child-subreaper flag, cgroup v2
//! leaves, reaping, and gc's kill of what a dead runner left. Its children: `container.rs` (one
//! run's [`Container`], which ends the run) and `watchdog.rs` (the process that kills the run if
//! the runner dies).
//!
//! The cgroup2 mount is found in `/proc/self/mountinfo` and our own cgroup in `/proc/self/cgroup`
//! (never hard-coded: it is `/sys/fs/cgroup` on systemd hosts, `/sys/fs/cgroup/unified` here).
//! A run's leaf is `cleanroom-<run id>` beside... below our own cgroup. A single-threaded runner
//! starts its child inside the leaf (`clone3` with `CLONE_INTO_CGROUP`): migrating a task through
//! `cgroup.procs` takes the global threadgroup rwsem for writing, which waits for an RCU grace
//! period (≈8 ms here when runs are spaced out). Otherwise the child joins in `pre_exec` by
//! writing "0" to an already-open `cgroup.procs`, a single async-signal-safe write. Either way
//! the child is a member before it executes anything of the command.

mod container;
mod watchdog;

pub use crate::sys::linux::fork::{CloneArgs, CLONE_INTO_CGROUP};
pub use container::{Contained, Container, Leftovers, SubCgroup};
pub use watchdog::Watchdog;
pub(crate) use watchdog::{COMM as WATCHDOG_COMM, TITLE_PREFIX as WATCHDOG_TITLE_PREFIX};

use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

use super::{kill_until_empty, Listed};
use crate::error::IoContext;
use crate::error::{Error, Result};
use crate::process::{self, ProcessInfo};
use crate::sys::linux as sys;

/// Makes the calling process a child subreaper: orphaned descendants re-parent to it.
pub fn set_subreaper() -> Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| Error::sys("become a child subreaper", e))
}

/// Makes `command` start with default signal dispositions and no blocked signal, whatever the
/// spawner inherited: a runner blocks the signals it reads through a signalfd, and a shell
/// starts background jobs with INT and QUIT ignored; a command started like that could never be
/// asked to stop. Register it before any other `pre_exec` hook that saves and restores the mask.
pub fn reset_signals_on_exec(command: &mut Command) {
    sys::exec::reset_signals_on_exec(command);
}

/// `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9): signal the process group of a pidfd's process.
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 4;

/// SIGKILL to the process group whose leader `leader` (a pidfd) is or was, and never to a group
/// that merely reuses its number.
///
/// With `PIDFD_SIGNAL_PROCESS_GROUP` the kernel resolves the group from the pidfd's own
/// `struct pid`, which the group's members keep pointing to after the leader is reaped: the
/// signal reaches exactly the original group, or nothing (`ESRCH`) once it is empty. On older
/// kernels the group is signalled by number only while the pidfd's process is not yet reaped
/// (its zombie holds the number, so no other group can have it); the gap between that check and
/// the kill is the only window, and it needs the pid space to wrap within it.
pub fn kill_group_of(leader: &OwnedFd, group: i32) {
    signal_group_of(leader, group, libc::SIGKILL);
}

/// `signal` to the process group of `leader`, as [`kill_group_of`] sends SIGKILL.
pub fn signal_group_of(leader: &OwnedFd, group: i32, signal: libc::c_int) {
    signal_group(leader.as_fd(), group, signal);
}

/// Whether the process group of `leader` may still have members, so that signalling it through
/// the pidfd can still reach someone: false once the group is provably empty (an empty group
/// never gains a member again: `setpgid` joins only a group that has one), and false on a kernel
/// without `PIDFD_SIGNAL_PROCESS_GROUP` once the leader is reaped (the group is then out of
/// [`kill_group_of`]'s reach anyway).
pub fn group_may_have_members(leader: &OwnedFd) -> bool {
    // Signal 0: a check, nothing is sent.
    match sys::process::pidfd_send_signal(leader.as_fd(), 0, PIDFD_SIGNAL_PROCESS_GROUP) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // As above, to the pidfd's own process.
            sys::process::pidfd_send_signal(leader.as_fd(), 0, 0).is_ok()
        }
        Err(_) => false,
    }
}

/// [`signal_group_of`] on a borrowed pidfd, in raw system calls only (the watchdog calls it
/// after a fork). The signal goes wherever `leader` points, and, on an old kernel, to the number
/// `group` while the leader is not reaped.
pub(super) fn signal_group(leader: BorrowedFd<'_>, group: i32, signal: libc::c_int) {
    match sys::process::pidfd_send_signal(leader, signal, PIDFD_SIGNAL_PROCESS_GROUP) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        _ => return,
    }
    // Signal 0 only checks that the leader is not reaped yet: its zombie still holds the number
    // `group`, so no other group can have it (the window is in the doc of `kill_group_of`).
    if sys::process::pidfd_send_signal(leader, 0, 0).is_ok() {
        let _ = sys::process::kill_process_group(group, signal);
    }
}

/// Reaps exited children of this process that `keep` does not claim (for processes that share
/// their children with a runtime such as tokio, which must reap its own). Returns how many it
/// reaped.
pub fn reap_orphans(keep: &dyn Fn(i32) -> bool) -> usize {
    reap_exited(&exited_children(), keep)
}

/// This process's children that have exited and wait to be reaped, listed without reaping
/// (procfs reads only: a caller that guards its reaps with a lock lists before taking it).
pub fn exited_children() -> Vec<i32> {
    process::children(std::process::id())
        .into_iter()
        .filter(|&child| !process::is_alive(child))
        .filter_map(|child| libc::pid_t::try_from(child).ok())
        .collect()
}

/// Reaps those of `exited` (from [`exited_children`]) that `keep` does not claim now; returns
/// how many. A pid reaped meanwhile by someone else and reused by a new child is either claimed
/// by `keep` (a child its owner registered) or an orphan that is ours to reap: `waitpid` only
/// takes it once it has exited.
pub fn reap_exited(exited: &[i32], keep: &dyn Fn(i32) -> bool) -> usize {
    let mut reaped = 0;
    for &child in exited {
        if keep(child) {
            continue;
        }
        let Some(pid) = rustix::process::Pid::from_raw(child) else {
            continue;
        };
        if let Ok(Some(_)) =
            rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG)
        {
            reaped += 1;
        }
    }
    reaped
}

/// Kills what a dead runner left behind: processes of `uid` carrying `CLEANROOM_RUN_ID=run_id`,
/// and the run's cgroup if one was recorded. Returns the processes found.
pub fn kill_orphans(run_id: &str, uid: u32, cgroup: Option<&str>) -> Vec<ProcessInfo> {
    let mut found = Vec::new();
    if let Some(path) = cgroup {
        found.extend(kill_cgroup_path(Path::new(path), run_id));
    }
    let mut members = || process::with_env_entry(crate::env::RUN_ID_VAR, run_id, uid);
    let mut reap = || {
        reap_orphans(&|_| false);
    };
    let ended = kill_until_empty(
        &mut Listed {
            members: &mut members,
            reap: &mut reap,
        },
        &[],
    );
    found.extend(ended.killed);
    found.extend(ended.survivors);
    found
}

/// The usual cgroup2 mount points (the unified layout's, then the hybrid one's), tried before
/// `/proc/self/mountinfo`, whose generation by the kernel costs a tenth of a millisecond.
const USUAL_MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Where the cgroup2 filesystem is mounted: the first of [`USUAL_MOUNTS`] that is the root of a
/// cgroup2 mount, else the first cgroup2 mount of `/proc/self/mountinfo` (a place is never taken
/// for granted, only proven).
pub fn cgroup2_mount() -> Result<PathBuf> {
    if let Some(usual) = USUAL_MOUNTS.into_iter().find(|p| is_cgroup2_mount_root(p)) {
        return Ok(PathBuf::from(usual));
    }
    cgroup2_mount_from_mountinfo()
}

/// Whether `path` itself (no symlink followed) is the root of a mount (statx's mount-root
/// attribute) of a cgroup2 filesystem (statfs magic): what a cgroup2 line of mountinfo says.
fn is_cgroup2_mount_root(path: &str) -> bool {
    use rustix::fs::{StatxAttributes, StatxFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(path, flags, Mode::empty()) else {
        return false;
    };
    let root =
        rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::empty()).is_ok_and(|st| {
            st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT)
                && st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)
        });
    root && rustix::fs::fstatfs(&fd).is_ok_and(|st| st.f_type as u64 == CGROUP2_SUPER_MAGIC)
}

/// The first cgroup2 mount of `/proc/self/mountinfo` that is still a cgroup2 mount root where it
/// is listed (one hidden by a later mount on top is passed over), else the first listed (a
/// kernel without statx's mount-root attribute proves none).
fn cgroup2_mount_from_mountinfo() -> Result<PathBuf> {
    let mountinfo =
        process::read_kernel_text("/proc/self/mountinfo").at("read", "/proc/self/mountinfo")?;
    let listed = cgroup2_mounts_in(&mountinfo);
    let proven = listed
        .iter()
        .find(|p| p.to_str().is_some_and(is_cgroup2_mount_root));
    proven
        .or(listed.first())
        .cloned()
        .ok_or_else(|| Error::Unsupported {
            what: "cgroup v2",
            reason: "no cgroup2 filesystem is mounted".into(),
        })
}

/// The mount points of the cgroup2 filesystems in a mountinfo text, in its order.
fn cgroup2_mounts_in(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            if after.split(' ').next()? != "cgroup2" {
                return None;
            }
            before
                .split(' ')
                .nth(4)
                .map(|p| unescape_mountinfo(p.as_bytes()))
        })
        .collect()
}

/// Decodes the octal escapes (`\040` for a space, ...) of a mountinfo path field, byte for byte
/// (a path that is not UTF-8 stays the path it is).
pub(crate) fn unescape_mountinfo(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && i + 3 < field.len()
            && field[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (field[i + 1] - b'0') * 64 + (field[i + 2] - b'0') * 8 + (field[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The cgroup v2 directory this process lives in, if cgroup2 is mounted.
pub fn cgroup_root() -> Result<PathBuf> {
    let mount = cgroup2_mount()?;
    let own = process::read_kernel_text("/proc/self/cgroup").at("read", "/proc/self/cgroup")?;
    let relative = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| Error::Unsupported {
            what: "cgroup v2",
            reason: "this process has no cgroup v2 membership".into(),
        })?;
    Ok(mount.join(relative.trim_start_matches('/')))
}

/// A run's cgroup leaf.
#[derive(Debug)]
pub(super) struct Cgroup {
    path: PathBuf,
    /// The leaf itself, for its control files and `clone3(CLONE_INTO_CGROUP)`.
    dir: OwnedFd,
    /// `cgroup.procs`, open for writing, for the child to join in pre_exec (shared with the
    /// hooks of the commands that join it).
    procs: Arc<OwnedFd>,
}

impl Cgroup {
    pub(super) fn create(run_id: &str) -> Result<Cgroup> {
        let parent = cgroup_root()?;
        let controllers =
            process::read_kernel_text(parent.join("cgroup.subtree_control")).unwrap_or_default();
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
        Cgroup::open_created(path)
    }

    /// A new leaf `name` below this one (the exec-server gives each client session one). Its
    /// processes are members of this leaf too: listing, `cgroup.kill` and `populated` cover the
    /// whole subtree, and [`Cgroup::remove`] removes the leaves below first.
    pub(super) fn create_below(&self, name: &str) -> Result<Cgroup> {
        let path = self.path.join(name);
        rustix::fs::mkdirat(&self.dir, name, Mode::from_raw_mode(0o755))
            .map_err(|e| Error::io("create cgroup", &path, e))?;
        Cgroup::open_created(path)
    }

    /// Opens the leaf just created at `path` (removed again if that fails).
    fn open_created(path: PathBuf) -> Result<Cgroup> {
        let open = |path: &Path, flags: OFlags| {
            rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| Error::io("open", path, e))
        };
        let procs_path = path.join("cgroup.procs");
        let fds = open(&procs_path, OFlags::WRONLY)
            .and_then(|procs| Ok((procs, open(&path, OFlags::RDONLY | OFlags::DIRECTORY)?)));
        match fds {
            Ok((procs, dir)) => Ok(Cgroup {
                path,
                procs: Arc::new(procs),
                dir,
            }),
            Err(e) => {
                let _ = fs::remove_dir(&path);
                Err(e)
            }
        }
    }

    /// The leaf's directory.
    pub(super) fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// Starts `command` as a member of the leaf; returns its pid. Born inside when the runner
    /// is single-threaded and the kernel has `CLONE_INTO_CGROUP`, else joined in `pre_exec` (the
    /// hook then runs after the other hooks, which is as good: `cgroup.procs` is already open,
    /// and nothing of the command runs before exec).
    pub(super) fn spawn(&self, command: &mut Command) -> std::io::Result<i32> {
        match sys::fork::spawn_into_cgroup(self.dir.as_fd(), command) {
            Ok(None) => {}
            Err(e) if clone3_unsupported(&e) => {}
            Ok(Some(pid)) => return Ok(pid),
            Err(e) => return Err(e),
        }
        self.configure(command);
        command.spawn().map(|child| child.id() as i32)
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn procs(&self) -> std::os::fd::BorrowedFd<'_> {
        self.procs.as_fd()
    }

    pub(super) fn configure(&self, command: &mut Command) {
        sys::exec::join_cgroup_on_exec(command, Arc::clone(&self.procs));
    }

    /// Removes the leaf if nothing is in it any more (once, no waiting); a leaf still populated
    /// is left to the removal of the leaf above it.
    pub(super) fn remove_if_empty(&self) {
        if !self.populated() {
            remove_below(&self.dir);
            let _ = fs::remove_dir(&self.path);
        }
    }

    pub(super) fn members(&self) -> Vec<ProcessInfo> {
        cgroup_members(&self.path)
    }

    /// One kill of the whole leaf (see [`kill_round`]), then up to a few milliseconds for
    /// `populated 0`.
    pub(super) fn kill(&self) {
        kill_round(&self.dir, &self.path);
        wait_unpopulated(&self.dir, Duration::from_millis(20));
    }

    /// Whether `cgroup.events` says a process is still in the leaf (or below it).
    pub(super) fn populated(&self) -> bool {
        is_populated(&self.dir)
    }

    /// Removes the (empty) leaf and the leaves below it, retrying briefly while the kernel
    /// finishes tearing tasks down.
    /// A leaf whose processes survived the KILL loop is left in place for gc (the root's marker
    /// records it).
    pub(super) fn remove(self, survivors: bool) {
        if survivors {
            tracing::warn!(
                "cgroup {} left for gc: processes survived",
                self.path.display()
            );
            return;
        }
        remove_below(&self.dir);
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

/// Whether clone3 failed because this kernel lacks it or `CLONE_INTO_CGROUP` (then the
/// `cgroup.procs` join is used), rather than because the spawn itself failed.
fn clone3_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL)
    )
}

fn is_root_cgroup(path: &Path) -> bool {
    !path.join("cgroup.type").exists()
}

/// Living processes of the cgroup at `path` and of every cgroup below it.
///
/// A listed pid is named by its start time and kept only if, read after that, its own
/// `/proc/<pid>/cgroup` still places it in this cgroup (and the start time is unchanged): a pid
/// that exited and was reused between the listing and the read is not adopted.
fn cgroup_members(path: &Path) -> Vec<ProcessInfo> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let needle = format!("/{name}");
    let inside = |id: &process::ProcessId| {
        process::read_kernel_text(format!("/proc/{}/cgroup", id.pid)).is_ok_and(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("0::"))
                .any(|p| p.ends_with(&needle) || p.contains(&format!("{needle}/")))
        })
    };
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Ok(text) = process::read_kernel_text(dir.join("cgroup.procs")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter_map(process::ProcessId::of)
                    .filter(|id| inside(id) && process::still_alive(*id))
                    .map(process::describe),
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

/// `statfs` magic of the cgroup v2 filesystem.
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// Opens the cgroup a dead run's marker recorded, and its parent — but only a cgroup v2
/// directory named `cleanroom-<run id>` below the cgroup2 mount, reached from the mount without
/// `..`, symlinks or magic links. The marker lives inside the run's own root, so the run could
/// have rewritten it: the path is a claim to verify, never a place to go.
fn open_recorded_cgroup(path: &Path, run_id: &str) -> Option<(OwnedFd, OwnedFd)> {
    // Read once per process (gc visits many roots): a stale value can only make the opens below
    // fail, and what they open must still be cgroup2 directories of the expected name.
    static MOUNT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let mount = MOUNT.get_or_init(|| cgroup2_mount().ok()).as_ref()?;
    let relative = path.strip_prefix(mount).ok()?;
    let plain = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    let expected = format!("cleanroom-{run_id}");
    if !plain || relative.file_name()? != expected.as_str() {
        return None;
    }
    let mount_fd = rustix::fs::open(
        mount,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat2(&mount_fd, relative, flags, Mode::empty(), resolve).ok()?;
    let parent = match relative.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => rustix::fs::openat2(&mount_fd, p, flags, Mode::empty(), resolve).ok()?,
        None => rustix::fs::openat(&mount_fd, c".", flags, Mode::empty()).ok()?,
    };
    let is_cgroup2 = |fd: &OwnedFd| {
        rustix::fs::fstatfs(fd).is_ok_and(|st| st.f_type as u64 == CGROUP2_SUPER_MAGIC)
    };
    (is_cgroup2(&dir) && is_cgroup2(&parent)).then_some((parent, dir))
}

/// Reads a small control file of an open cgroup directory (never following a symlink).
fn read_control(dir: &OwnedFd, name: &str) -> Option<String> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    String::from_utf8(process::read_kernel_file(fs::File::from(fd)).ok()?).ok()
}

/// The processes in a dead run's recorded cgroup, without touching it (`gc --dry-run`); see
/// [`open_recorded_cgroup`] for what is accepted.
pub fn recorded_cgroup_members(path: &Path, run_id: &str) -> Vec<ProcessInfo> {
    let Some((_, dir)) = open_recorded_cgroup(path, run_id) else {
        return Vec::new();
    };
    read_control(&dir, "cgroup.procs")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter_map(process::info)
        .collect()
}

/// Kills everything in a dead run's recorded cgroup and removes it; see
/// [`open_recorded_cgroup`] for what is accepted. Returns the processes that were in it.
pub fn kill_cgroup_path(path: &Path, run_id: &str) -> Vec<ProcessInfo> {
    let Some((parent, dir)) = open_recorded_cgroup(path, run_id) else {
        return Vec::new();
    };
    let name = path.file_name().expect("checked in open_recorded_cgroup");
    // A leaf the run's watchdog emptied (the usual case) has nothing to list or kill. A process
    // joining it after this read can only come from outside the run; rmdir then refuses, as it
    // would after a kill loop.
    if !is_populated(&dir) {
        remove_below(&dir);
        let _ = rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR);
        return Vec::new();
    }
    let mut members: Vec<ProcessInfo> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for member in kill_round(&dir, path) {
            if !members.iter().any(|m| m.id == member.id) {
                members.push(member);
            }
        }
        reap_orphans(&|_| false);
        if wait_unpopulated(&dir, Duration::from_millis(20)) {
            break;
        }
        if Instant::now() >= deadline {
            tracing::error!(
                "{} is still populated after 5 s of SIGKILL: left in place",
                path.display()
            );
            return members;
        }
    }
    remove_below(&dir);
    let _ = rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR);
    members
}

/// Removes every (empty) cgroup below the open cgroup `dir`, deepest first, without following
/// anything: a leaf cannot be removed while cgroups are below it (the exec-server's session
/// leaves, or ones a root process made). What cannot be removed (still populated) stays, and
/// then so does `dir`.
fn remove_below(dir: &OwnedFd) {
    // Every cgroup below, as a path relative to `dir`, parents before their children.
    let mut found: Vec<String> = Vec::new();
    let mut next = 0;
    let mut listing = subdirectories(dir, ".");
    loop {
        found.extend(listing);
        let Some(relative) = found.get(next) else {
            break;
        };
        next += 1;
        listing = subdirectories(dir, relative)
            .into_iter()
            .map(|name| format!("{relative}/{name}"))
            .collect();
    }
    for relative in found.iter().rev() {
        let _ = rustix::fs::unlinkat(dir, relative.as_str(), AtFlags::REMOVEDIR);
    }
}

/// The names of the directories in `relative` beneath the open cgroup `dir` (no link followed).
fn subdirectories(dir: &OwnedFd, relative: &str) -> Vec<String> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let Ok(fd) = rustix::fs::openat2(dir, relative, flags, Mode::empty(), resolve) else {
        return Vec::new();
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type() == rustix::fs::FileType::Directory)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
        .filter(|name| name != "." && name != "..")
        .collect()
}

/// One kill of a cgroup: its members listed, `cgroup.kill`, unconditionally (an empty listing
/// proves nothing while a fork-and-exit chain runs), then SIGKILL to each member's thread group. `cgroup.kill`
/// signals each leader's own task only, and a leader that called `pthread_exit` does not act
/// on that while its other threads run; a signal to the tgid reaches them. Returns the members.
fn kill_round(dir: &OwnedFd, path: &Path) -> Vec<ProcessInfo> {
    // Listed first, so that what is killed can be named.
    let members = cgroup_members(path);
    if let Ok(fd) = rustix::fs::openat(
        dir,
        "cgroup.kill",
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::io::write(&fd, b"1");
    }
    for member in &members {
        let _ = member.id.signal(rustix::process::Signal::KILL);
    }
    members
}

/// Whether `cgroup.events` of the open cgroup `dir` says `populated 1` (a cgroup whose events
/// cannot be read is taken as populated: nothing is proven empty by an error).
fn is_populated(dir: &OwnedFd) -> bool {
    read_control(dir, "cgroup.events").is_none_or(|e| !e.lines().any(|l| l == "populated 0"))
}

/// Waits up to `limit` for `populated 0`, woken by the kernel's notification on
/// `cgroup.events` (POLLPRI) rather than by polling in a loop; returns whether it came.
fn wait_unpopulated(dir: &OwnedFd, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let Ok(events) = rustix::fs::openat(
        dir,
        "cgroup.events",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    loop {
        let mut buf = [0u8; 256];
        let n = rustix::io::pread(&events, &mut buf, 0).unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        if n > 0 && text.lines().any(|l| l == "populated 0") {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds = [rustix::event::PollFd::new(
            &events,
            rustix::event::PollFlags::PRI,
        )];
        let timeout = rustix::event::Timespec::try_from(left).ok();
        let _ = rustix::event::poll(&mut fds, timeout.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usual_cgroup2_mount_is_the_one_mountinfo_lists() {
        let Some(usual) = USUAL_MOUNTS.into_iter().find(|p| is_cgroup2_mount_root(p)) else {
            return;
        };
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let listed = mountinfo.lines().any(|line| {
            line.split_once(" - ").is_some_and(|(before, after)| {
                after.starts_with("cgroup2 ") && before.split(' ').nth(4) == Some(usual)
            })
        });
        assert!(listed, "{usual} is no cgroup2 mount point of mountinfo");
        assert_eq!(cgroup2_mount().unwrap(), Path::new(usual));
        assert!(!is_cgroup2_mount_root("/sys"), "sysfs is no cgroup2 mount");
        // A cgroup below the mount is cgroup2 but no mount root.
        let below = std::fs::read_dir(usual)
            .unwrap()
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_dir()));
        if let Some(below) = below {
            let below = below.path();
            assert!(!is_cgroup2_mount_root(below.to_str().unwrap()), "{below:?}");
        }
    }

    #[test]
    fn cgroup2_mounts_are_found_in_mountinfo_in_order_and_unescaped() {
        let text = "25 1 0:22 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    30 25 0:27 / /sys/fs/cgroup/my\\040unified rw,nosuid - cgroup2 cgroup2 rw\n\
                    31 25 0:27 / /tmp/again rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mounts_in(text),
            [
                PathBuf::from("/sys/fs/cgroup/my unified"),
                PathBuf::from("/tmp/again")
            ]
        );
        assert!(cgroup2_mounts_in("25 1 0:22 / /x rw - ext4 /dev/vda rw\n").is_empty());
    }
}
