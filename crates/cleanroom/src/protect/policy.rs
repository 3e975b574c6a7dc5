//! The policy engine: filesystem rules of (path, access), the most specific path winning, and a
//! network mode, compiled to what the kernel enforces for one child process. `--protect home`,
//! `--protect strict` and the exec-server's per-process sandbox policies are all built on it.
//!
//! ```no_run
//! use cleanroom::protect::{Access, Policy, Sandbox};
//!
//! let mut policy = Policy::new();
//! policy
//!     .rule("/", Access::Read, "everything readable")
//!     .rule("/work/project", Access::Write, "the workspace")
//!     .rule("/work/project/.git", Access::Read, "git metadata stays read-only");
//! let sandbox = Sandbox::compile(&policy)?;
//! let mut command = std::process::Command::new("make");
//! command.current_dir("/work/project");
//! sandbox.configure(&mut command);
//! println!("{:?}", sandbox.status().enforcement);
//! # Ok::<(), cleanroom::Error>(())
//! ```
//!
//! # Semantics
//! - A path gets the access of the rule with the longest path that is it or one of its
//!   ancestors; a path under no rule gets [`Access::None`]. Two rules on the same path (after
//!   canonicalization) merge to the weaker access.
//! - `read` is reading files, listing directories and executing; `write` is everything.
//! - Rule paths are canonicalized (Landlock binds inodes, mounts bind paths), so a rule holds
//!   whatever spelling the child uses. A rule whose path does not exist is skipped and reported
//!   as [`EnforcedBy::Absent`]: nothing can be mounted over it, and its parent's rule decides.
//! - The device files of [`super::DEVICE_FILES`] are always writable (read, write, ioctl), so
//!   terminals keep working; a rule naming one of them exactly replaces that default.
//!
//! # Compilation
//! Landlock (an allowlist) expresses every rule that is at least as wide as the rule around it.
//! A rule *narrower* than the one around it (a read-only `.git` inside a writable project, a
//! read-only home inside a writable `/`, a `none` inside a readable tree) is enforced as
//! [`Policy::narrowing`] says:
//! - [`Narrowing::Mount`]: in a private mount namespace, a read-only bind mount of the path
//!   (`read`), or an empty read-only tmpfs / a bind of `/dev/null` over it (`none`); a wider rule
//!   inside a read-only one gets a copy of the original mount put back over it. Landlock still
//!   grants the wider rights above, so the mounts carry the narrowing; the child keeps nothing
//!   that could undo them: mount operations and `ptrace` (hence `/proc/<pid>/root` of outside
//!   processes) are refused by Landlock, and `CAP_SYS_ADMIN` (`mount_setattr`, `open_tree`) is
//!   dropped from the bounding set. A descriptor opened *outside* the mount namespace (inherited,
//!   or received over a unix socket) still reaches the original mount: paths are narrowed, not
//!   inodes.
//! - [`Narrowing::Cover`]: Landlock alone. The wide rule is not granted on its own directory;
//!   its entries are granted one by one, descending into those that contain the narrow rule. Exact
//!   on inodes and needs no namespace, but no new entry can be created directly in the
//!   directories descended (reported in [`SandboxStatus::no_new_entries_in`]), and entries added
//!   after compilation are not granted.
//! - [`Narrowing::MountElseCover`]: mounts where a private mount namespace can be made here,
//!   the cover otherwise (inside another Landlock domain mounts are refused).
//!
//! Namespaces and mounts are set up in the child before Landlock is applied. What was applied is
//! in [`Sandbox::status`]. A policy that no available mechanism can enforce (no Landlock, a
//! mount strategy without a mount namespace, a rule wider than a `none` hidden by a mount) is an
//! [`Error::Unsupported`] naming why, unless [`Policy::best_effort`] allows running with less
//! (then the status says so). Never less protected than asked without saying it.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;

use serde::Serialize;

use super::compile::{self, CanonicalRule, MountKind};
use super::linux::child::{ChildPlan, LandlockPlan, MountStep, Steps};
use super::linux::Rights;
pub use super::rule::{Access, AppliedRule, EnforcedBy, Rule};
use super::{linux, Enforcement};
use crate::{Error, Result};

/// The network a sandboxed process sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The host's network.
    Host,
    /// A new network namespace whose only interface, `lo`, is up.
    Loopback,
}

/// How a rule narrower than the rule around it is enforced (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Narrowing {
    /// Mounts in a private mount namespace; an error where none can be made.
    Mount,
    /// Landlock alone, by granting the wide rule entry by entry.
    Cover,
    /// Mounts where possible, the cover otherwise.
    MountElseCover,
}

/// A filesystem and network policy for one child process.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The filesystem rules; a path under none of them gets [`Access::None`].
    pub rules: Vec<Rule>,
    /// The network.
    pub network: Network,
    /// How narrower rules inside wider ones are enforced.
    pub narrowing: Narrowing,
    /// Give the child a fresh tmpfs on `/dev/shm`, writable whatever the rules say, that dies
    /// with the child's last process. Best effort: where no mount namespace can be made, the
    /// host's `/dev/shm` stays, governed by the rules, and the status says why.
    pub private_dev_shm: bool,
    /// Run with what the kernel can enforce (reported in the status) instead of failing when
    /// Landlock is missing or too old to enforce the rules fully.
    pub best_effort: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy::new()
    }
}

impl Policy {
    /// A policy with no rules (nothing accessible), the host network, [`Narrowing::Mount`], the
    /// host's `/dev/shm`, and full enforcement required.
    pub fn new() -> Policy {
        Policy {
            rules: Vec::new(),
            network: Network::Host,
            narrowing: Narrowing::Mount,
            private_dev_shm: false,
            best_effort: false,
        }
    }

    /// Adds a rule.
    pub fn rule(
        &mut self,
        path: impl Into<PathBuf>,
        access: Access,
        reason: impl Into<String>,
    ) -> &mut Policy {
        self.rules.push(Rule {
            path: path.into(),
            access,
            reason: reason.into(),
        });
        self
    }

    /// The access the rules give `path` (compared as spelled: pass canonical paths). For checks
    /// a process makes itself, such as the exec-server's `fs/*` calls.
    pub fn access(&self, path: &Path) -> Access {
        compile::effective_access(
            self.rules.iter().map(|r| (r.path.as_path(), r.access)),
            path,
        )
    }
}

/// Whose `/dev/shm` the child sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DevShm {
    /// The host's (not asked for).
    Host,
    /// A fresh tmpfs that dies with the child's last process.
    Private,
    /// The host's, although a private one was asked for.
    HostFallback {
        /// Why no private one could be made.
        reason: String,
    },
}

/// What a compiled sandbox applies.
#[derive(Clone, Debug, Serialize)]
pub struct SandboxStatus {
    /// `full`, `partial` or `none`.
    pub enforcement: Enforcement,
    /// Why enforcement is not full, if it is not.
    pub reason: Option<String>,
    /// The kernel's Landlock ABI, if it has Landlock.
    pub landlock_abi: Option<u32>,
    /// Landlock rules in the ruleset (0 when none is installed).
    pub landlock_rules: usize,
    /// Whether reads are restricted too (some path is `none`), not only writes.
    pub handles_reads: bool,
    /// Every rule, canonical, with how it is enforced.
    pub rules: Vec<AppliedRule>,
    /// Directories that no new entry can be created in directly (a limit of the cover).
    pub no_new_entries_in: Vec<PathBuf>,
    /// The mount namespace, if the child gets one (`"mount namespace"`, or `"user and mount
    /// namespace"` for an ordinary user).
    pub mount_namespace: Option<String>,
    /// Whose `/dev/shm` the child sees.
    pub dev_shm: DevShm,
    /// The network.
    pub network: Network,
    /// How the network is isolated (`"network namespace"` or `"user and network namespace"`).
    pub net_isolation: Option<String>,
    /// Whether `/sys` was replaced by a fresh sysfs of the child's network namespace (so
    /// `/sys/class/net` lists only its own interfaces).
    pub fresh_sysfs: bool,
    /// Capabilities removed from the child's bounding set.
    pub dropped_capabilities: Vec<String>,
}

/// A compiled policy, ready to be applied to any number of commands.
#[derive(Debug)]
pub struct Sandbox {
    status: SandboxStatus,
    /// Shared with every hook, so the descriptors it holds stay open as long as one may run.
    plan: Steps,
}

impl Sandbox {
    /// Compiles `policy` for this kernel (in the parent: paths are resolved and opened here;
    /// the child only makes system calls: it enters its namespaces, mounts, and builds and
    /// applies its Landlock ruleset from the descriptors opened here).
    ///
    /// Errors: [`Error::Unsupported`] when the policy cannot be enforced as asked (see the
    /// module docs), including `Network::Loopback` where no network namespace can be made;
    /// [`Error::Io`] when a rule's path cannot be opened.
    pub fn compile(policy: &Policy) -> Result<Sandbox> {
        let mut rules = compile::canonical_rules(&policy.rules)?;
        let isolate_net = policy.network == Network::Loopback;
        let mount_ns = mount_namespace(policy, compile::has_narrowing(&rules))?;
        let private_shm = policy.private_dev_shm && mount_ns.is_ok();
        let dev_shm = Path::new("/dev/shm");
        let mut in_dev_shm = match private_shm {
            true => compile::split_beneath(&mut rules, dev_shm),
            false => Vec::new(),
        };
        let shared = compile::add_shared_entries(&mut in_dev_shm, &rules, dev_shm);
        let use_mounts = compile::has_narrowing(&rules)
            && match (policy.narrowing, &mount_ns) {
                (Narrowing::Cover, _) | (Narrowing::MountElseCover, Err(_)) => false,
                (_, Ok(())) => true,
                (Narrowing::Mount, Err(reason)) => {
                    return Err(Error::Unsupported {
                        what: "a private mount namespace for read-only or hidden paths",
                        reason: reason.clone(),
                    })
                }
            };
        compile::add_default_rules(&mut rules, private_shm)?;

        let mut builder = Builder::new(policy.network, mount_ns.is_ok());
        match super::landlock_support() {
            Ok(abi) => builder.landlock(policy, abi, rules, use_mounts)?,
            Err(reason) => builder.without_landlock(policy, reason, rules)?,
        }
        if policy.private_dev_shm {
            builder.dev_shm(mount_ns.as_ref().err(), in_dev_shm, &shared)?;
        }
        if isolate_net && mount_ns.is_ok() {
            builder.fresh_sysfs()?;
        }
        builder.finish()
    }

    /// What the sandbox applies.
    pub fn status(&self) -> &SandboxStatus {
        &self.status
    }

    /// Installs the sandbox on `command`; it is applied in the child before exec, so it covers
    /// the command and everything it starts. Register it after every other `pre_exec` hook.
    pub fn configure(&self, command: &mut Command) {
        if let Some(hook) = self.child_hook() {
            // SAFETY: the hook runs between fork and exec and only makes raw, async-signal-safe
            // system calls on data prepared before the fork (see `linux::child`).
            unsafe {
                command.pre_exec(hook);
            }
        }
    }

    /// The function that applies the sandbox to the calling process, for spawners that do not
    /// use `std::process::Command` (tokio's `pre_exec`): call it in the child, after fork and
    /// before exec, as the last step before exec. It is async-signal-safe (raw system calls
    /// only, no allocation) and keeps what it needs open for as long as it lives. `None` when
    /// there is nothing to apply.
    pub fn child_hook(&self) -> Option<impl Fn() -> io::Result<()> + Send + Sync + 'static> {
        if self.plan.is_empty() {
            return None;
        }
        let plan = self.plan.clone();
        Some(move || plan.apply())
    }

    /// This sandbox with its namespaces and mounts set up once, now, and held by the returned
    /// sandbox, whose hook only joins them and restricts itself with a ruleset built here: a
    /// start costs a few system calls instead of namespaces of its own, whose teardown at exit
    /// waits for an RCU grace period. For a long-lived spawner whose processes form one
    /// cleanroom (the exec-server's environment): they all share the mounts, a private
    /// `/dev/shm` included, which live until the returned sandbox and every process that
    /// joined them are gone. A process running as uid 0 could change a shared namespace for
    /// every other, so each drops `CAP_SYS_ADMIN` (and `CAP_NET_ADMIN` with a shared network
    /// namespace) from its bounding set (in the status). The commands must run as this
    /// process's user: a child that changed its identity before the hook has no right to enter
    /// namespaces made by another. Call it before anything in the process reaps children with
    /// `waitpid(-1)`: a holder process is forked and reaped here.
    ///
    /// Errors: [`Error::Unsupported`] for a policy whose narrowings are read-only or hidden
    /// mounts (made once, a mount would stay on whatever the path was then, not on what the
    /// host puts there later); [`Error::Sys`] when the namespaces cannot be set up or opened.
    pub fn established(&self) -> Result<Sandbox> {
        let plan = match &self.plan {
            Steps::Own(plan) if plan.protective_mounts => {
                return Err(Error::Unsupported {
                    what: "an established sandbox with paths narrowed by mounts",
                    reason: "mounts made once would not follow a path the host replaces later"
                        .into(),
                })
            }
            Steps::Own(plan) => {
                Steps::Join(Arc::new(linux::shared::establish(plan).map_err(|e| {
                    Error::sys("set up the sandbox's shared namespaces and ruleset", e)
                })?))
            }
            Steps::Join(_) | Steps::Within { .. } => self.plan.clone(),
        };
        Ok(self.with_plan(plan))
    }

    /// This sandbox inside `outer`, an established sandbox ([`Sandbox::established`]): its
    /// hook joins `outer`'s namespaces, then sets up this sandbox's own within them and
    /// restricts itself with this sandbox's rules alone (intersect the policies first when
    /// `outer`'s must hold too). The process belongs to `outer`'s cleanroom: it sees its
    /// private `/dev/shm`, not the host's. Anything else for `outer` returns this sandbox
    /// unchanged.
    pub fn within(&self, outer: &Sandbox) -> Sandbox {
        match (&self.plan, &outer.plan) {
            (Steps::Own(inner), Steps::Join(outer)) => self.with_plan(Steps::Within {
                outer: Arc::clone(outer),
                inner: Arc::clone(inner),
            }),
            _ => self.with_plan(self.plan.clone()),
        }
    }

    /// Whether this sandbox is established with a private `/dev/shm` its commands share.
    pub fn shares_dev_shm(&self) -> bool {
        matches!(&self.plan, Steps::Join(plan) if plan.joins(libc::CLONE_NEWNS))
            && self.status.dev_shm == DevShm::Private
    }

    /// This sandbox's status with `plan`.
    fn with_plan(&self, plan: Steps) -> Sandbox {
        Sandbox::new(self.status.clone(), plan)
    }

    /// A sandbox of `status` and `plan`; the status reports the capabilities the plan drops
    /// (the one place they are derived).
    fn new(mut status: SandboxStatus, plan: Steps) -> Sandbox {
        let drops = plan.drops();
        status.dropped_capabilities = [
            (drops.net_admin, "CAP_NET_ADMIN"),
            (drops.sys_admin, "CAP_SYS_ADMIN"),
        ]
        .into_iter()
        .filter(|(dropped, _)| *dropped)
        .map(|(_, name)| name.to_string())
        .collect();
        Sandbox { status, plan }
    }
}

/// Assembles the status and the child plan while [`Sandbox::compile`] decides.
struct Builder {
    status: SandboxStatus,
    steps: Vec<MountStep>,
    keeps: Vec<MountStep>,
    slots: usize,
    mount_ns: bool,
    net_ns: bool,
    /// Whether a mount carries protection (read-only or hidden), so `CAP_SYS_ADMIN` goes.
    protective_mounts: bool,
    /// Landlock: the masks and the grants, opened; `None` when nothing is restricted.
    landlock: Option<(Rights, Vec<OpenGrant>)>,
}

/// A Landlock grant whose path is open.
struct OpenGrant {
    path: PathBuf,
    grant: linux::Grant,
    access: Access,
}

impl Builder {
    fn new(network: Network, mount_ns_available: bool) -> Builder {
        let ordinary = !rustix::process::geteuid().is_root();
        let how = |what: &str| {
            if ordinary {
                format!("user and {what} namespace")
            } else {
                format!("{what} namespace")
            }
        };
        let isolate_net = network == Network::Loopback;
        Builder {
            status: SandboxStatus {
                enforcement: Enforcement::Full,
                reason: None,
                landlock_abi: None,
                landlock_rules: 0,
                handles_reads: false,
                rules: Vec::new(),
                no_new_entries_in: Vec::new(),
                mount_namespace: mount_ns_available.then(|| how("mount")),
                dev_shm: DevShm::Host,
                network,
                net_isolation: isolate_net.then(|| how("network")),
                fresh_sysfs: false,
                dropped_capabilities: Vec::new(),
            },
            steps: Vec::new(),
            keeps: Vec::new(),
            slots: 0,
            mount_ns: false,
            net_ns: isolate_net,
            protective_mounts: false,
            landlock: None,
        }
    }

    /// No Landlock: an error unless the policy allows best effort; then no rule is enforced.
    fn without_landlock(
        &mut self,
        policy: &Policy,
        reason: String,
        rules: Vec<CanonicalRule>,
    ) -> Result<()> {
        if !policy.best_effort {
            return Err(Error::Unsupported {
                what: "Landlock filesystem rules",
                reason,
            });
        }
        self.status.enforcement = Enforcement::None;
        self.status.reason = Some(reason);
        self.status.rules = rules
            .into_iter()
            .map(|r| r.applied(EnforcedBy::NotEnforced))
            .collect();
        Ok(())
    }

    fn landlock(
        &mut self,
        policy: &Policy,
        abi: u32,
        rules: Vec<CanonicalRule>,
        use_mounts: bool,
    ) -> Result<()> {
        let (enforcement, reason) = super::enforcement_for_abi(abi);
        if enforcement != Enforcement::Full {
            if !policy.best_effort {
                return Err(Error::Unsupported {
                    what: "full Landlock enforcement",
                    reason: reason.unwrap_or_default(),
                });
            }
            self.status.enforcement = enforcement;
            self.status.reason = reason;
        }
        if !compile::restricts_anything(&rules) {
            self.status.rules = rules
                .into_iter()
                .map(|r| r.applied(EnforcedBy::Landlock))
                .collect();
            return Ok(());
        }
        let compiled = compile::compile(&rules, use_mounts)?;
        let mut grants = Vec::with_capacity(compiled.grants.len());
        for (path, access) in &compiled.grants {
            if let Some(grant) = linux::open_for_rule(path)? {
                grants.push(OpenGrant {
                    path: path.clone(),
                    grant,
                    access: *access,
                });
            }
        }
        let handles_reads = compile::handles_reads(&rules);
        self.status.landlock_abi = Some(abi);
        self.status.landlock_rules = grants.len();
        self.landlock = Some((Rights::new(abi, handles_reads), grants));
        self.status.handles_reads = handles_reads;
        self.status
            .no_new_entries_in
            .clone_from(&compiled.no_new_entries_in);
        let steps = self.mount_steps(&compiled)?;
        if !steps.is_empty() {
            self.mount_ns = true;
        }
        self.steps.extend(steps);
        self.status.rules = rules
            .into_iter()
            .map(|r| {
                let by = compiled.enforced_by(&r);
                r.applied(by)
            })
            .collect();
        Ok(())
    }

    /// Takes a copy of the tree at `path` before any step changes it; returns its slot.
    fn keep(&mut self, path: &Path) -> Result<usize> {
        let slot = self.slots;
        self.slots += 1;
        self.keeps.push(MountStep::Keep {
            path: c_path(path)?,
            slot,
        });
        Ok(slot)
    }

    /// A private `/dev/shm` (when `unavailable` is `None`). The entries of the host's
    /// `/dev/shm` that hold a path of the policy (`shared`: a run's root or working directory may
    /// live there) are put back into it, on directories and files created as their mount points,
    /// and the rules beneath (`beneath`, with those entries at the access the rest of the policy
    /// gives them) are enforced there by mounts.
    fn dev_shm(
        &mut self,
        unavailable: Option<&String>,
        beneath: Vec<CanonicalRule>,
        shared: &[(PathBuf, bool)],
    ) -> Result<()> {
        if let Some(reason) = unavailable {
            self.status.dev_shm = DevShm::HostFallback {
                reason: reason.clone(),
            };
            return Ok(());
        }
        let mut steps = vec![MountStep::Tmpfs {
            path: c_path(Path::new("/dev/shm"))?,
        }];
        for (entry, dir) in shared {
            let point = c_path(entry)?;
            steps.push(match dir {
                true => MountStep::MakeDir {
                    path: point.clone(),
                },
                false => MountStep::MakeFile {
                    path: point.clone(),
                },
            });
            let slot = self.keep(entry)?;
            steps.push(MountStep::Expose { path: point, slot });
        }
        let compiled = compile::compile_private(&beneath, Path::new("/dev/shm"))?;
        steps.extend(self.mount_steps(&compiled)?);
        self.status.rules.extend(beneath.into_iter().map(|r| {
            let by = compiled.enforced_by(&r);
            r.applied(by)
        }));
        self.status.rules.sort_by(|a, b| a.path.cmp(&b.path));
        self.mount_ns = true;
        self.status.dev_shm = DevShm::Private;
        // First, so the policy's own mounts still apply inside what was put back.
        self.steps.splice(0..0, steps);
        Ok(())
    }

    /// The child's steps for `compiled`'s mounts; marks the mounts protective when they
    /// narrow anything.
    fn mount_steps(&mut self, compiled: &compile::Compiled) -> Result<Vec<MountStep>> {
        let mut steps = Vec::with_capacity(compiled.mounts.len());
        for mount in &compiled.mounts {
            let path = c_path(&mount.path)?;
            steps.push(match mount.kind {
                MountKind::ReadOnly => MountStep::ReadOnly { path },
                MountKind::HideDir => MountStep::HideDir { path },
                MountKind::HideFile => MountStep::HideFile { path },
                MountKind::Expose => {
                    let slot = self.keep(&mount.path)?;
                    MountStep::Expose { path, slot }
                }
            });
            self.protective_mounts |= mount.kind != MountKind::Expose;
        }
        Ok(steps)
    }

    /// `/sys` replaced by a sysfs of the new network namespace, its submounts moved back.
    fn fresh_sysfs(&mut self) -> Result<()> {
        let mut submounts = Vec::new();
        for path in compile::top_submounts_of(Path::new("/sys"))? {
            let slot = self.keep(&path)?;
            submounts.push((c_path(&path)?, slot));
        }
        self.mount_ns = true;
        self.status.fresh_sysfs = true;
        self.steps.insert(0, MountStep::FreshSysfs { submounts });
        Ok(())
    }

    fn finish(mut self) -> Result<Sandbox> {
        let mut steps = std::mem::take(&mut self.keeps);
        steps.append(&mut self.steps);
        if !self.mount_ns {
            self.status.mount_namespace = None;
        }
        let fresh: Vec<&Path> = [
            (self.status.dev_shm == DevShm::Private).then_some(Path::new("/dev/shm")),
            self.status.fresh_sysfs.then_some(Path::new("/sys")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let landlock = match self.landlock.take() {
            Some((rights, grants)) => {
                let mut plan = LandlockPlan {
                    handled: rights.handled,
                    rules: Vec::new(),
                    late_rules: Vec::new(),
                };
                for g in grants {
                    let bits = rights.of(g.access, g.grant.dir);
                    if fresh.contains(&g.path.as_path()) {
                        // A fresh mount's root is a new inode: the child opens it after mounting.
                        plan.late_rules.push((c_path(&g.path)?, bits));
                    } else {
                        plan.rules.push((g.grant.fd, bits));
                    }
                }
                Some(plan)
            }
            None => None,
        };
        let plan = ChildPlan {
            mount_ns: self.mount_ns,
            net_ns: self.net_ns,
            steps,
            slots: (0..self.slots).map(|_| AtomicI32::new(-1)).collect(),
            protective_mounts: self.protective_mounts,
            landlock,
        };
        tracing::debug!(?plan, "sandbox compiled");
        Ok(Sandbox::new(self.status, Steps::Own(Arc::new(plan))))
    }
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("path {} contains a NUL byte", path.display())))
}

/// Whether the child can have a private mount namespace (`Err`: why not, or that it is not
/// needed). A loopback network that cannot be made is an error.
fn mount_namespace(policy: &Policy, narrowing: bool) -> Result<std::result::Result<(), String>> {
    let isolate_net = policy.network == Network::Loopback;
    let wants = policy.private_dev_shm
        || isolate_net
        || (narrowing && policy.narrowing != Narrowing::Cover);
    if !wants {
        return Ok(Err("not needed".into()));
    }
    let mount_ns = namespaces_available(true, isolate_net);
    if isolate_net && mount_ns.is_err() {
        namespaces_available(false, true).map_err(|reason| Error::Unsupported {
            what: "network isolation (a network namespace with only loopback)",
            reason,
        })?;
    }
    Ok(mount_ns)
}

/// Test-only switch: set to `1`, this process behaves as if no private mount namespace could be
/// made (as inside another Landlock domain). It can only weaken what is asked of the kernel.
pub const TEST_NO_MOUNT_NS_ENV: &str = "CLEANROOM_TEST_NO_MOUNT_NS";

/// Whether the child can enter the namespaces a plan needs (`mount`: a mount namespace whose
/// `/` can be made a slave and that takes a tmpfs; `net`: a network namespace with loopback
/// up), probed once per process in a forked child; `Err` says why not.
fn namespaces_available(mount: bool, net: bool) -> std::result::Result<(), String> {
    use std::sync::OnceLock;
    static PROBES: [OnceLock<std::result::Result<(), i32>>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    if mount && std::env::var_os(TEST_NO_MOUNT_NS_ENV).is_some_and(|v| v == "1") {
        return Err(format!(
            "private mount namespaces are treated as unavailable because {TEST_NO_MOUNT_NS_ENV}=1 \
             (test-only switch)"
        ));
    }
    let probe = PROBES[usize::from(mount) * 2 + usize::from(net)].get_or_init(|| {
        if mount && !net && rustix::process::geteuid().is_root() {
            // Root needs no user namespace: asking the kernel in this process is enough.
            return linux::may_mount_here();
        }
        linux::probe_in_child(|| linux::child::probe_namespaces(mount, net))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    });
    probe.map_err(|errno| {
        let err = io::Error::from_raw_os_error(errno);
        format!(
            "the kernel refused {}: {err}{}",
            match (mount, net) {
                (true, true) => "a new mount and network namespace",
                (true, false) => "a new mount namespace with a private tmpfs",
                _ => "a new network namespace with loopback up",
            },
            if errno == libc::EPERM {
                " (inside another Landlock domain mounts are refused; user namespaces may be \
                 disabled: see `cleanroom doctor`)"
            } else {
                ""
            }
        )
    })
}
