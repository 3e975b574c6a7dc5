//! [`RunBuilder`]: a [`RunConfig`] that starts from the defaults of `cleanroom run` and changes
//! one option at a time. The CLI builds its configuration through it, so the library's defaults
//! and the command line's are the same by construction.
//!
//! ```
//! use std::time::Duration;
//! use cleanroom::run::{self, LeakPolicy, RunConfig};
//!
//! let state = tempfile::tempdir()?;
//! // A command that writes into its HOME and leaves a daemon behind.
//! let config = RunConfig::builder(["sh", "-c", "touch \"$HOME/made\"; sleep 60 & exit 0"])
//!     .namespace(state.path().join("ns"))
//!     .timeout(Some(Duration::from_secs(60)))
//!     .on_leak(LeakPolicy::Fail)
//!     .build()?;
//! let report = run::execute(&config, &mut |_event| {})?;
//! assert_eq!(report.leaks.len(), 1, "the background sleep outlived the command");
//! assert_eq!(report.exit.status, i32::from(run::EXIT_LEAKED));
//! assert!(!report.root.exists(), "the root and the file in it are gone");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::{KeepRoot, LeakPolicy, RunConfig};
use crate::contain::ContainMode;
use crate::env::{self, EnvOptions};
use crate::error::{Error, Result};
use crate::lock::{LockRequest, LockScope};
#[cfg(target_os = "linux")]
use crate::protect::{NetMode, ProtectMode};
use crate::reclaim::Budget;

/// Time between TERM and KILL on timeout or interrupt (`--grace`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// Time between TERM and KILL for processes that outlive the command (`--leak-grace`).
pub const DEFAULT_LEAK_GRACE: Duration = Duration::from_millis(500);
/// How many roots kept on failure stay (`--keep-root-count`): the newest three, as pytest keeps
/// the base temporary directories of its last three sessions (`tmp_path_retention_count`) —
/// enough to compare a failure with the ones before it, bounded in disk use.
pub const DEFAULT_KEEP_ROOT_COUNT: u32 = 3;

impl Default for RunConfig {
    /// The defaults of `cleanroom run`, with no command yet.
    fn default() -> RunConfig {
        RunConfig {
            namespace: default_namespace(),
            command: Vec::new(),
            timeout: None,
            #[cfg(target_os = "linux")]
            timeout_signal: rustix::process::Signal::TERM,
            grace: DEFAULT_GRACE,
            leak_grace: DEFAULT_LEAK_GRACE,
            on_leak: LeakPolicy::Warn,
            keep_root: KeepRoot::Never,
            keep_root_count: DEFAULT_KEEP_ROOT_COUNT,
            contain: ContainMode::Auto,
            env: EnvOptions::default(),
            #[cfg(target_os = "linux")]
            protect: super::ProtectSettings {
                mode: ProtectMode::Home,
                protect_paths: Vec::new(),
                allow_write: Vec::new(),
                path_origins: Default::default(),
                net: NetMode::Host,
                require: false,
                private_tmp: true,
                share_tmp: Vec::new(),
            },
            locks: None,
            gc_budget: Budget::AT_RUN_START,
        }
    }
}

/// The namespace of `cleanroom run` without `--state-dir`. Unix's default never fails; on
/// Windows, where the user's SID or LocalAppData can be missing, an empty path then makes the
/// run fail with the reason when it opens the namespace.
fn default_namespace() -> PathBuf {
    #[cfg(unix)]
    return crate::namespace::os::euid_default_path();
    #[cfg(windows)]
    crate::namespace::Namespace::default_path().unwrap_or_default()
}

impl RunConfig {
    /// A builder for running `command` with the defaults of `cleanroom run`.
    pub fn builder<I, S>(command: I) -> RunBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        RunBuilder {
            config: RunConfig {
                command: command.into_iter().map(Into::into).collect(),
                ..RunConfig::default()
            },
            locks: LockRequest {
                names: Vec::new(),
                scope: LockScope::User,
                timeout: None,
            },
        }
    }
}

/// Builds a [`RunConfig`]; every method replaces the value it names (lists included).
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RunBuilder {
    config: RunConfig,
    /// Names, scope and wait of `--exclusive`; a request is made only when names are given.
    locks: LockRequest,
}

impl RunBuilder {
    /// The namespace holding the run's root (default: `/tmp/cleanroom-<euid>`).
    pub fn namespace(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.namespace = path.into();
        self
    }

    /// Ends the run with TERM, the grace period, then KILL after this long (`None`: no limit).
    pub fn timeout(mut self, limit: Option<Duration>) -> Self {
        self.config.timeout = limit;
        self
    }

    /// Time between TERM and KILL on timeout or interrupt (zero: KILL at once).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.config.grace = grace;
        self
    }

    /// Time between TERM and KILL for leaked processes (zero: KILL at once).
    pub fn leak_grace(mut self, grace: Duration) -> Self {
        self.config.leak_grace = grace;
        self
    }

    /// What leaked processes do to the exit status.
    pub fn on_leak(mut self, policy: LeakPolicy) -> Self {
        self.config.on_leak = policy;
        self
    }

    /// When to keep the root after the run instead of removing it (default: never).
    pub fn keep_root(mut self, when: KeepRoot) -> Self {
        self.config.keep_root = when;
        self
    }

    /// How many roots kept on failure stay: a root kept with [`KeepRoot::OnFailure`] is
    /// reclaimed by gc once this many newer ones were kept (at least 1).
    pub fn keep_root_count(mut self, count: u32) -> Self {
        self.config.keep_root_count = count;
        self
    }

    /// The containment mechanism to ask for.
    pub fn contain(mut self, mode: ContainMode) -> Self {
        self.config.contain = mode;
        self
    }

    /// Variables that get their own directory inside the root.
    pub fn pins<I: IntoIterator<Item = S>, S: Into<String>>(mut self, vars: I) -> Self {
        self.config.env.pins = vars.into_iter().map(Into::into).collect();
        self
    }

    /// Removes secret-looking variables from the command's environment.
    pub fn drop_secrets(mut self, drop: bool) -> Self {
        self.config.env.drop_secrets = drop;
        self
    }

    /// Variables kept even when secrets are dropped.
    pub fn keep_env<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.config.env.keep = names.into_iter().map(Into::into).collect();
        self
    }

    /// Pass none of the host's tool configuration through (`--pure-home`).
    pub fn pure_home(mut self, pure: bool) -> Self {
        self.config.env.pure_home = pure;
        self
    }

    /// Also pass the real `~/.netrc` through, read-only (`--pass-netrc`).
    pub fn pass_netrc(mut self, pass: bool) -> Self {
        self.config.env.pass_netrc = pass;
        self
    }

    /// Bound of the reclamation of stale roots at the start of the run.
    pub fn gc_budget(mut self, budget: Budget) -> Self {
        self.config.gc_budget = budget;
        self
    }

    /// The configuration; fails when the command is empty or a pin is not a variable name.
    pub fn build(self) -> Result<RunConfig> {
        let config = self.config;
        if config.command.is_empty() {
            return Err(Error::Invalid("no command given".into()));
        }
        for pin in &config.env.pins {
            env::validate_pin(pin)?;
        }
        if config.keep_root_count == 0 {
            return Err(Error::Invalid(
                "keep_root_count 0 would keep no root kept on failure (KeepRoot::Never keeps none)"
                    .into(),
            ));
        }
        Ok(RunConfig {
            locks: (!self.locks.names.is_empty()).then_some(self.locks),
            ..config
        })
    }

    /// Exclusive locks to wait for and hold for the whole run (none: no lock).
    pub fn exclusive<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.locks.names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Where the exclusive locks live (Windows has only [`LockScope::User`]: a machine-scope
    /// request fails when the run starts, before anything of it exists).
    pub fn lock_scope(mut self, scope: LockScope) -> Self {
        self.locks.scope = scope;
        self
    }

    /// How long to wait for the exclusive locks (`None`: forever).
    pub fn lock_timeout(mut self, limit: Option<Duration>) -> Self {
        self.locks.timeout = limit;
        self
    }
}

/// What only Linux runs have today: protection and the timeout's signal.
#[cfg(target_os = "linux")]
impl RunBuilder {
    /// The first signal sent to every process of the run when the timeout fires (default TERM;
    /// KILL follows after the grace period).
    pub fn timeout_signal(mut self, signal: rustix::process::Signal) -> Self {
        self.config.timeout_signal = signal;
        self
    }

    /// The filesystem protection mode.
    pub fn protect(mut self, mode: ProtectMode) -> Self {
        self.config.protect.mode = mode;
        self
    }

    /// Paths made read-only for the run, beyond the real home.
    pub fn protect_paths<I: IntoIterator<Item = P>, P: Into<PathBuf>>(mut self, paths: I) -> Self {
        self.config.protect.protect_paths = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Paths the run may also write in strict mode.
    pub fn allow_write<I: IntoIterator<Item = P>, P: Into<PathBuf>>(mut self, paths: I) -> Self {
        self.config.protect.allow_write = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Names where a `protect_paths` or `allow_write` entry was given, for the messages about
    /// it (a config file's `FILE:LINE: run.protect-path[0] =`); by default it is named by its
    /// option (`--protect-path PATH`).
    pub fn path_origin(mut self, path: impl Into<PathBuf>, origin: impl Into<String>) -> Self {
        self.config
            .protect
            .path_origins
            .insert(path.into(), origin.into());
        self
    }

    /// Network isolation.
    pub fn net(mut self, mode: NetMode) -> Self {
        self.config.protect.net = mode;
        self
    }

    /// Gives the command its own `/tmp` and `/var/tmp` (the default under `home` and `strict`);
    /// `false` leaves it the host's (`--host-tmp`).
    pub fn private_tmp(mut self, private: bool) -> Self {
        self.config.protect.private_tmp = private;
        self
    }

    /// Paths beneath `/tmp` or `/var/tmp` that stay the host's in a private `/tmp`.
    pub fn share_tmp<I: IntoIterator<Item = P>, P: Into<PathBuf>>(mut self, paths: I) -> Self {
        self.config.protect.share_tmp = paths.into_iter().map(Into::into).collect();
        self
    }

    /// Refuses to run when the kernel cannot enforce the protection asked for.
    pub fn require_protection(mut self, require: bool) -> Self {
        self.config.protect.require = require;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_starts_from_the_defaults_and_changes_only_what_it_is_told() {
        let config = RunConfig::builder(["true"]).build().unwrap();
        assert_eq!(config.command, vec![OsString::from("true")]);
        assert_eq!(config.grace, DEFAULT_GRACE);
        assert_eq!(config.leak_grace, DEFAULT_LEAK_GRACE);
        assert_eq!(config.protect.mode, ProtectMode::Home);
        assert_eq!(
            config.namespace,
            crate::namespace::Namespace::default_path().unwrap()
        );
        assert!(config.locks.is_none());

        let config = RunConfig::builder(["true"])
            .exclusive(["db"])
            .lock_timeout(Some(Duration::from_secs(3)))
            .pins(["A_HOME", "B_HOME"])
            .pins(["C_HOME"])
            .build()
            .unwrap();
        let locks = config.locks.expect("a lock request");
        assert_eq!(locks.names, ["db"]);
        assert_eq!(locks.timeout, Some(Duration::from_secs(3)));
        assert_eq!(config.env.pins, ["C_HOME"], "a list setter replaces");
    }

    #[test]
    fn build_refuses_an_empty_command_and_a_bad_pin() {
        let empty: [&str; 0] = [];
        assert!(RunConfig::builder(empty).build().is_err());
        let err = RunConfig::builder(["true"])
            .pins(["A/B"])
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("--pin"), "{err}");
    }
}
