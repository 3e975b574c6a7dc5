//! Where the lock directories are and what a run inherited: [`LockEnv`], read from the process
//! environment once (the variables are described in the module doc of `cleanroom::lock`).
//!
//! Invariant: a machine lock directory is used only by an absolute path, so no run's working
//! directory decides which runs it excludes (checked where it is opened, `unix.rs`).

use std::path::{Path, PathBuf};

use super::token::Capabilities;
use crate::error::Error;

/// Environment variable carrying inherited nested-run capabilities (format in the module doc).
pub const TOKENS_ENV: &str = "CLEANROOM_LOCK_TOKENS";
/// Environment variable overriding the machine lock directory.
pub const MACHINE_DIR_ENV: &str = "CLEANROOM_MACHINE_LOCK_DIR";
/// Environment variable naming the user lock directory to use (see the module docs).
pub const USER_LOCK_DIR_ENV: &str = "CLEANROOM_USER_LOCK_DIR";
/// The variable naming, in a run with a private `/tmp` (Linux), its private directories
/// (`/tmp:/var/tmp`), set by the run for its command: what lies beneath them is the run's own
/// view unless the run kept it the host's.
pub const PRIVATE_TMP_ENV: &str = "CLEANROOM_PRIVATE_TMP";
/// Where machine-scope locks live unless [`MACHINE_DIR_ENV`] says otherwise.
pub const DEFAULT_MACHINE_DIR: &str = "/tmp/cleanroom-locks";

/// What [`acquire`](super::acquire) and [`list`](super::list) take from the process
/// environment, made explicit.
#[derive(Clone, Debug)]
pub struct LockEnv {
    /// Capabilities inherited from enclosing runs.
    pub inherited: Capabilities,
    /// The machine lock directory (absolute).
    pub machine_dir: PathBuf,
    /// The user lock directory, when not `locks/` of the namespace.
    pub user_dir: Option<PathBuf>,
}

impl LockEnv {
    /// Reads [`TOKENS_ENV`], [`MACHINE_DIR_ENV`] (unset or empty: [`DEFAULT_MACHINE_DIR`]) and
    /// [`USER_LOCK_DIR_ENV`] (unset or empty: `locks/` of the namespace).
    pub fn from_process() -> LockEnv {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        LockEnv {
            inherited: Capabilities::from_env(),
            machine_dir: var(MACHINE_DIR_ENV).unwrap_or_else(|| PathBuf::from(DEFAULT_MACHINE_DIR)),
            user_dir: var(USER_LOCK_DIR_ENV),
        }
    }
}

impl Capabilities {
    /// The capabilities in this process's [`TOKENS_ENV`] (none when unset or not UTF-8).
    pub fn from_env() -> Capabilities {
        std::env::var(TOKENS_ENV)
            .map(|text| Capabilities::parse(&text))
            .unwrap_or_default()
    }
}

/// The error of a user lock directory [`USER_LOCK_DIR_ENV`] names, saying where it came from.
pub(super) fn named_user_dir(dir: &Path, error: Error) -> Error {
    Error::Invalid(format!(
        "the user lock directory {} ({USER_LOCK_DIR_ENV}, set by an enclosing run) cannot be \
         used: {error}",
        dir.display()
    ))
}
