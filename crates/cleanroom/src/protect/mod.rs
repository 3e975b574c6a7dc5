//! Protection: what a run's command may do to the filesystem and the network, enforced by the
//! kernel (Landlock, mount and network namespaces).
//!
//! This module owns `--protect off|home|strict` (with `--protect-path`, `--allow-write`) and
//! `--net host|none`. Every mode is a [`Policy`] of the one engine in [`policy`] (path rules,
//! most specific path wins), which the exec-server also uses for Codex's sandbox policies.
//!
//! Invariant: the policy is built in the parent ([`Protection::prepare`]) and applied in the
//! child before exec ([`Protection::configure`]) with nothing but raw system calls (no
//! allocation after fork), so it covers the whole process tree of the command; what the kernel
//! could not enforce, and every guarantee that shrank (no home found, the working directory not
//! made writable, no private `/dev/shm`), is reported in [`ProtectionStatus`] and warned about,
//! and is an error when the caller required enforcement.
//!
//! # Modes
//! - `off`: no kernel policy (with `--net none`, only the network namespace).
//! - `home` (default): read-only are the real homes (the password database's home of the real
//!   uid, and `$HOME` when it is another real directory; never `$HOME` alone), every
//!   `--protect-path`, the toolchain homes kept at their real location (binaries, env scripts,
//!   configuration: `$CARGO_HOME/env`, `$CARGO_HOME/bin`) and the configuration files passed
//!   through (`~/.npmrc`, `~/.gitconfig`, ...). Writable inside them, most specific path
//!   winning: the root, the working directory, its project root (see below), output directories
//!   named by [`WRITABLE_VARS`], the cache parts of toolchain homes (`registry/`, `git/`, module
//!   and build caches) and `--allow-write`. Everything else behaves as without cleanroom.
//!   Without any home to protect the run warns, or fails under `--require-protection`.
//! - `strict`: writes only beneath the root, the working directory (never `/`: from `/` it stays
//!   read-only, with a warning), `--allow-write`, the device files of [`DEVICE_FILES`] and a
//!   private `/dev/shm`, `/tmp` and `/var/tmp`. Toolchain caches are not writable unless named
//!   with `--allow-write`.
//!   Under `strict` the child's `CLEANROOM_STATE_DIR` names a namespace inside the run's root,
//!   so a nested `cleanroom run` works and writes only there.
//!
//! The **project root** of the working directory is the top of the nearest enclosing checkout
//! (`.git`, `.hg`, `.jj`), else the outermost cargo, npm or go workspace (or package) root or
//! directory with a project file (`pyproject.toml`, `pom.xml`, ...) containing it; one that is,
//! or contains, a protected path (a dotfiles repository in the home) is skipped, and so is one
//! another user could have made (see `project`: `/tmp` and sticky or others-writable directories
//! never are, markers and their directories must be the user's or root's). `.git` inside
//! it stays as the user's permissions allow. A working directory that is itself a protected path
//! (a run from the home) is not made writable, with a warning.
//!
//! `home` and `strict` give the run a private `/dev/shm`, `/tmp`, `/var/tmp` and IPC namespace
//! where a mount namespace can be made (root always; an ordinary user through a user namespace
//! mapping their own uid, in which files of other owners show as the overflow uid 65534): `/tmp`
//! and `/var/tmp` are overlays of the host's whose writes land in the root, keeping the root, the
//! project, cleanroom's lock directories and listening sockets the host's (see `scratch`; unless
//! `--host-tmp`). Where none can be made (inside another Landlock domain), the run shares the
//! host's, says so once (`--require-protection` refuses), and removes nothing there: it cannot
//! prove what the command created.
//!
//! `home` is compiled with [`Narrowing::Cover`] (Landlock alone: exact on inodes, no capability
//! dropped, works nested): new entries cannot be created directly in an *ancestor* of a
//! protected path (with the home `/root`, nothing new in `/`); entries of such ancestors created
//! after [`Protection::prepare`] are read-only; a bind mount of a protected directory elsewhere
//! is not protected. Landlock governs content and directory entries, not metadata: timestamps
//! (`touch` of an existing file), mode, owner and extended attributes of protected files can
//! still be changed where ordinary permissions allow it. `no_new_privs` is set, so set-uid
//! programs do not gain privileges inside the run. All paths are canonicalized first, so a
//! protected directory is protected whatever spelling the command uses.

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
//! beyond loopback fails at once with "network unreachable". `/sys` is replaced by a fresh
//! sysfs of the new network namespace (its submounts, such as the cgroup hierarchies, moved
//! back onto it), so `/sys/class/net` lists only `lo`.

mod aliases;
mod binds;
mod compile;
pub(crate) mod linux;
mod modes;
pub mod policy;
mod project;
mod rule;
mod scratch;
pub mod view;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use serde::Serialize;

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::env::{ChildEnv, HostFacts, PassedConfig, RealHome, ToolchainHome};
use crate::error::{Error, Result};

pub use crate::lock::{PRIVATE_TMP_ENV, USER_LOCK_DIR_ENV};
#[cfg(debug_assertions)]
pub use linux::shared::TEST_KERNEL_BEFORE_6_15_ENV;
pub use policy::{
    Access, AppliedRule, EnforcedBy, Narrowing, Network, Policy, Rule, Sandbox, SandboxStatus,
    SetupReport, UserNamespace, TEST_NO_MOUNT_NS_ENV,
};
pub use project::WRITABLE_VARS;
pub use scratch::{
    Isolation, PrivateDir, PrivateTmp, TmpLeft, TmpMechanism, TmpStatus, PRIVATE_TMP_DIRS,
};
pub use view::View;

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
    /// Extra read-only paths (`--protect-path`); one that does not exist is a rule reported
    /// absent, with a warning (an error under `require`).
    pub protect_paths: Vec<PathBuf>,
    /// Extra writable paths (`--allow-write`); one that does not exist is a rule reported
    /// absent, with a warning. In `home` mode they are exceptions inside protected paths.
    pub allow_write: Vec<PathBuf>,
    /// Where entries of `protect_paths` and `allow_write` were named, for the messages about
    /// them: the words put before the path (a config file's `FILE:LINE: run.protect-path[0] =`);
    /// an entry without one is named by its option (`--protect-path`).
    pub path_origins: BTreeMap<PathBuf, String>,
    /// Network mode.
    pub net: NetMode,
    /// Fail instead of warning when the kernel cannot enforce the mode, or (in `home` mode) no
    /// home to protect can be determined.
    pub require: bool,
    /// The user's real homes (the passwd home, and `$HOME` when it differs), read-only.
    pub homes: Vec<RealHome>,
    /// Why candidate homes were not taken (for the warning when none was).
    pub home_notes: Vec<String>,
    /// The run's root.
    pub root: PathBuf,
    /// The run's working directory.
    pub cwd: PathBuf,
    /// Toolchain homes: read-only in `home` mode, except their existing writable parts.
    pub toolchain: Vec<ToolchainHome>,
    /// Variable-less caches under the real homes, writable in `home` mode.
    pub home_caches: Vec<PathBuf>,
    /// Host configuration files passed through: read-only.
    pub config: Vec<PassedConfig>,
    /// Build output directories named by [`project::WRITABLE_VARS`] in the child's environment
    /// (absolute, or relative to `cwd`), writable in `home` mode.
    pub output_dirs: Vec<(String, PathBuf)>,
    /// Give the command its own `/tmp` and `/var/tmp` (`home` and `strict`; `--host-tmp`
    /// turns it off).
    pub private_tmp: bool,
    /// `--share-tmp`: paths beneath `/tmp` or `/var/tmp` that stay the host's; each must exist.
    pub share_tmp: Vec<PathBuf>,
    /// Sockets the child's environment names (`SSH_AUTH_SOCK`), kept connectable in a private
    /// `/tmp`.
    pub sockets: Vec<PathBuf>,
}

impl ProtectionRequest {
    /// The request for a child that gets `env`: homes, toolchain homes, passed-through
    /// configuration and output directories come from it; no extra paths, the host network,
    /// enforcement not required.
    pub fn new(mode: ProtectMode, env: &ChildEnv, root: &Path, cwd: &Path) -> ProtectionRequest {
        ProtectionRequest::from_facts(mode, &env.facts, &env.vars, root, cwd)
    }

    /// Like [`ProtectionRequest::new`], from what was resolved of the host and the variables the
    /// child would get.
    pub fn from_facts(
        mode: ProtectMode,
        facts: &HostFacts,
        vars: &BTreeMap<OsString, OsString>,
        root: &Path,
        cwd: &Path,
    ) -> ProtectionRequest {
        let output_dirs = project::WRITABLE_VARS
            .iter()
            .filter_map(|var| {
                let value = vars.get(std::ffi::OsStr::new(var))?;
                Some((var.to_string(), cwd.join(value)))
            })
            .collect();
        let sockets = SOCKET_VARS
            .iter()
            .filter_map(|var| vars.get(std::ffi::OsStr::new(var)))
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
            .collect();
        ProtectionRequest {
            mode,
            protect_paths: Vec::new(),
            allow_write: Vec::new(),
            path_origins: BTreeMap::new(),
            net: NetMode::Host,
            require: false,
            homes: facts.homes.clone(),
            home_notes: facts.home_notes.clone(),
            root: root.to_path_buf(),
            cwd: cwd.to_path_buf(),
            toolchain: facts.toolchain.clone(),
            home_caches: facts.home_caches.clone(),
            config: facts.config.clone(),
            output_dirs,
            private_tmp: true,
            share_tmp: Vec::new(),
            sockets,
        }
    }
}

/// Whether a run's `/tmp` can be private here (for `cleanroom doctor`): its namespaces and an
/// overlay of `/tmp` tried in a child, with the upper layer in `scratch`, a fresh directory where
/// runs' roots go (the caller removes it). `Err` is why not.
pub fn probe_private_tmp(scratch: &Path) -> std::result::Result<(), String> {
    scratch::probe(scratch)
}

/// Variables naming a socket the command connects to, kept connectable in a private `/tmp`.
pub const SOCKET_VARS: &[&str] = &["SSH_AUTH_SOCK"];

/// The rules `--protect mode` gives a run started in `cwd` with the host environment `host`,
/// its root shown as `root`, and the warnings it would print (for `cleanroom doctor`). The rules
/// are canonical and merged as the run merges them (one per path, the weaker access winning),
/// so each path shows the access the run really gets (`root`, a placeholder, is shown last).
pub fn preview(
    mode: ProtectMode,
    host: &BTreeMap<OsString, OsString>,
    cwd: &Path,
    root: &Path,
) -> Result<(Vec<Rule>, Vec<String>)> {
    let facts = HostFacts::resolve(host, &crate::env::EnvOptions::default());
    let request = ProtectionRequest::from_facts(mode, &facts, host, root, cwd);
    let mut warnings = Vec::new();
    let (root_rules, rules): (Vec<Rule>, Vec<Rule>) = modes::policy(&request, &mut warnings)?
        .map(|policy| policy.rules)
        .unwrap_or_default()
        .into_iter()
        .partition(|rule| rule.path == root);
    let mut merged: Vec<Rule> = compile::canonical_rules(&rules, &view::View::own())?
        .into_iter()
        .map(|rule| Rule {
            path: rule.path,
            access: rule.access,
            reason: rule.reason,
        })
        .collect();
    merged.extend(root_rules);
    Ok((merged, warnings))
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
    /// The real homes found (protected in `home` and `strict` mode).
    pub homes: Vec<RealHome>,
    /// Canonical paths made read-only (homes, `--protect-path`, toolchain homes, passed-through
    /// configuration).
    pub read_only: Vec<PathBuf>,
    /// Canonical paths kept writable (root, cwd, project root, caches, `--allow-write`, ...).
    pub writable: Vec<PathBuf>,
    /// Every rule with why it exists and how it is enforced.
    pub policy: Vec<AppliedRule>,
    /// Directories where no new entry can be created directly (a limit of building `home` as
    /// a Landlock cover).
    pub no_new_entries_in: Vec<PathBuf>,
    /// Whose `/dev/shm` the run sees.
    pub dev_shm: Isolation,
    /// Whose `/tmp` and `/var/tmp` the run sees, and what of the host's stays inside them.
    pub tmp: TmpStatus,
    /// Whose IPC namespace (System V objects, POSIX message queues) the run is in.
    pub ipc: Isolation,
    /// The private mount namespace, if the run has one.
    pub mount_namespace: Option<String>,
    /// The network mode.
    pub net: NetMode,
    /// How `--net none` is isolated ("network namespace" or "user and network namespace").
    pub net_isolation: Option<String>,
    /// Whether `/sys` is a fresh sysfs of the run's network namespace (`--net none`).
    pub fresh_sysfs: bool,
    /// What the run was warned about (protection not fully enforced, no home found, the
    /// working directory not made writable, no private `/dev/shm`).
    pub warnings: Vec<String>,
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
        if self.dev_shm == Isolation::Private {
            f.write_str("; private /dev/shm")?;
        }
        if self.tmp.isolation == Isolation::Private {
            let dirs: Vec<String> = self
                .tmp
                .dirs
                .iter()
                .map(|d| d.path.display().to_string())
                .collect();
            write!(f, ", {}", dirs.join(", "))?;
        }
        if self.ipc == Isolation::Private {
            f.write_str(", IPC")?;
        }
        Ok(())
    }
}

/// A prepared policy, ready to be installed on a command (a clone shares its sandbox's plan).
#[derive(Clone, Debug)]
pub struct Protection {
    status: ProtectionStatus,
    sandbox: Option<Sandbox>,
    /// The policy the sandbox was compiled from, its rules as named (for
    /// [`Protection::renewed`]).
    policy: Option<Policy>,
    /// Where a nested run keeps its roots and its user locks.
    nested: Option<Nested>,
}

/// Where a run nested in a protected one keeps its roots (inside the outer run's root: the real
/// namespace is read-only to the command) and its user-scope locks (the real namespace's, so
/// they exclude other runs of the user).
#[derive(Clone, Debug)]
struct Nested {
    state_dir: PathBuf,
    /// `None` where the policy keeps no lock directory of the namespace writable (a root
    /// outside a namespace): nested runs then lock in their own namespace, excluding each other
    /// only.
    user_locks: Option<PathBuf>,
}

impl Protection {
    /// Builds the policy for `request` (in the parent).
    ///
    /// Fails with [`Error::Unsupported`] when `request.require` is set and the kernel cannot
    /// fully enforce `request.mode` or (`home`) no home to protect was found, and when
    /// `--net none` is asked and the kernel refuses the network namespace; with
    /// [`Error::Invalid`] when a `protect_paths` entry does not resolve and `request.require` is
    /// set (otherwise its rule, like an `allow_write` one that does not resolve, is reported
    /// absent).
    pub fn prepare(request: &ProtectionRequest) -> Result<Protection> {
        let mut warnings = Vec::new();
        let policy = modes::policy(request, &mut warnings)?;
        let sandbox = match &policy {
            Some(policy) => Some(Sandbox::compile(policy).map_err(|e| required(request, e))?),
            None => None,
        };
        let status = status_of(request, sandbox.as_ref(), warnings);
        if let Isolation::HostFallback { reason } = &status.tmp.isolation {
            if request.require {
                return Err(Error::Unsupported {
                    what: "a private /tmp and /var/tmp (--require-protection)",
                    reason: reason.clone(),
                });
            }
        }
        for rule in &status.policy {
            tracing::info!(
                "protect: {:?} {} ({}; {:?})",
                rule.access,
                rule.path.display(),
                rule.reason,
                rule.enforced_by
            );
        }
        tracing::debug!(%status, "protection prepared");
        let nested = match (request.mode, request.root.parent()) {
            (ProtectMode::Home | ProtectMode::Strict, Some(namespace)) => Some(Nested {
                state_dir: request.root.join(NESTED_NAMESPACE),
                // Where a rule of the policy keeps it writable in the read-only namespace.
                user_locks: policy.as_ref().and_then(|policy| {
                    let locks = namespace.join(crate::namespace::LOCKS_DIR);
                    let canonical = locks.canonicalize().ok()?;
                    let ruled = policy
                        .rules
                        .iter()
                        .any(|rule| rule.path == canonical && rule.access == Access::Write);
                    ruled.then_some(locks)
                }),
            }),
            _ => None,
        };
        Ok(Protection {
            status,
            sandbox,
            policy,
            nested,
        })
    }

    /// What will be enforced.
    pub fn status(&self) -> &ProtectionStatus {
        &self.status
    }

    /// What the command left in its private `/tmp` and `/var/tmp` (read from their backing
    /// directories in the root; call it once the run's processes are gone, before the root is
    /// removed).
    pub fn tmp_left(&self) -> Vec<TmpLeft> {
        scratch::left_in(&self.status.tmp)
    }

    /// Variables the child needs because of its protection: under `home` and `strict`, where
    /// the real namespace is read-only to the command (but for the run's root and its user
    /// lock directory), `CLEANROOM_STATE_DIR` names a namespace inside the run's root, so a
    /// nested `cleanroom run` can create its own root (and nothing else of the user's), and
    /// [`USER_LOCK_DIR_ENV`] the real namespace's lock directory, so its user-scope
    /// `--exclusive` locks exclude other runs; with a private `/tmp`, [`PRIVATE_TMP_ENV`] names
    /// the private directories, so a nested run never takes a machine lock in its own view of
    /// them.
    pub fn child_env(&self) -> Vec<(String, PathBuf)> {
        let state = self.nested.iter().flat_map(|nested| {
            let locks = nested.user_locks.clone();
            std::iter::once((STATE_DIR_VAR.to_string(), nested.state_dir.clone()))
                .chain(locks.map(|locks| (USER_LOCK_DIR_ENV.to_string(), locks)))
        });
        let dirs = self.status.tmp.dirs.iter().map(|d| d.path.clone());
        let private = std::env::join_paths(dirs)
            .ok()
            .filter(|joined| !joined.is_empty())
            .map(|joined| (PRIVATE_TMP_ENV.to_string(), PathBuf::from(joined)));
        state.chain(private).collect()
    }

    /// Installs the policy on `command` (applied in the child before exec, so it covers the
    /// command and everything it starts). Hooks added to `command` earlier run before it.
    pub fn configure(&self, command: &mut Command) {
        if let Some(sandbox) = &self.sandbox {
            sandbox.configure(command);
        }
    }

    /// The function that applies the policy to the calling process, for spawners that do not
    /// use `std::process::Command` (tokio's `pre_exec`): call it in the child, after fork and
    /// before exec, as the last step before exec. It is async-signal-safe (raw system calls
    /// only, no allocation). `None` when there is nothing to apply.
    pub fn child_hook(&self) -> Option<impl Fn() -> std::io::Result<()> + Send + Sync + 'static> {
        self.sandbox.as_ref().and_then(Sandbox::child_hook)
    }

    /// The compiled policy, if anything is enforced (see [`Sandbox::within`] for a command
    /// with a policy of its own that belongs to this one's cleanroom).
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// The mount namespace its commands work in (see [`Sandbox::view`]).
    pub fn view(&self) -> View {
        self.sandbox.as_ref().map_or_else(View::own, Sandbox::view)
    }

    /// Whether the commands it is installed on share one private `/dev/shm` (established).
    pub fn shares_dev_shm(&self) -> bool {
        self.sandbox.as_ref().is_some_and(Sandbox::shares_dev_shm)
    }

    /// This policy with its namespaces set up once and shared by every command it is installed
    /// on (see [`Sandbox::established`], whose errors it returns): for a spawner whose commands
    /// form one cleanroom, such as the exec-server's environment, they share one private
    /// `/dev/shm`, `/tmp` and `/var/tmp`.
    pub fn established(&self) -> Result<Protection> {
        let sandbox = match &self.sandbox {
            Some(sandbox) => Some(sandbox.established()?),
            None => None,
        };
        Ok(self.with_sandbox(sandbox))
    }

    /// This policy, for a spawner that could not establish it ([`Protection::established`]
    /// refused), with a Landlock layer built now from its rules beneath every sandbox installed
    /// within it and every `fs/*` thread restricted to it, its processes making their
    /// namespaces in `user_ns` (see [`Sandbox::layered`], whose errors it returns).
    pub fn layered(&self, user_ns: Option<&UserNamespace>) -> Result<Protection> {
        let sandbox = self
            .sandbox
            .as_ref()
            .map(|s| s.layered(user_ns))
            .transpose()?;
        Ok(self.with_sandbox(sandbox))
    }

    /// This established policy ([`Protection::established`]) compiled afresh, now, for one
    /// more command: a sandbox to install [`Sandbox::within`] this protection's sandbox (or its
    /// [`Protection::for_process`]'s), never alone (it has no namespace). Its rules are the ones
    /// [`Protection::prepare`] built, as named (a toolchain home, a configuration file, the
    /// working directory), resolved now in the established namespaces: a path that did not exist
    /// when the namespaces were set up and exists now, a symlink repointed since, a bind mount of
    /// a protected path made since, are ruled as by a protection prepared now. The established
    /// ruleset, which holds what the paths were when it was built, stays a layer beneath it (the
    /// child allows only what both allow: a name repointed since can narrow, never widen). The
    /// namespaces, and the rules beneath the private directories (their mounts), stay the
    /// established ones, and each private directory stays writable.
    ///
    /// `None` when there is nothing to renew: no kernel policy, or one that is not established
    /// (each command then sets up namespaces of its own from the plan [`Protection::prepare`]
    /// compiled). Errors as [`Sandbox::compile`]'s.
    pub fn renewed(&self) -> Result<Option<Sandbox>> {
        match self.compiled_from() {
            Some((sandbox, policy)) => sandbox.renewed(policy),
            None => Ok(None),
        }
    }

    /// The rules this protection enforces on a command [`Protection::renewed`] now (canonical,
    /// existing; without the places where a mount shows a rule's object again, which a policy
    /// compiled on top of them adds itself): for a policy built on top of them per command or
    /// per call. For a protection that is not established, or off, the rules of its status.
    pub fn rules_now(&self) -> Result<Vec<(PathBuf, Access)>> {
        let renewed = match self.compiled_from() {
            Some((sandbox, policy)) => sandbox.rules_now(policy)?,
            None => None,
        };
        Ok(renewed.unwrap_or_else(|| {
            let rules = self.status.policy.iter().filter(|r| r.is_a_base_rule());
            rules.map(|r| (r.path.clone(), r.access)).collect()
        }))
    }

    /// The kernel sandbox of a protection that is on, with the policy it was compiled from.
    fn compiled_from(&self) -> Option<(&Sandbox, &Policy)> {
        match (&self.sandbox, &self.policy) {
            (Some(sandbox), Some(policy)) if self.status.mode != ProtectMode::Off => {
                Some((sandbox, policy))
            }
            _ => None,
        }
    }

    /// This established policy for a command started in `cwd` (canonical): where `cwd` and its
    /// project root lie beneath the shared private `/tmp` or `/var/tmp`, the command binds the
    /// host's trees there, at the access the policy gives them (a process of the exec-server
    /// works in the host's checkout as a run does in its own). Borrowed when nothing changes.
    pub fn for_process(&self, cwd: &Path) -> Result<std::borrow::Cow<'_, Protection>> {
        let Some(sandbox) = &self.sandbox else {
            return Ok(std::borrow::Cow::Borrowed(self));
        };
        let mut paths = vec![cwd.to_path_buf()];
        let project = project::project_root(cwd, &self.status.read_only);
        if let Some(warning) = project.warning {
            tracing::warn!("{warning}");
        }
        paths.extend(project.root.map(|root| root.path));
        let access = |path: &Path| {
            let rules = self.status.policy.iter();
            let rules = rules.filter(|r| r.enforced_by != EnforcedBy::Absent);
            compile::effective_access(rules.map(|r| (r.path.as_path(), r.access)), path)
        };
        let wanted = paths.into_iter().map(|path| {
            let access = match self.status.enforcement {
                Enforcement::None => Access::Write,
                _ => access(&path),
            };
            (path, access)
        });
        Ok(match sandbox.binding(wanted)? {
            Some(bound) => std::borrow::Cow::Owned(self.with_sandbox(Some(bound))),
            None => std::borrow::Cow::Borrowed(self),
        })
    }

    /// What went wrong, when `err` is the error of a spawn whose child failed while it set this
    /// policy up (see [`Sandbox::explain`]).
    pub fn explain(&self, err: &std::io::Error) -> Option<String> {
        self.sandbox.as_ref()?.explain(err)
    }

    /// Arms a report of the next spawn's best-effort steps ([`Sandbox::arm_report`]); call
    /// [`Protection::settle`] with it once the spawn returned.
    pub fn arm_report(&self) -> Result<Option<SetupReport>> {
        match &self.sandbox {
            Some(sandbox) => sandbox.arm_report(),
            None => Ok(None),
        }
    }

    /// Takes in what the child reported ([`Protection::arm_report`]) and returns the new
    /// warnings (a socket the environment names that was not bound).
    pub fn settle(&mut self, report: SetupReport) -> Vec<String> {
        let Some(sandbox) = &mut self.sandbox else {
            return Vec::new();
        };
        sandbox.settle(report);
        let known = self.status.tmp.notes.len();
        self.status.tmp = sandbox.status().tmp.clone();
        let new: Vec<String> =
            self.status.tmp.notes[known.min(self.status.tmp.notes.len())..].to_vec();
        self.status.warnings.extend(new.iter().cloned());
        new
    }

    /// This policy with `sandbox` (its private directories' status taken from it).
    fn with_sandbox(&self, sandbox: Option<Sandbox>) -> Protection {
        let mut status = self.status.clone();
        if let Some(sandbox) = &sandbox {
            status.tmp = sandbox.status().tmp.clone();
        }
        Protection {
            status,
            sandbox,
            policy: self.policy.clone(),
            nested: self.nested.clone(),
        }
    }
}

/// The variable the CLI reads its state dir (namespace) from.
pub const STATE_DIR_VAR: &str = "CLEANROOM_STATE_DIR";
/// The namespace of nested runs under `home` and `strict`, relative to the run's root.
pub const NESTED_NAMESPACE: &str = "nested";

/// An engine error, reworded when the caller required enforcement.
fn required(request: &ProtectionRequest, error: Error) -> Error {
    match error {
        Error::Unsupported { what, reason } if request.require && what.contains("Landlock") => {
            Error::Unsupported {
                what: "Landlock write protection (--require-protection)",
                reason,
            }
        }
        other => other,
    }
}

/// The run's status from the sandbox's.
fn status_of(
    request: &ProtectionRequest,
    sandbox: Option<&Sandbox>,
    mut warnings: Vec<String>,
) -> ProtectionStatus {
    let mut status = ProtectionStatus {
        mode: request.mode,
        enforcement: Enforcement::None,
        reason: Some("protection is off (--protect off)".into()),
        landlock_abi: None,
        rules: 0,
        homes: request.homes.clone(),
        read_only: Vec::new(),
        writable: Vec::new(),
        policy: Vec::new(),
        no_new_entries_in: Vec::new(),
        dev_shm: Isolation::Host,
        tmp: TmpStatus::with(Isolation::Host),
        ipc: Isolation::Host,
        mount_namespace: None,
        net: request.net,
        net_isolation: None,
        fresh_sysfs: false,
        warnings: Vec::new(),
    };
    if let Some(sandbox) = sandbox {
        let s = sandbox.status();
        if request.mode != ProtectMode::Off {
            status.enforcement = s.enforcement;
            status.reason.clone_from(&s.reason);
            status.landlock_abi = s.landlock_abi;
            status.rules = s.landlock_rules;
            status.no_new_entries_in.clone_from(&s.no_new_entries_in);
            status.policy.clone_from(&s.rules);
            let enforced = |r: &&AppliedRule| r.enforced_by != EnforcedBy::Absent;
            let paths = |access| {
                s.rules
                    .iter()
                    .filter(enforced)
                    .filter(|r| r.access == access && r.path != Path::new("/"))
                    .map(|r| r.path.clone())
                    .collect()
            };
            status.read_only = paths(Access::Read);
            status.writable = paths(Access::Write);
        }
        status.dev_shm = s.dev_shm.clone();
        status.tmp = s.tmp.clone();
        status.ipc = s.ipc.clone();
        status.mount_namespace.clone_from(&s.mount_namespace);
        status.net_isolation.clone_from(&s.net_isolation);
        status.fresh_sysfs = s.fresh_sysfs;
    }
    if request.mode != ProtectMode::Off && status.enforcement != Enforcement::Full {
        warnings.insert(
            0,
            format!(
                "write protection `{}` is {} on this machine: {}; continuing (use \
                 --require-protection to refuse instead)",
                request.mode,
                match status.enforcement {
                    Enforcement::Partial => "only partly enforced",
                    _ => "not enforced",
                },
                status.reason.as_deref().unwrap_or("unknown reason"),
            ),
        );
    }
    warnings.extend(scratch_warning(&status));
    warnings.extend(status.tmp.notes.iter().cloned());
    status.warnings = warnings;
    status
}

/// One warning naming every private part of the run that stays what cleanroom was started with
/// (`/dev/shm`, `/tmp` and `/var/tmp`, the IPC namespace), with the first reason. Inside a run
/// whose `/tmp` is private ([`PRIVATE_TMP_ENV`] set) what is left there goes with that run.
fn scratch_warning(status: &ProtectionStatus) -> Option<String> {
    let fallbacks = [
        ("/dev/shm", status.dev_shm.fallback_reason()),
        ("/tmp and /var/tmp", status.tmp.isolation.fallback_reason()),
        ("the IPC namespace", status.ipc.fallback_reason()),
    ];
    let shared: Vec<(&str, &str)> = fallbacks
        .iter()
        .filter_map(|(what, reason)| Some((*what, (*reason)?)))
        .collect();
    let (_, reason) = shared.first()?;
    let names: Vec<&str> = shared.iter().map(|(what, _)| *what).collect();
    let fate = match std::env::var_os(PRIVATE_TMP_ENV) {
        Some(_) => "is removed with the outer run, not with this one",
        None => "is not removed",
    };
    Some(format!(
        "the run shares {} cleanroom was started with ({reason}); what the command leaves there \
         {fate}",
        names.join(", ")
    ))
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
