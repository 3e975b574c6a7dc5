//! Zombie reaping and tree termination for a server that is a child subreaper and shares its
//! children with tokio.
//!
//! Owns: the set of pids tokio is waiting for, reaping of every other exited child (orphans that
//! re-parented to the server), the blocking TERM → grace → KILL loop over a set of members, and
//! the two membership rules: one process's ([`Membership`]) and one session's ([`Scope`]).
//!
//! Invariants: `waitpid(-1)` is never called; a pid in the tokio set is never reaped here; a pid
//! enters the set under the same lock as its spawn and the orphan reaps, so a child that exits
//! before it is registered cannot be stolen from tokio. A termination ends only on proof that
//! its set is empty ([`Settling`]): an empty listing alone proves nothing while a fork-and-exit
//! chain runs.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cleanroom::contain::Children;
use cleanroom::process::{self, ProcessId, ProcessInfo};

/// How many consecutive empty listings, with no orphan reaped from the first of them to the
/// reap after the last, prove a set empty.
const QUIET_LISTINGS: u32 = 3;

/// The pids tokio owns, the lock that orders spawns against orphan scans, and how many orphans
/// were reaped so far (by any caller).
#[derive(Clone, Debug, Default)]
pub struct Reaper {
    owned: Arc<Mutex<HashSet<i32>>>,
    reaped: Arc<AtomicU64>,
}

impl Reaper {
    /// Holds the lock across a spawn; register the new pid with [`SpawnGuard::own`].
    pub fn spawning(&self) -> SpawnGuard<'_> {
        SpawnGuard { owned: self.lock() }
    }

    /// Tokio has reaped `pid`.
    pub fn release(&self, pid: i32) {
        self.lock().remove(&pid);
    }

    /// Reaps every exited child of the server that tokio does not own (blocking: procfs scan).
    /// The scan runs before the lock is taken, so a waiter releasing its pid or a spawn never
    /// waits for procfs; the reaps run under it, so a pid registered meanwhile is left alone.
    pub fn reap_orphans(&self) {
        let exited = cleanroom::contain::exited_children();
        if exited.is_empty() {
            return;
        }
        let owned = self.lock();
        let reaped = cleanroom::contain::reap_exited(&exited, &|pid| owned.contains(&pid));
        self.reaped.fetch_add(reaped as u64, Ordering::SeqCst);
    }

    /// How many orphans were reaped so far.
    fn reaped(&self) -> u64 {
        self.reaped.load(Ordering::SeqCst)
    }

    /// TERM to every member, `grace` for them to go, then KILL until none is left (blocking:
    /// call from `spawn_blocking`). Returns what needed SIGKILL and died (survivors of the KILL
    /// loop's bound are named on stderr by the loop itself).
    pub fn terminate(&self, members: &dyn Members, grace: Duration) -> Vec<ProcessInfo> {
        let mut scope = Settling {
            members,
            reaper: self,
            quiet: 0,
            since: 0,
        };
        cleanroom::contain::terminate_set(&mut scope, grace).killed
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<i32>> {
        self.owned.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The reaper's lock, held while a child is spawned.
pub struct SpawnGuard<'a> {
    owned: MutexGuard<'a, HashSet<i32>>,
}

impl SpawnGuard<'_> {
    /// Marks `pid` as tokio's.
    pub fn own(&mut self, pid: i32) {
        self.owned.insert(pid);
    }
}

/// A member listing as the kill loops see it, with the proof of emptiness this server can give.
///
/// A process of a fork-and-exit chain is missed by a listing only while its parent finishes
/// exiting during the walk; that parent then leaves a zombie the server (a subreaper) reaps. So
/// the set is proven empty by [`QUIET_LISTINGS`] consecutive empty listings with no orphan
/// reaped from the first of them to the reap after the last (the background reaper's reaps
/// count too). The one zombie tokio reaps, a started process's main one, is covered by asking
/// for several listings. Another session's orphans only delay the proof.
struct Settling<'a> {
    members: &'a dyn Members,
    reaper: &'a Reaper,
    /// Consecutive empty listings with no orphan reaped since the first of them.
    quiet: u32,
    /// The reaped count before the first of those listings.
    since: u64,
}

impl cleanroom::contain::Scope for Settling<'_> {
    fn members(&mut self) -> Vec<ProcessInfo> {
        let before = self.reaper.reaped();
        let current = self.members.current();
        if !current.is_empty() {
            self.quiet = 0;
        } else if self.quiet == 0 || before != self.since {
            (self.quiet, self.since) = (1, before);
        } else {
            self.quiet += 1;
        }
        current
    }

    fn reap(&mut self) -> Children {
        self.reaper.reap_orphans();
        if self.quiet >= QUIET_LISTINGS && self.reaper.reaped() == self.since {
            Children::Unknown
        } else {
            Children::Some
        }
    }
}

/// A set of processes defined by a rule, listed afresh on every look.
pub trait Members {
    /// The living members now.
    fn current(&self) -> Vec<ProcessInfo>;
}

/// Everything one session started, whatever became of its process records: every descendant of
/// the server whose environment carries `CLEANROOM_SESSION_ID=<session id>` (a detached daemon
/// of a process the table forgot long ago included).
///
/// Liveness: a zombie thread-group leader whose other threads still run is alive (it still
/// runs code); its environment is read through a live thread.
#[derive(Clone, Debug)]
pub struct Scope {
    /// `CLEANROOM_SESSION_ID=<id>`, exactly as in the environment.
    pub env_entry: Vec<u8>,
}

/// The session tag every process of a session carries.
pub const SESSION_ID_VAR: &str = "CLEANROOM_SESSION_ID";

impl Scope {
    /// The scope of session `id`.
    pub fn of_session(id: &str) -> Scope {
        Scope {
            env_entry: format!("{SESSION_ID_VAR}={id}").into_bytes(),
        }
    }

    /// The tag's value.
    pub fn value(&self) -> &[u8] {
        &self.env_entry[SESSION_ID_VAR.len() + 1..]
    }
}

impl Members for Scope {
    fn current(&self) -> Vec<ProcessInfo> {
        let server = std::process::id() as i32;
        let mut stack = process::children(server);
        let mut seen: HashSet<i32> = HashSet::new();
        let mut members = Vec::new();
        while let Some(pid) = stack.pop() {
            if !seen.insert(pid) {
                continue;
            }
            stack.extend(process::children(pid));
            let tagged = process::is_alive(pid) && process::environ_has(pid, &self.env_entry);
            if let (true, Some(id)) = (tagged, ProcessId::of(pid)) {
                members.push(process::describe(id));
            }
        }
        members
    }
}

/// Who belongs to one started process: its main process while it lives, that process's
/// descendants, and every descendant of the server that carries its `CLEANROOM_EXEC_ID` (setsid
/// and double-forked children that re-parented to the server) or holds one of its output
/// descriptors (the same, after clearing its environment).
#[derive(Clone, Debug)]
pub struct Membership {
    /// The main process, named by pid + start time.
    pub main: ProcessId,
    /// `CLEANROOM_EXEC_ID=<uuid>`, exactly as in the environment.
    pub env_entry: Vec<u8>,
    /// The output descriptors as `/proc/<pid>/fd` links show them (`pipe:[ino]`, `/dev/pts/N`).
    pub output_links: Vec<Vec<u8>>,
}

impl Members for Membership {
    fn current(&self) -> Vec<ProcessInfo> {
        let server = std::process::id() as i32;
        let mut ids: Vec<ProcessId> = Vec::new();
        if process::still_alive(self.main) {
            ids.push(self.main);
            ids.extend(process::descendants(self.main.pid));
        }
        for id in process::descendants(server) {
            // Checked by pid, then confirmed by identity: a pid reused meanwhile is not adopted.
            if !ids.contains(&id)
                && (process::environ_has(id.pid, &self.env_entry) || self.holds_output(id.pid))
                && process::still_alive(id)
            {
                ids.push(id);
            }
        }
        ids.into_iter().map(process::describe).collect()
    }
}

impl Membership {
    fn holds_output(&self, pid: i32) -> bool {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|link| {
                self.output_links
                    .iter()
                    .any(|l| l == link.as_os_str().as_bytes())
            })
        })
    }
}
