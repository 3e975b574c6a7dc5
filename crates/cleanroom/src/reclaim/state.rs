//! What the reclamation at the start of runs remembers between runs, so that a run pays for
//! other runs' leftovers only now and then, and never for a known-stuck one. It lives in the
//! extended attribute `user.cleanroom.gc-state` of the namespace directory (no entry of its own,
//! one `fgetxattr` per run to read it):
//!
//! ```json
//! {"format":"cleanroom-gc-state","version":1,"last_full_pass_unix_ms":1795944600000,
//!  "cursor":null,"stuck":[".trash-run-20261129T093000Z-0123456789abcdef"]}
//! ```
//!
//! - `last_full_pass_unix_ms`: when a pass last went through every entry; the next start of a
//!   run makes a pass only [`FULL_PASS_INTERVAL`] later;
//! - `cursor`: the last entry a pass cut short by its budget judged; the next run continues
//!   after it, so a huge namespace is covered over several runs instead of never;
//! - `stuck`: leftovers whose removal gave up (not merely ran out of time); runs skip them, only
//!   `cleanroom gc` tries them again (and rewrites the list). The newest names that fit in an
//!   ext4 attribute (about 3.5 KB) are kept.
//!
//! Invariant: the state can only make a run skip work, never remove anything, so a damaged or
//! forged value costs at most a delay until the next `cleanroom gc`. It is written only by the
//! holder of the exclusive `flock` on the namespace directory (the pass in progress; other runs
//! skip theirs), and each write replaces the whole value atomically. Where the filesystem has no
//! user extended attributes, nothing is remembered: every run makes a bounded pass.

use std::os::fd::OwnedFd;

use rustix::fs::{FlockOperation, Mode, OFlags, XattrFlags};
use serde::{Deserialize, Serialize};

use crate::namespace::Namespace;
use crate::reclaim::FULL_PASS_INTERVAL;

/// The extended attribute of the namespace directory holding the state.
pub const STATE_XATTR: &str = "user.cleanroom.gc-state";
/// Value of the `format` field.
const STATE_FORMAT: &str = "cleanroom-gc-state";
/// The version this build writes and reads.
const STATE_VERSION: u32 = 1;
/// The largest value written (ext4 keeps attributes in one block).
const MAX_STATE_BYTES: usize = 3500;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GcState {
    format: String,
    version: u32,
    pub last_full_pass_unix_ms: u64,
    pub cursor: Option<String>,
    pub stuck: Vec<String>,
}

impl Default for GcState {
    fn default() -> GcState {
        GcState {
            format: STATE_FORMAT.into(),
            version: STATE_VERSION,
            last_full_pass_unix_ms: 0,
            cursor: None,
            stuck: Vec::new(),
        }
    }
}

impl GcState {
    /// Whether the start of a run should make a pass at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        self.cursor.is_some()
            || now_ms.saturating_sub(self.last_full_pass_unix_ms)
                >= FULL_PASS_INTERVAL.as_millis() as u64
    }

    /// Records the outcome of removals: `stuck` names gave up, `cleared` names are gone.
    pub fn record(&mut self, stuck: &[String], cleared: &[String]) {
        self.stuck
            .retain(|n| !cleared.contains(n) && !stuck.contains(n));
        self.stuck.extend(stuck.iter().cloned());
    }

    /// The value to store: the oldest stuck names are dropped until it fits.
    fn encode(&mut self) -> Vec<u8> {
        loop {
            let bytes = serde_json::to_vec(self).expect("state serializes");
            if bytes.len() <= MAX_STATE_BYTES || self.stuck.is_empty() {
                return bytes;
            }
            self.stuck.remove(0);
        }
    }
}

/// The state of a namespace, read without a lock (enough to decide whether a pass is due).
pub(super) struct SavedState<'ns> {
    ns: &'ns Namespace,
    /// A descriptor of the namespace directory holding its exclusive lock, once taken.
    lock: Option<OwnedFd>,
    pub state: GcState,
}

impl<'ns> SavedState<'ns> {
    /// Reads the state of `ns`; `Err` says why nothing can be remembered there.
    pub fn open(ns: &'ns Namespace) -> Result<SavedState<'ns>, String> {
        let state = read_state(ns)?;
        Ok(SavedState {
            ns,
            lock: None,
            state,
        })
    }

    /// Takes the exclusive lock of the namespace directory without waiting, and reads the state
    /// again under it.
    pub fn try_lock(&mut self) -> bool {
        let Ok(fd) = rustix::fs::openat(
            self.ns.dir(),
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return false;
        };
        if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
            return false;
        }
        self.lock = Some(fd);
        if let Ok(state) = read_state(self.ns) {
            self.state = state;
        }
        true
    }

    /// Writes the state back (under the lock taken by [`SavedState::try_lock`]).
    pub fn save(&mut self) -> std::io::Result<()> {
        debug_assert!(self.lock.is_some(), "the state is written under its lock");
        let bytes = self.state.encode();
        rustix::fs::fsetxattr(self.ns.dir(), STATE_XATTR, &bytes, XattrFlags::empty())?;
        Ok(())
    }
}

/// The namespace's state; a missing, unreadable or unknown value counts as a fresh state (a
/// pass is due). `Err` only when the filesystem keeps no user attributes at all.
fn read_state(ns: &Namespace) -> Result<GcState, String> {
    let mut buf = vec![0u8; 64 * 1024];
    match rustix::fs::fgetxattr(ns.dir(), STATE_XATTR, &mut buf[..]) {
        Ok(n) => Ok(serde_json::from_slice::<GcState>(&buf[..n])
            .ok()
            .filter(|s| s.format == STATE_FORMAT && s.version == STATE_VERSION)
            .unwrap_or_default()),
        Err(rustix::io::Errno::NODATA) | Err(rustix::io::Errno::RANGE) => Ok(GcState::default()),
        Err(e) => Err(format!(
            "cannot read {STATE_XATTR} of {}: {e}",
            ns.path().display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_due_after_the_interval_or_with_a_cursor() {
        let mut state = GcState {
            last_full_pass_unix_ms: 1_000_000,
            ..GcState::default()
        };
        assert!(!state.due(1_000_000 + 59_999));
        assert!(state.due(1_000_000 + 60_000));
        state.cursor = Some("run-x".into());
        assert!(state.due(1_000_001));
    }

    #[test]
    fn stuck_names_are_recorded_once_and_cleared() {
        let mut state = GcState::default();
        state.record(&["a".into(), "b".into()], &[]);
        state.record(&["b".into()], &["a".into()]);
        assert_eq!(state.stuck, vec!["b".to_string()]);
    }

    #[test]
    fn the_oldest_stuck_names_go_when_the_value_would_not_fit() {
        let mut state = GcState::default();
        let names: Vec<String> = (0..200).map(|i| format!(".trash-run-{i:040}")).collect();
        state.record(&names, &[]);
        let bytes = state.encode();
        assert!(bytes.len() <= MAX_STATE_BYTES);
        assert_eq!(state.stuck.last(), names.last());
        assert!(state.stuck.len() > 50, "{}", state.stuck.len());
    }
}
