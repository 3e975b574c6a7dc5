//! Linux: one run's [`Container`] (a child of `linux.rs`, the `os` module of containment).
//!
//! The container sets up the ladder (subreaper always, a cgroup leaf when it can), starts the
//! command inside it, lists its members, and ends the run: it reaps the runner's children
//! itself ([`Container::reap`]), kills on a timeout or an interrupt
//! ([`Container::kill_until_empty`]) and terminates what outlived the command
//! ([`Container::finish`]). A process that shares its children with a runtime terminates through
//! [`Contained`] with a reaper of its own instead.
//!
//! Invariant: the container's own children (the watchdog, the terminal's key relay) are never
//! members and never reaped here; their owners reap them.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rustix::process::{Signal, WaitOptions};

use super::watchdog::Watchdog;
use super::{kill_group_of, set_subreaper, Cgroup};
use crate::contain::{
    kill_until_empty, terminate_set, Children, ContainMode, Mechanism, Scope, Termination,
};
use crate::error::Result;
use crate::process::{self, ProcessInfo};

/// One run's containment.
#[derive(Debug)]
pub struct Container {
    mechanism: Mechanism,
    cgroup: Option<Cgroup>,
    fallback: Option<String>,
    watchdog: Option<Watchdog>,
    /// Processes survived the KILL loop: the leaf is left for gc.
    survived: bool,
    /// Why the watchdog stopped guarding the run, once it is disarmed.
    watchdog_lost: Option<&'static str>,
    /// The command's process group, once started: its leader's pid and a pidfd on it (the
    /// group is only ever signalled through that pidfd, see [`kill_group_of`]).
    group: Option<(i32, std::os::fd::OwnedFd)>,
    /// Other children of the runner that are its own helpers, not members (see [`Self::keep`]).
    helpers: Vec<i32>,
    /// The command's pid, once started ([`Self::started`]).
    main: Option<i32>,
    /// The command's raw wait status, once [`Self::reap`] reaped it.
    main_status: Option<i32>,
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
            _ => match Cgroup::create(run_id) {
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
            main: None,
            main_status: None,
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

    /// Looks whether the watchdog was stopped or killed (loudly, once); see [`Watchdog::check`].
    fn check_watchdog(&self) {
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
    /// owner (the watchdog, [`Self::keep`]'s helpers): [`Self::reap`] skips it.
    fn keeps(&self, pid: i32) -> bool {
        self.watchdog.as_ref().is_some_and(|w| w.pid() == pid) || self.helpers.contains(&pid)
    }

    /// Makes `pid`, a child of the runner that is the runner's own helper (the terminal's key
    /// relay, which lives in the command's process group), no member of the run: it is neither
    /// listed, nor signalled but by the group kill, nor reaped here; its owner reaps it.
    pub fn keep(&mut self, pid: i32) {
        self.helpers.push(pid);
    }

    /// The command started as `main`, the leader of its own process group. Call it before
    /// anything can reap `main`, so that the pidfd taken here is the command's; [`Self::reap`]
    /// keeps its wait status.
    pub fn started(&mut self, main: i32) {
        self.main = Some(main);
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

    /// Reaps every exited child of the runner but the ones the container keeps (its watchdog,
    /// which must stay unreaped so that its pid is not reused, see [`Watchdog`]; [`Self::keep`]'s
    /// helpers); keeps the command's raw wait status ([`Self::main_status`]); says whether a child
    /// other than the kept ones is left.
    ///
    /// For a runner that owns all its children: a process that shares them with a runtime (the
    /// exec-server and tokio) reaps its own and terminates through [`Contained`].
    ///
    /// Children are reaped by pid from the kernel's list, never by `wait(-1)`, which would reap
    /// the watchdog too. The second listing is the proof: a child not in it is not ours, and
    /// every orphan re-parents to the runner (a subreaper) before its parent becomes a zombie,
    /// so when it holds only kept children, no descendant is left either.
    pub fn reap(&mut self) -> Children {
        self.check_watchdog();
        let me = std::process::id();
        for child in process::children(me) {
            let Ok(child) = libc::pid_t::try_from(child) else {
                continue;
            };
            let Some(pid) = rustix::process::Pid::from_raw(child) else {
                continue;
            };
            if self.keeps(child) {
                continue;
            }
            if let Ok(Some((_, status))) = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG)
            {
                // The first status of the main pid is the command's: once it was reaped, its pid
                // is free for reuse by a process of the run, whose end must not replace it.
                if Some(child) == self.main && self.main_status.is_none() {
                    self.main_status = Some(status.as_raw());
                }
            }
        }
        if self.only_kept(&process::children(me)) {
            Children::None
        } else {
            Children::Some
        }
    }

    /// The command's raw wait status, once [`Self::reap`] reaped it.
    pub fn main_status(&self) -> Option<i32> {
        self.main_status
    }

    /// The KILL phase of a timeout or interrupt: `known` (the members signalled when the run
    /// was asked to stop) first, then the whole run until it is provably empty, reaping as it
    /// goes (see [`kill_until_empty`]). Returns what needed SIGKILL and what survived it.
    pub fn kill_until_empty(&mut self, known: &[ProcessInfo]) -> Termination {
        kill_until_empty(&mut Reaping(self), known)
    }

    /// Ends the run once [`Self::reap`] reaped the command: whatever of the run is still alive is
    /// a leak, TERMed, given `grace`, KILLed until the run is provably empty. An empty listing
    /// is not enough to skip this: the runner may still have children in flight (a
    /// fork-and-exit chain) or the cgroup may still be populated.
    pub fn finish(&mut self, grace: Duration) -> Leftovers {
        let mut leaked = self.members();
        let mut scope = Reaping(self);
        let in_flight = scope.reap() == Children::Some || scope.kernel_says_empty() == Some(false);
        if leaked.is_empty() && !in_flight {
            return Leftovers::default();
        }
        let ended = terminate_set(&mut scope, grace);
        for process in ended.killed.iter().chain(&ended.survivors) {
            if !leaked.iter().any(|l| l.id == process.id) {
                leaked.push(process.clone());
            }
        }
        Leftovers { leaked, ended }
    }

    /// Whether `children`, the direct children of the runner left after reaping, are only the
    /// ones the container keeps.
    fn only_kept(&self, children: &[u32]) -> bool {
        children
            .iter()
            .all(|&c| libc::pid_t::try_from(c).is_ok_and(|c| self.keeps(c)))
    }

    /// Whether the kernel says the run is empty (`cgroup.events`), when it can tell.
    fn kernel_says_empty(&self) -> Option<bool> {
        let cgroup = self.cgroup.as_ref()?;
        Some(!cgroup.populated())
    }

    /// SIGKILL to the whole run at once: `cgroup.kill`, and the command's process group.
    fn kill_whole(&self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        if let Some((group, leader)) = &self.group {
            kill_group_of(leader, *group);
        }
    }
}

/// What [`Container::finish`] found and did.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// Every process of the run found alive after the command was reaped: the ones listed at
    /// once, then any other the termination met. Empty when nothing outlived the command.
    pub leaked: Vec<ProcessInfo>,
    /// What the termination of the leftovers killed, and what survived it.
    pub ended: Termination,
}

/// A [`Container`] as a [`Scope`], reaped by the container itself ([`Container::reap`]).
struct Reaping<'a>(&'a mut Container);

impl Scope for Reaping<'_> {
    fn members(&mut self) -> Vec<ProcessInfo> {
        self.0.members()
    }

    fn reap(&mut self) -> Children {
        self.0.reap()
    }

    fn kernel_says_empty(&mut self) -> Option<bool> {
        self.0.kernel_says_empty()
    }

    fn kill_whole(&mut self) {
        self.0.kill_whole();
    }
}

/// A cgroup leaf below a [`Container`]'s ([`Container::cgroup_below`]): its members exactly,
/// `cgroup.kill` and `populated` for that part of the run alone. Removed when dropped if it is
/// empty; else the container's removal takes it.
#[derive(Debug)]
pub struct SubCgroup(Cgroup);

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

/// A [`Container`] as a [`Scope`], with the caller's reaper: for a process that shares its
/// children with a runtime that reaps its own (the exec-server and tokio), so that
/// [`Container::reap`], which reaps every child it does not keep, must not run.
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
        self.container.kernel_says_empty()
    }

    fn kill_whole(&mut self) {
        self.container.kill_whole();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.disarm_watchdog();
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove(self.survived);
        }
    }
}
