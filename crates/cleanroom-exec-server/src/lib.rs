//! The cleanroom exec-server: the Codex exec-server JSON-RPC protocol over WebSocket or stdio,
//! where every process runs inside one cleanroom root and nothing outlives the server
//! (see `exec-server-protocol.md`).
//!
//! ```no_run
//! use cleanroom_exec_server::{Config, Listen};
//! let config = Config {
//!     listen: Listen::parse("ws://127.0.0.1:0").unwrap(),
//!     allow_remote: false,
//!     namespace: "/tmp/cleanroom-0".into(),
//!     cwd: "/".into(),
//!     session_ttl: cleanroom_exec_server::DEFAULT_SESSION_TTL,
//!     process_retention: cleanroom_exec_server::DEFAULT_PROCESS_RETENTION,
//!     protect: cleanroom::protect::ProtectMode::Off,
//!     max_message_bytes: cleanroom_exec_server::DEFAULT_MAX_MESSAGE_BYTES,
//!     max_sessions: 64,
//!     max_processes: 256,
//!     max_connections: 1024,
//!     allow_secret_env: false,
//!     private_tmp: true,
//!     share_tmp: Vec::new(),
//! };
//! cleanroom_exec_server::run(config, |url| println!("{url}")).unwrap();
//! ```
//!
//! The parts, from the wire inwards (each depends only on those below it):
//! - `server`: configuration, start and shutdown;
//! - `transport`: WebSocket (capability path, `/readyz`, close codes, frame limits, pings) and
//!   stdio; it hands each connection's messages to a `Service` and knows nothing of JSON-RPC;
//! - `rpc`: connections (`initialize`, resume), sessions, and the one method table;
//! - `environment`: the root, the containment, the write protection and the base environment;
//! - `process`: `process/start` validation, one process's pumps, seqs, retention, stdin,
//!   signals, terminal, and the reaping of its tree;
//! - `fs`: the `fs/*` methods, each on a thread confined by its call's policy;
//! - `policy`: Codex's per-call `sandbox` translated into `cleanroom::protect` (processes, fs);
//! - `http`: `http/request` and its streamed `bodyDelta`s;
//! - `envpolicy`, `protocol`, `uri`: the child environment, JSON-RPC shapes and error codes,
//!   file URIs.
//! - `sys`: every raw system call, FFI call and fork/clone trampoline (the vfork-style spawn, the
//!   `fs/*` children, `pre_exec` hooks, reactor registration) behind safe functions; the rest of
//!   the crate denies `unsafe`.
//!
//! `DESIGN.md` beside this crate's manifest draws the tasks and states the invariants.
#![deny(missing_docs)]
// Raw system calls, FFI and the fork/clone trampolines live in `sys`, behind safe functions.
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]

mod environment;
mod envpolicy;
mod fs;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod policy;
mod process;
mod protocol;
mod rpc;
mod server;
#[allow(unsafe_code)]
mod sys;
mod transport;
mod uri;

pub use server::{
    run, Config, Listen, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_PROCESS_RETENTION, DEFAULT_SESSION_TTL,
};

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad option value.
    #[error("{0}")]
    Config(String),
    /// The cleanroom core refused (namespace, root, containment).
    #[error(transparent)]
    Cleanroom(#[from] cleanroom::Error),
    /// A system operation failed.
    #[error("cannot {0}: {1}")]
    Io(&'static str, #[source] std::io::Error),
}
