//! Containment: every process a run starts is found by membership and dies with the run.
//!
//! The ladder, strongest first (the choice is reported in `-v` logs, the JSON report and
//! `cleanroom doctor`):
//! 1. [`Mechanism::Cgroup`]: a cgroup v2 leaf per run, when the runner can create one (root, or
//!    a delegated subtree). Membership is exact; `cgroup.kill` kills atomically, forks included.
//! 2. [`Mechanism::Session`], always present as the floor: the runner is a child subreaper, so
//!    `setsid` and double-forked daemons re-parent to it; membership is "every descendant of the
//!    runner", and termination loops until that set is empty (Bazel's process-wrapper).
//!
//! A PID namespace is deliberately not the default: it changes what `ps`, pid files and
//! `kill -0` show the suite, and needs a user namespace when unprivileged, which changes the uid
//! the suite sees. The floor is complete for everything that does not re-parent outside the
//! runner's tree, and gc finds what a SIGKILLed runner left by `CLEANROOM_RUN_ID`.
//!
//! Invariants: processes are named by pid + start time and signalled through pidfds; the subreaper
//! flag is set before the first spawn; termination is TERM → grace → KILL-until-empty, and the
//! KILL phase loops (or uses `cgroup.kill`) so a process forking while being killed still dies.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde::Serialize;

use crate::process::{self, ProcessInfo};
use crate::Result;

pub(crate) use os::unescape_mountinfo;
pub use os::{
    cgroup2_mount, cgroup_root, kill_cgroup_path, reap_orphans, recorded_cgroup_members,
    reset_signals_on_exec, set_subreaper,
};

/// What the caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainMode {
    /// The strongest mechanism available.
    Auto,
    /// A cgroup, or an error.
    Cgroup,
    /// The subreaper floor only.
    Session,
}

/// The mechanism in use, weakest first (so `Ord` compares strength).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Subreaper + new process group + loop over descendants.
    Session,
    /// A cgroup v2 leaf with `cgroup.kill`.
    Cgroup,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::Session => "session (subreaper + process group)",
            Mechanism::Cgroup => "cgroup v2",
        })
    }
}

/// How long the KILL phase keeps looping before it reports survivors.
const KILL_LOOP_LIMIT: Duration = Duration::from_secs(10);

/// One run's containment.
#[derive(Debug)]
pub struct Container {
    mechanism: Mechanism,
    cgroup: Option<os::Cgroup>,
    fallback: Option<String>,
}

impl Container {
    /// Sets up containment for run `run_id`: subreaper always, plus a cgroup when possible.
    pub fn new(run_id: &str, mode: ContainMode) -> Result<Container> {
        set_subreaper()?;
        if mode == ContainMode::Session {
            return Ok(Container {
                mechanism: Mechanism::Session,
                cgroup: None,
                fallback: Some("session containment was requested".into()),
            });
        }
        match os::Cgroup::create(run_id) {
            Ok(cgroup) => Ok(Container {
                mechanism: Mechanism::Cgroup,
                cgroup: Some(cgroup),
                fallback: None,
            }),
            Err(e) if mode == ContainMode::Cgroup => Err(e),
            Err(e) => Ok(Container {
                mechanism: Mechanism::Session,
                cgroup: None,
                fallback: Some(format!("no cgroup: {e}")),
            }),
        }
    }

    /// The mechanism in use.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Why a stronger mechanism is not in use, if it is not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The run's cgroup directory, if any.
    pub fn cgroup_path(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|c| c.path())
    }

    /// Makes `command` start inside the container (joins the cgroup before exec).
    pub fn configure(&self, command: &mut Command) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.configure(command);
        }
    }

    /// Starts `command` inside the container and returns its pid: born in the cgroup when it
    /// can be, else joined in `pre_exec` ([`Container::configure`] must not have been called).
    pub fn spawn(&self, command: &mut Command) -> std::io::Result<i32> {
        match &self.cgroup {
            Some(cgroup) => cgroup.spawn(command),
            None => command.spawn().map(|child| child.id() as i32),
        }
    }

    /// Every living process of the run except the runner itself.
    pub fn members(&self) -> Vec<ProcessInfo> {
        match &self.cgroup {
            Some(cgroup) => cgroup.members(),
            None => process::descendants(std::process::id() as i32)
                .into_iter()
                .map(process::describe)
                .collect(),
        }
    }

    /// Sends `signal` to every member; returns the members signalled.
    pub fn signal_all(&self, signal: Signal) -> Vec<ProcessInfo> {
        let members = self.members();
        for member in &members {
            let _ = member.id.signal(signal);
        }
        members
    }

    /// TERM to every member, up to `grace` for them to go, then KILL until none is left.
    ///
    /// `reap` is called while waiting so that exited children of the runner do not linger as
    /// zombies. Returns the processes that had to be killed with SIGKILL.
    pub fn terminate(&self, grace: Duration, reap: &mut dyn FnMut()) -> Vec<ProcessInfo> {
        terminate_set(&mut || self.members(), grace, reap, &mut || {
            self.kill_cgroup()
        })
    }

    /// One atomic kill of the whole run where the kernel offers it (`cgroup.kill`); returns
    /// whether it was done.
    pub fn kill_cgroup(&self) -> bool {
        match &self.cgroup {
            Some(cgroup) => cgroup.kill().is_ok(),
            None => false,
        }
    }
}

/// Terminates the set of processes `members` describes: TERM, wait up to `grace`, then KILL in a
/// loop until the set is empty. `atomic_kill` may kill the whole set at once (cgroup.kill) and
/// returns whether it did. Returns what needed SIGKILL.
pub fn terminate_set(
    members: &mut dyn FnMut() -> Vec<ProcessInfo>,
    grace: Duration,
    reap: &mut dyn FnMut(),
    atomic_kill: &mut dyn FnMut() -> bool,
) -> Vec<ProcessInfo> {
    let mut termed: Vec<ProcessInfo> = Vec::new();
    let deadline = Instant::now() + grace;
    loop {
        reap();
        let current = members();
        if current.is_empty() && all_exited(&termed) {
            return Vec::new();
        }
        for member in current {
            if !termed.iter().any(|t| t.id == member.id) {
                let _ = member.id.signal(Signal::TERM);
                termed.push(member);
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_known_then_until_empty(&termed, members, reap, atomic_kill)
}

/// Whether every process in `signalled` has exited (is gone or a zombie).
///
/// An empty listing is only trusted once this holds: a process that is still exiting has not yet
/// handed its children to the subreaper, so a walk made meanwhile sees them under neither parent.
fn all_exited(signalled: &[ProcessInfo]) -> bool {
    signalled
        .iter()
        .all(|p| process::info(p.id.pid).map(|now| now.id) != Some(p.id))
}

/// SIGKILL to every member, repeatedly, until the set is empty (or [`KILL_LOOP_LIMIT`]).
pub fn kill_until_empty(
    members: &mut dyn FnMut() -> Vec<ProcessInfo>,
    reap: &mut dyn FnMut(),
    atomic_kill: &mut dyn FnMut() -> bool,
) -> Vec<ProcessInfo> {
    kill_known_then_until_empty(&[], members, reap, atomic_kill)
}

/// SIGKILLs the processes already `known` at once, then every member, repeatedly, until the set
/// is empty (or [`KILL_LOOP_LIMIT`]). Returns the processes that were alive to receive SIGKILL.
///
/// Listing the members first would give a fork loop time to multiply: on the session rung the
/// listing reads `/proc/<pid>/task/*/children`, which the kernel builds in time quadratic in
/// the number of children, so one listing of a process forking in a loop can take seconds,
/// during which it forks thousands more. Killing what is known first cuts the source.
pub fn kill_known_then_until_empty(
    known: &[ProcessInfo],
    members: &mut dyn FnMut() -> Vec<ProcessInfo>,
    reap: &mut dyn FnMut(),
    atomic_kill: &mut dyn FnMut() -> bool,
) -> Vec<ProcessInfo> {
    let started = Instant::now();
    let mut signalled: Vec<ProcessInfo> = known.to_vec();
    let mut killed: Vec<ProcessInfo> = known
        .iter()
        .filter(|p| p.id.signal(Signal::KILL).unwrap_or(false))
        .cloned()
        .collect();
    let mut round = 0u32;
    loop {
        reap();
        let current = members();
        if current.is_empty() {
            if all_exited(&signalled) {
                return killed;
            }
        } else if !atomic_kill() {
            for member in &current {
                let _ = member.id.signal(Signal::KILL);
            }
        }
        for member in current {
            if !killed.iter().any(|k| k.id == member.id) {
                killed.push(member.clone());
            }
            if !signalled.iter().any(|k| k.id == member.id) {
                signalled.push(member);
            }
        }
        if started.elapsed() > KILL_LOOP_LIMIT {
            tracing::warn!("processes survived {KILL_LOOP_LIMIT:?} of SIGKILL");
            return killed;
        }
        round += 1;
        std::thread::sleep(Duration::from_micros(200 * u64::from(round.min(25))));
    }
}

/// Kills what a dead runner left behind: processes of `uid` carrying `CLEANROOM_RUN_ID=run_id`,
/// and the run's cgroup if one was recorded. Returns the processes found.
pub fn kill_orphans(run_id: &str, uid: u32, cgroup: Option<&str>) -> Vec<ProcessInfo> {
    let mut found = Vec::new();
    if let Some(path) = cgroup {
        found.extend(kill_cgroup_path(Path::new(path), run_id));
    }
    let mut members = || process::with_env_entry(crate::env::RUN_ID_VAR, run_id, uid);
    let killed = kill_until_empty(&mut members, &mut || reap_orphans(&|_| false), &mut || {
        false
    });
    found.extend(killed);
    found
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove();
        }
    }
}
