//! Removal of roots: the most dangerous code in cleanroom. See `docs/removal.md`.
//!
//! Order of operations for one namespace entry (the steps are the private `os` child's:
//! `unix.rs` for Linux and macOS, `windows.rs`; the order, the retries and the result are
//! this module's, the same on every platform):
//! 1. identity: the entry under its name must be the very directory the caller holds open (and
//!    holds the liveness lock on). Unix: same device and inode, checked with `fstatat(NOFOLLOW)`;
//!    Windows: same volume and file index as the held handle;
//! 2. quarantine: Unix renames it to `.trash-run-<id>` in the same namespace without replacing
//!    anything, and checks the identity again under the new name; if anything changed, stop and
//!    preserve (when that name is taken by something else, the tree is removed under its own
//!    name). Windows keeps the name: the directory is held without `FILE_SHARE_DELETE` from the
//!    owner's start, so nobody can rename or replace it meanwhile;
//! 3. walk: Unix removes the contents through directory descriptors (`openat`/`unlinkat`,
//!    `O_NOFOLLOW`), never following a symlink, never entering another mount (device or mount id
//!    differs: left in place and reported), making read-only directories writable as it goes,
//!    holding a bounded number of descriptors so trees deeper than PATH_MAX are fine. Windows
//!    walks `\\?\` paths, never enters a reparse point (the link itself is removed) and clears
//!    read-only attributes;
//! 4. the marker goes last, so a partial removal still carries its proof of ownership and the next
//!    gc can finish it; a removal that gives up (or whose final `rmdir` fails) writes the marker
//!    it was given back if the run deleted or replaced it, so every leftover keeps its proof;
//! 5. bounded retries with time-based backoff (or none, and a deadline, for the bounded
//!    reclamation at the start of a run), for at least the platform's `os::RETRY_FOR`; then give
//!    up visibly (the leftover path and why).

mod backoff;
#[cfg(unix)]
#[path = "unix.rs"]
pub(crate) mod os;
#[cfg(windows)]
#[path = "windows.rs"]
pub(crate) mod os;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::marker::Marker;
use crate::namespace::{Namespace, PENDING_PREFIX, TRASH_PREFIX};
use backoff::BACKOFF;

#[cfg(unix)]
pub use os::remove_contents;
pub use os::Held;

/// Counts and problems of one walk.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WalkStats {
    /// Non-directories unlinked.
    pub files: u64,
    /// Directories removed.
    pub dirs: u64,
    /// Mount points found inside the tree and left alone.
    pub mounts: Vec<PathBuf>,
    /// Entries that could not be removed, with the reason.
    pub errors: Vec<String>,
    /// Whether the walk stopped at its deadline before it was done.
    pub interrupted: bool,
}

/// How hard one removal tries before it gives up.
#[derive(Clone, Copy, Debug)]
pub struct Persistence {
    /// Retry a failed walk after each pause of the backoff schedule (10 ms … 1 s).
    pub retries: bool,
    /// Stop at this instant, between two entries; the tree stays quarantined, marker and all.
    pub deadline: Option<Instant>,
}

impl Persistence {
    /// Every retry, no deadline: a run's own root, `cleanroom gc`.
    pub const FULL: Persistence = Persistence {
        retries: true,
        deadline: None,
    };
}

/// How a removal ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum RemovalStatus {
    /// Everything is gone.
    Removed,
    /// Something is left at `Removal::path`; the next gc retries it.
    Leftover(String),
    /// The entry was not touched because it could not be proven to be the one we own.
    Refused(String),
}

/// The result of removing one root.
#[derive(Clone, Debug, Serialize)]
pub struct Removal {
    /// Where the tree is now (its quarantine name, or the original name if it was refused).
    pub path: PathBuf,
    /// The outcome.
    #[serde(flatten)]
    pub status: RemovalStatus,
    /// How many walks were made.
    pub attempts: u32,
    /// What the walks removed and met.
    pub stats: WalkStats,
    /// Time spent.
    pub elapsed_ms: u64,
}

impl Removal {
    /// Whether everything is gone.
    pub fn is_removed(&self) -> bool {
        self.status == RemovalStatus::Removed
    }
}

/// The quarantine name of a namespace entry.
pub fn trash_name(name: &str) -> String {
    if name.starts_with(TRASH_PREFIX) {
        return name.to_string();
    }
    let base = name.strip_prefix(PENDING_PREFIX).unwrap_or(name);
    format!("{TRASH_PREFIX}{base}")
}

/// Removes the namespace entry `name`, which the caller holds open as `held` (and has locked),
/// and whose ownership `marker` proves (the caller wrote it, or read and validated it).
pub fn remove_entry(
    ns: &Namespace,
    name: &str,
    held: &Held,
    marker: &Marker,
    how: Persistence,
) -> Removal {
    let started = Instant::now();
    let mut removal = Removal {
        path: ns.path().join(name),
        status: RemovalStatus::Removed,
        attempts: 0,
        stats: WalkStats::default(),
        elapsed_ms: 0,
    };
    let trash = trash_name(name);
    let trash = match os::quarantine(ns, name, &trash, held) {
        Ok(now) => now,
        Err(reason) => {
            removal.status = RemovalStatus::Refused(reason);
            removal.elapsed_ms = started.elapsed().as_millis() as u64;
            return removal;
        }
    };
    removal.path = ns.path().join(trash);
    let mut backoff = BACKOFF.iter();
    loop {
        removal.attempts += 1;
        let mut stats = os::remove_owned_contents(held, &removal.path, how.deadline);
        if stats.errors.is_empty() && stats.mounts.is_empty() && !stats.interrupted {
            match os::finish(ns, trash, held, marker) {
                Ok(()) => {
                    accumulate(&mut removal.stats, stats);
                    break;
                }
                Err(e) => stats.errors.push(e),
            }
        }
        accumulate(&mut removal.stats, stats);
        match next_pause(&mut backoff, started, &removal.stats, how) {
            Some(pause) => std::thread::sleep(pause),
            None => {
                // Whatever the run did to its marker, the leftover keeps the proof.
                if let Err(e) = os::restore_marker(held, marker) {
                    removal.stats.errors.push(e);
                }
                removal.status = RemovalStatus::Leftover(give_up_reason(&mut removal.stats));
                break;
            }
        }
    }
    removal.elapsed_ms = started.elapsed().as_millis() as u64;
    removal
}

/// The pause before the next walk, or `None` to give up: a mount point will not go away by
/// waiting, an interrupted walk has no time left, and a pause must end before the deadline.
/// After the last pause of the schedule, its longest pause repeats until `os::RETRY_FOR` has
/// passed since `started`.
fn next_pause(
    backoff: &mut std::slice::Iter<'_, Duration>,
    started: Instant,
    stats: &WalkStats,
    how: Persistence,
) -> Option<Duration> {
    if !how.retries || stats.interrupted || !stats.mounts.is_empty() {
        return None;
    }
    let pause = match backoff.next() {
        Some(pause) => *pause,
        None if started.elapsed() < os::RETRY_FOR => BACKOFF[BACKOFF.len() - 1],
        None => return None,
    };
    match how.deadline {
        Some(deadline) if Instant::now() + pause >= deadline => None,
        _ => Some(pause),
    }
}

/// One line saying why a removal gave up (at most three reasons), with the full list kept in
/// `stats.errors`.
fn give_up_reason(stats: &mut WalkStats) -> String {
    let mut reasons: Vec<String> = stats
        .mounts
        .iter()
        .map(|m| format!("{}: a mount point, left in place", m.display()))
        .collect();
    reasons.append(&mut stats.errors);
    if stats.interrupted {
        reasons.push("stopped at the time budget".into());
    }
    stats.errors = reasons.clone();
    let more = reasons.len().saturating_sub(3);
    let mut reason = reasons.into_iter().take(3).collect::<Vec<_>>().join("; ");
    if more > 0 {
        reason.push_str(&format!(" (and {more} more)"));
    }
    reason
}

fn accumulate(total: &mut WalkStats, walk: WalkStats) {
    total.files += walk.files;
    total.dirs += walk.dirs;
    total.mounts = walk.mounts;
    total.errors = walk.errors;
    total.interrupted = walk.interrupted;
}
