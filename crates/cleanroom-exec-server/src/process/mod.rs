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
//! - `members`: who belongs to a process tree and to a session (its scope);
//! - `reaper`: orphan reaping, each reap attributed to the session the orphan was, and the
//!   proof that a set of members is empty;
//! - `terminations`: terminations under way, one round at a time on threads of their own,
//!   fairly between sessions.
//!
//! Nothing here knows of connections or sessions' lifetimes: `rpc` owns those.

mod child;
mod members;
mod outlet;
mod pty;
mod pump;
mod reaper;
mod spawn;
pub mod start;
mod table;
mod terminations;

pub use child::{Placement, Process, Spec, Started, TERMINATE_GRACE};
pub use members::{Group, Members, Scope};
pub use outlet::Outlet;
pub use reaper::Reaper;
pub use spawn::keep_descriptor_limit_for_children;
pub use table::Table;
