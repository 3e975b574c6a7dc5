//! Removal of roots on Windows: the most dangerous code in cleanroom (`docs/windows.md`).
//!
//! Order of operations for one root:
//! 1. the caller holds the root directory open without `FILE_SHARE_DELETE`, so nobody can
//!    rename or replace it during the walk (this is Windows' stand-in for the quarantine rename),
//!    and holds the marker, which is kept until the end;
//! 2. walk: every path in the `\\?\` form (no MAX_PATH limit, taken literally); a reparse point
//!    (junction, symlink, mount point) is never entered: the link itself is removed; read-only
//!    attributes are cleared before a delete;
//! 3. sharing violations, access denied (a delete-pending file, a scanner holding a handle) and
//!    directory-not-empty (a delete-pending child) are retried, walk after walk, with backoff
//!    within a budget in seconds; then the removal gives up visibly with the full error chain;
//! 4. the marker goes last, so a leftover keeps its proof of ownership for the next gc.

use std::ffi::OsStr;
use std::io;
use std::os::windows::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_DIR_NOT_EMPTY, ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND,
    ERROR_SHARING_VIOLATION,
};
use windows_sys::Win32::Storage::FileSystem::{
    DeleteFileW, RemoveDirectoryW, SetFileAttributesW, FILE_ATTRIBUTE_DIRECTORY,
    FILE_ATTRIBUTE_NORMAL, FILE_ATTRIBUTE_READONLY, FILE_ATTRIBUTE_REPARSE_POINT,
};

use crate::win;
use backoff::BACKOFF;

#[path = "backoff.rs"]
mod backoff;

/// How long a removal keeps retrying what Windows refuses for now.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(10);

/// How a removal ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum RemovalStatus {
    /// Nothing is left.
    Removed,
    /// Something is left, and why (the next gc retries it).
    Leftover(String),
}

/// What a removal did.
#[derive(Clone, Debug, Serialize)]
pub struct Removal {
    /// The root's path.
    pub path: PathBuf,
    /// How it ended.
    pub status: RemovalStatus,
}

impl Removal {
    /// Whether everything is gone.
    pub fn is_removed(&self) -> bool {
        self.status == RemovalStatus::Removed
    }
}

/// Removes everything inside `dir` but the entry named `keep`, retrying what Windows refuses
/// for now until `budget` is spent. On failure: the first problems, with their paths.
pub fn remove_contents(dir: &Path, keep: Option<&OsStr>, budget: Duration) -> Result<(), String> {
    let deadline = Instant::now() + budget;
    let mut pauses = BACKOFF.iter().chain(std::iter::repeat(&BACKOFF[4]));
    loop {
        let mut problems = Vec::new();
        walk(dir, keep, &mut problems);
        let retry = problems.iter().all(|p| p.transient);
        if problems.is_empty() {
            return Ok(());
        }
        let pause = *pauses.next().expect("endless");
        if !retry || Instant::now() + pause > deadline {
            let total = problems.len();
            let shown: Vec<String> = problems.into_iter().take(3).map(|p| p.text).collect();
            return Err(format!(
                "{} ({total} entries could not be removed{})",
                shown.join("; "),
                if retry {
                    ", still refused at the end of the retry budget"
                } else {
                    ""
                }
            ));
        }
        std::thread::sleep(pause);
    }
}

/// Removes the empty directory `dir` itself, retrying like [`remove_contents`].
pub fn remove_dir(dir: &Path, budget: Duration) -> Result<(), String> {
    let deadline = Instant::now() + budget;
    let mut pauses = BACKOFF.iter().chain(std::iter::repeat(&BACKOFF[4]));
    loop {
        match delete(dir, true) {
            Ok(()) => return Ok(()),
            Err(e) => {
                let pause = *pauses.next().expect("endless");
                if !is_transient(&e) || Instant::now() + pause > deadline {
                    return Err(format!("cannot remove {}: {e}", dir.display()));
                }
                std::thread::sleep(pause);
            }
        }
    }
}

/// One entry that could not be removed.
struct Problem {
    text: String,
    /// Whether retrying later may succeed (sharing violation, delete pending, not yet empty).
    transient: bool,
}

/// One pass over the tree under `dir`: depth first, never through a reparse point.
fn walk(dir: &Path, keep: Option<&OsStr>, problems: &mut Vec<Problem>) {
    let entries = match std::fs::read_dir(verbatim(dir)) {
        Ok(entries) => entries,
        Err(e) => return problems.push(problem("list", dir, e)),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return problems.push(problem("list", dir, e)),
        };
        if keep.is_some_and(|k| entry.file_name() == k) {
            continue;
        }
        let path = dir.join(entry.file_name());
        // DirEntry::metadata comes from the directory listing: it never follows a link.
        let attributes = match entry.metadata() {
            Ok(meta) => meta.file_attributes(),
            Err(e) => {
                problems.push(problem("inspect", &path, e));
                continue;
            }
        };
        let is_dir = attributes & FILE_ATTRIBUTE_DIRECTORY != 0;
        let is_link = attributes & FILE_ATTRIBUTE_REPARSE_POINT != 0;
        if is_dir && !is_link {
            walk(&path, None, problems);
        }
        if attributes & FILE_ATTRIBUTE_READONLY != 0 {
            if let Err(e) = clear_read_only(&path) {
                problems.push(problem("clear the read-only attribute of", &path, e));
                continue;
            }
        }
        if let Err(e) = delete(&path, is_dir) {
            if !is_gone(&e) {
                problems.push(problem("remove", &path, e));
            }
        }
    }
}

/// Deletes a file, or an empty directory, or a reparse point itself (a directory link is
/// removed with RemoveDirectory, which removes the link, never its target).
fn delete(path: &Path, is_dir: bool) -> io::Result<()> {
    let name = win::long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 path that outlives the call.
    win::check(unsafe {
        if is_dir {
            RemoveDirectoryW(name.as_ptr())
        } else {
            DeleteFileW(name.as_ptr())
        }
    })
}

fn clear_read_only(path: &Path) -> io::Result<()> {
    let name = win::long_path(path);
    // SAFETY: `name` is a NUL-terminated UTF-16 path. SetFileAttributes acts on a reparse
    // point itself, not on its target.
    win::check(unsafe { SetFileAttributesW(name.as_ptr(), FILE_ATTRIBUTE_NORMAL) })
}

/// The `\\?\` form of `path`, for std's own calls.
fn verbatim(path: &Path) -> PathBuf {
    let wide = win::long_path(path);
    PathBuf::from(win::from_wide(&wide))
}

fn is_transient(e: &io::Error) -> bool {
    [
        ERROR_SHARING_VIOLATION,
        ERROR_ACCESS_DENIED,
        ERROR_DIR_NOT_EMPTY,
    ]
    .iter()
    .any(|&code| e.raw_os_error() == Some(code as i32))
}

fn is_gone(e: &io::Error) -> bool {
    [ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND]
        .iter()
        .any(|&code| e.raw_os_error() == Some(code as i32))
}

fn problem(op: &str, path: &Path, e: io::Error) -> Problem {
    Problem {
        transient: is_transient(&e) || is_gone(&e),
        text: format!("cannot {op} {}: {e}", path.display()),
    }
}
