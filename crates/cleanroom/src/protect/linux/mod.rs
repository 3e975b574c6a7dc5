//! Linux kernel side of protection: Landlock detection and ruleset creation, the code that runs
//! in the child between fork and exec ([`child`], with its mount primitives in `mounts` and what
//! it tells the parent in [`report`]), namespaces set up once for many children ([`shared`]),
//! the listening unix sockets ([`sock_diag`]), and small fork-based probes used by the sandbox
//! compiler and `doctor`.
//!
//! Invariant: everything that runs after fork (the child plan, the holder, the probe bodies: the
//! child programs of `sys::linux`, which forks them) makes only raw, async-signal-safe system
//! calls on data prepared before the fork or on the stack; it never allocates, locks or touches
//! Rust's standard I/O. The system calls rustix lacks are `sys::linux`'s.

pub(crate) mod child;
mod mounts;
pub(crate) mod report;
pub(crate) mod shared;
pub(crate) mod sock_diag;

use std::ffi::CStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{Access as _, AccessFs, ABI};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::rule::Access;
use super::view::View;
use crate::error::{Error, Result};
use crate::sys::linux::{fork, landlock as sys_landlock, process};

/// The newest Landlock ABI whose filesystem semantics this module was written and tested
/// against. A newer kernel is used at this level (the ruleset stays compatible; newer access
/// rights are simply not handled).
pub(crate) const NEWEST_VETTED_ABI: u32 = 7;

/// The kernel's Landlock ABI, asked with `landlock_create_ruleset(NULL, 0, VERSION)`.
///
/// `Err` carries why Landlock is not there (built without it, disabled at boot, blocked by a
/// seccomp filter, ...).
pub(crate) fn landlock_abi() -> std::result::Result<u32, String> {
    let err = match sys_landlock::abi_version() {
        Ok(abi) if abi >= 1 => return Ok(abi),
        Ok(_) => io::Error::from_raw_os_error(libc::EINVAL),
        Err(err) => err,
    };
    Err(match err.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel was built without Landlock (ENOSYS)".to_string(),
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built in but disabled at boot (EOPNOTSUPP; add landlock to lsm=)"
                .to_string()
        }
        _ => format!("landlock_create_ruleset failed: {err}"),
    })
}

/// The landlock crate's ABI for `abi`, capped at [`NEWEST_VETTED_ABI`]. Its write-side rights
/// are what the ruleset handles: create, remove, write, plus `Refer` (ABI 2), `Truncate` (ABI 3)
/// and `IoctlDev` (ABI 5).
fn landlock_abi_value(abi: u32) -> ABI {
    ABI::from(i32::try_from(abi.min(NEWEST_VETTED_ABI)).unwrap_or(0))
}

/// One path the child may write beneath.
#[derive(Debug)]
pub(crate) struct Grant {
    /// An `O_PATH` descriptor of the granted file or directory.
    pub fd: OwnedFd,
    /// Whether it is a directory (files only take file rights).
    pub dir: bool,
}

/// Opens `path` for a Landlock rule without following a final symlink, and says whether it is
/// a directory. `Ok(None)` for symlinks (a rule on a link's inode would be meaningless, and
/// following it could grant a protected target) and for paths that vanished since they were
/// listed (no rule is stricter, never weaker).
pub(crate) fn open_for_rule(view: &View, path: &Path) -> Result<Option<Grant>> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW;
    let open = |flags| view.open_path(path, flags, Mode::empty(), ResolveFlags::empty());
    let not_found = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    // Most entries are directories: an O_DIRECTORY open proves it of the opened inode itself
    // (a symlink or file fails with ENOTDIR), so no fstat is needed for them.
    match open(flags | OFlags::DIRECTORY) {
        Ok(fd) => return Ok(Some(Grant { fd, dir: true })),
        Err(e) if not_found(&e) => return Ok(None),
        Err(_) => {}
    }
    let fd = match open(flags) {
        Ok(fd) => fd,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(Error::io("open for a Landlock rule", path, e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| Error::io("stat", path, e))?;
    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    Ok(match kind {
        rustix::fs::FileType::Symlink => None,
        rustix::fs::FileType::Directory => Some(Grant { fd, dir: true }),
        _ => Some(Grant { fd, dir: false }),
    })
}

/// The Landlock access masks for `abi`, as the child passes them to the kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rights {
    /// What the ruleset handles: the write side (create, remove, write, plus `Refer` from ABI
    /// 2, `Truncate` from ABI 3 and `IoctlDev` from ABI 5), and with reads handled also the read
    /// side (read files, list directories, execute).
    pub handled: u64,
    read: u64,
    file: u64,
}

impl Rights {
    pub fn new(abi: u32, handle_reads: bool) -> Rights {
        let level = landlock_abi_value(abi);
        let handled = if handle_reads {
            AccessFs::from_all(level)
        } else {
            AccessFs::from_write(level)
        };
        Rights {
            handled: handled.bits(),
            read: (handled & AccessFs::from_read(level)).bits(),
            file: AccessFs::from_file(level).bits(),
        }
    }

    /// The rights a rule of `access` allows beneath a directory (`dir`) or on a file.
    pub fn of(&self, access: Access, dir: bool) -> u64 {
        let rights = match access {
            Access::None => 0,
            Access::Read => self.read,
            Access::Write => self.handled,
        };
        if dir {
            rights
        } else {
            rights & self.file
        }
    }
}

/// What a probe child tries: the closed set of this module's probe bodies, each a child
/// program (raw, async-signal-safe system calls on data prepared before the fork).
pub(crate) enum Probe<'a> {
    /// The network isolation `run --net none` would set up.
    NetNs,
    /// An unprivileged-style user namespace.
    UserNs,
    /// Becoming a child subreaper.
    Subreaper,
    /// A private mount namespace and/or network namespace ([`child::probe_namespaces`]), made
    /// in `user` when one is given.
    Namespaces {
        mount: bool,
        net: bool,
        user: Option<&'a OwnedFd>,
    },
    /// An overlay of `target` with the options `data` ([`child::probe_overlay`]).
    Overlay { target: &'a CStr, data: &'a CStr },
    /// Copies of the host's trees in a joined namespace ([`child::probe_host_copy`]).
    HostCopy(&'a child::JoinPlan),
}

impl Probe<'_> {
    /// Runs the probe's body in the calling (child) process: 0 or an errno.
    fn body(&self) -> i32 {
        match self {
            Probe::NetNs => child::probe_namespaces(false, true, None),
            Probe::UserNs => errno_of(process::unshare(libc::CLONE_NEWUSER)),
            Probe::Subreaper => {
                let me = rustix::process::getpid();
                errno_of(rustix::process::set_child_subreaper(Some(me)).map_err(io::Error::from))
            }
            Probe::Namespaces { mount, net, user } => child::probe_namespaces(*mount, *net, *user),
            Probe::Overlay { target, data } => child::probe_overlay(target, data),
            Probe::HostCopy(plan) => child::probe_host_copy(plan),
        }
    }
}

/// Runs `probe` in a forked child and returns its result: `Ok` when its body returned 0, else
/// the errno it returned. The child exits with `_exit` and never returns into Rust code; the
/// parent reaps exactly that pid.
pub(crate) fn probe_in_child(probe: Probe<'_>) -> io::Result<()> {
    // SAFETY: every probe body is a child program (raw, async-signal-safe system calls on data
    // prepared before the fork), the contract of `fork`.
    #[allow(unsafe_code)]
    let pid = unsafe {
        fork::fork(|_| match probe.body() {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        })
    }?;
    match fork::wait_for(pid)?.exit_status() {
        Some(0) => Ok(()),
        Some(errno) => Err(io::Error::from_raw_os_error(errno)),
        None => Err(io::Error::other("the probe child was killed by a signal")),
    }
}

/// Whether this process may mount (so a child of it, as root, can set up a private mount
/// namespace), asked without changing anything: a propagation change with two contradictory
/// flags passes the security hooks (Landlock refuses every mount with `EPERM`) and the
/// capability check, then fails with `EINVAL` before it acts. `Err` is the errno.
pub(crate) fn may_mount_here() -> std::result::Result<(), i32> {
    use rustix::mount::MountPropagationFlags;
    // NULL source, type and data: the call cannot succeed (MS_SHARED and MS_SLAVE together are
    // invalid), so nothing changes.
    let contradictory = MountPropagationFlags::SHARED | MountPropagationFlags::DOWNSTREAM;
    match rustix::mount::mount_change(c"/", contradictory) {
        Ok(()) | Err(Errno::INVAL) => Ok(()),
        Err(errno) => Err(errno.raw_os_error()),
    }
}

pub(crate) fn errno_of(result: io::Result<()>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// `pidfd_open` on our own pid (the descriptor is closed at once).
pub(crate) fn probe_pidfd() -> io::Result<()> {
    rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )?;
    Ok(())
}
