//! The vfork-style start of a pipe-connected process ([`spawn`]):
//! `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` on a stack of its own, born in the container's
//! cgroup leaf (`clone3` with `CLONE_INTO_CGROUP`, through a trampoline of our own) where the
//! kernel and architecture allow, else joining it by a write to `cgroup.procs` before exec; and
//! the wait for its exit through the pidfd ([`wait_exit`]). What to run is prepared by
//! `process::spawn` as an [`Image`] and a [`Setup`].
//!
//! Invariant: the child shares the server's memory while the server's other threads run, so
//! between clone and exec it only reads the image and the setup (which the suspended calling
//! thread keeps alive), writes its own stack, the image's scratch `sh_argv` slot and the error
//! word, and makes raw, async-signal-safe system calls: it never allocates, locks, panics or
//! touches Rust's standard I/O. Every signal is blocked across the clone, so no handler of the
//! server runs in the child; the child resets every caught disposition to the default before it
//! unblocks them. Children are cloned one at a time ([`ONE_AT_A_TIME`]): a confinement hook
//! stores the descriptors it keeps in its plan's slots, memory every child of that plan shares.
//! (The server also spawns everything under the reaper's lock, so a forked terminal child never
//! overlaps a clone either; the lock here keeps the rule local to this module.)
//! The steps follow `Command`'s order: stdio, cwd, then the hooks (cgroup join, signal reset,
//! setsid, the confinement hook last), then exec with glibc `execvp`'s search over the child's
//! own `PATH` (as `Command` does when the child's environment sets it).

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, PoisonError};

use cleanroom::contain::{CloneArgs, CLONE_INTO_CGROUP};

use super::hook::ChildHook;
use super::{errno, exit_now, set_signal_mask};

/// Held from the clone until the child has executed or failed.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The child's stack (it needs a few KiB: the confinement hook's path buffer is the largest).
const STACK_SIZE: usize = 256 * 1024;
/// Errors on which `execvp` goes on to the next `PATH` entry.
const SEARCH_ON: [c_int; 5] = [
    libc::ENOENT,
    libc::ENOTDIR,
    libc::ESTALE,
    libc::ENODEV,
    libc::ETIMEDOUT,
];

/// What the child executes: C strings and the NULL-terminated arrays of pointers into them that
/// `execve` takes, prepared before the clone so the child only reads them.
pub struct Image {
    /// The paths to try, in order (one when the program names a path).
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    argv: Vec<*const c_char>,
    /// `/bin/sh`, a slot for the script, the arguments: for a candidate without a `#!` line
    /// (`ENOEXEC`), as `execvp` does. Only the child writes the slot.
    sh_argv: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const c_char>,
    cwd: CString,
}

impl Image {
    /// `candidates` to try in order with `argv` (the command line, `argv[0]` first) and `envp`
    /// (`NAME=value` entries), in the working directory `cwd`.
    pub fn new(
        candidates: Vec<CString>,
        argv: Vec<CString>,
        envp: Vec<CString>,
        cwd: CString,
    ) -> Image {
        let mut sh_argv = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
        sh_argv.extend(pointers(argv.get(1..).unwrap_or_default()));
        Image {
            candidates,
            argv: pointers(&argv),
            sh_argv,
            _argv: argv,
            envp: pointers(&envp),
            _envp: envp,
            cwd,
        }
    }
}

/// A NULL-terminated array of pointers into `strings`.
fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The surroundings the child sets up before it executes an [`Image`].
pub struct Setup<'a> {
    /// The descriptors for 0, 1 and 2.
    pub stdio: [BorrowedFd<'a>; 3],
    /// The container's leaf: its directory (the child is born in it, `CLONE_INTO_CGROUP`) and
    /// its `cgroup.procs` (joined by writing "0" where a child cannot be born in it).
    pub cgroup: Option<(BorrowedFd<'a>, BorrowedFd<'a>)>,
    /// The confinement hook, run last before exec (async-signal-safe: see [`ChildHook`]).
    pub hook: Option<&'a ChildHook>,
    /// The limit on open descriptors to set before exec.
    pub nofile: Option<libc::rlimit>,
}

/// Starts the child that sets up `setup` and executes `image`; returns its pid and pidfd once it
/// has executed the command (the calling thread waits that long), or the error of the step that
/// failed (the child is then reaped).
pub fn spawn(image: &mut Image, setup: &Setup<'_>) -> io::Result<(i32, OwnedFd)> {
    let stack = Stack::new()?;
    let leaf = setup.cgroup.map(|(dir, _)| dir);
    let mut context = Context {
        image,
        setup,
        errno: AtomicI32::new(0),
        join_cgroup: false,
    };
    let mut pidfd: c_int = -1;
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let saved = set_signal_mask(u64::MAX).map_err(io::Error::from_raw_os_error)?;
    // Both clones: the child runs `child` on its own stack and only does what the module's
    // invariant allows; CLONE_VFORK keeps this thread (and so `context`, the image, the setup
    // and the stack) waiting until the child has executed or exited; every signal is blocked
    // (just above) until both are done.
    let mut pid = match leaf {
        // SAFETY: as said above the match; `dir` is the leaf's open directory.
        Some(dir) => unsafe { clone_into(dir, &stack, &mut context, &mut pidfd) },
        None => -(libc::ENOSYS as isize),
    };
    if matches!(-pid as c_int, libc::ENOSYS | libc::E2BIG | libc::EINVAL) {
        // No clone3 or no CLONE_INTO_CGROUP here: the child joins the leaf itself. (A failed
        // clone3 may have stored a descriptor number it closed again.)
        context.join_cgroup = leaf.is_some();
        pidfd = -1;
        // SAFETY: as for `clone_into` above.
        pid = unsafe { clone_plain(&stack, &mut context, &mut pidfd) };
    }
    let _ = set_signal_mask(saved);
    drop(one);
    if pid < 0 {
        let clone_error = io::Error::from_raw_os_error(-pid as c_int);
        let what = match -pid as c_int {
            libc::ENOSYS | libc::EINVAL => {
                "clone with CLONE_PIDFD failed (Linux 5.4 or later is needed)"
            }
            _ if leaf.is_some() => "clone3 into the cgroup leaf failed",
            _ => return Err(clone_error),
        };
        return Err(io::Error::new(
            clone_error.kind(),
            format!("{what}: {clone_error}"),
        ));
    }
    let pid = pid as i32;
    // SAFETY: CLONE_PIDFD stored a new descriptor, ours alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    match context.errno.load(Ordering::SeqCst) {
        0 => Ok((pid, pidfd)),
        errno => {
            let _ = wait_exit(&pidfd, false);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// What the child gets: the image, the setup, and where it leaves the errno of a failed step.
struct Context<'p, 'a> {
    image: &'p mut Image,
    setup: &'p Setup<'a>,
    errno: AtomicI32,
    /// The child was not born in the leaf and joins it by writing to its `cgroup.procs`.
    join_cgroup: bool,
}

/// `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` of [`child`] on `stack`; the pid or -errno.
///
/// # Safety
/// See [`spawn`]: every signal blocked, no other clone under way ([`ONE_AT_A_TIME`]),
/// `context` and `stack` alive until it returns.
unsafe fn clone_plain(stack: &Stack, context: &mut Context, pidfd: &mut c_int) -> isize {
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
    // SAFETY: `stack` is a mapping of our own whose top is 16-byte aligned and unused by anyone
    // else; `child` keeps the module's invariant on the memory it shares; CLONE_VFORK suspends
    // this thread, so `context` (read by the child) and `pidfd` (written by the kernel) outlive
    // the child's use of them; the caller blocked every signal.
    let pid = unsafe {
        libc::clone(
            child,
            stack.top(),
            flags,
            (context as *mut Context).cast(),
            pidfd as *mut c_int,
        )
    };
    if pid < 0 {
        -(errno() as isize)
    } else {
        pid as isize
    }
}

/// The same child born in the cgroup `dir` (`clone3` with `CLONE_INTO_CGROUP`): no task
/// migration, whose lock can wait for an RCU grace period. glibc has no `clone3` wrapper, and
/// a child on a stack of its own cannot return into a C function's frame, so the syscall is
/// made here: the child, on its new stack, calls `child(context)`, which never returns. The
/// pid or -errno (-ENOSYS on architectures without this trampoline).
///
/// # Safety
/// As [`clone_plain`].
#[cfg(all(target_arch = "x86_64", target_pointer_width = "64"))]
unsafe fn clone_into(
    dir: BorrowedFd<'_>,
    stack: &Stack,
    context: &mut Context,
    pidfd: &mut c_int,
) -> isize {
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64 | CLONE_INTO_CGROUP,
        pidfd: pidfd as *mut c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: stack.len as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let entry: extern "C" fn(*mut c_void) -> c_int = child;
    let result: isize;
    // The kernel starts the child at the instruction after `syscall`, with the parent's
    // registers but rax = 0 and rsp = the top of `stack`.
    // SAFETY: `args` lives on this frame, which stays put while the kernel reads it (and, with
    // CLONE_VFORK, until the child has executed or exited); the parent's path only reads rax and
    // loses rcx and r11, as declared. The child runs on `stack` (mapped, ours alone, realigned
    // to 16 bytes before the call), enters `child` with `context`, which never returns (`ud2`
    // traps if it did), and never touches this frame.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "and rsp, -16",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => result,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") (context as *mut Context).cast::<c_void>(),
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        )
    };
    result
}

/// Elsewhere: no trampoline, so `-ENOSYS` (the caller then uses [`clone_plain`]).
///
/// # Safety
/// As [`clone_plain`] (it keeps the signature; it does nothing).
#[cfg(not(all(target_arch = "x86_64", target_pointer_width = "64")))]
unsafe fn clone_into(_: BorrowedFd<'_>, _: &Stack, _: &mut Context, _: &mut c_int) -> isize {
    -(libc::ENOSYS as isize)
}

/// The child's steps; returns (exits) only on failure, with the errno left in the context. It
/// never returns (the `c_int` is what glibc's `clone` takes; the trampoline traps after it).
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Context`, alive while the parent waits (CLONE_VFORK).
    let context = unsafe { &mut *arg.cast::<Context>() };
    let join = context.join_cgroup;
    // SAFETY: we are the vfork child and every signal is blocked (the parent blocked them
    // before the clone), as `run_child` requires.
    let errno = unsafe { run_child(context.image, context.setup, join) };
    context.errno.store(errno.max(1), Ordering::SeqCst);
    exit_now(127)
}

/// # Safety
/// Only in the vfork child, with every signal blocked: it changes the process's descriptors,
/// directory, session and dispositions, which the suspended server shares only while it waits.
unsafe fn run_child(image: &mut Image, setup: &Setup<'_>, join_cgroup: bool) -> c_int {
    // SAFETY: the caller's contract is this function's.
    unsafe { reset_dispositions() };
    for (target, fd) in setup.stdio.iter().enumerate() {
        let (fd, target) = (fd.as_raw_fd(), target as c_int);
        // SAFETY: fcntl and dup2 take no memory; the descriptors are the setup's, open until
        // the parent resumes.
        let rc = unsafe {
            if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            }
        };
        if rc < 0 {
            return errno();
        }
    }
    // SAFETY: `cwd` is a C string of the image, alive while the parent waits.
    if unsafe { libc::chdir(image.cwd.as_ptr()) } < 0 {
        return errno();
    }
    if let (true, Some((_, procs))) = (join_cgroup, setup.cgroup) {
        // SAFETY: writes one byte of a static string to the leaf's open `cgroup.procs`.
        if unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
            return errno();
        }
    }
    // SAFETY: setsid takes nothing.
    if unsafe { libc::setsid() } < 0 {
        return errno();
    }
    if let Some(limit) = &setup.nofile {
        // SAFETY: prlimit64 on ourselves (pid 0) reads the setup's `rlimit` and writes nothing
        // (the old-limit pointer is null).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0,
                libc::RLIMIT_NOFILE,
                limit as *const libc::rlimit,
                std::ptr::null_mut::<libc::rlimit>(),
            )
        };
        if rc < 0 {
            return errno();
        }
    }
    if let Some(hook) = setup.hook {
        if let Err(e) = hook.run() {
            return e.raw_os_error().unwrap_or(libc::EINVAL);
        }
    }
    if let Err(errno) = set_signal_mask(0) {
        return errno;
    }
    // SAFETY: the caller's contract is this function's.
    unsafe { exec(image) }
}

/// `execvp`'s search: the next entry on a "not here" error, EACCES if any entry had it, `sh`
/// for a file the kernel cannot execute.
///
/// # Safety
/// Only in the vfork child: on success the process becomes the command.
unsafe fn exec(image: &mut Image) -> c_int {
    let mut denied = false;
    let mut last = libc::ENOENT;
    for candidate in &image.candidates {
        // SAFETY: the path is a C string and `argv`/`envp` NULL-terminated arrays of C strings,
        // all the image's, alive while the parent waits.
        unsafe { libc::execve(candidate.as_ptr(), image.argv.as_ptr(), image.envp.as_ptr()) };
        last = errno();
        if last == libc::ENOEXEC {
            // SAFETY: `sh_argv` has at least its two first slots (`Image::new` makes it so), and
            // the candidate outlives the exec; then as above, `sh_argv[0]` being `sh`'s path.
            unsafe {
                *image.sh_argv.as_mut_ptr().add(1) = candidate.as_ptr();
                libc::execve(
                    image.sh_argv[0],
                    image.sh_argv.as_ptr(),
                    image.envp.as_ptr(),
                );
            }
            // Judged like the candidate's own error, as `execvp` does.
            last = errno();
        }
        if last == libc::EACCES {
            denied = true;
        } else if !SEARCH_ON.contains(&last) {
            return last;
        }
    }
    if denied {
        libc::EACCES
    } else {
        last
    }
}

/// Default dispositions: signals 1–31 all (ignored ones too, what the server's parent ignored
/// must not reach the command), real-time signals with a handler.
///
/// # Safety
/// Only in the vfork child, with every signal blocked: the child's table of dispositions is its
/// own copy (no CLONE_SIGHAND), but none of the server's handlers may run on the memory it
/// shares before they are reset.
unsafe fn reset_dispositions() {
    for signal in 1..32 {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: SIG_DFL installs no handler; the caller's contract covers the rest.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
    for signal in libc::SIGRTMIN()..=libc::SIGRTMAX() {
        // SAFETY: sigaction is plain data (all zeroes is valid); the call only writes `old`, on
        // our stack (the new action is null); then as above.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_DFL
                && old.sa_sigaction != libc::SIG_IGN
            {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
    }
}

/// The child's stack: an anonymous mapping with an inaccessible guard page below it.
struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf only reads.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = STACK_SIZE + page;
        // SAFETY: a fresh private anonymous mapping, unmapped in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of our own mapping.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, where a downward stack starts.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: our own mapping; the child no longer runs on it (it executed or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// `waitid(P_PIDFD, WEXITED)` (with `WNOHANG` when `nohang`) on our child's `pidfd`, which reaps
/// it: its status, or None when WNOHANG found it running.
pub fn wait_exit(pidfd: &OwnedFd, nohang: bool) -> io::Result<Option<ExitStatus>> {
    let extra = if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: zeroed siginfo is valid; the call fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a pidfd we own and a siginfo on our stack.
        let rc = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | extra,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid filled a SIGCHLD siginfo (or left it zeroed under WNOHANG).
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        let raw = match info.si_code {
            libc::CLD_EXITED => (status & 0xff) << 8,
            libc::CLD_DUMPED => status | 0x80,
            _ => status,
        };
        return Ok(Some(ExitStatus::from_raw(raw)));
    }
}
