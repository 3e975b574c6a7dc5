//! Containment on macOS (the `os` module of `contain`): a process group per run. Type-checked
//! only (docs/macos.md).
//!
//! The command is spawned as the leader of a new process group (`setpgid(0, 0)` before exec);
//! members are listed with `proc_listpgrppids` and signalled with `killpg`. The [`Group`] owns the
//! leader and reaps it itself, last: until then the leader is at most a zombie, so its pid, the
//! group's id, cannot be reused, and a signal to the group reaches no process outside the run.
//!
//! Invariants: the group is signalled only while its leader is unreaped; a leak is a process
//! still in the group once the leader exited, named, then TERMed, given the leak grace, and
//! KILLed until the group is empty (bounded: what is left after that is a survivor).
//!
//! Weaker than Linux's cgroup and Windows' job: a process that calls `setsid` or `setpgid` leaves
//! the group unseen (kqueue's `NOTE_TRACK`, which could follow forks, is gone from macOS), and
//! nothing guards the run if the runner itself is killed: the group outlives it.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use super::{wait_until_empty, EMPTY_WAIT};
use crate::process::{self, ProcessInfo};

/// One run's process group, led by the command.
#[derive(Debug)]
pub struct Group {
    leader: Child,
    pgid: Pid,
}

/// What the end of a run's group found and did.
#[derive(Debug)]
pub struct Ended {
    /// How the leader (the command) ended, when it could be reaped.
    pub status: Option<ExitStatus>,
    /// What [`Group::finish`] found still in the group once the leader had exited.
    pub leaked: Vec<ProcessInfo>,
    /// What [`Group::finish`] had to KILL.
    pub killed: Vec<ProcessInfo>,
    /// What was still in the group when the KILL loop gave up.
    pub survivors: Vec<ProcessInfo>,
    /// The KILL loop gave up, but nothing still in the group could be named.
    pub unnamed_survivors: bool,
}

/// What a KILL of the whole group achieved.
#[derive(Debug, Default)]
pub struct Killed {
    /// The processes alive to receive SIGKILL (the leader included, when it was).
    pub killed: Vec<ProcessInfo>,
    /// Those still in the group when the wait for it to empty gave up.
    pub survivors: Vec<ProcessInfo>,
    /// The wait gave up (the group could not be listed, or did not empty), but none of those
    /// still in it could be named.
    pub unnamed_survivors: bool,
}

impl Group {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> io::Result<Group> {
        let leader = command.process_group(0).spawn()?;
        let pgid = i32::try_from(leader.id())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::other("the spawned command has no valid pid"))?;
        Ok(Group { leader, pgid })
    }

    /// The leader's pid, which is the group's id.
    pub fn leader(&self) -> u32 {
        self.leader.id()
    }

    /// Whether the leader has exited. It is left unreaped (a zombie), so the group id stays the
    /// run's; an error (it cannot be asked) counts as exited, so that no wait hangs on it (and
    /// [`Group::finish`] KILLs the group before it reaps the leader).
    pub fn leader_exited(&self) -> bool {
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        !matches!(
            rustix::process::waitid(WaitId::Pid(self.pgid), options),
            Ok(None)
        )
    }

    /// The pids currently in the group (the unreaped leader and other zombies included). A
    /// list without the leader, which stays in the group until it is reaped, is an error: the
    /// kernel's answer cannot be trusted to say the group is empty.
    pub fn pids(&self) -> io::Result<Vec<i32>> {
        let pids = crate::sys::macos::process_group_pids(self.pgid.as_raw_nonzero().get())?;
        if !pids.contains(&(self.leader() as i32)) {
            return Err(io::Error::other(format!(
                "the list of process group {} lacks its unreaped leader",
                self.pgid.as_raw_nonzero()
            )));
        }
        Ok(pids)
    }

    /// The group's processes but the leader, named (gone and zombie ones left out).
    pub fn others(&self) -> Vec<ProcessInfo> {
        let leader = self.leader();
        let pids = self.pids().unwrap_or_default();
        pids.into_iter()
            .filter_map(|pid| u32::try_from(pid).ok())
            .filter(|&pid| pid != leader)
            .filter_map(process::info)
            .collect()
    }

    /// How many processes but the leader are alive in the group (zombies left out, as
    /// [`Group::others`] leaves them out: a zombie whose parent never reaps it is no process to
    /// end; one that cannot be read counts).
    fn others_left(&self) -> io::Result<usize> {
        let leader = self.leader() as i32;
        let pids = self.pids()?.into_iter();
        Ok(pids
            .filter(|&p| p != leader && !crate::sys::macos::is_zombie(p))
            .count())
    }

    /// Sends `signal` to the group (a group already empty is no error).
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        match rustix::process::kill_process_group(self.pgid, signal) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// KILLs the whole group, the leader included, and waits (bounded by [`EMPTY_WAIT`]) until
    /// only the leader's zombie is left.
    pub fn kill_until_empty(&self) -> Killed {
        let mut killed = self.others();
        if !self.leader_exited() {
            killed.extend(process::info(self.leader()));
        }
        self.kill_and_account(killed)
    }

    /// KILLs the group, waits (bounded by [`EMPTY_WAIT`]) until it is empty, and accounts
    /// `signalled` as killed or surviving.
    fn kill_and_account(&self, signalled: Vec<ProcessInfo>) -> Killed {
        if let Err(e) = self.signal(Signal::KILL) {
            tracing::warn!(
                "cannot kill process group {}: {e}",
                self.pgid.as_raw_nonzero()
            );
        }
        let emptied = self.wait_until_empty(EMPTY_WAIT);
        self.account(signalled, emptied)
    }

    /// Ends the group once its leader has exited: what is still in it is a leak, named, TERMed,
    /// given `grace` (zero: KILLed at once), then KILLed until the group is empty; then the
    /// leader is reaped.
    pub fn finish(mut self, grace: Duration) -> Ended {
        let leaked = self.others();
        let mut ended = Killed::default();
        // Counted, not named: a member that cannot be described is still ended.
        if !matches!(self.others_left(), Ok(0)) {
            let termed = !grace.is_zero() && self.signal(Signal::TERM).is_ok();
            let gone = termed && self.wait_until_empty(grace).is_ok();
            if !gone {
                ended = self.kill_and_account(self.others());
            }
        }
        // The leader's wait blocks: should it not have exited after all (`leader_exited` takes
        // an error for an exit), the whole group is KILLed first, so the wait cannot hang.
        // Only a leader known to be unreaped and alive: an error (reaped elsewhere) means its
        // group id may be another's by now.
        if matches!(self.leader.try_wait(), Ok(None)) {
            let _ = self.signal(Signal::KILL);
        }
        let status = self.leader.wait().ok();
        Ended {
            status,
            leaked,
            killed: ended.killed,
            survivors: ended.survivors,
            unnamed_survivors: ended.unnamed_survivors,
        }
    }

    /// Waits up to `limit` until no process but the leader's zombie is in the group.
    fn wait_until_empty(&self, limit: Duration) -> io::Result<()> {
        let pgid = self.pgid.as_raw_nonzero();
        wait_until_empty(
            limit,
            || Ok(self.others_left()? + usize::from(!self.leader_exited())),
            |n| format!("{n} process(es) still in process group {pgid} {limit:?} after a signal"),
        )
    }

    /// The result of a KILL: `signalled` minus whatever is still in the group, which survived.
    fn account(&self, signalled: Vec<ProcessInfo>, emptied: io::Result<()>) -> Killed {
        if emptied.is_ok() {
            return Killed {
                killed: signalled,
                ..Killed::default()
            };
        }
        let survivors = self.others();
        let killed = signalled
            .into_iter()
            .filter(|p| !survivors.iter().any(|s| s.id == p.id))
            .collect();
        Killed {
            killed,
            unnamed_survivors: survivors.is_empty(),
            survivors,
        }
    }
}
