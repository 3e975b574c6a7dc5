//! Judging one namespace entry: is it ours, whose is it, and is its owner provably dead?
//!
//! Read-only except for the exclusive lock taken on a candidate (and kept, so that no other gc
//! works on it). The order of checks is the one in `docs/removal.md`; what is done with the
//! verdict (killing, removing) is the caller's.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Dev, FileType, FlockOperation, Mode, OFlags};

use crate::marker::{Kept, Marker, MarkerProblem, MARKER_FILE, MAX_MARKER_BYTES};
use crate::namespace::{self, EntryKind, Namespace};
use crate::process::{Host, Liveness};
use crate::reclaim::{dead_owner_verdict, now_secs, pending_is_young, Entry, EntryState};

/// An entry judged, with its directory still open when it may be reclaimed.
pub(super) struct Judged {
    pub entry: Entry,
    pub kind: EntryKind,
    /// Open and locked exclusively for `Stale` and `Leftover`; open, not locked, for `Locked`.
    pub dir: Option<OwnedFd>,
    /// The valid marker, when there is one.
    pub marker: Option<Marker>,
    /// The directory's identity when first seen, to tell whether its name still denotes it.
    pub identity: Option<(Dev, u64)>,
    /// Why the marker's owner is not the root's owner any more, once that is proven: the
    /// reason a dead owner's root is reclaimed for.
    owner_gone: String,
}

impl Judged {
    fn new(entry: Entry, kind: EntryKind) -> Judged {
        Judged {
            entry,
            kind,
            dir: None,
            marker: None,
            identity: None,
            owner_gone: String::new(),
        }
    }

    fn state(mut self, state: EntryState, reason: impl Into<String>) -> Judged {
        self.entry.state = state;
        self.entry.reason = reason.into();
        self
    }

    /// The final verdict `state`: the directory is closed (and its lock, if taken, released).
    pub fn left(mut self, state: EntryState, reason: impl Into<String>) -> Judged {
        self.dir = None;
        self.state(state, reason)
    }

    /// Whether the entry's name still denotes the directory first seen.
    pub fn still_named(&self, ns: &Namespace) -> bool {
        let name = self.entry.raw_name.as_os_str();
        let now = rustix::fs::statat(ns.dir(), name, AtFlags::SYMLINK_NOFOLLOW);
        now.is_ok_and(|st| Some((st.st_dev, st.st_ino)) == self.identity)
    }

    /// Takes the exclusive lock on the open directory without waiting; true when taken.
    pub fn try_lock(&self) -> bool {
        self.dir.as_ref().is_some_and(|dir| {
            rustix::fs::flock(dir, FlockOperation::NonBlockingLockExclusive).is_ok()
        })
    }

    /// The state of a dead owner's entry whose lock this gc now holds. A root kept on failure
    /// stays open and locked: how many newer ones were kept decides ([`Judged::retained`]).
    pub fn dead_and_locked(self, include_kept: bool) -> Judged {
        if self.kind == EntryKind::Trash {
            // A quarantined root is already half removed, kept or not: finish it.
            return self.state(EntryState::Leftover, "removal did not finish");
        }
        let kept = self.entry.kept;
        let (state, reason) = dead_owner_verdict(kept, include_kept, self.owner_gone.clone());
        if state == EntryState::Kept && kept == Some(Kept::Always) {
            self.left(state, reason)
        } else {
            self.state(state, reason)
        }
    }

    /// Whether this is a kept root whose owner is provably dead (its marker is known only then).
    pub fn is_kept_of_dead_run(&self) -> bool {
        self.entry.state == EntryState::Kept && self.marker.is_some()
    }

    /// When this root was created, if it is a root kept on failure whose dead owner's lock this
    /// gc holds: whether it stays is for [`Judged::retained`] to say.
    pub fn retention_applies(&self) -> Option<u64> {
        let open_and_kept = self.entry.state == EntryState::Kept && self.dir.is_some();
        self.marker
            .as_ref()
            .filter(|_| open_and_kept)
            .map(|m| m.created_unix_ms)
    }

    /// The verdict on a root kept on failure (see [`Judged::retention_applies`]) when `newer`
    /// newer roots were kept on failure: stale once they are as many as it waits for.
    pub fn retained(mut self, newer: usize) -> Judged {
        let Some(Kept::OnFailure {
            exit_status,
            retain,
        }) = self.entry.kept
        else {
            return self;
        };
        if newer >= retain as usize {
            let owner_gone = std::mem::take(&mut self.owner_gone);
            self.state(
                EntryState::Stale,
                format!(
                    "kept on failure (exit status {exit_status}), until {retain} newer roots \
                     were kept on failure: {newer} were; {owner_gone}"
                ),
            )
        } else {
            self.left(
                EntryState::Kept,
                format!(
                    "kept on failure (exit status {exit_status}): gc reclaims it once {retain} \
                     newer roots were kept on failure ({newer} so far), gc --kept at once"
                ),
            )
        }
    }
}

/// Judges the entry `name` of `ns` as seen from `here`.
pub(super) fn judge(ns: &Namespace, name: &OsStr, here: &Host, include_kept: bool) -> Judged {
    let (kind, id) = namespace::classify(name);
    let judged = Judged::new(Entry::named(name), kind);
    let run_id = match (kind, id) {
        (EntryKind::Locks, _) => return judged.state(EntryState::Locks, "exclusive-run locks"),
        (EntryKind::Foreign, _) | (_, None) => {
            return judged.state(EntryState::Foreign, "name is not cleanroom's")
        }
        (_, Some(id)) => id.to_string(),
    };
    let Opened {
        dir,
        identity,
        ctime,
    } = match open_own_dir(ns, name) {
        Ok(opened) => opened,
        Err((state, reason)) => return judged.state(state, reason),
    };
    let mut judged = judged;
    judged.identity = Some(identity);
    judged.entry.age_secs = Some(now_secs().saturating_sub(ctime));
    let marker = match Marker::read(dir.as_fd(), ns.user()) {
        Ok(marker) => marker,
        Err(problem) => return without_marker(ns, judged, dir, &run_id, &problem),
    };
    if marker.run_id != run_id {
        return judged.state(
            EntryState::Foreign,
            format!("marker names another run ({})", marker.run_id),
        );
    }
    judged.entry.describe_run(&marker);
    let owner_pid = marker.owner.pid;
    // Owner death decides first: a lock held while the owner is dead belongs to something the
    // run left behind (or to another gc), which the caller sorts out. A live owner holds its
    // published root's lock until the root is renamed away (module doc of `root`), so a
    // recorded owner that is alive while that lock is free is not the owner: the run forged
    // its marker, or its owner let the root go (kept, or left for gc). The same holds for an
    // owner this gc cannot see (another pid namespace or host name on this kernel: the boot id
    // is ours, and the lock is this kernel's). Only a published root is judged so: the run's
    // command can reach no other entry, and an owner whose removal gave up lets its
    // quarantined root go while it lives.
    let (alive_because, not_owner) = match marker.owner.liveness(&marker.host, here) {
        Liveness::Dead(death) => (None, format!("owner pid {owner_pid} is gone: {death}")),
        Liveness::Alive => (
            Some(format!("owner pid {owner_pid} is alive")),
            format!(
                "owner pid {owner_pid} is alive but does not hold the root's lock: not its owner"
            ),
        ),
        Liveness::Unknown => (
            Some("owner ran in another pid namespace or host; cannot prove it is dead".into()),
            format!(
                "owner pid {owner_pid} ran in another pid namespace or host and does not hold \
                 the root's lock: not its owner"
            ),
        ),
    };
    if let (Some(why), false) = (&alive_because, judged.kind == EntryKind::Root) {
        return judged.state(EntryState::Live, why.clone());
    }
    judged.dir = Some(dir);
    // Also for a root whose lock is held: the caller settles it and may reclaim it later.
    judged.owner_gone = not_owner;
    if !judged.try_lock() {
        if let Some(why) = alive_because {
            return judged.left(EntryState::Live, why);
        }
        judged.marker = Some(marker);
        return judged.state(
            EntryState::Locked,
            format!("owner pid {owner_pid} is gone, but its lock is held"),
        );
    }
    judged.marker = Some(marker);
    // The owner may have removed the root and released its lock between our open and our lock
    // (a run that just finished): the lock is then on a deleted directory. Only an entry whose
    // name still denotes the directory we hold and lock is judged further.
    if !judged.still_named(ns) {
        return judged.left(
            EntryState::Live,
            "removed or replaced while being inspected",
        );
    }
    judged.dead_and_locked(include_kept)
}

/// What step 2 found: the opened directory, its identity and its change time.
struct Opened {
    dir: OwnedFd,
    identity: (Dev, u64),
    ctime: u64,
}

/// Step 2 of the checks: a real directory (never a symlink) owned by the effective uid, and the
/// directory opened is the one inspected. `Err` carries the final verdict.
fn open_own_dir(ns: &Namespace, name: &OsStr) -> Result<Opened, (EntryState, String)> {
    let verdict = |state, reason: String| Err((state, reason));
    let before = match rustix::fs::statat(ns.dir(), name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => {
            return verdict(EntryState::Live, "removed while being inspected".into())
        }
        Err(e) => return verdict(EntryState::Foreign, format!("cannot inspect: {e}")),
    };
    if FileType::from_raw_mode(before.st_mode) != FileType::Directory {
        return verdict(
            EntryState::Foreign,
            "not a directory (symlinks are never followed)".into(),
        );
    }
    if before.st_uid != ns.euid() {
        return verdict(
            EntryState::Foreign,
            format!("owned by uid {}", before.st_uid),
        );
    }
    let dir = match rustix::fs::openat(
        ns.dir(),
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return verdict(EntryState::Foreign, format!("cannot open: {e}")),
    };
    match rustix::fs::fstat(&dir) {
        Ok(st) if (st.st_dev, st.st_ino) == (before.st_dev, before.st_ino) => Ok(Opened {
            dir,
            identity: (before.st_dev, before.st_ino),
            ctime: before.st_ctime as u64,
        }),
        _ => verdict(EntryState::Live, "replaced while being inspected".into()),
    }
}

/// An entry with our name but no acceptable marker. Only what cannot hold anything to lose is
/// ever reclaimed: an empty directory, or the skeleton a failed creation leaves in a pending
/// directory (a damaged marker and empty layout directories). A damaged root is reported as
/// unproven, with the command that removes it; everything else is foreign.
fn without_marker(
    ns: &Namespace,
    mut judged: Judged,
    dir: OwnedFd,
    run_id: &str,
    problem: &MarkerProblem,
) -> Judged {
    let pending_young = judged.kind == EntryKind::Pending && pending_is_young(run_id);
    let shape = if is_empty_dir(&dir) {
        Some("empty")
    } else if judged.kind == EntryKind::Pending && problem.damaged && is_skeleton(&dir, ns.euid()) {
        Some("a root whose creation failed")
    } else {
        None
    };
    match shape {
        Some(_) if pending_young => {
            judged.state(EntryState::Live, "being created (younger than a minute)")
        }
        Some(shape) => {
            // An owner that has just unlinked its marker is about to remove this directory and
            // still holds its lock: leave it to the owner.
            judged.dir = Some(dir);
            if !judged.try_lock() {
                return judged.left(EntryState::Live, "being created or removed by its owner");
            }
            if !judged.still_named(ns) {
                return judged.left(
                    EntryState::Live,
                    "removed or replaced while being inspected",
                );
            }
            judged.state(EntryState::Leftover, format!("{shape}, {problem}"))
        }
        _ if problem.damaged => {
            let path = ns.path().join(&judged.entry.raw_name);
            judged.state(
                EntryState::Unproven,
                format!(
                    "{problem}: named like a root of ours, but nothing proves it is; \
                     after checking it, remove it with: rm -rf --one-file-system -- {}",
                    path.display()
                ),
            )
        }
        _ => judged.state(EntryState::Foreign, problem.to_string()),
    }
}

pub(super) fn is_empty_dir(dir: &OwnedFd) -> bool {
    names_in(dir).is_some_and(|names| names.is_empty())
}

/// The names in a directory (without `.` and `..`), or `None` when it cannot be read.
fn names_in(dir: &OwnedFd) -> Option<Vec<Vec<u8>>> {
    let mut d = rustix::fs::Dir::read_from(dir).ok()?;
    let mut names = Vec::new();
    while let Some(entry) = d.read() {
        let n = entry.ok()?.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            names.push(n);
        }
    }
    Some(names)
}

/// The directories a creation makes below the root, each of which must be empty in a skeleton;
/// `homes` may hold one empty directory per tool-home variable.
const XDG_DIRS: [&str; 5] = ["config", "cache", "data", "state", "runtime"];

/// Whether the pending directory holds only what `Root::create` makes before the run starts: the
/// marker (a regular file of ours with one link, however damaged its content) and empty layout
/// directories. Nothing of a run's making can be in it: no command ever runs in a pending root.
fn is_skeleton(dir: &OwnedFd, euid: u32) -> bool {
    let Some(names) = names_in(dir) else {
        return false;
    };
    names.iter().all(|name| match name.as_slice() {
        n if n == MARKER_FILE.as_bytes() => is_own_small_file(dir, MARKER_FILE, euid),
        b"home" | b"tmp" => is_empty_subdir(dir, name, &[]),
        b"xdg" => is_empty_subdir(dir, name, &XDG_DIRS),
        b"homes" => is_empty_subdir(dir, name, &["*"]),
        _ => false,
    })
}

fn is_own_small_file(dir: &OwnedFd, name: &str, euid: u32) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && st.st_nlink == 1
            && st.st_uid == euid
            && st.st_size as u64 <= MAX_MARKER_BYTES
    })
}

/// Whether `name` is a directory (on the same device, never a symlink) whose entries are empty
/// directories named in `allowed` (`"*"`: any name).
fn is_empty_subdir(parent: &OwnedFd, name: &[u8], allowed: &[&str]) -> bool {
    let Some(sub) = open_subdir(parent, name) else {
        return false;
    };
    let Some(names) = names_in(&sub) else {
        return false;
    };
    names.iter().all(|n| {
        let known = allowed
            .iter()
            .any(|a| *a == "*" || a.as_bytes() == n.as_slice());
        known && open_subdir(&sub, n).is_some_and(|d| is_empty_dir(&d))
    })
}

fn open_subdir(parent: &OwnedFd, name: &[u8]) -> Option<OwnedFd> {
    let fd = rustix::fs::openat(
        parent,
        OsStr::from_bytes(name),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let same_device = match (rustix::fs::fstat(parent), rustix::fs::fstat(&fd)) {
        (Ok(p), Ok(c)) => p.st_dev == c.st_dev,
        _ => false,
    };
    same_device.then_some(fd)
}

/// Removes a skeleton or an empty directory judged `Leftover` without a marker: each layout
/// directory with `rmdir`, the damaged marker by its name, then the entry itself — never
/// recursively, so a directory that gained content meanwhile simply stays.
pub(super) fn remove_skeleton(ns: &Namespace, judged: &Judged) -> Result<(), String> {
    let dir = judged.dir.as_ref().expect("an open leftover");
    let path = ns.path().join(&judged.entry.raw_name);
    let rmdir = |parent: &OwnedFd, sub: &[u8]| -> Result<(), String> {
        let name = OsStr::from_bytes(sub);
        match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(format!("{}: {e}", path.join(name).display())),
        }
    };
    for top in [&b"xdg"[..], b"homes"] {
        if let Some(sub) = open_subdir(dir, top) {
            for name in names_in(&sub).unwrap_or_default() {
                rmdir(&sub, &name)?;
            }
        }
    }
    for top in [&b"home"[..], b"tmp", b"xdg", b"homes"] {
        rmdir(dir, top)?;
    }
    if is_own_small_file(dir, MARKER_FILE, ns.euid()) {
        match rustix::fs::unlinkat(dir, MARKER_FILE, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(format!("{}: {e}", path.join(MARKER_FILE).display())),
        }
    }
    if !judged.still_named(ns) {
        return Err(format!("{}: replaced while being removed", path.display()));
    }
    rustix::fs::unlinkat(ns.dir(), &judged.entry.raw_name, AtFlags::REMOVEDIR)
        .map_err(|e| format!("{}: {e}", path.display()))
}
