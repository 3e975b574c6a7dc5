//! Reclamation on Windows: stale roots reclaimed only on proof of death.
//!
//! Order of checks for an entry `run-<id>` (or `.pending-run-<id>`):
//! 1. its name parses; anything else is foreign and left alone;
//! 2. its marker is valid, names this entry's run id and the namespace's user SID; otherwise
//!    the root is unproven (a damaged marker) or foreign, and left alone (a pending entry with a
//!    damaged or no marker is removed once it is older than a minute: its creator failed or
//!    died before writing it);
//! 3. the liveness lock: if the owner holds it, alive. Otherwise it is now held by us
//!    (exclusively) until the entry is judged and removed, so no owner can come back;
//! 4. the recorded owner must be provably dead (other boot, pid gone, pid reused, exited);
//! 5. kept roots only with `--kept`.
//!
//! No orphan processes are hunted: a run's Job Object dies with its runner (KILL_ON_JOB_CLOSE).
//! The types, the budget and the loop over entries are the parent module's.

use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::path::Path;

use super::{
    dead_owner_verdict, disk_usage, pending_is_young, Budget, Clock, Entry, EntryState, GcOptions,
    GcSummary,
};
use crate::marker::{Marker, MarkerFile};
use crate::namespace::os::open_dir;
use crate::namespace::{classify, EntryKind, Namespace};
use crate::process::{Host, Liveness};
use crate::remove::{self, Held, Persistence, RemovalStatus};

/// The bytes a file takes (its length: the allocation is not in `std`'s metadata).
pub(super) fn allocated(m: &Metadata) -> u64 {
    m.len()
}

/// Always: a tree walk never enters a reparse point (mount points and junctions included),
/// which `std` reports as a link, not a directory.
pub(super) fn same_device(_: &Metadata, _: &Metadata) -> bool {
    true
}

/// The names in the namespace, sorted.
pub(super) fn entry_names(ns: &Namespace) -> Vec<OsString> {
    let Ok(dir) = std::fs::read_dir(ns.path()) else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = dir.filter_map(|e| Some(e.ok()?.file_name())).collect();
    names.sort();
    names
}

/// One pass: gc, or `list` (which only looks).
struct Pass<'a> {
    ns: &'a Namespace,
    here: Host,
    dry_run: bool,
    include_kept: bool,
    clock: Clock,
    summary: GcSummary,
}

impl<'a> Pass<'a> {
    fn new(ns: &'a Namespace, options: &GcOptions) -> Result<Pass<'a>, String> {
        let here = Host::current().map_err(|e| {
            format!("cannot read this boot's identity ({e}); nothing can be proven stale")
        })?;
        Ok(Pass {
            ns,
            here,
            dry_run: options.dry_run,
            include_kept: options.include_kept,
            clock: Clock::start(options.budget),
            summary: GcSummary {
                dry_run: options.dry_run,
                ..GcSummary::default()
            },
        })
    }

    /// Removes a judged candidate (with `marker`, our lock on it, when it has one).
    fn reclaim(&mut self, entry: Entry, marker: Option<MarkerFile>) {
        let path = self.ns.path().join(&entry.raw_name);
        if self.dry_run {
            self.summary.bytes_freed += disk_usage(path);
            return self.summary.removed(entry.name);
        }
        match reclaim_entry(self.ns, &path, marker, self.clock.persistence()) {
            Ok(()) => self.summary.removed(entry.name),
            Err(e) => self.summary.errors.push(e),
        }
    }
}

impl super::Pass for Pass<'_> {
    fn books(&mut self) -> (&Clock, &mut GcSummary) {
        (&self.clock, &mut self.summary)
    }

    fn handle(&mut self, name: &OsStr) {
        let (entry, marker) = judge(self.ns, name, &self.here, self.include_kept);
        if entry.state.is_candidate() {
            self.reclaim(entry, marker);
        } else {
            self.summary.tally(&entry);
        }
    }
}

/// What `list` judges with: a pass that only looks.
pub(super) struct Lister<'a>(Pass<'a>);

impl<'a> Lister<'a> {
    pub fn new(ns: &'a Namespace) -> Result<Lister<'a>, String> {
        let options = GcOptions {
            dry_run: true,
            include_kept: false,
            budget: Budget::UNLIMITED,
        };
        Pass::new(ns, &options).map(Lister)
    }

    /// The entry `name` as `list` shows it (its marker's lock, if taken, released at once).
    pub fn entry(&mut self, name: &OsStr, sizes: bool) -> Entry {
        let (mut entry, _) = judge(self.0.ns, name, &self.0.here, false);
        super::measure(self.0.ns, &mut entry, sizes);
        entry
    }
}

/// `cleanroom gc` ([`super::gc`]).
pub(super) fn gc(
    ns: &Namespace,
    options: &GcOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> GcSummary {
    let mut pass = match Pass::new(ns, options) {
        Ok(pass) => pass,
        Err(why) => {
            return GcSummary {
                dry_run: options.dry_run,
                errors: vec![why],
                ..GcSummary::default()
            }
        }
    };
    super::run(&mut pass, &entry_names(ns), progress);
    pass.summary
}

/// The start of a run ([`super::at_run_start`]): a bounded pass, every time.
pub(super) fn at_run_start(ns: &Namespace, budget: Budget) -> GcSummary {
    let options = GcOptions {
        dry_run: false,
        include_kept: false,
        budget,
    };
    gc(ns, &options, &mut |_, _| {})
}

/// Judges one entry; a candidate comes back with its marker (when it has one) and our exclusive
/// lock on it.
fn judge(
    ns: &Namespace,
    name: &OsStr,
    here: &Host,
    include_kept: bool,
) -> (Entry, Option<MarkerFile>) {
    let mut entry = Entry::named(name);
    let verdict = |mut entry: Entry, state, reason: String| {
        entry.state = state;
        entry.reason = reason;
        (entry, None)
    };
    let (kind, id) = match classify(name) {
        (kind @ (EntryKind::Root | EntryKind::Pending), Some(id)) => (kind, id.to_string()),
        (EntryKind::Locks, _) => {
            return verdict(entry, EntryState::Locks, "exclusive-run locks".into())
        }
        _ => return verdict(entry, EntryState::Foreign, "name is not cleanroom's".into()),
    };
    let path = ns.path().join(name);
    let file = match Marker::read(&path, ns.user()) {
        Ok(file) => file,
        Err(problem) if problem.damaged && kind == EntryKind::Pending => {
            return if pending_is_young(&id) {
                verdict(
                    entry,
                    EntryState::Live,
                    "being created (younger than a minute)".into(),
                )
            } else {
                verdict(
                    entry,
                    EntryState::Leftover,
                    format!("a root whose creation failed, {problem}"),
                )
            };
        }
        Err(problem) if problem.damaged => {
            return verdict(
                entry,
                EntryState::Unproven,
                format!(
                    "{problem}: named like a root of ours, but nothing proves it is; after \
                     checking it, remove it by hand: {}",
                    path.display()
                ),
            )
        }
        Err(problem) => return verdict(entry, EntryState::Foreign, problem.to_string()),
    };
    let marker = &file.marker;
    if marker.run_id != id {
        let reason = format!("marker names another run ({})", marker.run_id);
        return verdict(entry, EntryState::Foreign, reason);
    }
    let owner_pid = marker.owner.pid;
    entry.describe_run(marker);
    if file.owner_holds_lock() {
        let reason = format!("owner pid {owner_pid} holds the root's lock");
        return verdict(entry, EntryState::Live, reason);
    }
    let owner_gone = match marker.owner.liveness(&marker.host, here) {
        Liveness::Dead(death) => format!("owner pid {owner_pid} is gone: {death}"),
        // A process we may not open, another host: counted as alive.
        Liveness::Alive | Liveness::Unknown => {
            let reason = format!("owner pid {owner_pid} may be alive");
            return verdict(entry, EntryState::Live, reason);
        }
    };
    let (state, reason) = dead_owner_verdict(entry.kept, include_kept, owner_gone);
    let (entry, _) = verdict(entry, state, reason);
    (entry, Some(file))
}

/// Removes a judged candidate, holding the directory and (when there is one) the marker with
/// our lock on it; an abandoned creation has no marker to keep.
fn reclaim_entry(
    ns: &Namespace,
    path: &Path,
    marker: Option<MarkerFile>,
    how: Persistence,
) -> Result<(), String> {
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
    let removal = remove::remove_entry(ns, name, &held, &marker, how);
    match removal.status {
        RemovalStatus::Removed => Ok(()),
        RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) => {
            Err(format!("{}: {reason}", removal.path.display()))
        }
    }
}
