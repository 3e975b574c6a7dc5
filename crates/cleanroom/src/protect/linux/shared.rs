//! Namespaces set up once and shared by every child of a long-lived spawner (the exec-server's
//! environment): a forked holder enters the namespaces of a [`ChildPlan`] and makes its mounts,
//! the parent opens them through `/proc/<holder>/ns/*` and builds the Landlock ruleset (rules on
//! fresh mounts opened through `/proc/<holder>/root`), then lets the holder exit. The descriptors
//! of the returned [`JoinPlan`] keep the namespaces alive; each child only joins them.
//!
//! Invariant: the holder runs only async-signal-safe code (the parent may be multi-threaded)
//! and exits as soon as the parent's end of the release pipe closes, whatever becomes of the
//! parent; the parent reaps exactly that pid, on success and on failure (so nothing else in the
//! process may reap children with `waitpid(-1)` meanwhile).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::fs::{Mode, OFlags};

use super::child::{self, ChildPlan, JoinPlan};

/// Sets up the namespaces and mounts of `plan` in a holder and returns what a child needs to
/// join them (a plan without namespaces needs no holder: only its ruleset is built).
pub(crate) fn establish(plan: &ChildPlan) -> io::Result<JoinPlan> {
    if !plan.mount_ns && !plan.net_ns {
        return open_joined(plan, None);
    }
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    // SAFETY: the child runs only `hold` (raw system calls on the plan and the pipes) and
    // `_exit`, never returning into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: the pipe ends are open descriptors of this (forked) process.
        unsafe { hold(plan, ready_write.as_raw_fd(), &release_read, &release_write) };
    }
    drop((ready_write, release_read));
    let joined = read_errno(&ready_read).and_then(|()| open_joined(plan, Some(pid)));
    drop(release_write);
    reap(pid)?;
    joined
}

/// The holder: enters `plan`'s namespaces, reports the errno (0 on success) on `ready`, then
/// waits for EOF on `release` and exits.
///
/// # Safety
/// Call only in a freshly forked child; `ready` and the release ends must be open.
unsafe fn hold(plan: &ChildPlan, ready: RawFd, release: &OwnedFd, release_write: &OwnedFd) -> ! {
    // SAFETY: the parent's write end; ours must close or the read below never sees EOF.
    unsafe { libc::close(release_write.as_raw_fd()) };
    let errno = child::enter(plan, child::Privilege::AsRootOnly)
        .err()
        .map_or(0, |e| e.raw_os_error().unwrap_or(libc::EIO));
    let bytes = errno.to_ne_bytes();
    // SAFETY: `bytes` is a valid buffer of its length; `ready` is open.
    unsafe { libc::write(ready, bytes.as_ptr().cast(), bytes.len()) };
    let mut byte = 0u8;
    loop {
        // SAFETY: one byte into a local; EOF comes when the parent lets go (or dies).
        let got = unsafe { libc::read(release.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
        // SAFETY: reads this thread's errno.
        if got == 0 || (got < 0 && unsafe { *libc::__errno_location() } != libc::EINTR) {
            break;
        }
    }
    // SAFETY: terminates the holder without running atexit handlers or destructors.
    unsafe { libc::_exit(0) }
}

/// Opens the namespaces of `holder` (a user namespace first when it made one) and builds the
/// ruleset, its late rules opened through the holder's root (or as they are, without one).
fn open_joined(plan: &ChildPlan, holder: Option<libc::pid_t>) -> io::Result<JoinPlan> {
    let mut namespaces = Vec::new();
    let mut root = String::new();
    if let Some(pid) = holder {
        let ns = |name: &str| open_proc(&format!("/proc/{pid}/ns/{name}"));
        let user = ns("user")?;
        let own_user = open_proc("/proc/self/ns/user")?;
        if rustix::fs::fstat(&user)?.st_ino != rustix::fs::fstat(&own_user)?.st_ino {
            namespaces.push((user, libc::CLONE_NEWUSER));
        }
        if plan.mount_ns {
            namespaces.push((ns("mnt")?, libc::CLONE_NEWNS));
        }
        if plan.net_ns {
            namespaces.push((ns("net")?, libc::CLONE_NEWNET));
        }
        root = format!("/proc/{pid}/root");
    }
    let ruleset = match &plan.landlock {
        Some(landlock) => Some(child::build_ruleset(landlock, &|path: &CStr| {
            let mut full = root.as_bytes().to_vec();
            full.extend_from_slice(path.to_bytes());
            child::open_path(&CString::new(full).map_err(io::Error::other)?)
        })?),
        None => None,
    };
    Ok(JoinPlan {
        namespaces,
        ruleset,
    })
}

fn open_proc(path: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Reads the holder's 4-byte errno: `Ok` for 0; EOF (the holder died first) is an error too.
fn read_errno(ready: &OwnedFd) -> io::Result<()> {
    let mut bytes = [0u8; 4];
    let mut got = 0;
    while got < bytes.len() {
        match rustix::io::read(ready, &mut bytes[got..]) {
            Ok(0) => {
                return Err(io::Error::other(
                    "the namespace holder died before it was ready",
                ))
            }
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match i32::from_ne_bytes(bytes) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Waits for the holder (exactly that pid).
fn reap(pid: libc::pid_t) -> io::Result<()> {
    loop {
        let mut status = 0;
        // SAFETY: waits for the specific child we forked; `status` is a valid out-pointer.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
