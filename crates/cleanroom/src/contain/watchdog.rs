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

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::errno;
use crate::error::{Error, Result};

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
/// Invariant: its descriptors are open for as long as it lives. Only [`Watchdog::start`] makes
/// one, from descriptors it keeps open until the plan is dropped; in the child, which never
/// returns from [`watch`], they stay open.
struct Plan {
    pipe: RawFd,
    /// A pidfd on the runner: readable once it is dead.
    runner: RawFd,
    cgroup: Option<RawFd>,
    dev_null: RawFd,
    /// `\0CLEANROOM_RUN_ID=<id>\0`: an exact entry of a NUL-separated environment.
    needle: Vec<u8>,
    uid: libc::uid_t,
    /// `cleanroom watchdog <run id>`, written over the inherited argv so that `ps` names it
    /// (and nothing takes it for the runner or the command), with the argv area it goes in.
    title: Vec<u8>,
    argv: Option<(usize, usize)>,
    /// The leaf's parent and name, to remove the leaf once it is empty.
    cgroup_parent: Option<(RawFd, std::ffi::CString)>,
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
            pipe: read.as_raw_fd(),
            runner: runner.as_raw_fd(),
            cgroup: cgroup.map(|(dir, _)| dir.as_raw_fd()),
            title: format!("{TITLE_PREFIX}{run_id}").into_bytes(),
            argv: argv_area(),
            cgroup_parent: parent
                .as_ref()
                .map(|(fd, name)| (fd.as_raw_fd(), name.clone())),
            dev_null: dev_null.as_raw_fd(),
            needle,
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
        };
        // SAFETY: the child runs `watch`, which makes only async-signal-safe calls on memory
        // prepared here, and leaves by `_exit`.
        match unsafe { libc::fork() } {
            -1 => Err(Error::sys(
                "fork the watchdog",
                std::io::Error::last_os_error(),
            )),
            0 => {
                drop(write);
                // SAFETY: see above; never returns.
                unsafe { watch(&plan) }
            }
            pid => Ok(Watchdog {
                pid,
                pidfd: open_child_pidfd(pid)?,
                pipe: write,
                lost: std::cell::Cell::new(None),
                released: std::cell::Cell::new(false),
            }),
        }
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
            // SAFETY: waitid on our own child, into a zeroed siginfo; WNOWAIT reaps nothing.
            let (rc, info) = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let flags = libc::WEXITED
                    | libc::WSTOPPED
                    | libc::WCONTINUED
                    | libc::WNOHANG
                    | libc::WNOWAIT;
                let rc = libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags);
                (rc, info)
            };
            // SAFETY: si_pid is set by waitid (zero when nothing changed).
            if rc == 0 && unsafe { info.si_pid() } != 0 {
                let why = match info.si_code {
                    libc::CLD_STOPPED | libc::CLD_TRAPPED | libc::CLD_CONTINUED => "stopped",
                    _ => "killed",
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
        // SAFETY: the pid is our unreaped child's, so it names the watchdog.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
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
fn open_child_pidfd(pid: i32) -> Result<OwnedFd> {
    let child = rustix::process::Pid::from_raw(pid).expect("fork returns a positive pid");
    rustix::process::pidfd_open(child, rustix::process::PidfdFlags::empty()).map_err(|e| {
        // SAFETY: `pid` is our unreaped child, so the signal and the wait reach only it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty());
        Error::sys("open a pidfd on the watchdog", e)
    })
}

/// The watchdog's life: keep only what it needs, wait for the runner's word, kill if none came.
///
/// # Safety
/// Only in the child of a fork of the runner, before anything else runs there, with `plan` as
/// [`Watchdog::start`] made it: it closes every descriptor but the plan's (so no Rust object of
/// the parent's may use one again), writes over the argv area, and never returns (`_exit`). The
/// runner may have had other threads, so it makes only async-signal-safe calls on memory
/// allocated before the fork.
unsafe fn watch(plan: &Plan) -> ! {
    // SAFETY: setsid and dup2 take no memory; `dev_null` is open (the plan's invariant).
    unsafe {
        libc::setsid();
        for std_fd in 0..3 {
            libc::dup2(plan.dev_null, std_fd);
        }
    }
    // SAFETY: `plan.argv` was read from this very process's /proc/self/stat before the fork, and
    // this child has a single thread, so nothing else reads the argv area while it is rewritten.
    unsafe { set_title(plan) };
    let parent = plan.cgroup_parent.as_ref().map_or(-1, |(fd, _)| *fd);
    // SAFETY: the caller's contract: nothing of the parent's runs here again to use what is
    // closed, and every descriptor the watchdog still uses is in the list.
    unsafe { close_all_but(&[plan.pipe, plan.runner, plan.cgroup.unwrap_or(-1), parent]) };
    let mut group: i32 = 0;
    let mut leader: RawFd = -1;
    let mut buf = [0u8; 64];
    let mut pending = 0usize;
    loop {
        if !runner_alive(plan) {
            break;
        }
        // SAFETY: reads at most `64 - pending` bytes into `buf[pending..]`, on our stack; the
        // pipe is open (the plan's invariant).
        let n = unsafe {
            libc::read(
                plan.pipe,
                buf.as_mut_ptr().add(pending).cast(),
                64 - pending,
            )
        };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        pending += n as usize;
        while pending > 0 {
            match buf[0] {
                // SAFETY: leaving the forked child, as the caller's contract requires.
                DONE => unsafe { libc::_exit(0) },
                GROUP if pending >= 5 => {
                    group = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
                    // The runner has not reaped the leader yet (it sends this first), so the
                    // pidfd is the command's; the group is only ever signalled through it.
                    if leader < 0 {
                        // SAFETY: pidfd_open takes no memory.
                        leader = unsafe { libc::syscall(libc::SYS_pidfd_open, group, 0) } as RawFd;
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
    // SAFETY: `leader` is -1 or the pidfd just opened on the group leader the runner named.
    unsafe { kill_run(plan, group, leader) };
    if let (Some(dir), Some((parent, name))) = (plan.cgroup, &plan.cgroup_parent) {
        // SAFETY: the leaf and its parent are open directories (the plan's invariant); `name`
        // is a C string allocated before the fork.
        unsafe {
            if !populated(dir) {
                libc::unlinkat(*parent, name.as_ptr(), libc::AT_REMOVEDIR);
            }
        }
    }
    // SAFETY: leaving the forked child, as the caller's contract requires.
    unsafe { libc::_exit(0) }
}

/// Waits until the socket has something to read (a message, or end of file) or the runner is
/// dead; returns false in the latter case, when the socket is empty. A message already sent
/// is read before the runner's death counts, so a `D` followed by the runner's exit is honoured.
fn runner_alive(plan: &Plan) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: plan.pipe,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: plan.runner,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: poll writes the `revents` of the two entries of `fds`, on our stack, whose
        // length is passed with it; the descriptors are open (the plan's invariant).
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } >= 0 || errno() != libc::EINTR {
            break;
        }
    }
    fds[0].revents != 0 || fds[1].revents == 0
}

/// Where the kernel keeps this process's argv (fields 48 and 49 of `/proc/self/stat`).
fn argv_area() -> Option<(usize, usize)> {
    let stat = crate::process::read_kernel_text("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Index 0 is field 3 (state), so field N is at N - 3.
    let start = fields.get(45)?.parse().ok()?;
    let end: usize = fields.get(46)?.parse().ok()?;
    (end > start).then_some((start, end))
}

/// Writes the title over the argv area (zero-filled after it) and names the thread.
///
/// # Safety
/// `plan.argv`, if set, must be this process's argv area as its `/proc/self/stat` gives it (the
/// kernel mapped it writable at exec), and nothing else may read or write that memory meanwhile:
/// only in the single-threaded watchdog child.
unsafe fn set_title(plan: &Plan) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes; COMM is a static
    // C string of 11.
    unsafe { libc::prctl(libc::PR_SET_NAME, COMM.as_ptr()) };
    let Some((start, end)) = plan.argv else {
        return;
    };
    // SAFETY: the caller's contract: [start, end) is mapped, writable and ours alone.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    let n = plan.title.len().min(area.len() - 1);
    area[..n].copy_from_slice(&plan.title[..n]);
    area[n..].fill(0);
}

/// Closes every descriptor but 0–2 and `keep` (close_range on the gaps).
///
/// # Safety
/// No Rust object may use a closed descriptor afterwards: only in a forked child that never
/// returns into the parent's code.
unsafe fn close_all_but(keep: &[RawFd; 4]) {
    let mut first: libc::c_uint = 3;
    let mut sorted = *keep;
    sorted.sort_unstable();
    for fd in sorted {
        if fd >= first as RawFd {
            if fd > first as RawFd {
                // SAFETY: close_range takes no memory; the caller's contract covers the closing.
                unsafe { libc::syscall(libc::SYS_close_range, first, fd as libc::c_uint - 1, 0) };
            }
            first = fd as libc::c_uint + 1;
        }
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
}

/// Kills the run for up to [`KILL_FOR`], until three rounds in a row found nothing.
///
/// # Safety
/// `leader` must be -1 or an open pidfd on the command's process group leader (the group is
/// signalled through it), and `plan`'s descriptors open (its invariant).
unsafe fn kill_run(plan: &Plan, group: i32, leader: RawFd) {
    let started = now();
    let mut quiet = 0;
    while quiet < 3 && now() - started < KILL_FOR.as_millis() as i64 {
        let mut found = false;
        if let Some(dir) = plan.cgroup {
            // SAFETY: the leaf is an open directory (the plan's invariant).
            found |= unsafe { kill_cgroup(dir) };
        }
        // Not counted as finding anything: zombies keep a group alive for kill(2).
        if leader >= 0 {
            // SAFETY: the caller's contract: `leader` is the group leader's pidfd.
            unsafe { super::signal_group_raw(leader, group, libc::SIGKILL) };
        }
        found |= kill_tagged(plan);
        quiet = if found { 0 } else { quiet + 1 };
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        // SAFETY: nanosleep reads `pause` on our stack; the remainder pointer may be null.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
}

/// Monotonic milliseconds.
fn now() -> i64 {
    // SAFETY: timespec is plain data (all zeroes is valid); clock_gettime writes only to it.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// `cgroup.kill` on the leaf, then SIGKILL to every tgid `cgroup.procs` lists (a leader that
/// called `pthread_exit` ignores the former). Returns whether the leaf had members.
///
/// # Safety
/// `dir` must be an open descriptor of the run's cgroup leaf, for the whole call: every process
/// its `cgroup.procs` names is killed.
unsafe fn kill_cgroup(dir: RawFd) -> bool {
    // SAFETY: `dir` is open (the caller's contract); the names are static C strings; the write
    // reads one byte of a static string; only the descriptor opened here is closed.
    let procs = unsafe {
        let kill = libc::openat(
            dir,
            c"cgroup.kill".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if kill >= 0 {
            libc::write(kill, b"1".as_ptr().cast(), 1);
            libc::close(kill);
        }
        libc::openat(
            dir,
            c"cgroup.procs".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if procs < 0 {
        return false;
    }
    let mut found = false;
    let mut buf = [0u8; 4096];
    let mut pid: i32 = 0;
    loop {
        // SAFETY: reads at most `buf.len()` bytes into `buf`, on our stack, from our descriptor.
        let n = unsafe { libc::read(procs, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        for &b in &buf[..n as usize] {
            if b.is_ascii_digit() {
                pid = pid.saturating_mul(10).saturating_add(i32::from(b - b'0'));
            } else if pid > 0 {
                // SAFETY: kill takes no memory; `pid` was listed by the run's leaf just now.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                found = true;
                pid = 0;
            }
        }
    }
    // SAFETY: closes the descriptor opened above, used no more.
    unsafe { libc::close(procs) };
    found
}

/// Whether `cgroup.events` of the leaf lacks `populated 0` (an unreadable one counts as
/// populated).
///
/// # Safety
/// `dir` must be an open directory descriptor for the whole call.
unsafe fn populated(dir: RawFd) -> bool {
    // SAFETY: `dir` is open (the caller's contract); the name is a static C string.
    let fd = unsafe {
        libc::openat(
            dir,
            c"cgroup.events".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return true;
    }
    let mut buf = [0u8; 256];
    // SAFETY: reads at most `buf.len()` bytes into `buf`, on our stack, from the descriptor
    // opened above, then closes it.
    let n = unsafe {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let text = &buf[..n.max(0) as usize];
    !text.windows(11).any(|w| w == b"populated 0")
}

/// SIGKILL to every process of the runner's uid whose environment (or, for a leader that called
/// `pthread_exit`, a thread's) has the run's tag. Returns whether one was found.
fn kill_tagged(plan: &Plan) -> bool {
    let mut found = false;
    for_each_number(c"/proc", &mut |pid| {
        let mut path = Path::new();
        path.push(b"/proc/");
        path.push_number(pid);
        // SAFETY: stat is plain data (all zeroes is valid); `path` is NUL-terminated (see
        // `Path`) and stat writes only to `st`; getpid takes nothing.
        let ours = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            pid as i32 != libc::getpid()
                && libc::stat(path.as_ptr(), &mut st) == 0
                && st.st_uid == plan.uid
        };
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
            // SAFETY: kill takes no memory; the process is of our uid and carries the run's tag.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            found = true;
        }
    });
    found
}

/// Calls `each` with every numeric entry of the directory `dir` (getdents64, no allocation).
fn for_each_number(dir: &std::ffi::CStr, each: &mut dyn FnMut(u64)) {
    // SAFETY: `dir` is a NUL-terminated string borrowed for the call.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`, on our stack, from the
        // descriptor opened above.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let mut number: u64 = 0;
            let mut digits = 0;
            for &b in buf[at + 19..at + reclen].iter().take_while(|&&b| b != 0) {
                if !b.is_ascii_digit() {
                    digits = 0;
                    break;
                }
                number = number * 10 + u64::from(b - b'0');
                digits += 1;
            }
            if digits > 0 {
                each(number);
            }
            at += reclen;
        }
    }
    // SAFETY: closes the descriptor opened above, used no more.
    unsafe { libc::close(fd) };
}

/// Whether the NUL-separated file at `path` has the exact entry `needle` (which is framed by
/// NULs): read in chunks, the stream framed by a NUL on each side.
fn environ_has(path: &Path, needle: &[u8]) -> bool {
    // SAFETY: `path` is NUL-terminated (see `Path`).
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 16384];
    let keep = needle.len().min(buf.len() / 2) - 1;
    buf[0] = 0;
    let mut filled = 1usize;
    let mut found = false;
    loop {
        // SAFETY: reads at most `buf.len() - filled - 1` bytes into `buf[filled..]`, on our
        // stack (one byte stays free for the closing NUL), from the descriptor opened above.
        let n = unsafe {
            libc::read(
                fd,
                buf.as_mut_ptr().add(filled).cast(),
                buf.len() - filled - 1,
            )
        };
        let end = if n <= 0 {
            buf[filled] = 0;
            filled + 1
        } else {
            filled + n as usize
        };
        if buf[..end].windows(needle.len()).any(|w| w == needle) {
            found = true;
            break;
        }
        if n <= 0 || end < keep {
            break;
        }
        buf.copy_within(end - keep..end, 0);
        filled = keep;
    }
    // SAFETY: closes the descriptor opened above, used no more.
    unsafe { libc::close(fd) };
    found
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

    /// The path, NUL-terminated (every change writes the NUL after `len`).
    fn as_ptr(&self) -> *const libc::c_char {
        self.bytes.as_ptr().cast()
    }

    /// The path as a C string.
    fn as_c_str(&self) -> &std::ffi::CStr {
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
        // SAFETY: waitid into a zeroed siginfo; WNOWAIT reaps nothing.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) != 0 {
                return None;
            }
            Some(info.si_pid() == pid)
        }
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
