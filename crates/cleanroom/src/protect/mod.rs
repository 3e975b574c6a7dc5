//! Protection: kernel-enforced write protection (Landlock) and network isolation for a run.
//!
//! This module owns the policy a run's command gets from the kernel: which paths it may write
//! (`--protect off|home|strict`, `--protect-path`, `--allow-write`) and whether it sees the host
//! network (`--net host|none`).
//!
//! Invariant: the policy is built in the parent ([`Protection::prepare`]) and applied in the
//! child before exec ([`Protection::configure`]) with nothing but raw system calls (no
//! allocation after fork), so it covers the whole process tree of the command; what the kernel
//! could not enforce is always reported in [`ProtectionStatus`], and is an error when the caller
//! required enforcement.
//!
//! # Modes
//! - `off`: no kernel policy.
//! - `home` (default): the real home and every `--protect-path` are read-only; everything else
//!   behaves as without cleanroom. Landlock is an allowlist, so this is built as a *cover*: the
//!   write-side rights are handled, and granted on every top-level path that is not an ancestor
//!   of a protected path; ancestors are descended and their other entries granted; protected
//!   paths get no rule. Reads are not handled at all (everything stays readable and executable).
//! - `strict`: writes only beneath the root, the working directory, `--allow-write` paths and
//!   the device files in [`DEVICE_FILES`]. Toolchain caches are not writable unless named with
//!   `--allow-write` (offline `cargo test` with its dependencies already unpacked needs none;
//!   `go test` needs `GOCACHE`).
//!
//! In both modes these are always writable, even inside a protected path ("the most specific
//! path wins"): the root, the working directory, `allow_write`, and in `home` mode the toolchain
//! caches the environment keeps at their real location (`env::TOOLCHAIN_HOMES` marked as caches). A protected path that *equals* one of them stays protected.
//! All paths are canonicalized first (Landlock rules bind inodes), so a protected directory is
//! protected whatever spelling the command uses: absolute, relative, through a symlink.
//!
//! The policy applies from exec on: descriptors the command inherits keep their rights, and
//! `prepare` forks a short probe child for `--net none`, reaped by its pid (a runner that reaps
//! with `waitpid(-1)` on another thread could steal it).
//!
//! Known limits of the cover (inherent to an allowlist): new entries cannot be created directly
//! inside an *ancestor* of a protected path (with the home `/root`, nothing new in `/`); entries
//! of such ancestors created after [`Protection::prepare`] are read-only; a bind mount of a
//! protected directory elsewhere is not protected. Landlock governs content and directory
//! entries, not metadata: timestamps (`touch` of an existing file), mode, owner and extended
//! attributes of protected files can still be changed where ordinary permissions allow it.
//! `no_new_privs` is set, so set-uid programs do not gain privileges inside the run.
//!
//! # Landlock ABI levels
//! The kernel's ABI is asked with `landlock_create_ruleset(.., LANDLOCK_CREATE_RULESET_VERSION)`
//! and the ruleset handles what that ABI knows (capped at ABI 7, the newest this module was
//! tested against):
//!
//! | ABI | kernel | adds | used here |
//! |---|---|---|---|
//! | 1 | 5.13 | create, remove, write files | yes; renames/links across directories are always refused |
//! | 2 | 5.19 | `Refer`: rename/link across directories | yes: links and renames *into* protected paths are refused, others work |
//! | 3 | 6.2 | `Truncate` | yes: from here enforcement is **full** |
//! | 4 | 6.7 | TCP bind/connect | no: `--net none` uses a network namespace instead |
//! | 5 | 6.10 | `IoctlDev`: ioctl on device files | yes: granted everywhere writable and on [`DEVICE_FILES`] (ttys keep working) |
//! | 6 | 6.12 | scopes: abstract unix sockets, signals | no |
//! | 7 | 6.15 | audit logging flags | no |
//!
//! ABI 1 and 2 give **partial** enforcement (a protected file can still be cut with
//! `truncate(2)`); no Landlock gives **none**. For tests, setting the environment variable
//! [`TEST_LANDLOCK_ABSENT_ENV`] to `1` makes [`Protection::prepare`] and the doctor behave as on
//! a kernel without Landlock, and [`TEST_LANDLOCK_MAX_ABI_ENV`] to N as on a kernel with ABI N.
//!
//! # Network
//! `--net none` puts the command in a new network namespace whose only interface, `lo`, is up:
//! as root a plain network namespace; otherwise a user namespace with it, mapping the user's own
//! uid/gid to themselves (the command keeps its identity and gains nothing outside). Anything
//! beyond loopback fails at once with "network unreachable".

pub(crate) mod linux;
mod plan;

use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;

use serde::Serialize;

use crate::{Error, Result};
use plan::Plan;

/// Environment variable that, set to `1`, makes this process behave as if the kernel had no
/// Landlock. Test-only: it exists so `--require-protection` can be tested on a kernel that has
/// Landlock; it can only weaken what cleanroom asks of the kernel, never fake a result.
pub const TEST_LANDLOCK_ABSENT_ENV: &str = "CLEANROOM_TEST_LANDLOCK_ABSENT";

/// Environment variable that, set to a number N >= 1, makes this process use at most Landlock
/// ABI N (`min(kernel, N)`). Test-only: the kernel really enforces the older ABI's ruleset, so
/// the behaviour of older kernels can be observed on a new one; it can only weaken the policy.
pub const TEST_LANDLOCK_MAX_ABI_ENV: &str = "CLEANROOM_TEST_LANDLOCK_MAX_ABI";

/// Device files that stay writable (read, write, ioctl) in every mode that restricts writes.
pub const DEVICE_FILES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

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

impl FromStr for ProtectMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<ProtectMode> {
        match s {
            "off" => Ok(ProtectMode::Off),
            "home" => Ok(ProtectMode::Home),
            "strict" => Ok(ProtectMode::Strict),
            other => Err(Error::Invalid(format!(
                "unknown protection mode {other:?} (expected off, home or strict)"
            ))),
        }
    }
}

impl fmt::Display for ProtectMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProtectMode::Off => "off",
            ProtectMode::Home => "home",
            ProtectMode::Strict => "strict",
        })
    }
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

impl FromStr for NetMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<NetMode> {
        match s {
            "host" => Ok(NetMode::Host),
            "none" => Ok(NetMode::None),
            other => Err(Error::Invalid(format!(
                "unknown network mode {other:?} (expected host or none)"
            ))),
        }
    }
}

impl fmt::Display for NetMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetMode::Host => "host",
            NetMode::None => "none",
        })
    }
}

/// Everything protection needs to know about a run.
#[derive(Clone, Debug)]
pub struct ProtectionRequest {
    /// Filesystem mode.
    pub mode: ProtectMode,
    /// Extra read-only paths (`--protect-path`); each must exist.
    pub protect_paths: Vec<PathBuf>,
    /// Extra writable paths (`--allow-write`); each must exist. In `home` mode they are
    /// exceptions inside protected paths.
    pub allow_write: Vec<PathBuf>,
    /// Network mode.
    pub net: NetMode,
    /// Fail instead of warning when the kernel cannot enforce the mode.
    pub require: bool,
    /// The user's real home, resolved before HOME was moved (skipped if it does not exist).
    pub real_home: Option<PathBuf>,
    /// The run's root.
    pub root: PathBuf,
    /// The run's working directory.
    pub cwd: PathBuf,
    /// Toolchain caches the run must be able to write even inside the real home in `home` mode
    /// (the caches of `env::TOOLCHAIN_HOMES`); those that do not exist are skipped. Not used by `strict`.
    pub writable_caches: Vec<PathBuf>,
}

/// How much of the requested filesystem policy the kernel enforces; ordered from weakest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// No kernel policy (mode `off`, or no Landlock).
    None,
    /// Some of the policy (an old Landlock ABI).
    Partial,
    /// All of it.
    Full,
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Enforcement::None => "none",
            Enforcement::Partial => "partial",
            Enforcement::Full => "full",
        })
    }
}

/// What was enforced.
#[derive(Clone, Debug, Serialize)]
pub struct ProtectionStatus {
    /// The requested mode.
    pub mode: ProtectMode,
    /// `full`, `partial` or `none`.
    pub enforcement: Enforcement,
    /// Why enforcement is not full, if it is not.
    pub reason: Option<String>,
    /// The kernel's Landlock ABI, if it has Landlock.
    pub landlock_abi: Option<u32>,
    /// Number of Landlock rules in the ruleset (0 when none is installed).
    pub rules: usize,
    /// Canonical paths made read-only.
    pub read_only: Vec<PathBuf>,
    /// Canonical paths kept writable even inside read-only ones (root, cwd, allow_write, caches).
    pub writable: Vec<PathBuf>,
    /// Ancestors of read-only paths: their existing entries stay writable but no new entry can
    /// be created directly in them (a limit of building `home` as an allowlist cover).
    pub no_new_entries_in: Vec<PathBuf>,
    /// The network mode.
    pub net: NetMode,
    /// How `--net none` is isolated ("network namespace" or "user and network namespace").
    pub net_isolation: Option<String>,
}

impl ProtectionStatus {
    /// The one warning to print when the requested mode is not fully enforced (and enforcement
    /// was not required, or `prepare` would have failed).
    pub fn warning(&self) -> Option<String> {
        if self.mode == ProtectMode::Off || self.enforcement == Enforcement::Full {
            return None;
        }
        Some(format!(
            "write protection `{}` is {} on this machine: {}; continuing (use \
             --require-protection to refuse instead)",
            self.mode,
            match self.enforcement {
                Enforcement::Partial => "only partly enforced",
                _ => "not enforced",
            },
            self.reason.as_deref().unwrap_or("unknown reason"),
        ))
    }
}

impl fmt::Display for ProtectionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "protect {}: {}", self.mode, self.enforcement)?;
        match self.landlock_abi {
            Some(abi) => write!(f, " (Landlock ABI {abi}, {} rules)", self.rules)?,
            None => f.write_str(" (no Landlock)")?,
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        write!(f, "; net {}", self.net)?;
        if let Some(how) = &self.net_isolation {
            write!(f, " ({how}, loopback only)")?;
        }
        Ok(())
    }
}

/// A prepared policy, ready to be installed on a command.
#[derive(Debug)]
pub struct Protection {
    status: ProtectionStatus,
    /// The Landlock ruleset, shared with every configured command's pre-exec hook so it stays
    /// open until the command is spawned.
    ruleset: Option<Arc<OwnedFd>>,
    isolate_net: bool,
}

impl Protection {
    /// Builds the policy for `request` (in the parent).
    ///
    /// Fails with [`Error::Unsupported`] when `request.require` is set and the kernel cannot
    /// fully enforce `request.mode`, and when `--net none` is asked and the kernel refuses the
    /// network namespace; with [`Error::Invalid`] when a `protect_paths` or `allow_write` entry
    /// does not exist.
    pub fn prepare(request: &ProtectionRequest) -> Result<Protection> {
        let isolate_net = request.net == NetMode::None;
        let net_isolation = if isolate_net {
            Some(probe_net_isolation()?)
        } else {
            None
        };
        let mut status = ProtectionStatus {
            mode: request.mode,
            enforcement: Enforcement::None,
            reason: None,
            landlock_abi: None,
            rules: 0,
            read_only: Vec::new(),
            writable: Vec::new(),
            no_new_entries_in: Vec::new(),
            net: request.net,
            net_isolation,
        };
        if request.mode == ProtectMode::Off {
            status.reason = Some("protection is off (--protect off)".into());
            return Ok(Protection {
                status,
                ruleset: None,
                isolate_net,
            });
        }

        let plan = Plan::build(request)?;
        status.read_only.clone_from(&plan.protected);
        status.writable.clone_from(&plan.exceptions);
        status.no_new_entries_in.clone_from(&plan.ancestors);

        let abi = match landlock_support() {
            Ok(abi) => abi,
            Err(reason) => {
                if request.require {
                    return Err(Error::Unsupported {
                        what: "Landlock write protection (--require-protection)",
                        reason,
                    });
                }
                status.reason = Some(reason);
                return Ok(Protection {
                    status,
                    ruleset: None,
                    isolate_net,
                });
            }
        };
        let (enforcement, reason) = enforcement_for_abi(abi);
        if request.require && enforcement != Enforcement::Full {
            return Err(Error::Unsupported {
                what: "full Landlock write protection (--require-protection)",
                reason: reason.unwrap_or_default(),
            });
        }

        let mut grants = Vec::new();
        for path in &plan.grants {
            if let Some(grant) = linux::open_for_rule(path)? {
                grants.push(grant);
            }
        }
        let mut devices = Vec::new();
        for path in DEVICE_FILES.iter().map(Path::new).filter(|p| p.exists()) {
            if let Some(device) = linux::open_for_rule(path)? {
                devices.push(device);
            }
        }
        let ruleset = linux::create_ruleset(abi, &grants, &devices)?;
        status.landlock_abi = Some(abi);
        status.rules = grants.len() + devices.len();
        status.enforcement = enforcement;
        status.reason = reason;
        tracing::debug!(%status, "protection prepared");
        Ok(Protection {
            status,
            ruleset: Some(Arc::new(ruleset)),
            isolate_net,
        })
    }

    /// What will be enforced.
    pub fn status(&self) -> &ProtectionStatus {
        &self.status
    }

    /// Installs the policy on `command` (applied in the child before exec, so it covers the
    /// command and everything it starts). Hooks added to `command` earlier run before it.
    pub fn configure(&self, command: &mut Command) {
        if let Some(hook) = self.child_hook() {
            // SAFETY: the hook runs between fork and exec and only makes raw, async-signal-safe
            // system calls on data captured before the fork (see `linux::apply_in_child`).
            unsafe {
                command.pre_exec(hook);
            }
        }
    }

    /// The function that applies the policy to the calling process, for spawners that do not
    /// use `std::process::Command` (tokio's `pre_exec`, a `clone3` child): call it in the child,
    /// after fork and before exec, as the last step before exec. It is async-signal-safe (raw
    /// system calls only, no allocation) and keeps the ruleset open for as long as it lives.
    /// `None` when there is nothing to apply.
    pub fn child_hook(&self) -> Option<impl Fn() -> std::io::Result<()> + Send + Sync + 'static> {
        if self.ruleset.is_none() && !self.isolate_net {
            return None;
        }
        let ruleset = self.ruleset.clone();
        let isolate_net = self.isolate_net;
        Some(move || linux::apply_in_child(isolate_net, ruleset.as_ref().map(|fd| fd.as_raw_fd())))
    }
}

/// The Landlock ABI to use, or why there is none (including the test-only switches).
pub(crate) fn landlock_support() -> std::result::Result<u32, String> {
    if std::env::var_os(TEST_LANDLOCK_ABSENT_ENV).is_some_and(|v| v == "1") {
        return Err(format!(
            "Landlock is treated as absent because {TEST_LANDLOCK_ABSENT_ENV}=1 (test-only switch)"
        ));
    }
    let abi = linux::landlock_abi()?;
    let cap = std::env::var(TEST_LANDLOCK_MAX_ABI_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    Ok(match cap {
        Some(cap) if cap >= 1 && cap < abi => cap,
        _ => abi,
    })
}

/// How fully a Landlock ABI enforces `home` and `strict`, and why not fully.
pub(crate) fn enforcement_for_abi(abi: u32) -> (Enforcement, Option<String>) {
    match abi {
        0 => (Enforcement::None, Some("no Landlock".into())),
        1 => (
            Enforcement::Partial,
            Some(
                "Landlock ABI 1 cannot stop truncate(2) of protected files and refuses every \
                 rename or link across directories"
                    .into(),
            ),
        ),
        2 => (
            Enforcement::Partial,
            Some("Landlock ABI 2 cannot stop truncate(2) of protected files".into()),
        ),
        _ => (Enforcement::Full, None),
    }
}

/// Checks in a forked child that the network isolation of `--net none` can be set up.
fn probe_net_isolation() -> Result<String> {
    linux::probe_in_child(linux::probe_netns).map_err(|e| Error::Unsupported {
        what: "network isolation (--net none)",
        reason: format!(
            "the kernel refused a new network namespace with loopback up: {e}{}",
            if e.raw_os_error() == Some(libc::EPERM) {
                " (user namespaces may be disabled: see `cleanroom doctor`)"
            } else {
                ""
            }
        ),
    })?;
    Ok(if rustix::process::geteuid().is_root() {
        "network namespace".into()
    } else {
        "user and network namespace".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_the_cli_spelling() {
        for mode in ["off", "home", "strict"] {
            assert_eq!(mode.parse::<ProtectMode>().unwrap().to_string(), mode);
        }
        for net in ["host", "none"] {
            assert_eq!(net.parse::<NetMode>().unwrap().to_string(), net);
        }
        assert!("HOME".parse::<ProtectMode>().is_err());
    }
}
