//! Stale recovery: `cleanroom gc`, `cleanroom list`, and the bounded reclamation at the start of
//! runs. See `docs/removal.md` for the order of checks.
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
//!    is kept only while fewer newer ones are than its marker's `retain` ([`retention`]);
//! 7. its run id is not alive elsewhere ([`orphans`]: another entry with that id not provably
//!    dead, or tagged processes of another state directory).
//!
//! Then processes still carrying the run's `CLEANROOM_RUN_ID` (same uid), its recorded cgroup
//! and its watchdog if it was left stopped ([`watchdogs`]) are killed, and the entry goes
//! through the removal module. A kept root for which 1–5 and 7 hold keeps its directory, not
//! its dead run's processes: `gc` kills them all the same (not `list`, nor the start of a run). Everything else is reported and left alone. The only exceptions
//! to 3: an empty directory with one of our names, and the
//! skeleton a failed creation leaves in a pending directory (a damaged marker and empty layout directories),
//! are removed with `rmdir` and `unlink` by name, never recursively, since nothing in them can be
//! lost. A published root with a damaged marker is `unproven`: listed with the command that
//! removes it, never touched.
//!
//! Cost: one `readdir`, about a dozen system calls per entry, and at most one pass over `/proc`
//! per reclamation (made when the first candidate is met); a run's orphans are looked for again
//! only when that pass found some. The start of a run makes a pass only when one is due
//! ([`state`]), within its time budget, and skips leftovers known to be stuck.

mod judge;
mod orphans;
mod retention;
mod state;
mod watchdogs;

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::contain;
use crate::marker::Kept;
use crate::namespace::{EntryKind, Namespace};
use crate::process::{Host, ProcessInfo};
use crate::remove::{self, Persistence, RemovalStatus};

use judge::Judged;
pub use orphans::LockHolder;
use orphans::Tagged;
pub use state::FULL_PASS_INTERVAL;

/// Value of the `format` field of a [`GcSummary`].
pub const GC_FORMAT: &str = "cleanroom-gc";
/// Value of the `format` field of [`Listing`].
pub const LIST_FORMAT: &str = "cleanroom-list";
/// Version of both JSON documents.
pub const JSON_VERSION: u32 = 1;

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
    /// would be removed).
    pub bytes_freed: u64,
    /// Processes of dead runs that were killed (in a dry run: that would be).
    pub killed: Vec<ProcessInfo>,
    /// Names removed (or that would be).
    pub removed_names: Vec<String>,
    /// Entries of `locks/` removed by `cleanroom gc` (or that would be), as `locks/NAME`: what
    /// cannot be lock state, and the files of locks nobody holds (see [`crate::lock::sweep`]).
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

/// Whether a pass may act, or only look.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `list` and `gc --dry-run`: nothing is killed, locked for long, or removed.
    Inspect,
    /// `gc` and the start of a run.
    Reclaim,
}

/// One pass over the namespace.
struct Pass<'a> {
    ns: &'a Namespace,
    here: Host,
    mode: Mode,
    include_kept: bool,
    budget: Budget,
    started: Instant,
    /// The one pass over `/proc`, made when the first candidate needs it.
    tagged: Option<Tagged>,
    /// The cgroup2 mount, read when the first recorded cgroup is met.
    cgroup_mount: Option<Option<PathBuf>>,
    /// The roots kept on failure, read when the first one is judged.
    kept_on_failure: Option<retention::KeptOnFailure>,
    /// Leftovers not to try (known stuck, at the start of a run).
    skip: HashSet<String>,
    /// Whether entries whose dead owner's lock is held are settled (their leftovers killed and
    /// the lock retried, up to half a second): `gc`, not the start of a run.
    settle_locks: bool,
    /// Whether what a dead run left (tagged processes, cgroup, stopped watchdog) is killed (in
    /// a dry run: named) when its root is kept: the directory stays, the processes do not.
    /// `gc`, not `list` nor the start of a run (which must not pay for what other runs left).
    kill_kept_leftovers: bool,
    /// Whether `locks/` is swept of what commands left there: `gc`, not the start of a run.
    sweep_locks: bool,
    summary: GcSummary,
    /// Names whose removal gave up (not merely ran out of time).
    stuck: Vec<String>,
}

impl<'a> Pass<'a> {
    fn new(ns: &'a Namespace, mode: Mode, include_kept: bool, budget: Budget) -> Option<Pass<'a>> {
        let here = Host::current().ok()?;
        Some(Pass {
            ns,
            here,
            mode,
            include_kept,
            budget,
            started: Instant::now(),
            tagged: None,
            cgroup_mount: None,
            kept_on_failure: None,
            skip: HashSet::new(),
            settle_locks: mode == Mode::Reclaim,
            kill_kept_leftovers: false,
            sweep_locks: false,
            summary: GcSummary {
                dry_run: mode == Mode::Inspect,
                ..GcSummary::default()
            },
            stuck: Vec::new(),
        })
    }

    fn tagged(&mut self) -> &Tagged {
        let uid = self.ns.euid();
        self.tagged.get_or_insert_with(|| Tagged::scan(uid))
    }

    fn deadline(&self) -> Option<Instant> {
        self.budget.max_time.map(|t| self.started + t)
    }

    fn out_of_budget(&self) -> bool {
        let over_time = self.deadline().is_some_and(|d| Instant::now() >= d);
        let over_count = self
            .budget
            .max_count
            .is_some_and(|n| self.summary.removed >= n);
        over_time || over_count
    }

    /// Judges `name` completely: a `Locked` verdict is settled, a candidate's run id checked for
    /// protection. Candidates come back with their directory locked.
    fn judge(&mut self, name: &OsStr) -> Judged {
        let mut judged = judge::judge(self.ns, name, &self.here, self.include_kept);
        if judged.entry.state == EntryState::Locked {
            judged = self.settle_locked(judged);
        }
        if let Some(created) = judged.retention_applies() {
            let ns = self.ns;
            let newer = self
                .kept_on_failure
                .get_or_insert_with(|| retention::KeptOnFailure::scan(ns))
                .newer_than(created, name);
            judged = judged.retained(newer);
        }
        if self.kill_kept_leftovers && judged.is_kept_of_dead_run() {
            self.kill_kept_leftovers(&judged);
        }
        if is_candidate(&judged) {
            if let Some(run_id) = judged.entry.run_id.clone() {
                let here = self.here.clone();
                let ns = self.ns;
                if let Some(reason) = orphans::protection(ns, name, &run_id, &here, self.tagged()) {
                    judged = judged.left(EntryState::Live, reason);
                }
            }
        }
        judged
    }

    /// An entry whose owner is dead but whose lock is held: the run's leftovers are killed (when
    /// reclaiming) and the lock tried again; otherwise the holders are named.
    fn settle_locked(&mut self, mut judged: Judged) -> Judged {
        let run_id = judged.entry.run_id.clone().expect("a marker");
        let (dev, ino) = judged.identity.expect("opened");
        let owner_pid = judged.entry.owner_pid.unwrap_or_default();
        let kept = judged.entry.kept.is_some() && judged.kind != EntryKind::Trash;
        if kept && !self.include_kept && !self.kill_kept_leftovers {
            // `list` and the start of a run: a kept root stays whoever holds its lock.
            return judged.left(
                EntryState::Kept,
                "kept (gc --kept reclaims it); its owner is gone but its lock is held \
                 (`cleanroom gc` kills what the run left)",
            );
        }
        if self.settle_locks {
            let protected = {
                let (ns, here) = (self.ns, self.here.clone());
                orphans::protection(ns, &judged.entry.raw_name, &run_id, &here, self.tagged())
            };
            if let Some(reason) = protected {
                return judged.left(EntryState::Live, reason);
            }
            let cgroup = judged.marker.as_ref().and_then(|m| m.cgroup.clone());
            self.kill_orphans(&run_id, cgroup.as_deref());
            if lock_within(&judged, Duration::from_millis(500)) {
                if !judged.still_named(self.ns) {
                    return judged.left(EntryState::Live, "removed while being inspected");
                }
                let mut settled = judged.dead_and_locked(self.include_kept);
                settled
                    .entry
                    .reason
                    .push_str("; its leftover processes held its lock");
                return settled;
            }
        }
        let holders = orphans::lock_holders(dev, ino);
        let run_holds_it = self.tagged().has(&run_id)
            && holders.iter().filter(|h| h.command.is_some()).all(|h| {
                u32::try_from(h.pid).is_ok_and(|pid| orphans::is_tagged_with(pid, &run_id))
            });
        let holders_text = orphans::describe(&holders);
        if run_holds_it && self.mode == Mode::Inspect {
            let mut settled = judged.dead_and_locked(self.include_kept);
            settled.entry.reason.push_str(&format!(
                "; its lock is held by processes it left: {holders_text}, which gc kills first"
            ));
            return settled;
        }
        let reason = if run_holds_it {
            format!(
                "owner pid {owner_pid} is gone; its lock is held by processes it left: \
                 {holders_text}, which `cleanroom gc` kills first"
            )
        } else {
            format!(
                "owner pid {owner_pid} is gone, but its lock is held by {holders_text}, \
                 not part of the run: left alone"
            )
        };
        judged.entry.lock_holders = holders;
        judged.left(EntryState::Locked, reason)
    }

    /// Kills what the dead run `run_id` left: its tagged processes (only if the pass found any)
    /// and its recorded cgroup (which `contain` verifies; a missing one costs one failed open).
    fn kill_orphans(&mut self, run_id: &str, cgroup: Option<&str>) {
        let uid = self.ns.euid();
        let cgroup = cgroup.filter(|path| self.cgroup_may_exist(path));
        let killed = if self.tagged().has(run_id) {
            contain::kill_orphans(run_id, uid, cgroup)
        } else if let Some(cgroup) = cgroup {
            contain::kill_cgroup_path(std::path::Path::new(cgroup), run_id)
        } else {
            Vec::new()
        };
        self.summary.killed.extend(killed);
        self.kill_abandoned_watchdogs(run_id);
    }

    /// Whether a recorded cgroup is worth handing to `contain`, which verifies it for real: a
    /// path below the cgroup2 mount (read once per pass) that still exists. A cgroup a watchdog or
    /// its runner removed then costs one `lstat`, and a forged path outside the mount none.
    fn cgroup_may_exist(&mut self, path: &str) -> bool {
        let mount = self
            .cgroup_mount
            .get_or_insert_with(|| contain::cgroup2_mount().ok());
        let below = mount
            .as_ref()
            .is_some_and(|m| std::path::Path::new(path).starts_with(m));
        below
            && rustix::fs::statat(
                rustix::fs::CWD,
                path,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW | rustix::fs::AtFlags::NO_AUTOMOUNT,
            )
            .is_ok()
    }

    /// Kills what the dead run of a kept root left (in a dry run: names it), unless its run id
    /// is alive elsewhere; the root itself stays.
    fn kill_kept_leftovers(&mut self, judged: &Judged) {
        let (Some(run_id), Some(marker)) = (&judged.entry.run_id, &judged.marker) else {
            return;
        };
        let (ns, here) = (self.ns, self.here.clone());
        let name = judged.entry.raw_name.as_os_str();
        if orphans::protection(ns, name, run_id, &here, self.tagged()).is_some() {
            return;
        }
        match self.mode {
            Mode::Inspect => self.would_kill(run_id, marker.cgroup.as_deref()),
            Mode::Reclaim => self.kill_orphans(run_id, marker.cgroup.as_deref()),
        }
    }

    /// Kills the watchdogs of the dead run `run_id` that the pass over `/proc` found stopped with
    /// their runner gone (in a dry run: names them), see [`watchdogs`].
    fn kill_abandoned_watchdogs(&mut self, run_id: &str) {
        let (uid, dry_run) = (self.ns.euid(), self.mode == Mode::Inspect);
        let pids = self.tagged().watchdogs_of(run_id).to_vec();
        let killed = pids
            .into_iter()
            .filter_map(|pid| watchdogs::kill_if_abandoned(pid, run_id, uid, dry_run));
        self.summary.killed.extend(killed);
    }

    /// What would be killed for `run_id` (a dry run).
    fn would_kill(&mut self, run_id: &str, cgroup: Option<&str>) {
        let mut found = self.tagged().processes(run_id);
        if let Some(cgroup) = cgroup.filter(|path| self.cgroup_may_exist(path)) {
            for p in contain::recorded_cgroup_members(std::path::Path::new(cgroup), run_id) {
                if !found.iter().any(|f| f.id == p.id) {
                    found.push(p);
                }
            }
        }
        self.summary.killed.extend(found);
        self.kill_abandoned_watchdogs(run_id);
    }

    /// Judges and (when reclaiming) removes the entry `name`.
    fn handle(&mut self, name: &OsStr) {
        let judged = self.judge(name);
        self.summary.scanned += 1;
        let entry = &judged.entry;
        match entry.state {
            EntryState::Live => self.summary.skipped_live += 1,
            EntryState::Kept => self.summary.kept += 1,
            EntryState::Foreign => self.summary.foreign += 1,
            EntryState::Unproven => self.summary.unproven.push(entry.name.clone()),
            EntryState::Locked => self.summary.locked.push(LockedEntry {
                name: entry.name.clone(),
                holders: entry.lock_holders.clone(),
            }),
            EntryState::Stale | EntryState::Leftover => self.reclaim(judged),
            EntryState::Locks if self.sweep_locks => self.sweep_locks(),
            EntryState::Locks => {}
        }
    }

    /// Sweeps `locks/` (see [`crate::lock::sweep`]); in a dry run, counts what would go.
    fn sweep_locks(&mut self) {
        let dry_run = self.mode == Mode::Inspect;
        let swept = match crate::lock::sweep(self.ns, dry_run) {
            Ok(swept) => swept,
            Err(e) => return self.summary.errors.push(e.to_string()),
        };
        for path in swept.removed {
            if dry_run {
                self.summary.bytes_freed += disk_usage(path.clone());
            }
            let name = path.strip_prefix(self.ns.path()).unwrap_or(&path);
            self.summary
                .locks_removed
                .push(name.to_string_lossy().into_owned());
        }
        self.summary.errors.extend(swept.errors);
    }

    /// Kills a candidate's orphans and removes it (or says it would).
    fn reclaim(&mut self, judged: Judged) {
        let name = judged.entry.name.clone();
        if judged.kind == EntryKind::Trash && self.skip.contains(&name) {
            self.summary.stuck_skipped.push(name);
            return;
        }
        let cgroup = judged.marker.as_ref().and_then(|m| m.cgroup.clone());
        let run_id = judged.entry.run_id.clone();
        if self.mode == Mode::Inspect {
            if let Some(run_id) = &run_id {
                self.would_kill(run_id, cgroup.as_deref());
            }
            self.summary.bytes_freed += disk_usage(self.ns.path().join(&judged.entry.raw_name));
            self.removed(name);
            return;
        }
        let Some(dir) = &judged.dir else { return };
        let Some(marker) = &judged.marker else {
            match judge::remove_skeleton(self.ns, &judged) {
                Ok(()) => self.removed(name),
                Err(e) => self.summary.errors.push(e),
            }
            return;
        };
        if let Some(run_id) = &run_id {
            self.kill_orphans(run_id, cgroup.as_deref());
        }
        let how = Persistence {
            retries: self.budget.max_time.is_none(),
            deadline: self.deadline(),
        };
        let removal = remove::remove_entry(self.ns, &name, dir, marker, how);
        match removal.status {
            RemovalStatus::Removed => self.removed(name),
            RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) => {
                if let Some(left) = removal
                    .path
                    .file_name()
                    .filter(|_| !removal.stats.interrupted)
                {
                    self.stuck.push(left.to_string_lossy().into_owned());
                }
                self.summary
                    .errors
                    .push(format!("{}: {reason}", removal.path.display()))
            }
        }
    }

    fn removed(&mut self, name: String) {
        self.summary.removed += 1;
        self.summary.removed_names.push(name);
    }

    /// Goes through `names` in order until the budget runs out; returns how many were handled.
    /// The first is always handled, so that passes cut short still make progress.
    fn run(&mut self, names: &[OsString], progress: &mut dyn FnMut(usize, usize)) -> usize {
        let total = names.len();
        for (done, name) in names.iter().enumerate() {
            if done > 0 && self.out_of_budget() {
                self.summary.truncated = true;
                return done;
            }
            progress(done, total);
            self.handle(name);
        }
        progress(total, total);
        total
    }
}

/// Whether a verdict makes the entry a candidate for removal.
fn is_candidate(judged: &Judged) -> bool {
    matches!(judged.entry.state, EntryState::Stale | EntryState::Leftover)
}

/// Tries the exclusive lock for up to `patience` (the killed holders' descriptors close as
/// their processes finish exiting).
fn lock_within(judged: &Judged, patience: Duration) -> bool {
    let until = Instant::now() + patience;
    loop {
        if judged.try_lock() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The names in the namespace, sorted (`.` and `..` left out).
fn entry_names(ns: &Namespace) -> Vec<OsString> {
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
    let names = entry_names(ns);
    let Some(mut pass) = Pass::new(ns, Mode::Inspect, false, Budget::UNLIMITED) else {
        return names
            .iter()
            .map(|name| Entry {
                state: EntryState::Live,
                reason: "cannot read boot id".into(),
                ..Entry::named(name)
            })
            .collect();
    };
    names
        .iter()
        .map(|name| {
            let mut entry = pass.judge(name).entry;
            if entry.state == EntryState::Locks {
                describe_locks(ns, &mut entry);
            } else if sizes && entry.state != EntryState::Foreign {
                entry.size_bytes = Some(disk_usage(ns.path().join(name)));
            }
            entry
        })
        .collect()
}

/// The lock directory as `list` shows it: always with its size (every protected command can
/// write there), and how many of its entries `cleanroom gc` would remove.
fn describe_locks(ns: &Namespace, entry: &mut Entry) {
    entry.size_bytes = Some(disk_usage(ns.path().join(&entry.raw_name)));
    match crate::lock::sweep(ns, true) {
        Ok(swept) if !swept.removed.is_empty() => entry.reason.push_str(&format!(
            "; {} entries that are not lock state or belong to no holder: `cleanroom gc` \
             removes them",
            swept.removed.len()
        )),
        Ok(_) => {}
        Err(e) => entry.reason.push_str(&format!("; cannot be read: {e}")),
    }
}

/// Bytes used by a tree, without following symlinks or crossing devices.
fn disk_usage(path: PathBuf) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(&path) else {
        return 0;
    };
    let mut total = top.blocks() * 512;
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
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
    let mode = if options.dry_run {
        Mode::Inspect
    } else {
        Mode::Reclaim
    };
    let Some(mut pass) = Pass::new(ns, mode, options.include_kept, options.budget) else {
        return GcSummary {
            dry_run: options.dry_run,
            errors: vec!["cannot read boot id; nothing can be proven stale".into()],
            ..GcSummary::default()
        };
    };
    pass.kill_kept_leftovers = true;
    pass.sweep_locks = true;
    let free_before = free_bytes(ns);
    let names = entry_names(ns);
    let done = pass.run(&names, progress);
    if mode == Mode::Reclaim {
        pass.summary.bytes_freed = free_bytes(ns).saturating_sub(free_before);
        remember(&mut pass, done == names.len());
    }
    pass.summary
}

/// The reclamation at the start of a run: a bounded pass when one is due (every [`FULL_PASS_INTERVAL`]),
/// continuing where the last one stopped and skipping leftovers known to be stuck. Removals get
/// one attempt each, within the budget's time; the summary says when no pass was made and why.
pub fn at_run_start(ns: &Namespace, budget: Budget) -> GcSummary {
    let not_run = |why: String| GcSummary {
        not_run: Some(why),
        ..GcSummary::default()
    };
    let mut saved = match state::SavedState::open(ns) {
        Ok(saved) => Some(saved),
        Err(why) => {
            tracing::debug!("reclaiming without remembering: {why}");
            None
        }
    };
    if let Some(saved) = &mut saved {
        if !saved.state.due(now_ms()) {
            return not_run("the last full pass is less than a minute old".into());
        }
        if !saved.try_lock() {
            return not_run("another run is making the pass".into());
        }
        if !saved.state.due(now_ms()) {
            return not_run("another run has just made the pass".into());
        }
    }
    let Some(mut pass) = Pass::new(ns, Mode::Reclaim, false, budget) else {
        return not_run("cannot read boot id".into());
    };
    pass.settle_locks = false;
    let names = entry_names(ns);
    let cursor = saved.as_ref().and_then(|s| s.state.cursor.clone());
    let start = cursor.map_or(0, |c| {
        names.partition_point(|n| n.as_os_str() <= OsStr::new(&c))
    });
    if let Some(saved) = &saved {
        pass.skip = saved.state.stuck.iter().cloned().collect();
    }
    let done = pass.run(&names[start..], &mut |_, _| {});
    if let Some(saved) = &mut saved {
        let state = &mut saved.state;
        if start + done == names.len() {
            state.cursor = None;
            state.last_full_pass_unix_ms = now_ms();
        } else if done > 0 {
            state.cursor = Some(names[start + done - 1].to_string_lossy().into_owned());
        }
        state.record(&pass.stuck, &pass.summary.removed_names);
        if let Err(e) = saved.save() {
            tracing::debug!("cannot update {}: {e}", state::STATE_XATTR);
        }
    }
    pass.summary
}

/// After a full `cleanroom gc`: the stuck list is what this pass found, and a complete pass
/// spares the next runs theirs.
fn remember(pass: &mut Pass<'_>, complete: bool) {
    let Ok(mut saved) = state::SavedState::open(pass.ns) else {
        return;
    };
    if !saved.try_lock() {
        return;
    }
    let state = &mut saved.state;
    state.stuck.clear();
    state.record(&pass.stuck, &[]);
    if complete {
        state.cursor = None;
        state.last_full_pass_unix_ms = now_ms();
    }
    if let Err(e) = saved.save() {
        tracing::debug!("cannot update {}: {e}", state::STATE_XATTR);
    }
}
