//! What a dead run left running on Linux, and whether it may be killed ([`Leftovers`], the
//! `orphans` part of the pass; macOS's is `macos.rs`).
//!
//! One pass over `/proc` per reclamation finds every process of the user tagged with a
//! `CLEANROOM_RUN_ID` (through [`crate::process`], which owns what membership means); a run's
//! orphans are killed only when that pass found some, or when its marker records a cgroup
//! (checked by [`crate::contain`], cheaply, when it no longer exists), and its watchdog when it
//! was left stopped ([`super::watchdogs`]).
//!
//! Invariant: orphan killing never acts on a run id that may still be alive. A run id is
//! protected when another entry of the namespace carries it and is not provably dead (the pass
//! checks that), or when processes tagged with it belong to a root outside this namespace
//! (`CLEANROOM_ROOT` names another directory: [`Leftovers::outside`]).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::watchdogs;
use crate::contain;
use crate::env::{ROOT_VAR, RUN_ID_VAR};
use crate::namespace::Namespace;
use crate::process::{self, ProcessInfo};
use crate::reclaim::LockHolder;

/// What dead runs of one user left running, as one pass finds it: the processes tagged with
/// their run ids (one pass over `/proc`, made when first needed), their recorded cgroups (below
/// the cgroup2 mount, read when first needed) and their abandoned watchdogs.
pub(super) struct Leftovers {
    uid: u32,
    /// The one pass over `/proc`, made when the first candidate needs it.
    tagged: Option<Tagged>,
    /// The cgroup2 mount, read when the first recorded cgroup is met.
    cgroup_mount: Option<Option<PathBuf>>,
}

impl Leftovers {
    /// Nothing looked at yet, for the namespace of `uid`.
    pub fn new(uid: u32) -> Leftovers {
        Leftovers {
            uid,
            tagged: None,
            cgroup_mount: None,
        }
    }

    fn tagged(&mut self) -> &Tagged {
        let uid = self.uid;
        self.tagged.get_or_insert_with(|| Tagged::scan(uid))
    }

    /// Why orphans of `run_id` must not be killed from `ns`, if processes tagged with it belong
    /// to a root outside it.
    pub fn outside(&mut self, ns: &Namespace, run_id: &str) -> Option<String> {
        self.tagged().foreign_root(ns, run_id).map(|root| {
            format!(
                "processes of run {run_id} belong to {root}, outside this state directory: \
                 nothing of the run is touched"
            )
        })
    }

    /// Kills what the dead run `run_id` left: its tagged processes (only if the pass found any)
    /// and its recorded cgroup (which `contain` verifies; a missing one costs one failed open),
    /// then its watchdog if it was left stopped. Returns what was killed.
    pub fn kill(&mut self, run_id: &str, cgroup: Option<&str>) -> Vec<ProcessInfo> {
        let uid = self.uid;
        let cgroup = cgroup.filter(|path| self.cgroup_may_exist(path));
        let mut killed = if self.tagged().has(run_id) {
            contain::kill_orphans(run_id, uid, cgroup)
        } else if let Some(cgroup) = cgroup {
            contain::kill_cgroup_path(Path::new(cgroup), run_id)
        } else {
            Vec::new()
        };
        killed.extend(self.abandoned_watchdogs(run_id, false));
        killed
    }

    /// What [`Leftovers::kill`] would kill for `run_id` (a dry run).
    pub fn would_kill(&mut self, run_id: &str, cgroup: Option<&str>) -> Vec<ProcessInfo> {
        let mut found = self.tagged().processes(run_id);
        if let Some(cgroup) = cgroup.filter(|path| self.cgroup_may_exist(path)) {
            for p in contain::recorded_cgroup_members(Path::new(cgroup), run_id) {
                if !found.iter().any(|f| f.id == p.id) {
                    found.push(p);
                }
            }
        }
        found.extend(self.abandoned_watchdogs(run_id, true));
        found
    }

    /// The processes holding the lock of the directory `(dev, ino)` of the dead run `run_id`,
    /// and whether they are all the run's own (tagged with its id, the exited ones aside).
    pub fn lock_holders(&mut self, run_id: &str, dev: u64, ino: u64) -> (Vec<LockHolder>, bool) {
        let holders = lock_holders(dev, ino);
        let run_holds_it = self.tagged().has(run_id)
            && holders
                .iter()
                .filter(|h| h.command.is_some())
                .all(|h| u32::try_from(h.pid).is_ok_and(|pid| is_tagged_with(pid, run_id)));
        (holders, run_holds_it)
    }

    /// Whether a recorded cgroup is worth handing to `contain`, which verifies it for real: a
    /// path below the cgroup2 mount (read once per pass) that still exists. A cgroup a watchdog or
    /// its runner removed then costs one `lstat`, and a forged path outside the mount none.
    fn cgroup_may_exist(&mut self, path: &str) -> bool {
        let mount = self
            .cgroup_mount
            .get_or_insert_with(|| contain::cgroup2_mount().ok());
        let below = mount
            .as_ref()
            .is_some_and(|m| Path::new(path).starts_with(m));
        below
            && rustix::fs::statat(
                rustix::fs::CWD,
                path,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW | rustix::fs::AtFlags::NO_AUTOMOUNT,
            )
            .is_ok()
    }

    /// The watchdogs of the dead run `run_id` that the pass over `/proc` found stopped with
    /// their runner gone, killed (with `dry_run`: only named), see [`watchdogs`].
    fn abandoned_watchdogs(&mut self, run_id: &str, dry_run: bool) -> Vec<ProcessInfo> {
        let uid = self.uid;
        let pids = self.tagged().watchdogs_of(run_id).to_vec();
        pids.into_iter()
            .filter_map(|pid| watchdogs::kill_if_abandoned(pid, run_id, uid, dry_run))
            .collect()
    }
}

/// Processes of one user carrying a run id, and processes named like watchdogs, found in one
/// pass over `/proc`.
#[derive(Default)]
struct Tagged {
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
    fn scan(uid: u32) -> Tagged {
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
    fn watchdogs_of(&self, run_id: &str) -> &[u32] {
        self.watchdogs.get(run_id).map_or(&[], Vec::as_slice)
    }

    /// Whether the pass found processes of `run_id`.
    fn has(&self, run_id: &str) -> bool {
        self.by_run.contains_key(run_id.as_bytes())
    }

    /// The processes of `run_id` the pass found, as they are now (gone ones left out).
    fn processes(&self, run_id: &str) -> Vec<process::ProcessInfo> {
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

/// The processes holding `flock`s on the inode `(dev, ino)`, this one excepted.
fn lock_holders(dev: u64, ino: u64) -> Vec<LockHolder> {
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
fn is_tagged_with(pid: u32, run_id: &str) -> bool {
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
