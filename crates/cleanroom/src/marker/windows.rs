//! The marker's file on Windows: the same file name, format and version as on Linux, with the
//! owner named by its user SID and the owner process by pid + creation time (100 ns ticks). See
//! `docs/windows.md`.
//!
//! ```json
//! {"format":"cleanroom-root-marker","version":1,"run_id":"20261129T093000Z-0123456789abcdef",
//!  "owner_sid":"S-1-5-21-…-1001","owner":{"pid":4242,"start_time":133…},
//!  "host":{"boot_id":"57","pid_ns":0,"hostname":"box"},"created_unix_ms":1795944600000,
//!  "command":["cargo","test"],"keep":false,"cgroup":null}
//! ```
//!
//! Markers written by cleanroom.exe before the marker had one definition for every platform
//! say `creation_time` and have no `pid_ns` or `cgroup`; they are still read (the aliases are
//! `process::ProcessId`'s and `process::Host`'s), so the roots a crashed older runner left stay
//! reclaimable.
//!
//! The marker is also the liveness lock: the owner holds a shared `LockFileEx` lock on it for
//! its lifetime (the handle is not inheritable, so children never hold it, and Windows drops it
//! when the owner dies). A reader judging the root tries an exclusive lock: refused means alive.
//!
//! Invariants: created new (never replacing anything) before the root is published; read
//! strictly: a regular file (no reparse point) with one link, at most [`MAX_MARKER_BYTES`],
//! exactly these fields, a known version, the expected owner SID.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::AsHandle;
use std::path::Path;

use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
};

use super::{Marker, MarkerProblem, User, MARKER_FILE, MAX_MARKER_BYTES};
use crate::sys::windows as win;

/// A marker file opened by its reader, on which the liveness lock can be tried.
#[derive(Debug)]
pub struct MarkerFile {
    /// The parsed marker.
    pub marker: Marker,
    file: File,
}

impl MarkerFile {
    /// The open file (with whatever lock was taken on it).
    pub fn into_file(self) -> File {
        self.file
    }

    /// Whether the owner still holds its liveness lock (an exclusive lock is refused). When the
    /// lock is free it stays taken by us until this value is dropped, so no owner can appear.
    pub fn owner_holds_lock(&self) -> bool {
        match self.file.try_lock() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::debug!("cannot try the lock of a marker: {e}; counted as held");
                true
            }
        }
    }
}

impl Marker {
    /// Creates the marker in the directory `root` (it must not exist yet).
    pub fn write(&self, root: &Path) -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(root.join(MARKER_FILE))?;
        file.write_all(&self.to_bytes()?)
    }

    /// Opens the marker of `root` and takes the owner's shared liveness lock on it; the lock
    /// lasts as long as the returned file is open. Others may read it but not change or delete it.
    pub fn hold(root: &Path) -> std::io::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(root.join(MARKER_FILE))?;
        file.try_lock_shared().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => {
                std::io::Error::other("another process holds the marker's lock")
            }
            std::fs::TryLockError::Error(e) => e,
        })?;
        Ok(file)
    }

    /// Reads and validates the marker of the directory `root`, expecting owner `user`.
    pub fn read(root: &Path, user: &User) -> Result<MarkerFile, MarkerProblem> {
        let file = OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(root.join(MARKER_FILE))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => MarkerProblem::damaged("no marker".into()),
                _ => MarkerProblem::refused(format!("marker cannot be opened: {e}")),
            })?;
        let info = win::file_info(file.as_handle())
            .map_err(|e| MarkerProblem::refused(format!("marker: {e}")))?;
        if info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(MarkerProblem::refused("marker is a reparse point".into()));
        }
        if info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY != 0 {
            return Err(MarkerProblem::damaged(
                "marker is not a regular file".into(),
            ));
        }
        if info.nNumberOfLinks != 1 {
            return Err(MarkerProblem::refused(format!(
                "marker has {} hard links",
                info.nNumberOfLinks
            )));
        }
        let mut text = String::new();
        (&file)
            .take(MAX_MARKER_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| MarkerProblem::damaged(format!("marker is unreadable: {e}")))?;
        if text.len() as u64 > MAX_MARKER_BYTES {
            return Err(MarkerProblem::refused("marker is too large".into()));
        }
        let marker = Marker::parse(&text, user)?;
        Ok(MarkerFile { marker, file })
    }
}
