//! The harness of the Codex interop test: the pinned real client, the namespaces it runs in, a
//! loopback stand-in for the model API, the two exec-servers it can drive (`cleanroom serve` and
//! Codex's own `codex exec-server`), and a recording proxy between the client and the server.
//!
//! Nothing here talks to any address but loopback: every test body runs inside a network
//! namespace that has only `lo` (see [`isolation`]).

pub mod app_server;
pub mod client;
pub mod docs;
pub mod exec_server;
pub mod figures;
pub mod isolation;
pub mod model;
pub mod proxy;
#[path = "../../../cleanroom/tests/support/reach.rs"]
pub mod reach;
pub mod report;
pub mod scenario;
pub mod wire;
