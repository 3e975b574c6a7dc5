//! Stale recovery: `cleanroom gc`, `cleanroom list`, and the bounded reclamation at the start of
//! every run. See `docs/removal.md` for the order of checks.
//!
//! A namespace entry is removed only when ALL of these hold, checked in this order:
//! 1. its name is ours (`run-<id>`, `.pending-run-<id>`, `.trash-run-<id>`);
//! 2. it is a real directory (lstat, no symlink) owned by the effective uid, and the directory we
//!    open is that same inode;
//! 3. it has a valid marker (regular file, one link, our uid, known version, strict shape) naming
//!    the same run id as the entry's name;
//! 4. we can take its liveness lock exclusively (no owner holds its shared lock), and keep it
//!    through the removal so no concurrent gc works on it;
//! 5. the marker's owner is provably dead: another boot, or (same pid namespace and host) the pid
//!    is absent or has another start time. Anything uncertain counts as alive;
//! 6. it is not kept (`--keep-root`) unless kept roots were asked for.
//!
//! Then processes still carrying the run's `CLEANROOM_RUN_ID` (same uid) and its recorded cgroup
//! are killed, and the entry goes through the removal module. Everything else is reported and
//! left alone. The only exception to 3 is an *empty* pending or trash directory, which `rmdir`
//! (never recursive) may remove since there is nothing in it to lose.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use serde::Serialize;

use crate::contain;
use crate::marker::Marker;
use crate::namespace::{self, EntryKind, Namespace};
use crate::process::{self, Host, Liveness, ProcessInfo};
use crate::remove::{self, RemovalStatus};

/// The state of a namespace entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    /// Its owner is alive (or cannot be proven dead).
    Live,
    /// Its owner is dead: gc removes it.
    Stale,
    /// Its owner asked to keep it (`--keep-root`); removed only with `gc --kept`.
    Kept,
    /// A quarantined root whose removal did not finish: gc retries it.
    Leftover,
    /// The lock directory.
    Locks,
    /// Not ours: never touched.
    Foreign,
}

/// One namespace entry as `list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// The entry's name in the namespace.
    pub name: String,
    /// Its state.
    pub state: EntryState,
    /// Why it has that state.
    pub reason: String,
    /// The run id, when the marker is valid.
    pub run_id: Option<String>,
    /// The owner's pid, when the marker is valid.
    pub owner_pid: Option<i32>,
    /// The run's command, when the marker is valid.
    pub command: Vec<String>,
    /// Age in seconds (from the marker, else the directory's change time).
    pub age_secs: Option<u64>,
    /// Bytes used, when asked for.
    pub size_bytes: Option<u64>,
}

/// Bounds of one reclamation.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Stop starting removals after this long.
    pub max_time: Option<Duration>,
    /// Stop after this many removals.
    pub max_count: Option<usize>,
}

impl Budget {
    /// No bounds (`cleanroom gc`).
    pub const UNLIMITED: Budget = Budget {
        max_time: None,
        max_count: None,
    };
    /// The bound used at the start of every run.
    pub const AT_RUN_START: Budget = Budget {
        max_time: Some(Duration::from_millis(250)),
        max_count: Some(32),
    };
}

/// Options of a reclamation.
#[derive(Clone, Copy, Debug)]
pub struct GcOptions {
    /// Say what would be done; change nothing.
    pub dry_run: bool,
    /// Also reclaim kept roots whose owner is dead.
    pub include_kept: bool,
    /// Bounds.
    pub budget: Budget,
}

/// What a reclamation did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcSummary {
    /// Entries looked at.
    pub scanned: usize,
    /// Entries removed (or that would be, in a dry run).
    pub removed: usize,
    /// Entries left because their owner is alive or cannot be judged.
    pub skipped_live: usize,
    /// Kept roots left alone.
    pub kept: usize,
    /// Entries that are not ours.
    pub foreign: usize,
    /// Removals that failed, with the reason (retried by the next gc).
    pub errors: Vec<String>,
    /// Whether the budget ran out before every stale entry was handled.
    pub truncated: bool,
    /// Bytes freed, as seen by the filesystem's free space.
    pub bytes_freed: u64,
    /// Processes of dead runs that were killed.
    pub killed: Vec<ProcessInfo>,
    /// Names removed (or that would be).
    pub removed_names: Vec<String>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// An entry judged, with its directory still open (and exclusively locked when stale).
struct Judged {
    entry: Entry,
    kind: EntryKind,
    dir: Option<OwnedFd>,
    marker: Option<Marker>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Empty pending or trash directories younger than this are left to their creator.
const EMPTY_DIR_MIN_AGE: u64 = 60;

fn judge(ns: &Namespace, name: &OsStr, here: &Host, include_kept: bool) -> Judged {
    let (kind, id) = namespace::classify(name);
    let mut entry = Entry {
        name: name.to_string_lossy().into_owned(),
        state: EntryState::Foreign,
        reason: String::new(),
        run_id: None,
        owner_pid: None,
        command: Vec::new(),
        age_secs: None,
        size_bytes: None,
    };
    let done = |mut entry: Entry, state, reason: String| {
        entry.state = state;
        entry.reason = reason;
        Judged {
            entry,
            kind,
            dir: None,
            marker: None,
        }
    };
    match kind {
        EntryKind::Foreign => {
            return done(entry, EntryState::Foreign, "name is not cleanroom's".into())
        }
        EntryKind::Locks => return done(entry, EntryState::Locks, "exclusive-run locks".into()),
        _ => {}
    }
    let run_id = id.expect("our names carry a run id").to_string();
    let before = match rustix::fs::statat(ns.dir(), name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(e) => return done(entry, EntryState::Foreign, format!("cannot inspect: {e}")),
    };
    if FileType::from_raw_mode(before.st_mode) != FileType::Directory {
        return done(
            entry,
            EntryState::Foreign,
            "not a directory (symlinks are never followed)".into(),
        );
    }
    if before.st_uid != ns.euid() {
        return done(
            entry,
            EntryState::Foreign,
            format!("owned by uid {}", before.st_uid),
        );
    }
    entry.age_secs = Some(now_secs().saturating_sub(before.st_ctime as u64));
    let dir = match rustix::fs::openat(
        ns.dir(),
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return done(entry, EntryState::Foreign, format!("cannot open: {e}")),
    };
    match rustix::fs::fstat(&dir) {
        Ok(st) if (st.st_dev, st.st_ino) == (before.st_dev, before.st_ino) => {}
        _ => {
            return done(
                entry,
                EntryState::Live,
                "replaced while being inspected".into(),
            )
        }
    }
    let marker = match Marker::read(dir.as_fd(), ns.euid()) {
        Ok(m) => m,
        Err(problem) => {
            let empty = is_empty_dir(&dir);
            let old = entry.age_secs.unwrap_or(0) >= EMPTY_DIR_MIN_AGE;
            if kind == EntryKind::Root || !empty || !(old || kind == EntryKind::Trash) {
                return done(entry, EntryState::Foreign, problem.to_string());
            }
            // An owner that has just unlinked its marker is about to remove this directory and
            // still holds its lock: leave it to the owner.
            if rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive).is_err() {
                return done(entry, EntryState::Live, "being removed by its owner".into());
            }
            if !still_named(ns, name, &before) {
                return done(
                    entry,
                    EntryState::Live,
                    "removed or replaced while being inspected".into(),
                );
            }
            let mut judged = done(entry, EntryState::Leftover, format!("empty, {problem}"));
            judged.dir = Some(dir);
            return judged;
        }
    };
    if marker.run_id != run_id {
        return done(
            entry,
            EntryState::Foreign,
            format!("marker names another run ({})", marker.run_id),
        );
    }
    entry.run_id = Some(marker.run_id.clone());
    entry.owner_pid = Some(marker.owner.pid);
    entry.command = marker.command.clone();
    entry.age_secs = Some(now_secs().saturating_sub(marker.created_unix_ms / 1000));
    if rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive).is_err() {
        let reason = format!("in use by pid {}", marker.owner.pid);
        return Judged {
            entry: Entry {
                state: EntryState::Live,
                reason,
                ..entry
            },
            kind,
            dir: None,
            marker: Some(marker),
        };
    }
    // The owner may have removed the root and released its lock between our open and our lock
    // (a run that just finished): the lock is then on a deleted directory. Only an entry whose
    // name still denotes the directory we hold and lock is judged further.
    if !still_named(ns, name, &before) {
        return done(
            entry,
            EntryState::Live,
            "removed or replaced while being inspected".into(),
        );
    }
    let (state, reason) = match marker.owner.liveness(&marker.host, here) {
        Liveness::Alive => (
            EntryState::Live,
            format!("owner pid {} is alive", marker.owner.pid),
        ),
        Liveness::Unknown => (
            EntryState::Live,
            "owner ran in another pid namespace or host; cannot prove it is dead".to_string(),
        ),
        // A quarantined root is already half removed, kept or not: finish it.
        Liveness::Dead if kind == EntryKind::Trash => {
            (EntryState::Leftover, "removal did not finish".to_string())
        }
        Liveness::Dead if marker.keep && !include_kept => (
            EntryState::Kept,
            "kept with --keep-root (gc --kept reclaims it)".to_string(),
        ),
        Liveness::Dead => (
            EntryState::Stale,
            format!("owner pid {} is gone", marker.owner.pid),
        ),
    };
    let keep_dir = matches!(state, EntryState::Stale | EntryState::Leftover);
    Judged {
        entry: Entry {
            state,
            reason,
            ..entry
        },
        kind,
        dir: keep_dir.then_some(dir),
        marker: Some(marker),
    }
}

/// Whether `name` in the namespace still denotes the directory first seen as `before`.
fn still_named(ns: &Namespace, name: &OsStr, before: &rustix::fs::Stat) -> bool {
    rustix::fs::statat(ns.dir(), name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| (st.st_dev, st.st_ino) == (before.st_dev, before.st_ino))
}

fn is_empty_dir(dir: &OwnedFd) -> bool {
    let Ok(mut d) = rustix::fs::Dir::read_from(dir) else {
        return false;
    };
    while let Some(Ok(e)) = d.read() {
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            return false;
        }
    }
    true
}

fn entry_names(ns: &Namespace) -> Vec<std::ffi::OsString> {
    let Ok(mut dir) = rustix::fs::Dir::read_from(ns.dir()) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    while let Some(Ok(e)) = dir.read() {
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    names.sort();
    names
}

/// Every entry of the namespace with its state; `sizes` adds disk usage (slower).
pub fn list(ns: &Namespace, sizes: bool) -> Vec<Entry> {
    let here = Host::current().ok();
    entry_names(ns)
        .iter()
        .map(|name| {
            let mut judged = match &here {
                Some(h) => judge(ns, name, h, false),
                None => Judged {
                    entry: Entry {
                        name: name.to_string_lossy().into_owned(),
                        state: EntryState::Live,
                        reason: "cannot read boot id".into(),
                        run_id: None,
                        owner_pid: None,
                        command: Vec::new(),
                        age_secs: None,
                        size_bytes: None,
                    },
                    kind: EntryKind::Foreign,
                    dir: None,
                    marker: None,
                },
            };
            if sizes && judged.entry.state != EntryState::Foreign {
                judged.entry.size_bytes = Some(disk_usage(ns.path().join(name)));
            }
            judged.entry
        })
        .collect()
}

/// Bytes used by a tree, without following symlinks or crossing devices.
fn disk_usage(path: PathBuf) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(&path) else {
        return 0;
    };
    let mut total = 0;
    let mut stack = vec![path];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() && m.dev() == top.dev() {
                stack.push(e.path());
            }
        }
    }
    total
}

fn free_bytes(ns: &Namespace) -> u64 {
    rustix::fs::fstatvfs(ns.dir())
        .map(|s| s.f_bavail * s.f_frsize)
        .unwrap_or(0)
}

/// Reclaims stale roots and leftovers of `ns`. `progress(done, total)` is called before each
/// removal with the number of namespace entries looked at so far and in all.
pub fn gc(
    ns: &Namespace,
    options: &GcOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> GcSummary {
    let started = Instant::now();
    let mut summary = GcSummary {
        dry_run: options.dry_run,
        ..GcSummary::default()
    };
    let Ok(here) = Host::current() else {
        summary
            .errors
            .push("cannot read boot id; nothing can be proven stale".into());
        return summary;
    };
    let free_before = free_bytes(ns);
    let names = entry_names(ns);
    // Each entry is judged and, when stale, removed before the next is looked at, so only one
    // root is held open (and locked) at a time: holding every candidate at once ran out of
    // descriptors (EMFILE, soft limit often 1024) with thousands of stale roots, and the rest
    // were misreported as foreign and left.
    let total = names.len();
    // One pass over /proc finds every process still tagged with a run id of ours; it is made
    // when the first candidate is met.
    let mut tagged: Option<HashMap<String, Vec<i32>>> = None;
    for (done, name) in names.iter().enumerate() {
        let judged = judge(ns, name, &here, options.include_kept);
        summary.scanned += 1;
        match judged.entry.state {
            EntryState::Live => summary.skipped_live += 1,
            EntryState::Kept => summary.kept += 1,
            EntryState::Foreign => summary.foreign += 1,
            EntryState::Locks => {}
            EntryState::Stale | EntryState::Leftover => {}
        }
        if !matches!(judged.entry.state, EntryState::Stale | EntryState::Leftover) {
            continue;
        }
        let over_time = options
            .budget
            .max_time
            .is_some_and(|t| started.elapsed() >= t);
        let over_count = options
            .budget
            .max_count
            .is_some_and(|n| summary.removed >= n);
        if over_time || over_count {
            // Keep counting what is there; remove nothing more.
            summary.truncated = true;
            continue;
        }
        progress(done, total);
        if options.dry_run {
            summary.removed += 1;
            summary.removed_names.push(judged.entry.name);
            continue;
        }
        let Some(dir) = judged.dir else { continue };
        let name = judged.entry.name.clone();
        if let Some(marker) = &judged.marker {
            let tagged = tagged.get_or_insert_with(|| tagged_processes(ns.euid()));
            if tagged.contains_key(&marker.run_id) || marker.cgroup.is_some() {
                summary.killed.extend(contain::kill_orphans(
                    &marker.run_id,
                    ns.euid(),
                    marker.cgroup.as_deref(),
                ));
            }
        } else {
            // An empty pending or trash directory: rmdir only, never recursive.
            debug_assert!(judged.kind != EntryKind::Root);
            match rustix::fs::unlinkat(ns.dir(), name.as_str(), AtFlags::REMOVEDIR) {
                Ok(()) => {
                    summary.removed += 1;
                    summary.removed_names.push(name);
                }
                Err(e) => summary
                    .errors
                    .push(format!("{}: {e}", ns.path().join(&name).display())),
            }
            continue;
        }
        let removal = remove::remove_entry(ns, &name, &dir);
        match removal.status {
            RemovalStatus::Removed => {
                summary.removed += 1;
                summary.removed_names.push(name);
            }
            RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) => summary
                .errors
                .push(format!("{}: {reason}", removal.path.display())),
        }
    }
    progress(total, total);
    summary.bytes_freed = free_bytes(ns).saturating_sub(free_before);
    summary
}

/// Processes of `uid` carrying a `CLEANROOM_RUN_ID`, grouped by run id.
fn tagged_processes(uid: u32) -> HashMap<String, Vec<i32>> {
    let prefix = format!("{}=", crate::env::RUN_ID_VAR);
    let mut map: HashMap<String, Vec<i32>> = HashMap::new();
    let me = std::process::id() as i32;
    for pid in process::all_pids() {
        if pid == me || process::real_uid(pid) != Some(uid) {
            continue;
        }
        let Some(environ) = process::environ(pid) else {
            continue;
        };
        for var in environ.split(|&b| b == 0) {
            if let Some(value) = var.strip_prefix(prefix.as_bytes()) {
                map.entry(String::from_utf8_lossy(value).into_owned())
                    .or_default()
                    .push(pid);
            }
        }
    }
    map
}
