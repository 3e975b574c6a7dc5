//! The bound on roots kept on failure (`--keep-root=on-failure`): each one's marker records how
//! many newer roots kept on failure it waits for (`retain`, `--keep-root-count`); once the
//! namespace holds that many, gc reclaims it like the root of any dead run (a plain `gc`, and
//! the start of runs). Roots kept with `--keep-root` (always) are not counted and never expire.
//!
//! Newer means created later (the marker's `created_unix_ms`; names break ties). The count is
//! read once per pass, when the first root kept on failure is judged: a readdir and one marker
//! read per published root.
//!
//! Invariant: this only ever turns a kept root whose owner is dead and whose lock gc holds into
//! a stale one; the other checks of the pass (the run id alive elsewhere) still follow. A forged
//! record can only make roots kept on failure go sooner, which the same user could do anyway.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};

use crate::marker::Marker;
use crate::namespace::{self, EntryKind, Namespace};

/// The published roots of a namespace kept on failure: (creation time, name), oldest first.
pub(super) struct KeptOnFailure {
    roots: Vec<(u64, OsString)>,
}

impl KeptOnFailure {
    /// Reads the namespace: every published root whose valid marker records a keep on failure.
    pub fn scan(ns: &Namespace) -> KeptOnFailure {
        let mut roots: Vec<(u64, OsString)> = super::entry_names(ns)
            .into_iter()
            .filter_map(|name| Some((kept_on_failure(ns, &name)?, name)))
            .collect();
        roots.sort();
        KeptOnFailure { roots }
    }

    /// How many of them are newer than the root `name` created at `created_unix_ms`.
    pub fn newer_than(&self, created_unix_ms: u64, name: &OsStr) -> usize {
        let older_or_same = self
            .roots
            .partition_point(|(created, n)| (*created, n.as_os_str()) <= (created_unix_ms, name));
        self.roots.len() - older_or_same
    }
}

/// When `name` was created, if it is a published root of ours whose marker records a keep on
/// failure.
fn kept_on_failure(ns: &Namespace, name: &OsStr) -> Option<u64> {
    let (EntryKind::Root, Some(run_id)) = namespace::classify(name) else {
        return None;
    };
    let dir = rustix::fs::openat(
        ns.dir(),
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let marker = Marker::read(dir.as_fd(), ns.user()).ok()?;
    (marker.run_id == run_id && marker.kept.is_some()).then_some(marker.created_unix_ms)
}
