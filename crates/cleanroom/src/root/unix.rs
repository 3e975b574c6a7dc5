//! A root on Unix: made under its pending name with `mkdirat`, locked with `flock(LOCK_SH)`
//! before the marker is written, and published with `renameat2(RENAME_NOREPLACE)`; all relative
//! to the namespace's open directory.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::{FlockOperation, Mode, OFlags, RenameFlags};

use super::{Root, RootOptions, LAYOUT_DIRS};
use crate::error::{Error, IoContext, Result};
use crate::marker::{Kept, Marker, KEPT_MARKER_VERSION, MARKER_FILE};
use crate::namespace::{Namespace, PENDING_PREFIX};

/// How many times creation starts over when its pending directory is taken away from it before
/// it could lock it (a gc may remove an empty pending directory it judged old).
const CREATE_ATTEMPTS: u32 = 3;

/// Makes the root `name` in `ns` under its pending name, writes `marker` and the layout into
/// it, and publishes it; returns its locked descriptor.
pub(crate) fn create(
    ns: &Namespace,
    name: &str,
    marker: &Marker,
    options: &RootOptions,
) -> Result<OwnedFd> {
    let mut pending = Pending::create(ns, &format!("{PENDING_PREFIX}{name}"))?;
    pending.write_marker(marker)?;
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
    pending.publish(name)
}

impl Root {
    /// The open root directory.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.held.as_ref().expect("an open root").as_fd()
    }

    /// Records in its marker why the root is to be kept once its run is over: the marker
    /// becomes a version 2 marker saying `keep` and `kept` (see [`Marker::replace`]); then
    /// [`Root::keep`] leaves it. When the record cannot be written (the run put a directory
    /// where the marker was), nothing changed and the error says why: a root kept without
    /// its record would be taken for a dead run's, so the caller removes it instead.
    pub fn record_kept(&mut self, kept: Kept) -> Result<()> {
        let mut marker = self.marker.clone();
        marker.version = KEPT_MARKER_VERSION;
        marker.keep = true;
        marker.kept = Some(kept);
        marker
            .replace(self.dir())
            .at("record why it is kept in the marker of", &self.path)?;
        self.marker = marker;
        Ok(())
    }
}

/// A root being created under its pending name. From the moment its directory exists, dropping
/// it removes exactly what it made, in reverse order, never recursively: the layout directories
/// and the marker by name, then the pending directory (`rmdir`: a directory that gained content
/// meanwhile stays). So a creation that fails at any step, even before the directory could be
/// opened (no descriptor left), leaves nothing behind.
struct Pending<'ns> {
    ns: &'ns Namespace,
    name: String,
    /// The pending directory, open and locked, once it is; `None` before, and once published.
    dir: Option<OwnedFd>,
    /// Whether the pending name denotes the directory this creation made: from `mkdirat` until
    /// it is published, or until the name is found to denote another directory.
    owns_name: bool,
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
        // From here on, every way out that is not a success removes the directory again.
        let mut pending = Pending {
            ns,
            name: name.into(),
            dir: None,
            owns_name: true,
            marker_written: false,
            made: Vec::new(),
        };
        let dir = match rustix::fs::openat(
            ns.dir(),
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(dir) => dir,
            Err(rustix::io::Errno::NOENT) => {
                pending.owns_name = false;
                return Ok(None);
            }
            Err(e) => return Err(Error::io("open root", &path, e)),
        };
        rustix::fs::flock(&dir, FlockOperation::NonBlockingLockShared).at("lock root", &path)?;
        let opened = rustix::fs::fstat(&dir).at("inspect root", &path)?;
        let named = rustix::fs::statat(ns.dir(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
        if !named.is_ok_and(|st| (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino)) {
            // Removed while empty (and perhaps made again by someone else): not ours any more.
            pending.owns_name = false;
            return Ok(None);
        }
        pending.dir = Some(dir);
        Ok(Some(pending))
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
        self.owns_name = false;
        Ok(self.dir.take().expect("not yet published"))
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.owns_name {
            return;
        }
        use rustix::fs::{unlinkat, AtFlags};
        let dir = self.dir.take();
        if let Some(dir) = &dir {
            for sub in self.made.iter().rev() {
                let _ = unlinkat(dir, sub.as_str(), AtFlags::REMOVEDIR);
            }
            if self.marker_written {
                let _ = unlinkat(dir, MARKER_FILE, AtFlags::empty());
            }
        }
        if let Err(e) = unlinkat(self.ns.dir(), self.name.as_str(), AtFlags::REMOVEDIR) {
            tracing::warn!(
                "a failed root creation left {}: {e} (gc removes it once it is older than a minute)",
                self.path().display()
            );
        }
    }
}
