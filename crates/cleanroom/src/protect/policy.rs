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
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde::Serialize;

use super::aliases::{self, MountTable};
use super::binds::HostPaths;
use super::compile::{self, CanonicalRule, MountKind};
use super::linux::child::{ChildPlan, EarlyRule, Identity, LandlockPlan, MountStep, Steps};
use super::linux::report::{self, Outcome};
use super::linux::Rights;
pub use super::rule::{Access, AppliedRule, EnforcedBy, Rule};
use super::scratch::{self, DirPlan};
pub use super::scratch::{Isolation, PrivateDir, PrivateTmp, TmpMechanism, TmpStatus};
use super::view::View;
use super::{linux, Enforcement};
use crate::error::{Error, Result};
use crate::sys::linux::fd::{FdSlot, Lending, LentFd};

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
    /// Give the child its own `/tmp` and `/var/tmp`, writable whatever the rules say, backed by
    /// directories made in [`PrivateTmp::backing`] (see [`PrivateTmp`]); every command the
    /// sandbox is installed on shares them. Paths of the rules beneath them stay the host's.
    /// Best effort as `private_dev_shm`.
    pub private_tmp: Option<PrivateTmp>,
    /// Give the child its own IPC namespace (System V objects, POSIX message queues, with the
    /// mqueue filesystem on `/dev/mqueue` where the host has that directory), gone with its last
    /// process. Best effort as `private_dev_shm`.
    pub private_ipc: bool,
    /// Run with what the kernel can enforce (reported in the status) instead of failing when
    /// Landlock is missing or too old to enforce the rules fully.
    pub best_effort: bool,
    /// Where the rules' paths are looked up when the policy is compiled (canonicalized, listed
    /// for the cover, opened for Landlock): the caller's own mount namespace by default, or an
    /// established sandbox's ([`Sandbox::view`]) for a thread or a process that works in it.
    pub view: View,
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
            private_tmp: None,
            private_ipc: false,
            best_effort: false,
            view: View::own(),
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
    pub dev_shm: Isolation,
    /// Whose `/tmp` and `/var/tmp` the child sees, and what of the host's stays inside them.
    pub tmp: TmpStatus,
    /// Whose IPC namespace the child is in.
    pub ipc: Isolation,
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

/// The user namespace in which the children of a long-lived spawner make their namespaces, made
/// once at its start ([`UserNamespace::for_children`]) and attached to every sandbox they are
/// spawned with ([`Sandbox::in_user_namespace`], [`Sandbox::layered`]). A clone shares it; the
/// namespace lives while one does (and while a process is in it).
///
/// Why: a spawner that makes itself non-dumpable afterwards (the exec-server) has non-dumpable
/// children, and the kernel gives the `/proc/<pid>` files of a non-dumpable process to root, so
/// such a child of an ordinary user cannot write its own new user namespace's `uid_map`
/// (EACCES); nor may it make itself dumpable for the write, which would let a process of the
/// same user read or trace the copy of the spawner's memory it holds (or, for a child sharing
/// that memory, `CLONE_VM`, the spawner itself). Such a child joins this one instead, with
/// `no_new_privs` set first, makes its namespaces there, and gives up every capability it holds
/// there as its last step (a file-capability binary it executes must get none there, where they
/// reach the namespaces of the spawner's other children).
#[derive(Clone, Debug)]
pub struct UserNamespace(Arc<OwnedFd>);

impl UserNamespace {
    /// Makes the user namespace of this process's children now, with this process's uid and
    /// gid mapped to themselves (as a child making one of its own would); `None` for root,
    /// whose children need none. A forked holder makes it and exits once this process opened it
    /// (see `linux::shared::user_namespace`): call it while this process is still dumpable,
    /// before anything in it reaps children with `waitpid(-1)`. From then on this process's
    /// probes of which namespaces a sandbox can have ([`Sandbox::compile`]'s, cached) make
    /// theirs in the first one made, as its sandboxes' children will: call it before the first
    /// compile that needs namespaces.
    ///
    /// Errors: [`Error::Sys`] when the holder cannot make it or this process cannot open it.
    pub fn for_children() -> Result<Option<UserNamespace>> {
        let made = linux::shared::user_namespace().map_err(|e| {
            Error::sys(
                "make the user namespace the processes make their namespaces in",
                e,
            )
        })?;
        let made = made.map(|fd| UserNamespace(Arc::new(fd)));
        if let Some(made) = &made {
            let _ = PROBES_USER_NS.set(made.clone());
        }
        Ok(made)
    }
}

/// The user namespace this process's namespace probes make theirs in (the first
/// [`UserNamespace::for_children`] made).
static PROBES_USER_NS: std::sync::OnceLock<UserNamespace> = std::sync::OnceLock::new();

/// A compiled policy, ready to be applied to any number of commands (a clone shares its plan).
#[derive(Clone, Debug)]
pub struct Sandbox {
    status: SandboxStatus,
    /// Shared with every hook, so the descriptors it holds stay open as long as one may run.
    plan: Steps,
    /// The host paths beneath the private directories that a child joining shared namespaces
    /// binds for itself (see [`super::binds`]): the users' paths of the policy there.
    host_paths: HostPaths,
    /// The ruleset built at the start of a sandbox that could not be established
    /// ([`Sandbox::layered`]), a layer beneath every thread
    /// [`Sandbox::restrict_thread_to_established`] to it; while there is one, every sandbox
    /// [`Sandbox::within`] this one has its plan's rules as a layer too.
    start_layer: Option<Arc<OwnedFd>>,
    /// The user namespace of the spawner's children ([`Sandbox::in_user_namespace`]): its
    /// children, and those of every sandbox [`Sandbox::within`] it, that set up namespaces of
    /// their own (and joined no user namespace with a holder's) make them inside it.
    user_ns: Option<UserNamespace>,
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
        let view = &policy.view;
        let mut rules = compile::canonical_rules(&policy.rules, view)?;
        // One reading of the mount table serves the whole compile.
        let mounts = MountTable::read();
        aliases::add_aliases(&mut rules, mounts.as_ref(), view, &[]);
        let isolate_net = policy.network == Network::Loopback;
        let mount_ns = mount_namespace(policy, compile::has_narrowing(&rules))?;
        let private_shm = policy.private_dev_shm && mount_ns.is_ok();
        let tmp = TmpDecision::make(policy, &mount_ns, mounts.as_ref(), &mut rules);
        let dev_mqueue = policy.private_ipc && mount_ns.is_ok() && is_real_dir(Path::new(MQUEUE));
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
        let mut fresh: Vec<(&Path, &str)> = Vec::new();
        if private_shm {
            fresh.push((dev_shm, "private /dev/shm (a tmpfs of this run)"));
        }
        fresh.extend(tmp.dirs().map(|dir| (dir, "private directory of this run")));
        if dev_mqueue {
            fresh.push((
                Path::new(MQUEUE),
                "the mqueue filesystem of the run's IPC namespace",
            ));
        }
        compile::add_default_rules(&mut rules, &fresh, view)?;

        let mut builder = Builder::new(policy.network, mount_ns.is_ok());
        let fresh: Vec<&Path> = fresh.iter().map(|(path, _)| *path).collect();
        match super::landlock_support() {
            Ok(abi) => builder.landlock(policy, abi, rules, use_mounts, &fresh)?,
            Err(reason) => builder.without_landlock(policy, reason, rules)?,
        }
        if policy.private_dev_shm {
            builder.dev_shm(mount_ns.as_ref().err(), in_dev_shm, &shared)?;
        }
        if let Some(request) = &policy.private_tmp {
            builder.private_tmp(request, tmp)?;
        }
        if policy.private_ipc {
            builder.ipc(mount_ns.as_ref().err(), dev_mqueue)?;
        }
        if isolate_net && mount_ns.is_ok() {
            builder.fresh_sysfs(mounts.as_ref())?;
        }
        builder.finish()
    }

    /// `policy`, the policy this established sandbox ([`Sandbox::established`], perhaps
    /// [`Sandbox::binding`] paths) was compiled from, compiled afresh now for one more child:
    /// its rules canonicalized, its aliases found, its cover listed and its Landlock grants
    /// opened now, in the established namespaces ([`Sandbox::view`]), so a path created,
    /// repointed or mounted since the namespaces were set up is ruled as a sandbox compiled now
    /// would rule it. The sandbox returned is to be installed inside this one
    /// ([`Sandbox::within`] it, or its [`Sandbox::binding`]): the child joins the established
    /// namespaces (their private `/dev/shm`, `/tmp`, `/var/tmp` and IPC namespace, and the
    /// mounts made there once) and restricts itself with the fresh rules; the rules beneath the
    /// private directories stay the established mounts', and each private directory is
    /// writable, as in the established sandbox (alone, it has no namespace: its private
    /// directories' rules would name the host's). `None` for a sandbox that is not established
    /// (its children set everything up from the plan compiled once).
    ///
    /// Errors: as [`Sandbox::compile`]'s; [`Error::Unsupported`] when the rules now narrow a
    /// path that only a mount could narrow (a policy not compiled with [`Narrowing::Cover`]).
    pub(super) fn renewed(&self, policy: &Policy) -> Result<Option<Sandbox>> {
        let Some(dirs) = self.established_dirs() else {
            return Ok(None);
        };
        let view = self.view();
        let rules = rules_inside(policy, &dirs, &view, true)?;
        let fresh: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        if compile::has_narrowing(&rules) && policy.narrowing != Narrowing::Cover {
            return Err(Error::Unsupported {
                what: "a renewed policy that narrows paths by mounts",
                reason: "the established namespaces' children narrow host paths with Landlock \
                         alone"
                    .into(),
            });
        }
        let mut inner = policy.clone();
        inner.view = view;
        inner.network = Network::Host;
        inner.private_dev_shm = false;
        inner.private_tmp = None;
        inner.private_ipc = false;
        let mut builder = Builder::new(Network::Host, false);
        builder.fresh = dirs.clone();
        match super::landlock_support() {
            Ok(abi) => builder.landlock(&inner, abi, rules, false, &fresh)?,
            Err(reason) => builder.without_landlock(&inner, reason, rules)?,
        }
        builder.finish().map(Some)
    }

    /// The rules `policy` (this established sandbox's, as for [`Sandbox::renewed`]) gives now:
    /// canonical, existing, without the places a mount shows a rule's object again; those
    /// beneath the private directories as established. `None` for a sandbox that is not
    /// established.
    pub(super) fn rules_now(&self, policy: &Policy) -> Result<Option<Vec<(PathBuf, Access)>>> {
        let Some(dirs) = self.established_dirs() else {
            return Ok(None);
        };
        let rules = rules_inside(policy, &dirs, &self.view(), false)?;
        let beneath = self.status.rules.iter().filter(|r| {
            r.is_a_base_rule() && dirs.iter().any(|d| r.path.starts_with(d) && r.path != *d)
        });
        let mut out: Vec<(PathBuf, Access)> = rules
            .into_iter()
            .filter(|r| r.dir.is_some())
            .map(|r| (r.path, r.access))
            .collect();
        out.extend(beneath.map(|r| (r.path.clone(), r.access)));
        Ok(Some(out))
    }

    /// The private directories of this established sandbox that got a writable rule of their
    /// own when it was compiled (its private `/dev/shm`, `/tmp`, `/var/tmp` and `/dev/mqueue`:
    /// every fresh mount but a fresh `/sys`, whose rule is the policy's); `None` when it is not
    /// established.
    fn established_dirs(&self) -> Option<Vec<PathBuf>> {
        let outer = match &self.plan {
            Steps::Join(outer)
            | Steps::Within {
                outer, inner: None, ..
            } => outer,
            _ => return None,
        };
        let dirs = outer
            .private_dirs
            .iter()
            .map(|dir| PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
            .filter(|dir| !(self.status.fresh_sysfs && dir == Path::new("/sys")))
            .collect();
        Some(dirs)
    }

    /// Restricts the calling thread with this established sandbox's Landlock ruleset alone (no
    /// namespace joined, no capability dropped), for a thread that reaches the established
    /// namespaces through a [`View`] and then restricts itself with a policy of its own (an
    /// `fs/*` call): the kernel allows it only what both allow. For a sandbox that could not be
    /// established, its start-time layer ([`Sandbox::layered`]); nothing for any other.
    /// Landlock restricts the calling thread only, for good.
    pub fn restrict_thread_to_established(&self) -> io::Result<()> {
        match &self.start_layer {
            Some(layer) => linux::child::enforce(layer),
            None => self.plan.restrict_established(),
        }
    }

    /// What the sandbox applies.
    pub fn status(&self) -> &SandboxStatus {
        &self.status
    }

    /// Installs the sandbox on `command`; it is applied in the child before exec, so it covers
    /// the command and everything it starts. Register it after every other `pre_exec` hook.
    pub fn configure(&self, command: &mut Command) {
        if !self.plan.is_empty() {
            // SAFETY: the steps make only raw, async-signal-safe system calls on data prepared
            // before the fork (see `linux::child`): a child program.
            #[allow(unsafe_code)]
            unsafe {
                crate::sys::linux::exec::run_on_exec(command, self.child_program())
            };
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
        // SAFETY: as in `configure`: the steps are async-signal-safe (a child program).
        #[allow(unsafe_code)]
        let hook = unsafe { crate::sys::linux::exec::hook(self.child_program()) };
        Some(hook)
    }

    /// What a child of this sandbox runs: its steps, its namespaces of its own made in its
    /// spawner's children's user namespace when it has one. It owns what it uses (a clone of the
    /// plan and of the namespace's descriptor).
    fn child_program(
        &self,
    ) -> impl Fn(&crate::sys::linux::fork::InChild) -> io::Result<()> + Send + Sync + 'static {
        let plan = self.plan.clone();
        let user = self.user_ns.as_ref().map(|user| Arc::clone(&user.0));
        move |child| plan.apply(child, user.as_deref())
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
    /// Paths beneath the private `/tmp` and `/var/tmp` that are the users' (a working directory,
    /// `--share-tmp`) are not bound once: each child binds them for itself, from the host's
    /// tree as it is when the child starts (so a directory the host replaces meanwhile is
    /// followed), and so do children that work in, or may write, other host paths there
    /// ([`Sandbox::binding`], [`Sandbox::within`]). Those binds are copied out of copies of the
    /// host's trees the holder took before mounting over them, which Linux allows from 6.15.
    ///
    /// Errors: [`Error::Unsupported`] for a policy whose narrowings of the host's paths are
    /// read-only or hidden mounts (made once, a mount would stay on whatever the path was then,
    /// not on what the host puts there later), and for a private `/tmp` on a kernel whose
    /// children cannot bind host paths into it (before Linux 6.15); [`Error::Sys`] when the
    /// namespaces cannot be set up or opened.
    pub fn established(&self) -> Result<Sandbox> {
        let own = match &self.plan {
            Steps::Own(plan) if plan.narrows_host => {
                return Err(Error::Unsupported {
                    what: "an established sandbox with paths narrowed by mounts",
                    reason: "mounts made once would not follow a path the host replaces later"
                        .into(),
                })
            }
            Steps::Own(plan) => plan,
            Steps::Join(_) | Steps::Within { .. } | Steps::Layered { .. } => {
                return Ok(self.clone())
            }
        };
        let established = linux::shared::establish(own)
            .map_err(|e| Error::sys("set up the sandbox's shared namespaces and ruleset", e))?;
        if let (Some(err), false) = (&established.no_host_copies, self.host_paths.dirs.is_empty()) {
            return Err(Error::Unsupported {
                what: "a private /tmp shared by processes that bind host paths into it",
                reason: format!(
                    "the kernel refused a copy of the host's tree made in the shared namespaces \
                     (Linux 6.15 allows it): {err}"
                ),
            });
        }
        let mut status = self.status.clone();
        settle(&mut status, &self.plan, &established.outcomes);
        let outer = Arc::new(established.plan);
        let plan = match self.host_paths.child_plan()? {
            Some(binds) => Steps::Within {
                outer,
                binds: Some(Arc::new(binds)),
                inner: None,
            },
            None => Steps::Join(outer),
        };
        Ok(Sandbox::new(status, plan, self.host_paths.clone()))
    }

    /// This sandbox, for a long-lived spawner that could not establish it
    /// ([`Sandbox::established`] refused): its commands still set up namespaces of their own
    /// from the plan compiled once, and the Landlock rules of that plan (on the objects their
    /// paths named when it was compiled) are a layer beneath every sandbox installed
    /// [`Sandbox::within`] this one and every thread [`Sandbox::restrict_thread_to_established`]
    /// to it: a policy resolved later (a name repointed since) can narrow what the start
    /// granted, never widen it. The threads' ruleset is built now (the private directories'
    /// rules on the directories of this mount namespace, which the threads see); a child within
    /// builds the same after its mounts, its private directories' rules on its own fresh
    /// mounts, and applies it before its own ruleset. These commands, and those of every
    /// sandbox within this one, that set up namespaces of their own make them in `user_ns`, the
    /// spawner's ([`Sandbox::in_user_namespace`]; an ordinary user's spawner that makes itself
    /// non-dumpable must give it: its children cannot map a user namespace of their own).
    /// Unchanged for a sandbox that is established; without a ruleset, it gets no layer.
    ///
    /// Errors: [`Error::Sys`] when the ruleset cannot be built (never a sandbox without it).
    pub fn layered(&self, user_ns: Option<&UserNamespace>) -> Result<Sandbox> {
        let Steps::Own(plan) = &self.plan else {
            return Ok(self.clone());
        };
        let layer = linux::shared::ruleset_here(plan)
            .map_err(|e| Error::sys("build the sandbox's start-time Landlock layer", e))?;
        Ok(Sandbox {
            start_layer: layer.map(Arc::new),
            ..self.in_user_namespace(user_ns)
        })
    }

    /// This sandbox for a child of the spawner whose children make their namespaces in
    /// `user_ns` ([`UserNamespace`]): one that sets up namespaces of its own (and joins no user
    /// namespace with a holder's namespaces) joins it first, with `no_new_privs` set, and makes
    /// them there; so do those of every sandbox [`Sandbox::within`] this one. Unchanged for
    /// `None`.
    pub fn in_user_namespace(&self, user_ns: Option<&UserNamespace>) -> Sandbox {
        Sandbox {
            user_ns: user_ns.cloned().or_else(|| self.user_ns.clone()),
            ..self.clone()
        }
    }

    /// This established sandbox ([`Sandbox::established`]) for a child that also binds `paths`
    /// (host paths with the access its policy gives them: its working directory and project)
    /// where they lie beneath the private `/tmp` or `/var/tmp`; `None` when that changes
    /// nothing (no such path, or the sandbox is not established).
    pub fn binding(
        &self,
        paths: impl IntoIterator<Item = (PathBuf, Access)>,
    ) -> Result<Option<Sandbox>> {
        let outer = match &self.plan {
            Steps::Join(outer)
            | Steps::Within {
                outer, inner: None, ..
            } => outer,
            _ => return Ok(None),
        };
        let added: Vec<(PathBuf, Access)> = paths
            .into_iter()
            .filter(|(path, access)| {
                self.host_paths.wants(path)
                    && !self.host_paths.rules.contains(&(path.clone(), *access))
            })
            .collect();
        if added.is_empty() {
            return Ok(None);
        }
        let host_paths = self.host_paths.with(added);
        let plan = Steps::Within {
            outer: Arc::clone(outer),
            binds: host_paths.child_plan()?.map(Arc::new),
            inner: None,
        };
        Ok(Some(Sandbox::new(self.status.clone(), plan, host_paths)))
    }

    /// This sandbox inside `outer`, an established sandbox ([`Sandbox::established`], perhaps
    /// [`Sandbox::binding`] paths): its hook joins `outer`'s namespaces, binds `outer`'s host
    /// paths and this sandbox's writable ones beneath the private directories (each at no more
    /// than this sandbox's rules give it), then sets up this sandbox's own mounts within them
    /// and restricts itself with this sandbox's rules alone (intersect the policies first when
    /// `outer`'s must hold too). The process belongs to `outer`'s cleanroom: it sees its
    /// private `/dev/shm`, not the host's. For `outer` a sandbox that could not be established
    /// but is layered ([`Sandbox::layered`]), this sandbox with its namespaces of its own and
    /// `outer`'s start-time layer beneath its rules. Anything else for `outer` returns this
    /// sandbox unchanged. Either way, its namespaces of its own are made in `outer`'s user
    /// namespace ([`Sandbox::in_user_namespace`]) when it has one, else in this sandbox's.
    pub fn within(&self, outer: &Sandbox) -> Sandbox {
        let user_ns = outer.user_ns.as_ref().or(self.user_ns.as_ref());
        self.within_plan(outer).in_user_namespace(user_ns)
    }

    /// [`Sandbox::within`] but for how its children set up namespaces of their own.
    fn within_plan(&self, outer: &Sandbox) -> Sandbox {
        if let (Steps::Own(own), Steps::Own(start), Some(_)) =
            (&self.plan, &outer.plan, &outer.start_layer)
        {
            let plan = Steps::Layered {
                layer: Arc::clone(start),
                own: Arc::clone(own),
            };
            return Sandbox::new(self.status.clone(), plan, self.host_paths.clone());
        }
        let (inner, joined) = match (&self.plan, &outer.plan) {
            (Steps::Own(inner), Steps::Join(joined))
            | (
                Steps::Own(inner),
                Steps::Within {
                    outer: joined,
                    inner: None,
                    ..
                },
            ) => (inner, joined),
            _ => return self.clone(),
        };
        let writable = self
            .status
            .rules
            .iter()
            .filter(|r| r.access == Access::Write && r.enforced_by != EnforcedBy::Absent)
            .map(|r| (r.path.clone(), r.access));
        let host_paths = outer
            .host_paths
            .with(writable)
            .capped(|path| self.access(path));
        let binds = host_paths.child_plan().unwrap_or_else(|e| {
            tracing::warn!("the host paths of a process are not bound: {e}");
            None
        });
        let plan = Steps::Within {
            outer: Arc::clone(joined),
            binds: binds.map(Arc::new),
            inner: Some(Arc::clone(inner)),
        };
        Sandbox::new(self.status.clone(), plan, host_paths)
    }

    /// What a child applies to show, in its own mount namespace ([`super::view::send_own`]),
    /// the tree a process of `inner` (`None`: one under this sandbox alone) sees inside this
    /// established sandbox: it joins its namespaces and binds the host paths such a process
    /// binds beneath the private `/tmp` and `/var/tmp` (this sandbox's users' paths, and
    /// `inner`'s writable roots at the access `inner` gives them: [`Sandbox::within`]), and is
    /// restricted by this sandbox's rules, not `inner`'s. `None` when such a process binds
    /// nothing: [`Sandbox::view`] shows what it sees.
    pub fn binder(&self, inner: Option<&Sandbox>) -> Option<Sandbox> {
        let seen = inner.map_or_else(|| self.clone(), |inner| inner.within(self));
        let Steps::Within {
            outer,
            binds: Some(binds),
            ..
        } = &seen.plan
        else {
            return None;
        };
        let plan = Steps::Within {
            outer: Arc::clone(outer),
            binds: Some(Arc::clone(binds)),
            inner: None,
        };
        Some(Sandbox::new(self.status.clone(), plan, seen.host_paths))
    }

    /// The access this sandbox's rules give `path` (canonical).
    fn access(&self, path: &Path) -> Access {
        let rules = self
            .status
            .rules
            .iter()
            .filter(|r| r.enforced_by != EnforcedBy::Absent);
        compile::effective_access(rules.map(|r| (r.path.as_path(), r.access)), path)
    }

    /// The mount namespace this sandbox's commands work in, as a [`View`]: an established
    /// sandbox's own (its private `/dev/shm`, `/tmp` and `/var/tmp`), seen through its root
    /// directory; the caller's own for any other. Compile a policy in it ([`Policy::view`]) and
    /// resolve paths through it to see what the commands see.
    pub fn view(&self) -> View {
        match &self.plan {
            Steps::Join(plan) | Steps::Within { outer: plan, .. } => plan.view.clone(),
            Steps::Own(_) | Steps::Layered { .. } => View::own(),
        }
    }

    /// Whether this sandbox is established with a private `/dev/shm` its commands share.
    pub fn shares_dev_shm(&self) -> bool {
        let joined = match &self.plan {
            Steps::Join(outer) | Steps::Within { outer, .. } => outer.joins(libc::CLONE_NEWNS),
            Steps::Own(_) | Steps::Layered { .. } => false,
        };
        joined && self.status.dev_shm == Isolation::Private
    }

    /// What went wrong, when `err` is the error of a spawn whose child failed while it set this
    /// sandbox up: the step, with its path, and the system's answer.
    pub fn explain(&self, err: &io::Error) -> Option<String> {
        self.plan.explain(err)
    }

    /// Arms a report of the next spawn's best-effort steps (the sockets and host mounts it
    /// could not bind), to be read with [`SetupReport::read`] once the spawn returned. For a
    /// sandbox that sets up namespaces of its own and is spawned once at a time (a run).
    pub fn arm_report(&self) -> Result<Option<SetupReport>> {
        let Steps::Own(plan) = &self.plan else {
            return Ok(None);
        };
        if !plan.mount_ns {
            return Ok(None);
        }
        let flags = rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK;
        let (read, write) = rustix::pipe::pipe_with(flags)
            .map_err(|e| Error::sys("make the set-up report pipe", e))?;
        // One spawn at a time: a report still armed (its `SetupReport` alive) keeps its pipe.
        let Ok(lending) = plan.report.lend(write) else {
            return Err(Error::sys(
                "arm the set-up report",
                io::Error::other("the report of an earlier spawn is still armed"),
            ));
        };
        Ok(Some(SetupReport {
            read,
            plan: Arc::clone(plan),
            lending,
        }))
    }

    /// Takes in what the child reported of its best-effort steps ([`Sandbox::arm_report`]).
    pub fn settle(&mut self, report: SetupReport) {
        let outcomes = report.read();
        settle(&mut self.status, &self.plan, &outcomes);
    }

    /// A sandbox of `status` and `plan`; the status reports the capabilities the plan drops
    /// (the one place they are derived).
    fn new(mut status: SandboxStatus, plan: Steps, host_paths: HostPaths) -> Sandbox {
        let drops = plan.drops();
        status.dropped_capabilities = drops
            .capabilities()
            .map(|(_, name)| name.to_string())
            .collect();
        Sandbox {
            status,
            plan,
            host_paths,
            start_layer: None,
            user_ns: None,
        }
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
    ipc_ns: bool,
    /// Whether a mount carries protection (read-only, hidden, or a private directory over the
    /// host's), so `CAP_SYS_ADMIN` goes.
    protective_mounts: bool,
    /// Whether a mount narrows a host path outside the private directories.
    narrows_host: bool,
    /// Mount points of fresh mounts (private directories, a fresh sysfs): their Landlock rules
    /// are opened after mounting.
    fresh: Vec<PathBuf>,
    /// The descriptor slot of a detached mqueue mount, which gets a write rule by descriptor.
    mqueue_slot: Option<usize>,
    /// The users' paths beneath the private directories, for shared namespaces.
    host_paths: HostPaths,
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
                dev_shm: Isolation::Host,
                tmp: TmpStatus::with(Isolation::Host),
                ipc: Isolation::Host,
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
            ipc_ns: false,
            protective_mounts: false,
            narrows_host: false,
            fresh: Vec::new(),
            mqueue_slot: None,
            host_paths: HostPaths::default(),
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
        fresh: &[&Path],
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
        let compiled = compile::compile(&rules, use_mounts, &policy.view, fresh)?;
        let mut grants = Vec::with_capacity(compiled.grants.len());
        for (path, access) in &compiled.grants {
            if let Some(grant) = linux::open_for_rule(&policy.view, path)? {
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
        let steps = self.mount_steps(&compiled, &|_| false)?;
        if !steps.is_empty() {
            self.mount_ns = true;
            self.narrows_host = true;
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

    /// Takes a copy of the tree at `path` (still the file it is now) before any step changes
    /// it; returns its slot.
    fn keep(&mut self, path: &Path) -> Result<usize> {
        self.keep_as(path, Kept::Own)
    }

    /// [`Builder::keep`] for a kept path of `kind`: a host mount's is best effort, a user's is
    /// skipped by a holder of shared namespaces.
    fn keep_as(&mut self, path: &Path, kind: Kept) -> Result<usize> {
        let slot = self.slots;
        self.slots += 1;
        let step = MountStep::Keep {
            path: c_path(path)?,
            slot,
            identity: identity_of(path),
            best_effort: kind == Kept::Mount,
        };
        self.keeps.push(kind.wrap(step));
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
            self.status.dev_shm = Isolation::HostFallback {
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
        steps.extend(self.mount_steps(&compiled, &|_| false)?);
        self.applied_beneath(&compiled, beneath);
        self.mount_ns = true;
        self.protective_mounts = true;
        self.fresh.push(PathBuf::from("/dev/shm"));
        self.status.dev_shm = Isolation::Private;
        // First, so the policy's own mounts still apply inside what was put back.
        self.steps.splice(0..0, steps);
        Ok(())
    }

    /// A private `/tmp` and `/var/tmp` as `decision` planned them (see [`scratch`]): for each
    /// directory its backing directories made, the host paths it keeps taken before anything is
    /// mounted, then the overlay (or bind), the kept paths put back, the rules beneath enforced
    /// by mounts, and the sockets that listen there bound read-only. Kept paths that are users'
    /// (not cleanroom's own, not a host mount with nothing of the policy inside) are marked, so
    /// that shared namespaces leave them to each child ([`Sandbox::established`]), and recorded
    /// in [`Builder::host_paths`] with the rules beneath them.
    fn private_tmp(&mut self, request: &PrivateTmp, decision: TmpDecision) -> Result<()> {
        let planned = match decision.outcome {
            Err(reason) => {
                self.status.tmp = TmpStatus::with(Isolation::HostFallback { reason });
                self.status.tmp.notes = decision.notes;
                return Ok(());
            }
            Ok(planned) => planned,
        };
        let mut status = TmpStatus::with(Isolation::Private);
        status.notes = decision.notes;
        let mut steps = Vec::new();
        for (plan, beneath) in planned {
            scratch::create_backing(&plan)?;
            let kept = compile::maximal_existing(&beneath);
            let mut exposes = Vec::with_capacity(kept.len());
            let mut users = Vec::new();
            for path in &kept {
                let kind = Kept::of(path, request, &plan.submounts, &beneath);
                let slot = self.keep_as(path, kind)?;
                exposes.push(kind.wrap(MountStep::Expose {
                    path: c_path(path)?,
                    slot,
                }));
                match kind {
                    Kept::User => users.push(path.clone()),
                    Kept::Own => self.host_paths.kept.push(path.clone()),
                    Kept::Mount => {}
                }
            }
            let beneath_user = |p: &Path| users.iter().any(|u| p.starts_with(u));
            self.host_paths.rules.extend(
                beneath
                    .iter()
                    .filter(|r| r.dir.is_some() && beneath_user(&r.path))
                    .map(|r| (r.path.clone(), r.access)),
            );
            steps.push(self.private_dir_mount(&plan)?);
            steps.extend(exposes);
            let compiled = compile::compile_private(&beneath, &plan.path)?;
            steps.extend(self.mount_steps(&compiled, &beneath_user)?);
            self.applied_beneath(&compiled, beneath);
            status.shared.extend(kept);
            self.host_paths.dirs.push(plan.path.clone());
            status.dirs.push(PrivateDir {
                mechanism: match plan.work {
                    Some(_) => TmpMechanism::Overlay,
                    None => TmpMechanism::Bind,
                },
                premade: plan
                    .writable_foreign
                    .iter()
                    .map(|(n, _)| n.clone())
                    .collect(),
                path: plan.path,
                backing: plan.backing,
            });
        }
        let dirs: Vec<PathBuf> = status.dirs.iter().map(|d| d.path.clone()).collect();
        let sockets = scratch::sockets(&dirs, &request.sockets, &status.shared);
        for (socket, identity) in &sockets.bound {
            let slot = self.slots;
            self.slots += 1;
            let path = c_path(socket)?;
            self.keeps.push(MountStep::KeepSocket {
                path: path.clone(),
                slot,
                identity: *identity,
            });
            steps.push(MountStep::ExposeSocket { path, slot });
        }
        status.take_sockets(sockets, &request.sockets);
        status.dirs.sort_by(|a, b| a.path.cmp(&b.path));
        status.shared.sort();
        self.fresh.extend(dirs);
        self.mount_ns = true;
        self.protective_mounts = true;
        self.status.tmp = status;
        // First, so the policy's own mounts still apply inside what was put back.
        self.steps.splice(0..0, steps);
        Ok(())
    }

    /// The mount of one private directory: an overlay of the host's, or a bind of an empty
    /// directory of the root.
    fn private_dir_mount(&self, plan: &DirPlan) -> Result<MountStep> {
        let target = c_path(&plan.path)?;
        Ok(match &plan.work {
            Some(work) => MountStep::Overlay {
                target,
                data: CString::new(scratch::overlay_options(plan, work)).map_err(|_| {
                    Error::Invalid(format!("{} contains a NUL byte", plan.backing.display()))
                })?,
            },
            None => MountStep::Bind {
                source: c_path(&plan.backing)?,
                target,
            },
        })
    }

    /// A private IPC namespace (when `unavailable` is `None`) with its mqueue filesystem
    /// mounted, writable (Landlock governs `mq_open`'s opens too): on `/dev/mqueue` where the
    /// host has that directory (`dev_mqueue`, its rule by path), else detached (its rule by
    /// descriptor; a sandbox set up once for many children then has no rule for it, so there
    /// `mq_open` is refused where Landlock handles writes).
    fn ipc(&mut self, unavailable: Option<&String>, dev_mqueue: bool) -> Result<()> {
        if let Some(reason) = unavailable {
            self.status.ipc = Isolation::HostFallback {
                reason: reason.clone(),
            };
            return Ok(());
        }
        self.ipc_ns = true;
        self.mount_ns = true;
        self.status.ipc = Isolation::Private;
        let slot = self.slots;
        self.slots += 1;
        let path = match dev_mqueue {
            true => {
                self.protective_mounts = true;
                self.fresh.push(PathBuf::from(MQUEUE));
                Some(c_path(Path::new(MQUEUE))?)
            }
            false => {
                self.mqueue_slot = Some(slot);
                None
            }
        };
        self.steps.insert(0, MountStep::Mqueue { path, slot });
        Ok(())
    }

    /// Records the rules beneath a private directory as `compiled` enforces them.
    fn applied_beneath(&mut self, compiled: &compile::Compiled, beneath: Vec<CanonicalRule>) {
        self.status.rules.extend(beneath.into_iter().map(|r| {
            let by = compiled.enforced_by(&r);
            r.applied(by)
        }));
        self.status.rules.sort_by(|a, b| a.path.cmp(&b.path));
    }

    /// The child's steps for `compiled`'s mounts (those on paths `users` says are beneath a
    /// user's kept path marked as such); marks the mounts protective when they narrow
    /// anything.
    fn mount_steps(
        &mut self,
        compiled: &compile::Compiled,
        users: &dyn Fn(&Path) -> bool,
    ) -> Result<Vec<MountStep>> {
        let mut steps = Vec::with_capacity(compiled.mounts.len());
        for mount in &compiled.mounts {
            let path = c_path(&mount.path)?;
            let kind = match users(&mount.path) {
                true => Kept::User,
                false => Kept::Own,
            };
            let step = match mount.kind {
                MountKind::ReadOnly => MountStep::ReadOnly { path },
                MountKind::HideDir | MountKind::HideFile => MountStep::Hide { path },
                MountKind::Expose => {
                    let slot = self.keep_as(&mount.path, kind)?;
                    MountStep::Expose { path, slot }
                }
            };
            steps.push(kind.wrap(step));
            self.protective_mounts |= mount.kind != MountKind::Expose;
        }
        Ok(steps)
    }

    /// `/sys` replaced by a sysfs of the new network namespace, its submounts (in `mounts`, the
    /// compile's mount table) moved back.
    fn fresh_sysfs(&mut self, mounts: std::result::Result<&MountTable, &io::Error>) -> Result<()> {
        let mounts = mounts.map_err(MountTable::unreadable)?;
        let mut submounts = Vec::new();
        for path in mounts.top_submounts_of(Path::new("/sys")) {
            let slot = self.keep(&path)?;
            submounts.push((c_path(&path)?, slot));
        }
        self.mount_ns = true;
        self.fresh.push(PathBuf::from("/sys"));
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
        let fresh = std::mem::take(&mut self.fresh);
        let landlock = match self.landlock.take() {
            Some((rights, grants)) => {
                let mut plan = LandlockPlan {
                    handled: rights.handled,
                    rules: Vec::new(),
                    late_rules: Vec::new(),
                    slot_rules: Vec::new(),
                };
                if let Some(slot) = self.mqueue_slot {
                    plan.slot_rules.push((slot, rights.of(Access::Write, true)));
                }
                for g in grants {
                    let bits = rights.of(g.access, g.grant.dir);
                    if fresh.contains(&g.path) {
                        // A fresh mount's root is a new inode: the child opens it after mounting.
                        plan.late_rules.push((c_path(&g.path)?, bits));
                    } else {
                        plan.rules.push(EarlyRule {
                            fd: g.grant.fd,
                            rights: bits,
                            path: c_path(&g.path)?,
                        });
                    }
                }
                Some(plan)
            }
            None => None,
        };
        let plan = ChildPlan {
            mount_ns: self.mount_ns,
            net_ns: self.net_ns,
            ipc_ns: self.ipc_ns,
            steps,
            slots: (0..self.slots).map(|_| FdSlot::new()).collect(),
            protective_mounts: self.protective_mounts,
            narrows_host: self.narrows_host,
            private_dirs: fresh.iter().map(|p| c_path(p)).collect::<Result<_>>()?,
            host_dirs: (self.host_paths.dirs.iter())
                .map(|p| c_path(p))
                .collect::<Result<_>>()?,
            landlock,
            report: LentFd::new(),
        };
        tracing::debug!(?plan, "sandbox compiled");
        Ok(Sandbox::new(
            self.status,
            Steps::Own(Arc::new(plan)),
            self.host_paths,
        ))
    }
}

/// `policy`'s rules canonicalized now in `view` (with their aliases when `aliases`), but
/// for those beneath the private directories `dirs`, with a writable rule on each of them
/// and the device files' (as [`Sandbox::compile`] adds them).
fn rules_inside(
    policy: &Policy,
    dirs: &[PathBuf],
    view: &View,
    aliases: bool,
) -> Result<Vec<CanonicalRule>> {
    let mut rules = compile::canonical_rules(&policy.rules, view)?;
    if aliases {
        aliases::add_aliases(&mut rules, MountTable::read().as_ref(), view, &[]);
    }
    for dir in dirs {
        compile::split_beneath(&mut rules, dir);
    }
    let fresh: Vec<(&Path, &str)> = dirs
        .iter()
        .map(|dir| {
            (
                dir.as_path(),
                "private directory of this cleanroom (established)",
            )
        })
        .collect();
    compile::add_default_rules(&mut rules, &fresh, view)?;
    Ok(rules)
}

/// Where the host's mqueue filesystem is mounted, and where a private IPC namespace's goes.
const MQUEUE: &str = "/dev/mqueue";

/// Whose a path kept the host's inside a private directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    /// Cleanroom's own (its namespace, its lock directory): bound once, in shared namespaces
    /// too.
    Own,
    /// A host mount with no path of the policy inside: bound once, best effort.
    Mount,
    /// A user's (a working directory, `--share-tmp`): each child of shared namespaces binds it
    /// itself.
    User,
}

impl Kept {
    /// What the kept path `path` of a private directory is.
    fn of(
        path: &Path,
        request: &PrivateTmp,
        submounts: &[PathBuf],
        beneath: &[CanonicalRule],
    ) -> Kept {
        let inside = |r: &CanonicalRule| r.path.starts_with(path) && r.path != path;
        if request.own.iter().any(|(own, _)| path.starts_with(own)) {
            Kept::Own
        } else if submounts.iter().any(|m| m == path) && !beneath.iter().any(inside) {
            Kept::Mount
        } else {
            Kept::User
        }
    }

    /// `step` marked for what it keeps.
    fn wrap(self, step: MountStep) -> MountStep {
        match self {
            Kept::User => MountStep::UserPath(Box::new(step)),
            Kept::Own | Kept::Mount => step,
        }
    }
}

/// The device and inode of `path` now (not following a final link), if it can be read.
fn identity_of(path: &Path) -> Option<Identity> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(Identity {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// A report pipe armed for one spawn of a sandbox ([`Sandbox::arm_report`]): its read end, and
/// the plan that holds its write end, lent to the children.
#[derive(Debug)]
pub struct SetupReport {
    read: OwnedFd,
    plan: Arc<ChildPlan>,
    /// This report's lending of its write end (ended once, by `read` or the drop).
    lending: Lending,
}

impl SetupReport {
    /// What the child reported (read once the spawn returned: the child has executed the
    /// command or failed, so everything it had to say is in the pipe).
    fn read(self) -> Vec<(Outcome, usize)> {
        drop(self.plan.report.withdraw(&self.lending));
        report::read(&self.read)
            .map(|r| r.outcomes)
            .unwrap_or_default()
    }
}

impl Drop for SetupReport {
    fn drop(&mut self) {
        drop(self.plan.report.withdraw(&self.lending));
    }
}

/// Records in `status` how the best-effort steps of `plan` turned out (`outcomes` count its
/// steps).
fn settle(status: &mut SandboxStatus, plan: &Steps, outcomes: &[(Outcome, usize)]) {
    for &(outcome, index) in outcomes {
        if let Some(path) = plan.step(index).and_then(MountStep::path) {
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes()));
            status.tmp.record(outcome, path);
        }
    }
}

/// Whether `path` is a directory, not a symlink to one.
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// What [`Sandbox::compile`] decided about a private `/tmp` and `/var/tmp`.
struct TmpDecision {
    /// Each directory with the rules beneath it (enforced by mounts inside it), or why none
    /// can be private (empty: not asked for).
    outcome: std::result::Result<Vec<(DirPlan, Vec<CanonicalRule>)>, String>,
    /// Directories that stay the host's because a rule names them, and similar notes.
    notes: Vec<String>,
}

impl TmpDecision {
    /// Plans `policy`'s private directories: the rules beneath each move out of `rules` (into
    /// the directory, with a rule for each host path it keeps: cleanroom's own at the access
    /// the request gives them, else at the access the rest of the policy gives them; the host's
    /// mounts there read-only unless a rule names them).
    fn make(
        policy: &Policy,
        mount_ns: &std::result::Result<(), String>,
        mounts: std::result::Result<&MountTable, &io::Error>,
        rules: &mut Vec<CanonicalRule>,
    ) -> TmpDecision {
        let mut notes = Vec::new();
        let planned = match (&policy.private_tmp, mount_ns) {
            (None, _) => Ok(Vec::new()),
            (Some(_), Err(reason)) => Err(reason.clone()),
            (Some(request), Ok(())) => scratch::plan(request, rules, mounts, &mut notes),
        };
        let outcome = planned.map(|plans| {
            plans
                .into_iter()
                .map(|plan| {
                    let mut beneath = compile::split_beneath(rules, &plan.path);
                    for (path, access) in &plan.own {
                        let access = access.unwrap_or_else(|| compile::access_in(rules, path));
                        let why = "kept from the host: cleanroom's namespace or lock directory";
                        compile::add_absent(&mut beneath, path, access, why);
                    }
                    for path in &plan.shared {
                        let access = compile::access_in(rules, path);
                        compile::add_absent(
                            &mut beneath,
                            path,
                            access,
                            "kept from the host: --share-tmp",
                        );
                    }
                    for path in &plan.submounts {
                        let access = compile::access_in(rules, path).min(Access::Read);
                        let why = "a mount of the host's, read-only in the private directory";
                        compile::add_absent(&mut beneath, path, access, why);
                    }
                    (plan, beneath)
                })
                .collect()
        });
        TmpDecision { outcome, notes }
    }

    /// The private directories planned.
    fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.outcome
            .iter()
            .flatten()
            .map(|(plan, _)| plan.path.as_path())
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
        || policy.private_tmp.is_some()
        || policy.private_ipc
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
        let user = PROBES_USER_NS.get().map(|user| user.0.as_ref());
        linux::probe_in_child(linux::Probe::Namespaces { mount, net, user })
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
