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
//! - [`secrets`]: which environment variables look like credentials.
#![deny(missing_docs)]
#![cfg(target_os = "linux")]

pub mod contain;
pub mod doctor;
pub mod duration;
pub mod env;
mod error;
pub mod lock;
pub mod marker;
pub mod namespace;
pub mod process;
pub mod protect;
pub mod reclaim;
pub mod remove;
pub mod report;
pub mod root;
pub mod run;
pub mod secrets;

pub use duration::parse_duration;
pub use error::{Error, Result};
pub use namespace::Namespace;
pub use root::{Root, RootOptions};
