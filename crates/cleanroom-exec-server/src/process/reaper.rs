//! Orphan reaping for a server that is a child subreaper and shares its children with tokio,
//! each reap attributed to the client session the orphan was, and the proof that a set of
//! members is empty which that attribution makes possible ([`Settling`]).
//!
//! Owns: the set of pids someone else waits for (tokio, the spawn's pidfd waiter, an `fs/*`
//! child); the reaping of every other exited child of the server; the ledger of what each
//! orphan was (the session cgroup leaf it died in, the tag a scan saw it carry, the kernel
//! session it was born in); and the handle to the terminations ([`Reaper::terminate`]).
//!
//! Invariants: `waitpid(-1)` is never called; a pid in the owned set is never reaped here; a pid
//! enters the set under the same lock as its spawn and the orphan reaps, so a child that exits
//! before it is registered cannot be stolen; an orphan is reaped through a pidfd opened before
//! its `/proc` entry is read, so the process read is the process reaped. A termination ends only
//! on proof that its set is empty: an empty listing alone proves nothing while a fork-and-exit
//! chain runs, and the proof of one session's set is disturbed only by the deaths of orphans
//! that may have been that session's (attributed to it, or to nobody), never by another
//! session's.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cleanroom::contain::{Children, Terminating, Termination};
use cleanroom::process::{self, ProcessInfo};

use super::members::{Members, Scope, SESSION_ID_VAR};
use super::terminations::{Stopped, Terminations};

/// How many consecutive empty listings, with no orphan that may have been the set's reaped
/// from the first of them to the reap after the last, prove a set empty.
const QUIET_LISTINGS: u32 = 3;

/// Kernel sessions remembered at most; past it the oldest half is forgotten (their orphans
/// then count for every set, which delays proofs but never makes one wrong).
const KERNEL_SESSIONS_CAP: usize = 16_384;

/// The pids others own, the lock that orders spawns against orphan reaps, the ledger of
/// orphans, and the terminations under way.
#[derive(Clone, Debug, Default)]
pub struct Reaper {
    owned: Arc<Mutex<HashSet<u32>>>,
    ledger: Arc<Mutex<Ledger>>,
    passes: Arc<Passes>,
    terminations: Terminations,
    /// `<the server's cgroup leaf, relative to the cgroup2 mount>/s-`: an orphan that died in a
    /// cgroup named so was that session's (as root, where each session has a leaf).
    session_leaves: Option<Arc<str>>,
}

/// The passes of [`Reaper::reap_orphans`], numbered in the order they begin: a pass that began
/// after a listing ended and has finished reaped every orphan that had exited when it began, and
/// counted each in the ledger, whichever thread ran it (the orphan reaper's, or another
/// termination's).
#[derive(Debug, Default)]
struct Passes {
    /// The number of the last pass begun.
    begun: AtomicU64,
    /// The highest number of a pass finished.
    finished: AtomicU64,
}

/// What the spawns and the orphan reaps taught: which session an orphan belonged to.
#[derive(Debug, Default)]
struct Ledger {
    /// Living orphans seen by a scan, by pid.
    orphans: HashMap<u32, Orphan>,
    /// Kernel sessions (`setsid`) known to be a client session's, by their id: every started
    /// process leads one, and so does a tagged orphan a scan saw lead one. A process stays in the
    /// kernel session it was born in unless it calls `setsid` itself, so an orphan never seen
    /// alive (a `(cmd &)` of a shell, a link of a fork-and-exit chain) is still known by its
    /// zombie's session id. Kept after the leader is reaped: the number stays allocated while any
    /// process is in the session, so a zombie of the session pins it (see [`Ledger::reaped`]).
    kernel_sessions: HashMap<u32, KernelSession>,
    /// Kernel sessions recorded so far (their order, for the cap).
    recorded: u64,
    /// Sessions with a termination under way: how many terminations, and how many orphans of
    /// theirs were reaped since the first began.
    watched: HashMap<Box<str>, (usize, u64)>,
    /// Orphans reaped that nothing attributes to a session: any set's, for all we know.
    unknown: u64,
}

/// A living orphan as a scan saw it.
#[derive(Debug)]
struct Orphan {
    start: u64,
    /// The session it carried (`None`: no session tag, or an environment that could not be
    /// read).
    session: Option<Box<str>>,
}

/// A kernel session known to be a client session's.
#[derive(Debug)]
struct KernelSession {
    session: Box<str>,
    /// The start time of its leader (the process whose pid is the session's id).
    leader_start: u64,
    order: u64,
}

impl Ledger {
    /// The reaps that may hide a member of `session`'s sets (only ever grows while watched).
    fn disturbances(&self, session: &str) -> u64 {
        self.unknown + self.watched.get(session).map_or(0, |w| w.1)
    }

    /// Kernel session `id`, led by a process that started at `leader_start`, is `session`'s.
    fn record_kernel_session(&mut self, id: u32, leader_start: u64, session: Box<str>) {
        self.recorded += 1;
        let order = self.recorded;
        let known = KernelSession {
            session,
            leader_start,
            order,
        };
        self.kernel_sessions.insert(id, known);
        if self.kernel_sessions.len() > KERNEL_SESSIONS_CAP {
            let mut orders: Vec<u64> = self.kernel_sessions.values().map(|k| k.order).collect();
            orders.sort_unstable();
            let oldest_kept = orders[orders.len() / 2];
            self.kernel_sessions.retain(|_, k| k.order >= oldest_kept);
        }
    }

    /// Session `session` has ended: its kernel sessions are no longer told apart (an orphan of
    /// one that is left is nobody's known, and counts for every set).
    fn forget_session(&mut self, session: &str) {
        self.kernel_sessions.retain(|_, k| &*k.session != session);
    }

    /// An orphan was reaped: a disturbance of every session it may have been (the one whose
    /// cgroup leaf it died in, the one a scan saw it carry, the one whose kernel session it was
    /// in), or of every session when nothing attributes it.
    fn reaped(&mut self, zombie: &Zombie) {
        let mut owners: Vec<Box<str>> = zombie.leaf_session.iter().cloned().collect();
        if let Some(seen) = self.orphans.remove(&zombie.pid) {
            if Some(seen.start) == zombie.start {
                owners.extend(seen.session);
            }
        }
        if let Some(id) = zombie.kernel_session {
            owners.extend(self.kernel_session_owner(id, zombie.session_number_now));
        }
        if owners.is_empty() {
            self.unknown += 1;
            return;
        }
        owners.sort_unstable();
        owners.dedup();
        for owner in owners {
            if let Some(watched) = self.watched.get_mut(&owner) {
                watched.1 += 1;
            }
        }
    }

    /// Whose kernel session `id` is, for a zombie in it; `now` is the start time of the
    /// process that has pid `id` now, if any (read while the zombie was unreaped).
    ///
    /// The zombie's session keeps the number `id` allocated, so no process can be given it: a
    /// process with that pid is either the recorded leader (same start time) or the leader of
    /// a newer session of that number (the recorded one ended, the number was freed and reused;
    /// the record is dropped). No process with that pid: the leader was reaped, and the session
    /// is taken to be the recorded one (it could only be a newer one whose leader, not a started
    /// process, also died unseen).
    fn kernel_session_owner(&mut self, id: u32, now: Option<u64>) -> Option<Box<str>> {
        let known = self.kernel_sessions.get(&id)?;
        match now {
            Some(start) if start != known.leader_start => {
                self.kernel_sessions.remove(&id);
                None
            }
            _ => Some(known.session.clone()),
        }
    }
}

impl Reaper {
    /// A reaper that also attributes orphans by the session cgroup leaf they died in, below the
    /// server's leaf `leaf` (relative to the cgroup2 mount, e.g. `/cleanroom-<run id>`).
    pub fn with_session_leaves(leaf: &str) -> Reaper {
        let leaf = leaf.trim_end_matches('/');
        Reaper {
            session_leaves: Some(format!("{leaf}/{}", super::members::SESSION_LEAF_PREFIX).into()),
            ..Reaper::default()
        }
    }

    /// Holds the lock across a spawn; register the new pid with [`SpawnGuard::own`].
    pub fn spawning(&self) -> SpawnGuard<'_> {
        SpawnGuard {
            owned: self.lock(),
            reaper: self,
        }
    }

    /// Returns once no spawn is between its clone and its exec (a spawn holds the lock until
    /// its child has executed).
    pub fn spawns_settled(&self) {
        drop(self.lock());
    }

    /// The owner of `pid` has reaped it (a kernel session it led stays known: its orphans may
    /// outlive it).
    pub fn release(&self, pid: i32) {
        if let Ok(pid) = u32::try_from(pid) {
            self.lock().remove(&pid);
        }
    }

    /// Session `scope` has ended: its kernel sessions are forgotten.
    pub fn forget_session(&self, scope: &Scope) {
        self.ledger().forget_session(&scope.session());
    }

    /// Reaps every exited child of the server nobody else owns, and learns which session each
    /// living orphan carries (blocking: procfs). The procfs reads run outside the lock, so
    /// a waiter releasing its pid or a spawn never waits for them; the reaps run under it, so a
    /// pid registered meanwhile is left alone.
    pub fn reap_orphans(&self) {
        let pass = self.passes.begun.fetch_add(1, Ordering::SeqCst) + 1;
        self.reap_orphans_now();
        self.passes.finished.fetch_max(pass, Ordering::SeqCst);
    }

    /// The number of the last pass of [`Reaper::reap_orphans`] begun so far.
    fn passes_begun(&self) -> u64 {
        self.passes.begun.load(Ordering::SeqCst)
    }

    /// Whether a pass begun after pass `after` has finished.
    fn finished_a_pass_after(&self, after: u64) -> bool {
        self.passes.finished.load(Ordering::SeqCst) > after
    }

    fn reap_orphans_now(&self) {
        let children = process::children(std::process::id());
        if children.is_empty() {
            return;
        }
        let (exited, living): (Vec<u32>, Vec<u32>) = children
            .into_iter()
            .partition(|&pid| !process::is_alive(pid));
        self.learn(living);
        if exited.is_empty() {
            return;
        }
        let leaves = self.session_leaves.as_deref();
        let zombies: Vec<Zombie> = exited
            .into_iter()
            .filter_map(|pid| Zombie::open(pid, leaves))
            .collect();
        let owned = self.lock();
        let mut ledger = self.ledger();
        for zombie in zombies {
            if !owned.contains(&zombie.pid) && zombie.reap() {
                ledger.reaped(&zombie);
            }
        }
    }

    /// Reaps the exited orphans and says what is left of the server's children (blocking):
    /// none at all proves, the server being a subreaper, that no descendant of it is left.
    /// For the shutdown's sweep, once no process can be spawned any more; the owners of the
    /// other exited children reap them meanwhile.
    pub fn reap_all(&self) -> Children {
        self.reap_orphans();
        match process::children(std::process::id()).is_empty() {
            true => Children::None,
            false => Children::Some,
        }
    }

    /// Records what each of `living` (children of the server) not yet known and not owned
    /// carries: its session tag, and the kernel session it leads if it called `setsid`. An
    /// entry left by an orphan reaped before it was recorded is replaced when its pid comes back
    /// on another orphan (the start time tells them apart).
    fn learn(&self, living: Vec<u32>) {
        let mut living: Vec<(u32, u64, Option<u32>)> = living
            .into_iter()
            .filter_map(|pid| {
                let fields = process::stat_fields(pid).ok()?;
                let start = fields.get(19)?.parse().ok()?;
                Some((pid, start, fields.get(3).and_then(|s| s.parse().ok())))
            })
            .collect();
        {
            let owned = self.lock();
            let ledger = self.ledger();
            living.retain(|(pid, start, _)| {
                !owned.contains(pid) && ledger.orphans.get(pid).is_none_or(|o| o.start != *start)
            });
        }
        let learnt: Vec<(u32, u64, bool, Option<Box<str>>)> = living
            .into_iter()
            .map(|(pid, start, kernel_session)| {
                (pid, start, kernel_session == Some(pid), session_of(pid))
            })
            .collect();
        let mut ledger = self.ledger();
        for (pid, start, leader, session) in learnt {
            if let (true, Some(session)) = (leader, &session) {
                ledger.record_kernel_session(pid, start, session.clone());
            }
            ledger.orphans.insert(pid, Orphan { start, session });
        }
    }

    /// Terminates `members` on the terminations' threads (TERM, `grace`, KILL until proven
    /// empty, see [`Terminations`]) and returns what needed SIGKILL and what survived it;
    /// `Err` if the server stopped the terminations first (its shutdown kills everything).
    pub async fn terminate(
        &self,
        members: Members,
        grace: Duration,
    ) -> Result<Termination, Stopped> {
        let session: Box<str> = members.session().into();
        let settling = Settling::new(members, self.clone());
        let done = self
            .terminations
            .submit(session, Box::new(settling), Terminating::new(grace));
        done.await.map_err(|_| Stopped)
    }

    /// Stops the terminations (shutdown: its sweep kills everything); those under way end
    /// with [`Stopped`].
    pub fn stop_terminations(&self) {
        self.terminations.stop();
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<u32>> {
        self.owned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An exited child as its `/proc/<pid>` entries show it before it is reaped, with a pidfd that
/// names it.
struct Zombie {
    pidfd: OwnedFd,
    pid: u32,
    start: Option<u64>,
    /// Its kernel session id (field 6).
    kernel_session: Option<u32>,
    /// The start time of the process whose pid is that session id now, if there is one.
    session_number_now: Option<u64>,
    /// The session whose cgroup leaf it died in.
    leaf_session: Option<Box<str>>,
}

impl Zombie {
    /// Opens a pidfd on `pid`, then reads it (`leaves`: see [`Reaper::session_leaves`]).
    fn open(pid: u32, leaves: Option<&str>) -> Option<Zombie> {
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?,
            rustix::process::PidfdFlags::empty(),
        )
        .ok()?;
        let fields = process::stat_fields(pid).unwrap_or_default();
        let kernel_session: Option<u32> = fields.get(3).and_then(|f| f.parse().ok());
        Some(Zombie {
            pidfd,
            pid,
            start: fields.get(19).and_then(|f| f.parse().ok()),
            kernel_session,
            session_number_now: kernel_session.and_then(|id| process::start_time(id).ok()),
            leaf_session: leaves.and_then(|prefix| session_leaf_of(pid, prefix)),
        })
    }

    /// Reaps it if it is an exited child of the server (never blocks); whether it was reaped
    /// now. A pidfd names one process: if another owner reaped it first, nothing is reaped,
    /// whatever now has its pid.
    fn reap(&self) -> bool {
        use rustix::process::{WaitId, WaitIdOptions};
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
        matches!(
            rustix::process::waitid(WaitId::PidFd(self.pidfd.as_fd()), options),
            Ok(Some(_))
        )
    }
}

/// The session whose cgroup leaf `<prefix><session id>` process `pid` is in (a zombie's cgroup
/// is still readable).
fn session_leaf_of(pid: u32, prefix: &str) -> Option<Box<str>> {
    let text = process::read_kernel_text(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let session = path.strip_prefix(prefix)?;
    (!session.is_empty() && !session.contains('/')).then(|| session.into())
}

/// The session `pid` carries in its environment (`CLEANROOM_SESSION_ID`), if it can be read.
fn session_of(pid: u32) -> Option<Box<str>> {
    let environ = process::environ(pid)?;
    let prefix = format!("{SESSION_ID_VAR}=");
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .and_then(|value| std::str::from_utf8(value).ok())
        .map(Box::from)
}

/// The reaper's lock, held while a child is spawned.
pub struct SpawnGuard<'a> {
    owned: MutexGuard<'a, HashSet<u32>>,
    reaper: &'a Reaper,
}

impl SpawnGuard<'_> {
    /// Marks `pid` as owned by someone else (who reaps it, then calls [`Reaper::release`]). A
    /// negative `pid_t` names no child, so there is nothing to own.
    pub fn own(&mut self, pid: i32) {
        if let Ok(pid) = u32::try_from(pid) {
            self.owned.insert(pid);
        }
    }

    /// Marks `pid`, just started (at `start`) as the leader of a kernel session of its own, as
    /// owned and as started by session `scope`: under the spawn's lock, before any orphan of it
    /// can be reaped, so a zombie in that kernel session is never taken for another's.
    pub fn own_leader(&mut self, pid: i32, start: u64, scope: &Scope) {
        self.own(pid);
        if let Ok(pid) = u32::try_from(pid) {
            (self.reaper.ledger()).record_kernel_session(pid, start, scope.session());
        }
    }
}

/// A set of members as the kill loops see it, with the proof of emptiness this server can give.
///
/// A process of a fork-and-exit chain is missed by a listing only while its parent finishes
/// exiting during the walk; that parent then leaves a zombie the server (a subreaper) reaps. So
/// the set is proven empty by [`QUIET_LISTINGS`] consecutive empty listings with no orphan reaped
/// from the first of them to the reap after the last that may have been that parent: one
/// attributed to the set's session (the parent of a member was in the member's cgroup leaf and
/// kernel session, and carries what the member inherited), or to none (the background reaper's
/// reaps count too). Another session's orphans do not count: they cannot hide this session's
/// processes, and under churn they die all the time. The one zombie an owner reaps, a started
/// process's main one, is covered by asking for several listings. With a session cgroup leaf,
/// the kernel's `populated 0` is required too, and `cgroup.kill` kills it whole.
///
/// The reap after a listing is any pass of [`Reaper::reap_orphans`] begun after it ended: one
/// that the orphan reaper or another termination finished meanwhile counts as well as one of its
/// own (the ledger is shared), so a round scans the server's children only when none did. Under
/// churn dozens of sessions end at once, each needing a few rounds, and a scan of its own in
/// each round made their proofs queue past the kill loop's bound.
pub(super) struct Settling {
    members: Members,
    reaper: Reaper,
    /// Consecutive empty listings with no disturbing reap since the first of them.
    quiet: u32,
    /// The disturbing reaps counted before the first of those listings.
    since: u64,
    /// The last pass of the orphan reaps begun when the last listing ended (`None`: no listing
    /// yet).
    listed_after_pass: Option<u64>,
}

impl Settling {
    /// Starts counting the reaps of `members`' session's orphans (until dropped).
    fn new(members: Members, reaper: Reaper) -> Settling {
        let mut ledger = reaper.ledger();
        let session = members.session().into();
        ledger.watched.entry(session).or_insert((0, 0)).0 += 1;
        drop(ledger);
        Settling {
            members,
            reaper,
            quiet: 0,
            since: 0,
            listed_after_pass: None,
        }
    }

    fn disturbances(&self) -> u64 {
        self.reaper.ledger().disturbances(self.members.session())
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        let mut ledger = self.reaper.ledger();
        if let Some(watched) = ledger.watched.get_mut(self.members.session()) {
            watched.0 -= 1;
            if watched.0 == 0 {
                ledger.watched.remove(self.members.session());
            }
        }
    }
}

impl cleanroom::contain::Scope for Settling {
    fn members(&mut self) -> Vec<ProcessInfo> {
        let before = self.disturbances();
        let current = self.members.current(|| self.reaper.spawns_settled());
        self.listed_after_pass = Some(self.reaper.passes_begun());
        if !current.is_empty() {
            self.quiet = 0;
        } else if self.quiet == 0 || before != self.since {
            (self.quiet, self.since) = (1, before);
        } else {
            self.quiet += 1;
        }
        current
    }

    fn term_whole(&mut self) {
        self.members.signal_groups(libc::SIGTERM);
    }

    fn kill_whole(&mut self) {
        if let Some(cgroup) = self.members.cgroup() {
            cgroup.kill();
        }
        self.members.signal_groups(libc::SIGKILL);
    }

    fn kernel_says_empty(&mut self) -> Option<bool> {
        self.members.kernel_says_empty()
    }

    fn reap(&mut self) -> Children {
        let reaped_since_listing = self
            .listed_after_pass
            .is_some_and(|pass| self.reaper.finished_a_pass_after(pass));
        if !reaped_since_listing {
            self.reaper.reap_orphans();
        }
        if self.quiet >= QUIET_LISTINGS && self.disturbances() == self.since {
            Children::Unknown
        } else {
            Children::Some
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cleanroom::contain::Scope as _;

    /// A round scans the server's children itself only when no pass of the orphan reaps begun
    /// after its last listing has finished; one the orphan reaper (or another termination) ran
    /// meanwhile serves instead, and one still under way (or begun before the listing) does not.
    #[test]
    fn a_round_reaps_itself_only_when_no_pass_followed_its_last_listing() {
        let reaper = Reaper::default();
        let scope = Scope::of_session("s");
        let members = Members::of_session(&scope, None, Vec::new());
        let mut settling = Settling::new(members, reaper.clone());
        settling.reap();
        assert_eq!(
            reaper.passes_begun(),
            1,
            "no listing yet: a pass of its own"
        );
        settling.members();
        settling.reap();
        assert_eq!(
            reaper.passes_begun(),
            2,
            "none since the listing: a pass of its own"
        );
        settling.members();
        reaper.reap_orphans();
        settling.reap();
        assert_eq!(reaper.passes_begun(), 3, "the orphan reaper's pass served");
        settling.members();
        let unfinished = reaper.passes.begun.fetch_add(1, Ordering::SeqCst) + 1;
        settling.reap();
        assert_eq!(
            reaper.passes_begun(),
            unfinished + 1,
            "a pass not finished does not serve"
        );
    }
}
