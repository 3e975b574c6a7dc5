//! The lock directory on Windows (the `os` child of `lock`): `locks\` of the user's namespace,
//! opened once and verified like the namespace itself, and the files in it.
//!
//! Invariants: the directory is a real directory (no reparse point) owned by the token's user
//! SID, held open without `FILE_SHARE_DELETE` (so neither it nor the namespace above it can be
//! renamed or replaced while in use), which makes a path beneath it denote what the handle
//! denotes. Files in it are opened with `FILE_FLAG_OPEN_REPARSE_POINT` (a link is opened as
//! itself, never followed) and used only when they are regular files. Every handle is
//! `std`'s, which Windows never lets a child inherit: a lock dies with its holder. Lock files
//! are opened without `FILE_SHARE_DELETE` too, so nobody renames or deletes one that a run holds
//! or waits on; published files are written to a fresh temporary name and renamed into place.
//! The kernel lock on a lock file is `std`'s [`File::try_lock`] (`LockFileEx`, the whole file,
//! in `mod.rs`); the writer of an owner record holds an exclusive `LockFileEx` on one byte
//! beyond any content ([`RECORD_LOCK_OFFSET`]), so that every reader can still read the record
//! and probe that byte with a shared lock, as `flock` allows on Unix.
//!
//! Not on Windows: the machine scope (no directory is shared by every user) and the sweep of
//! `cleanroom gc`; both are refused with [`Error::Unsupported`].

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::windows::fs::{MetadataExt, OpenOptionsExt};
use std::os::windows::io::AsHandle;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_DELETE, FILE_SHARE_READ,
    FILE_SHARE_WRITE,
};

use super::env::{named_user_dir, LockEnv};
use super::token::Token;
use super::{lock_name, LockScope, Published, Sweep};
use crate::error::{Error, IoContext, Result};
use crate::namespace::{Namespace, User, LOCKS_DIR};
use crate::sys::windows as win;

/// Where the writer of an owner record holds its lock: one byte far beyond any record.
const RECORD_LOCK_OFFSET: u64 = u64::MAX - 1;

/// Releases the kernel lock `std`'s [`File::try_lock`] took on the whole lock file (closing the
/// handle would too, but Windows may take its time: Microsoft asks for an explicit unlock).
pub(super) fn unlock(file: &File) -> std::io::Result<()> {
    win::unlock_range(file.as_handle(), 0, u64::MAX)
}

/// Whether the owner record `file` is held open by its writer: it holds an exclusive lock on
/// the byte at [`RECORD_LOCK_OFFSET`] until it releases, so a shared one can be taken only once
/// nobody does (readers do not exclude each other).
pub(super) fn record_held_open(file: &File) -> bool {
    matches!(
        win::try_lock_range(file.as_handle(), RECORD_LOCK_OFFSET, 1, false),
        Ok(false)
    )
}

/// Tries, on a file it creates at `path`, the locks that say an owner record's writer is
/// alive, as `cleanroom doctor` measures them: the writer's exclusive lock at
/// [`RECORD_LOCK_OFFSET`] with one handle, seen held by a reader's shared probe through another.
pub(crate) fn probe_record_lock(path: &Path) -> std::io::Result<()> {
    let open = || {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .open(path)
    };
    let writer = open()?;
    if !win::try_lock_range(writer.as_handle(), RECORD_LOCK_OFFSET, 1, true)? {
        return Err(std::io::Error::other(
            "the writer's lock was refused on a fresh file",
        ));
    }
    if !record_held_open(&open()?) {
        return Err(std::io::Error::other(
            "a reader did not see the writer's lock: a live holder would look dead",
        ));
    }
    win::unlock_range(writer.as_handle(), RECORD_LOCK_OFFSET, 1)
}

/// `cleanroom gc` does not sweep `locks\` on Windows.
pub fn sweep(_ns: &Namespace, _dry_run: bool) -> Result<Sweep> {
    Err(Error::Unsupported {
        what: "sweeping the lock directory",
        reason: "Windows has no sweep of locks\\ yet (its lock files are left in place)".into(),
    })
}

/// An opened, verified lock directory.
#[derive(Debug)]
pub(super) struct LockDir {
    pub(super) scope: LockScope,
    pub(super) path: PathBuf,
    /// The directory, verified and held (it is a namespace in all but name).
    dir: Namespace,
}

impl LockDir {
    /// Who the files of this directory are written by: the token's user.
    pub(super) fn user(&self) -> User {
        self.dir.user().clone()
    }

    /// Opens the user lock directory, creating it when needed (not one
    /// [`USER_LOCK_DIR_ENV`](super::USER_LOCK_DIR_ENV) names: that must exist).
    pub(super) fn create(ns: &Namespace, scope: LockScope, env: &LockEnv) -> Result<LockDir> {
        refuse_machine(scope)?;
        if env.user_dir.is_none() {
            let path = ns.path().join(LOCKS_DIR);
            match std::fs::create_dir(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(Error::io("create lock directory", &path, e))
                }
                _ => {}
            }
        }
        LockDir::open_existing(ns, scope, env)?.ok_or_else(|| {
            Error::io(
                "open lock directory",
                ns.path().join(LOCKS_DIR),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )
        })
    }

    /// Opens the user lock directory if it exists (there is no machine one on Windows).
    pub(super) fn open_existing(
        ns: &Namespace,
        scope: LockScope,
        env: &LockEnv,
    ) -> Result<Option<LockDir>> {
        if scope == LockScope::Machine {
            return Ok(None);
        }
        let dir = match &env.user_dir {
            Some(dir) => Namespace::open(dir).map_err(|e| named_user_dir(dir, e))?,
            None => {
                let path = ns.path().join(LOCKS_DIR);
                match std::fs::symlink_metadata(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    // Namespace::open verifies what is there (a reparse point or a directory of
                    // another owner is refused).
                    _ => Namespace::open(&path)?,
                }
            }
        };
        Ok(Some(LockDir {
            scope,
            path: dir.path().to_path_buf(),
            dir,
        }))
    }

    /// Whether `file_name` still denotes the file `ours` (the same file index, not followed).
    pub(super) fn still_names(&self, file_name: &str, ours: &File) -> Result<bool> {
        let path = self.path.join(file_name);
        let mine = identity(ours).at("inspect", &path)?;
        let now = match OpenOptions::new()
            .access_mode(0)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("inspect", &path, e)),
        };
        Ok(identity(&now).at("inspect", &path)? == mine)
    }

    /// Opens `NAME.lock`, creating it if missing (never truncated), without
    /// `FILE_SHARE_DELETE`; it must be a regular file.
    pub(super) fn open_lock_file(&self, name: &str) -> Result<File> {
        let file_name = lock_name(name);
        let path = self.path.join(&file_name);
        // LockFileEx needs read or write access; creating needs write access.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(&path)
            .at("open lock file", &path)?;
        if !file.metadata().is_ok_and(|meta| regular(&meta)) {
            return Err(Error::io(
                "use lock file",
                &path,
                std::io::Error::other(
                    "it is not a regular file, so no run can hold it and every run asking for \
                     this lock fails; remove it",
                ),
            ));
        }
        Ok(file)
    }

    /// The published file `file_name` of `what` kind, opened and read (at most its
    /// [`Published::max_bytes`]), if it is a regular file of this directory and `owner` is its
    /// user; `None` for anything else, never followed. (Its owner SID and ACL are not checked:
    /// the namespace's keep others out.)
    pub(super) fn read_published(
        &self,
        file_name: &str,
        owner: &User,
        what: Published,
    ) -> Option<(File, String)> {
        if owner != self.dir.user() {
            return None;
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(self.path.join(file_name))
            .ok()?;
        let meta = file.metadata().ok()?;
        if !regular(&meta) || meta.len() > what.max_bytes() {
            return None;
        }
        what.read(file)
    }

    /// The names of the entries of this directory that are valid Unicode.
    pub(super) fn file_names(&self) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.path).at("read lock directory", &self.path)?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.at("read lock directory", &self.path)?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// Removes `file_name` (a link is removed as itself).
    pub(super) fn remove(&self, file_name: &str) -> Result<()> {
        let path = self.path.join(file_name);
        std::fs::remove_file(&path).at("remove", &path)
    }

    /// Writes `contents` to a fresh temporary file and renames it to `file_name` (replacing a
    /// stale one); on an owner record this process then holds the lock that proves its writer
    /// lives ([`record_held_open`]).
    pub(super) fn publish(
        &self,
        file_name: &str,
        contents: &[u8],
        what: Published,
    ) -> Result<File> {
        let suffix = Token::random()?;
        let tmp_path = self.path.join(format!(".{file_name}.{suffix}.tmp"));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(&tmp_path)
            .at("create", &tmp_path)?;
        let written = (|| {
            file.write_all(contents).at("write", &tmp_path)?;
            if what == Published::Record {
                let held = win::try_lock_range(file.as_handle(), RECORD_LOCK_OFFSET, 1, true)
                    .at("lock", &tmp_path)?;
                if !held {
                    return Err(Error::io(
                        "lock",
                        &tmp_path,
                        std::io::Error::other("a fresh file is locked by another process"),
                    ));
                }
            }
            let path = self.path.join(file_name);
            rename_over(&tmp_path, &path).at("publish", &path)
        })();
        if let Err(e) = written {
            drop(file);
            let _ = std::fs::remove_file(&tmp_path);
            return Err(e);
        }
        Ok(file)
    }
}

/// Renames `from` to `to`, replacing what is there. A reader that has the file being replaced
/// open (a crashed holder's stale record, read by a waiter to name the holder) makes Windows
/// refuse the rename for as long as it reads: retried for up to [`RENAME_RETRY`].
fn rename_over(from: &Path, to: &Path) -> std::io::Result<()> {
    let deadline = Instant::now() + RENAME_RETRY;
    loop {
        match std::fs::rename(from, to) {
            Err(e) if refused_while_open(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            result => return result,
        }
    }
}

/// Whether Windows refused a rename because another handle has a file open: access denied,
/// or a sharing violation (an antivirus, indexer or backup reading it; std maps that error to
/// no kind of its own).
fn refused_while_open(e: &std::io::Error) -> bool {
    use windows_sys::Win32::Foundation::ERROR_SHARING_VIOLATION;
    e.kind() == std::io::ErrorKind::PermissionDenied
        || e.raw_os_error() == Some(ERROR_SHARING_VIOLATION as i32)
}

/// How long [`rename_over`] retries (a reader holds a record open for a moment only).
const RENAME_RETRY: Duration = Duration::from_secs(2);

/// Machine-scope locks have no Windows backend.
fn refuse_machine(scope: LockScope) -> Result<()> {
    if scope == LockScope::Machine {
        return Err(Error::Unsupported {
            what: "machine-scope locks (--lock-scope machine)",
            reason: "Windows has no lock directory shared by every user; use --lock-scope user"
                .into(),
        });
    }
    Ok(())
}

/// A regular file: not a directory, not a reparse point (link or junction).
fn regular(meta: &std::fs::Metadata) -> bool {
    meta.is_file() && meta.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT == 0
}

/// What tells two files of one directory apart: the file index. (Both are on the directory's
/// volume: a regular file named in it cannot be on another. The volume serial number is not
/// compared: Wine reports 0 for a handle whose file was renamed since it was opened.)
fn identity(file: &File) -> std::io::Result<(u32, u32)> {
    let info = win::file_info(file.as_handle())?;
    Ok((info.nFileIndexHigh, info.nFileIndexLow))
}
