//! Processes (spec §5): validation of `process/start`, one process's spawn, output, exit and
//! close, its terminal, where its notifications go, and the reaping of its tree.
//!
//! - `start`: `process/start` params → a [`Spec`] (cwd URI, argv, environment, sandbox);
//! - `child`: one [`Process`]: its emitter, seqs, retention, stdin, signals, termination;
//! - `pump`: the tasks that read its output descriptors;
//! - `pty`: the terminal of a `tty` process;
//! - `spawn`: the fork-free start of a pipe-connected process, and its pidfd wait;
//! - `outlet`: the session's current connection, where notifications go;
//! - `table`: a session's process records, bounded, closed ones forgotten first;
//! - `reaper`: membership of a process tree and of a session (its scope), their termination,
//!   and orphan reaping.
//!
//! Nothing here knows of connections or sessions' lifetimes: `rpc` owns those.

mod child;
mod outlet;
mod pty;
mod pump;
mod reaper;
mod spawn;
pub mod start;
mod table;

pub use child::{Process, Spec, Started, TERMINATE_GRACE};
pub use outlet::Outlet;
pub use reaper::{Reaper, Scope};
pub use table::Table;
