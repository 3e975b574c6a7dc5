//! `gc` and `list` on Windows: stale roots reclaimed only on proof of death.
//!
//! Order of checks for an entry `run-<id>` (or `.pending-run-<id>`):
//! 1. its name parses; anything else is foreign and left alone;
//! 2. its marker is valid, names this entry's run id and the namespace's user SID; otherwise
//!    the root is unproven and left alone (a pending entry without a marker is removed once it
//!    is older than [`PENDING_AGE`]: its creator failed or died before writing it);
//! 3. the liveness lock: if the owner holds it, alive. Otherwise it is now held by us
//!    (exclusively) until the entry is judged and removed, so no owner can come back;
//! 4. the recorded owner must be provably dead (other boot, pid gone, pid reused, exited);
//! 5. kept roots only with `--kept`.
//!
//! No orphan processes are hunted: a run's Job Object dies with its runner (KILL_ON_JOB_CLOSE).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::marker::{Marker, MarkerFile};
use crate::namespace::os::open_dir;
use crate::namespace::{classify, run_id_unix_secs, EntryKind, Namespace};
use crate::process::{Host, Liveness};
use crate::remove::{self, Held, Persistence, RemovalStatus};

/// A pending entry younger than this belongs to a creation in progress.
pub const PENDING_AGE: Duration = Duration::from_secs(60);

/// What gc is asked to do.
#[derive(Clone, Debug, Default)]
pub struct GcOptions {
    /// Only say what would be reclaimed.
    pub dry_run: bool,
    /// Also reclaim roots kept with `--keep-root`.
    pub kept: bool,
    /// Stop judging entries after this long (the start of a run is bounded).
    pub budget: Option<Duration>,
}

/// What gc did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcSummary {
    /// Entries looked at.
    pub scanned: usize,
    /// Entries reclaimed (or that would be, with `--dry-run`).
    pub removed: Vec<PathBuf>,
    /// Entries left alone, with why.
    pub skipped: Vec<(PathBuf, String)>,
    /// Reclaims that failed.
    pub errors: Vec<String>,
    /// Whether the budget ran out before every entry was judged.
    pub truncated: bool,
}

/// The state of one namespace entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum State {
    /// Its owner holds the lock or may still be running.
    Live,
    /// Its owner is provably dead: gc reclaims it.
    Stale(String),
    /// Kept with `--keep-root`, owner gone.
    Kept,
    /// No proof of ownership: left alone.
    Unproven(String),
    /// Not ours.
    Foreign,
}

/// One entry of the namespace.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// Its path.
    pub path: PathBuf,
    /// What it is.
    pub state: State,
    /// The command it ran, when the marker says.
    pub command: Vec<String>,
}

/// Every entry of the namespace with its state.
pub fn list(ns: &Namespace) -> std::io::Result<Vec<Entry>> {
    let here = Host::current()?;
    let mut entries = Vec::new();
    for path in names(ns)? {
        let (state, marker) = judge(ns, &path, &here);
        entries.push(Entry {
            path,
            state,
            command: marker.map(|m| m.marker.command).unwrap_or_default(),
        });
    }
    Ok(entries)
}

/// Reclaims the stale entries of the namespace.
pub fn gc(ns: &Namespace, options: &GcOptions) -> GcSummary {
    let mut summary = GcSummary::default();
    let (here, paths) = match (Host::current(), names(ns)) {
        (Ok(here), Ok(paths)) => (here, paths),
        (Err(e), _) | (_, Err(e)) => {
            summary
                .errors
                .push(format!("cannot scan {}: {e}", ns.path().display()));
            return summary;
        }
    };
    let deadline = options.budget.map(|b| Instant::now() + b);
    for path in paths {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            summary.truncated = true;
            break;
        }
        summary.scanned += 1;
        let (state, marker) = judge(ns, &path, &here);
        let reclaim = match &state {
            State::Stale(_) => true,
            State::Kept => options.kept,
            _ => false,
        };
        if !reclaim {
            if !matches!(state, State::Foreign) {
                summary.skipped.push((path, format!("{state:?}")));
            }
            continue;
        }
        if options.dry_run {
            summary.removed.push(path);
            continue;
        }
        match reclaim_entry(ns, &path, marker) {
            Ok(()) => summary.removed.push(path),
            Err(e) => summary.errors.push(e),
        }
    }
    summary
}

/// The namespace's entries, sorted.
fn names(ns: &Namespace) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(ns.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Judges one entry; when it is stale the marker is returned with our exclusive lock on it.
fn judge(ns: &Namespace, path: &Path, here: &Host) -> (State, Option<MarkerFile>) {
    let name = path.file_name().unwrap_or_default();
    let (kind, id) = classify(name);
    let id = match (kind, id) {
        (EntryKind::Root | EntryKind::Pending, Some(id)) => id,
        _ => return (State::Foreign, None),
    };
    let file = match Marker::read(path, ns.user()) {
        Ok(file) => file,
        Err(problem) if problem.damaged && kind == EntryKind::Pending && old(id) => {
            return (
                State::Stale(format!("an abandoned creation ({problem})")),
                None,
            )
        }
        Err(problem) => return (State::Unproven(problem.reason), None),
    };
    if file.marker.run_id != id {
        return (
            State::Unproven(format!("its marker names run {}", file.marker.run_id)),
            None,
        );
    }
    if file.owner_holds_lock() {
        return (State::Live, Some(file));
    }
    let state = match file.marker.owner.liveness(&file.marker.host, here) {
        // Unknown (a process we may not open, another host) counts as alive.
        Liveness::Alive | Liveness::Unknown => State::Live,
        Liveness::Dead(_) if file.marker.keep => State::Kept,
        Liveness::Dead(why) => State::Stale(format!("owner pid {}: {why}", file.marker.owner.pid)),
    };
    (state, Some(file))
}

/// Whether a run id was made longer than [`PENDING_AGE`] ago.
fn old(id: &str) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    run_id_unix_secs(id).is_some_and(|t| now.saturating_sub(t) > PENDING_AGE.as_secs())
}

/// Removes a judged-stale entry, holding the directory and (when there is one) the marker with
/// our lock on it; an abandoned creation has no marker to keep.
fn reclaim_entry(ns: &Namespace, path: &Path, marker: Option<MarkerFile>) -> Result<(), String> {
    let proof = marker.as_ref().map(|file| file.marker.clone());
    let held = open_dir(path)
        .and_then(|dir| Held::new(path.to_path_buf(), dir, marker.map(MarkerFile::into_file)))
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let Some(marker) = proof else {
        return remove::os::remove_abandoned(held);
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let removal = remove::remove_entry(ns, name, &held, &marker, Persistence::FULL);
    match removal.status {
        RemovalStatus::Removed => Ok(()),
        RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) => {
            Err(format!("{}: {reason}", removal.path.display()))
        }
    }
}
