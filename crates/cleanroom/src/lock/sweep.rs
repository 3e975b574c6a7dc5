//! Sweeping the namespace's `locks/` for `cleanroom gc`: every protected command of the user may
//! write there (so that nested runs can take user locks), so anything may be found in it. What
//! cannot be lock state, and the files of a lock nobody holds, are removed; a lock file nobody
//! needs stays (empty, one per name, as [`acquire`](super::acquire) leaves it).
//!
//! Lock state is what `unix.rs` writes, for a valid lock NAME and the effective uid: `NAME.lock`
//! (empty), `NAME.owner.UID.json` (at most 64 KiB), `NAME.token.UID` (one line), and the
//! temporary files of their publication (`.NAME.owner.UID.json.HEX.tmp`, `.NAME.token.UID.HEX.tmp`),
//! each a regular file of the effective uid with one link. Anything else is removed: another
//! name, another type (directory, symbolic link, FIFO, socket), more links, another size.
//!
//! Invariants:
//! - Nothing is followed: entries are inspected with `fstatat(AT_SYMLINK_NOFOLLOW)` and unlinked
//!   by name (a symbolic link goes, its target stays), only while their name still denotes the
//!   inode inspected. A directory goes through the removal walk (`remove::remove_contents`:
//!   descriptor-relative, never entering another filesystem), and only if it is ours. An entry
//!   on another filesystem or mount (a mount point), or of another owner, is left and reported,
//!   and a `locks/` that is itself a mount point is not swept at all.
//! - The files of a lock NAME are removed only while this sweep holds NAME's kernel lock (taken
//!   without waiting, on the lock file there, or on one it creates for the purpose), and never
//!   while an owner record of NAME is held open by its writer: a holder's files are never
//!   touched, and nobody can become a holder and publish files while the sweep removes them.
//!   A lock file is unlinked (only one that is not lock state, or one the sweep created) while
//!   the sweep holds it; a run that locked the unlinked file sees that the name no longer denotes
//!   it and opens the name again ([`LockDir::still_names`]). A lock file that is not a regular
//!   file can be held by nobody, and goes first.
//! - A dry run (`gc --dry-run`, `list`) takes no lock and changes nothing; it names what would go.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, TryLockError};
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Dev, FileType, Mode, OFlags};

use super::{mount_id, LockDir};
use crate::error::Result;
use crate::lock::token::Token;
use crate::lock::{lock_name, valid_name, Published, Sweep};
use crate::marker::MARKER_FILE;
use crate::namespace::Namespace;

/// Sweeps `locks/` of `ns` (not a directory [`USER_LOCK_DIR_ENV`](crate::lock::USER_LOCK_DIR_ENV)
/// names): see the module docs. A namespace without `locks/` has nothing to sweep.
pub fn sweep(ns: &Namespace, dry_run: bool) -> Result<Sweep> {
    let mut sweep = Sweep::default();
    let Some(dir) = LockDir::open_namespace_locks(ns)? else {
        return Ok(sweep);
    };
    if !on_the_same_mount(&dir.fd, ns.dir()) {
        let reason = "a mount point (not the namespace's own mount): not swept";
        sweep
            .errors
            .push(format!("{}: {reason}", dir.path.display()));
        return Ok(sweep);
    }
    let (loose, groups) = sweep.read(&dir)?;
    for found in &loose {
        sweep.remove(&dir, found, dry_run);
    }
    for (name, files) in groups {
        sweep.group(&dir, &name, files, dry_run);
    }
    Ok(sweep)
}

/// Which file of a lock a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Lock,
    Record,
    Token,
    Temp,
}

impl Part {
    fn max_bytes(self) -> u64 {
        match self {
            Part::Lock => 0,
            Part::Token => Published::Token.max_bytes(),
            Part::Record | Part::Temp => Published::Record.max_bytes(),
        }
    }
}

/// The lock NAME and the part that `file_name` is, in a lock directory of `euid`.
fn parse(file_name: &str, euid: u32) -> Option<(&str, Part)> {
    if let Some(inner) = file_name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
    {
        let (published, suffix) = inner.rsplit_once('.')?;
        Token::parse(suffix)?;
        let (name, part) = parse(published, euid)?;
        return matches!(part, Part::Record | Part::Token).then_some((name, Part::Temp));
    }
    let ours = |uid: &str| uid == euid.to_string();
    let (name, part) = if let Some(stem) = file_name.strip_suffix(".json") {
        let (name, _) = stem.rsplit_once(".owner.").filter(|(_, uid)| ours(uid))?;
        (name, Part::Record)
    } else if let Some((name, uid)) = file_name.rsplit_once(".token.") {
        ours(uid).then_some((name, Part::Token))?
    } else {
        (file_name.strip_suffix(".lock")?, Part::Lock)
    };
    valid_name(name).then_some((name, part))
}

/// An entry as first inspected.
struct Found {
    name: OsString,
    identity: (Dev, u64),
    kind: FileType,
    uid: u32,
    /// Whether it can be lock state (see the module docs).
    healthy: bool,
}

type Groups = BTreeMap<String, Vec<(Part, Found)>>;

impl Sweep {
    /// Reads the directory: entries of no lock, and the files of each lock NAME.
    fn read(&mut self, dir: &LockDir) -> Result<(Vec<Found>, Groups)> {
        use crate::error::IoContext;
        let dev = rustix::fs::fstat(&dir.fd).at("inspect", &dir.path)?.st_dev;
        let mut entries = rustix::fs::Dir::read_from(&dir.fd).at("read", &dir.path)?;
        let (mut loose, mut groups) = (Vec::new(), Groups::new());
        while let Some(entry) = entries.read() {
            let entry = entry.at("read", &dir.path)?;
            let name =
                <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let st = match rustix::fs::statat(&dir.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => {
                    self.left(dir, name, &format!("cannot inspect: {e}"));
                    continue;
                }
            };
            if st.st_dev != dev {
                self.left(dir, name, "on another filesystem (a mount point)");
                continue;
            }
            let kind = FileType::from_raw_mode(st.st_mode);
            let part = name.to_str().and_then(|n| parse(n, dir.euid));
            let healthy = part.is_some_and(|(_, part)| {
                kind == FileType::RegularFile
                    && st.st_nlink == 1
                    && st.st_uid == dir.euid
                    && st.st_size as u64 <= part.max_bytes()
            });
            let found = Found {
                name: name.to_os_string(),
                identity: (st.st_dev, st.st_ino),
                kind,
                uid: st.st_uid,
                healthy,
            };
            match part {
                Some((lock, part)) => groups
                    .entry(lock.to_string())
                    .or_default()
                    .push((part, found)),
                None => loose.push(found),
            }
        }
        Ok((loose, groups))
    }

    /// The files of lock `name`: removed under its kernel lock, unless it is held.
    fn group(&mut self, dir: &LockDir, name: &str, files: Vec<(Part, Found)>, dry_run: bool) {
        let (locks, others): (Vec<_>, Vec<_>) =
            files.into_iter().partition(|(part, _)| *part == Part::Lock);
        let mut lock = locks.into_iter().next().map(|(_, found)| found);
        if others.is_empty() && lock.as_ref().is_none_or(|f| f.healthy) {
            return;
        }
        let held_record = others
            .iter()
            .any(|(part, f)| *part == Part::Record && f.healthy && held_open(dir, &f.name));
        if held_record {
            return;
        }
        if let Some(found) = lock.take_if(|f| f.kind != FileType::RegularFile) {
            self.remove(dir, &found, dry_run);
        }
        if dry_run {
            let doomed = lock.iter().filter(|f| !f.healthy);
            for found in doomed.chain(others.iter().map(|(_, f)| f)) {
                self.remove(dir, found, true);
            }
            return;
        }
        let Some((guard, unlink_after)) = lock_name_now(dir, name, lock.as_ref()) else {
            return;
        };
        for (_, found) in &others {
            self.remove(dir, found, false);
        }
        if let Some(found) = unlink_after {
            let report = lock.as_ref().is_some_and(|f| f.identity == found.identity);
            if found.uid != dir.euid {
                let reason = format!("owned by uid {}, not by this user: left", found.uid);
                return self.left(dir, &found.name, &reason);
            }
            match unlink_same(dir, &found) {
                Ok(true) if report => self.removed.push(dir.path.join(&found.name)),
                Ok(_) => {}
                Err(e) => self.left(dir, &found.name, &e),
            }
        }
        drop(guard);
    }

    /// Removes one entry (or says it would), if it is ours.
    fn remove(&mut self, dir: &LockDir, found: &Found, dry_run: bool) {
        if found.uid != dir.euid {
            let reason = format!("owned by uid {}, not by this user: left", found.uid);
            return self.left(dir, &found.name, &reason);
        }
        let removed = if dry_run {
            Ok(true)
        } else if found.kind == FileType::Directory {
            remove_dir(dir, found)
        } else {
            unlink_same(dir, found)
        };
        match removed {
            Ok(true) => self.removed.push(dir.path.join(&found.name)),
            Ok(false) => {}
            Err(e) => self.left(dir, &found.name, &e),
        }
    }

    fn left(&mut self, dir: &LockDir, name: &OsStr, reason: &str) {
        let path = dir.path.join(name);
        self.errors.push(format!("{}: {reason}", path.display()));
    }
}

/// Whether the record `file_name` is held open under `flock` by its writer (a live holder).
fn held_open(dir: &LockDir, file_name: &OsStr) -> bool {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    rustix::fs::openat(&dir.fd, file_name, flags, Mode::empty())
        .map(File::from)
        .is_ok_and(|f| matches!(f.try_lock_shared(), Err(TryLockError::WouldBlock)))
}

/// Takes the kernel lock of `name` without waiting: on its regular lock file `found`, or on a
/// lock file created for the purpose when there is none. Gives the locked file and the lock file
/// to unlink before releasing it (one that is not lock state, or the one created); `None` when
/// the lock is held or being created.
fn lock_name_now(
    dir: &LockDir,
    name: &str,
    found: Option<&Found>,
) -> Option<(File, Option<Found>)> {
    let file_name = lock_name(name);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let create = found.is_none();
    let fd = if create {
        let mode = Mode::from_raw_mode(0o600);
        rustix::fs::openat(
            &dir.fd,
            &file_name,
            flags | OFlags::CREATE | OFlags::EXCL,
            mode,
        )
    } else {
        rustix::fs::openat(&dir.fd, &file_name, flags, Mode::empty())
    }
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let identity = (st.st_dev, st.st_ino);
    if found.is_some_and(|f| f.identity != identity) {
        return None;
    }
    let file = File::from(fd);
    file.try_lock().ok()?;
    let unlink = match found {
        Some(f) if f.healthy => None,
        _ => Some(Found {
            name: OsString::from(file_name),
            identity,
            kind: FileType::RegularFile,
            uid: st.st_uid,
            healthy: false,
        }),
    };
    Some((file, unlink))
}

/// Unlinks `found` if its name still denotes it; `Ok(false)` when it is gone already.
fn unlink_same(dir: &LockDir, found: &Found) -> Result<bool, String> {
    if !still_there(dir, found)? {
        return Ok(false);
    }
    match rustix::fs::unlinkat(&dir.fd, &found.name, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(format!("cannot remove: {e}")),
    }
}

/// Removes the directory `found` through the removal walk, if it is still the one inspected.
fn remove_dir(dir: &LockDir, found: &Found) -> Result<bool, String> {
    if !still_there(dir, found)? {
        return Ok(false);
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir.fd, &found.name, flags, Mode::empty())
        .map_err(|e| format!("cannot open: {e}"))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot inspect: {e}"))?;
    if (st.st_dev, st.st_ino) != found.identity {
        return Err("replaced while being removed: left".into());
    }
    if !on_the_same_mount(&fd, &dir.fd) {
        return Err("a mount point (a bind of a directory elsewhere): left".into());
    }
    let path = dir.path.join(&found.name);
    let stats = crate::remove::remove_contents(&fd, &path, None);
    // The walk keeps a marker-named file (its callers remove roots); here it is junk like the rest.
    let _ = rustix::fs::unlinkat(&fd, MARKER_FILE, AtFlags::empty());
    if let Some(problem) = stats.errors.first() {
        return Err(format!("cannot empty it: {problem}"));
    }
    if let Some(mount) = stats.mounts.first() {
        return Err(format!("{} is a mount point: left", mount.display()));
    }
    match rustix::fs::unlinkat(&dir.fd, &found.name, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(true),
        Err(e) => Err(format!("cannot remove: {e}")),
    }
}

/// Whether `fd` is on the mount (and filesystem) of `parent`: a bind mount of a directory of
/// the same filesystem shares its device, and only the mount id tells it from a plain
/// subdirectory (where the kernel cannot say, the device alone decides).
fn on_the_same_mount(fd: impl AsFd, parent: impl AsFd) -> bool {
    let dev = |fd: BorrowedFd<'_>| rustix::fs::fstat(fd).ok().map(|st| st.st_dev);
    let (fd, parent) = (fd.as_fd(), parent.as_fd());
    dev(fd).is_some() && dev(fd) == dev(parent) && mount_id(fd) == mount_id(parent)
}

/// Whether the name of `found` still denotes the inode inspected (`Ok(false)`: it is gone).
fn still_there(dir: &LockDir, found: &Found) -> Result<bool, String> {
    match rustix::fs::statat(&dir.fd, &found.name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if (st.st_dev, st.st_ino) == found.identity => Ok(true),
        Ok(_) => Err("replaced while being removed: left".into()),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(format!("cannot inspect: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_state_names_are_told_from_junk() {
        let hex = "00112233445566778899aabbccddeeff";
        let temp = |published: &str| format!(".{published}.{hex}.tmp");
        let cases = [
            ("db.lock".to_string(), Some(("db", Part::Lock))),
            ("a.b-c_d.lock".into(), Some(("a.b-c_d", Part::Lock))),
            ("db.owner.7.json".into(), Some(("db", Part::Record))),
            ("db.token.7".into(), Some(("db", Part::Token))),
            (temp("db.owner.7.json"), Some(("db", Part::Temp))),
            (temp("db.token.7"), Some(("db", Part::Temp))),
            ("db.owner.8.json".into(), None),
            ("db.token.07".into(), None),
            ("db.token.".into(), None),
            (".db.lock".into(), None),
            (temp("db.lock"), None),
            (".db.token.7.xyz.tmp".into(), None),
            ("big".into(), None),
            (".lock".into(), None),
            ("d/b.lock".into(), None),
            (format!("{}.lock", "x".repeat(65)), None),
        ];
        for (file_name, expected) in cases {
            assert_eq!(parse(&file_name, 7), expected, "{file_name}");
        }
    }
}
