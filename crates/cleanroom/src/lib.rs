//! cleanroom runs a command inside a root that only it owns, and guarantees that when the run
//! ends nothing it started is alive and nothing it wrote is left.
//!
//! The parts, in the order a run uses them:
//! - [`namespace`]: the per-user directory that holds every root, verified on every open;
//! - [`root`] and [`marker`]: one run's directory and the file that proves it is ours;
//! - [`mod@env`]: the child's environment, with HOME, temp and XDG dirs pinned inside the root;
//! - [`contain`]: every process of the run, found by membership and killed at the end;
//! - [`protect`]: kernel-enforced write protection (Landlock) and network isolation;
//! - [`lock`]: exclusive runs that must not overlap;
//! - [`run`]: the lifecycle that ties them together;
//! - [`doctor`]: what this machine allows, and which containment and protection `run` uses;
//! - [`remove`]: fd-relative, symlink-proof, mount-aware removal of a root;
//! - [`reclaim`]: `gc` and `list`, reclaiming stale roots only on proof of death;
//! - [`report`]: the versioned JSON report of a run;
//! - [`exit`]: the exit statuses scripts rely on, the same on every platform;
//! - [`secrets`]: which environment variables look like credentials.
#![deny(missing_docs)]
// `unsafe` lives in `sys` only (each block with its SAFETY note); every other module is safe Rust.
#![deny(unsafe_code)]
#![cfg(any(target_os = "linux", target_os = "macos", windows))]

// Parts on every platform (`contain`, `process`, `marker`, `namespace`, `root`, `remove`,
// `lock` and `env` pick their platform code inside), and `sys`: the FFI helpers of one
// platform's files.
pub mod contain;
pub mod duration;
pub mod env;
mod error;
pub mod exit;
mod layout;
pub mod lock;
pub mod marker;
pub mod namespace;
pub mod process;
pub mod remove;
pub mod root;
pub mod secrets;
#[allow(unsafe_code)]
mod sys;
pub mod text;

// Each platform-bound part is one module with the same public path on every platform, its
// platform code a private `os` child picked once in its `mod.rs` (Windows: docs/windows.md;
// macOS, type-checked only: docs/macos.md). `doctor` has no macOS child yet.
#[cfg(any(target_os = "linux", windows))]
pub mod doctor;
pub mod reclaim;
pub mod report;
pub mod run;

// Linux only: Landlock, cgroups, and what is built on them (macOS and Windows have no
// protection backend: docs/macos.md, docs/windows.md).
#[cfg(target_os = "linux")]
pub mod protect;

// Who may have written what is found on disk, by uid and mode: POSIX, so Linux and macOS.
#[cfg(unix)]
pub mod trust;

pub use duration::parse_duration;
pub use error::{Error, Result};
pub use namespace::Namespace;
pub use root::{Root, RootOptions};
