//! The per-user namespace: the one directory that holds every root, quarantine and lock of a user.
//!
//! Invariant: the namespace is used only after it has been checked, on every open, to be a real
//! directory (not a symlink) owned by the effective user with no group or other permission bits;
//! and the check applies to the very directory we then hold open (the lstat and the fstat of the
//! opened descriptor must name the same inode). Pytest's CVE-2025-71176 is the cautionary tale.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::error::IoContext;
use crate::{Error, Result};

/// The kinds of entry a namespace holds, told apart by name alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// `run-<id>`: a published root.
    Root,
    /// `.pending-run-<id>`: a root being created (or whose creator died while creating it).
    Pending,
    /// `.trash-run-<id>`: a root renamed for removal whose removal has not finished.
    Trash,
    /// `locks`: the directory of exclusive-run locks.
    Locks,
    /// Anything else: never ours.
    Foreign,
}

/// Prefix of a published root's name.
pub const ROOT_PREFIX: &str = "run-";
/// Prefix of a root that is still being created.
pub const PENDING_PREFIX: &str = ".pending-";
/// Prefix of a root that has been quarantined for removal.
pub const TRASH_PREFIX: &str = ".trash-";
/// Name of the directory of exclusive-run locks.
pub const LOCKS_DIR: &str = "locks";

/// Classifies a namespace entry by its name, and returns the run id it names (if any).
pub fn classify(name: &OsStr) -> (EntryKind, Option<&str>) {
    let Some(name) = name.to_str() else {
        return (EntryKind::Foreign, None);
    };
    if name == LOCKS_DIR {
        return (EntryKind::Locks, None);
    }
    let (kind, rest) = if let Some(rest) = name.strip_prefix(PENDING_PREFIX) {
        (EntryKind::Pending, rest)
    } else if let Some(rest) = name.strip_prefix(TRASH_PREFIX) {
        (EntryKind::Trash, rest)
    } else {
        (EntryKind::Root, name)
    };
    match rest.strip_prefix(ROOT_PREFIX) {
        Some(id) if is_valid_run_id(id) => (kind, Some(id)),
        _ => (EntryKind::Foreign, None),
    }
}

/// Run ids are `<YYYYmmddTHHMMSSZ>-<16 hex digits>`.
pub fn is_valid_run_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.len() == 33
        && bytes[..8].iter().all(u8::is_ascii_digit)
        && bytes[8] == b'T'
        && bytes[9..15].iter().all(u8::is_ascii_digit)
        && bytes[15] == b'Z'
        && bytes[16] == b'-'
        && bytes[17..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The creation time a run id carries (`YYYYmmddTHHMMSSZ`), in seconds since the Unix epoch.
///
/// The time comes from the id's creator and is used only to leave young entries to it: never as
/// proof of anything.
pub fn run_id_unix_secs(id: &str) -> Option<u64> {
    if !is_valid_run_id(id) {
        return None;
    }
    let num = |range: std::ops::Range<usize>| id[range].parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Days-from-civil (Howard Hinnant's algorithm), the inverse of the root's stamp.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()
}

/// An opened, verified namespace directory.
#[derive(Debug)]
pub struct Namespace {
    path: PathBuf,
    dir: OwnedFd,
    euid: u32,
}

impl Namespace {
    /// The default namespace of the effective user: `/tmp/cleanroom-<euid>`.
    ///
    /// Keyed on the effective uid, never on HOME or TMPDIR, which test suites redirect.
    pub fn default_path() -> PathBuf {
        PathBuf::from(format!(
            "/tmp/cleanroom-{}",
            rustix::process::geteuid().as_raw()
        ))
    }

    /// Opens `path`, creating it (mode 0700, parent must exist) when it does not exist yet.
    pub fn open_or_create(path: &Path) -> Result<Namespace> {
        match rustix::fs::mkdir(path, Mode::RWXU) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create state directory", path, e)),
        }
        Namespace::open(path)
    }

    /// Opens an existing namespace and verifies it.
    pub fn open(path: &Path) -> Result<Namespace> {
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .at("resolve current directory for", path)?
                .join(path)
        };
        let unsafe_ns = |reason: String| Error::UnsafeNamespace {
            path: path.clone(),
            reason,
        };
        let euid = rustix::process::geteuid().as_raw();
        let before = rustix::fs::lstat(&path).at("inspect state directory", &path)?;
        check_private_dir(&before, euid).map_err(unsafe_ns)?;
        let dir = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .at("open state directory", &path)?;
        let after = rustix::fs::fstat(&dir).at("inspect state directory", &path)?;
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
            return Err(unsafe_ns("it was replaced while being opened".into()));
        }
        check_private_dir(&after, euid).map_err(unsafe_ns)?;
        Ok(Namespace { path, dir, euid })
    }

    /// The namespace's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory; every operation inside the namespace is relative to it.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The effective uid that owns this namespace.
    pub fn euid(&self) -> u32 {
        self.euid
    }

    /// Another handle on the same verified directory (the descriptor is duplicated, so the
    /// handle keeps denoting the directory that was checked, wherever its path leads later).
    pub fn try_clone(&self) -> Result<Namespace> {
        let dir = rustix::io::fcntl_dupfd_cloexec(&self.dir, 0)
            .at("duplicate the descriptor of", &self.path)?;
        Ok(Namespace {
            path: self.path.clone(),
            dir,
            euid: self.euid,
        })
    }

    /// Opens (creating when needed) a private subdirectory, verified like the namespace itself.
    pub fn private_subdir(&self, name: &str) -> Result<Namespace> {
        let path = self.path.join(name);
        match rustix::fs::mkdirat(&self.dir, name, Mode::RWXU) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(Error::io("create directory", &path, e)),
        }
        Namespace::open(&path)
    }
}

/// Checks that a directory's metadata is that of a private directory of `euid`.
pub(crate) fn check_private_dir(stat: &rustix::fs::Stat, euid: u32) -> Result<(), String> {
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind == FileType::Symlink {
        return Err("it is a symbolic link".into());
    }
    if kind != FileType::Directory {
        return Err("it is not a directory".into());
    }
    if stat.st_uid != euid {
        return Err(format!(
            "it is owned by uid {}, not by the effective uid {euid}",
            stat.st_uid
        ));
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "its mode is {mode:04o}; group and other must have no access (chmod 700)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_carry_their_creation_time() {
        assert_eq!(
            run_id_unix_secs("20261129T093000Z-0123456789abcdef"),
            Some(1_795_944_600)
        );
        assert_eq!(
            run_id_unix_secs("19700101T000000Z-0123456789abcdef"),
            Some(0)
        );
        assert_eq!(run_id_unix_secs("20261329T093000Z-0123456789abcdef"), None);
        assert_eq!(run_id_unix_secs("not an id"), None);
    }

    #[test]
    fn names_are_classified_strictly() {
        let id = "20261129T093000Z-0123456789abcdef";
        assert_eq!(
            classify(OsStr::new(&format!("run-{id}"))),
            (EntryKind::Root, Some(id))
        );
        assert_eq!(
            classify(OsStr::new(&format!(".pending-run-{id}"))),
            (EntryKind::Pending, Some(id))
        );
        assert_eq!(
            classify(OsStr::new(&format!(".trash-run-{id}"))),
            (EntryKind::Trash, Some(id))
        );
        assert_eq!(classify(OsStr::new("locks")), (EntryKind::Locks, None));
        for foreign in [
            "run-",
            "run-x",
            "opencodex-test-1",
            ".trash-foo",
            &format!("run-{id}0"),
        ] {
            assert_eq!(
                classify(OsStr::new(foreign)).0,
                EntryKind::Foreign,
                "{foreign}"
            );
        }
    }
}
