//! The namespace on Unix: `/tmp/cleanroom-<euid>` by default; opened by lstat, open
//! (`O_NOFOLLOW | O_DIRECTORY`) and fstat, which must name the same inode, a directory owned by
//! the effective uid with no group or other permission bits.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use super::{Namespace, User};
use crate::error::{Error, IoContext, Result};

/// The open namespace directory; every operation inside the namespace is relative to it.
pub(crate) type Dir = OwnedFd;

/// [`euid_default_path`]: never fails on Unix.
pub(crate) fn default_path() -> Result<PathBuf> {
    Ok(euid_default_path())
}

/// `/tmp/cleanroom-<euid>` (on macOS, under the per-user temp dir of
/// `confstr(_CS_DARWIN_USER_TEMP_DIR)`, else `/tmp`).
pub(crate) fn euid_default_path() -> PathBuf {
    #[cfg(target_os = "macos")]
    let parent = crate::sys::macos::user_temp_dir().unwrap_or_else(|| PathBuf::from("/tmp"));
    #[cfg(not(target_os = "macos"))]
    let parent = PathBuf::from("/tmp");
    parent.join(format!("cleanroom-{}", rustix::process::geteuid().as_raw()))
}

/// Creates the directory `path` (mode 0700); one that exists already is left to the check.
pub(crate) fn create_dir(path: &Path) -> std::io::Result<()> {
    match rustix::fs::mkdir(path, Mode::RWXU) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `path` made absolute against the current directory (not normalized).
pub(crate) fn absolute(path: &Path) -> Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .at("resolve current directory for", path)?
            .join(path)
    })
}

/// Opens the directory at the absolute `path` and verifies it: lstat, open, fstat of the opened
/// descriptor; both must name the same inode, a private directory of the effective uid.
pub(crate) fn open_verified(path: &Path) -> Result<(OwnedFd, User)> {
    let unsafe_ns = |reason: String| Error::UnsafeNamespace {
        path: path.to_path_buf(),
        reason,
    };
    let euid = rustix::process::geteuid().as_raw();
    let before = rustix::fs::lstat(path).at("inspect state directory", path)?;
    check_private_dir(&before, euid).map_err(unsafe_ns)?;
    let dir = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .at("open state directory", path)?;
    let after = rustix::fs::fstat(&dir).at("inspect state directory", path)?;
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
        return Err(unsafe_ns("it was replaced while being opened".into()));
    }
    check_private_dir(&after, euid).map_err(unsafe_ns)?;
    Ok((dir, User::Uid(euid)))
}

/// Another descriptor of the same directory (close-on-exec).
pub(crate) fn duplicate(dir: &OwnedFd, path: &Path) -> Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(dir, 0).at("duplicate the descriptor of", path)
}

impl Namespace {
    /// The open directory; every operation inside the namespace is relative to it.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The effective uid that owns this namespace.
    pub fn euid(&self) -> u32 {
        match self.user {
            User::Uid(uid) => uid,
            User::Sid(_) => unreachable!("a namespace opened on Unix belongs to a uid"),
        }
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
