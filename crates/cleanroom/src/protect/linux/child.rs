//! What a sandboxed child does between fork and exec: enter its namespaces, set up its mounts,
//! drop what could undo them, restrict itself with Landlock ([`Steps::apply`]); or join
//! namespaces a holder set up once, bind the host paths it needs from the holder's copies of the
//! host's private directories, and restrict itself with a ruleset built outside.
//!
//! Invariant: everything here runs after fork, in a child of a possibly multi-threaded parent
//! (a child program of `sys::linux`), so it makes only raw, async-signal-safe system calls
//! (rustix's and `sys::linux`'s, paths passed as `CStr`s so that none is copied) on data prepared
//! before the fork (paths as `CString`s, descriptor slots as [`FdSlot`]s) or on the stack; it
//! never allocates, locks or touches Rust's standard I/O. The order is fixed: namespaces, then mounts, then capabilities,
//! then Landlock, because a Landlock domain forbids every later mount and may forbid writing
//! `/proc/self/uid_map`. A failure names its stage ([`report::failed`]), so the parent can say
//! which step on which path went wrong.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{FileType, Mode, OFlags, CWD};
use rustix::mount::MountFlags;
use rustix::thread::{CapabilitySet, LinkNameSpaceType};

use super::mounts::{self, Within};
use super::report::{self, failed, Outcome, Stage};
use crate::sys::linux::fd::{self as sys_fd, FdSlot, LentFd};
use crate::sys::linux::fork::InChild;
use crate::sys::linux::{landlock, process};

/// `CAP_DAC_READ_SEARCH`, `CAP_LINUX_IMMUTABLE`, `CAP_NET_ADMIN` and `CAP_SYS_ADMIN` from
/// `<linux/capability.h>`.
const CAP_DAC_READ_SEARCH: libc::c_int = 2;
const CAP_LINUX_IMMUTABLE: libc::c_int = 9;
const CAP_NET_ADMIN: libc::c_int = 12;
const CAP_SYS_ADMIN: libc::c_int = 21;
/// The largest working directory the child re-enters after its mounts (PATH_MAX).
const CWD_MAX: usize = 4096;

/// The Landlock ruleset the child builds for itself just before it restricts itself: the
/// rights it handles, rules on paths the parent opened (with their paths, for a child that
/// joins namespaces where some of them are covered by private mounts, see [`Steps::Within`]),
/// and rules on paths the child opens after its mounts (a fresh tmpfs, sysfs or overlay has new
/// inodes, and Landlock ignores the rules of the mount points they cover).
#[derive(Debug)]
pub(crate) struct LandlockPlan {
    pub handled: u64,
    pub rules: Vec<EarlyRule>,
    pub late_rules: Vec<(CString, u64)>,
    /// Rules on mounts the child makes without a path, by descriptor slot (the mqueue
    /// filesystem of its own IPC namespace where the host has no `/dev/mqueue`).
    pub slot_rules: Vec<(usize, u64)>,
}

/// A Landlock rule on a path the parent opened.
#[derive(Debug)]
pub(crate) struct EarlyRule {
    pub fd: OwnedFd,
    pub rights: u64,
    pub path: CString,
}

/// The file a path named when the parent planned a step on it (device and inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// One step of the child's mount setup, in order. Every path is resolved without following a
/// symlink or a magic link.
#[derive(Debug)]
pub(crate) enum MountStep {
    /// Takes a detached recursive copy of the tree at `path` as it is now (before any other
    /// step changed it) into descriptor slot `slot`, for [`MountStep::Expose`]; `path` must
    /// still be `identity` when one is given. `best_effort` (a host mount beneath a private
    /// directory): one that cannot be reached or copied leaves the slot empty instead of failing.
    Keep {
        path: CString,
        slot: usize,
        identity: Option<Identity>,
        best_effort: bool,
    },
    /// Makes the tree at `path` read-only (a read-only copy of it on top).
    ReadOnly { path: CString },
    /// Covers `path`: a directory with an empty, read-only tmpfs of mode 000, a file with a
    /// read-only, `nodev` copy of `/dev/null` (so opening it fails).
    Hide { path: CString },
    /// Puts the copy kept in `slot` back at `path`, over whatever covers it. An empty slot (a
    /// best-effort keep that failed) covers `path` instead, so what lies beneath the host's
    /// mount there is not shown, or, where the child cannot reach `path` (nor can the command,
    /// with the same identity), leaves it; either is reported ([`Outcome`]).
    Expose { path: CString, slot: usize },
    /// Mounts a fresh, private tmpfs (mode 1777) at `path` (`/dev/shm`).
    Tmpfs { path: CString },
    /// Mounts an overlay at `target` with the options `data` (the host's directory at `target`
    /// as its lower layer, upper and work directories in the run's root): a private `/tmp`.
    Overlay { target: CString, data: CString },
    /// Binds the directory `source` (in the run's root) onto `target`, `nosuid` and `nodev`: a
    /// private `/tmp` that was empty on the host.
    Bind { source: CString, target: CString },
    /// Makes a mount of the mqueue filesystem of the child's own IPC namespace into `slot` (its
    /// root is that of the filesystem `mq_open` uses, so a Landlock rule on it grants the run's
    /// own queues), and attaches it at `path` (`/dev/mqueue`) when the host has one.
    Mqueue { path: Option<CString>, slot: usize },
    /// Takes a read-only copy of the socket file at `path` (still `identity`) into `slot`. Best
    /// effort: a socket that is gone or replaced leaves the slot empty.
    KeepSocket {
        path: CString,
        slot: usize,
        identity: Identity,
    },
    /// Puts the socket copy of `slot` over the same path, so the host's listener answers there.
    /// Best effort, as [`MountStep::KeepSocket`]; a socket not bound is reported.
    ExposeSocket { path: CString, slot: usize },
    /// Creates the directory `path` (mode 0755) as a mount point inside our own tmpfs.
    MakeDir { path: CString },
    /// Creates the empty file `path` (mode 0600) as a mount point inside our own tmpfs.
    MakeFile { path: CString },
    /// Replaces `/sys` by a fresh sysfs of the child's network namespace, with the submounts of
    /// the old `/sys` (kept in their slots by earlier [`MountStep::Keep`]s) moved back onto it.
    FreshSysfs { submounts: Vec<(CString, usize)> },
    /// Attaches at `target` the copy of the host path `relative` (beneath the holder's copy of
    /// the host's private directory number `tree`, see [`JoinPlan::host_trees`]) that the child
    /// took into `slot` while it was still in the joined mount namespace (read-only when
    /// `read_only`); a mount point the private directory lacks is made there.
    BindHost {
        tree: usize,
        relative: CString,
        target: CString,
        slot: usize,
        read_only: bool,
    },
    /// A step on a user's path beneath a private directory (the working directory, a
    /// `--share-tmp` path): made by a child that sets up namespaces of its own; a holder of
    /// shared namespaces skips it, and each child that joins binds the path itself, from the
    /// host's tree as it is then ([`MountStep::BindHost`]), so a path the host replaces later
    /// is followed.
    UserPath(Box<MountStep>),
}

impl MountStep {
    /// What the step does, for an error message.
    pub fn describe(&self) -> String {
        let show = |p: &CStr| String::from_utf8_lossy(p.to_bytes()).into_owned();
        match self {
            MountStep::Keep { path, .. } => {
                format!("take a copy of {} (kept the host's)", show(path))
            }
            MountStep::ReadOnly { path } => format!("make {} read-only", show(path)),
            MountStep::Hide { path } => format!("hide {}", show(path)),
            MountStep::Expose { path, .. } => format!("put the host's {} back", show(path)),
            MountStep::Tmpfs { path } => format!("mount a private tmpfs on {}", show(path)),
            MountStep::Overlay { target, .. } => {
                format!("mount the private overlay on {}", show(target))
            }
            MountStep::Bind { target, .. } => format!("bind the private {}", show(target)),
            MountStep::Mqueue { .. } => "mount the run's mqueue filesystem".into(),
            MountStep::KeepSocket { path, .. } | MountStep::ExposeSocket { path, .. } => {
                format!("bind the socket {}", show(path))
            }
            MountStep::MakeDir { path } | MountStep::MakeFile { path } => {
                format!("make the mount point {}", show(path))
            }
            MountStep::FreshSysfs { .. } => "mount a fresh /sys".into(),
            MountStep::BindHost { target, .. } => {
                format!("bind the host's {} (kept the host's)", show(target))
            }
            MountStep::UserPath(step) => step.describe(),
        }
    }

    /// The path a reported outcome of this step concerns.
    pub fn path(&self) -> Option<&CStr> {
        match self {
            MountStep::Keep { path, .. }
            | MountStep::Expose { path, .. }
            | MountStep::KeepSocket { path, .. }
            | MountStep::ExposeSocket { path, .. } => Some(path),
            MountStep::UserPath(step) => step.path(),
            _ => None,
        }
    }
}

/// Everything the child applies, prepared in the parent.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    /// Enter a new mount namespace (mounts propagate in from the host, never out).
    pub mount_ns: bool,
    /// Enter a new network namespace with loopback up.
    pub net_ns: bool,
    /// Enter a new IPC namespace (System V objects and POSIX message queues of its own).
    pub ipc_ns: bool,
    /// Mount steps, in order (only with `mount_ns`).
    pub steps: Vec<MountStep>,
    /// Descriptor slots of [`MountStep::Keep`] and the like.
    pub slots: Vec<FdSlot>,
    /// The mounts carry protection (read-only or hiding paths, or private directories covering
    /// the host's): drop `CAP_SYS_ADMIN` from the bounding set, so a process running as uid 0
    /// cannot clear the read-only flag (`mount_setattr`) or clone the mount tree below them
    /// (`open_tree` without `AT_RECURSIVE` reaches the host's `/tmp` under the private one),
    /// which Landlock does not stop.
    pub protective_mounts: bool,
    /// Some mount narrows a path of the host outside the private directories (a read-only
    /// `.git`): such a plan is never established once for many children, since its mounts would
    /// not follow a path the host replaces later.
    pub narrows_host: bool,
    /// The mount points of fresh private mounts (`/dev/shm`, `/tmp`, `/var/tmp`): a child that
    /// joins these namespaces opens its own rules beneath them by path (the parent's descriptors
    /// name the host's inodes they cover).
    pub private_dirs: Vec<CString>,
    /// The private `/tmp` and `/var/tmp` over host directories: a holder takes a copy of the
    /// host's tree at each before mounting, for the children that bind host paths beneath them.
    pub host_dirs: Vec<CString>,
    /// The Landlock ruleset to restrict the child with.
    pub landlock: Option<LandlockPlan>,
    /// Where the child writes the outcome of its best-effort steps (nothing lent: nowhere): the
    /// write end of a pipe armed for one spawn ([`super::report`]).
    pub report: LentFd,
}

impl ChildPlan {
    /// Whether the child has anything to do.
    pub fn is_empty(&self) -> bool {
        !self.mount_ns && !self.net_ns && !self.ipc_ns && self.landlock.is_none()
    }

    /// The `unshare` flags of its namespaces.
    fn namespace_flags(&self) -> libc::c_int {
        [
            (self.mount_ns, libc::CLONE_NEWNS),
            (self.net_ns, libc::CLONE_NEWNET),
            (self.ipc_ns, libc::CLONE_NEWIPC),
        ]
        .iter()
        .filter(|(wanted, _)| *wanted)
        .fold(0, |flags, (_, flag)| flags | flag)
    }
}

/// What a sandboxed child does.
#[derive(Clone, Debug)]
pub(crate) enum Steps {
    /// Sets up namespaces, mounts and a ruleset of its own.
    Own(Arc<ChildPlan>),
    /// Joins namespaces a holder set up ([`super::shared`]) and restricts itself with the
    /// ruleset built there.
    Join(Arc<JoinPlan>),
    /// Joins `outer`'s namespaces, then makes a mount namespace of its own inside them, with
    /// `binds` (host paths bound from `outer`'s copies of the host's trees: a working directory
    /// beneath the private `/tmp`) and `inner`'s own set-up. It restricts itself with `inner`'s
    /// rules alone when there is an `inner` (a process with a policy of its own that still
    /// belongs to `outer`'s cleanroom: it sees its `/dev/shm`), else with `outer`'s.
    Within {
        outer: Arc<JoinPlan>,
        binds: Option<Arc<ChildPlan>>,
        inner: Option<Arc<ChildPlan>>,
    },
    /// Sets up namespaces, mounts and a ruleset of its own (`own`), as [`Steps::Own`], and
    /// restricts itself first with the ruleset of `layer`, the plan compiled once at the start
    /// of a long-lived spawner whose namespaces could not be shared: its early rules on the
    /// objects opened then, its late rules on the child's own fresh mounts (a rule on the
    /// directory a mount covers does not reach into the mount: Landlock skips hidden mount
    /// points). The kernel allows only what both allow, so `own`, resolved later (a name
    /// repointed since), can narrow the start's rules, never widen them.
    Layered {
        layer: Arc<ChildPlan>,
        own: Arc<ChildPlan>,
    },
}

/// Capabilities a child drops from its bounding set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Drops {
    /// `CAP_SYS_ADMIN`: its mounts carry protection, or it shares a mount namespace, which a
    /// process running as uid 0 could otherwise change for every other (`mount_setattr`,
    /// `open_tree`: Landlock refuses `mount` and `umount`, not these). `CAP_LINUX_IMMUTABLE`
    /// goes with it: with it a process running as uid 0 could mark a file of its own root
    /// immutable or append-only (`chattr +i`, `+a`), which the removal must clear first and
    /// cannot for a file with a link outside the root, which would then outlive the run.
    pub sys_admin: bool,
    /// `CAP_NET_ADMIN`: it shares a network namespace.
    pub net_admin: bool,
    /// `CAP_DAC_READ_SEARCH`: any sandbox. With it a process running as uid 0 opens a file by
    /// its handle (`open_by_handle_at`) through any mount of the file's filesystem (a private
    /// directory's bind, a writable rule's), where Landlock judges it at that mount: past the
    /// read-only rules and mounts of its real path.
    pub by_handle: bool,
}

impl Drops {
    /// The capabilities dropped, each with its name, in the order reports list them (the one
    /// table of which flag drops what; no allocation: it runs after fork).
    pub fn capabilities(self) -> impl Iterator<Item = (libc::c_int, &'static str)> {
        [
            (self.net_admin, CAP_NET_ADMIN, "CAP_NET_ADMIN"),
            (self.sys_admin, CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
            (self.sys_admin, CAP_LINUX_IMMUTABLE, "CAP_LINUX_IMMUTABLE"),
            (self.by_handle, CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
        ]
        .into_iter()
        .filter(|&(dropped, ..)| dropped)
        .map(|(_, capability, name)| (capability, name))
    }
}

/// What the calling process is when it sets up namespaces.
#[derive(Clone, Copy, Debug)]
enum Role<'a> {
    /// A child making its own namespaces: in the user namespace made for a long-lived spawner's
    /// children when given (`UserNamespace`, by a holder: [`enter_user_namespace`]), joined
    /// first, else in one of its own.
    Own(Option<&'a OwnedFd>),
    /// A holder of namespaces many children join: it skips [`MountStep::UserPath`] steps.
    Holder,
    /// A child inside joined namespaces, making its own in the user namespace `MakeIn` says.
    Joined(MakeIn<'a>),
}

/// Where a child inside the joined namespaces of `outer` makes new ones: in the user namespace
/// it joined with them, else in `user` (the spawner's children's) when given, else in one of
/// its own.
fn within<'a>(outer: &JoinPlan, user: Option<&'a OwnedFd>) -> MakeIn<'a> {
    match (outer.joins(libc::CLONE_NEWUSER), user) {
        (true, _) => MakeIn::Joined,
        (false, Some(user)) => MakeIn::Join(user),
        (false, None) => MakeIn::Own,
    }
}

/// The user namespace a child makes its new namespaces in.
#[derive(Clone, Copy, Debug)]
enum MakeIn<'a> {
    /// A user namespace of its own made with them, unless it runs as root (see
    /// [`enter_namespaces`]).
    Own,
    /// This one, made by another process, joined first ([`join_user_namespace`]).
    Join(&'a OwnedFd),
    /// The one it joined with a holder's namespaces.
    Joined,
}

impl<'a> Role<'a> {
    fn make_in(self) -> MakeIn<'a> {
        match self {
            Role::Own(Some(user)) => MakeIn::Join(user),
            Role::Own(None) | Role::Holder => MakeIn::Own,
            Role::Joined(make_in) => make_in,
        }
    }
}

impl Steps {
    /// Whether the child has anything to do.
    pub fn is_empty(&self) -> bool {
        match self {
            Steps::Own(plan) => plan.is_empty(),
            Steps::Join(plan) => plan.namespaces.is_empty() && plan.ruleset.is_none(),
            Steps::Within { .. } | Steps::Layered { .. } => false,
        }
    }

    /// What the child drops from its bounding set.
    pub fn drops(&self) -> Drops {
        let by_handle = !self.is_empty();
        let drops = match self {
            Steps::Own(plan) | Steps::Layered { own: plan, .. } => Drops {
                sys_admin: plan.protective_mounts,
                ..Drops::default()
            },
            Steps::Join(plan) => plan.shared(),
            Steps::Within { outer, inner, .. } => {
                let shared = outer.shared();
                // A mount namespace of its own is a copy of the shared one: its mounts are its
                // own, their superblocks (the shared `/dev/shm`'s tmpfs) are not.
                Drops {
                    sys_admin: inner.as_ref().is_some_and(|p| p.protective_mounts)
                        || shared.sys_admin,
                    net_admin: shared.net_admin && !inner.as_ref().is_some_and(|p| p.net_ns),
                    ..Drops::default()
                }
            }
        };
        Drops { by_handle, ..drops }
    }

    /// Applies the steps to the calling process, a child (`child`): namespaces, then mounts,
    /// then capabilities, then Landlock. A child that sets up namespaces of its own (`Own`,
    /// `Layered`, and `Within` on namespaces without a user namespace) makes them in `user` when
    /// given (the spawner's children's), else in one of its own. Runs after fork: raw system
    /// calls only; an error carries its stage.
    pub fn apply(&self, child: &InChild, user: Option<&OwnedFd>) -> io::Result<()> {
        let joins_user = match self {
            Steps::Own(_) | Steps::Layered { .. } => user.is_some(),
            Steps::Join(plan) => plan.joins(libc::CLONE_NEWUSER),
            Steps::Within { outer, .. } => !matches!(within(outer, user), MakeIn::Own),
        };
        match self {
            Steps::Own(plan) | Steps::Layered { own: plan, .. } => {
                let report = plan.report.get(child);
                enter(&[Some(plan.as_ref())], Role::Own(user), &mut [], report)?;
            }
            Steps::Join(plan) => join(plan).map_err(|e| failed(Stage::Join, e))?,
            Steps::Within {
                outer,
                binds,
                inner,
            } => {
                join(outer).map_err(|e| failed(Stage::Join, e))?;
                if let Some(binds) = binds {
                    copy_host_paths(binds, &outer.host_trees)?;
                }
                enter(
                    &[binds.as_deref(), inner.as_deref()],
                    Role::Joined(within(outer, user)),
                    &mut [],
                    None,
                )?;
            }
        }
        drop_capabilities(self.drops()).map_err(|e| failed(Stage::Capabilities, e))?;
        self.restrict().map_err(|e| failed(Stage::Landlock, e))?;
        if joins_user && !rustix::process::geteuid().is_root() {
            give_up_capabilities().map_err(|e| failed(Stage::Capabilities, e))?;
        }
        Ok(())
    }

    /// Restricts the calling process with its Landlock ruleset.
    fn restrict(&self) -> io::Result<()> {
        match self {
            Steps::Own(plan) => restrict_own(plan),
            Steps::Layered { layer, own } => {
                // The start's rules stay a layer beneath these (as the established ruleset
                // beneath `Within`'s inner rules); not its slot rules, on mounts of its own
                // children only.
                if let Some(landlock) = &layer.landlock {
                    let absent = Absent::GrantsNothing;
                    enforce(&build_ruleset(landlock, &open_path, &[], absent)?)?;
                }
                restrict_own(own)
            }
            Steps::Within {
                outer,
                inner: Some(inner),
                ..
            } => {
                // The established ruleset stays a layer beneath the inner one: the kernel allows
                // only what both allow, so an inner policy resolved later (a path renamed or
                // repointed since the namespaces were set up) can narrow, never widen.
                self.restrict_established()?;
                match &inner.landlock {
                    Some(landlock) => {
                        let dirs = &outer.private_dirs;
                        enforce(&build_ruleset(landlock, &open_path, dirs, Absent::Fails)?)
                    }
                    None => Ok(()),
                }
            }
            Steps::Join(_) | Steps::Within { .. } => self.restrict_established(),
        }
    }

    /// Restricts the calling thread with the established ruleset of joined steps (`Join`,
    /// `Within`), if it has one; nothing for `Own`. Raw system calls only.
    pub fn restrict_established(&self) -> io::Result<()> {
        match self {
            Steps::Join(outer) | Steps::Within { outer, .. } => match &outer.ruleset {
                Some(ruleset) => enforce(ruleset),
                None => Ok(()),
            },
            Steps::Own(_) | Steps::Layered { .. } => Ok(()),
        }
    }

    /// The mount step a stage or an outcome counts (over the plans applied, in order).
    pub fn step(&self, index: usize) -> Option<&MountStep> {
        let plans: [Option<&ChildPlan>; 2] = match self {
            Steps::Own(plan) | Steps::Layered { own: plan, .. } => [Some(plan), None],
            Steps::Join(_) => [None, None],
            Steps::Within { binds, inner, .. } => [binds.as_deref(), inner.as_deref()],
        };
        plans
            .into_iter()
            .flatten()
            .flat_map(|plan| plan.steps.iter())
            .nth(index)
    }

    /// What went wrong, when `err` is the failure of a stage of these steps (the error a spawn
    /// returns when the child failed before exec).
    pub fn explain(&self, err: &io::Error) -> Option<String> {
        let (stage, errno) = report::decode(err.raw_os_error()?)?;
        let what = match stage {
            Stage::Join => "join the sandbox's shared namespaces".to_string(),
            Stage::UserNamespace => {
                "join the user namespace made for the sandbox's processes, in which each makes \
                 its namespaces"
                    .to_string()
            }
            Stage::Namespaces => "make the sandbox's namespaces".to_string(),
            Stage::Propagation => "make the sandbox's mounts private".to_string(),
            Stage::WorkingDirectory => "re-enter the working directory".to_string(),
            Stage::Capabilities => "drop capabilities".to_string(),
            Stage::Landlock => "apply the Landlock ruleset".to_string(),
            Stage::Step(i) => self
                .step(i)
                .map_or_else(|| format!("apply mount step {i}"), MountStep::describe),
        };
        Some(format!("{what}: {errno}"))
    }
}

/// Where a plain `unshare` may make new namespaces (see [`enter_namespaces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Privilege {
    /// As root only; anyone else (or root, refused) makes a user namespace with them.
    AsRootOnly,
    /// In a user namespace joined (where the process has every capability and a nested one is
    /// not needed): a plain `unshare` only, its error the answer.
    InJoinedNamespace,
}

/// Enters the namespaces of `plans` (together) and makes their mounts in order, writing the
/// outcome of best-effort steps to `report`. A holder first takes a copy of the host's tree at
/// each of the plan's host directories into `held` (before anything is mounted over them). A
/// child with a user namespace made for it (`role`, [`MakeIn::Join`]) joins it first, when it
/// makes namespaces at all.
fn enter(
    plans: &[Option<&ChildPlan>],
    role: Role<'_>,
    held: &mut [Option<OwnedFd>],
    report: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let mut flags = 0;
    let mut net = false;
    for plan in plans.iter().flatten() {
        flags |= plan.namespace_flags();
        net |= plan.net_ns;
    }
    if flags != 0 {
        let privilege = match role.make_in() {
            MakeIn::Join(user) => {
                join_user_namespace(user.as_fd()).map_err(|e| failed(Stage::UserNamespace, e))?;
                Privilege::InJoinedNamespace
            }
            MakeIn::Joined => Privilege::InJoinedNamespace,
            MakeIn::Own => Privilege::AsRootOnly,
        };
        enter_namespaces(flags, privilege).map_err(|e| failed(Stage::Namespaces, e))?;
    }
    if net {
        loopback_up().map_err(|e| failed(Stage::Namespaces, e))?;
    }
    if flags & libc::CLONE_NEWNS == 0 {
        return Ok(());
    }
    // Host mounts keep propagating in; ours never propagate out.
    mounts::make_slave(c"/").map_err(|e| failed(Stage::Propagation, e))?;
    let mut index = 0;
    for plan in plans.iter().flatten() {
        for (dir, slot) in plan.host_dirs.iter().zip(held.iter_mut()) {
            let tree = mounts::copy_path(dir).map_err(|e| failed(Stage::Namespaces, e))?;
            *slot = Some(tree);
        }
        for step in &plan.steps {
            apply_step(step, plan, role, report, index)
                .map_err(|e| failed(Stage::Step(index), e))?;
            index += 1;
        }
    }
    reenter_cwd().map_err(|e| failed(Stage::WorkingDirectory, e))
}

/// What a holder of shared namespaces does ([`super::shared`]): enters `plan`'s namespaces with
/// a copy of the host's tree at each of its host directories taken into `held` first, and makes
/// its mounts but those on users' paths; outcomes go to `report`.
pub(crate) fn enter_as_holder(
    plan: &ChildPlan,
    held: &mut [Option<OwnedFd>],
    report: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    enter(&[Some(plan)], Role::Holder, held, report)
}

/// What the holder of a user namespace made for children that set up namespaces of their own
/// does ([`super::shared::user_namespace`]): makes a user namespace with its uid and gid mapped
/// to themselves, as [`enter_namespaces`] would for such a child. Raw system calls only.
pub(crate) fn enter_user_namespace() -> io::Result<()> {
    enter_namespaces(0, Privilege::AsRootOnly)
}

/// Takes, while still in the joined mount namespace (the copies of `trees` may be copied only
/// from there), a copy of each host path `binds` attaches later.
fn copy_host_paths(binds: &ChildPlan, trees: &[(CString, OwnedFd)]) -> io::Result<()> {
    for (index, step) in binds.steps.iter().enumerate() {
        if let MountStep::BindHost {
            tree,
            relative,
            slot,
            read_only,
            ..
        } = step
        {
            let copy = (|| {
                let (_, tree) = trees
                    .get(*tree)
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
                let source = mounts::open_path(tree.as_fd(), relative, Within::Beneath)?;
                let copy = mounts::copy_tree(source.as_fd(), true)?;
                if *read_only {
                    mounts::set_tree_attributes(copy.as_fd(), mounts::MOUNT_ATTR_RDONLY)?;
                }
                Ok(copy)
            })()
            .map_err(|e| failed(Stage::Step(index), e))?;
            binds.slots[*slot].put(copy);
        }
    }
    Ok(())
}

/// Namespaces set up once by a holder ([`super::shared`]) and a ruleset built outside the
/// child: what every child of a long-lived spawner joins instead of making its own.
#[derive(Debug)]
pub(crate) struct JoinPlan {
    /// Namespace descriptors with their `setns` type, in the order they are entered (a user
    /// namespace first: it gives the right to enter the others).
    pub namespaces: Vec<(OwnedFd, libc::c_int)>,
    /// The Landlock ruleset to restrict the child with.
    pub ruleset: Option<OwnedFd>,
    /// The mount points of the private mounts in the joined mount namespace (see
    /// [`ChildPlan::private_dirs`]).
    pub private_dirs: Vec<CString>,
    /// The joined mount namespace, seen through its root directory (taken from the holder
    /// before it exited), for lookups by threads that cannot join it.
    pub view: crate::protect::view::View,
    /// The holder's detached copies of the host's trees at the private `/tmp` and `/var/tmp`
    /// (taken in the joined mount namespace before they were mounted over, so a child in it may
    /// copy host paths out of them: Linux 6.15), with their directories.
    pub host_trees: Vec<(CString, OwnedFd)>,
}

impl JoinPlan {
    /// Whether the child joins a namespace of `kind` (`CLONE_NEWNS`, `CLONE_NEWNET`).
    pub fn joins(&self, kind: libc::c_int) -> bool {
        self.namespaces.iter().any(|&(_, k)| k == kind)
    }

    /// The capabilities a child sharing these namespaces must not keep.
    pub fn shared(&self) -> Drops {
        Drops {
            sys_admin: self.joins(libc::CLONE_NEWNS),
            net_admin: self.joins(libc::CLONE_NEWNET),
            ..Drops::default()
        }
    }
}

/// Joins the namespaces of `plan`; the working directory is re-entered by its path in the
/// joined mount namespace (entering one resets it to its root). Raw system calls only.
fn join(plan: &JoinPlan) -> io::Result<()> {
    let mut buf = [0u8; CWD_MAX];
    let cwd = match plan.joins(libc::CLONE_NEWNS) {
        true => Some(sys_fd::getcwd(&mut buf)?),
        false => None,
    };
    for (fd, kind) in &plan.namespaces {
        match *kind {
            libc::CLONE_NEWUSER => join_user_namespace(fd.as_fd())?,
            kind => rustix::thread::move_into_link_name_space(fd.as_fd(), namespace_type(kind))?,
        }
    }
    if let Some(cwd) = cwd {
        rustix::process::chdir(cwd)?;
    }
    Ok(())
}

/// Joins `user`, a user namespace another process made (a holder's), with `no_new_privs` set
/// first: in it the child has every capability until exec, and a file-capability binary it
/// executed would get them back there (the kernel honours file capabilities in any user
/// namespace), reaching every namespace that user namespace owns, those of the spawner's other
/// children included (moving an interface into another's network namespace). `no_new_privs`
/// limits such a binary to the permitted set held at exec, so [`Steps::apply`] also empties
/// that set last ([`give_up_capabilities`]). Raw system calls only.
fn join_user_namespace(user: BorrowedFd<'_>) -> io::Result<()> {
    no_new_privs()?;
    rustix::thread::move_into_link_name_space(user, Some(LinkNameSpaceType::User))?;
    Ok(())
}

/// Sets `no_new_privs` on the calling thread (a raw `prctl`): exec grants it no set-uid,
/// set-gid or file capability from then on. Landlock requires it as well ([`enforce`]).
fn no_new_privs() -> io::Result<()> {
    Ok(rustix::thread::set_no_new_privs(true)?)
}

/// The `setns` type of a namespace's `CLONE_NEW*` flag (`None`: any type).
fn namespace_type(kind: libc::c_int) -> Option<LinkNameSpaceType> {
    Some(match kind {
        libc::CLONE_NEWUSER => LinkNameSpaceType::User,
        libc::CLONE_NEWNS => LinkNameSpaceType::Mount,
        libc::CLONE_NEWNET => LinkNameSpaceType::Network,
        libc::CLONE_NEWIPC => LinkNameSpaceType::InterProcessCommunication,
        libc::CLONE_NEWUTS => LinkNameSpaceType::HostNameAndNISDomainName,
        libc::CLONE_NEWCGROUP => LinkNameSpaceType::ControlGroup,
        libc::CLONE_NEWPID => LinkNameSpaceType::ProcessID,
        libc::CLONE_NEWTIME => LinkNameSpaceType::Time,
        _ => return None,
    })
}

/// Drops `drops` from the bounding set (a process running as uid 0 has them until exec) and
/// from the effective, permitted and inheritable sets (the bounding set does not limit the
/// inheritable set, which a process running as uid 0 carries into its permitted set at exec).
/// Only a process running as uid 0 fails on a refusal: an ordinary user's command gets no
/// capability at exec anyway.
fn drop_capabilities(drops: Drops) -> io::Result<()> {
    if drops == Drops::default() {
        return Ok(());
    }
    // The bounding set does not limit the ambient set, which a non-root process keeps across
    // exec; a kernel without ambient capabilities (EINVAL) has nothing to clear.
    let _ = rustix::thread::clear_ambient_capability_set();
    let mut cleared = CapabilitySet::empty();
    for (capability, _) in drops.capabilities() {
        let capability = CapabilitySet::from_bits_retain(1 << capability);
        cleared |= capability;
        if let Err(e) = rustix::thread::remove_capability_from_bounding_set(capability) {
            refused_as_root(e.into())?;
        }
    }
    if let Err(e) = clear_capability_sets(cleared) {
        refused_as_root(e)?;
    }
    Ok(())
}

/// Empties the calling thread's effective, permitted, inheritable and ambient sets, as the last
/// step of a child that is not uid 0 and joined a user namespace another process made: there it
/// holds every capability until exec, and `no_new_privs` limits a file-capability binary it
/// executes to the permitted set it holds then, not to none: without this, a command started
/// directly as such a binary would get, say, `CAP_NET_ADMIN` over every namespace that user
/// namespace owns, the spawner's other children's network namespaces included. Its mounts and
/// Landlock are made by then; the command, running as a uid other than 0 there, needs none. The
/// bounding set stays as it is (a spawner's own drops from it afterwards are refused, and moot:
/// nothing can be gained through it with no permitted capability and `no_new_privs`); emptying
/// it would make the kernel refuse to execute such a binary (its file capabilities marked
/// effective) instead of running it without them. Raw system calls only.
fn give_up_capabilities() -> io::Result<()> {
    // A kernel without ambient capabilities (EINVAL) has none to clear.
    let _ = rustix::thread::clear_ambient_capability_set();
    clear_capability_sets(CapabilitySet::all())
}

/// `error` if the calling process runs as uid 0, else nothing.
fn refused_as_root(error: io::Error) -> io::Result<()> {
    match rustix::process::geteuid().is_root() {
        true => Err(error),
        false => Ok(()),
    }
}

/// Clears the capabilities `cleared` from the calling thread's effective, permitted and
/// inheritable sets (`capget`, `capset`). Raw system calls only.
fn clear_capability_sets(cleared: CapabilitySet) -> io::Result<()> {
    let mut sets = rustix::thread::capabilities(None)?;
    sets.effective.remove(cleared);
    sets.permitted.remove(cleared);
    sets.inheritable.remove(cleared);
    // Only lowers the sets, which is always allowed.
    rustix::thread::set_capabilities(None, sets)?;
    Ok(())
}

/// What [`build_ruleset`] does with a late rule whose path names nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absent {
    /// The build fails: the plan's own private directories are there by construction.
    Fails,
    /// The rule grants nothing (stricter, never weaker): a start-time layer built in a child
    /// whose own sandbox hides the directory (`/dev` hidden, so no `/dev/shm`).
    GrantsNothing,
}

/// Builds the ruleset of `plan`; a late rule's path is opened with `open_late` (in the child
/// after its mounts, or from outside through a holder's root), and so is an early rule's path
/// beneath one of `private_dirs` (the private mounts of namespaces the child joined, which cover
/// the inode the parent opened); a late rule's path that names nothing is as `absent` says. Raw
/// system calls only, so it also runs after fork.
pub(crate) fn build_ruleset(
    plan: &LandlockPlan,
    open_late: &dyn Fn(&CStr) -> io::Result<OwnedFd>,
    private_dirs: &[CString],
    absent: Absent,
) -> io::Result<OwnedFd> {
    let ruleset = landlock::create_ruleset(plan.handled)?;
    for rule in &plan.rules {
        if private_dirs.iter().any(|dir| is_beneath(&rule.path, dir)) {
            let fd = open_late(&rule.path)?;
            add_rule(&ruleset, &fd, rule.rights)?;
        } else {
            add_rule(&ruleset, &rule.fd, rule.rights)?;
        }
    }
    for (path, rights) in &plan.late_rules {
        match open_late(path) {
            Ok(fd) => add_rule(&ruleset, &fd, *rights)?,
            Err(e) if absent == Absent::GrantsNothing && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ruleset)
}

/// Adds the rules of `plan` on mounts kept in `slots` to `ruleset`, closing those descriptors.
fn add_slot_rules(ruleset: &OwnedFd, plan: &LandlockPlan, slots: &[FdSlot]) -> io::Result<()> {
    for &(slot, rights) in &plan.slot_rules {
        if let Some(fd) = slots[slot].take() {
            add_rule(ruleset, &fd, rights)?;
        }
    }
    Ok(())
}

/// Whether `path` is `dir` or beneath it (byte comparison of canonical paths, no allocation).
fn is_beneath(path: &CStr, dir: &CStr) -> bool {
    let (path, dir) = (path.to_bytes(), dir.to_bytes());
    path.starts_with(dir) && (path.len() == dir.len() || path.get(dir.len()) == Some(&b'/'))
}

/// Restricts the calling process with the ruleset of `plan`, a plan of its own, built now (its
/// late rules on its fresh mounts) with the rules on the mounts kept in its slots. Raw system
/// calls only.
fn restrict_own(plan: &ChildPlan) -> io::Result<()> {
    match &plan.landlock {
        Some(landlock) => {
            let ruleset = build_ruleset(landlock, &open_path, &[], Absent::Fails)?;
            add_slot_rules(&ruleset, landlock, &plan.slots)?;
            enforce(&ruleset)
        }
        None => Ok(()),
    }
}

/// `no_new_privs`, then `landlock_restrict_self` with `ruleset` (the calling thread only, for
/// good). Raw system calls only.
pub(crate) fn enforce(ruleset: &OwnedFd) -> io::Result<()> {
    no_new_privs()?;
    landlock::restrict_self(ruleset.as_fd())
}

/// `open(path, O_PATH)`. Raw system call only.
pub(crate) fn open_path(path: &CStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `landlock_add_rule` of a path-beneath rule: `rights` beneath the file or directory `fd`.
fn add_rule(ruleset: &OwnedFd, fd: &OwnedFd, rights: u64) -> io::Result<()> {
    landlock::add_path_beneath_rule(ruleset.as_fd(), fd.as_fd(), rights)
}

fn apply_step(
    step: &MountStep,
    plan: &ChildPlan,
    role: Role<'_>,
    report: Option<BorrowedFd<'_>>,
    index: usize,
) -> io::Result<()> {
    let slots = &plan.slots;
    match step {
        MountStep::UserPath(_) if matches!(role, Role::Holder) => Ok(()),
        MountStep::UserPath(step) => apply_step(step, plan, role, report, index),
        MountStep::Keep {
            path,
            slot,
            identity,
            best_effort,
        } => match keep(path, *identity) {
            Ok(tree) => {
                slots[*slot].put(tree);
                Ok(())
            }
            Err(_) if *best_effort => Ok(()),
            Err(e) => Err(e),
        },
        MountStep::ReadOnly { path } => {
            let target = mounts::open_path(CWD, path, Within::Anywhere)?;
            mounts::make_read_only(target.as_fd())
        }
        MountStep::Hide { path } => {
            let target = mounts::open_path(CWD, path, Within::Anywhere)?;
            mounts::cover(target.as_fd())
        }
        MountStep::Expose { path, slot } => match slots[*slot].take() {
            Some(tree) => mounts::attach_at(tree.as_fd(), path),
            None => cover_host_mount(path, report, index),
        },
        MountStep::Tmpfs { path } => mounts::private_tmpfs(path),
        MountStep::Overlay { target, data } => mounts::mount(
            c"overlay",
            target,
            c"overlay",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(data),
        ),
        MountStep::Bind { source, target } => {
            let tree = mounts::copy_path(source)?;
            mounts::set_tree_attributes(
                tree.as_fd(),
                mounts::MOUNT_ATTR_NOSUID | mounts::MOUNT_ATTR_NODEV,
            )?;
            mounts::attach_at(tree.as_fd(), target)
        }
        MountStep::Mqueue { path, slot } => {
            let fd = mounts::mqueue()?;
            let attached = match path {
                Some(path) => mounts::attach_at(fd.as_fd(), path),
                None => Ok(()),
            };
            // Kept in its slot (closed at exec, or once its Landlock rule is added) whatever
            // the attach's outcome.
            slots[*slot].put(fd);
            attached
        }
        MountStep::KeepSocket {
            path,
            slot,
            identity,
        } => {
            if let Ok(copy) = copy_socket(path, *identity) {
                slots[*slot].put(copy);
            }
            Ok(())
        }
        MountStep::ExposeSocket { path, slot } => {
            let bound = slots[*slot]
                .take()
                .is_some_and(|copy| expose_socket(copy.as_fd(), path).is_ok());
            if !bound {
                report::note(report, Outcome::SocketNotBound, index);
            }
            Ok(())
        }
        MountStep::MakeDir { path } => Ok(rustix::fs::mkdir(
            path.as_c_str(),
            Mode::from_raw_mode(0o755),
        )?),
        MountStep::MakeFile { path } => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
            rustix::fs::open(path.as_c_str(), flags, Mode::from_raw_mode(0o600))?;
            Ok(())
        }
        MountStep::FreshSysfs { submounts } => {
            mounts::mount(
                c"sysfs",
                c"/sys",
                c"sysfs",
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC | MountFlags::RDONLY,
                None,
            )?;
            for (path, slot) in submounts {
                let tree = slots[*slot]
                    .take()
                    .ok_or(io::Error::from_raw_os_error(libc::EBADF))?;
                mounts::attach_at(tree.as_fd(), path)?;
            }
            Ok(())
        }
        MountStep::BindHost { target, slot, .. } => {
            let copy = slots[*slot]
                .take()
                .ok_or(io::Error::from_raw_os_error(libc::EBADF))?;
            let dir = mounts::is_dir(copy.as_fd())?;
            let point = mounts::open_mount_point(target, dir)?;
            mounts::attach(copy.as_fd(), point.as_fd())
        }
    }
}

/// Writes `n` in decimal at the start of `out` (at least 10 bytes); returns how many bytes.
fn write_decimal(out: &mut [u8], n: u32) -> usize {
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (n, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    len
}

/// A detached recursive copy of the tree at `path`, which must still be `identity`.
fn keep(path: &CStr, identity: Option<Identity>) -> io::Result<OwnedFd> {
    let source = mounts::open_path(CWD, path, Within::Anywhere)?;
    if let Some(expected) = identity {
        let st = mounts::stat(source.as_fd())?;
        if (st.st_dev, st.st_ino) != (expected.dev, expected.ino) {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
    }
    mounts::copy_tree(source.as_fd(), true)
}

/// Covers the mount point `path` of a host mount that could not be kept (see
/// [`MountStep::Expose`]) and reports which it was.
fn cover_host_mount(path: &CStr, report: Option<BorrowedFd<'_>>, index: usize) -> io::Result<()> {
    let target = match mounts::open_path(CWD, path, Within::Anywhere) {
        Ok(target) => target,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
            ) =>
        {
            report::note(report, Outcome::MountUnreachable, index);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    mounts::cover(target.as_fd())?;
    report::note(report, Outcome::MountCovered, index);
    Ok(())
}

/// A detached, read-only copy of the mount of the socket file at `path` (still `identity`):
/// read-only, so the run cannot change the host's socket inode (its mode) through it.
fn copy_socket(path: &CStr, identity: Identity) -> io::Result<OwnedFd> {
    let source = socket_at(path)?;
    let st = mounts::stat(source.as_fd())?;
    if (st.st_dev, st.st_ino) != (identity.dev, identity.ino) {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    let copy = mounts::copy_tree(source.as_fd(), false)?;
    mounts::set_tree_attributes(copy.as_fd(), mounts::MOUNT_ATTR_RDONLY)?;
    Ok(copy)
}

/// Puts the socket copy `copy` over the socket file at `path` (still a socket).
fn expose_socket(copy: BorrowedFd<'_>, path: &CStr) -> io::Result<()> {
    let target = socket_at(path)?;
    mounts::attach(copy, target.as_fd())
}

/// The socket file at `path`, opened without following links.
fn socket_at(path: &CStr) -> io::Result<OwnedFd> {
    let fd = mounts::open_path(CWD, path, Within::Anywhere)?;
    if FileType::from_raw_mode(mounts::stat(fd.as_fd())?.st_mode) != FileType::Socket {
        return Err(io::Error::from_raw_os_error(libc::ENOTSOCK));
    }
    Ok(fd)
}

/// Re-enters the working directory by its path, so relative paths resolve through the new
/// mounts (the inherited working directory still points into the mount it was entered on).
fn reenter_cwd() -> io::Result<()> {
    let mut buf = [0u8; CWD_MAX];
    let cwd = sys_fd::getcwd(&mut buf)?;
    Ok(rustix::process::chdir(cwd)?)
}

/// Enters new namespaces (`flags`: `CLONE_NEWNS`, `CLONE_NEWNET`, `CLONE_NEWIPC`).
///
/// With [`Privilege::InJoinedNamespace`], in a joined user namespace, where the process has
/// every capability, a plain `unshare` is used and its error is the answer (a user namespace of
/// its own would hide it: the child of a non-dumpable spawner cannot write its maps, EACCES). As
/// root a plain `unshare` is tried first. Otherwise (or if that is refused) a
/// user namespace is created with them, which also empties the ambient capability set a
/// non-root caller may carry, mapping the caller's own uid and gid to themselves, so the command keeps
/// its identity and gains no privilege outside (its capabilities in the new user namespace are
/// dropped at exec because its uid is not 0 there). Files of other owners then show as the
/// overflow uid (65534).
fn enter_namespaces(flags: libc::c_int, privilege: Privilege) -> io::Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    if privilege == Privilege::InJoinedNamespace {
        return process::unshare(flags);
    }
    if euid == 0 && process::unshare(flags).is_ok() {
        return Ok(());
    }
    process::unshare(libc::CLONE_NEWUSER | flags)?;
    write_proc(c"/proc/self/setgroups", b"deny")?;
    let mut line = [0u8; 40];
    write_proc(c"/proc/self/uid_map", id_map_line(&mut line, euid))?;
    let mut line = [0u8; 40];
    write_proc(c"/proc/self/gid_map", id_map_line(&mut line, egid))
}

/// Formats "`id` `id` 1\n" into `buf` without allocating; returns the used part.
fn id_map_line(buf: &mut [u8; 40], id: u32) -> &[u8] {
    let mut at = 0;
    for _ in 0..2 {
        at += write_decimal(&mut buf[at..], id);
        buf[at] = b' ';
        at += 1;
    }
    buf[at] = b'1';
    buf[at + 1] = b'\n';
    &buf[..at + 2]
}

/// `open(path, O_WRONLY)`, one `write`, `close`. Async-signal-safe.
fn write_proc(path: &CStr, data: &[u8]) -> io::Result<()> {
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    match rustix::io::write(&fd, data)? {
        n if n == data.len() => Ok(()),
        _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

/// Sets `IFF_UP` on `lo` of the current network namespace through SIOCGIFFLAGS/SIOCSIFFLAGS on
/// an AF_INET datagram socket. Async-signal-safe.
fn loopback_up() -> io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let socket = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    process::set_interface_up(socket.as_fd(), c"lo")
}

/// Probe body (run in a forked child): the namespaces a plan with `mount_ns`/`net_ns` would
/// enter (an IPC namespace with the mount namespace, as private scratch has both), with `/` made
/// a slave and a tmpfs mounted on `/dev/shm` when `mount_ns` (the probe's namespaces die with
/// it), made in `user` when one is given (as a child of a spawner with a `UserNamespace` makes
/// them). Returns 0 or an errno.
pub(crate) fn probe_namespaces(mount_ns: bool, net_ns: bool, user: Option<&OwnedFd>) -> i32 {
    let result = (|| {
        enter(
            &[Some(&ChildPlan::namespaces_only(mount_ns, net_ns))],
            Role::Own(user),
            &mut [],
            None,
        )?;
        if mount_ns {
            mounts::private_tmpfs(c"/dev/shm")?;
        }
        Ok(())
    })();
    plain_errno(result)
}

/// Probe body (run in a forked child): a run's private mount and IPC namespaces with an overlay
/// mounted at `target` with the options `data` (the probe's namespaces die with it). Returns 0
/// or an errno.
pub(crate) fn probe_overlay(target: &CStr, data: &CStr) -> i32 {
    let result = enter(
        &[Some(&ChildPlan::namespaces_only(true, false))],
        Role::Own(None),
        &mut [],
        None,
    )
    .and_then(|()| {
        mounts::mount(
            c"overlay",
            target,
            c"overlay",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(data),
        )
    });
    plain_errno(result)
}

/// Probe body (run in a forked child): joins `plan`'s namespaces and takes a copy of its first
/// host tree, as a child binding a host path does (Linux 6.15 lets a process copy a detached
/// tree made in its own mount namespace). Returns 0 or an errno.
pub(crate) fn probe_host_copy(plan: &JoinPlan) -> i32 {
    let result = join(plan).and_then(|()| match plan.host_trees.first() {
        Some((_, tree)) => mounts::copy_tree(tree.as_fd(), false).map(drop),
        None => Ok(()),
    });
    plain_errno(result)
}

/// The errno of `result` (a failure code's own errno).
fn plain_errno(result: io::Result<()>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            let code = e.raw_os_error().unwrap_or(libc::EIO);
            report::decode(code)
                .and_then(|(_, errno)| errno.raw_os_error())
                .unwrap_or(code)
        }
    }
}

impl ChildPlan {
    /// A plan of new namespaces only (an IPC one with a mount one), nothing mounted in them: a
    /// probe's (nothing here allocates), or the base of one that adds its steps.
    pub(crate) fn namespaces_only(mount_ns: bool, net_ns: bool) -> ChildPlan {
        ChildPlan {
            mount_ns,
            net_ns,
            ipc_ns: mount_ns,
            steps: Vec::new(),
            slots: Vec::new(),
            protective_mounts: false,
            narrows_host: false,
            private_dirs: Vec::new(),
            host_dirs: Vec::new(),
            landlock: None,
            report: LentFd::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::id_map_line;

    #[test]
    fn id_map_lines_are_formatted_without_allocation() {
        let mut buf = [0u8; 40];
        assert_eq!(id_map_line(&mut buf, 0), b"0 0 1\n");
        let mut buf = [0u8; 40];
        assert_eq!(id_map_line(&mut buf, 65534), b"65534 65534 1\n");
        let mut buf = [0u8; 40];
        assert_eq!(
            id_map_line(&mut buf, u32::MAX),
            b"4294967295 4294967295 1\n"
        );
    }
}
