//! One run's root: created under a pending name, marked, published by a rename that never
//! replaces anything, held for the owner's lifetime, and removed through the removal module at
//! the end — by [`Root::close`], or when the [`Root`] is dropped.
//!
//! Invariants (how each platform keeps them is the private `os` child's: `unix.rs` and
//! `windows.rs`):
//! - the marker exists before the root is visible under its published name (`run-<id>`);
//! - publishing never replaces anything (Unix: `renameat2(RENAME_NOREPLACE)`; Windows:
//!   `MoveFileExW` without `MOVEFILE_REPLACE_EXISTING`);
//! - the owner holds the root's liveness lock until the root is gone, and the lock dies with
//!   the owner, never inherited by its children. Unix: `flock(LOCK_SH)` on the root directory,
//!   from before the marker is written, close-on-exec. Windows: the root directory held without
//!   `FILE_SHARE_DELETE` and a shared lock on the marker, from just after publication (the gap is
//!   covered by the owner proof). gc treats a root whose lock it cannot take as alive unless its
//!   recorded owner is provably dead;
//! - a creation that fails part-way removes exactly what it made (marker, layout directories,
//!   the pending directory) and nothing else.
//!
//! ```
//! use cleanroom::{Namespace, Root, RootOptions};
//!
//! let tmp = tempfile::tempdir()?;
//! let ns = Namespace::open_or_create(&tmp.path().join("ns"))?;
//! let run_id = cleanroom::root::new_run_id()?;
//! let root = Root::create(&ns, &run_id, &RootOptions::default())?;
//! std::fs::write(root.layout().home.join("notes.txt"), "scratch")?;
//! let path = root.path().to_path_buf();
//!
//! let removal = root.close();
//! assert!(removal.is_removed(), "{:?}", removal.status);
//! assert!(!path.exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(unix)]
#[path = "unix.rs"]
pub(crate) mod os;
#[cfg(windows)]
#[path = "windows.rs"]
pub(crate) mod os;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::layout::{new_run_id, Layout, LAYOUT_DIRS};

use crate::error::{Error, Result};
use crate::marker::{Marker, MARKER_FORMAT, MARKER_VERSION};
use crate::namespace::{Namespace, ROOT_PREFIX};
use crate::process::{Host, ProcessId};
use crate::remove::{self, Held, Persistence, Removal};

/// What a root is created for.
#[derive(Clone, Debug, Default)]
pub struct RootOptions {
    /// The command the run executes (recorded in the marker).
    pub command: Vec<String>,
    /// Keep the root after the run (`--keep-root`).
    pub keep: bool,
    /// The cgroup holding the run's processes, if any (Linux).
    pub cgroup: Option<String>,
    /// Variables that get their own directory `homes/<VAR>`.
    pub homes: Vec<String>,
}

/// A live root owned by this process. Dropping it removes it (best effort, problems logged
/// through `tracing`); [`Root::close`] does the same and says how it went; [`Root::keep`] leaves
/// it in place.
///
/// ```
/// use cleanroom::{Namespace, Root, RootOptions};
///
/// let tmp = tempfile::tempdir()?;
/// let ns = Namespace::open_or_create(&tmp.path().join("ns"))?;
/// let options = RootOptions {
///     command: vec!["my-tool".into()],
///     ..RootOptions::default()
/// };
/// let root = Root::create(&ns, &cleanroom::root::new_run_id()?, &options)?;
/// let path = root.path().to_path_buf();
/// assert!(root.layout().tmp.is_dir());
/// drop(root); // removed as by `close()`, problems logged
/// assert!(!path.exists());
///
/// let kept = Root::create(&ns, &cleanroom::root::new_run_id()?, &options)?.keep();
/// assert!(kept.is_dir(), "a kept root stays for `cleanroom gc --kept`");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Root {
    name: String,
    path: PathBuf,
    /// The namespace it lives in (its own handle on the verified directory).
    ns: Namespace,
    /// The open root directory and the liveness lock (Unix: the directory's `flock`; Windows:
    /// the marker's lock). `None` once removed or kept.
    held: Option<Held>,
    layout: Layout,
    marker: Marker,
}

impl Root {
    /// Creates, marks, locks and publishes a new root for `run_id` in `ns`.
    pub fn create(ns: &Namespace, run_id: &str, options: &RootOptions) -> Result<Root> {
        let name = format!("{ROOT_PREFIX}{run_id}");
        let marker = Marker {
            format: MARKER_FORMAT.into(),
            version: MARKER_VERSION,
            run_id: run_id.into(),
            user: ns.user().clone(),
            owner: ProcessId::current().map_err(|e| Error::sys("read own process identity", e))?,
            host: Host::current().map_err(|e| Error::sys("read boot id and namespace", e))?,
            created_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or_default(),
            command: options.command.clone(),
            keep: options.keep,
            cgroup: options.cgroup.clone(),
            kept: None,
        };
        let held = os::create(ns, &name, &marker, options)?;
        let path = ns.path().join(&name);
        Ok(Root {
            name,
            layout: Layout::of(&path, &options.homes),
            path,
            ns: ns.try_clone()?,
            held: Some(held),
            marker,
        })
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.marker.run_id
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

    /// Removes the root (Unix: quarantine, then an fd-relative walk with bounded retries) and
    /// says what was removed and what was not.
    ///
    /// The liveness lock is held until the removal is over, so no gc touches it meanwhile.
    pub fn close(mut self) -> Removal {
        let held = self.held.take().expect("an open root");
        self.remove(held)
    }

    /// Removes the root held through `held` (every retry, no deadline); the lock goes with it.
    fn remove(&self, held: Held) -> Removal {
        remove::remove_entry(&self.ns, &self.name, &held, &self.marker, Persistence::FULL)
    }

    /// Leaves the root in place (`--keep-root`); the lock is released, and because the marker says
    /// `keep`, gc leaves it alone unless asked to reclaim kept roots.
    pub fn keep(self) -> PathBuf {
        self.leave()
    }

    /// Leaves the root in place for gc (processes of the run survived SIGKILL): the lock is
    /// released, so the next gc sees a dead run, kills what its marker and tag lead to (the
    /// recorded cgroup) and removes it.
    pub fn leave(mut self) -> PathBuf {
        self.held = None;
        std::mem::take(&mut self.path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        let removal = self.remove(held);
        if !removal.is_removed() {
            tracing::warn!(
                "root {} was dropped but not fully removed: {:?} (the next gc retries it)",
                removal.path.display(),
                removal.status
            );
        }
    }
}
