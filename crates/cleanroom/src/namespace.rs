//! The per-user namespace: the one directory that holds every root, quarantine and lock of a user.
//!
//! Invariant: the namespace is used only after it has been checked, on every open, to be a real
//! directory (not a symlink) owned by the effective user with no group or other permission bits;
//! and the check applies to the very directory we then hold open (the lstat and the fstat of the
//! opened descriptor must name the same inode). Pytest's CVE-2025-71176 is the cautionary tale.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

pub use crate::layout::{
    classify, is_valid_run_id, run_id_unix_secs, EntryKind, LOCKS_DIR, PENDING_PREFIX, ROOT_PREFIX,
    TRASH_PREFIX,
};

use crate::error::IoContext;
use crate::{Error, Result};

/// An opened, verified namespace directory.
#[derive(Debug)]
pub struct Namespace {
    path: PathBuf,
    dir: OwnedFd,
    euid: u32,
}

impl Namespace {
    /// The default namespace of the effective user: `/tmp/cleanroom-<euid>` (on macOS, under
    /// the per-user temp dir of `confstr(_CS_DARWIN_USER_TEMP_DIR)`, else `/tmp`).
    ///
    /// Keyed on the effective uid, never on HOME or TMPDIR, which test suites redirect.
    pub fn default_path() -> PathBuf {
        #[cfg(target_os = "macos")]
        let parent = crate::darwin::user_temp_dir().unwrap_or_else(|| PathBuf::from("/tmp"));
        #[cfg(not(target_os = "macos"))]
        let parent = PathBuf::from("/tmp");
        parent.join(format!("cleanroom-{}", rustix::process::geteuid().as_raw()))
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
