//! The watchdog: a fork of the runner (no exec) that kills the run when the runner dies.
//!
//! It holds one end of a socket pair whose other end only the runner has (`SOCK_CLOEXEC`, so
//! the command never inherits it; a socket, unlike a pipe, cannot be reopened through
//! `/proc/<runner>/fd`, so with `--protect off` the command can neither keep the runner's end
//! open nor forge a message), and a pidfd on the runner, which becomes readable when the runner
//! dies whoever holds the socket. The runner tells it the command's process group (`P` + pid)
//! and, at the end of a run whose processes are all dead, `D`one. The runner's death (its pidfd,
//! or end of file without `D`: SIGKILL, OOM killer) makes the watchdog kill the run for a bounded
//! time —
//! `cgroup.kill` and a SIGKILL to every tgid of the leaf on the cgroup rung; the command's
//! process group and every process of the same uid tagged `CLEANROOM_RUN_ID=<run id>` on both.
//!
//! Invariants: after the fork the child runs only async-signal-safe code (raw syscalls on
//! buffers allocated before the fork; the runner may have other threads); it keeps no
//! descriptor but the socket, the runner's pidfd and the cgroup directory (so never the root's liveness lock nor an
//! exclusive lock: a dead runner's root is provably dead at once), starts its own session (a
//! signal to the runner's process group or terminal does not reach it), and is never a member
//! of the run (it is excluded from the runner's descendants and is outside the leaf).

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};

use crate::error::{Error, Result};
use crate::sys::linux::fork::{self, ArgvArea, InChild};

/// How long a watchdog keeps killing after the runner died.
const KILL_FOR: Duration = Duration::from_secs(5);
/// What a watchdog's command line starts with, followed by its run id (gc finds stopped
/// watchdogs of dead runners by it, see `reclaim`).
pub(crate) const TITLE_PREFIX: &str = "cleanroom watchdog ";
/// A watchdog's thread name (`/proc/<pid>/comm`, without the newline).
pub(crate) const COMM: &std::ffi::CStr = c"cr-watchdog";
/// Message: the command's process group follows (4 bytes, native endian).
const GROUP: u8 = b'P';
/// Message: the run is over, exit without killing.
const DONE: u8 = b'D';

/// The runner's handle on its watchdog.
///
/// The watchdog is the runner's child and is reaped only by [`Watchdog::disarm`] (the runner's
/// reaping skips it): while it is unreaped — even dead — its pid cannot be reused, so no process
/// of the run can take that number and be excluded from the members by it. A child rather than a
/// grandchild, because the runner must see it die or stop (`waitid`), which only a parent can.
#[derive(Debug)]
pub struct Watchdog {
    pid: i32,
    /// A pidfd on the watchdog: readable once it has exited, so the end of a run waits for it
    /// without polling.
    pidfd: OwnedFd,
    /// The runner's end of the socket pair.
    pipe: OwnedFd,
    /// Why the watchdog stopped guarding the run, once seen (it was stopped or killed).
    lost: std::cell::Cell<Option<&'static str>>,
    /// Whether it was told `D`one (it is then exiting: its exit is no longer a loss).
    released: std::cell::Cell<bool>,
}

/// What the watchdog works from, prepared before the fork.
///
/// Invariant: its descriptors are borrowed from [`Watchdog::start`], which keeps them open
/// across the fork; in the child, which leaves [`watch`] only to exit, they stay open.
struct Plan<'a> {
    pipe: BorrowedFd<'a>,
    /// A pidfd on the runner: readable once it is dead.
    runner: BorrowedFd<'a>,
    cgroup: Option<BorrowedFd<'a>>,
    dev_null: BorrowedFd<'a>,
    /// `\0CLEANROOM_RUN_ID=<id>\0`: an exact entry of a NUL-separated environment.
    needle: Vec<u8>,
    uid: u32,
    /// `cleanroom watchdog <run id>`, written over the inherited argv so that `ps` names it
    /// (and nothing takes it for the runner or the command), with the argv area it goes in.
    title: Vec<u8>,
    argv: Option<ArgvArea>,
    /// The leaf's parent and name, to remove the leaf once it is empty.
    cgroup_parent: Option<(BorrowedFd<'a>, CString)>,
}

impl Watchdog {
    /// Forks the watchdog of run `run_id`, whose leaf (if any) is the open directory `cgroup`.
    pub fn start(run_id: &str, cgroup: Option<(&OwnedFd, &std::path::Path)>) -> Result<Watchdog> {
        let (read, write) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Error::sys("create the watchdog's socket pair", e))?;
        let runner = rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        )
        .map_err(|e| Error::sys("open a pidfd on the runner for its watchdog", e))?;
        let dev_null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| Error::sys("open /dev/null for the watchdog", e))?;
        let needle = format!("\0{}={run_id}\0", crate::env::RUN_ID_VAR).into_bytes();
        let parent = match cgroup.and_then(|(_, path)| Some((path.parent()?, path.file_name()?))) {
            Some((parent, name)) => Some((
                rustix::fs::open(
                    parent,
                    rustix::fs::OFlags::PATH
                        | rustix::fs::OFlags::DIRECTORY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(|e| Error::io("open", parent, e))?,
                std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
                    .map_err(|_| Error::Invalid("a cgroup name with a NUL".into()))?,
            )),
            None => None,
        };
        let plan = Plan {
            pipe: read.as_fd(),
            runner: runner.as_fd(),
            cgroup: cgroup.map(|(dir, _)| dir.as_fd()),
            title: format!("{TITLE_PREFIX}{run_id}").into_bytes(),
            argv: ArgvArea::of_this_process(),
            cgroup_parent: parent.as_ref().map(|(fd, name)| (fd.as_fd(), name.clone())),
            dev_null: dev_null.as_fd(),
            needle,
            uid: rustix::process::getuid().as_raw(),
        };
        // SAFETY: the child runs `watch`, which makes only async-signal-safe calls on memory
        // prepared here (the contract of `fork`).
        #[allow(unsafe_code)]
        let pid = unsafe {
            fork::fork(|child| {
                child.close_inherited(write.as_fd());
                watch(child, &plan);
                Ok(())
            })
        }
        .map_err(|e| Error::sys("fork the watchdog", e))?;
        Ok(Watchdog {
            pid: pid.as_raw_nonzero().get(),
            pidfd: open_child_pidfd(pid)?,
            pipe: write,
            lost: std::cell::Cell::new(None),
            released: std::cell::Cell::new(false),
        })
    }

    /// The watchdog's pid (it is a child of the runner, never a member of the run).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends one message (no SIGPIPE if the watchdog is gone: that is seen by [`Self::check`]).
    fn send(&self, message: &[u8]) {
        let _ = rustix::net::send(&self.pipe, message, rustix::net::SendFlags::NOSIGNAL);
    }

    /// Tells the watchdog the command's process group.
    pub fn guard_group(&self, group: i32) {
        let mut message = [GROUP; 5];
        message[1..].copy_from_slice(&group.to_ne_bytes());
        self.send(&message);
    }

    /// Looks (without reaping) whether the watchdog was stopped or died, and says so loudly the
    /// first time: the run is then no longer guarded against the runner's death.
    pub fn check(&self) -> Option<&'static str> {
        if self.lost.get().is_none() {
            use rustix::process::{WaitId, WaitIdOptions};
            // WNOWAIT reaps nothing.
            let flags = WaitIdOptions::EXITED
                | WaitIdOptions::STOPPED
                | WaitIdOptions::CONTINUED
                | WaitIdOptions::NOHANG
                | WaitIdOptions::NOWAIT;
            let changed = Pid::from_raw(self.pid)
                .and_then(|pid| rustix::process::waitid(WaitId::Pid(pid), flags).ok())
                .flatten();
            if let Some(status) = changed {
                let why = if status.stopped() || status.trapped() || status.continued() {
                    "stopped"
                } else {
                    "killed"
                };
                self.lost.set(Some(why));
                tracing::error!("the watchdog (pid {}) was {why}", self.pid);
                eprintln!(
                    "cleanroom: warning: the run's watchdog (pid {}) was {why} during the run: the run was not guarded against the runner's death",
                    self.pid
                );
            }
        }
        self.lost.get()
    }

    /// Tells the watchdog the run is over (once; it exits without killing) unless it was lost
    /// (see [`check`]); returns why it was lost, if it was. It stays unreaped, its pid not
    /// reusable, until [`disarm`]: the runner's remaining work overlaps its exit.
    ///
    /// [`check`]: Watchdog::check
    /// [`disarm`]: Watchdog::disarm
    pub fn release(&self) -> Option<&'static str> {
        if !self.released.get() && self.check().is_none() {
            self.send(&[DONE]);
            self.released.set(true);
        }
        self.lost.get()
    }

    /// Releases the watchdog (if not yet done) and reaps it; one that was lost (see [`check`])
    /// or does not exit within a second of its release is SIGKILLed and reaped, so none is ever
    /// left behind. Returns why it was lost, if it was.
    ///
    /// [`check`]: Watchdog::check
    pub fn disarm(self) -> Option<&'static str> {
        let pid = rustix::process::Pid::from_raw(self.pid);
        if self.release().is_none() {
            if self.exits_within(Duration::from_secs(1)) {
                let _ = rustix::process::waitpid(pid, rustix::process::WaitOptions::empty());
                return None;
            }
            tracing::warn!("the watchdog (pid {}) did not exit: killed", self.pid);
        }
        // The pid is our unreaped child's, so it names the watchdog.
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        let _ = rustix::process::waitpid(pid, rustix::process::WaitOptions::empty());
        self.lost.get()
    }

    /// Waits up to `limit` for the watchdog to exit (its pidfd becomes readable).
    fn exits_within(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = rustix::event::Timespec::try_from(left).ok();
            let mut fds = [rustix::event::PollFd::new(
                &self.pidfd,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(ready) => return ready > 0,
                Err(rustix::io::Errno::INTR) if !left.is_zero() => continue,
                Err(_) => return false,
            }
        }
    }
}

/// A pidfd on our own unreaped child `pid` (its number cannot be reused before we reap it).
/// If none can be opened, the child is killed and reaped, so no watchdog is left unguarded.
fn open_child_pidfd(child: Pid) -> Result<OwnedFd> {
    rustix::process::pidfd_open(child, rustix::process::PidfdFlags::empty()).map_err(|e| {
        // `child` is our unreaped child, so the signal and the wait reach only it.
        let _ = rustix::process::kill_process(child, Signal::KILL);
        let _ = rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty());
        Error::sys("open a pidfd on the watchdog", e)
    })
}

/// The watchdog's life: keep only what it needs, wait for the runner's word, kill if none came.
///
/// Runs in the child of a fork of the runner, before anything else runs there (`child`), with
/// `plan` as [`Watchdog::start`] made it: it closes every descriptor but the plan's and writes
/// over the argv area; the runner may have had other threads, so it makes only async-signal-safe
/// calls on memory allocated before the fork, and the child exits when it returns.
fn watch(child: &InChild, plan: &Plan<'_>) {
    let _ = rustix::process::setsid();
    let _ = rustix::stdio::dup2_stdin(plan.dev_null);
    let _ = rustix::stdio::dup2_stdout(plan.dev_null);
    let _ = rustix::stdio::dup2_stderr(plan.dev_null);
    set_title(child, plan);
    let raw = |fd: Option<BorrowedFd<'_>>| fd.map_or(-1, |fd| fd.as_raw_fd());
    let parent = plan.cgroup_parent.as_ref().map(|(fd, _)| *fd);
    // Every descriptor the watchdog still uses is in the list.
    child.close_from(
        3,
        [
            plan.pipe.as_raw_fd(),
            plan.runner.as_raw_fd(),
            raw(plan.cgroup),
            raw(parent),
        ],
    );
    let mut group: i32 = 0;
    let mut leader: Option<OwnedFd> = None;
    let mut buf = [0u8; 64];
    let mut pending = 0usize;
    loop {
        if !runner_alive(plan) {
            break;
        }
        let n = match rustix::io::read(plan.pipe, &mut buf[pending..]) {
            Err(Errno::INTR) => continue,
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending += n;
        while pending > 0 {
            match buf[0] {
                DONE => return,
                GROUP if pending >= 5 => {
                    group = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
                    // The runner has not reaped the leader yet (it sends this first), so the
                    // pidfd is the command's; the group is only ever signalled through it.
                    if leader.is_none() {
                        leader = Pid::from_raw(group).and_then(|pid| {
                            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                                .ok()
                        });
                    }
                    buf.copy_within(5..pending, 0);
                    pending -= 5;
                }
                GROUP => break,
                _ => {
                    buf.copy_within(1..pending, 0);
                    pending -= 1;
                }
            }
        }
    }
    kill_run(plan, group, leader.as_ref().map(AsFd::as_fd));
    if let (Some(dir), Some((parent, name))) = (plan.cgroup, &plan.cgroup_parent) {
        if !populated(dir) {
            let _ = rustix::fs::unlinkat(*parent, name.as_c_str(), AtFlags::REMOVEDIR);
        }
    }
}

/// Waits until the socket has something to read (a message, or end of file) or the runner is
/// dead; returns false in the latter case, when the socket is empty. A message already sent
/// is read before the runner's death counts, so a `D` followed by the runner's exit is honoured.
fn runner_alive(plan: &Plan<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [
        PollFd::from_borrowed_fd(plan.pipe, PollFlags::IN),
        PollFd::from_borrowed_fd(plan.runner, PollFlags::IN),
    ];
    while let Err(Errno::INTR) = rustix::event::poll(&mut fds, None) {}
    !fds[0].revents().is_empty() || fds[1].revents().is_empty()
}

/// Writes the title over the argv area (zero-filled after it) and names the thread.
fn set_title(child: &InChild, plan: &Plan<'_>) {
    let _ = rustix::thread::set_name(COMM);
    if let Some(area) = &plan.argv {
        area.write(child, &plan.title);
    }
}

/// Kills the run for up to [`KILL_FOR`], until three rounds in a row found nothing. `leader`,
/// when there is one, is a pidfd on the command's process group leader (the group is signalled
/// through it).
fn kill_run(plan: &Plan<'_>, group: i32, leader: Option<BorrowedFd<'_>>) {
    let started = Instant::now();
    let mut quiet = 0;
    while quiet < 3 && started.elapsed() < KILL_FOR {
        let mut found = false;
        if let Some(dir) = plan.cgroup {
            found |= kill_cgroup(dir);
        }
        // Not counted as finding anything: zombies keep a group alive for kill(2).
        if let Some(leader) = leader {
            super::signal_group(leader, group, libc::SIGKILL);
        }
        found |= kill_tagged(plan);
        quiet = if found { 0 } else { quiet + 1 };
        let pause = rustix::thread::Timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        let _ = rustix::thread::nanosleep(&pause);
    }
}

/// `cgroup.kill` on the leaf `dir`, then SIGKILL to every tgid `cgroup.procs` lists (a leader
/// that called `pthread_exit` ignores the former). Returns whether the leaf had members.
fn kill_cgroup(dir: BorrowedFd<'_>) -> bool {
    let flags = OFlags::WRONLY | OFlags::CLOEXEC;
    if let Ok(kill) = rustix::fs::openat(dir, c"cgroup.kill", flags, Mode::empty()) {
        let _ = rustix::io::write(&kill, b"1");
    }
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let Ok(procs) = rustix::fs::openat(dir, c"cgroup.procs", flags, Mode::empty()) else {
        return false;
    };
    let mut found = false;
    let mut buf = [0u8; 4096];
    let mut pid: i32 = 0;
    loop {
        let n = match rustix::io::read(&procs, &mut buf) {
            Ok(n) if n > 0 => n,
            _ => break,
        };
        for &b in &buf[..n] {
            if b.is_ascii_digit() {
                pid = pid.saturating_mul(10).saturating_add(i32::from(b - b'0'));
            } else if let Some(listed) = Pid::from_raw(pid) {
                // Listed by the run's leaf just now.
                let _ = rustix::process::kill_process(listed, Signal::KILL);
                found = true;
                pid = 0;
            }
        }
    }
    found
}

/// Whether `cgroup.events` of the leaf `dir` lacks `populated 0` (an unreadable one counts as
/// populated).
fn populated(dir: BorrowedFd<'_>) -> bool {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dir, c"cgroup.events", flags, Mode::empty()) else {
        return true;
    };
    let mut buf = [0u8; 256];
    let n = rustix::io::read(&fd, &mut buf).unwrap_or(0);
    !buf[..n].windows(11).any(|w| w == b"populated 0")
}

/// SIGKILL to every process of the runner's uid whose environment (or, for a leader that called
/// `pthread_exit`, a thread's) has the run's tag. Returns whether one was found.
fn kill_tagged(plan: &Plan<'_>) -> bool {
    let mut found = false;
    let own = rustix::process::getpid();
    for_each_number(c"/proc", &mut |pid| {
        let Some(process) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            return;
        };
        let mut path = Path::new();
        path.push(b"/proc/");
        path.push_number(pid);
        let ours = process != own
            && rustix::fs::stat(path.as_c_str()).is_ok_and(|st| st.st_uid == plan.uid);
        if !ours {
            return;
        }
        let mark = path.len;
        path.push(b"/environ");
        let mut tagged = environ_has(&path, &plan.needle);
        if !tagged {
            path.truncate(mark);
            path.push(b"/task");
            let task_dir = path;
            for_each_number(task_dir.as_c_str(), &mut |tid| {
                let mut task = task_dir;
                task.push(b"/");
                task.push_number(tid);
                task.push(b"/environ");
                tagged = tagged || environ_has(&task, &plan.needle);
            });
        }
        if tagged {
            // The process is of our uid and carries the run's tag.
            let _ = rustix::process::kill_process(process, Signal::KILL);
            found = true;
        }
    });
    found
}

/// Calls `each` with every numeric entry of the directory `dir` (getdents64 into a buffer on
/// the stack, no allocation).
fn for_each_number(dir: &CStr, each: &mut dyn FnMut(u64)) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(dir, flags, Mode::empty()) else {
        return;
    };
    let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(&fd, &mut buf);
    while let Some(Ok(entry)) = entries.next() {
        let name = entry.file_name().to_bytes();
        if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
            continue;
        }
        let number = name.iter().fold(0u64, |n, &b| {
            n.wrapping_mul(10).wrapping_add(u64::from(b - b'0'))
        });
        each(number);
    }
}

/// Whether the NUL-separated file at `path` has the exact entry `needle` (which is framed by
/// NULs): read in chunks, the stream framed by a NUL on each side.
fn environ_has(path: &Path, needle: &[u8]) -> bool {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(path.as_c_str(), flags, Mode::empty()) else {
        return false;
    };
    let mut buf = [0u8; 16384];
    let keep = needle.len().min(buf.len() / 2) - 1;
    buf[0] = 0;
    let mut filled = 1usize;
    loop {
        // One byte stays free for the closing NUL; an error ends the stream as its end does.
        let last = buf.len() - 1;
        let n = rustix::io::read(&fd, &mut buf[filled..last]).unwrap_or(0);
        let end = if n == 0 {
            buf[filled] = 0;
            filled + 1
        } else {
            filled + n
        };
        if buf[..end].windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        if n == 0 || end < keep {
            return false;
        }
        buf.copy_within(end - keep..end, 0);
        filled = keep;
    }
}

/// A NUL-terminated path built on the stack.
#[derive(Clone, Copy)]
struct Path {
    bytes: [u8; 64],
    len: usize,
}

impl Path {
    fn new() -> Path {
        Path {
            bytes: [0; 64],
            len: 0,
        }
    }

    fn push(&mut self, part: &[u8]) {
        for &b in part {
            if self.len < self.bytes.len() - 1 {
                self.bytes[self.len] = b;
                self.len += 1;
                self.bytes[self.len] = 0;
            }
        }
    }

    fn push_number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn truncate(&mut self, len: usize) {
        self.len = len.min(self.len);
        self.bytes[self.len] = 0;
    }

    /// The path as a C string.
    fn as_c_str(&self) -> &CStr {
        // Never the fallback: the last byte is never written, so a NUL is always there (no panic
        // path after the fork).
        std::ffi::CStr::from_bytes_until_nul(&self.bytes).unwrap_or(c"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether our child `pid` has exited, without reaping it (`None`: not our child any more).
    fn exited_unreaped(pid: i32) -> Option<bool> {
        use rustix::process::{WaitId, WaitIdOptions};
        // WNOWAIT reaps nothing.
        let flags = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        let status = rustix::process::waitid(WaitId::Pid(Pid::from_raw(pid)?), flags).ok()?;
        Some(status.is_some())
    }

    #[test]
    fn a_released_watchdog_exits_unreaped_is_no_loss_and_is_reaped_by_disarm() {
        let watchdog = Watchdog::start("watchdog-unit-test", None).unwrap();
        let pid = watchdog.pid();
        assert_eq!(exited_unreaped(pid), Some(false), "alive until told");
        assert_eq!(watchdog.release(), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while exited_unreaped(pid) != Some(true) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Exited on `D`, still our unreaped child: its pid cannot be reused yet.
        assert_eq!(exited_unreaped(pid), Some(true));
        assert_eq!(watchdog.release(), None, "an exit after `D` is no loss");
        assert_eq!(watchdog.disarm(), None);
        assert_eq!(exited_unreaped(pid), None, "reaped");
    }
}
