//! Removal of roots: the most dangerous code in cleanroom. See `docs/removal.md`.
//!
//! Order of operations for one namespace entry:
//! 1. identity: the entry under its name must be the very directory the caller holds open (and
//!    holds the liveness lock on): same device and inode, checked with `fstatat(NOFOLLOW)`;
//! 2. quarantine: rename it to `.trash-run-<id>` in the same namespace without replacing anything,
//!    and check the identity again under the new name; if anything changed, stop and preserve;
//! 3. walk: remove the contents through directory descriptors (`openat`/`unlinkat`, `O_NOFOLLOW`),
//!    never following a symlink, never entering another mount (device or mount id differs: left in
//!    place and reported), making read-only directories writable as it goes, holding a bounded
//!    number of descriptors so trees deeper than PATH_MAX are fine;
//! 4. the marker goes last, so a partial removal still carries its proof of ownership and the next
//!    gc can finish it;
//! 5. bounded retries with time-based backoff; then give up visibly (the leftover path and why).

#[cfg(unix)]
#[path = "unix.rs"]
mod os;

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::namespace::{Namespace, PENDING_PREFIX, TRASH_PREFIX};

pub use os::remove_contents;

/// Retry schedule: the pause before each retry after a failed walk.
const BACKOFF: [Duration; 5] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(150),
    Duration::from_millis(400),
    Duration::from_millis(1000),
];

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

/// Removes the namespace entry `name`, which the caller holds open as `held` (and has locked).
pub fn remove_entry(ns: &Namespace, name: &str, held: &OwnedFd) -> Removal {
    let started = Instant::now();
    let mut removal = Removal {
        path: ns.path().join(name),
        status: RemovalStatus::Removed,
        attempts: 0,
        stats: WalkStats::default(),
        elapsed_ms: 0,
    };
    let trash = trash_name(name);
    if let Err(reason) = os::quarantine(ns, name, &trash, held) {
        removal.status = RemovalStatus::Refused(reason);
        removal.elapsed_ms = started.elapsed().as_millis() as u64;
        return removal;
    }
    removal.path = ns.path().join(&trash);
    let mut backoff = BACKOFF.iter();
    loop {
        removal.attempts += 1;
        let mut stats = os::remove_contents(held, &removal.path);
        if stats.errors.is_empty() && stats.mounts.is_empty() {
            match os::finish(ns, &trash, held) {
                Ok(()) => {
                    accumulate(&mut removal.stats, stats);
                    break;
                }
                Err(e) => stats.errors.push(e),
            }
        }
        let failed = stats.errors.clone();
        let mounts = stats.mounts.clone();
        accumulate(&mut removal.stats, stats);
        // A mount point will not go away by waiting: give up at once and say so.
        let pause = if mounts.is_empty() {
            backoff.next()
        } else {
            None
        };
        match pause {
            Some(pause) => std::thread::sleep(*pause),
            None => {
                let mut reasons: Vec<String> = mounts
                    .iter()
                    .map(|m| format!("{}: a mount point, left in place", m.display()))
                    .collect();
                reasons.extend(failed);
                removal.stats.errors = reasons.clone();
                let more = reasons.len().saturating_sub(3);
                let mut reason = reasons.into_iter().take(3).collect::<Vec<_>>().join("; ");
                if more > 0 {
                    reason.push_str(&format!(" (and {more} more)"));
                }
                removal.status = RemovalStatus::Leftover(reason);
                break;
            }
        }
    }
    removal.elapsed_ms = started.elapsed().as_millis() as u64;
    removal
}

fn accumulate(total: &mut WalkStats, walk: WalkStats) {
    total.files += walk.files;
    total.dirs += walk.dirs;
    total.mounts = walk.mounts;
    total.errors = walk.errors;
}
