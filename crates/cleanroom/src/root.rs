//! One run's root: created under a pending name, marked, published by rename, held by a shared
//! flock for the owner's lifetime, and removed through the removal module at the end.
//!
//! Invariants:
//! - the marker exists before the root is visible under its published name (`run-<id>`);
//! - publishing never replaces anything (`renameat2(RENAME_NOREPLACE)`);
//! - the owner holds `flock(LOCK_SH)` on the root directory from before publication until the
//!   root is gone; the descriptor is close-on-exec, so children never hold it and the kernel drops
//!   it the moment the owner dies. gc treats a root whose lock it cannot take as alive.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FlockOperation, Mode, OFlags, RenameFlags};

use crate::error::IoContext;
use crate::marker::{Marker, MARKER_FORMAT, MARKER_VERSION};
use crate::namespace::{Namespace, PENDING_PREFIX, ROOT_PREFIX};
use crate::process::{Host, ProcessId};
use crate::remove::{self, Removal};
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

/// The directories every root has, as absolute paths.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Layout {
    /// `home/`: HOME.
    pub home: PathBuf,
    /// `tmp/`: TMPDIR, TMP, TEMP.
    pub tmp: PathBuf,
    /// `xdg/config`: XDG_CONFIG_HOME.
    pub xdg_config: PathBuf,
    /// `xdg/cache`: XDG_CACHE_HOME.
    pub xdg_cache: PathBuf,
    /// `xdg/data`: XDG_DATA_HOME.
    pub xdg_data: PathBuf,
    /// `xdg/state`: XDG_STATE_HOME.
    pub xdg_state: PathBuf,
    /// `xdg/runtime`: XDG_RUNTIME_DIR (0700 as the spec requires).
    pub xdg_runtime: PathBuf,
    /// `homes/<VAR>`: one directory per pinned or re-pointed tool-home variable.
    pub homes: BTreeMap<String, PathBuf>,
}

/// The directories every root has, relative to it, in creation order.
pub const LAYOUT_DIRS: [&str; 9] = [
    "home",
    "tmp",
    "xdg",
    "xdg/config",
    "xdg/cache",
    "xdg/data",
    "xdg/state",
    "xdg/runtime",
    "homes",
];

/// A live root owned by this process.
#[derive(Debug)]
pub struct Root {
    run_id: String,
    name: String,
    path: PathBuf,
    /// The open root directory; holds the liveness lock.
    dir: OwnedFd,
    layout: Layout,
    marker: Marker,
}

/// A fresh run id: `<UTC time>-<64 random bits>`, sortable by creation time.
pub fn new_run_id() -> Result<String> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|e| Error::sys("read random bytes", std::io::Error::other(e.to_string())))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}-{hex}", utc_stamp(now.as_secs())))
}

/// Formats Unix seconds as `YYYYmmddTHHMMSSZ`.
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

impl Root {
    /// Creates, marks, locks and publishes a new root for `run_id` in `ns`.
    pub fn create(ns: &Namespace, run_id: &str, options: &RootOptions) -> Result<Root> {
        let name = format!("{ROOT_PREFIX}{run_id}");
        let pending = format!("{PENDING_PREFIX}{name}");
        let pending_path = ns.path().join(&pending);
        rustix::fs::mkdirat(ns.dir(), &pending, Mode::RWXU).at("create root", &pending_path)?;
        let dir = rustix::fs::openat(
            ns.dir(),
            &pending,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .at("open root", &pending_path)?;
        rustix::fs::flock(&dir, FlockOperation::NonBlockingLockShared)
            .at("lock root", &pending_path)?;
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
        marker
            .write(dir.as_fd())
            .at("write marker in", &pending_path)?;
        for sub in LAYOUT_DIRS {
            rustix::fs::mkdirat(&dir, sub, Mode::RWXU).at("create", pending_path.join(sub))?;
        }
        for var in &options.homes {
            let sub = format!("homes/{var}");
            rustix::fs::mkdirat(&dir, &sub, Mode::RWXU).at("create", pending_path.join(&sub))?;
        }
        rustix::fs::renameat_with(ns.dir(), &pending, ns.dir(), &name, RenameFlags::NOREPLACE)
            .at("publish root", ns.path().join(&name))?;
        let path = ns.path().join(&name);
        let layout = Layout {
            home: path.join("home"),
            tmp: path.join("tmp"),
            xdg_config: path.join("xdg/config"),
            xdg_cache: path.join("xdg/cache"),
            xdg_data: path.join("xdg/data"),
            xdg_state: path.join("xdg/state"),
            xdg_runtime: path.join("xdg/runtime"),
            homes: options
                .homes
                .iter()
                .map(|v| (v.clone(), path.join("homes").join(v)))
                .collect(),
        };
        Ok(Root {
            run_id: run_id.into(),
            name,
            path,
            dir,
            layout,
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
        self.dir.as_fd()
    }

    /// Removes the root (quarantine, then an fd-relative walk with bounded retries).
    ///
    /// The liveness lock is held until the removal is over, so no gc touches it meanwhile.
    pub fn remove(self, ns: &Namespace) -> Removal {
        remove::remove_entry(ns, &self.name, &self.dir)
    }

    /// Leaves the root in place (`--keep-root`); the lock is released, and because the marker says
    /// `keep`, gc leaves it alone unless asked to reclaim kept roots.
    pub fn keep(self) -> PathBuf {
        self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_and_sortable() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(1_795_944_600), "20261129T093000Z");
        let id = new_run_id().unwrap();
        assert!(crate::namespace::is_valid_run_id(&id), "{id}");
    }
}
