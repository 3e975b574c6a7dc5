//! Linux kernel side of protection: Landlock detection and ruleset creation, the code that runs
//! in the child between fork and exec, and small fork-based probes used by `prepare` and
//! `doctor`.
//!
//! Invariant: everything that runs after fork (`apply_in_child`, the probe bodies) makes only
//! raw, async-signal-safe system calls on data prepared before the fork or on the stack; it never
//! allocates, locks or touches Rust's standard I/O.

use std::ffi::CStr;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;

use landlock::{
    AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI,
};
use rustix::fs::{Mode, OFlags};

use crate::{Error, Result};

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>` (not exported by libc).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// The newest Landlock ABI whose filesystem semantics this module was written and tested
/// against. A newer kernel is used at this level (the ruleset stays compatible; newer access
/// rights are simply not handled).
pub(crate) const NEWEST_VETTED_ABI: u32 = 7;

/// The kernel's Landlock ABI, asked with `landlock_create_ruleset(NULL, 0, VERSION)`.
///
/// `Err` carries why Landlock is not there (built without it, disabled at boot, blocked by a
/// seccomp filter, ...).
pub(crate) fn landlock_abi() -> std::result::Result<u32, String> {
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the kernel only returns
    // the ABI number (or an error); no memory is read or written.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc >= 1 {
        return Ok(u32::try_from(rc).unwrap_or(u32::MAX));
    }
    let err = io::Error::last_os_error();
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
pub(crate) fn open_for_rule(path: &Path) -> Result<Option<Grant>> {
    let fd = match rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
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

/// Creates a Landlock ruleset handling the write-side rights of `abi` and allowing them beneath
/// every grant (files get the file subset), and devices the file rights only.
///
/// Returns the ruleset's descriptor, to be passed to `landlock_restrict_self` in the child.
pub(crate) fn create_ruleset(abi: u32, grants: &[Grant], devices: &[Grant]) -> Result<OwnedFd> {
    let level = landlock_abi_value(abi);
    let handled = AccessFs::from_write(level);
    let file_rights = handled & AccessFs::from_file(level);
    let landlock_err = |e: landlock::RulesetError| Error::Unsupported {
        what: "Landlock protection",
        reason: format!("cannot build the ruleset: {e}"),
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)
        .map_err(landlock_err)?
        .create()
        .map_err(landlock_err)?;
    for grant in grants {
        let access = if grant.dir { handled } else { file_rights };
        ruleset = ruleset
            .add_rule(PathBeneath::new(&grant.fd, access))
            .map_err(landlock_err)?;
    }
    for device in devices {
        ruleset = ruleset
            .add_rule(PathBeneath::new(&device.fd, file_rights))
            .map_err(landlock_err)?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| Error::Unsupported {
        what: "Landlock protection",
        reason: "the landlock crate did not create a ruleset on this kernel".into(),
    })
}

/// What the child does between fork and exec, in this order: enter a network namespace with
/// loopback up (if `isolate_net`), then `no_new_privs` and `landlock_restrict_self` (if a
/// ruleset is given). Namespaces come first because a Landlock domain may forbid writing
/// `/proc/self/uid_map`.
///
/// Runs after fork: raw system calls only.
pub(crate) fn apply_in_child(isolate_net: bool, ruleset: Option<RawFd>) -> io::Result<()> {
    if isolate_net {
        enter_loopback_netns()?;
    }
    if let Some(fd) = ruleset {
        // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a Landlock ruleset descriptor owned by the parent's `Protection`
        // (kept alive by the hook's Arc); flags 0. Integer arguments only.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Moves the calling process into a new network namespace whose only interface, `lo`, is up.
///
/// With `CAP_SYS_ADMIN` (root) a plain `CLONE_NEWNET` is used. Otherwise (or if that is refused)
/// a user namespace is created with it, mapping the caller's own uid and gid to themselves, so
/// the command keeps its identity and gains no privilege outside (its capabilities in the new
/// user namespace are dropped at exec because its uid is not 0 there).
///
/// Async-signal-safe: raw system calls and stack buffers only.
fn enter_loopback_netns() -> io::Result<()> {
    // SAFETY: geteuid/getegid/unshare take and return integers only.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: as above.
    let plain = euid == 0 && unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0;
    if !plain {
        // SAFETY: as above.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        write_proc(c"/proc/self/setgroups", b"deny")?;
        let mut line = [0u8; 40];
        write_proc(c"/proc/self/uid_map", id_map_line(&mut line, euid))?;
        let mut line = [0u8; 40];
        write_proc(c"/proc/self/gid_map", id_map_line(&mut line, egid))?;
    }
    loopback_up()
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

/// Runs `body` in a forked child and returns its result: `Ok` when it returned 0, else the errno
/// it returned. The child exits with `_exit` and never returns into Rust code; the parent reaps
/// exactly that pid.
///
/// `body` must be async-signal-safe (the parent may be multi-threaded).
pub(crate) fn probe_in_child(body: fn() -> i32) -> io::Result<()> {
    // SAFETY: the child runs only `body` (async-signal-safe by contract) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = body();
        // SAFETY: terminates the child without running atexit handlers or destructors.
        unsafe { libc::_exit(code.clamp(0, 255)) };
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the specific child we forked; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    } else {
        Err(io::Error::other("the probe child was killed by a signal"))
    }
}

/// Probe body: the network isolation `run --net none` would set up. Returns 0 or an errno.
pub(crate) fn probe_netns() -> i32 {
    errno_of(enter_loopback_netns())
}

/// Probe body: an unprivileged-style user namespace. Returns 0 or an errno.
pub(crate) fn probe_userns() -> i32 {
    // SAFETY: unshare takes an integer only.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0 {
        0
    } else {
        errno_of(Err(io::Error::last_os_error()))
    }
}

/// Probe body: becoming a child subreaper. Returns 0 or an errno.
pub(crate) fn probe_subreaper() -> i32 {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        0
    } else {
        errno_of(Err(io::Error::last_os_error()))
    }
}

fn errno_of(result: io::Result<()>) -> i32 {
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
