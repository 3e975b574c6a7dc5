//! One run's root on Windows: created under a pending name, marked, published by a rename that
//! never replaces anything, held for the owner's lifetime, and removed at the end — by
//! [`Root::close`], or when the [`Root`] is dropped.
//!
//! Invariants:
//! - the marker exists before the root is visible under its published name (`run-<id>`);
//! - from publication until removal the owner holds the root directory open without
//!   `FILE_SHARE_DELETE` (nobody renames or replaces it) and a shared lock on the marker (the
//!   liveness lock: not inherited by children, dropped by Windows when the owner dies). The short
//!   gap between the rename and the lock is covered by the owner proof: gc reclaims only a root
//!   whose lock is free AND whose recorded owner is provably dead;
//! - `home\AppData\Local` and `home\AppData\Roaming` exist, for LOCALAPPDATA and APPDATA;
//! - a creation that fails part-way removes what it made under its pending name.

use std::fs::File;
use std::os::windows::io::OwnedHandle;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use windows_sys::Win32::Storage::FileSystem::MoveFileExW;

pub use crate::layout::{new_run_id, Layout, LAYOUT_DIRS};

use crate::error::IoContext;
use crate::marker::{Marker, MARKER_FILE, MARKER_FORMAT, MARKER_VERSION};
use crate::namespace::{open_dir, Namespace, PENDING_PREFIX, ROOT_PREFIX};
use crate::process::{Host, ProcessId};
use crate::remove::{self, Removal, RemovalStatus};
use crate::{win, Error, Result};

/// The Windows profile directories inside `home/`, in creation order.
pub const PROFILE_DIRS: [&str; 3] = [
    r"home\AppData",
    r"home\AppData\Local",
    r"home\AppData\Roaming",
];

/// What a root is created for.
#[derive(Clone, Debug, Default)]
pub struct RootOptions {
    /// The command the run executes (recorded in the marker).
    pub command: Vec<String>,
    /// Keep the root after the run (`--keep-root`).
    pub keep: bool,
    /// Variables that get their own directory `homes\<VAR>`.
    pub homes: Vec<String>,
}

/// A live root owned by this process. Dropping it removes it (problems logged through
/// `tracing`); [`Root::close`] does the same and says how it went; [`Root::keep`] leaves it.
#[derive(Debug)]
pub struct Root {
    run_id: String,
    path: PathBuf,
    /// The root directory, held without FILE_SHARE_DELETE. `None` once removed or kept.
    dir: Option<OwnedHandle>,
    /// The marker with the owner's shared lock on it.
    lock: Option<File>,
    layout: Layout,
    marker: Marker,
}

impl Root {
    /// Creates, marks, publishes and locks a new root for `run_id` in `ns`.
    pub fn create(ns: &Namespace, run_id: &str, options: &RootOptions) -> Result<Root> {
        let name = format!("{ROOT_PREFIX}{run_id}");
        let pending = ns.path().join(format!("{PENDING_PREFIX}{name}"));
        let path = ns.path().join(&name);
        let marker = Marker {
            format: MARKER_FORMAT.into(),
            version: MARKER_VERSION,
            run_id: run_id.into(),
            owner_sid: ns.sid().into(),
            owner: ProcessId::current().map_err(|e| Error::sys("read own process identity", e))?,
            host: Host::current().map_err(|e| Error::sys("read boot id and host name", e))?,
            created_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or_default(),
            command: options.command.clone(),
            keep: options.keep,
        };
        std::fs::create_dir(&pending).at("create root", &pending)?;
        if let Err(e) = fill(&pending, &marker, options).and_then(|()| publish(&pending, &path)) {
            if let Err(left) = remove::remove_contents(&pending, None, remove::DEFAULT_BUDGET)
                .and_then(|()| remove::remove_dir(&pending, remove::DEFAULT_BUDGET))
            {
                tracing::warn!("a failed root creation left {}: {left}", pending.display());
            }
            return Err(e);
        }
        let dir = open_dir(&path).at("open root", &path)?;
        let lock = Marker::hold(&path).at("lock the marker of", &path)?;
        Ok(Root {
            run_id: run_id.into(),
            layout: Layout::of(&path, &options.homes),
            path,
            dir: Some(dir),
            lock: Some(lock),
            marker,
        })
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The root's absolute path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root's directories.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The marker this root was created with.
    pub fn marker(&self) -> &Marker {
        &self.marker
    }

    /// Removes the root and says what was removed and what was not.
    pub fn close(mut self) -> Removal {
        self.remove()
    }

    /// Leaves the root in place (`--keep-root`); the lock is released, and because the marker
    /// says `keep`, gc leaves it alone unless asked to reclaim kept roots.
    pub fn keep(mut self) -> PathBuf {
        self.dir = None;
        self.lock = None;
        std::mem::take(&mut self.path)
    }

    fn remove(&mut self) -> Removal {
        let status = match (self.dir.take(), self.lock.take()) {
            (Some(dir), lock @ Some(_)) => remove_root(&self.path, dir, lock),
            _ => RemovalStatus::Removed,
        };
        Removal {
            path: self.path.clone(),
            status,
        }
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if self.dir.is_none() {
            return;
        }
        let removal = self.remove();
        if !removal.is_removed() {
            tracing::warn!(
                "root {} was dropped but not fully removed: {:?} (the next gc retries it)",
                removal.path.display(),
                removal.status
            );
        }
    }
}

/// Removes a root held by `dir` and locked through `lock` (the marker): everything but the
/// marker first, then the marker, then the directory. Used by the owner and by gc (which holds
/// the lock exclusively, or has no marker to hold in an abandoned creation).
pub(crate) fn remove_root(path: &Path, dir: OwnedHandle, lock: Option<File>) -> RemovalStatus {
    let budget = remove::DEFAULT_BUDGET;
    if let Some(lock) = lock {
        if let Err(e) = remove::remove_contents(path, Some(MARKER_FILE.as_ref()), budget) {
            return RemovalStatus::Leftover(e);
        }
        drop(lock);
    }
    let result = remove::remove_contents(path, None, budget).and_then(|()| {
        drop(dir);
        remove::remove_dir(path, budget)
    });
    match result {
        Ok(()) => RemovalStatus::Removed,
        Err(e) => RemovalStatus::Leftover(e),
    }
}

/// Writes the marker and creates the layout inside the pending directory.
fn fill(pending: &Path, marker: &Marker, options: &RootOptions) -> Result<()> {
    marker.write(pending).at("write marker in", pending)?;
    let homes = options.homes.iter().map(|var| format!(r"homes\{var}"));
    for sub in LAYOUT_DIRS
        .iter()
        .map(|s| s.replace('/', "\\"))
        .chain(PROFILE_DIRS.iter().map(|s| s.to_string()))
        .chain(homes)
    {
        let dir = pending.join(&sub);
        std::fs::create_dir(&dir).at("create", &dir)?;
    }
    Ok(())
}

/// Renames `from` to `to`, never replacing anything (no MOVEFILE_REPLACE_EXISTING).
fn publish(from: &Path, to: &Path) -> Result<()> {
    let (a, b) = (win::long_path(from), win::long_path(to));
    // SAFETY: both are NUL-terminated UTF-16 paths that outlive the call.
    win::check(unsafe { MoveFileExW(a.as_ptr(), b.as_ptr(), 0) }).at("publish root", to)
}
