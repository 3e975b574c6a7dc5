//! Terminations under way, run one round at a time on threads of their own, fairly between
//! sessions.
//!
//! Owns: the queue of terminations (`process/terminate`, a session's end) and their worker
//! threads: at most [`WORKERS`], started when work comes and gone after [`IDLE`] without any.
//! They are never the runtime's blocking pool, which client calls can fill (an `fs/*` call
//! blocked in the kernel holds its thread), so no client call can keep a set from dying.
//!
//! Invariants: no worker sleeps inside a termination: a round reaps, lists and signals
//! ([`Terminating::round`]), then the termination waits in the queue for its next round; a
//! session has at most one round running at a time and sessions take turns round-robin, so one
//! session's terminations, however many or however long, delay another's by one round per
//! session at most; a round that signals a set for the first time (TERM at its start, KILL
//! once its grace is over) goes before rounds that only seek the proof that a set is empty:
//! a set is killed at once, and proven empty as the threads allow.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cleanroom::contain::{Round, Scope, Terminating, Termination};
use tokio::sync::oneshot;

/// The set a termination works on, with the proof of its emptiness (the reaper's settling set).
pub(super) type Set = Box<dyn Scope + Send>;

/// Worker threads at most.
pub const WORKERS: usize = 4;
/// How long a worker with nothing to do waits before it ends.
const IDLE: Duration = Duration::from_secs(5);
/// The longest pause between two rounds of a termination: a set whose proof does not come (see
/// `reaper::Settling`) is looked at more and more rarely, up to this, until the kill loop's
/// bound ends it.
const SLOWEST_ROUND: Duration = Duration::from_millis(250);

/// The server stopped the terminations before this one ended (its shutdown kills everything).
#[derive(Debug)]
pub struct Stopped;

/// The queue and its workers.
#[derive(Clone, Debug, Default)]
pub struct Terminations {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// Sessions with terminations under way, in the order of their turns.
    turns: VecDeque<Box<str>>,
    sessions: HashMap<Box<str>, SessionJobs>,
    workers: usize,
    idle: usize,
    stopped: bool,
}

/// One session's terminations.
#[derive(Debug, Default)]
struct SessionJobs {
    jobs: VecDeque<Job>,
    /// A round of one of them is running.
    running: bool,
}

/// One termination.
struct Job {
    settling: Set,
    terminating: Terminating,
    /// When its next round may run.
    due: Instant,
    begun: Instant,
    done: oneshot::Sender<Termination>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("terminating", &self.terminating)
            .field("due", &self.due)
            .finish_non_exhaustive()
    }
}

impl Terminations {
    /// Queues the termination of `settling`'s members by `terminating` for `session`; the
    /// receiver gets the outcome (or is dropped if the terminations stop first).
    pub(super) fn submit(
        &self,
        session: Box<str>,
        settling: Set,
        terminating: Terminating,
    ) -> oneshot::Receiver<Termination> {
        let (done, outcome) = oneshot::channel();
        let now = Instant::now();
        let job = Job {
            settling,
            terminating,
            due: now,
            begun: now,
            done,
        };
        let mut queue = self.shared.lock();
        if queue.stopped {
            return outcome;
        }
        let jobs = queue.sessions.entry(session.clone()).or_default();
        jobs.jobs.push_back(job);
        if jobs.jobs.len() == 1 && !jobs.running {
            queue.turns.push_back(session);
        }
        self.shared.wake.notify_one();
        if queue.idle == 0 && queue.workers < WORKERS {
            self.start_worker(&mut queue);
        }
        outcome
    }

    /// Stops every termination (their receivers are dropped) and the workers.
    pub fn stop(&self) {
        let mut queue = self.shared.lock();
        queue.stopped = true;
        queue.turns.clear();
        let sessions = std::mem::take(&mut queue.sessions);
        drop(queue);
        drop(sessions);
        self.shared.wake.notify_all();
    }

    fn start_worker(&self, queue: &mut Queue) {
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("cleanroom-terminate".into())
            .spawn(move || shared.work());
        match started {
            Ok(_) => queue.workers += 1,
            Err(e) => tracing::error!("cannot start a termination thread: {e}"),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker: the next due round, fairly, until stopped or idle for [`IDLE`].
    fn work(&self) {
        let mut queue = self.lock();
        let mut idle_since = Instant::now();
        loop {
            if queue.stopped {
                break;
            }
            let now = Instant::now();
            if let Some((session, mut job)) = queue.take(now) {
                drop(queue);
                let round = job.terminating.round(job.settling.as_mut());
                queue = self.lock();
                queue.put_back(session, job, round);
                // The session is free again: another worker may take its next round.
                self.wake.notify_one();
                idle_since = Instant::now();
                continue;
            }
            if queue.sessions.is_empty() && now.duration_since(idle_since) >= IDLE {
                break;
            }
            let wait = queue
                .next_due()
                .map_or(IDLE, |due| due.saturating_duration_since(now));
            queue.idle += 1;
            queue = self
                .wake
                .wait_timeout(queue, wait.min(IDLE))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            queue.idle -= 1;
        }
        queue.workers -= 1;
    }
}

impl Queue {
    /// The next round to run: the first session in turn order with a due termination that is not
    /// running a round, preferring rounds that signal; the session then goes to the back.
    fn take(&mut self, now: Instant) -> Option<(Box<str>, Job)> {
        for signalling in [true, false] {
            let found = self.turns.iter().enumerate().find_map(|(turn, session)| {
                let jobs = &self.sessions[session];
                if jobs.running {
                    return None;
                }
                let due =
                    |job: &Job| job.due <= now && (!signalling || job.terminating.signals_next());
                jobs.jobs.iter().position(due).map(|index| (turn, index))
            });
            if let Some((turn, index)) = found {
                let session = self.turns.remove(turn).expect("a listed turn");
                let jobs = self
                    .sessions
                    .get_mut(&session)
                    .expect("a session with jobs");
                let job = jobs.jobs.remove(index).expect("a listed job");
                jobs.running = true;
                self.turns.push_back(session.clone());
                return Some((session, job));
            }
        }
        None
    }

    /// After a round of `job`: done (the outcome is sent), or back in its session's queue, due
    /// after the pause the round asked for, longer as the termination ages.
    fn put_back(&mut self, session: Box<str>, mut job: Job, round: Round) {
        let Some(jobs) = self.sessions.get_mut(&session) else {
            return; // Stopped meanwhile.
        };
        jobs.running = false;
        match round {
            Round::Done(termination) => {
                let _ = job.done.send(termination);
            }
            Round::Again(pause) => {
                let now = Instant::now();
                let aged = (now.duration_since(job.begun) / 20).min(SLOWEST_ROUND);
                job.due = now + pause.max(aged);
                jobs.jobs.push_back(job);
            }
        }
        if jobs.jobs.is_empty() {
            self.sessions.remove(&session);
            self.turns.retain(|s| *s != session);
        }
    }

    /// When the earliest round of a session not running one is due.
    fn next_due(&self) -> Option<Instant> {
        self.sessions
            .values()
            .filter(|jobs| !jobs.running)
            .flat_map(|jobs| jobs.jobs.iter().map(|job| job.due))
            .min()
    }
}
