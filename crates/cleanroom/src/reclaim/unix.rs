//! Reclamation on Linux and macOS: how one entry is judged (`judge`), how long a root kept on
//! failure stays (`retention`), what the start of runs remembers between them (`state`), and
//! the pass over the namespace that ties them together; all of it POSIX (fd-relative `openat`,
//! `flock`, extended attributes). What a dead run left running is the platform's (`orphans`):
//! Linux finds it by the run's tag in `/proc`, its recorded cgroup and its abandoned watchdog
//! (`orphans.rs`, `watchdogs.rs`); macOS finds nothing (`macos.rs`). The order of checks is the
//! parent module's doc; the types, the budget and the loop over entries are the parent's too.

mod judge;
#[cfg(target_os = "linux")]
mod orphans;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod orphans;
mod retention;
mod state;
#[cfg(target_os = "linux")]
mod watchdogs;

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FlockOperation, OFlags};

use super::{disk_usage, now_ms, Budget, Clock, Entry, EntryState, GcOptions, GcSummary};
use crate::marker::Marker;
use crate::namespace::{EntryKind, Namespace, PENDING_PREFIX, ROOT_PREFIX, TRASH_PREFIX};
use crate::process::Host;
use crate::remove::{self, RemovalStatus};

use judge::Judged;
use orphans::Leftovers;

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
    clock: Clock,
    /// What dead runs left running, as the platform finds it (on Linux, one pass over `/proc`,
    /// made when the first candidate needs it).
    leftovers: Leftovers,
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
            clock: Clock::start(budget),
            leftovers: Leftovers::new(ns.euid()),
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

    /// Why nothing of run `run_id` may be killed or removed from the entry `name`, if so: another
    /// entry of the namespace carries the run id and is not provably dead (a forged
    /// `.trash-run-<live id>` next to the live `run-<live id>`), or processes of the run belong to
    /// a root outside this namespace.
    fn protection(&mut self, name: &OsStr, run_id: &str) -> Option<String> {
        sibling_alive(self.ns, name, run_id, &self.here)
            .or_else(|| self.leftovers.outside(self.ns, run_id))
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
        if judged.entry.state.is_candidate() {
            if let Some(run_id) = judged.entry.run_id.clone() {
                if let Some(reason) = self.protection(name, &run_id) {
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
            if let Some(reason) = self.protection(&judged.entry.raw_name, &run_id) {
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
        let (holders, run_holds_it) = self.leftovers.lock_holders(&run_id, dev, ino);
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

    /// Kills what the dead run `run_id` (with the cgroup its marker records, if any) left.
    fn kill_orphans(&mut self, run_id: &str, cgroup: Option<&str>) {
        let killed = self.leftovers.kill(run_id, cgroup);
        self.summary.killed.extend(killed);
    }

    /// Kills what the dead run of a kept root left (in a dry run: names it), unless its run id
    /// is alive elsewhere; the root itself stays.
    fn kill_kept_leftovers(&mut self, judged: &Judged) {
        let (Some(run_id), Some(marker)) = (&judged.entry.run_id, &judged.marker) else {
            return;
        };
        if self.protection(&judged.entry.raw_name, run_id).is_some() {
            return;
        }
        match self.mode {
            Mode::Inspect => self.would_kill(run_id, marker.cgroup.as_deref()),
            Mode::Reclaim => self.kill_orphans(run_id, marker.cgroup.as_deref()),
        }
    }

    /// What would be killed for `run_id` (a dry run).
    fn would_kill(&mut self, run_id: &str, cgroup: Option<&str>) {
        let found = self.leftovers.would_kill(run_id, cgroup);
        self.summary.killed.extend(found);
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
            self.summary.removed(name);
            return;
        }
        let Some(dir) = &judged.dir else { return };
        let Some(marker) = &judged.marker else {
            match judge::remove_skeleton(self.ns, &judged) {
                Ok(()) => self.summary.removed(name),
                Err(e) => self.summary.errors.push(e),
            }
            return;
        };
        if let Some(run_id) = &run_id {
            self.kill_orphans(run_id, cgroup.as_deref());
        }
        let removal = remove::remove_entry(self.ns, &name, dir, marker, self.clock.persistence());
        match removal.status {
            RemovalStatus::Removed => self.summary.removed(name),
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
}

impl super::Pass for Pass<'_> {
    fn books(&mut self) -> (&Clock, &mut GcSummary) {
        (&self.clock, &mut self.summary)
    }

    fn handle(&mut self, name: &OsStr) {
        let judged = self.judge(name);
        match judged.entry.state {
            EntryState::Stale | EntryState::Leftover => self.reclaim(judged),
            EntryState::Locks if self.sweep_locks => self.sweep_locks(),
            _ => self.summary.tally(&judged.entry),
        }
    }
}

/// What `list` judges with: a pass that only looks.
pub(super) struct Lister<'a>(Pass<'a>);

impl<'a> Lister<'a> {
    pub fn new(ns: &'a Namespace) -> Result<Lister<'a>, String> {
        let pass = Pass::new(ns, Mode::Inspect, false, Budget::UNLIMITED);
        pass.map(Lister).ok_or_else(|| "cannot read boot id".into())
    }

    /// The entry `name` as `list` shows it.
    pub fn entry(&mut self, name: &OsStr, sizes: bool) -> Entry {
        let mut entry = self.0.judge(name).entry;
        if entry.state == EntryState::Locks {
            describe_locks(self.0.ns, &mut entry);
        } else {
            super::measure(self.0.ns, &mut entry, sizes);
        }
        entry
    }
}

/// The bytes a file takes on disk.
pub(super) fn allocated(m: &Metadata) -> u64 {
    m.blocks() * 512
}

/// Whether `m` is on the device of `top`.
pub(super) fn same_device(m: &Metadata, top: &Metadata) -> bool {
    m.dev() == top.dev()
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

/// Why run `run_id` must not be touched from the entry `name`, if it must not: another entry of
/// the namespace carries the run id and is not provably dead.
fn sibling_alive(ns: &Namespace, name: &OsStr, run_id: &str, here: &Host) -> Option<String> {
    let root = format!("{ROOT_PREFIX}{run_id}");
    let siblings = [
        root.clone(),
        format!("{PENDING_PREFIX}{root}"),
        format!("{TRASH_PREFIX}{root}"),
    ];
    for sibling in siblings.iter().filter(|s| OsStr::new(s) != name) {
        match rustix::fs::statat(ns.dir(), sibling.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => continue,
            _ if provably_dead(ns, sibling, run_id, here) => continue,
            _ => {
                return Some(format!(
                    "run {run_id} also has {sibling}, which is not provably dead: \
                     nothing of the run is touched"
                ))
            }
        }
    }
    None
}

/// Whether the entry `name` is a root of `run_id` whose owner is provably dead and whose lock is
/// free. The lock is tried only once a valid marker exists: its owner then already holds it.
fn provably_dead(ns: &Namespace, name: &str, run_id: &str, here: &Host) -> bool {
    let Ok(dir) = rustix::fs::openat(
        ns.dir(),
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    let dead = Marker::read(std::os::fd::AsFd::as_fd(&dir), ns.user())
        .is_ok_and(|m| m.run_id == run_id && m.owner.liveness(&m.host, here).is_dead());
    dead && rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// The names in the namespace, sorted (`.` and `..` left out).
pub(super) fn entry_names(ns: &Namespace) -> Vec<OsString> {
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

fn free_bytes(ns: &Namespace) -> u64 {
    rustix::fs::fstatvfs(ns.dir())
        .map(|s| s.f_bavail * s.f_frsize)
        .unwrap_or(0)
}

/// `cleanroom gc` ([`super::gc`]): a full pass, which also kills what the dead runs of kept
/// roots left and sweeps `locks/`, and measures what it freed by the filesystem's free space.
pub(super) fn gc(
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
    let done = super::run(&mut pass, &names, progress);
    if mode == Mode::Reclaim {
        pass.summary.bytes_freed = free_bytes(ns).saturating_sub(free_before);
        remember(&mut pass, done == names.len());
    }
    pass.summary
}

/// The start of a run ([`super::at_run_start`]): a pass when the state says one is due, taken
/// by one run at a time, continuing from the state's cursor.
pub(super) fn at_run_start(ns: &Namespace, budget: Budget) -> GcSummary {
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
    let done = super::run(&mut pass, &names[start..], &mut |_, _| {});
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
