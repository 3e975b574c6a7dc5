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
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::process::Pid;

use super::child::{self, ChildPlan, JoinPlan};
use super::report;
use crate::protect::view::{self, View};
use crate::sys::linux::fork::{self, InChild};

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
    let ends = HolderEnds {
        ready: ready_write.as_fd(),
        trees: trees_write.as_fd(),
        release: release_read.as_fd(),
        release_write: release_write.as_fd(),
    };
    // SAFETY: the child runs only `hold`: raw system calls on the plan, the pipes and the
    // socket, prepared before the fork (the contract of `fork`).
    #[allow(unsafe_code)]
    let pid = unsafe {
        fork::fork(|child| {
            hold(child, plan, &ends);
            Ok(())
        })
    }?;
    drop((ready_write, release_read, trees_write));
    let joined = report::read(&ready_read).and_then(|report| {
        holder_ready(report.end, "the namespace holder")?;
        let trees = receive_trees(&trees_read, plan)?;
        let joined = open_joined(plan, Some(pid), trees)?;
        Ok((joined, report.outcomes))
    });
    drop(release_write);
    fork::wait_for(pid)?;
    let (plan, outcomes) = joined?;
    let no_host_copies = match plan.host_trees.is_empty() {
        true => None,
        false => simulated_kernel_before_6_15()
            .or_else(|| super::probe_in_child(super::Probe::HostCopy(&plan)).err()),
    };
    Ok(Established {
        plan,
        outcomes,
        no_host_copies,
    })
}

/// Test hook of debug builds only (release builds have neither the variable nor the check):
/// set to `1`, [`establish`] reports that children cannot copy host paths out of the holder's
/// copies of the host's trees, as Linux before 6.15 does, so the fallback of a long-lived
/// spawner on such a kernel (each child sets up namespaces of its own) can be tested on a newer
/// one. It only makes the shared set-up fail; it never fakes a success.
#[cfg(debug_assertions)]
pub const TEST_KERNEL_BEFORE_6_15_ENV: &str = "CLEANROOM_TEST_KERNEL_BEFORE_6_15";

/// The refusal [`TEST_KERNEL_BEFORE_6_15_ENV`] simulates, when it is set (debug builds).
fn simulated_kernel_before_6_15() -> Option<io::Error> {
    #[cfg(debug_assertions)]
    if std::env::var_os(TEST_KERNEL_BEFORE_6_15_ENV).is_some_and(|v| v == "1") {
        return Some(io::Error::other(format!(
            "simulated by {TEST_KERNEL_BEFORE_6_15_ENV}=1, a test hook of debug builds that \
             behaves as a kernel before 6.15"
        )));
    }
    None
}

/// The ruleset of `plan` built now, without a holder, as [`establish`] builds the ruleset of
/// the namespaces it sets up: its early rules on the objects the parent opened, its late rules
/// (the mount points of its private directories) on what their paths name in this process's
/// mount namespace. For a long-lived spawner whose children set up namespaces of their own: a
/// layer built once at its start beneath the rules its threads resolve later (which see this
/// mount namespace; a child, whose private mounts hide those directories from Landlock, builds
/// its own layer after mounting). `None` when the plan has no ruleset.
pub(crate) fn ruleset_here(plan: &ChildPlan) -> io::Result<Option<OwnedFd>> {
    Ok(open_joined(plan, None, Vec::new())?.ruleset)
}

/// The descriptors a holder uses (open across the fork: [`establish`] keeps them).
struct HolderEnds<'a> {
    /// Its report (best-effort outcomes, then the errno: 0 when ready).
    ready: BorrowedFd<'a>,
    /// Where it sends its copies of the host's trees.
    trees: BorrowedFd<'a>,
    /// EOF here lets it exit.
    release: BorrowedFd<'a>,
    /// The parent's end of `release`, closed in the holder.
    release_write: BorrowedFd<'a>,
}

/// The holder: enters `plan`'s namespaces (copying the host's trees of its host directories
/// first), sends those copies, reports, then waits for EOF on `release`; the child exits when
/// it returns. Runs in a freshly forked child (`child`).
fn hold(child: &InChild, plan: &ChildPlan, ends: &HolderEnds<'_>) {
    // The parent's write end: ours must close or the read below never sees EOF.
    child.close_inherited(ends.release_write);
    let mut held: [Option<OwnedFd>; MAX_HOST_DIRS] = [None, None];
    let count = plan.host_dirs.len().min(MAX_HOST_DIRS);
    let mut result = child::enter_as_holder(plan, &mut held[..count], Some(ends.ready));
    if result.is_ok() && count > 0 {
        result = send_fds(ends.trees, &held[..count]);
    }
    let errno = result
        .err()
        .map_or(0, |e| e.raw_os_error().unwrap_or(libc::EIO));
    report::end(ends.ready, errno);
    wait_for_release(ends.release);
}

/// Whether a holder (`holder`, for the message) became ready, from the end of its report: its
/// errno, or nothing when it died first.
fn holder_ready(end: Option<i32>, holder: &str) -> io::Result<()> {
    match end {
        Some(0) => Ok(()),
        Some(errno) => Err(io::Error::from_raw_os_error(errno)),
        None => Err(io::Error::other(format!(
            "{holder} died before it was ready"
        ))),
    }
}

/// Returns at EOF on `release`, which comes when the parent lets go (or dies). Raw system calls
/// only.
fn wait_for_release(release: BorrowedFd<'_>) {
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(release, &mut byte) {
            Ok(0) => break,
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => break,
        }
    }
}

/// A user namespace made now, for the children of a long-lived spawner that set up namespaces
/// of their own (its sandbox could not be established: [`crate::protect::Sandbox::layered`]),
/// to make them inside instead of each making a user namespace of its own; `None` for root,
/// whose children need none. A forked holder makes it, with its uid and gid mapped to
/// themselves as such a child would (then exits once the parent opened it through
/// `/proc/<holder>/ns/user`; the descriptor keeps it alive).
///
/// Why: a spawner that makes itself non-dumpable afterwards (the exec-server) has non-dumpable
/// children, and the kernel gives the `/proc/<pid>` files of a non-dumpable process to root
/// (`task_dump_owner`), so such a child cannot write its own new user namespace's `uid_map`
/// (EACCES); nor may it make itself dumpable for the write, which would let a process of the
/// same user read or trace the copy of the spawner's memory it holds (or, for a child sharing
/// that memory, `CLONE_VM`, the spawner itself). Call it while this process is still dumpable
/// (the holder writes its own maps), before anything in the process reaps children with
/// `waitpid(-1)`: the holder is forked and reaped here.
pub(crate) fn user_namespace() -> io::Result<Option<OwnedFd>> {
    if rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let (ready_read, ready_write) = pipe()?;
    let (release_read, release_write) = pipe()?;
    let (ready, release, release_theirs) = (
        ready_write.as_fd(),
        release_read.as_fd(),
        release_write.as_fd(),
    );
    // SAFETY: the child makes raw system calls only, on the pipes opened before the fork (the
    // contract of `fork`).
    #[allow(unsafe_code)]
    let pid = unsafe {
        fork::fork(|child| {
            // The parent's write end: ours must close or the wait below never sees EOF.
            child.close_inherited(release_theirs);
            let errno = child::enter_user_namespace()
                .err()
                .map_or(0, |e| e.raw_os_error().unwrap_or(libc::EIO));
            report::end(ready, errno);
            wait_for_release(release);
            Ok(())
        })
    }?;
    drop((ready_write, release_read));
    let opened = report::read(&ready_read).and_then(|report| {
        holder_ready(report.end, "the user namespace's holder")?;
        open_proc(&format!("/proc/{}/ns/user", pid.as_raw_nonzero()))
    });
    drop(release_write);
    fork::wait_for(pid)?;
    opened.map(Some)
}

/// At most this many host directories are copied by a holder (`/tmp` and `/var/tmp`).
const MAX_HOST_DIRS: usize = 2;

/// Sends `held` (every entry taken, at most [`MAX_HOST_DIRS`]) over the unix socket `socket`
/// (`SCM_RIGHTS`, one byte of data). Raw system calls only.
fn send_fds(socket: BorrowedFd<'_>, held: &[Option<OwnedFd>]) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    if held.len() > MAX_HOST_DIRS || held.iter().any(Option::is_none) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // The placeholders past `held.len()` are never sent.
    let fds: [BorrowedFd<'_>; MAX_HOST_DIRS] = std::array::from_fn(|i| {
        held.get(i)
            .and_then(Option::as_ref)
            .map_or(rustix::fs::CWD, AsFd::as_fd)
    });
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_HOST_DIRS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds[..held.len()])) {
        return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
    }
    rustix::net::sendmsg(
        socket,
        &[io::IoSlice::new(&[0])],
        &mut control,
        SendFlags::empty(),
    )?;
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
    holder: Option<Pid>,
    host_trees: Vec<(CString, OwnedFd)>,
) -> io::Result<JoinPlan> {
    let mut namespaces = Vec::new();
    let mut root = String::new();
    let mut view = None;
    if let Some(pid) = holder {
        let pid = pid.as_raw_nonzero();
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
            child::Absent::Fails,
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
