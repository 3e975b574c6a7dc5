//! What another user must reach, made reachable, shared by the test harnesses of both crates
//! (`cleanroom-cli`'s `tests/common` and `tests/serve_support` include this file): a test that
//! runs a binary, or works in a directory, as uid 65534 cannot count on the checkout being
//! reachable by that uid (a checkout under a 0700 home is not, and `target/` with it).
//!
//! Invariant: what uid 65534 can reach where it is is used in place (so the usual checkout pays
//! nothing); anything else is copied into, or created in, a private directory under /dev/shm
//! (0755, like the copy), which is removed when its handle is dropped. Reachability is read from
//! the mode bits of the canonical path and every ancestor (as uid 65534 with no supplementary
//! groups would be judged; ACLs are not read, so a path reachable only through an ACL is copied).

#![allow(dead_code)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The uid (and gid) of `nobody`, as whom the unprivileged tests run.
pub const NOBODY_ID: u32 = 65534;

/// Whether uid 65534 may do `want` (octal `r=4 w=2 x=1` bits) on `path` itself.
fn nobody_may(path: &Path, want: u32) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let shift = if meta.uid() == NOBODY_ID {
        6
    } else if meta.gid() == NOBODY_ID {
        3
    } else {
        0
    };
    (meta.mode() >> shift) & want == want
}

/// Whether uid 65534 can search `dir` and every directory above it (canonical).
pub fn nobody_can_enter(dir: &Path) -> bool {
    dir.canonicalize()
        .is_ok_and(|dir| dir.ancestors().all(|d| nobody_may(d, 0o1)))
}

/// Whether uid 65534 can read and execute `path` where it is.
pub fn nobody_can_run(path: &Path) -> bool {
    let Ok(path) = path.canonicalize() else {
        return false;
    };
    path.parent().is_some_and(nobody_can_enter) && nobody_may(&path, 0o5)
}

/// A private directory in `parent`, mode 0755, removed on drop.
fn shared_tempdir(parent: &Path, prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .unwrap_or_else(|e| panic!("a private directory in {}: {e}", parent.display()));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Copies the executable `from` to `to` (mode 0755) with `cp`, not in this process: a child
/// that another test thread forks while the copy is open for writing would hold that
/// descriptor until its exec, and running the copy then fails with ETXTBSY ("Text file busy").
pub fn copy_executable(from: &Path, to: &Path) {
    let copied = std::process::Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("cp {} {}: {e}", from.display(), to.display()));
    assert!(
        copied.success(),
        "cp {} {}: {copied}",
        from.display(),
        to.display()
    );
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A binary uid 65534 can run: the binary itself when it can, else a copy.
pub struct RunnableByNobody {
    path: PathBuf,
    _copy: Option<tempfile::TempDir>,
}

impl RunnableByNobody {
    /// `binary`, or a copy of it (same file name, mode 0755) in a private directory under
    /// /dev/shm when uid 65534 cannot reach it where it is.
    pub fn new(binary: &Path) -> RunnableByNobody {
        RunnableByNobody::new_in(binary, Path::new("/dev/shm"))
    }

    /// Like [`RunnableByNobody::new`], the copy in a private directory in `parent` (which uid
    /// 65534 must reach): inside a run's working directory, so that a command run with a
    /// private `/dev/shm` still finds it.
    pub fn new_in(binary: &Path, parent: &Path) -> RunnableByNobody {
        if nobody_can_run(binary) {
            return RunnableByNobody {
                path: binary.to_path_buf(),
                _copy: None,
            };
        }
        RunnableByNobody::copied_into(binary, parent)
    }

    /// A copy of `binary` (same file name, mode 0755) in a private directory in `parent`,
    /// whoever can reach the binary where it is.
    pub fn copied_into(binary: &Path, parent: &Path) -> RunnableByNobody {
        let dir = shared_tempdir(parent, "cleanroom-it-bin-");
        let copy = dir
            .path()
            .join(binary.file_name().expect("a binary's file name"));
        copy_executable(binary, &copy);
        RunnableByNobody {
            path: copy,
            _copy: Some(dir),
        }
    }

    /// The path to run.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A new private directory (0755) that uid 65534 can reach: under `preferred` when it can reach
/// that, else under /dev/shm.
pub fn tempdir_reachable_by_nobody(preferred: &Path, prefix: &str) -> tempfile::TempDir {
    if !nobody_can_enter(preferred) {
        return shared_tempdir(Path::new("/dev/shm"), prefix);
    }
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(preferred)
        .unwrap_or_else(|e| panic!("a private directory in {}: {e}", preferred.display()));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `dir`, or /var/tmp when `dir` is under /tmp (a checkout under /tmp): for work dirs of tests
/// that check Codex's sandbox policies, whose default, workspace-write, makes all of /tmp
/// writable, so that a directory "outside the workspace" under /tmp is not outside at all.
pub fn outside_tmp(dir: &Path) -> PathBuf {
    match dir.canonicalize() {
        Ok(path) if path.starts_with("/tmp") => PathBuf::from("/var/tmp"),
        _ => dir.to_path_buf(),
    }
}
