//! The Windows steps of a removal (`remove/mod.rs` orders them), on paths in the `\\?\` form
//! (no MAX_PATH limit, taken literally):
//! - what the caller holds ([`Held`]): the directory, open without `FILE_SHARE_DELETE` since its
//!   owner published it (or gc judged it), so nobody renames or replaces it meanwhile, and the
//!   marker's liveness lock. This is Windows' stand-in for the quarantine rename: the entry keeps
//!   its name, and [`quarantine`] only proves that the name still denotes the held directory;
//! - the walk never enters a reparse point (junction, symlink, mount point): the link itself is
//!   removed; read-only attributes are cleared before a delete. What Windows refuses for now (a
//!   sharing violation, a delete-pending file, a scanner's handle) is retried by `mod.rs` for
//!   [`RETRY_FOR`];
//! - the marker goes last ([`finish`]): the lock is released, the marker deleted, the handle
//!   closed and the empty directory removed. If the directory stays, it is held again (when it
//!   is still the same) and the marker written back, so the leftover keeps its proof.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io;
use std::os::windows::fs::MetadataExt;
use std::os::windows::io::{AsHandle, OwnedHandle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND};
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_NORMAL, FILE_ATTRIBUTE_READONLY,
    FILE_ATTRIBUTE_REPARSE_POINT,
};

use super::WalkStats;
use crate::marker::{Marker, MARKER_FILE};
use crate::namespace::os::open_dir;
use crate::namespace::Namespace;
use crate::sys::windows as win;

/// How long a removal keeps retrying after the backoff schedule is spent: what Windows refuses
/// for now (a scanner or indexer holding a handle, a delete-pending child) usually clears within
/// seconds.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(10);

/// What the caller holds of the entry it removes: the directory, open without
/// `FILE_SHARE_DELETE`, and (when it has one) the marker with the caller's lock on it. Both are
/// let go only when the marker goes, last, the marker's lock first.
pub struct Held {
    path: PathBuf,
    /// The directory; `None` while [`finish`] has let go of it.
    dir: RefCell<Option<OwnedHandle>>,
    /// Volume serial number and file index of the directory.
    identity: (u32, u64),
    /// The marker, locked; `None` once released (or for an entry without one).
    lock: Cell<Option<File>>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Held {
    /// Holds the directory at `path`, open as `dir`, and the marker `lock` taken on it.
    pub(crate) fn new(path: PathBuf, dir: OwnedHandle, lock: Option<File>) -> io::Result<Held> {
        let identity = identity(&dir)?;
        Ok(Held {
            path,
            dir: RefCell::new(Some(dir)),
            identity,
            lock: Cell::new(lock),
        })
    }
}

/// Volume serial number and file index of an open file or directory.
fn identity(handle: &impl AsHandle) -> io::Result<(u32, u64)> {
    let info = win::file_info(handle.as_handle())?;
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    Ok((info.dwVolumeSerialNumber, index))
}

/// Checks that `name` in the namespace still denotes the held directory, and keeps the name (no
/// rename: the held handle already keeps anyone from renaming or replacing it).
pub(super) fn quarantine<'n>(
    ns: &Namespace,
    name: &'n str,
    _trash: &'n str,
    held: &Held,
) -> Result<&'n str, String> {
    let path = ns.path().join(name);
    let now = open_dir(&path)
        .and_then(|dir| identity(&dir))
        .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
    if path != held.path || now != held.identity {
        return Err(format!(
            "{name} is no longer the directory this process owns; preserved"
        ));
    }
    Ok(name)
}

/// Removes everything inside the held directory but its marker: one walk, which stops at
/// `deadline` between two entries.
pub(super) fn remove_owned_contents(
    held: &Held,
    path: &Path,
    deadline: Option<Instant>,
) -> WalkStats {
    let mut stats = WalkStats::default();
    if held.dir.borrow().is_none() {
        stats
            .errors
            .push(format!("{}: no longer held, not walked", path.display()));
        return stats;
    }
    walk(path, true, deadline, &mut stats);
    stats
}

/// Removes the held directory without proof of ownership to keep: an abandoned or failed
/// creation (everything in it, the marker too, then the directory). One walk: the next gc
/// retries what is left.
pub(crate) fn remove_abandoned(held: Held) -> Result<(), String> {
    let mut stats = WalkStats::default();
    walk(&held.path, false, None, &mut stats);
    if !stats.errors.is_empty() {
        return Err(stats.errors.join("; "));
    }
    drop(held.lock);
    drop(held.dir);
    delete(&held.path, true).map_err(|e| format!("cannot remove {}: {e}", held.path.display()))
}

/// Releases the marker's lock, removes the marker, lets go of the directory and removes it.
///
/// If the directory cannot be removed after all (something still holds or writes into it), it
/// is held again when it is still the same directory, and the marker is put back, so the
/// leftover keeps its proof of ownership and the next gc can finish it.
pub(super) fn finish(
    _ns: &Namespace,
    _trash: &str,
    held: &Held,
    marker: &Marker,
) -> Result<(), String> {
    drop(held.lock.take());
    let marker_path = held.path.join(MARKER_FILE);
    match delete(&marker_path, false) {
        Ok(()) => {}
        Err(e) if is_gone(&e) => {}
        Err(e) => return Err(format!("{}: {e}", marker_path.display())),
    }
    drop(held.dir.borrow_mut().take());
    let Err(e) = delete(&held.path, true) else {
        return Ok(());
    };
    let mut error = format!("{}: {e}", held.path.display());
    match open_dir(&held.path) {
        Ok(dir) if identity(&dir).ok() == Some(held.identity) => {
            *held.dir.borrow_mut() = Some(dir);
        }
        _ => error.push_str("; it is no longer the directory this process held"),
    }
    if let Err(lost) = restore_marker(held, marker) {
        error.push_str(&format!("; {lost}"));
    }
    Err(error)
}

/// Makes sure the held directory holds exactly `marker` again: a run may have deleted or
/// replaced it (while the owner holds its lock nobody can; after [`finish`] released it, the
/// marker is gone). Only a file is ever replaced; the new one is created new, as
/// [`Marker::write`] always does. Nothing is written into a directory no longer held.
pub(super) fn restore_marker(held: &Held, marker: &Marker) -> Result<(), String> {
    let lost = |e: &dyn std::fmt::Display| format!("{MARKER_FILE} could not be restored: {e}");
    if held.dir.borrow().is_none() {
        return Err(lost(&"its directory is no longer held"));
    }
    if Marker::read(&held.path, &marker.user).is_ok_and(|file| file.marker == *marker) {
        return Ok(());
    }
    let marker_path = held.path.join(MARKER_FILE);
    match std::fs::symlink_metadata(verbatim(&marker_path)) {
        Ok(meta) if meta.file_attributes() & FILE_ATTRIBUTE_DIRECTORY != 0 => {
            return Err(lost(&"a directory is in its place"))
        }
        Ok(_) => delete(&marker_path, false).map_err(|e| lost(&e))?,
        Err(e) if is_gone(&e) => {}
        Err(e) => return Err(lost(&e)),
    }
    marker.write(&held.path).map_err(|e| lost(&e))
}

/// One pass over the tree under `dir`, depth first, never through a reparse point; the top's
/// marker stays when `keep_marker`.
fn walk(dir: &Path, keep_marker: bool, deadline: Option<Instant>, stats: &mut WalkStats) {
    let entries = match std::fs::read_dir(verbatim(dir)) {
        Ok(entries) => entries,
        Err(e) if is_gone(&e) => return,
        Err(e) => return stats.errors.push(problem("list", dir, e)),
    };
    for entry in entries {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stats.interrupted = true;
            return;
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return stats.errors.push(problem("list", dir, e)),
        };
        if keep_marker && entry.file_name() == MARKER_FILE {
            continue;
        }
        let path = dir.join(entry.file_name());
        // DirEntry::metadata comes from the directory listing: it never follows a link.
        let attributes = match entry.metadata() {
            Ok(meta) => meta.file_attributes(),
            Err(e) => {
                stats.errors.push(problem("inspect", &path, e));
                continue;
            }
        };
        let is_dir = attributes & FILE_ATTRIBUTE_DIRECTORY != 0;
        let is_link = attributes & FILE_ATTRIBUTE_REPARSE_POINT != 0;
        if is_dir && !is_link {
            walk(&path, false, deadline, stats);
            if stats.interrupted {
                return;
            }
        }
        if attributes & FILE_ATTRIBUTE_READONLY != 0 {
            if let Err(e) = clear_read_only(&path) {
                stats
                    .errors
                    .push(problem("clear the read-only attribute of", &path, e));
                continue;
            }
        }
        match delete(&path, is_dir) {
            Ok(()) if is_dir => stats.dirs += 1,
            Ok(()) => stats.files += 1,
            Err(e) if is_gone(&e) => {}
            Err(e) => stats.errors.push(problem("remove", &path, e)),
        }
    }
}

/// Deletes a file, or an empty directory, or a reparse point itself (a directory link is
/// removed with RemoveDirectory, which removes the link, never its target).
fn delete(path: &Path, is_dir: bool) -> io::Result<()> {
    if is_dir {
        win::remove_directory(path)
    } else {
        win::delete_file(path)
    }
}

/// Clears the attributes of `path` (a reparse point itself, not its target).
fn clear_read_only(path: &Path) -> io::Result<()> {
    win::set_file_attributes(path, FILE_ATTRIBUTE_NORMAL)
}

/// The `\\?\` form of `path`, for std's own calls.
fn verbatim(path: &Path) -> PathBuf {
    let wide = win::long_path(path);
    PathBuf::from(win::from_wide(&wide))
}

fn is_gone(e: &io::Error) -> bool {
    [ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND]
        .iter()
        .any(|&code| e.raw_os_error() == Some(code as i32))
}

fn problem(op: &str, path: &Path, e: io::Error) -> String {
    format!("cannot {op} {}: {e}", path.display())
}
