//! A session's process table: the records `process/read`, `write`, `signal` and `terminate`
//! reach processes by, bounded in number.
//!
//! Invariants: at most `max_processes` records, and room is made by forgetting closed records
//! first; ids are unique while recorded; once ended, the table is empty and takes no new
//! record. The table decides only what is reachable: what a session reaps is its scope's
//! business (`reaper::Scope`), so forgetting a record never lets a process escape.

use std::collections::HashMap;
use std::sync::Arc;

use super::Process;
use crate::protocol::RpcError;

/// The records of one session.
#[derive(Default)]
pub struct Table {
    processes: HashMap<String, Arc<Process>>,
    ended: bool,
}

impl Table {
    /// The record of `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Process>> {
        self.processes.get(id).cloned()
    }

    /// Checks that `id` may be started now, forgetting closed records early if the table is
    /// full.
    pub fn make_room(&mut self, id: &str, max_processes: usize) -> Result<(), RpcError> {
        if self.ended {
            return Err(RpcError::invalid_request("session has ended"));
        }
        if self.processes.contains_key(id) {
            return Err(RpcError::invalid_request(format!(
                "process {id} already exists"
            )));
        }
        if self.processes.len() >= max_processes {
            self.processes.retain(|_, p| !p.is_closed());
        }
        if self.processes.len() >= max_processes {
            return Err(RpcError::invalid_request(format!(
                "session has {} unclosed processes, the limit (--max-processes {max_processes}); \
                 terminate or wait for some before starting more",
                self.processes.len()
            )));
        }
        Ok(())
    }

    /// Records `process` (after [`Table::make_room`]).
    pub fn insert(&mut self, process: Arc<Process>) {
        self.processes.insert(process.id().to_string(), process);
    }

    /// Forgets `process`, unless its id now names another record.
    pub fn forget(&mut self, process: &Arc<Process>) {
        if self
            .processes
            .get(process.id())
            .is_some_and(|p| Arc::ptr_eq(p, process))
        {
            self.processes.remove(process.id());
        }
    }

    /// Takes no more records; gives up every record.
    pub fn end(&mut self) -> Vec<Arc<Process>> {
        self.ended = true;
        self.processes.drain().map(|(_, p)| p).collect()
    }
}
