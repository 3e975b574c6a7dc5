//! Namespaces set up once and shared by every child of a long-lived spawner (the exec-server's
//! environment): a forked holder enters the namespaces of a [`ChildPlan`], takes a copy of the
//! host's tree at each private `/tmp` and `/var/tmp` before it mounts over them (sent to the
//! parent over a socket: children bind host paths out of them), and makes its mounts but those
//! on users' paths; the parent opens them through `/proc/<holder>/ns/*` and builds the Landlock
//! ruleset (rules on fresh mounts, and beneath private ones, opened through
//! `/proc/<holder>/root`), then lets the holder exit. The descriptors of the returned
//! [`JoinPlan`] keep the namespaces and the copies alive; each child only joins them.
//!
//! Invariant: the holder runs only async-signal-safe code (the parent may be multi-threaded)
//! and exits as soon as the parent's end of the release pipe closes, whatever becomes of the
//! parent; the parent reaps exactly that pid, on success and on failure (so nothing else in the
//! process may reap children with `waitpid(-1)` meanwhile).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use rustix::fs::{Mode, OFlags};
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use super::child::{self, ChildPlan, JoinPlan};
use super::report;
use crate::protect::view::{self, View};

/// What [`establish`] set up: the namespaces to join, and how the holder's best-effort steps
/// turned out.
pub(crate) struct Established {
    pub plan: JoinPlan,
    pub outcomes: Vec<(report::Outcome, usize)>,
    /// Why a child cannot copy host paths out of the holder's copies of the host's trees
    /// (Linux before 6.15), when it cannot.
    pub no_host_copies: Option<io::Error>,
}

/// Sets up the namespaces and mounts of `plan` in a holder and returns what a child needs to
/// join them (a plan without namespaces needs no holder: only its ruleset is built).
pub(crate) fn establish(plan: &ChildPlan) -> io::Result<Established> {
    if !plan.mount_ns && !plan.net_ns && !plan.ipc_ns {
        return Ok(Established {
            plan: open_joined(plan, None, Vec::new())?,
            outcomes: Vec::new(),
            no_host_copies: None,
        });
    }
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    let (trees_read, trees_write) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: the child runs only `hold` (raw system calls on the plan, the pipes and the
    // socket) and `_exit`, never returning into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let ends = HolderEnds {
            ready: ready_write.as_raw_fd(),
            trees: trees_write.as_raw_fd(),
            release: release_read.as_raw_fd(),
            release_write: release_write.as_raw_fd(),
        };
        // SAFETY: the ends are open descriptors of this (forked) process.
        unsafe { hold(plan, ends) };
    }
    drop((ready_write, release_read, trees_write));
    let joined = report::read(&ready_read).and_then(|report| {
        match report.end {
            Some(0) => {}
            Some(errno) => return Err(io::Error::from_raw_os_error(errno)),
            None => {
                return Err(io::Error::other(
                    "the namespace holder died before it was ready",
                ))
            }
        }
        let trees = receive_trees(&trees_read, plan)?;
        let joined = open_joined(plan, Some(pid), trees)?;
        Ok((joined, report.outcomes))
    });
    drop(release_write);
    reap(pid)?;
    let (plan, outcomes) = joined?;
    let no_host_copies = match plan.host_trees.is_empty() {
        true => None,
        false => super::probe_in_child(|| child::probe_host_copy(&plan)).err(),
    };
    Ok(Established {
        plan,
        outcomes,
        no_host_copies,
    })
}

/// The descriptors a holder uses.
struct HolderEnds {
    /// Its report (best-effort outcomes, then the errno: 0 when ready).
    ready: RawFd,
    /// Where it sends its copies of the host's trees.
    trees: RawFd,
    /// EOF here lets it exit.
    release: RawFd,
    /// The parent's end of `release`, closed in the holder.
    release_write: RawFd,
}

/// The holder: enters `plan`'s namespaces (copying the host's trees of its host directories
/// first), sends those copies, reports, then waits for EOF on `release` and exits.
///
/// # Safety
/// Call only in a freshly forked child; the ends must be open.
unsafe fn hold(plan: &ChildPlan, ends: HolderEnds) -> ! {
    // SAFETY: the parent's write end; ours must close or the read below never sees EOF.
    unsafe { libc::close(ends.release_write) };
    let mut held = [-1 as RawFd; MAX_HOST_DIRS];
    let count = plan.host_dirs.len().min(MAX_HOST_DIRS);
    let mut result = child::enter_as_holder(plan, &mut held[..count], ends.ready);
    if result.is_ok() && count > 0 {
        result = send_fds(ends.trees, &held[..count]);
    }
    let errno = result
        .err()
        .map_or(0, |e| e.raw_os_error().unwrap_or(libc::EIO));
    report::end(ends.ready, errno);
    let mut byte = 0u8;
    loop {
        // SAFETY: one byte into a local; EOF comes when the parent lets go (or dies).
        let got = unsafe { libc::read(ends.release, (&mut byte as *mut u8).cast(), 1) };
        // SAFETY: reads this thread's errno.
        if got == 0 || (got < 0 && unsafe { *libc::__errno_location() } != libc::EINTR) {
            break;
        }
    }
    // SAFETY: terminates the holder without running atexit handlers or destructors.
    unsafe { libc::_exit(0) }
}

/// At most this many host directories are copied by a holder (`/tmp` and `/var/tmp`).
const MAX_HOST_DIRS: usize = 2;

/// Sends `fds` over the unix socket `socket` (`SCM_RIGHTS`). Raw system calls only.
fn send_fds(socket: RawFd, fds: &[RawFd]) -> io::Result<()> {
    // Room for a header and MAX_HOST_DIRS descriptors, aligned as cmsghdr.
    let mut control = [0u64; 8];
    let payload = std::mem::size_of_val(fds);
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    // SAFETY: `msg` has a control buffer of at least CMSG_SPACE(payload) bytes (64 bytes hold
    // a header and two descriptors), so the first header and its data fit.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(payload as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(header), payload);
    }
    // SAFETY: `msg` describes valid buffers for the duration of the call.
    if unsafe { libc::sendmsg(socket, &msg, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives the holder's copies of the host's trees, one per host directory of `plan`.
fn receive_trees(socket: &OwnedFd, plan: &ChildPlan) -> io::Result<Vec<(CString, OwnedFd)>> {
    let count = plan.host_dirs.len().min(MAX_HOST_DIRS);
    if count == 0 {
        return Ok(Vec::new());
    }
    let fds = view::receive_fds(socket.as_fd())?;
    if fds.len() != count {
        return Err(io::Error::other(format!(
            "the namespace holder sent {} copies of the host's trees, not {count}",
            fds.len()
        )));
    }
    Ok(plan.host_dirs.iter().cloned().zip(fds).collect())
}

/// Opens the namespaces of `holder` (a user namespace first when it made one) and builds the
/// ruleset, its late rules opened through the holder's root (or as they are, without one).
fn open_joined(
    plan: &ChildPlan,
    holder: Option<libc::pid_t>,
    host_trees: Vec<(CString, OwnedFd)>,
) -> io::Result<JoinPlan> {
    let mut namespaces = Vec::new();
    let mut root = String::new();
    let mut view = None;
    if let Some(pid) = holder {
        let ns = |name: &str| open_proc(&format!("/proc/{pid}/ns/{name}"));
        let user = ns("user")?;
        let own_user = open_proc("/proc/self/ns/user")?;
        if rustix::fs::fstat(&user)?.st_ino != rustix::fs::fstat(&own_user)?.st_ino {
            namespaces.push((user, libc::CLONE_NEWUSER));
        }
        if plan.mount_ns {
            namespaces.push((ns("mnt")?, libc::CLONE_NEWNS));
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            view = Some(rustix::fs::open(
                format!("/proc/{pid}/root"),
                flags,
                Mode::empty(),
            )?);
        }
        if plan.net_ns {
            namespaces.push((ns("net")?, libc::CLONE_NEWNET));
        }
        if plan.ipc_ns {
            namespaces.push((ns("ipc")?, libc::CLONE_NEWIPC));
        }
        root = format!("/proc/{pid}/root");
    }
    let open_inside = |path: &CStr| {
        let mut full = root.as_bytes().to_vec();
        full.extend_from_slice(path.to_bytes());
        child::open_path(&CString::new(full).map_err(io::Error::other)?)
    };
    let ruleset = match &plan.landlock {
        Some(landlock) => Some(child::build_ruleset(
            landlock,
            &open_inside,
            &plan.private_dirs,
        )?),
        None => None,
    };
    Ok(JoinPlan {
        namespaces,
        ruleset,
        private_dirs: plan.private_dirs.clone(),
        view: view.map_or_else(View::own, View::of_root),
        host_trees,
    })
}

fn open_proc(path: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
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
