//! Stale recovery: `cleanroom gc`, `cleanroom list`, and the bounded reclamation at the start of
//! runs. See `docs/removal.md` for the order of checks.
//!
//! This module is the same on every platform: the types `gc --json` and `list --json` print
//! ([`GcSummary`], [`Listing`], [`Entry`] and its [`EntryState`]), the options ([`GcOptions`],
//! [`Budget`]), and what every pass does the same way: entries in name order, one at a time,
//! until the budget runs out; the count of what was left; the verdict on a dead owner's kept
//! root; the age below which a pending directory is left to its creator; disk usage. How one
//! entry is judged and removed is the private `os` child's, chosen once: `unix.rs` on Linux and
//! macOS (with `judge`, `retention` and `state`, and what a dead run left running: on Linux
//! `orphans` and `watchdogs`, on macOS `macos.rs`, which finds nothing) or `windows.rs`.
//!
//! A namespace entry is removed only when ALL of these hold, checked in this order:
//! 1. its name is ours (`run-<id>`, `.pending-run-<id>`, `.trash-run-<id>`);
//! 2. it is a real directory (lstat, no symlink) owned by the effective uid, and the directory we
//!    open is that same inode;
//! 3. it has a valid marker (regular file, one link, our uid, known version, strict shape) naming
//!    the same run id as the entry's name;
//! 4. the marker's owner is provably dead: another boot, or (same pid namespace and host) the pid
//!    is absent or has another start time. Anything uncertain counts as alive. A published root
//!    whose recorded owner is alive but whose lock is free is not that owner's (its live owner
//!    holds the lock until the root is renamed away; the run's command can forge its own
//!    marker): it is judged as a dead owner's;
//! 5. we can take its liveness lock exclusively, and keep it through the removal so no concurrent
//!    gc works on it. A lock held although the owner is dead belongs to what the run left behind:
//!    its tagged processes and its cgroup are killed and the lock is tried again; a lock still
//!    held then belongs to a process that is not the run's, and the entry is left (`locked`);
//! 6. it is not kept (`--keep-root`) unless kept roots were asked for; a root kept on failure
//!    is kept only while fewer newer ones are than its marker's `retain` (`retention`);
//! 7. its run id is not alive elsewhere (`orphans`: another entry with that id not provably
//!    dead, or tagged processes of another state directory).
//!
//! Then processes still carrying the run's `CLEANROOM_RUN_ID` (same uid), its recorded cgroup
//! and its watchdog if it was left stopped (`watchdogs`) are killed, and the entry goes
//! through the removal module. A kept root for which 1–5 and 7 hold keeps its directory, not
//! its dead run's processes: `gc` kills them all the same (not `list`, nor the start of a run). Everything else is reported and left alone. The only exceptions
//! to 3: an empty directory with one of our names, and the
//! skeleton a failed creation leaves in a pending directory (a damaged marker and empty layout directories),
//! are removed with `rmdir` and `unlink` by name, never recursively, since nothing in them can be
//! lost. A published root with a damaged marker is `unproven`: listed with the command that
//! removes it, never touched.
//!
//! Windows (`windows.rs`) checks 1, 3 (the owner is the user SID; a pending directory older than
//! a minute without a marker is an abandoned creation, removed), 5 (the lock is a `LockFileEx`
//! lock on the marker: refused means its owner is alive; taken, it is held until the removal is
//! done), 4, then 6; it hunts no orphans (a run's Job Object dies with its runner) and
//! remembers no passes.
//!
//! macOS (type-checked only, docs/macos.md) makes Linux's pass, but finds no processes a dead run
//! left (no `/proc`, no cgroup, no watchdog): 7 checks the other entries only, and nothing is
//! killed. A run whose runner was SIGKILLed leaves its process group running; gc still reclaims
//! its root once the runner is provably dead.
//!
//! Cost: one `readdir`, about a dozen system calls per entry, and at most one pass over `/proc`
//! per reclamation (made when the first candidate is met); a run's orphans are looked for again
//! only when that pass found some. The start of a run makes a pass only when one is due
//! (`state`), within its time budget, and skips leftovers known to be stuck.

#[cfg(unix)]
#[path = "unix.rs"]
mod os;
#[cfg(windows)]
#[path = "windows.rs"]
mod os;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::marker::Kept;
use crate::namespace::{run_id_unix_secs, Namespace};
use crate::process::ProcessInfo;
use crate::remove::Persistence;

/// Value of the `format` field of a [`GcSummary`].
pub const GC_FORMAT: &str = "cleanroom-gc";
/// Value of the `format` field of [`Listing`].
pub const LIST_FORMAT: &str = "cleanroom-list";
/// Version of both JSON documents.
pub const JSON_VERSION: u32 = 1;

/// How long after a full pass the start of a run makes the next one, where passes are
/// remembered (Linux and macOS: in an extended attribute of the namespace). Windows remembers
/// none: every run makes its bounded pass.
pub const FULL_PASS_INTERVAL: Duration = Duration::from_secs(60);

/// A pending directory whose run id is younger than this is left to its creator.
const PENDING_MIN_AGE_SECS: u64 = 60;

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
    /// A quarantined root whose removal did not finish, or an empty or half-created directory of
    /// ours: gc finishes it.
    Leftover,
    /// Its owner is dead, but a process that is not part of the run holds its lock: left alone.
    Locked,
    /// Named like a root of ours, with a damaged marker: nothing proves it is ours; never
    /// touched (the reason says how to remove it).
    Unproven,
    /// The lock directory.
    Locks,
    /// Not ours: never touched.
    Foreign,
}

impl EntryState {
    /// The lowercase name used in JSON and `list`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Live => "live",
            EntryState::Stale => "stale",
            EntryState::Kept => "kept",
            EntryState::Leftover => "leftover",
            EntryState::Locked => "locked",
            EntryState::Unproven => "unproven",
            EntryState::Locks => "locks",
            EntryState::Foreign => "foreign",
        }
    }

    /// Whether the verdict makes the entry a candidate for removal.
    fn is_candidate(self) -> bool {
        matches!(self, EntryState::Stale | EntryState::Leftover)
    }
}

/// One namespace entry as `list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// The entry's name in the namespace, exact when it is valid UTF-8 (invalid sequences are
    /// replaced by U+FFFD otherwise, and `name_bytes` has the name).
    pub name: String,
    /// The name's bytes when `name` is not exact (see [`lossless_name`]), else `None`.
    pub name_bytes: Option<Vec<u8>>,
    /// The name exactly as the directory holds it.
    #[serde(skip)]
    pub raw_name: OsString,
    /// Its state.
    pub state: EntryState,
    /// Why it has that state.
    pub reason: String,
    /// The run id, when the marker is valid.
    pub run_id: Option<String>,
    /// The owner's pid, when the marker is valid.
    pub owner_pid: Option<u32>,
    /// The run's command, when the marker is valid.
    pub command: Vec<String>,
    /// Age in seconds (from the marker, else the directory's change time).
    pub age_secs: Option<u64>,
    /// Bytes used, when asked for.
    pub size_bytes: Option<u64>,
    /// Processes holding its lock, when its owner is dead and the lock is held.
    pub lock_holders: Vec<LockHolder>,
    /// Why its marker says it is kept (whatever its state now), when it does.
    pub kept: Option<Kept>,
}

/// A name for JSON, without loss: the text (exact when the name is valid UTF-8, with invalid
/// sequences replaced by U+FFFD otherwise) and, only when the text is not exact, the name's
/// bytes (`OsStr::as_encoded_bytes`: the bytes themselves on Unix, WTF-8 on Windows), so that
/// two names never come out the same.
pub fn lossless_name(name: &OsStr) -> (String, Option<Vec<u8>>) {
    match name.to_str() {
        Some(text) => (text.to_owned(), None),
        None => (
            name.to_string_lossy().into_owned(),
            Some(name.as_encoded_bytes().to_vec()),
        ),
    }
}

impl Entry {
    /// Records what a valid marker of this entry says of its run.
    fn describe_run(&mut self, marker: &crate::marker::Marker) {
        self.run_id = Some(marker.run_id.clone());
        self.kept = marker.kept_because();
        self.owner_pid = Some(marker.owner.pid);
        self.command = marker.command.clone();
        self.age_secs = Some(now_secs().saturating_sub(marker.created_unix_ms / 1000));
    }

    fn named(name: &OsStr) -> Entry {
        let (text, bytes) = lossless_name(name);
        Entry {
            name: text,
            name_bytes: bytes,
            raw_name: name.to_os_string(),
            state: EntryState::Foreign,
            reason: String::new(),
            run_id: None,
            owner_pid: None,
            command: Vec::new(),
            age_secs: None,
            size_bytes: None,
            lock_holders: Vec::new(),
            kept: None,
        }
    }
}

/// A process holding the lock of a root (on Linux, as `/proc/locks` names it; macOS and Windows
/// name none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LockHolder {
    /// The pid that took the lock (it may since have exited, leaving the descriptor to a child).
    pub pid: i32,
    /// Its command line, when it is still alive.
    pub command: Option<String>,
}

/// Bounds of one reclamation.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Stop judging and removing after this long (a removal in progress stops too, leaving its
    /// entry quarantined for the next gc).
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

/// An entry left because a process that is not part of its dead run holds its lock.
#[derive(Clone, Debug, Serialize)]
pub struct LockedEntry {
    /// The entry's name.
    pub name: String,
    /// Who holds the lock.
    pub holders: Vec<LockHolder>,
}

/// What a reclamation did (JSON format `cleanroom-gc`, version 1; see `docs/removal.md`).
#[derive(Clone, Debug, Serialize)]
pub struct GcSummary {
    /// Always [`GC_FORMAT`].
    pub format: &'static str,
    /// Always [`JSON_VERSION`].
    pub version: u32,
    /// Whether this was a dry run (then `removed`, `killed` and `bytes_freed` say what would be).
    pub dry_run: bool,
    /// Why no pass was made, at the start of a run (not due yet, or another run is making it).
    pub not_run: Option<String>,
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
    /// Entries named like ours whose marker is damaged: never touched; `list` says how to
    /// remove them.
    pub unproven: Vec<String>,
    /// Entries of dead runs whose lock a process outside the run holds: left alone.
    pub locked: Vec<LockedEntry>,
    /// Leftovers known to be stuck, skipped at the start of a run (`cleanroom gc` retries them).
    pub stuck_skipped: Vec<String>,
    /// Removals that failed, with the reason (retried by the next gc).
    pub errors: Vec<String>,
    /// Whether the budget ran out before every entry was handled.
    pub truncated: bool,
    /// Bytes freed, as seen by the filesystem's free space (in a dry run: the disk usage of what
    /// would be removed; on Windows only a dry run measures it).
    pub bytes_freed: u64,
    /// Processes of dead runs that were killed (in a dry run: that would be).
    pub killed: Vec<ProcessInfo>,
    /// Names removed (or that would be).
    pub removed_names: Vec<String>,
    /// Entries of `locks/` removed by `cleanroom gc` (or that would be), as `locks/NAME`: what
    /// cannot be lock state, and the files of locks nobody holds (see `lock::sweep`).
    pub locks_removed: Vec<String>,
}

impl Default for GcSummary {
    fn default() -> GcSummary {
        GcSummary {
            format: GC_FORMAT,
            version: JSON_VERSION,
            dry_run: false,
            not_run: None,
            scanned: 0,
            removed: 0,
            skipped_live: 0,
            kept: 0,
            foreign: 0,
            unproven: Vec::new(),
            locked: Vec::new(),
            stuck_skipped: Vec::new(),
            errors: Vec::new(),
            truncated: false,
            bytes_freed: 0,
            killed: Vec::new(),
            removed_names: Vec::new(),
            locks_removed: Vec::new(),
        }
    }
}

impl GcSummary {
    /// Counts an entry the pass leaves: live, kept, foreign, unproven or locked.
    fn tally(&mut self, entry: &Entry) {
        match entry.state {
            EntryState::Live => self.skipped_live += 1,
            EntryState::Kept => self.kept += 1,
            EntryState::Foreign => self.foreign += 1,
            EntryState::Unproven => self.unproven.push(entry.name.clone()),
            EntryState::Locked => self.locked.push(LockedEntry {
                name: entry.name.clone(),
                holders: entry.lock_holders.clone(),
            }),
            EntryState::Stale | EntryState::Leftover | EntryState::Locks => {}
        }
    }

    /// Counts an entry removed (or that would be).
    fn removed(&mut self, name: String) {
        self.removed += 1;
        self.removed_names.push(name);
    }
}

/// What `list --json` prints (format `cleanroom-list`, version 1).
#[derive(Clone, Debug, Serialize)]
pub struct Listing {
    /// Always [`LIST_FORMAT`].
    pub format: &'static str,
    /// Always [`JSON_VERSION`].
    pub version: u32,
    /// The namespace's path, exact when it is valid UTF-8 (see [`lossless_name`]).
    pub state_dir: String,
    /// The path's bytes when `state_dir` is not exact, else `None`.
    pub state_dir_bytes: Option<Vec<u8>>,
    /// Every entry, sorted by name.
    pub entries: Vec<Entry>,
    /// The exclusive locks and their holders.
    pub locks: Vec<crate::lock::LockInfo>,
}

/// Every entry of the namespace with its state; `sizes` adds disk usage (slower).
pub fn list(ns: &Namespace, sizes: bool) -> Vec<Entry> {
    let names = os::entry_names(ns);
    match os::Lister::new(ns) {
        Ok(mut lister) => names.iter().map(|name| lister.entry(name, sizes)).collect(),
        Err(why) => names
            .iter()
            .map(|name| Entry {
                state: EntryState::Live,
                reason: why.clone(),
                ..Entry::named(name)
            })
            .collect(),
    }
}

/// Reclaims stale roots and leftovers of `ns` (`cleanroom gc`). `progress(done, total)` is called
/// before each entry with the number of namespace entries looked at so far and in all.
///
/// Each entry is judged and, when stale, removed before the next is looked at, so only one root
/// is held open (and locked) at a time: holding every candidate at once runs out of descriptors
/// with thousands of stale roots.
pub fn gc(
    ns: &Namespace,
    options: &GcOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> GcSummary {
    os::gc(ns, options, progress)
}

/// The reclamation at the start of a run: a bounded pass. On Linux and macOS only when one is
/// due (every [`FULL_PASS_INTERVAL`]), continuing where the last one stopped and skipping
/// leftovers known to be stuck; removals get one attempt each, within the budget's time; the
/// summary says when no pass was made and why. Windows makes the pass every time.
pub fn at_run_start(ns: &Namespace, budget: Budget) -> GcSummary {
    os::at_run_start(ns, budget)
}

/// A pass's bounds, and when it started.
#[derive(Clone, Copy)]
struct Clock {
    budget: Budget,
    started: Instant,
}

impl Clock {
    fn start(budget: Budget) -> Clock {
        Clock {
            budget,
            started: Instant::now(),
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.budget.max_time.map(|t| self.started + t)
    }

    /// Whether the pass must stop, having removed `removed` entries.
    fn exhausted(&self, removed: usize) -> bool {
        let over_time = self.deadline().is_some_and(|d| Instant::now() >= d);
        let over_count = self.budget.max_count.is_some_and(|n| removed >= n);
        over_time || over_count
    }

    /// How hard a removal tries: every retry when the pass has no time bound (`cleanroom gc`),
    /// otherwise one attempt, stopped at the deadline.
    fn persistence(&self) -> Persistence {
        Persistence {
            retries: self.budget.max_time.is_none(),
            deadline: self.deadline(),
        }
    }
}

/// One platform's pass over the namespace: judging and handling an entry are the platform's;
/// the order, the budget, the progress and the count are [`run`]'s.
trait Pass {
    /// The pass's bounds, and what it did so far.
    fn books(&mut self) -> (&Clock, &mut GcSummary);
    /// Judges and (when reclaiming) removes the entry `name`.
    fn handle(&mut self, name: &OsStr);
}

/// Goes through `names` in order until the budget runs out; returns how many were handled.
/// The first is always handled, so that passes cut short still make progress.
fn run(pass: &mut impl Pass, names: &[OsString], progress: &mut dyn FnMut(usize, usize)) -> usize {
    let total = names.len();
    for (done, name) in names.iter().enumerate() {
        let (clock, summary) = pass.books();
        if done > 0 && clock.exhausted(summary.removed) {
            summary.truncated = true;
            return done;
        }
        progress(done, total);
        summary.scanned += 1;
        pass.handle(name);
    }
    progress(total, total);
    total
}

/// The verdict on a root whose owner is provably dead (`owner_gone` says how) and whose lock
/// this pass holds: stale, unless its marker says it is kept and kept roots were not asked for.
fn dead_owner_verdict(
    kept: Option<Kept>,
    include_kept: bool,
    owner_gone: String,
) -> (EntryState, String) {
    match kept {
        None => (EntryState::Stale, owner_gone),
        Some(_) if include_kept => (EntryState::Stale, owner_gone),
        Some(Kept::OnFailure { exit_status, .. }) => (
            EntryState::Kept,
            format!("kept on failure (exit status {exit_status})"),
        ),
        Some(Kept::Always) => (
            EntryState::Kept,
            "kept with --keep-root (gc --kept reclaims it)".into(),
        ),
    }
}

/// Whether a pending directory of `run_id` may still be in its creator's hands: its run id is
/// younger than [`PENDING_MIN_AGE_SECS`] (or has no time in it).
fn pending_is_young(run_id: &str) -> bool {
    run_id_unix_secs(run_id).is_none_or(|t| now_secs().saturating_sub(t) < PENDING_MIN_AGE_SECS)
}

fn now_secs() -> u64 {
    now_ms() / 1000
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Bytes used by a tree, without following symlinks (or reparse points) or crossing devices.
fn disk_usage(path: PathBuf) -> u64 {
    let Ok(top) = std::fs::symlink_metadata(&path) else {
        return 0;
    };
    let mut total = os::allocated(&top);
    let mut stack = vec![path];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += os::allocated(&m);
            if m.is_dir() && os::same_device(&m, &top) {
                stack.push(e.path());
            }
        }
    }
    total
}

/// The size of `entry` when asked for: what `list --sizes` shows (never for a foreign entry).
fn measure(ns: &Namespace, entry: &mut Entry, sizes: bool) {
    if sizes && entry.state != EntryState::Foreign {
        entry.size_bytes = Some(disk_usage(ns.path().join(&entry.raw_name)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gc --json` and `list --json` are the same documents on every platform (one definition):
    /// these are their fields, as scripts read them.
    #[test]
    fn the_json_documents_keep_their_fields() {
        let keys = |value: serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = value
                .as_object()
                .expect("an object")
                .keys()
                .cloned()
                .collect();
            keys.sort();
            keys
        };
        let sorted = |keys: &[&str]| -> Vec<String> {
            let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            keys.sort();
            keys
        };
        let summary = serde_json::to_value(GcSummary::default()).expect("json");
        assert_eq!(
            keys(summary),
            sorted(&[
                "format",
                "version",
                "dry_run",
                "not_run",
                "scanned",
                "removed",
                "skipped_live",
                "kept",
                "foreign",
                "unproven",
                "locked",
                "stuck_skipped",
                "errors",
                "truncated",
                "bytes_freed",
                "killed",
                "removed_names",
                "locks_removed"
            ])
        );
        let entry = serde_json::to_value(Entry::named(OsStr::new("run-x"))).expect("json");
        assert_eq!(
            keys(entry),
            sorted(&[
                "name",
                "name_bytes",
                "state",
                "reason",
                "run_id",
                "owner_pid",
                "command",
                "age_secs",
                "size_bytes",
                "lock_holders",
                "kept"
            ])
        );
        let listing = Listing {
            format: LIST_FORMAT,
            version: JSON_VERSION,
            state_dir: String::new(),
            state_dir_bytes: None,
            entries: Vec::new(),
            locks: Vec::new(),
        };
        assert_eq!(
            keys(serde_json::to_value(listing).expect("json")),
            sorted(&[
                "format",
                "version",
                "state_dir",
                "state_dir_bytes",
                "entries",
                "locks"
            ])
        );
    }
}
