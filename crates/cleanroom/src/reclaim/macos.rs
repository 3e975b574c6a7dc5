//! What a dead run left running on macOS (the `orphans` part of the pass; Linux's is
//! `orphans.rs`): nothing is found, so nothing is killed. Type-checked only (docs/macos.md).
//!
//! A run's processes carry its `CLEANROOM_RUN_ID`, but macOS has no `/proc` to read it from (only
//! the `KERN_PROCARGS2` sysctl, not used yet), no cgroups, no watchdog, and no `/proc/locks`
//! naming a lock's holders. A run whose runner was killed (SIGKILL) leaves its process group
//! running: gc reclaims its root once the runner is provably dead, and the group's processes are
//! the user's to kill (`kill -- -PGID`). Never killing is the safe side of the invariant that
//! orphan killing never acts on a run id that may still be alive.

use rustix::fs::Dev;

use crate::namespace::Namespace;
use crate::process::ProcessInfo;
use crate::reclaim::LockHolder;

/// What dead runs left running: on macOS, nothing the pass can find.
pub(super) struct Leftovers;

impl Leftovers {
    /// For the namespace of `_uid`.
    pub fn new(_uid: u32) -> Leftovers {
        Leftovers
    }

    /// Never: no process can be told to belong to a root outside `_ns`.
    pub fn outside(&mut self, _ns: &Namespace, _run_id: &str) -> Option<String> {
        None
    }

    /// Kills nothing (see the module documentation).
    pub fn kill(&mut self, _run_id: &str, _cgroup: Option<&str>) -> Vec<ProcessInfo> {
        Vec::new()
    }

    /// Would kill nothing.
    pub fn would_kill(&mut self, _run_id: &str, _cgroup: Option<&str>) -> Vec<ProcessInfo> {
        Vec::new()
    }

    /// Nobody named, and never the run's own: a lock of a dead run's root held by a process is
    /// left alone (`locked`).
    pub fn lock_holders(&mut self, _run_id: &str, _dev: Dev, _ino: u64) -> (Vec<LockHolder>, bool) {
        (Vec::new(), false)
    }
}

/// Describes lock holders for a reason line; macOS names none.
pub(super) fn describe(_holders: &[LockHolder]) -> String {
    "a process macOS does not name (lsof can)".into()
}
