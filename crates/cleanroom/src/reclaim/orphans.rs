//! What a dead run left running, and whether it may be killed.
//!
//! One pass over `/proc` per reclamation finds every process of the user tagged with a
//! `CLEANROOM_RUN_ID` (through [`crate::process`], which owns what membership means); a run's
//! orphans are killed only when that pass found some, or when its marker records a cgroup
//! (checked by [`crate::contain`], cheaply, when it no longer exists).
//!
//! Invariant: orphan killing never acts on a run id that may still be alive. A run id is
//! protected when another entry of the namespace carries it and is not provably dead (a forged
//! `.trash-run-<live id>` next to the live `run-<live id>`), or when processes tagged with it
//! belong to a root outside this namespace (`CLEANROOM_ROOT` names another directory).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

use crate::env::{ROOT_VAR, RUN_ID_VAR};
use crate::marker::Marker;
use crate::namespace::{Namespace, PENDING_PREFIX, ROOT_PREFIX, TRASH_PREFIX};
use crate::process::{self, Host};
use crate::reclaim::LockHolder;

/// Processes of one user carrying a run id, and processes named like watchdogs, found in one
/// pass over `/proc`.
#[derive(Default)]
pub(super) struct Tagged {
    /// Run id → the processes carrying it.
    by_run: HashMap<Vec<u8>, Vec<TaggedProcess>>,
    /// Run id → the processes titled as its watchdog (see [`super::watchdogs`], which judges
    /// them).
    watchdogs: HashMap<String, Vec<u32>>,
}

/// One process the pass found.
struct TaggedProcess {
    pid: u32,
    /// The `CLEANROOM_ROOT` it carries.
    root: Option<Vec<u8>>,
}

impl Tagged {
    /// The pass: every process of real uid `uid` (but this one) and the run id it carries, and
    /// every process whose environment could be read that is titled as a run's watchdog.
    pub fn scan(uid: u32) -> Tagged {
        let run_prefix = format!("{RUN_ID_VAR}=");
        let root_prefix = format!("{ROOT_VAR}=");
        let me = std::process::id();
        let mut tagged = Tagged::default();
        for pid in process::all_pids() {
            // The environment first: most processes carry no run id (and those of other users
            // cannot be read at all), so the uid is read only for the few that do.
            let Some(environ) = process::environ(pid).filter(|_| pid != me) else {
                continue;
            };
            let value = |prefix: &str| {
                environ
                    .split(|&b| b == 0)
                    .find_map(|var| var.strip_prefix(prefix.as_bytes()))
                    .map(<[u8]>::to_vec)
            };
            if let Some(run) = value(&run_prefix).filter(|_| process::real_uid(pid) == Some(uid)) {
                let root = value(&root_prefix);
                let found = TaggedProcess { pid, root };
                tagged.by_run.entry(run).or_default().push(found);
            }
            // Tagged or not: a nested run's watchdog carries its outer run's tag.
            if let Some(run_id) = super::watchdogs::titled_run_id(pid) {
                tagged.watchdogs.entry(run_id).or_default().push(pid);
            }
        }
        tagged
    }

    /// The processes the pass found titled as the watchdog of `run_id`.
    pub fn watchdogs_of(&self, run_id: &str) -> &[u32] {
        self.watchdogs.get(run_id).map_or(&[], Vec::as_slice)
    }

    /// Whether the pass found processes of `run_id`.
    pub fn has(&self, run_id: &str) -> bool {
        self.by_run.contains_key(run_id.as_bytes())
    }

    /// The processes of `run_id` the pass found, as they are now (gone ones left out).
    pub fn processes(&self, run_id: &str) -> Vec<process::ProcessInfo> {
        self.by_run
            .get(run_id.as_bytes())
            .into_iter()
            .flatten()
            .filter_map(|p| process::info(p.pid))
            .collect()
    }

    /// A root outside `ns` that processes of `run_id` carry, if any.
    fn foreign_root(&self, ns: &Namespace, run_id: &str) -> Option<String> {
        let ns_identity = rustix::fs::fstat(ns.dir())
            .ok()
            .map(|st| (st.st_dev, st.st_ino));
        let processes = self.by_run.get(run_id.as_bytes())?;
        processes.iter().find_map(|p| {
            let root = Path::new(OsStr::from_bytes(p.root.as_deref()?));
            let parent = root.parent()?;
            let inside = rustix::fs::stat(parent)
                .is_ok_and(|st| Some((st.st_dev, st.st_ino)) == ns_identity);
            (!inside).then(|| root.display().to_string())
        })
    }
}

/// Why orphans of `run_id` must not be killed from the entry `name`, if they must not.
pub(super) fn protection(
    ns: &Namespace,
    name: &OsStr,
    run_id: &str,
    here: &Host,
    tagged: &Tagged,
) -> Option<String> {
    let root = format!("{ROOT_PREFIX}{run_id}");
    let siblings = [
        root.clone(),
        format!("{PENDING_PREFIX}{root}"),
        format!("{TRASH_PREFIX}{root}"),
    ];
    for sibling in siblings.iter().filter(|s| OsStr::new(s) != name) {
        match rustix::fs::statat(ns.dir(), sibling.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => continue,
            _ if provably_dead(ns, sibling, run_id, here) => continue,
            _ => {
                return Some(format!(
                    "run {run_id} also has {sibling}, which is not provably dead: \
                     nothing of the run is touched"
                ))
            }
        }
    }
    tagged.foreign_root(ns, run_id).map(|root| {
        format!(
            "processes of run {run_id} belong to {root}, outside this state directory: \
             nothing of the run is touched"
        )
    })
}

/// Whether the entry `name` is a root of `run_id` whose owner is provably dead and whose lock is
/// free. The lock is tried only once a valid marker exists: its owner then already holds it.
fn provably_dead(ns: &Namespace, name: &str, run_id: &str, here: &Host) -> bool {
    let Ok(dir) = rustix::fs::openat(
        ns.dir(),
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let dead = Marker::read(std::os::fd::AsFd::as_fd(&dir), ns.user())
        .is_ok_and(|m| m.run_id == run_id && m.owner.liveness(&m.host, here).is_dead());
    dead && rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// The processes holding `flock`s on the inode `(dev, ino)`, this one excepted.
pub(super) fn lock_holders(dev: u64, ino: u64) -> Vec<LockHolder> {
    let text = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let me = std::process::id() as i32;
    let wanted = (
        u64::from(rustix::fs::major(dev)),
        u64::from(rustix::fs::minor(dev)),
        ino,
    );
    let mut holders: Vec<LockHolder> = text
        .lines()
        .filter_map(|line| flock_line(line).filter(|(_, at)| *at == wanted))
        .filter(|(pid, _)| *pid != me)
        .map(|(pid, _)| LockHolder {
            pid,
            command: u32::try_from(pid)
                .ok()
                .filter(|&pid| pid > 0)
                .and_then(process::info)
                .map(|p| p.command),
        })
        .collect();
    holders.dedup();
    holders
}

/// The pid and `(major, minor, inode)` of a granted `FLOCK` line of `/proc/locks`:
/// `1: FLOCK  ADVISORY  READ  4242 fd:01:1234 0 EOF` (waiters, `1: -> FLOCK …`, are skipped).
fn flock_line(line: &str) -> Option<(i32, (u64, u64, u64))> {
    let mut fields = line.split_whitespace().skip(1);
    if fields.next()? != "FLOCK" {
        return None;
    }
    let pid = fields.nth(2)?.parse().ok()?;
    let mut at = fields.next()?.split(':');
    let major = u64::from_str_radix(at.next()?, 16).ok()?;
    let minor = u64::from_str_radix(at.next()?, 16).ok()?;
    let ino = at.next()?.parse().ok()?;
    Some((pid, (major, minor, ino)))
}

/// Describes lock holders for a reason line: `pid 42 (sleep 300), pid 43 (exited)`.
pub(super) fn describe(holders: &[LockHolder]) -> String {
    if holders.is_empty() {
        return "a process /proc/locks does not name".into();
    }
    holders
        .iter()
        .map(|h| match &h.command {
            Some(command) => format!("pid {} \"{command}\"", h.pid),
            None => format!("pid {} (exited, a child holds the descriptor)", h.pid),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `pid` carries `CLEANROOM_RUN_ID=run_id` (read now, not from the pass).
pub(super) fn is_tagged_with(pid: u32, run_id: &str) -> bool {
    process::environ_has(pid, format!("{RUN_ID_VAR}={run_id}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_are_read_strictly() {
        assert_eq!(
            flock_line("1: FLOCK  ADVISORY  READ  4242 fd:01:1234 0 EOF"),
            Some((4242, (0xfd, 1, 1234)))
        );
        assert_eq!(
            flock_line("2: FLOCK  ADVISORY  WRITE 7 00:1a:99 0 EOF"),
            Some((7, (0, 0x1a, 99)))
        );
        assert_eq!(
            flock_line("3: -> FLOCK  ADVISORY  WRITE 8 00:1a:99 0 EOF"),
            None
        );
        assert_eq!(
            flock_line("4: POSIX  ADVISORY  WRITE 9 00:1a:99 0 EOF"),
            None
        );
        assert_eq!(flock_line("garbage"), None);
    }
}
