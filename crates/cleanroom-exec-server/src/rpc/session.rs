//! Sessions: the unit a client initializes, owns processes in, and may resume (spec §3, §7).
//!
//! Owns: the registry of sessions (bounded by `max_sessions`), each session's process table
//! (bounded by `max_processes` unclosed processes; closed ones are forgotten `--process-retention`
//! (60 s) after closing, or earlier when room is needed), and the end of a session, which reaps
//! everything it started.
//!
//! Invariants: a process is only reachable through its own session's table, so one client cannot
//! touch another's processes; once a session has ended no process can be added to it (the check
//! and the spawn happen under the table's lock); ending a session terminates every process tree
//! in its table, then everything carrying its tag ([`Scope`]): what a session reaps does not
//! depend on which process records are still kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::task::JoinSet;

use crate::environment::Environment;
use crate::process::{Outlet, Process, Reaper, Scope, Spec, Started, Table, TERMINATE_GRACE};
use crate::protocol::RpcError;

/// A client session.
pub struct Session {
    id: String,
    scope: Scope,
    outlet: Arc<Outlet>,
    retention: Duration,
    table: Mutex<Table>,
    fs: crate::fs::Handles,
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
                container,
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
    pub fn forget_later(self: &Arc<Self>, process: Arc<Process>) {
        let session = Arc::downgrade(self);
        let retention = self.retention;
        tokio::spawn(async move {
            process.wait_closed().await;
            tokio::time::sleep(retention).await;
            if let Some(session) = session.upgrade() {
                session.lock().forget(&process);
            }
        });
    }

    /// Ends the session: no more starts; every process tree is terminated and reaped, then
    /// whatever else carries the session's tag.
    pub async fn end(&self, reaper: &Reaper) {
        let processes = self.lock().end();
        let mut tasks = JoinSet::new();
        for process in processes {
            let reaper = reaper.clone();
            tasks.spawn(async move {
                if let Err(e) = process.terminate(&reaper, true).await {
                    tracing::error!("{}", e.message);
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let scope = self.scope.clone();
        let reaper = reaper.clone();
        let swept = tokio::task::spawn_blocking(move || {
            reaper.terminate(&scope, TERMINATE_GRACE);
        });
        if let Err(e) = swept.await {
            tracing::error!("sweeping session {}: {e}", self.id);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every session of the server.
#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Registry {
    /// Creates a session with a fresh id, unless `max_sessions` are open.
    pub fn create(
        &self,
        id: String,
        max_sessions: usize,
        retention: Duration,
    ) -> Result<Arc<Session>, RpcError> {
        let mut sessions = self.lock();
        if sessions.len() >= max_sessions {
            return Err(RpcError::invalid_request(format!(
                "the server has {max_sessions} sessions, its limit (--max-sessions); try again later"
            )));
        }
        let session = Arc::new(Session {
            scope: Scope::of_session(&id),
            id: id.clone(),
            retention,
            outlet: Arc::new(Outlet::default()),
            table: Mutex::new(Table::default()),
            fs: crate::fs::Handles::default(),
        });
        sessions.insert(id, session.clone());
        Ok(session)
    }

    /// The session `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().get(id).cloned()
    }

    /// Removes `session` from the registry (it can no longer be resumed).
    pub fn remove(&self, session: &Arc<Session>) {
        let mut sessions = self.lock();
        if sessions
            .get(session.id())
            .is_some_and(|s| Arc::ptr_eq(s, session))
        {
            sessions.remove(session.id());
        }
    }

    /// Removes and returns every session (shutdown).
    pub fn drain(&self) -> Vec<Arc<Session>> {
        self.lock().drain().map(|(_, s)| s).collect()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
