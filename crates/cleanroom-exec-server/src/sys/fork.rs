//! The children forked for `fs/*` calls ([`fork_confined`]): each works in `/`, applies the
//! call's sandbox hook, does one [`Errand`] and ends; [`wait`] reaps it.
//!
//! Invariant: a child forked from the multi-threaded server runs nothing but what this module
//! lists: `chdir`, the sandbox hook (async-signal-safe: a [`ChildHook`]), and its errand's raw system
//! calls on data prepared before the fork (a plan's steps, a report `write`; or two `open`s and
//! a `sendmsg`), then `_exit`. Nothing allocates, locks or panics there.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use cleanroom::protect::view::{send_failure, send_own, View};

use super::exit_now;
use super::hook::ChildHook;
use crate::fs::mutate::Plan;

/// The step a child reports when it carried out the whole plan.
pub const DONE: u64 = u64::MAX - 1;
/// The step a child reports when applying the sandbox itself failed.
pub const CONFINING: u64 = u64::MAX;
/// A report: the step (u64) and the errno (i32).
pub const REPORT: usize = 12;

/// What a forked child does once it has applied the sandbox hook (or failed to).
pub enum Errand<'a> {
    /// Closes every descriptor but `report`, carries out `plan` with `slots` (from
    /// [`Plan::slots`]) in its own mount namespace, and writes one report (step, errno) to
    /// `report`: [`DONE`], the failing step, or [`CONFINING`] when the hook failed. Exits 0 only
    /// when it did it all and the report was written.
    Execute {
        plan: &'a Plan,
        slots: &'a mut [Option<OwnedFd>],
        report: BorrowedFd<'a>,
    },
    /// Sends its root and mount namespace on `socket` ([`send_own`]), or the hook's failure
    /// ([`send_failure`]). Exits 0 only when it sent its namespace.
    SendView { socket: BorrowedFd<'a> },
}

/// Forks a child that works in `/`, applies `hook`, does `errand` and exits; its pid. The child
/// works in `/`, not in the server's working directory: it names absolute paths only, and the
/// hook re-enters its working directory after its mounts, where the call's policy may hide the
/// server's (a project it gives no access: the directory is gone there).
pub fn fork_confined(hook: Option<&ChildHook>, errand: Errand<'_>) -> io::Result<i32> {
    // SAFETY: the child only runs chdir, the sandbox hook (async-signal-safe by contract) and
    // its errand (raw system calls on data prepared before the fork, then `_exit`), as the
    // module's invariant lists.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: chdir takes a NUL-terminated path.
        let rooted = match unsafe { libc::chdir(c"/".as_ptr()) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        };
        run_errand(
            errand,
            rooted.and_then(|()| hook.map_or(Ok(()), ChildHook::run)),
        );
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// In the child: `errand`, after `confined`, the outcome of the chdir and the hook.
fn run_errand(errand: Errand<'_>, confined: io::Result<()>) -> ! {
    match errand {
        Errand::Execute {
            plan,
            slots,
            report,
        } => {
            let outcome = match confined {
                Ok(()) => {
                    close_all_but(report.as_raw_fd());
                    match plan.execute_in(slots, &View::own()) {
                        Ok(()) => (DONE, 0),
                        Err(f) => (f.step as u64, f.errno),
                    }
                }
                Err(e) => (CONFINING, e.raw_os_error().unwrap_or(libc::EPERM)),
            };
            exit_reporting(report, outcome)
        }
        Errand::SendView { socket } => {
            let sent = match confined {
                Ok(()) => send_own(socket),
                Err(e) => send_failure(socket, &e).and(Err(e)),
            };
            exit_now(i32::from(sent.is_err()))
        }
    }
}

/// In the child: closes every descriptor but `keep` (`close_range`; raw system calls only).
fn close_all_but(keep: i32) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range takes integers only; it closes descriptors this forked child inherited
    // and no longer uses (the plan opens its own).
    unsafe {
        if keep > 0 {
            libc::syscall(
                libc::SYS_close_range,
                0 as libc::c_uint,
                keep - 1,
                0 as libc::c_uint,
            );
        }
        libc::syscall(
            libc::SYS_close_range,
            keep + 1,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        );
    }
}

/// In the child: writes `report` (step, errno) and exits.
fn exit_reporting(report: BorrowedFd<'_>, (step, errno): (u64, i32)) -> ! {
    let mut bytes = [0u8; REPORT];
    bytes[..8].copy_from_slice(&step.to_ne_bytes());
    bytes[8..].copy_from_slice(&errno.to_ne_bytes());
    let written = rustix::io::write(report, &bytes);
    exit_now(i32::from(step != DONE || written != Ok(REPORT)))
}

/// Waits for our child `pid`; its exit code, `None` if it did not exit normally.
pub fn wait(pid: i32) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child keeps only the descriptor it reports on: one the server holds without
    /// `O_CLOEXEC` (which an exec would not close either) is closed, and so is every other.
    #[test]
    fn a_child_keeps_only_the_descriptor_it_reports_on() {
        use std::os::unix::process::CommandExt;
        let file = std::fs::File::open("/").unwrap();
        let stray = rustix::io::dup(&file).unwrap();
        let raw = stray.as_raw_fd();
        let mut command = std::process::Command::new("true");
        // SAFETY: the hook only makes system calls (close_range, fcntl) on integers and
        // allocates nothing (the test harness has other threads).
        unsafe {
            command.pre_exec(move || {
                close_all_but(1);
                match libc::fcntl(raw, libc::F_GETFD) {
                    -1 => Ok(()),
                    // No allocation after the fork: an errno of our choosing (still open).
                    _ => Err(io::Error::from_raw_os_error(libc::EEXIST)),
                }
            });
        }
        // The hook's error may not be reported (its pipe may be closed too): then the child
        // exits 1.
        let status = command.status().expect("no descriptor left open");
        assert!(status.success(), "{status}");
        drop(stray);
    }
}
