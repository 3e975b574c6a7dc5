//! The lock directories on Unix (the `os` child of `lock`): a lock directory, opened once and
//! verified, and the files in it. Every later access is relative to the directory's
//! descriptor, with `O_NOFOLLOW`. The kernel lock is `flock`: on a lock file (`std`'s
//! [`File::try_lock`], in `mod.rs`) and, held by the writer of an owner record, on the record.
//!
//! Invariants: the user directory is a private namespace directory of the effective user; the
//! machine directory is a real directory, not a symbolic link, that others cannot empty (sticky
//! if writable by others), the one that was inspected (same inode after opening), and not a
//! run's private copy of `/tmp`. Lock files are created with `O_EXCL`, never truncated, and
//! deleted only by `sweep.rs` while it holds them; other files are published by rename of a fresh temporary file and removed only
//! while they are still the file we hold open. A token hash is read only from a private (no
//! access for group or others) regular file of our euid.

mod sweep;

use std::fs::{File, TryLockError};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

pub use sweep::sweep;

use super::env::named_user_dir;
use super::env::{LockEnv, MACHINE_DIR_ENV, PRIVATE_TMP_ENV};
use super::token::Token;
use super::{lock_name, LockScope, Published};
use crate::error::IoContext;
use crate::error::{Error, Result};
use crate::namespace::{Namespace, User, LOCKS_DIR};

/// Mode of lock files and owner records: private to the user, or readable by every waiter.
fn shared_file_mode(scope: LockScope) -> Mode {
    match scope {
        LockScope::User => Mode::from_raw_mode(0o600),
        LockScope::Machine => Mode::from_raw_mode(0o644),
    }
}

/// Releases the `flock` that `std`'s [`File::try_lock`] took on a lock file.
pub(super) fn unlock(file: &File) -> std::io::Result<()> {
    file.unlock()
}

/// Whether the owner record `file` is held open by its writer: it holds `flock(LOCK_EX)` until
/// it releases, so a shared lock can be taken only once nobody holds the record open.
pub(super) fn record_held_open(file: &File) -> bool {
    matches!(file.try_lock_shared(), Err(TryLockError::WouldBlock))
}

/// An opened, verified lock directory.
#[derive(Debug)]
pub(super) struct LockDir {
    pub(super) scope: LockScope,
    pub(super) path: PathBuf,
    pub(super) fd: OwnedFd,
    pub(super) euid: u32,
}

impl LockDir {
    /// Who the files of this directory are written by: the effective user.
    pub(super) fn user(&self) -> User {
        User::Uid(self.euid)
    }

    /// Opens the directory of `scope`, creating it when needed (not one
    /// [`USER_LOCK_DIR_ENV`](super::USER_LOCK_DIR_ENV) names: that must exist).
    pub(super) fn create(ns: &Namespace, scope: LockScope, env: &LockEnv) -> Result<LockDir> {
        let machine_dir = env.machine_dir.as_path();
        if scope == LockScope::Machine {
            check_machine_path(machine_dir)?;
            if matches!(
                rustix::fs::lstat(machine_dir),
                Err(rustix::io::Errno::NOENT)
            ) {
                check_not_private(machine_dir, None)?;
            }
            let created = match rustix::fs::mkdir(machine_dir, Mode::from_raw_mode(0o1777)) {
                Ok(()) => true,
                Err(rustix::io::Errno::EXIST) => false,
                Err(e) => return Err(Error::io("create machine lock directory", machine_dir, e)),
            };
            return LockDir::open_machine(machine_dir, created)?.ok_or_else(|| {
                Error::io(
                    "open machine lock directory",
                    machine_dir,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                )
            });
        }
        let sub = match &env.user_dir {
            Some(dir) => Namespace::open(dir).map_err(|e| named_user_dir(dir, e))?,
            None => ns.private_subdir(LOCKS_DIR)?,
        };
        LockDir::from_private(sub, ns.euid())
    }

    /// Opens the directory of `scope` if it exists.
    pub(super) fn open_existing(
        ns: &Namespace,
        scope: LockScope,
        env: &LockEnv,
    ) -> Result<Option<LockDir>> {
        if scope == LockScope::Machine {
            check_machine_path(&env.machine_dir)?;
            return LockDir::open_machine(&env.machine_dir, false);
        }
        if let Some(dir) = &env.user_dir {
            let sub = Namespace::open(dir).map_err(|e| named_user_dir(dir, e))?;
            return LockDir::from_private(sub, ns.euid()).map(Some);
        }
        LockDir::open_namespace_locks(ns)
    }

    /// Opens `locks/` of the namespace itself if it exists (whatever
    /// [`USER_LOCK_DIR_ENV`](super::USER_LOCK_DIR_ENV) says).
    pub(super) fn open_namespace_locks(ns: &Namespace) -> Result<Option<LockDir>> {
        match rustix::fs::statat(ns.dir(), LOCKS_DIR, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => Ok(None),
            // private_subdir verifies what is there (a symlink or foreign directory is refused).
            _ => Ok(Some(LockDir::from_private(
                ns.private_subdir(LOCKS_DIR)?,
                ns.euid(),
            )?)),
        }
    }

    fn from_private(sub: Namespace, euid: u32) -> Result<LockDir> {
        let fd = sub
            .dir()
            .try_clone_to_owned()
            .at("duplicate descriptor of", sub.path())?;
        Ok(LockDir {
            scope: LockScope::User,
            path: sub.path().to_path_buf(),
            fd,
            euid,
        })
    }

    /// Opens and verifies the machine directory; `created`: we just made it, so set its mode.
    fn open_machine(path: &Path, created: bool) -> Result<Option<LockDir>> {
        let unsafe_dir = |reason: String| Error::UnsafeNamespace {
            path: path.to_path_buf(),
            reason: format!("{reason} (machine lock directory, see `cleanroom::lock`)"),
        };
        let before = match rustix::fs::lstat(path) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Error::io("inspect machine lock directory", path, e)),
        };
        check_shared_dir(&before).map_err(unsafe_dir)?;
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .at("open machine lock directory", path)?;
        let mut after = rustix::fs::fstat(&fd).at("inspect machine lock directory", path)?;
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
            return Err(unsafe_dir("it was replaced while being opened".into()));
        }
        check_not_private(path, Some(&fd))?;
        let euid = rustix::process::geteuid().as_raw();
        if created && after.st_uid == euid {
            // mkdir's mode was cut by the umask; a shared directory must be exactly 1777.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o1777))
                .at("set the mode of machine lock directory", path)?;
            after = rustix::fs::fstat(&fd).at("inspect machine lock directory", path)?;
        }
        check_shared_dir(&after).map_err(unsafe_dir)?;
        Ok(Some(LockDir {
            scope: LockScope::Machine,
            path: path.to_path_buf(),
            fd,
            euid,
        }))
    }

    /// Whether `file_name` still denotes the file `ours` (same device and inode, not followed).
    pub(super) fn still_names(&self, file_name: &str, ours: &File) -> Result<bool> {
        let path = || self.path.join(file_name);
        let mine = rustix::fs::fstat(ours).at("inspect", path())?;
        match rustix::fs::statat(&self.fd, file_name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok((st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(Error::io("inspect", path(), e)),
        }
    }

    /// The error for a `NAME.lock` that no run can lock (`what` it is instead), saying how to
    /// get rid of it.
    fn not_a_lock_file(&self, file_name: &str, what: &str) -> Error {
        let remedy = match self.scope {
            LockScope::User => "`cleanroom gc` removes it",
            LockScope::Machine => "remove it (cleanroom never makes one)",
        };
        Error::io(
            "use lock file",
            self.path.join(file_name),
            std::io::Error::other(format!(
                "{what}, so no run can hold it and every run asking for this lock fails; {remedy}"
            )),
        )
    }

    /// Opens `NAME.lock` read-only (flock needs no more), creating it if missing. Never
    /// truncates; `O_CREAT` is used only with `O_EXCL`, so an existing file of another user in
    /// a sticky directory (refused by `fs.protected_regular`) is simply opened.
    pub(super) fn open_lock_file(&self, name: &str) -> Result<File> {
        let file_name = lock_name(name);
        let path = || self.path.join(&file_name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let mode = shared_file_mode(self.scope);
        let fd = loop {
            match rustix::fs::openat(&self.fd, &file_name, flags, Mode::empty()) {
                Ok(fd) => break fd,
                Err(rustix::io::Errno::NOENT) => {}
                Err(rustix::io::Errno::LOOP) => {
                    return Err(self.not_a_lock_file(&file_name, "it is a symbolic link"))
                }
                Err(rustix::io::Errno::NXIO) => {
                    return Err(self.not_a_lock_file(&file_name, "it is a socket"))
                }
                Err(e) => return Err(Error::io("open lock file", path(), e)),
            }
            match rustix::fs::openat(
                &self.fd,
                &file_name,
                flags | OFlags::CREATE | OFlags::EXCL,
                mode,
            ) {
                Ok(fd) => {
                    rustix::fs::fchmod(&fd, mode).at("set the mode of lock file", path())?;
                    break fd;
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(Error::io("create lock file", path(), e)),
            }
        };
        let st = rustix::fs::fstat(&fd).at("inspect lock file", path())?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(self.not_a_lock_file(&file_name, "it is not a regular file"));
        }
        Ok(File::from(fd))
    }

    /// The published file `file_name` of `what` kind, opened and read (at most its
    /// [`Published::max_bytes`]), if it is a regular file of `owner` (a token file also private
    /// to it: no access for group or others); `None` for anything else, never followed.
    pub(super) fn read_published(
        &self,
        file_name: &str,
        owner: &User,
        what: Published,
    ) -> Option<(File, String)> {
        let fd = rustix::fs::openat(
            &self.fd,
            file_name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        let ours = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && Some(st.st_uid) == owner.uid()
            && st.st_size as u64 <= what.max_bytes()
            && (what != Published::Token || st.st_mode & 0o077 == 0);
        if !ours {
            return None;
        }
        what.read(File::from(fd))
    }

    /// The names of the entries of this directory that are valid UTF-8 (no other can be a file
    /// of a lock).
    pub(super) fn file_names(&self) -> Result<Vec<String>> {
        let mut entries =
            rustix::fs::Dir::read_from(&self.fd).at("read lock directory", &self.path)?;
        let mut names = Vec::new();
        while let Some(entry) = entries.read() {
            let entry = entry.at("read lock directory", &self.path)?;
            if let Ok(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    /// Removes `file_name` (not followed).
    pub(super) fn remove(&self, file_name: &str) -> Result<()> {
        rustix::fs::unlinkat(&self.fd, file_name, AtFlags::empty())
            .at("remove", self.path.join(file_name))
    }

    /// Writes `contents` to a fresh temporary file and renames it to `file_name`: a token file
    /// of mode 0600, or an owner record of the scope's mode on which this process then holds
    /// `flock(LOCK_EX)` (proof that its writer lives).
    pub(super) fn publish(
        &self,
        file_name: &str,
        contents: &[u8],
        what: Published,
    ) -> Result<File> {
        let (mode, hold) = match what {
            Published::Token => (Mode::from_raw_mode(0o600), false),
            Published::Record => (shared_file_mode(self.scope), true),
        };
        let suffix = Token::random()?;
        let tmp = format!(".{file_name}.{suffix}.tmp");
        let tmp_path = self.path.join(&tmp);
        let fd = rustix::fs::openat(
            &self.fd,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )
        .at("create", &tmp_path)?;
        let mut file = File::from(fd);
        let written = (|| {
            rustix::fs::fchmod(&file, mode).at("set the mode of", &tmp_path)?;
            if hold {
                file.try_lock().map_err(|e| {
                    Error::io("lock", &tmp_path, std::io::Error::other(e.to_string()))
                })?;
            }
            file.write_all(contents).at("write", &tmp_path)?;
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, file_name)
                .at("publish", self.path.join(file_name))
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written.map(|()| file)
    }
}

/// Refuses a machine lock directory that would be a run's private copy: inside a run whose
/// `/tmp` is private ([`PRIVATE_TMP_ENV`] names the private directories), a directory there is
/// the host's only where the run kept it (its namespace, its machine lock directory when it
/// existed as the run started, `--share-tmp`): on a mount of its own. Decided by mount identity:
/// the directory (`opened`), or, not made yet, its nearest existing ancestor, on the private
/// directory's own mount lives in the run's view, where a lock excludes nobody else.
fn check_not_private(path: &Path, opened: Option<&OwnedFd>) -> Result<()> {
    let Some(private) = std::env::var_os(PRIVATE_TMP_ENV) else {
        return Ok(());
    };
    let Some(dir) = std::env::split_paths(&private).find(|dir| path.starts_with(dir)) else {
        return Ok(());
    };
    let ancestor;
    let here = match opened {
        Some(fd) => fd,
        None => {
            let found = path.ancestors().find_map(|p| {
                rustix::fs::open(p, IDENTITY_ONLY | OFlags::CLOEXEC, Mode::empty()).ok()
            });
            match found {
                Some(fd) => {
                    ancestor = fd;
                    &ancestor
                }
                None => return Ok(()),
            }
        }
    };
    let private_mount = rustix::fs::open(&dir, IDENTITY_ONLY | OFlags::CLOEXEC, Mode::empty())
        .ok()
        .and_then(|fd| mount_id(&fd));
    if private_mount.is_some() && mount_id(here) != private_mount {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "the machine lock directory {} {} in this run's private {} (not the host's: it did not \
         exist there as the run started, or the run does not keep it), so a lock there would \
         exclude no other run; make it outside any run first (mkdir -m 1777 {}), or set \
         {MACHINE_DIR_ENV}",
        path.display(),
        if opened.is_some() {
            "is"
        } else {
            "would be made"
        },
        dir.display(),
        path.display()
    )))
}

/// How a path is opened only to learn which mount it is on (`O_PATH` where there is one).
#[cfg(target_os = "linux")]
const IDENTITY_ONLY: OFlags = OFlags::PATH;
#[cfg(not(target_os = "linux"))]
const IDENTITY_ONLY: OFlags = OFlags::RDONLY;

/// The id of the mount `fd` is on (statx), if the kernel says (Linux 5.8).
#[cfg(target_os = "linux")]
pub(super) fn mount_id(fd: impl AsFd) -> Option<u64> {
    use rustix::fs::StatxFlags;
    let st = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).ok()?;
    (st.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(st.stx_mnt_id)
}

/// macOS has no private `/tmp` (and no statx).
#[cfg(not(target_os = "linux"))]
pub(super) fn mount_id(_: impl AsFd) -> Option<u64> {
    None
}

/// Refuses a relative machine lock directory.
fn check_machine_path(path: &Path) -> Result<()> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "the machine lock directory must be an absolute path, not {} (set by {MACHINE_DIR_ENV}?)",
            path.display()
        )))
    }
}

/// Checks that a machine lock directory is a real directory that others cannot empty.
fn check_shared_dir(st: &rustix::fs::Stat) -> Result<(), String> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {}
        FileType::Symlink => return Err("it is a symbolic link".into()),
        _ => return Err("it is not a directory".into()),
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "its mode is {mode:04o}: writable by others without the sticky bit, so anyone could \
             delete or replace lock files (chmod 1777)"
        ));
    }
    Ok(())
}
