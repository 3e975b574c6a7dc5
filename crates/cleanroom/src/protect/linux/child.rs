//! What a sandboxed child does between fork and exec: enter its namespaces, set up its mounts,
//! drop what could undo them, restrict itself with Landlock ([`apply`]); or join namespaces a
//! holder set up once and restrict itself with a ruleset built outside ([`join`]).
//!
//! Invariant: everything here runs after fork, in a child of a possibly multi-threaded parent,
//! so it makes only raw, async-signal-safe system calls on data prepared before the fork (paths
//! as `CString`s, descriptor slots as atomics) or on the stack; it never allocates, locks or
//! touches Rust's standard I/O. The order is fixed: namespaces, then mounts, then capabilities,
//! then Landlock, because a Landlock domain forbids every later mount and may forbid writing
//! `/proc/self/uid_map`.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// `CAP_NET_ADMIN` and `CAP_SYS_ADMIN` from `<linux/capability.h>`.
const CAP_NET_ADMIN: libc::c_int = 12;
const CAP_SYS_ADMIN: libc::c_int = 21;
/// `PR_CAP_AMBIENT` and `PR_CAP_AMBIENT_CLEAR_ALL` from `<linux/prctl.h>`.
const PR_CAP_AMBIENT: libc::c_int = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
/// `AT_RECURSIVE` from `<linux/fcntl.h>`.
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// `OPEN_TREE_CLONE` and `OPEN_TREE_CLOEXEC` from `<linux/mount.h>`.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
/// `MOVE_MOUNT_F_EMPTY_PATH` from `<linux/mount.h>`.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
/// `MOUNT_ATTR_RDONLY` and `MOUNT_ATTR_NODEV` from `<linux/mount.h>`.
const MOUNT_ATTR_RDONLY: u64 = 1;
const MOUNT_ATTR_NODEV: u64 = 4;
/// `LANDLOCK_RULE_PATH_BENEATH` from `<linux/landlock.h>`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
/// The largest working directory the child re-enters after its mounts (PATH_MAX).
const CWD_MAX: usize = 4096;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `struct landlock_ruleset_attr`, first field only (the kernel accepts the shorter size).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ruleset the child builds for itself just before it restricts itself: the
/// rights it handles, rules on paths the parent opened, and rules on paths the child opens after
/// its mounts (a fresh tmpfs or sysfs has new inodes, and Landlock ignores the rules of the
/// mount points they cover).
#[derive(Debug)]
pub(crate) struct LandlockPlan {
    pub handled: u64,
    pub rules: Vec<(OwnedFd, u64)>,
    pub late_rules: Vec<(CString, u64)>,
}

/// One step of the child's mount setup, in order.
#[derive(Debug)]
pub(crate) enum MountStep {
    /// Takes a detached recursive copy of the tree at `path` as it is now (before any other
    /// step changed it) into descriptor slot `slot`, for [`MountStep::Expose`].
    Keep { path: CString, slot: usize },
    /// Bind-mounts `path` onto itself and makes the whole subtree read-only.
    ReadOnly { path: CString },
    /// Covers the directory `path` with an empty, read-only tmpfs with mode 000.
    HideDir { path: CString },
    /// Covers the file `path` with a bind mount of `/dev/null`, read-only and `nodev` (so
    /// opening it fails).
    HideFile { path: CString },
    /// Puts the copy kept in `slot` back at `path`, over whatever read-only mount covers it.
    Expose { path: CString, slot: usize },
    /// Mounts a fresh, private tmpfs (mode 1777) at `path` (`/dev/shm`).
    Tmpfs { path: CString },
    /// Creates the directory `path` (mode 0755) as a mount point inside our own tmpfs.
    MakeDir { path: CString },
    /// Creates the empty file `path` (mode 0600) as a mount point inside our own tmpfs.
    MakeFile { path: CString },
    /// Replaces `/sys` by a fresh sysfs of the child's network namespace, with the submounts of
    /// the old `/sys` (kept in their slots by earlier [`MountStep::Keep`]s) moved back onto it.
    FreshSysfs { submounts: Vec<(CString, usize)> },
}

/// Everything the child applies, prepared in the parent.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    /// Enter a new mount namespace (mounts propagate in from the host, never out).
    pub mount_ns: bool,
    /// Enter a new network namespace with loopback up.
    pub net_ns: bool,
    /// Mount steps, in order (only with `mount_ns`).
    pub steps: Vec<MountStep>,
    /// Descriptor slots of [`MountStep::Keep`].
    pub slots: Vec<AtomicI32>,
    /// The mounts carry protection: drop `CAP_SYS_ADMIN` from the bounding set, so a process
    /// running as uid 0 cannot clear the read-only flag (`mount_setattr`) or clone the mount
    /// tree below them (`open_tree`), which Landlock does not stop.
    pub protective_mounts: bool,
    /// The Landlock ruleset to restrict the child with.
    pub landlock: Option<LandlockPlan>,
}

impl ChildPlan {
    /// Whether the child has anything to do.
    pub fn is_empty(&self) -> bool {
        !self.mount_ns && !self.net_ns && self.landlock.is_none()
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
    /// Joins `outer`'s namespaces (not its ruleset), then sets `inner` up inside them: a
    /// process with a policy of its own that still belongs to `outer`'s cleanroom (it sees its
    /// `/dev/shm`).
    Within {
        outer: Arc<JoinPlan>,
        inner: Arc<ChildPlan>,
    },
}

/// Capabilities a child drops from its bounding set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Drops {
    /// `CAP_SYS_ADMIN`: its mounts carry protection, or it shares a mount namespace, which a
    /// process running as uid 0 could otherwise change for every other (`mount_setattr`,
    /// `open_tree`: Landlock refuses `mount` and `umount`, not these).
    pub sys_admin: bool,
    /// `CAP_NET_ADMIN`: it shares a network namespace.
    pub net_admin: bool,
}

impl Steps {
    /// Whether the child has anything to do.
    pub fn is_empty(&self) -> bool {
        match self {
            Steps::Own(plan) => plan.is_empty(),
            Steps::Join(plan) => plan.namespaces.is_empty() && plan.ruleset.is_none(),
            Steps::Within { .. } => false,
        }
    }

    /// What the child drops from its bounding set.
    pub fn drops(&self) -> Drops {
        match self {
            Steps::Own(plan) => Drops {
                sys_admin: plan.protective_mounts,
                net_admin: false,
            },
            Steps::Join(plan) => plan.shared(),
            Steps::Within { outer, inner } => {
                let shared = outer.shared();
                // A mount namespace of its own is a copy of the shared one: its mounts are its
                // own, their superblocks (the shared `/dev/shm`'s tmpfs) are not.
                Drops {
                    sys_admin: inner.protective_mounts || shared.sys_admin,
                    net_admin: shared.net_admin && !inner.net_ns,
                }
            }
        }
    }

    /// Applies the steps to the calling process: namespaces, then mounts, then capabilities,
    /// then Landlock. Runs after fork: raw system calls only.
    pub fn apply(&self) -> io::Result<()> {
        match self {
            Steps::Own(plan) => enter(plan, Privilege::AsRootOnly)?,
            Steps::Join(plan) => join(plan)?,
            Steps::Within { outer, inner } => {
                join(outer)?;
                enter(inner, Privilege::InJoinedNamespace)?;
            }
        }
        drop_capabilities(self.drops())?;
        match self {
            Steps::Own(plan) | Steps::Within { inner: plan, .. } => match &plan.landlock {
                Some(landlock) => enforce(&build_ruleset(landlock, &open_path)?),
                None => Ok(()),
            },
            Steps::Join(plan) => match &plan.ruleset {
                Some(ruleset) => enforce(ruleset),
                None => Ok(()),
            },
        }
    }
}

/// Where a plain `unshare` may make new namespaces (see [`enter_namespaces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Privilege {
    /// Only as root; anyone else makes a user namespace with them.
    AsRootOnly,
    /// Inside a joined namespace set: as root, or in the user namespace joined (where the
    /// process has every capability and a nested one is not needed).
    InJoinedNamespace,
}

/// Enters the namespaces of `plan` and makes its mounts: what a child with its own sandbox does
/// before it drops capabilities and restricts itself, and all a holder of shared namespaces
/// does ([`super::shared`]).
pub(crate) fn enter(plan: &ChildPlan, privilege: Privilege) -> io::Result<()> {
    if plan.mount_ns || plan.net_ns {
        let mut flags = 0;
        if plan.mount_ns {
            flags |= libc::CLONE_NEWNS;
        }
        if plan.net_ns {
            flags |= libc::CLONE_NEWNET;
        }
        enter_namespaces(flags, privilege)?;
    }
    if plan.net_ns {
        loopback_up()?;
    }
    if plan.mount_ns {
        // Host mounts keep propagating in; ours never propagate out.
        mount(None, c"/", None, libc::MS_REC | libc::MS_SLAVE, None)?;
        for step in &plan.steps {
            apply_step(step, &plan.slots)?;
        }
        reenter_cwd()?;
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
        }
    }
}

/// Joins the namespaces of `plan`; the working directory is re-entered by its path in the
/// joined mount namespace (entering one resets it to its root). Raw system calls only.
fn join(plan: &JoinPlan) -> io::Result<()> {
    let mut cwd = [0u8; CWD_MAX];
    let mount_ns = plan.joins(libc::CLONE_NEWNS);
    // SAFETY: `cwd` is a writable buffer of the given length; getcwd with a buffer does not
    // allocate.
    if mount_ns && unsafe { libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    for (fd, kind) in &plan.namespaces {
        // SAFETY: `fd` is an open namespace descriptor of type `kind`.
        if unsafe { libc::setns(fd.as_raw_fd(), *kind) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: getcwd succeeded, so `cwd` holds a NUL-terminated path.
    if mount_ns && unsafe { libc::chdir(cwd.as_ptr().cast()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drops `drops` from the bounding set (a process running as uid 0 has them until exec).
/// Only a process running as uid 0 fails on a refusal: an ordinary user's command gets no
/// capability at exec anyway.
fn drop_capabilities(drops: Drops) -> io::Result<()> {
    if drops != Drops::default() {
        // The bounding set does not limit the ambient set, which a non-root process keeps
        // across exec. SAFETY: prctl with integer arguments only; a kernel without ambient
        // capabilities (EINVAL) has nothing to clear.
        unsafe { libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    }
    let dropped = [
        (drops.sys_admin, CAP_SYS_ADMIN),
        (drops.net_admin, CAP_NET_ADMIN),
    ];
    for (_, capability) in dropped.into_iter().filter(|&(drop, _)| drop) {
        // SAFETY: prctl with PR_CAPBSET_DROP takes integer arguments only; geteuid takes none.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) } != 0
            && unsafe { libc::geteuid() } == 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Builds the ruleset of `plan`; a late rule's path is opened with `open_late` (in the child
/// after its mounts, or from outside through a holder's root). Raw system calls only, so it
/// also runs after fork.
pub(crate) fn build_ruleset(
    plan: &LandlockPlan,
    open_late: &dyn Fn(&CStr) -> io::Result<OwnedFd>,
) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: plan.handled,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size passed; flags 0.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: landlock_create_ruleset returned a new descriptor, ours alone.
    let ruleset = unsafe { OwnedFd::from_raw_fd(ruleset as RawFd) };
    for (fd, rights) in &plan.rules {
        add_rule(ruleset.as_raw_fd(), fd.as_raw_fd(), *rights)?;
    }
    for (path, rights) in &plan.late_rules {
        let fd = open_late(path)?;
        add_rule(ruleset.as_raw_fd(), fd.as_raw_fd(), *rights)?;
    }
    Ok(ruleset)
}

/// `no_new_privs`, then `landlock_restrict_self` with `ruleset`.
fn enforce(ruleset: &OwnedFd) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ruleset` is an open ruleset descriptor; flags 0.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `open(path, O_PATH)`. Raw system call only.
pub(crate) fn open_path(path: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated; O_PATH needs no mode.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open returned a new descriptor, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `landlock_add_rule` of a path-beneath rule: `rights` beneath the file or directory `fd`.
fn add_rule(ruleset: RawFd, fd: RawFd, rights: u64) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: fd,
    };
    // SAFETY: `attr` is a valid path-beneath attribute; `ruleset` and `fd` are open; flags 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn apply_step(step: &MountStep, slots: &[AtomicI32]) -> io::Result<()> {
    match step {
        MountStep::Keep { path, slot } => {
            let fd = open_tree(path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)?;
            slots[*slot].store(fd, Ordering::Relaxed);
            Ok(())
        }
        MountStep::ReadOnly { path } => {
            mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)?;
            set_attributes(path, MOUNT_ATTR_RDONLY)
        }
        MountStep::HideDir { path } => mount(
            Some(c"tmpfs"),
            path,
            Some(c"tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(c"size=4k,nr_inodes=1,mode=000"),
        ),
        MountStep::HideFile { path } => {
            mount(Some(c"/dev/null"), path, None, libc::MS_BIND, None)?;
            set_attributes(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV)
        }
        MountStep::Expose { path, slot } => move_from_slot(&slots[*slot], path),
        MountStep::Tmpfs { path } => mount_private_tmpfs(path),
        MountStep::MakeDir { path } => {
            // SAFETY: `path` is NUL-terminated.
            match unsafe { libc::mkdir(path.as_ptr(), 0o755) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        }
        MountStep::MakeFile { path } => {
            // SAFETY: `path` is NUL-terminated; O_CREAT takes the mode argument.
            let fd = unsafe {
                libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` is ours and closed exactly once.
            unsafe { libc::close(fd) };
            Ok(())
        }
        MountStep::FreshSysfs { submounts } => {
            mount(
                Some(c"sysfs"),
                c"/sys",
                Some(c"sysfs"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
                None,
            )?;
            for (path, slot) in submounts {
                move_from_slot(&slots[*slot], path)?;
            }
            Ok(())
        }
    }
}

/// Mounts a fresh tmpfs, world-writable with the sticky bit like `/dev/shm`, at `path`.
fn mount_private_tmpfs(path: &CStr) -> io::Result<()> {
    mount(
        Some(c"tmpfs"),
        path,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(c"mode=1777"),
    )
}

/// Moves the detached tree in `slot` onto `path` and closes its descriptor.
fn move_from_slot(slot: &AtomicI32, path: &CStr) -> io::Result<()> {
    let fd = slot.swap(-1, Ordering::Relaxed);
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: `fd` is a detached mount from open_tree; the empty path is NUL-terminated and
    // `path` is a NUL-terminated path. Integer and pointer arguments only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    let result = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: `fd` is ours (taken out of the slot) and closed exactly once.
    unsafe { libc::close(fd) };
    result
}

fn open_tree(path: &CStr, flags: libc::c_uint) -> io::Result<RawFd> {
    // SAFETY: `path` is NUL-terminated; integer flags.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd as RawFd)
    }
}

/// Sets `attributes` (read-only, no devices) on the mount at `path` and every mount below it.
fn set_attributes(path: &CStr, attributes: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` is a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is NULL or a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Re-enters the working directory by its path, so relative paths resolve through the new
/// mounts (the inherited working directory still points into the mount it was entered on).
fn reenter_cwd() -> io::Result<()> {
    let mut buf = [0u8; CWD_MAX];
    // SAFETY: `buf` is a writable buffer of the given length; getcwd with a buffer does not
    // allocate.
    if unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getcwd succeeded, so `buf` holds a NUL-terminated path.
    if unsafe { libc::chdir(buf.as_ptr().cast()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Enters new namespaces (`flags`: `CLONE_NEWNS` and/or `CLONE_NEWNET`).
///
/// As root (or, with [`Privilege::InJoinedNamespace`], in a joined user namespace, where the
/// process has every capability) a plain `unshare` is used. Otherwise (or if that is refused) a
/// user namespace is created with them, which also empties the ambient capability set a
/// non-root caller may carry, mapping the caller's own uid and gid to themselves, so the command keeps
/// its identity and gains no privilege outside (its capabilities in the new user namespace are
/// dropped at exec because its uid is not 0 there). Files of other owners then show as the
/// overflow uid (65534).
fn enter_namespaces(flags: libc::c_int, privilege: Privilege) -> io::Result<()> {
    // SAFETY: geteuid/getegid/unshare take and return integers only.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let plain = euid == 0 || privilege == Privilege::InJoinedNamespace;
    // SAFETY: as above.
    if plain && unsafe { libc::unshare(flags) } == 0 {
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    write_proc(c"/proc/self/setgroups", b"deny")?;
    let mut line = [0u8; 40];
    write_proc(c"/proc/self/uid_map", id_map_line(&mut line, euid))?;
    let mut line = [0u8; 40];
    write_proc(c"/proc/self/gid_map", id_map_line(&mut line, egid))
}

/// Formats "`id` `id` 1\n" into `buf` without allocating; returns the used part.
fn id_map_line(buf: &mut [u8; 40], id: u32) -> &[u8] {
    let mut digits = [0u8; 10];
    let mut n = id;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = 0;
    for _ in 0..2 {
        for i in (0..len).rev() {
            buf[at] = digits[i];
            at += 1;
        }
        buf[at] = b' ';
        at += 1;
    }
    buf[at] = b'1';
    buf[at + 1] = b'\n';
    &buf[..at + 2]
}

/// `open(path, O_WRONLY)`, one `write`, `close`. Async-signal-safe.
fn write_proc(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; O_WRONLY|O_CLOEXEC needs no mode argument.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `data` is a valid buffer of `data.len()` bytes; `fd` was just opened.
    let written = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let result = if written == data.len() as isize {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: `fd` is ours and closed exactly once.
    unsafe { libc::close(fd) };
    result
}

/// Sets `IFF_UP` on `lo` of the current network namespace through SIOCGIFFLAGS/SIOCSIFFLAGS on
/// an AF_INET datagram socket. Async-signal-safe.
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket takes integers only.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value (empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    req.ifr_name[0] = b'l' as libc::c_char;
    req.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: `req` is a valid ifreq naming "lo"; SIOCGIFFLAGS fills ifru_flags.
    let mut rc = unsafe { libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) };
    if rc == 0 {
        // SAFETY: SIOCGIFFLAGS succeeded, so ifru_flags is the initialised union member.
        unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: `req` is a valid ifreq; SIOCSIFFLAGS only reads it.
        rc = unsafe { libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) };
    }
    let result = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: `sock` is ours and closed exactly once.
    unsafe { libc::close(sock) };
    result
}

/// Probe body (run in a forked child): the namespaces a plan with `mount_ns`/`net_ns` would
/// enter, with `/` made a slave and a tmpfs mounted on `/dev/shm` when `mount_ns` (the probe's
/// namespaces die with it). Returns 0 or an errno.
pub(crate) fn probe_namespaces(mount_ns: bool, net_ns: bool) -> i32 {
    let plan = ChildPlan {
        mount_ns,
        net_ns,
        steps: Vec::new(),
        slots: Vec::new(),
        protective_mounts: false,
        landlock: None,
    };
    let result = (|| {
        enter(&plan, Privilege::AsRootOnly)?;
        if mount_ns {
            mount_private_tmpfs(c"/dev/shm")?;
        }
        Ok(())
    })();
    super::errno_of(result)
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
