//! The JSON report of a run (`--report FILE`), schema `cleanroom-run-report` version 1,
//! documented in `docs/report.md`. Fields are only ever added within a version.
//!
//! One set of types on every platform, so every platform writes the same schema. What a
//! platform cannot fill is `null` or empty there, never absent: on Windows `protection` is
//! `null` and `tmp` empty (no protection backend), `containment.mechanism` is `null` (the run is
//! in a Job Object, which is not a rung of Linux's ladder), `cgroup` is `null`, `watchdog` is
//! `false` (the job dies with the runner's handle instead), `signal`, `interrupt_signal` and
//! `timeout_signal` are `null` (no signals), and `killed` is empty (the job is terminated whole;
//! what outlived the command is in `leaks`). On macOS (type-checked only) `protection` is `null`,
//! `tmp` empty, `containment.mechanism` `null` (a process group, not a rung of the ladder: no
//! subreaper), `cgroup` `null` and `watchdog` `false` (nothing guards the run if the runner
//! dies); signals are Unix's, as on Linux.

use std::path::PathBuf;

use serde::Serialize;

use crate::contain::Mechanism;
use crate::env::ToolchainHome;
use crate::process::ProcessInfo;
#[cfg(target_os = "linux")]
pub use crate::protect::{ProtectionStatus, TmpLeft};
use crate::reclaim::GcSummary;
use crate::remove::Removal;
#[cfg(not(target_os = "linux"))]
pub use unprotected::{ProtectionStatus, TmpLeft};

/// Value of the `schema` field.
pub const REPORT_SCHEMA: &str = "cleanroom-run-report";
/// Version of the report schema.
pub const REPORT_VERSION: u32 = 1;

/// Why the run ended the way it did, most severe last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The command exited by itself.
    Exited,
    /// A signal to the runner was forwarded to the run.
    Interrupted,
    /// `--timeout` fired.
    TimedOut,
}

/// How the command ended and what cleanroom exits with.
#[derive(Clone, Debug, Serialize)]
pub struct ExitInfo {
    /// cleanroom's own exit status (0–255 on Unix; on Windows the command's exit code, which
    /// may be larger, passes through whole).
    pub status: i32,
    /// The command's exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that killed the command, if one did.
    pub signal: Option<i32>,
    /// Why the run ended.
    pub ending: Ending,
    /// The signal the runner received, if it was interrupted.
    pub interrupt_signal: Option<i32>,
    /// The first signal sent when `--timeout` fired (`--signal`), if it fired.
    pub timeout_signal: Option<i32>,
}

/// Containment in use.
#[derive(Clone, Debug, Serialize)]
pub struct ContainmentInfo {
    /// The mechanism (`null` on Windows and macOS: a Job Object or a process group, not a rung
    /// of Linux's ladder).
    pub mechanism: Option<Mechanism>,
    /// Why a stronger one is not in use.
    pub fallback_reason: Option<String>,
    /// The cgroup, if any.
    pub cgroup: Option<PathBuf>,
    /// Whether a watchdog was guarding the run: it kills the run if the runner dies.
    pub watchdog: bool,
    /// Why the watchdog stopped guarding the run before its end (`stopped` or `killed`), if it
    /// did: the run was then not guarded against the runner's death.
    pub watchdog_lost: Option<String>,
}

impl ContainmentInfo {
    /// The containment of a platform outside Linux's ladder (a Job Object on Windows, a
    /// process group on macOS): no mechanism of the ladder, no cgroup, no watchdog.
    pub fn outside_the_ladder() -> ContainmentInfo {
        ContainmentInfo {
            mechanism: None,
            fallback_reason: None,
            cgroup: None,
            watchdog: false,
            watchdog_lost: None,
        }
    }
}

/// A process that outlived the command.
#[derive(Clone, Debug, Serialize)]
pub struct Leak {
    /// The process.
    #[serde(flatten)]
    pub process: ProcessInfo,
    /// Milliseconds after the command's exit at which it was found.
    pub found_after_ms: u64,
}

/// The environment decisions, for diagnosis.
#[derive(Clone, Debug, Serialize)]
pub struct EnvInfo {
    /// Toolchain homes passed on at their real locations.
    pub toolchain: Vec<ToolchainHome>,
    /// Variables with their own directory in the root.
    pub homes: Vec<String>,
    /// Variables removed by `--drop-secrets`.
    pub dropped: Vec<String>,
}

/// Everything about one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// Always [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// Always [`REPORT_VERSION`].
    pub version: u32,
    /// The run id.
    pub run_id: String,
    /// The root's path (gone unless kept).
    pub root: PathBuf,
    /// The command.
    pub command: Vec<String>,
    /// Start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Wall time of the whole run, including cleanup.
    pub duration_ms: u64,
    /// How it ended.
    pub exit: ExitInfo,
    /// Containment.
    pub containment: ContainmentInfo,
    /// Protection (`null` where the platform has no protection backend: Windows, macOS).
    pub protection: Option<ProtectionStatus>,
    /// What the command left in its private `/tmp` and `/var/tmp` (removed with the root), per
    /// directory; empty when they were not private (or processes survived).
    pub tmp: Vec<TmpLeft>,
    /// Processes that outlived the command (killed, but for the `survivors`).
    pub leaks: Vec<Leak>,
    /// Processes that needed SIGKILL at the end (and died of it).
    pub killed: Vec<ProcessInfo>,
    /// Processes still alive when the KILL loop gave up (exit status 125; the root and the
    /// cgroup are left for gc).
    pub survivors: Vec<ProcessInfo>,
    /// Removal of the root (absent when kept).
    pub cleanup: Option<Removal>,
    /// Whether the root was kept (`--keep-root`).
    pub kept_root: bool,
    /// What the reclamation at start did.
    pub gc: GcSummary,
    /// Environment decisions.
    pub env: EnvInfo,
}

/// Where `protect` has no backend (Windows, macOS), its report types have no values:
/// `protection` is always `null` and `tmp` always empty there.
#[cfg(not(target_os = "linux"))]
mod unprotected {
    use serde::Serialize;

    /// No protection status exists on this platform.
    #[derive(Clone, Debug, Serialize)]
    pub enum ProtectionStatus {}

    /// No private `/tmp` exists on this platform.
    #[derive(Clone, Debug, Serialize)]
    pub enum TmpLeft {}
}
