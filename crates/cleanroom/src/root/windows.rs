//! A root on Windows: made under its pending name with `create_dir`, filled (marker, layout,
//! profile directories) and published by a rename that never replaces anything; then the owner
//! opens the root directory without `FILE_SHARE_DELETE` (nobody renames or replaces it) and
//! takes the shared liveness lock on the marker (not inherited by children, dropped by Windows
//! when the owner dies): both are the removal's [`Held`], let go only when the root is removed.
//! `home\AppData\Local` and `home\AppData\Roaming` exist, for LOCALAPPDATA and APPDATA. A
//! creation that fails part-way removes what it made under its pending name.

use std::path::Path;

use super::{Root, RootOptions, LAYOUT_DIRS};
use crate::error::{Error, IoContext, Result};
use crate::marker::{Kept, Marker};
use crate::namespace::os::open_dir;
use crate::namespace::{Namespace, PENDING_PREFIX};
use crate::remove::{self, Held};
use crate::sys::windows as win;

/// The Windows profile directories inside `home/`, in creation order.
const PROFILE_DIRS: [&str; 3] = [
    r"home\AppData",
    r"home\AppData\Local",
    r"home\AppData\Roaming",
];

impl Root {
    /// A marker on Windows records no reason to keep its root yet: the caller removes a root
    /// it was asked to keep on failure, with a warning.
    pub fn record_kept(&mut self, _kept: Kept) -> Result<()> {
        Err(Error::Unsupported {
            what: "keeping the root of a failed run (--keep-root=on-failure)",
            reason: "the Windows marker records no reason to keep a root yet".into(),
        })
    }
}

/// Makes the root `name` in `ns` under its pending name, writes `marker` and the layout into
/// it, publishes it, then holds it and its marker's lock.
pub(crate) fn create(
    ns: &Namespace,
    name: &str,
    marker: &Marker,
    options: &RootOptions,
) -> Result<Held> {
    let pending = ns.path().join(format!("{PENDING_PREFIX}{name}"));
    let path = ns.path().join(name);
    std::fs::create_dir(&pending).at("create root", &pending)?;
    if let Err(e) = fill(&pending, marker, options).and_then(|()| publish(&pending, &path)) {
        let removed = open_dir(&pending)
            .and_then(|dir| Held::new(pending.clone(), dir, None))
            .map_err(|e| e.to_string())
            .and_then(remove::os::remove_abandoned);
        if let Err(left) = removed {
            tracing::warn!("a failed root creation left {}: {left}", pending.display());
        }
        return Err(e);
    }
    let dir = open_dir(&path).at("open root", &path)?;
    let lock = Marker::hold(&path).at("lock the marker of", &path)?;
    Held::new(path.clone(), dir, Some(lock)).at("inspect root", &path)
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
    win::move_file(from, to, 0).at("publish root", to)
}
