//! The kill loop every Linux caller of containment shares (the runner's [`super::Container`],
//! the exec-server's sessions, gc's orphans): TERM to the whole set, up to a grace for it to go,
//! then KILL until the set is provably empty.
//!
//! The set is a [`Scope`]: a member listing, a reaper, and what the kernel offers for the whole
//! set at once. Invariant: an empty member listing alone is never proof (see [`Scope`]); a loop
//! that hits its bound names the survivors on stderr and never counts them as killed.
//!
//! Linux only while members are signalled through pidfds ([`process::ProcessId::signal`]).

use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::process::{self, ProcessInfo};

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
