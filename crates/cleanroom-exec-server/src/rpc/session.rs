//! Sessions: the unit a client initializes, owns processes in, and may resume (spec §3, §7).
//!
//! Owns: the registry of sessions (bounded by `max_sessions` attached and resumable ones, and
//! separately by twice as many being ended), each session's process table (bounded by
//! `max_processes` unclosed processes; closed ones are forgotten `--process-retention` (60 s)
//! after closing, or earlier when room is needed), the session's cgroup leaf (as root: its
//! processes are born in it), the process groups of its closed processes that may still have
//! members, and the end of a session, which reaps everything it started and then lets go of its
//! records.
//!
//! Invariants: a process is only reachable through its own session's table, so one client cannot
//! touch another's processes; once a session has ended no process can be added to it (the check
//! and the spawn happen under the table's lock); ending a session terminates every process tree
//! in its table, everything carrying its tag ([`Scope`]), everything in its cgroup leaf and every
//! process group it started that may have members, as one set: what a session reaps does not
//! depend on which process records are still kept; an ended session's records (their output and
//! terminals) are dropped when its processes are gone, whatever the retention.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cleanroom::contain::SubCgroup;

use crate::environment::Environment;
use crate::process::{
    Group, Members, Outlet, Placement, Process, Reaper, Scope, Spec, Started, Table,
    TERMINATE_GRACE,
};
use crate::protocol::RpcError;

/// A client session.
pub struct Session {
    id: String,
    scope: Scope,
    outlet: Arc<Outlet>,
    retention: Duration,
    table: Mutex<Table>,
    fs: crate::fs::Handles,
    /// Its cgroup leaf below the server's (as root).
    cgroup: Option<Arc<SubCgroup>>,
    /// The process groups of its closed processes that may still have members.
    groups: Mutex<Vec<Group>>,
}

impl Session {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the session's notifications go.
    pub fn outlet(&self) -> &Arc<Outlet> {
        &self.outlet
    }

    /// The session's open files (`fs/open`).
    pub fn fs(&self) -> &crate::fs::Handles {
        &self.fs
    }

    /// The process `id` of this session.
    pub fn process(&self, id: &str) -> Option<Arc<Process>> {
        self.lock().get(id)
    }

    /// Spawns `spec` and registers it, refusing duplicates, a full table, and ended sessions.
    pub fn start(
        &self,
        spec: &Spec,
        env: &Environment,
        reaper: &Reaper,
        max_processes: usize,
    ) -> Result<(Arc<Process>, Started), RpcError> {
        let mut table = self.lock();
        table.make_room(&spec.process_id, max_processes)?;
        let (process, started) = env.with_container(|container| match container {
            Some(container) => Process::spawn(
                spec,
                match &self.cgroup {
                    Some(leaf) => Placement::Session(leaf),
                    None => Placement::Container(container),
                },
                env.protection(),
                reaper,
                (&self.scope, self.outlet.clone()),
            ),
            None => Err(RpcError::internal("the server is shutting down")),
        })?;
        table.insert(process.clone());
        Ok((process, started))
    }

    /// Forgets `process` once it has been closed for the retention (`--process-retention`).
    /// Meanwhile nothing but the table keeps the record: when the session ends, its records
    /// (their output and terminals) go at once, not a retention later. At the close, the
    /// session takes over the process's group if it may still have members (a daemon in it is
    /// killed at the session's end, whatever becomes of the record), else its pidfd is closed.
    pub fn forget_later(self: &Arc<Self>, process: &Arc<Process>) {
        let session = Arc::downgrade(self);
        let retention = self.retention;
        let closed = process.closed();
        let process = Arc::downgrade(process);
        tokio::spawn(async move {
            if !closed.await {
                return;
            }
            if let (Some(session), Some(process)) = (session.upgrade(), process.upgrade()) {
                session.keep_group(process.take_group());
            }
            tokio::time::sleep(retention).await;
            if let (Some(session), Some(process)) = (session.upgrade(), process.upgrade()) {
                session.lock().forget(&process);
            }
        });
    }

    /// Keeps `group` for the session's end; the groups kept are checked again (and the empty ones
    /// closed) each time their number doubles.
    fn keep_group(&self, group: Option<Group>) {
        let Some(group) = group else {
            return;
        };
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if groups.len() >= 16 && groups.len().is_power_of_two() {
            groups.retain(Group::may_have_members);
        }
        groups.push(group);
    }

    /// Closes the session for the server's shutdown: detached, no more starts; returns its
    /// records, to be dropped once the shutdown's sweep has killed every process.
    pub fn close(&self) -> Vec<Arc<Process>> {
        self.outlet.detach_any();
        self.lock().end()
    }

    /// Ends the session: no more starts; everything it started (every process tree of its
    /// table, whatever else carries its tag, its cgroup leaf, its process groups) is terminated
    /// at once, as one set: TERM to all, the grace, KILL until none is left; then its records
    /// are dropped.
    ///
    /// The records live until the set is gone: a record keeps its terminal's master open, and
    /// only while the master is open is `/dev/pts/N`, by which the set finds a holder of the
    /// terminal, that terminal's name (a freed one is soon another session's).
    pub async fn end(&self, reaper: &Reaper) {
        self.fs.end();
        let processes = self.lock().end();
        let groups =
            std::mem::take(&mut *self.groups.lock().unwrap_or_else(PoisonError::into_inner));
        let mut members = Members::of_session(&self.scope, self.cgroup.clone(), groups);
        for process in &processes {
            members.include(&process.membership());
        }
        let ended = reaper.terminate(members, TERMINATE_GRACE).await;
        drop(processes);
        match ended {
            Ok(ended) if ended.survivors.is_empty() => reaper.forget_session(&self.scope),
            Ok(ended) => tracing::error!(
                "session {}: processes survived SIGKILL: {:?}",
                self.id,
                ended.survivors.iter().map(|p| p.id.pid).collect::<Vec<_>>()
            ),
            Err(_) => tracing::debug!("session {}: its end is left to the shutdown", self.id),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The cgroup leaf of session `scope` below the server's, when the server has a cgroup (`None`
/// otherwise, or when it cannot be made: the session's processes are then born in the server's
/// leaf, and its end relies on the other rules alone).
pub fn leaf_of(env: &Environment, scope: &Scope) -> Option<SubCgroup> {
    let name = scope.leaf_name();
    match env.with_container(|container| container?.cgroup_below(&name))? {
        Ok(leaf) => Some(leaf),
        Err(e) => {
            tracing::warn!("session {}: no cgroup of its own: {e}", scope.session());
            None
        }
    }
}

/// Sessions being ended at most, per session `--max-sessions` allows: their processes are
/// signalled at once, but their records are kept until the proof that the processes are gone;
/// under honest churn on a loaded machine (16 clients, `--session-ttl 2`) about as many are
/// being ended as the limit, so the bound leaves room for that and stops only a pile-up.
const ENDING_PER_SESSION: usize = 2;

/// Every session of the server.
#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Sessions whose end is under way: out of the registry, bounded on their own.
    ending: AtomicUsize,
}

impl Registry {
    /// The session detached longest, when `max_sessions` are open: the one to end so that a
    /// live client is admitted (see [`super::Shared::make_room`]). `None` below the limit,
    /// when every open session is attached, or when one more session ending would reach the
    /// bound on ending sessions (the client would be refused all the same).
    pub fn longest_detached_if_full(&self, max_sessions: usize) -> Option<Arc<Session>> {
        let sessions = self.lock();
        let ending = self.ending.load(Ordering::Relaxed);
        if sessions.len() < max_sessions || ending + 1 >= ENDING_PER_SESSION * max_sessions {
            return None;
        }
        sessions
            .values()
            .filter_map(|s| Some((s.outlet.detached_since()?, s)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, s)| s.clone())
    }

    /// Creates a session with a fresh id and its cgroup leaf (`leaf`, given the session's
    /// scope), unless `max_sessions` are open (attached, or detached and resumable), or twice as
    /// many are still being ended.
    pub fn create(
        &self,
        id: String,
        max_sessions: usize,
        retention: Duration,
        leaf: impl FnOnce(&Scope) -> Option<SubCgroup>,
    ) -> Result<Arc<Session>, RpcError> {
        let mut sessions = self.lock();
        let ending = self.ending.load(Ordering::Relaxed);
        if ending >= ENDING_PER_SESSION * max_sessions {
            return Err(RpcError::invalid_request(format!(
                "the server is still ending {ending} sessions, {ENDING_PER_SESSION} times its \
                 limit (--max-sessions {max_sessions}): their processes are being killed; try \
                 again later"
            )));
        }
        if sessions.len() >= max_sessions {
            let detached = sessions.values().filter(|s| !s.outlet.state().0).count();
            return Err(RpcError::invalid_request(format!(
                "the server has {} sessions, its limit (--max-sessions {max_sessions}): {} \
                 attached, {detached} detached and resumable until --session-ttl ends them \
                 ({} more ending, not counted); try again later",
                sessions.len(),
                sessions.len() - detached,
                self.ending.load(Ordering::Relaxed),
            )));
        }
        let scope = Scope::of_session(&id);
        let session = Arc::new(Session {
            cgroup: leaf(&scope).map(Arc::new),
            scope,
            id: id.clone(),
            retention,
            outlet: Arc::new(Outlet::default()),
            table: Mutex::new(Table::default()),
            fs: crate::fs::Handles::default(),
            groups: Mutex::default(),
        });
        sessions.insert(id, session.clone());
        Ok(session)
    }

    /// The session `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().get(id).cloned()
    }

    /// Removes `session` from the registry (it can no longer be resumed); it counts as ending
    /// until the guard is dropped. `None` when it is no longer registered: it was ended already
    /// (to make room, or by the shutdown's drain), and nothing is left to do.
    pub fn remove(&self, session: &Arc<Session>, shared: Arc<super::Shared>) -> Option<Ending> {
        let mut sessions = self.lock();
        if !sessions
            .get(session.id())
            .is_some_and(|s| Arc::ptr_eq(s, session))
        {
            return None;
        }
        sessions.remove(session.id());
        self.ending.fetch_add(1, Ordering::Relaxed);
        Some(Ending(shared))
    }

    /// Removes and returns every session (shutdown).
    pub fn drain(&self) -> Vec<Arc<Session>> {
        self.lock().drain().map(|(_, s)| s).collect()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A session being ended (see [`Registry::remove`]).
pub struct Ending(Arc<super::Shared>);

impl Ending {
    /// The server's state.
    pub fn shared(&self) -> &super::Shared {
        &self.0
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        self.0.sessions.ending.fetch_sub(1, Ordering::Relaxed);
    }
}
