//! The per-user namespace: the one directory that holds every root, quarantine and lock of a
//! user ([`User`]: the effective uid on Unix, the user SID on Windows).
//!
//! Invariant: the namespace is used only after it has been checked, on every open, to be a real
//! directory (no symlink, no reparse point) owned by its user and closed to others, and the
//! check applies to the very directory we then hold open. How, and where the default namespace
//! is, is the private `os` child's: `unix.rs` (lstat, open, fstat: the same inode, mode 0700)
//! and `windows.rs` (a handle held without `FILE_SHARE_DELETE`, its owner SID). Pytest's
//! CVE-2025-71176 is the cautionary tale.

#[cfg(unix)]
#[path = "unix.rs"]
pub(crate) mod os;
#[cfg(windows)]
#[path = "windows.rs"]
pub(crate) mod os;

use std::path::{Path, PathBuf};

pub use crate::layout::{
    classify, is_valid_run_id, run_id_unix_secs, EntryKind, LOCKS_DIR, PENDING_PREFIX, ROOT_PREFIX,
    TRASH_PREFIX,
};

use crate::error::{IoContext, Result};

/// Who owns a namespace and the roots in it: the effective uid on Unix, the user SID
/// (`S-1-5-21-…`) of the process token on Windows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum User {
    /// A Unix uid.
    Uid(u32),
    /// A Windows user SID, as a string.
    Sid(String),
}

impl User {
    /// The uid, for a Unix user.
    pub fn uid(&self) -> Option<u32> {
        match self {
            User::Uid(uid) => Some(*uid),
            User::Sid(_) => None,
        }
    }

    /// The user a record names by its two exclusive fields (`euid` on Unix, `owner_sid` on
    /// Windows), as markers and lock owner records write it; `whom` is what the record calls
    /// that user in the error (`owner`, `user`).
    pub(crate) fn from_fields(
        euid: Option<u32>,
        owner_sid: Option<String>,
        whom: &str,
    ) -> std::result::Result<User, String> {
        match (euid, owner_sid) {
            (Some(uid), None) => Ok(User::Uid(uid)),
            (None, Some(sid)) => Ok(User::Sid(sid)),
            (None, None) => Err(format!("it names no {whom} (`euid` or `owner_sid`)")),
            (Some(_), Some(_)) => Err(format!("it names two {whom}s (`euid` and `owner_sid`)")),
        }
    }

    /// The two exclusive fields a record writes for this user (see [`User::from_fields`]).
    pub(crate) fn into_fields(self) -> (Option<u32>, Option<String>) {
        match self {
            User::Uid(uid) => (Some(uid), None),
            User::Sid(sid) => (None, Some(sid)),
        }
    }
}

impl std::fmt::Display for User {
    /// `uid 1000`, or the SID.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            User::Uid(uid) => write!(f, "uid {uid}"),
            User::Sid(sid) => f.write_str(sid),
        }
    }
}

/// An opened, verified namespace directory.
#[derive(Debug)]
pub struct Namespace {
    path: PathBuf,
    /// The verified directory, held open (on Windows without `FILE_SHARE_DELETE`: nobody renames
    /// or removes it meanwhile).
    dir: os::Dir,
    user: User,
}

impl Namespace {
    /// The default namespace of the user: `/tmp/cleanroom-<euid>` (on macOS, under the per-user
    /// temp dir of `confstr(_CS_DARWIN_USER_TEMP_DIR)`, else `/tmp`), or
    /// `<LocalAppData>\cleanroom-<SID>` on Windows (which fails when the token's user SID or
    /// the known folder cannot be read).
    ///
    /// Keyed on the user's identity, never on HOME, TMPDIR, USERPROFILE, LOCALAPPDATA or TEMP,
    /// which test suites redirect.
    pub fn default_path() -> Result<PathBuf> {
        os::default_path()
    }

    /// Opens `path`, creating it (private to the user; its parent must exist) when it does not
    /// exist yet.
    pub fn open_or_create(path: &Path) -> Result<Namespace> {
        os::create_dir(path).at("create state directory", path)?;
        Namespace::open(path)
    }

    /// Opens an existing namespace and verifies it.
    pub fn open(path: &Path) -> Result<Namespace> {
        let path = os::absolute(path)?;
        let (dir, user) = os::open_verified(&path)?;
        Ok(Namespace { path, dir, user })
    }

    /// The namespace's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The user who owns this namespace.
    pub fn user(&self) -> &User {
        &self.user
    }

    /// Another handle on the same verified directory (the descriptor or handle is duplicated,
    /// so it keeps denoting the directory that was checked, wherever its path leads later).
    pub fn try_clone(&self) -> Result<Namespace> {
        Ok(Namespace {
            path: self.path.clone(),
            dir: os::duplicate(&self.dir, &self.path)?,
            user: self.user.clone(),
        })
    }
}
