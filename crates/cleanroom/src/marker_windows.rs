//! The ownership marker on Windows: the same file name, format and version as on Linux, with the
//! owner named by its user SID and the owner process by pid + creation time. See `docs/windows.md`.
//!
//! ```json
//! {"format":"cleanroom-root-marker","version":1,"run_id":"20261129T093000Z-0123456789abcdef",
//!  "owner_sid":"S-1-5-21-…-1001","owner":{"pid":4242,"creation_time":133…},
//!  "host":{"boot_id":"57","hostname":"box"},"created_unix_ms":1795944600000,
//!  "command":["cargo","test"],"keep":false}
//! ```
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
use std::os::windows::io::AsRawHandle;
use std::path::Path;

use serde::{Deserialize, Serialize};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION, FILE_ATTRIBUTE_DIRECTORY,
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_DELETE, FILE_SHARE_READ,
    FILE_SHARE_WRITE,
};

use crate::process::{Host, ProcessId};
use crate::win;

pub use crate::layout::{MARKER_FILE, MARKER_FORMAT, MARKER_VERSION, MAX_MARKER_BYTES};

/// The content of a root's ownership marker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// Always [`MARKER_FORMAT`].
    pub format: String,
    /// Always [`MARKER_VERSION`].
    pub version: u32,
    /// The run's id; the root's name is `run-<run_id>`.
    pub run_id: String,
    /// The user SID of the owner.
    pub owner_sid: String,
    /// The process that owns the root.
    pub owner: ProcessId,
    /// The boot and host of the owner.
    pub host: Host,
    /// When the root was created, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The command the run executes.
    pub command: Vec<String>,
    /// `--keep-root`: gc leaves this root alone unless asked to reclaim kept roots.
    pub keep: bool,
}

/// Why a marker was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerProblem {
    /// What is wrong, for people.
    pub reason: String,
    /// Whether the marker is merely damaged (absent, cut short, not JSON) rather than refused
    /// for what it says or how it is linked.
    pub damaged: bool,
}

impl std::fmt::Display for MarkerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

fn damaged(reason: String) -> MarkerProblem {
    MarkerProblem {
        reason,
        damaged: true,
    }
}

fn refused(reason: String) -> MarkerProblem {
    MarkerProblem {
        reason,
        damaged: false,
    }
}

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
        let mut bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        file.write_all(&bytes)
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

    /// Reads and validates the marker of the directory `root`, expecting owner `sid`.
    pub fn read(root: &Path, sid: &str) -> Result<MarkerFile, MarkerProblem> {
        let file = OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(root.join(MARKER_FILE))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => damaged("no marker".into()),
                _ => refused(format!("marker cannot be opened: {e}")),
            })?;
        // SAFETY: plain old data; all-zero is a valid value to be filled in.
        let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: `file` is open; `info` is a valid out-parameter.
        win::check(unsafe { GetFileInformationByHandle(file.as_raw_handle(), &mut info) })
            .map_err(|e| refused(format!("marker: {e}")))?;
        if info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(refused("marker is a reparse point".into()));
        }
        if info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY != 0 {
            return Err(damaged("marker is not a regular file".into()));
        }
        if info.nNumberOfLinks != 1 {
            return Err(refused(format!(
                "marker has {} hard links",
                info.nNumberOfLinks
            )));
        }
        let mut text = String::new();
        (&file)
            .take(MAX_MARKER_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| damaged(format!("marker is unreadable: {e}")))?;
        if text.len() as u64 > MAX_MARKER_BYTES {
            return Err(refused("marker is too large".into()));
        }
        let marker = Marker::parse(&text, sid)?;
        Ok(MarkerFile { marker, file })
    }

    /// Parses marker text strictly.
    pub fn parse(text: &str, sid: &str) -> Result<Marker, MarkerProblem> {
        #[derive(Deserialize)]
        struct Probe {
            format: String,
            version: u32,
        }
        let probe: Probe =
            serde_json::from_str(text).map_err(|e| damaged(format!("marker is not valid: {e}")))?;
        if probe.format != MARKER_FORMAT {
            return Err(refused(format!("unknown marker format {:?}", probe.format)));
        }
        if probe.version != MARKER_VERSION {
            return Err(refused(format!("unknown marker version {}", probe.version)));
        }
        let marker: Marker =
            serde_json::from_str(text).map_err(|e| refused(format!("marker is not valid: {e}")))?;
        if marker.owner_sid != sid {
            return Err(refused(format!(
                "marker belongs to {}, not {sid}",
                marker.owner_sid
            )));
        }
        if !crate::namespace::is_valid_run_id(&marker.run_id) {
            return Err(refused("marker has a malformed run id".into()));
        }
        Ok(marker)
    }
}
