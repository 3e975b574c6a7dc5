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
//! 2. The floor is on for the cgroup rung too: a process that left the leaf (root can write
//!    itself into another cgroup) is still a descendant of the runner, so still a member.
//!
//! A PID namespace is deliberately not the default: it changes what `ps`, pid files and
//! `kill -0` show the suite, and needs a user namespace when unprivileged, which changes the uid
//! the suite sees. The run's [`Watchdog`] kills it if the runner dies; gc finds what is left
//! after that by `CLEANROOM_RUN_ID`. A process that, before the runner died, left the leaf (or
//! runs on the session rung), the command's process group and the tag is no longer provably the
//! run's once the runner is dead, and survives (docs/containment.md says so).
//!
//! Invariants: processes are named by pid + start time and signalled through pidfds; liveness is
//! [`process::is_alive`] (a `Z` leader with live threads is alive); the subreaper flag is set
//! before the first spawn; termination is TERM → grace → KILL-until-provably-empty: every KILL
//! round writes `cgroup.kill` and kills the command's group and every member, and only
//! `populated 0` plus `waitpid` finding no child (see [`Scope`]) ends it — an empty listing
//! never does; a loop that hits its bound names the survivors on stderr.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;
#[cfg(target_os = "linux")]
mod watchdog;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde::Serialize;

use crate::error::Result;
use crate::process::{self, ProcessInfo};

pub(crate) use os::unescape_mountinfo;
pub use os::{
    cgroup2_mount, cgroup_root, exited_children, group_may_have_members, kill_cgroup_path,
    kill_group_of, reap_exited, reap_orphans, recorded_cgroup_members, reset_signals_on_exec,
    set_subreaper, signal_group_of, CloneArgs, CLONE_INTO_CGROUP,
};
pub use watchdog::Watchdog;
pub(crate) use watchdog::{COMM as WATCHDOG_COMM, TITLE_PREFIX as WATCHDOG_TITLE_PREFIX};

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

/// What reaping learnt about the runner's children.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Children {
    /// The caller cannot tell (another owner, such as tokio, reaps some children): the member
    /// listing decides alone.
    Unknown,
    /// No child is left but the ones the container keeps (its watchdog). As the runner is a
    /// subreaper, no descendant of it is left either.
    None,
    /// Children are still alive or exiting.
    Some,
}

/// What a termination achieved.
#[derive(Debug, Default)]
pub struct Termination {
    /// The processes that were alive to receive SIGKILL and are dead now.
    pub killed: Vec<ProcessInfo>,
    /// The processes still alive when the KILL loop hit its bound (never counted as killed).
    pub survivors: Vec<ProcessInfo>,
}

/// A set of processes to terminate, as the kill loops see it.
///
/// An empty member listing alone is never proof: a fork-and-exit chain has a process in flight
/// (forked, or exiting before its children re-parent) that no listing sees. The proofs are
/// `cgroup.events` saying `populated 0` and `waitpid` finding no child at all.
pub trait Scope {
    /// The living members now.
    fn members(&mut self) -> Vec<ProcessInfo>;
    /// Reaps exited children and says what is left.
    fn reap(&mut self) -> Children;
    /// Whether the kernel says the set is empty (`cgroup.events`), when it can tell.
    fn kernel_says_empty(&mut self) -> Option<bool> {
        None
    }
    /// SIGTERM to the whole set at once where the kernel offers it (a process group); done once,
    /// before the first listing.
    fn term_whole(&mut self) {}
    /// SIGKILL to the whole set at once where the kernel offers it (`cgroup.kill`, the
    /// command's process group); done every round of the KILL phase, unconditionally.
    fn kill_whole(&mut self) {}
}

/// A [`Scope`] made of a member listing and a reaper that cannot tell what is left.
pub struct Listed<'a> {
    /// The living members now.
    pub members: &'a mut dyn FnMut() -> Vec<ProcessInfo>,
    /// Reaps exited children.
    pub reap: &'a mut dyn FnMut(),
}

impl Scope for Listed<'_> {
    fn members(&mut self) -> Vec<ProcessInfo> {
        (self.members)()
    }

    fn reap(&mut self) -> Children {
        (self.reap)();
        Children::Unknown
    }
}

/// One run's containment.
#[derive(Debug)]
pub struct Container {
    mechanism: Mechanism,
    cgroup: Option<os::Cgroup>,
    fallback: Option<String>,
    watchdog: Option<Watchdog>,
    /// Processes survived the KILL loop: the leaf is left for gc.
    survived: bool,
    /// Why the watchdog stopped guarding the run, once it is disarmed.
    watchdog_lost: Option<&'static str>,
    /// The command's process group, once started: its leader's pid and a pidfd on it (the
    /// group is only ever signalled through that pidfd, see [`os::kill_group_of`]).
    group: Option<(i32, std::os::fd::OwnedFd)>,
    /// Other children of the runner that are its own helpers, not members (see [`Self::keep`]).
    helpers: Vec<i32>,
}

impl Container {
    /// Sets up containment for run `run_id`: subreaper always, plus a cgroup when possible.
    pub fn new(run_id: &str, mode: ContainMode) -> Result<Container> {
        set_subreaper()?;
        let (mechanism, cgroup, fallback) = match mode {
            ContainMode::Session => (
                Mechanism::Session,
                None,
                Some("session containment was requested".into()),
            ),
            _ => match os::Cgroup::create(run_id) {
                Ok(cgroup) => (Mechanism::Cgroup, Some(cgroup), None),
                Err(e) if mode == ContainMode::Cgroup => return Err(e),
                Err(e) => (Mechanism::Session, None, Some(format!("no cgroup: {e}"))),
            },
        };
        Ok(Container {
            mechanism,
            cgroup,
            fallback,
            watchdog: None,
            watchdog_lost: None,
            survived: false,
            group: None,
            helpers: Vec::new(),
        })
    }

    /// Starts the watchdog that kills the run if the runner dies (see [`Watchdog`]); call it
    /// before the command is spawned. A watchdog that cannot start is logged, not fatal: the
    /// report says whether one runs.
    pub fn arm_watchdog(&mut self, run_id: &str) {
        let cgroup = self.cgroup.as_ref().map(|c| (c.dir(), c.path()));
        match Watchdog::start(run_id, cgroup) {
            Ok(watchdog) => self.watchdog = Some(watchdog),
            Err(e) => tracing::warn!("no watchdog: {e}"),
        }
    }

    /// Whether a watchdog guards the run against the runner's death (until it is disarmed).
    pub fn has_watchdog(&self) -> bool {
        self.watchdog.is_some()
    }

    /// Looks whether the watchdog was stopped or killed (loudly, once); see [`Watchdog::check`].
    pub fn check_watchdog(&self) {
        if let Some(watchdog) = &self.watchdog {
            watchdog.check();
        }
    }

    /// Ends the watchdog once the run is provably over; returns why it had been lost, if it had
    /// been (stopped or killed during the run).
    pub fn disarm_watchdog(&mut self) -> Option<&'static str> {
        if let Some(watchdog) = self.watchdog.take() {
            self.watchdog_lost = watchdog.disarm();
        }
        self.watchdog_lost
    }

    /// Releases the watchdog once the run is provably over (see [`Watchdog::release`]) and hands
    /// it over, to be disarmed when the caller's remaining work (the cgroup's and the root's
    /// removal) is done; returns it with why it had been lost, if it had been.
    pub fn release_watchdog(&mut self) -> (Option<Watchdog>, Option<&'static str>) {
        let watchdog = self.watchdog.take();
        if let Some(watchdog) = &watchdog {
            self.watchdog_lost = watchdog.release();
        }
        (watchdog, self.watchdog_lost)
    }

    /// Processes of the run survived SIGKILL: the cgroup is left in place for gc (recorded in
    /// the root's marker) rather than removed.
    pub fn left_survivors(&mut self) {
        self.survived = true;
    }

    /// Whether `pid`, a child of the runner, is one the container keeps and is reaped by its
    /// owner (the watchdog, [`Self::keep`]'s helpers): the runner's reaping must skip it.
    pub fn keeps(&self, pid: i32) -> bool {
        self.watchdog.as_ref().is_some_and(|w| w.pid() == pid) || self.helpers.contains(&pid)
    }

    /// Makes `pid`, a child of the runner that is the runner's own helper (the terminal's key
    /// relay, which lives in the command's process group), no member of the run: it is neither
    /// listed, nor signalled but by the group kill, nor reaped here; its owner reaps it.
    pub fn keep(&mut self, pid: i32) {
        self.helpers.push(pid);
    }

    /// The command started as `main`, the leader of its own process group. Call it before
    /// anything can reap `main`, so that the pidfd taken here is the command's.
    pub fn started(&mut self, main: i32) {
        let pidfd = rustix::process::Pid::from_raw(main).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        match pidfd {
            Some(fd) => self.group = Some((main, fd)),
            None => tracing::warn!(
                "no pidfd on the command (pid {main}): its group is not killed as a whole"
            ),
        }
        if let Some(watchdog) = &self.watchdog {
            watchdog.guard_group(main);
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

    /// The leaf's directory and its `cgroup.procs` (open for writing), for a child started
    /// without [`std::process::Command`]: born in the directory (`clone3` with
    /// `CLONE_INTO_CGROUP`), or joined by writing "0" to `cgroup.procs` before exec, which is
    /// the whole of what [`Container::configure`] arranges (a single async-signal-safe write).
    pub fn cgroup_leaf(
        &self,
    ) -> Option<(std::os::fd::BorrowedFd<'_>, std::os::fd::BorrowedFd<'_>)> {
        use std::os::fd::AsFd;
        self.cgroup.as_ref().map(|c| (c.dir().as_fd(), c.procs()))
    }

    /// A cgroup leaf `name` below the container's, when the container has a cgroup (`None`
    /// otherwise): a part of the run with exact membership of its own. Its processes stay
    /// members of the container.
    pub fn cgroup_below(&self, name: &str) -> Option<Result<SubCgroup>> {
        let cgroup = self.cgroup.as_ref()?;
        Some(cgroup.create_below(name).map(SubCgroup))
    }

    /// Starts `command` inside the container and returns its pid: born in the cgroup when it
    /// can be, else joined in `pre_exec` ([`Container::configure`] must not have been called).
    pub fn spawn(&self, command: &mut Command) -> std::io::Result<i32> {
        match &self.cgroup {
            Some(cgroup) => cgroup.spawn(command),
            None => command.spawn().map(|child| child.id() as i32),
        }
    }

    /// Every living process of the run except the runner itself (and its watchdog): the
    /// cgroup's members, and on every rung the runner's descendants, so that a process that
    /// left the cgroup (as root it can write itself into another one) is still found.
    pub fn members(&self) -> Vec<ProcessInfo> {
        let mut members = self
            .cgroup
            .as_ref()
            .map(|c| c.members())
            .unwrap_or_default();
        for id in process::descendants(std::process::id()) {
            let kept = libc::pid_t::try_from(id.pid).is_ok_and(|pid| self.keeps(pid));
            if !kept && !members.iter().any(|m| m.id == id) {
                members.push(process::describe(id));
            }
        }
        members
    }

    /// Sends `signal` to every member; returns the members signalled.
    ///
    /// One listing, as `kill(-pgid)` reaches the group as it is: a child forked by a signal
    /// handler afterwards is left to its parent. A child whose fork completed after the
    /// listing but before its parent took the signal is not signalled either (the kernel would
    /// need the cgroup frozen around the listing to rule that out).
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
    /// zombies. Returns what needed SIGKILL and what survived it.
    pub fn terminate(&self, grace: Duration, reap: &mut dyn FnMut()) -> Termination {
        terminate_set(
            &mut Contained {
                container: self,
                reap: &mut || {
                    reap();
                    Children::Unknown
                },
            },
            grace,
        )
    }

    /// Whether `children`, the direct children of the runner left after reaping, are only the
    /// ones the container keeps.
    pub fn only_kept(&self, children: &[u32]) -> bool {
        children
            .iter()
            .all(|&c| libc::pid_t::try_from(c).is_ok_and(|c| self.keeps(c)))
    }
}

/// A cgroup leaf below a [`Container`]'s ([`Container::cgroup_below`]): its members exactly,
/// `cgroup.kill` and `populated` for that part of the run alone. Removed when dropped if it is
/// empty; else the container's removal takes it.
#[derive(Debug)]
pub struct SubCgroup(os::Cgroup);

impl SubCgroup {
    /// The leaf's directory and its `cgroup.procs`, as [`Container::cgroup_leaf`].
    pub fn fds(&self) -> (std::os::fd::BorrowedFd<'_>, std::os::fd::BorrowedFd<'_>) {
        use std::os::fd::AsFd;
        (self.0.dir().as_fd(), self.0.procs())
    }

    /// Makes `command` join the leaf before exec, as [`Container::configure`].
    pub fn configure(&self, command: &mut Command) {
        self.0.configure(command);
    }

    /// The leaf's directory.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The living processes in the leaf (and in any cgroup below it).
    pub fn members(&self) -> Vec<ProcessInfo> {
        self.0.members()
    }

    /// `cgroup.kill` and SIGKILL to every member, then a few milliseconds for `populated 0`.
    pub fn kill(&self) {
        self.0.kill();
    }

    /// Whether a process is still in the leaf (or below it).
    pub fn populated(&self) -> bool {
        self.0.populated()
    }
}

impl Drop for SubCgroup {
    fn drop(&mut self) {
        self.0.remove_if_empty();
    }
}

/// A [`Container`] as a [`Scope`], with the caller's reaper.
pub struct Contained<'a> {
    /// The run's containment.
    pub container: &'a Container,
    /// Reaps the runner's exited children and says what is left.
    pub reap: &'a mut dyn FnMut() -> Children,
}

impl Scope for Contained<'_> {
    fn members(&mut self) -> Vec<ProcessInfo> {
        self.container.members()
    }

    fn reap(&mut self) -> Children {
        (self.reap)()
    }

    fn kernel_says_empty(&mut self) -> Option<bool> {
        let cgroup = self.container.cgroup.as_ref()?;
        Some(!cgroup.populated())
    }

    fn kill_whole(&mut self) {
        if let Some(cgroup) = &self.container.cgroup {
            cgroup.kill();
        }
        if let Some((group, leader)) = &self.container.group {
            os::kill_group_of(leader, *group);
        }
    }
}

/// Terminates the set of processes `scope` describes: TERM, wait up to `grace`, then KILL in a
/// loop until the set is provably empty. Returns what needed SIGKILL and what survived it.
pub fn terminate_set(scope: &mut dyn Scope, grace: Duration) -> Termination {
    Terminating::new(grace).run(scope)
}

/// Whether an empty listing may be trusted: every process in `signalled` has exited (a process
/// still exiting has not yet handed its children to the subreaper, so a walk made meanwhile sees
/// them under neither parent), the runner has no child left, and the kernel does not say
/// otherwise (`cgroup.events`).
fn settled(scope: &mut dyn Scope, children: Children, signalled: &[ProcessInfo]) -> bool {
    children != Children::Some
        && scope.kernel_says_empty() != Some(false)
        && signalled
            .iter()
            .all(|p| process::info(p.id.pid).map(|now| now.id) != Some(p.id))
}

/// SIGKILLs the processes already `known` at once, then the whole set and every member,
/// repeatedly, until the set is provably empty (see [`settled`]) or [`KILL_LOOP_LIMIT`], when
/// the survivors are reported loudly. Returns the processes that were alive to receive SIGKILL
/// and died, and the survivors (a survivor is never reported as killed).
///
/// Listing the members first would give a fork loop time to multiply: on the session rung the
/// listing reads `/proc/<pid>/task/*/children`, which the kernel builds in time quadratic in
/// the number of children, so one listing of a process forking in a loop can take seconds,
/// during which it forks thousands more. Killing what is known first cuts the source.
pub fn kill_until_empty(scope: &mut dyn Scope, known: &[ProcessInfo]) -> Termination {
    Terminating::kill(known).run(scope)
}

/// A termination under way, one round at a time: TERM to the whole set and every member, up to
/// the grace for them to go, then KILL until the set is provably empty. No round sleeps:
/// [`terminate_set`] sleeps between them; a caller ending many sets at once can interleave their
/// rounds on a few threads of its own.
#[derive(Debug)]
pub struct Terminating {
    stage: Stage,
    /// Every process signalled so far.
    signalled: Vec<ProcessInfo>,
    /// The processes that were alive to receive SIGKILL.
    killed: Vec<ProcessInfo>,
}

#[derive(Debug)]
enum Stage {
    /// TERM to new members each round until `deadline`; `struck` once the whole set had it.
    Term { deadline: Instant, struck: bool },
    /// KILL each round; `started` once the processes signalled before were killed.
    Kill {
        started: Option<Instant>,
        round: u32,
    },
}

/// What a round of a [`Terminating`] left to do.
#[derive(Debug)]
pub enum Round {
    /// The set is provably empty, or the KILL loop hit its bound.
    Done(Termination),
    /// The set is not done: run the next round after this pause.
    Again(Duration),
}

impl Terminating {
    /// TERM first, KILL after `grace`.
    pub fn new(grace: Duration) -> Terminating {
        Terminating {
            stage: Stage::Term {
                deadline: Instant::now() + grace,
                struck: false,
            },
            signalled: Vec::new(),
            killed: Vec::new(),
        }
    }

    /// KILL at once, `known` first (see [`kill_until_empty`]).
    pub fn kill(known: &[ProcessInfo]) -> Terminating {
        Terminating {
            stage: Stage::Kill {
                started: None,
                round: 0,
            },
            signalled: known.to_vec(),
            killed: Vec::new(),
        }
    }

    /// Whether the next round signals the set for the first time with TERM or with KILL (the
    /// start, or the grace is over): a caller interleaving rounds runs these before the others.
    pub fn signals_next(&self) -> bool {
        match self.stage {
            Stage::Term { struck, deadline } => !struck || Instant::now() >= deadline,
            Stage::Kill { started, .. } => started.is_none(),
        }
    }

    /// Rounds back to back on this thread until the set is done.
    pub fn run(mut self, scope: &mut dyn Scope) -> Termination {
        loop {
            match self.round(scope) {
                Round::Done(termination) => return termination,
                Round::Again(pause) => std::thread::sleep(pause),
            }
        }
    }

    /// One round: reap, list, signal what is new, and say whether the set is done.
    pub fn round(&mut self, scope: &mut dyn Scope) -> Round {
        match self.stage {
            Stage::Term { deadline, struck } => self.term_round(scope, deadline, struck),
            Stage::Kill { started, round } => self.kill_round(scope, started, round),
        }
    }

    fn term_round(&mut self, scope: &mut dyn Scope, deadline: Instant, struck: bool) -> Round {
        if !struck {
            scope.term_whole();
            self.stage = Stage::Term {
                deadline,
                struck: true,
            };
        }
        let children = scope.reap();
        let current = scope.members();
        if current.is_empty() && settled(scope, children, &self.signalled) {
            return Round::Done(Termination::default());
        }
        for member in current {
            if !self.signalled.iter().any(|t| t.id == member.id) {
                let _ = member.id.signal(Signal::TERM);
                self.signalled.push(member);
            }
        }
        if Instant::now() < deadline {
            return Round::Again(Duration::from_millis(5));
        }
        self.stage = Stage::Kill {
            started: None,
            round: 0,
        };
        Round::Again(Duration::ZERO)
    }

    fn kill_round(&mut self, scope: &mut dyn Scope, started: Option<Instant>, round: u32) -> Round {
        let started = started.unwrap_or_else(|| {
            self.killed = (self.signalled.iter())
                .filter(|p| p.id.signal(Signal::KILL).unwrap_or(false))
                .cloned()
                .collect();
            Instant::now()
        });
        scope.kill_whole();
        let children = scope.reap();
        let current = scope.members();
        for member in &current {
            let _ = member.id.signal(Signal::KILL);
        }
        if current.is_empty() && settled(scope, children, &self.signalled) {
            return Round::Done(Termination {
                killed: std::mem::take(&mut self.killed),
                survivors: Vec::new(),
            });
        }
        for member in current {
            if !self.killed.iter().any(|k| k.id == member.id) {
                self.killed.push(member.clone());
            }
            if !self.signalled.iter().any(|k| k.id == member.id) {
                self.signalled.push(member);
            }
        }
        if started.elapsed() > KILL_LOOP_LIMIT {
            let survivors = report_survivors(scope, children);
            let mut killed = std::mem::take(&mut self.killed);
            killed.retain(|k| !survivors.iter().any(|s| s.id == k.id));
            return Round::Done(Termination { killed, survivors });
        }
        let round = round + 1;
        self.stage = Stage::Kill {
            started: Some(started),
            round,
        };
        Round::Again(Duration::from_micros(200 * u64::from(round.min(25))))
    }
}

/// Says, as loudly as the runner can, that the KILL loop gave up with processes left; returns
/// them.
fn report_survivors(scope: &mut dyn Scope, children: Children) -> Vec<ProcessInfo> {
    let survivors = scope.members();
    let listed: Vec<String> = survivors
        .iter()
        .map(|p| format!("pid {} ({})", p.id.pid, p.command))
        .collect();
    tracing::error!(
        "processes survived {KILL_LOOP_LIMIT:?} of SIGKILL: [{}]{}{}",
        listed.join(", "),
        match children {
            Children::Some => "; the runner still has children",
            _ => "",
        },
        match scope.kernel_says_empty() {
            Some(false) => "; the cgroup is still populated",
            _ => "",
        }
    );
    eprintln!(
        "cleanroom: error: processes of the run survived {KILL_LOOP_LIMIT:?} of SIGKILL: [{}]",
        listed.join(", ")
    );
    survivors
}

/// Kills what a dead runner left behind: processes of `uid` carrying `CLEANROOM_RUN_ID=run_id`,
/// and the run's cgroup if one was recorded. Returns the processes found.
pub fn kill_orphans(run_id: &str, uid: u32, cgroup: Option<&str>) -> Vec<ProcessInfo> {
    let mut found = Vec::new();
    if let Some(path) = cgroup {
        found.extend(kill_cgroup_path(Path::new(path), run_id));
    }
    let mut members = || process::with_env_entry(crate::env::RUN_ID_VAR, run_id, uid);
    let mut reap = || {
        reap_orphans(&|_| false);
    };
    let ended = kill_until_empty(
        &mut Listed {
            members: &mut members,
            reap: &mut reap,
        },
        &[],
    );
    found.extend(ended.killed);
    found.extend(ended.survivors);
    found
}

impl Drop for Container {
    fn drop(&mut self) {
        self.disarm_watchdog();
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove(self.survived);
        }
    }
}
