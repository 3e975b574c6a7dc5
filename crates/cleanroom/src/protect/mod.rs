//! Protection: kernel-enforced write protection (Landlock) and network isolation for a run.
//!
//! Invariant: the policy is built in the parent and applied in the child before exec with
//! nothing but raw system calls (no allocation after fork); what the kernel could not enforce is
//! always reported, and is an error when the caller required enforcement.

use std::path::PathBuf;
use std::process::Command;

use serde::Serialize;

use crate::Result;

/// How much of the filesystem the run may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtectMode {
    /// No kernel policy.
    Off,
    /// The real home and `protect_paths` are read-only; everything else as without cleanroom.
    Home,
    /// Writes only to the root, the working directory, device files and `allow_write`.
    Strict,
}

/// Network isolation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetMode {
    /// The host's network.
    Host,
    /// A new network namespace with only loopback, up.
    None,
}

/// Everything protection needs to know about a run.
#[derive(Clone, Debug)]
pub struct ProtectionRequest {
    /// Filesystem mode.
    pub mode: ProtectMode,
    /// Extra read-only paths (`--protect-path`).
    pub protect_paths: Vec<PathBuf>,
    /// Extra writable paths in strict mode (`--allow-write`).
    pub allow_write: Vec<PathBuf>,
    /// Network mode.
    pub net: NetMode,
    /// Fail instead of warning when the kernel cannot enforce the mode.
    pub require: bool,
    /// The user's real home, resolved before HOME was moved.
    pub real_home: Option<PathBuf>,
    /// The run's root.
    pub root: PathBuf,
    /// The run's working directory.
    pub cwd: PathBuf,
    /// Toolchain caches the run must be able to write even inside the real home.
    pub writable_caches: Vec<PathBuf>,
}

/// What was enforced.
#[derive(Clone, Debug, Serialize)]
pub struct ProtectionStatus {
    /// The requested mode.
    pub mode: ProtectMode,
    /// `full`, `partial` or `none`.
    pub enforcement: String,
    /// Why enforcement is not full, if it is not.
    pub reason: Option<String>,
    /// The network mode.
    pub net: NetMode,
}

/// A prepared policy, ready to be installed on a command.
#[derive(Debug)]
pub struct Protection {
    status: ProtectionStatus,
}

impl Protection {
    /// Builds the policy for `request` (in the parent).
    pub fn prepare(request: &ProtectionRequest) -> Result<Protection> {
        Ok(Protection {
            status: ProtectionStatus {
                mode: request.mode,
                enforcement: "none".into(),
                reason: Some("not implemented yet".into()),
                net: request.net,
            },
        })
    }

    /// What will be enforced.
    pub fn status(&self) -> &ProtectionStatus {
        &self.status
    }

    /// Installs the policy on `command` (applied in the child before exec).
    pub fn configure(&self, command: &mut Command) {
        let _ = command;
    }
}
