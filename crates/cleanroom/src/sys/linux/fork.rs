//! The library's forked children: [`fork`] runs a child program and exits, handing the program
//! an [`InChild`], the proof of where it runs that what only a child may do asks for (close what
//! it inherited, write over the argv area). And the child born in a cgroup that executes a
//! `Command` ([`spawn_into_cgroup`], `clone3` with `CLONE_INTO_CGROUP`).
//!
//! Invariant: a child program runs in a child of a possibly multi-threaded process: raw,
//! async-signal-safe system calls only, on data prepared before the fork or on its stack (the
//! module docs of `sys::linux` list the programs); it leaves by `_exit`, never returning into
//! the caller's code, so nothing of the parent's runs in it to use what it closed. A child
//! that executes a `Command` after `clone3` is only started from a single-threaded process.

use std::ffi::c_int;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::process::Pid;

use super::last_error;

/// Proof that the code holding it runs in a child this module (or [`super::exec`]) started,
/// between fork and exec or instead of exec: a process with one thread that leaves by `_exit`
/// or `exec`, never returning into the code of the parent it was copied from. Neither `Send`
/// nor `Sync`; only `sys::linux` makes one.
pub(crate) struct InChild {
    _one_thread: PhantomData<*const ()>,
}

impl InChild {
    /// Only where a child program is called in the child (see the type's docs).
    pub(super) fn new() -> InChild {
        InChild {
            _one_thread: PhantomData,
        }
    }

    /// Closes every descriptor from `first` on but those of `keep` (`close_range` on the gaps;
    /// negative entries are ignored): what the child inherited and does not use, such as the
    /// runner's locks. Afterwards the child program uses no descriptor but `keep`'s (and those
    /// below `first`). Async-signal-safe.
    pub(crate) fn close_from<const N: usize>(&self, first: RawFd, keep: [RawFd; N]) {
        let mut first = first.max(0) as libc::c_uint;
        let mut sorted = keep;
        sorted.sort_unstable();
        for fd in sorted {
            if fd >= first as RawFd {
                if fd > first as RawFd {
                    close_range(first, fd as libc::c_uint - 1);
                }
                first = fd as libc::c_uint + 1;
            }
        }
        close_range(first, libc::c_uint::MAX);
    }

    /// Closes `fd`, which the child inherited and does not use (its owner in the parent's
    /// copied memory is never dropped here: the child never returns into the parent's code).
    /// Afterwards the child program does not use it. Async-signal-safe.
    pub(crate) fn close_inherited(&self, fd: BorrowedFd<'_>) {
        // SAFETY: the caller's contract above: nothing in this child uses `fd` afterwards, and
        // its owner (the parent's object, copied) never runs its drop here.
        unsafe { libc::close(fd.as_raw_fd()) };
    }
}

/// `close_range(first, last, 0)`, in a child only (see [`InChild::close_from`]).
fn close_range(first: libc::c_uint, last: libc::c_uint) {
    // SAFETY: close_range takes integers only; closing in a child program whose contract says
    // it no longer uses what it closes (see `InChild::close_from`).
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint) };
}

/// Forks a child that runs `program` and exits: with 0 when it returned `Ok`, else with its
/// errno (clamped to 0–255; `EIO` when it has none). Returns the child's pid; the caller reaps
/// it.
///
/// Should `program` panic nonetheless, the unwinding stops here: the child exits with 127
/// instead of returning into the caller's code as a second copy of the parent (a backstop:
/// the panic hook itself may deadlock on a lock another thread held at the fork).
///
/// # Safety
/// `program` runs in the child of a possibly multi-threaded process: it must be
/// async-signal-safe (system calls only, through rustix or `sys::linux`, on data prepared
/// before the fork or on its stack; no allocation, lock, panic or standard I/O).
pub(crate) unsafe fn fork(program: impl FnOnce(&InChild) -> io::Result<()>) -> io::Result<Pid> {
    // SAFETY: the child runs only `program` (async-signal-safe by this function's contract)
    // and leaves by `_exit`, never returning into the caller's code (`ExitOnUnwind`).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let guard = ExitOnUnwind;
        let code = match program(&InChild::new()) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO).clamp(0, 255),
        };
        std::mem::forget(guard);
        exit_now(code);
    }
    // -1 is a failed fork (EAGAIN at a process limit, ENOMEM): never a pid handed on, where a
    // kill or wait of -1 would reach every process or child.
    if pid < 0 {
        return Err(last_error());
    }
    Pid::from_raw(pid).ok_or_else(last_error)
}

/// Waits for the child `pid` ([`fork`]'s, exactly that one) to end, retried while a signal
/// interrupts the wait; its wait status.
pub(crate) fn wait_for(pid: Pid) -> io::Result<rustix::process::WaitStatus> {
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(status),
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Ends a forked child with 127 if its program unwinds (its drop runs only then: a program
/// that returns forgets it).
struct ExitOnUnwind;

impl Drop for ExitOnUnwind {
    fn drop(&mut self) {
        exit_now(127);
    }
}

/// Ends the calling process at once with `code` (`_exit`): no destructor, no atexit handler, no
/// flush of Rust's standard I/O. For a forked child, whose copies of the parent's state are not
/// its own to clean up.
fn exit_now(code: c_int) -> ! {
    // SAFETY: _exit takes an integer and never returns; skipping destructors is safe (a leak).
    unsafe { libc::_exit(code) }
}

/// Where the kernel keeps this process's argv strings (fields 48 and 49 of `/proc/self/stat`),
/// read before a fork so that the child can name itself there ([`ArgvArea::write`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArgvArea {
    start: usize,
    end: usize,
}

impl ArgvArea {
    /// This process's argv area, if `/proc/self/stat` gives one.
    pub(crate) fn of_this_process() -> Option<ArgvArea> {
        let stat = super::fd::read_kernel_text("/proc/self/stat").ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // Index 0 is field 3 (state), so field N is at N - 3.
        let start = fields.get(45)?.parse().ok()?;
        let end: usize = fields.get(46)?.parse().ok()?;
        (end > start).then_some(ArgvArea { start, end })
    }

    /// Writes `title` over the area, zero-filled after it (so `ps` shows the title), in the
    /// child. Async-signal-safe.
    pub(crate) fn write(&self, _child: &InChild, title: &[u8]) {
        // SAFETY: the area was read from this process's own /proc/self/stat (the kernel mapped
        // it writable at exec; a fork copies the mapping), and the child (`InChild`) has a
        // single thread, so nothing else reads or writes that memory while it is rewritten; the
        // slice lives only for this call.
        let area =
            unsafe { std::slice::from_raw_parts_mut(self.start as *mut u8, self.end - self.start) };
        let n = title.len().min(area.len() - 1);
        area[..n].copy_from_slice(&title[..n]);
        area[n..].fill(0);
    }
}

/// `struct clone_args` of clone3(2), up to `cgroup` (`CLONE_ARGS_SIZE_VER2`), for a child born
/// in a cgroup (here, and the exec-server's vfork-style spawn).
#[repr(C)]
#[derive(Debug, Default)]
pub struct CloneArgs {
    /// `CLONE_*` flags.
    pub flags: u64,
    /// Where `CLONE_PIDFD` stores the pidfd (an `int *`).
    pub pidfd: u64,
    /// `CLONE_CHILD_SETTID`/`CLEARTID` address.
    pub child_tid: u64,
    /// `CLONE_PARENT_SETTID` address.
    pub parent_tid: u64,
    /// The signal the parent gets at the child's exit.
    pub exit_signal: u64,
    /// Lowest address of the child's stack (0: the parent's, as fork).
    pub stack: u64,
    /// Its size.
    pub stack_size: u64,
    /// `CLONE_SETTLS` value.
    pub tls: u64,
    /// Pids to ask for (`set_tid` array address).
    pub set_tid: u64,
    /// Their number.
    pub set_tid_size: u64,
    /// The cgroup directory's descriptor, with `CLONE_INTO_CGROUP`.
    pub cgroup: u64,
}

/// `CLONE_INTO_CGROUP` from `<linux/sched.h>`: the child starts in the cgroup `cgroup` names.
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Whether this process has a single thread (field 20 of `/proc/self/stat`; an unreadable one
/// counts as more).
fn single_threaded() -> bool {
    let Ok(stat) = super::fd::read_kernel_text("/proc/self/stat") else {
        return false;
    };
    // Index 0 is field 3 (state), so field 20 is at 17.
    stat.rsplit_once(')')
        .and_then(|(_, fields)| fields.split_whitespace().nth(17))
        == Some("1")
}

/// Starts a child born in the cgroup `dir`, which runs `command`'s hooks and executes it
/// (`Command::exec`); its pid. An exec or hook failure comes back as its errno through a
/// close-on-exec pipe, as `Command::spawn` reports it (the child is then reaped). `Ok(None)`,
/// without starting anything, when this process has more than one thread: the child, a plain
/// copy of it, allocates as `Command::exec` does, which only the copy of a single-threaded
/// process may.
pub(crate) fn spawn_into_cgroup(
    dir: BorrowedFd<'_>,
    command: &mut Command,
) -> io::Result<Option<i32>> {
    if !single_threaded() {
        return Ok(None);
    }
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM or a stack is fork(2) into a cgroup; `args` outlives the
    // call and its size is passed. This process has one thread (checked above: only this
    // thread could have started another since), so its child, a copy, may allocate; it runs
    // `Command::exec` and leaves by exec or `_exit`, never returning into this code.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(last_error());
    }
    if pid == 0 {
        drop(reader);
        let errno = command.exec().raw_os_error().unwrap_or(libc::EINVAL);
        let _ = rustix::io::write(&writer, &errno.to_ne_bytes());
        exit_now(127);
    }
    drop(writer);
    let mut errno = [0u8; 4];
    let mut got = 0;
    while got < errno.len() {
        match rustix::io::read(reader.as_fd(), &mut errno[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if got == 0 {
        return Ok(Some(pid as i32));
    }
    // The child failed before exec: reap it, as Command::spawn does.
    let _ = rustix::process::waitpid(
        Pid::from_raw(pid as i32),
        rustix::process::WaitOptions::empty(),
    );
    Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
}
