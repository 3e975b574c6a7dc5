//! One run's root: created under a pending name, marked, published by rename, held by a shared
//! flock for the owner's lifetime, and removed through the removal module at the end — by
//! [`Root::close`], or when the [`Root`] is dropped.
//!
//! Invariants:
//! - the marker exists before the root is visible under its published name (`run-<id>`);
//! - publishing never replaces anything (`renameat2(RENAME_NOREPLACE)`);
//! - the owner holds `flock(LOCK_SH)` on the root directory from before the marker is written
//!   until the root is gone; the descriptor is close-on-exec, so children never hold it and the
//!   kernel drops it the moment the owner dies. gc treats a root whose lock it cannot take as
//!   alive unless its recorded owner is provably dead;
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

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FlockOperation, Mode, OFlags, RenameFlags};

pub use crate::layout::{new_run_id, Layout, LAYOUT_DIRS};

use crate::error::IoContext;
use crate::marker::{Marker, MARKER_FILE, MARKER_FORMAT, MARKER_VERSION};
use crate::namespace::{Namespace, PENDING_PREFIX, ROOT_PREFIX};
use crate::process::{Host, ProcessId};
use crate::remove::{self, Persistence, Removal};
use crate::{Error, Result};

/// What a root is created for.
#[derive(Clone, Debug, Default)]
pub struct RootOptions {
    /// The command the run executes (recorded in the marker).
    pub command: Vec<String>,
    /// Keep the root after the run (`--keep-root`).
    pub keep: bool,
    /// The cgroup holding the run's processes, if any.
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
    run_id: String,
    name: String,
    path: PathBuf,
    /// The namespace it lives in (its own handle on the verified directory).
    ns: Namespace,
    /// The open root directory; holds the liveness lock. `None` once removed or kept.
    dir: Option<OwnedFd>,
    layout: Layout,
    marker: Marker,
}

/// How many times creation starts over when its pending directory is taken away from it before
/// it could lock it (a gc may remove an empty pending directory it judged old).
const CREATE_ATTEMPTS: u32 = 3;

impl Root {
    /// Creates, marks, locks and publishes a new root for `run_id` in `ns`.
    pub fn create(ns: &Namespace, run_id: &str, options: &RootOptions) -> Result<Root> {
        let name = format!("{ROOT_PREFIX}{run_id}");
        let pending = Pending::create(ns, &format!("{PENDING_PREFIX}{name}"))?;
        let marker = Marker {
            format: MARKER_FORMAT.into(),
            version: MARKER_VERSION,
            run_id: run_id.into(),
            euid: ns.euid(),
            owner: ProcessId::current().map_err(|e| Error::sys("read own process identity", e))?,
            host: Host::current().map_err(|e| Error::sys("read boot id and namespace", e))?,
            created_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or_default(),
            command: options.command.clone(),
            keep: options.keep,
            cgroup: options.cgroup.clone(),
        };
        let mut pending = pending;
        pending.write_marker(&marker)?;
        // `homes` holds only the per-variable directories: without any, nothing points into it,
        // so it is not made (one mkdir and one rmdir less per run; gc accepts either shape).
        for sub in LAYOUT_DIRS
            .iter()
            .filter(|sub| **sub != "homes" || !options.homes.is_empty())
        {
            pending.mkdir(sub)?;
        }
        for var in &options.homes {
            pending.mkdir(&format!("homes/{var}"))?;
        }
        let dir = pending.publish(&name)?;
        let path = ns.path().join(&name);
        Ok(Root {
            run_id: run_id.into(),
            name,
            layout: Layout::of(&path, &options.homes),
            path,
            ns: ns.try_clone()?,
            dir: Some(dir),
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

    /// The open root directory.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_ref().expect("an open root").as_fd()
    }

    /// Removes the root (quarantine, then an fd-relative walk with bounded retries) and says what
    /// was removed and what was not.
    ///
    /// The liveness lock is held until the removal is over, so no gc touches it meanwhile.
    pub fn close(mut self) -> Removal {
        let dir = self.dir.take().expect("an open root");
        remove::remove_entry(&self.ns, &self.name, &dir, &self.marker, Persistence::FULL)
    }

    /// Same as [`Root::close`]; `ns` is the namespace the root was created in (the root keeps
    /// its own handle on it).
    pub fn remove(self, ns: &Namespace) -> Removal {
        debug_assert_eq!(ns.path(), self.ns.path());
        self.close()
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
        self.dir = None;
        std::mem::take(&mut self.path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        let removal =
            remove::remove_entry(&self.ns, &self.name, &dir, &self.marker, Persistence::FULL);
        if !removal.is_removed() {
            tracing::warn!(
                "root {} was dropped but not fully removed: {:?} (the next gc retries it)",
                removal.path.display(),
                removal.status
            );
        }
    }
}

/// A root being created under its pending name, locked. Until it is published, dropping it
/// removes exactly what it made, in reverse order, never recursively.
struct Pending<'ns> {
    ns: &'ns Namespace,
    name: String,
    dir: Option<OwnedFd>,
    marker_written: bool,
    made: Vec<String>,
}

impl<'ns> Pending<'ns> {
    /// `mkdirat` + open + `flock(LOCK_SH)`, then a check that the name still denotes the
    /// directory now locked: otherwise it was removed in between and creation starts over.
    fn create(ns: &'ns Namespace, name: &str) -> Result<Pending<'ns>> {
        let path = ns.path().join(name);
        for _ in 1..CREATE_ATTEMPTS {
            if let Some(pending) = Pending::try_create(ns, name)? {
                return Ok(pending);
            }
        }
        Pending::try_create(ns, name)?.ok_or_else(|| {
            Error::io(
                "create root",
                &path,
                std::io::Error::other("it was removed while being created, repeatedly"),
            )
        })
    }

    fn try_create(ns: &'ns Namespace, name: &str) -> Result<Option<Pending<'ns>>> {
        let path = ns.path().join(name);
        rustix::fs::mkdirat(ns.dir(), name, Mode::RWXU).at("create root", &path)?;
        let dir = match rustix::fs::openat(
            ns.dir(),
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(dir) => dir,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Error::io("open root", &path, e)),
        };
        rustix::fs::flock(&dir, FlockOperation::NonBlockingLockShared).at("lock root", &path)?;
        let opened = rustix::fs::fstat(&dir).at("inspect root", &path)?;
        let named = rustix::fs::statat(ns.dir(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
        if !named.is_ok_and(|st| (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino)) {
            return Ok(None);
        }
        Ok(Some(Pending {
            ns,
            name: name.into(),
            dir: Some(dir),
            marker_written: false,
            made: Vec::new(),
        }))
    }

    fn fd(&self) -> &OwnedFd {
        self.dir.as_ref().expect("not yet published")
    }

    fn path(&self) -> PathBuf {
        self.ns.path().join(&self.name)
    }

    fn write_marker(&mut self, marker: &Marker) -> Result<()> {
        // Set first: a failed write may still have created the file (ENOSPC leaves it empty).
        self.marker_written = true;
        marker
            .write(self.fd().as_fd())
            .at("write marker in", self.path())
    }

    fn mkdir(&mut self, sub: &str) -> Result<()> {
        rustix::fs::mkdirat(self.fd(), sub, Mode::RWXU).at("create", self.path().join(sub))?;
        self.made.push(sub.into());
        Ok(())
    }

    /// Renames the pending directory to `name`, never replacing anything; returns the locked
    /// descriptor.
    fn publish(mut self, name: &str) -> Result<OwnedFd> {
        rustix::fs::renameat_with(
            self.ns.dir(),
            &self.name,
            self.ns.dir(),
            name,
            RenameFlags::NOREPLACE,
        )
        .at("publish root", self.ns.path().join(name))?;
        Ok(self.dir.take().expect("not yet published"))
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        use rustix::fs::{unlinkat, AtFlags};
        for sub in self.made.iter().rev() {
            let _ = unlinkat(&dir, sub.as_str(), AtFlags::REMOVEDIR);
        }
        if self.marker_written {
            let _ = unlinkat(&dir, MARKER_FILE, AtFlags::empty());
        }
        if let Err(e) = unlinkat(self.ns.dir(), self.name.as_str(), AtFlags::REMOVEDIR) {
            tracing::warn!(
                "a failed root creation left {}: {e} (gc removes it once it is older than a minute)",
                self.path().display()
            );
        }
    }
}
