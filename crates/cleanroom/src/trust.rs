//! The one rule by which cleanroom trusts what it finds on disk rather than was told (a
//! discovered config file, a project root's marker): an entry is the user's own when its owner
//! is the effective user or root and neither its group nor others may write it.
//!
//! Invariant: an owner this user namespace cannot show (the overflow uid of a namespace that
//! leaves uids unmapped) is [`Owner::Unseen`], never [`Owner::Trusted`]: each caller decides
//! what an owner it cannot tell apart means for it.

use std::cell::OnceCell;

/// Whom an owner is, as this user namespace shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The effective user or root.
    Trusted,
    /// The overflow uid of a user namespace that leaves uids unmapped: any of them.
    Unseen,
    /// Another user.
    Other,
}

/// How owners show in this process's user namespace, read when first needed.
#[derive(Default)]
pub struct Owners {
    euid: OnceCell<u32>,
    /// The uid an unmapped owner shows as, when the namespace leaves any uid unmapped.
    hidden: OnceCell<Option<u32>>,
}

impl Owners {
    /// Whom the owner `uid` is.
    pub fn judge(&self, uid: u32) -> Owner {
        let euid = *self
            .euid
            .get_or_init(|| rustix::process::geteuid().as_raw());
        if *self.hidden.get_or_init(hidden_owner) == Some(uid) {
            // Even the user's own uid, when it is the overflow uid: the two cannot be told apart.
            Owner::Unseen
        } else if uid == euid || uid == 0 {
            Owner::Trusted
        } else {
            Owner::Other
        }
    }
}

/// The file type bits of a mode, and the types judged here (the same values on every Unix).
const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;
const S_IFDIR: u32 = 0o040000;

/// Whether an entry of mode `st_mode` (as `lstat` gives it: a `u32` on Linux, a `u16` in
/// macOS's `stat`) lets its group or others write it. A symbolic link's own mode means nothing:
/// it is never writable by others.
pub fn writable_by_others(st_mode: impl Into<u32>) -> bool {
    let st_mode = st_mode.into();
    st_mode & S_IFMT != S_IFLNK && st_mode & 0o022 != 0
}

/// Whether `st_mode` is a sticky directory's (`/tmp`'s): anyone it lets write may add entries,
/// each owned by whoever made it.
pub fn sticky_dir(st_mode: impl Into<u32>) -> bool {
    let st_mode = st_mode.into();
    st_mode & S_IFMT == S_IFDIR && st_mode & 0o1000 != 0
}

/// The uid owners outside this user namespace's map show as (the overflow uid), when the map
/// leaves any uid out; `None` in the initial namespace, which maps every uid, and where there are
/// no user namespaces (macOS: no `/proc/self/uid_map`).
fn hidden_owner() -> Option<u32> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let mapped: u64 = map
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum();
    if mapped >= u64::from(u32::MAX) {
        return None;
    }
    let overflow = std::fs::read_to_string("/proc/sys/kernel/overflowuid").ok();
    Some(
        overflow
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(65534),
    )
}
