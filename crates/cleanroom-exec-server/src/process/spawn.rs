//! Starting a pipe-connected process without fork: `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)`
//! on a stack of its own, waited for through the pidfd, and born in the container's cgroup leaf
//! (`clone3` with `CLONE_INTO_CGROUP`) where the kernel and architecture allow, else joining it
//! by a write to `cgroup.procs` before exec.
//!
//! `std::process::Command` with `pre_exec` hooks forks the whole multi-threaded server (its page
//! tables copied, then a copy-on-write fault for every page either side writes before the exec);
//! a vfork-style child shares the server's memory and only its calling thread waits, until the
//! child has executed the command or failed.
//!
//! Owns: the [`Plan`] (everything the child touches, prepared before the clone), the child's
//! steps, and [`Exit`], the wait for the started process.
//!
//! Invariant: the child shares the server's memory while the server's other threads run, so
//! between clone and exec it only reads the plan (which the suspended calling thread keeps
//! alive), writes its own stack, the plan's scratch `sh_argv` slot and the error word, and makes
//! raw, async-signal-safe system calls: it never allocates, locks, panics or touches Rust's
//! standard I/O. Every signal is blocked across the clone, so no handler of the server runs in
//! the child; the child resets every caught disposition to the default before it unblocks them.
//! Children are cloned one at a time ([`ONE_AT_A_TIME`]): a confinement hook stores the
//! descriptors it keeps in its plan's slots, memory every child of that plan shares. (The
//! server also spawns everything under the reaper's lock, so a forked terminal child never
//! overlaps a clone either; the lock here keeps the rule local to this module.)
//! The steps follow `Command`'s order: stdio, cwd, then the hooks (cgroup join, signal reset,
//! setsid, the confinement hook last), then exec with glibc `execvp`'s search over the child's
//! own `PATH` (as `Command` does when the child's environment sets it).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cleanroom::contain::{CloneArgs, CLONE_INTO_CGROUP};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::policy::ChildHook;

/// Held from the clone until the child has executed or failed.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The limit on open descriptors every started process gets back, when the server raised its
/// own ([`keep_descriptor_limit_for_children`]).
static CHILD_NOFILE: OnceLock<libc::rlimit> = OnceLock::new();

/// The server is about to raise its soft limit on open descriptors from `soft`: every process it
/// starts from now on gets `soft` back before exec (a program using `select` breaks on
/// descriptors past 1024), under the hard limit, which stays.
pub fn keep_descriptor_limit_for_children(soft: u64) {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard.unwrap_or(libc::RLIM_INFINITY),
    };
    let _ = CHILD_NOFILE.set(limit);
}

/// Makes a forked `command` take the descriptor limit the server was given back before exec
/// (see [`keep_descriptor_limit_for_children`]).
pub fn restore_descriptor_limit_on_exec(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let Some(&limit) = CHILD_NOFILE.get() else {
        return;
    };
    // SAFETY: runs between fork and exec and makes one async-signal-safe system call on a value
    // copied into the closure; no allocation.
    unsafe {
        command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        });
    }
}

/// The child's stack (it needs a few KiB: the confinement hook's path buffer is the largest).
const STACK_SIZE: usize = 256 * 1024;
/// `PATH` when the child's environment has none (glibc's `_CS_PATH`, what `execvp` uses).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";
/// Errors on which `execvp` goes on to the next `PATH` entry.
const SEARCH_ON: [c_int; 5] = [
    libc::ENOENT,
    libc::ENOTDIR,
    libc::ESTALE,
    libc::ENODEV,
    libc::ETIMEDOUT,
];

/// What the child is to run, prepared before the clone so the child only reads it.
pub struct Plan<'a> {
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
    /// The descriptors for 0, 1 and 2.
    stdio: [RawFd; 3],
    /// The container's leaf: its directory (the child is born in it, `CLONE_INTO_CGROUP`) and
    /// its `cgroup.procs` (joined by writing "0" where a child cannot be born in it).
    cgroup: Option<Leaf>,
    hook: Option<&'a ChildHook>,
    /// The descriptor limit to set back (see [`keep_descriptor_limit_for_children`]).
    nofile: Option<libc::rlimit>,
}

/// The command line and surroundings of a [`Plan`].
pub struct Command<'a> {
    pub program: &'a str,
    pub argv: &'a [String],
    pub arg0: Option<&'a str>,
    pub cwd: &'a Path,
    /// The environment; a later entry for a name replaces an earlier one.
    pub env: Vec<(&'a OsStr, &'a OsStr)>,
    pub stdio: [BorrowedFd<'a>; 3],
    /// The container's leaf directory and its `cgroup.procs`.
    pub cgroup: Option<(BorrowedFd<'a>, BorrowedFd<'a>)>,
    pub hook: Option<&'a ChildHook>,
}

impl<'a> Plan<'a> {
    /// Prepares `command`; fails (InvalidInput) on a NUL byte, as `Command::spawn` does.
    pub fn new(command: Command<'a>) -> io::Result<Plan<'a>> {
        let env: BTreeMap<OsString, &OsStr> = command
            .env
            .iter()
            .map(|(k, v)| (k.to_os_string(), *v))
            .collect();
        let path = env.get(OsStr::new("PATH")).map(|p| p.as_bytes());
        let candidates = candidates(command.program.as_bytes(), path.unwrap_or(DEFAULT_PATH))?;
        let mut argv_owned = vec![cstring(command.arg0.unwrap_or(command.program).as_bytes())?];
        for arg in &command.argv[1..] {
            argv_owned.push(cstring(arg.as_bytes())?);
        }
        let envp_owned = env
            .iter()
            .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<io::Result<Vec<_>>>()?;
        let argv = pointers(&argv_owned);
        let mut sh_argv = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
        sh_argv.extend(pointers(&argv_owned[1..]));
        Ok(Plan {
            candidates,
            argv,
            sh_argv,
            _argv: argv_owned,
            envp: pointers(&envp_owned),
            _envp: envp_owned,
            cwd: cstring(command.cwd.as_os_str().as_bytes())?,
            stdio: command.stdio.map(|fd| fd.as_raw_fd()),
            cgroup: command.cgroup.map(|(dir, procs)| Leaf {
                dir: dir.as_raw_fd(),
                procs: procs.as_raw_fd(),
            }),
            hook: command.hook,
            nofile: CHILD_NOFILE.get().copied(),
        })
    }

    /// Starts the child; returns its pid and its exit once it has executed the command (the
    /// calling thread waits that long), or the error of the step that failed (the child is then
    /// reaped).
    pub fn spawn(mut self) -> io::Result<(i32, Exit)> {
        let stack = Stack::new()?;
        let leaf = self.cgroup;
        let mut context = Context {
            plan: &mut self,
            errno: AtomicI32::new(0),
            join_cgroup: false,
        };
        let mut pidfd: c_int = -1;
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let saved = set_signal_mask(u64::MAX).map_err(io::Error::from_raw_os_error)?;
        // Both clones: the child runs `child` on its own stack and only does what the module's
        // invariant allows; CLONE_VFORK keeps this thread (and so `context`, `self` and the
        // stack) waiting until the child has executed or exited; every signal is blocked (just
        // above) until both are done.
        let mut pid = match leaf {
            // SAFETY: as said above the match; `leaf.dir` is the leaf's open directory.
            Some(leaf) => unsafe { clone_into(leaf.dir, &stack, &mut context, &mut pidfd) },
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
            0 => Ok((pid, Exit::new(pidfd)?)),
            errno => {
                let _ = wait_blocking(&pidfd);
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }
}

/// Every path `execvp` would try for `program` over `path`, in order (an entry of `PATH_MAX`
/// bytes or more is passed over, as glibc does).
fn candidates(program: &[u8], path: &[u8]) -> io::Result<Vec<CString>> {
    if program.is_empty() || program.contains(&b'/') {
        return Ok(vec![cstring(program)?]);
    }
    path.split(|&b| b == b':')
        .filter(|dir| dir.len() < libc::PATH_MAX as usize)
        .map(|dir| match dir {
            b"" => cstring(program),
            dir if dir.ends_with(b"/") => cstring(&[dir, program].concat()),
            dir => cstring(&[dir, b"/", program].concat()),
        })
        .collect()
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// A NULL-terminated array of pointers into `strings`.
fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// What the child gets: the plan, and where it leaves the errno of a failed step.
struct Context<'p, 'a> {
    plan: &'p mut Plan<'a>,
    errno: AtomicI32,
    /// The child was not born in the leaf and joins it by writing to its `cgroup.procs`.
    join_cgroup: bool,
}

/// A cgroup leaf's descriptors (see [`Plan`]).
#[derive(Clone, Copy)]
struct Leaf {
    dir: RawFd,
    procs: RawFd,
}

/// `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` of [`child`] on `stack`; the pid or -errno.
///
/// # Safety
/// See [`Plan::spawn`]: every signal blocked, no other clone of the same plan under way
/// ([`ONE_AT_A_TIME`]), `context` and `stack` alive until it returns.
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
unsafe fn clone_into(dir: RawFd, stack: &Stack, context: &mut Context, pidfd: &mut c_int) -> isize {
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64 | CLONE_INTO_CGROUP,
        pidfd: pidfd as *mut c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: stack.len as u64,
        cgroup: dir as u64,
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
unsafe fn clone_into(_: RawFd, _: &Stack, _: &mut Context, _: &mut c_int) -> isize {
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
    let errno = unsafe { run_child(context.plan, join) };
    context.errno.store(errno.max(1), Ordering::SeqCst);
    // SAFETY: ends the child without running anything of the server's.
    unsafe { libc::_exit(127) }
}

/// # Safety
/// Only in the vfork child, with every signal blocked: it changes the process's descriptors,
/// directory, session and dispositions, which the suspended server shares only while it waits.
unsafe fn run_child(plan: &mut Plan<'_>, join_cgroup: bool) -> c_int {
    // SAFETY: the caller's contract is this function's.
    unsafe { reset_dispositions() };
    for (target, &fd) in plan.stdio.iter().enumerate() {
        let target = target as c_int;
        // SAFETY: fcntl and dup2 take no memory; the descriptors are the plan's, open until
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
    // SAFETY: `cwd` is a C string of the plan, alive while the parent waits.
    if unsafe { libc::chdir(plan.cwd.as_ptr()) } < 0 {
        return errno();
    }
    if let (true, Some(leaf)) = (join_cgroup, plan.cgroup) {
        // SAFETY: writes one byte of a static string to the leaf's open `cgroup.procs`.
        if unsafe { libc::write(leaf.procs, b"0".as_ptr().cast(), 1) } != 1 {
            return errno();
        }
    }
    // SAFETY: setsid takes nothing.
    if unsafe { libc::setsid() } < 0 {
        return errno();
    }
    if let Some(limit) = &plan.nofile {
        // SAFETY: prlimit64 on ourselves (pid 0) reads the plan's `rlimit` and writes nothing
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
    if let Some(hook) = plan.hook {
        if let Err(e) = hook() {
            return e.raw_os_error().unwrap_or(libc::EINVAL);
        }
    }
    if let Err(errno) = set_signal_mask(0) {
        return errno;
    }
    // SAFETY: the caller's contract is this function's.
    unsafe { exec(plan) }
}

/// `execvp`'s search: the next entry on a "not here" error, EACCES if any entry had it, `sh`
/// for a file the kernel cannot execute.
///
/// # Safety
/// Only in the vfork child: on success the process becomes the command.
unsafe fn exec(plan: &mut Plan<'_>) -> c_int {
    let mut denied = false;
    let mut last = libc::ENOENT;
    for candidate in &plan.candidates {
        // SAFETY: the path is a C string and `argv`/`envp` NULL-terminated arrays of C strings,
        // all the plan's, alive while the parent waits.
        unsafe { libc::execve(candidate.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr()) };
        last = errno();
        if last == libc::ENOEXEC {
            // SAFETY: `sh_argv` has at least its two first slots (the plan makes it so), and the
            // candidate outlives the exec; then as above, `sh_argv[0]` being `sh`'s path.
            unsafe {
                *plan.sh_argv.as_mut_ptr().add(1) = candidate.as_ptr();
                libc::execve(plan.sh_argv[0], plan.sh_argv.as_ptr(), plan.envp.as_ptr());
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

fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Sets the calling thread's signal mask to `mask` (one bit per signal) with the raw system call
/// (glibc's wrapper keeps two signals of its own unblocked); returns the previous mask, or the
/// errno. Async-signal-safe: the vfork child empties its mask with it.
fn set_signal_mask(mask: u64) -> Result<u64, c_int> {
    let mut previous = 0u64;
    // SAFETY: both sets are 8 bytes, the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &mask as *const u64,
            &mut previous as *mut u64,
            8usize,
        )
    };
    if rc < 0 {
        Err(errno())
    } else {
        Ok(previous)
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

/// The exit of a started process, read through its pidfd (which reaps it).
pub struct Exit {
    pidfd: Option<AsyncFd<Arc<OwnedFd>>>,
}

impl Exit {
    fn new(pidfd: OwnedFd) -> io::Result<Exit> {
        // SAFETY: the AsyncFd holds a reference to the pidfd, which therefore closes only after
        // the AsyncFd is dropped and has deregistered it.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(Arc::new(pidfd), Interest::READABLE) }?;
        Ok(Exit { pidfd: Some(pidfd) })
    }

    /// The pidfd, shared: it names the process (and its process group) even once reaped.
    pub fn pidfd(&self) -> Option<Arc<OwnedFd>> {
        self.pidfd.as_ref().map(|fd| fd.get_ref().clone())
    }

    /// Waits for the process to exit and reaps it.
    pub async fn wait(mut self) -> io::Result<ExitStatus> {
        let pidfd = self.pidfd.take().expect("an exit is waited for once");
        wait_on(&pidfd).await
    }
}

async fn wait_on(pidfd: &AsyncFd<Arc<OwnedFd>>) -> io::Result<ExitStatus> {
    loop {
        let mut ready = pidfd.readable().await?;
        match waitid(pidfd.get_ref(), libc::WNOHANG)? {
            Some(status) => return Ok(status),
            None => ready.clear_ready(),
        }
    }
}

impl Drop for Exit {
    /// A process whose exit nobody waited for is still reaped, in the background.
    fn drop(&mut self) {
        if let (Some(pidfd), Ok(runtime)) =
            (self.pidfd.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move { wait_on(&pidfd).await });
        }
    }
}

fn wait_blocking(pidfd: &OwnedFd) -> io::Result<Option<ExitStatus>> {
    waitid(pidfd, 0)
}

/// `waitid(P_PIDFD, WEXITED | extra)`: the status, or None when WNOHANG found it running.
fn waitid(pidfd: &OwnedFd, extra: c_int) -> io::Result<Option<ExitStatus>> {
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

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsFd;

    use super::*;

    fn paths(program: &str, path: &str) -> Vec<String> {
        candidates(program.as_bytes(), path.as_bytes())
            .unwrap()
            .into_iter()
            .map(|c| c.into_string().unwrap())
            .collect()
    }

    /// Runs `argv` in `cwd` with `env` through [`Plan`]: its exit status and its stdout.
    async fn run(
        argv: &[&str],
        cwd: &Path,
        env: &[(&str, &str)],
        hook: Option<&ChildHook>,
    ) -> io::Result<(ExitStatus, String)> {
        run_in(argv, cwd, env, hook, None).await
    }

    /// [`run`] with the cgroup leaf's descriptors (directory, `cgroup.procs`).
    async fn run_in(
        argv: &[&str],
        cwd: &Path,
        env: &[(&str, &str)],
        hook: Option<&ChildHook>,
        cgroup: Option<(BorrowedFd<'_>, BorrowedFd<'_>)>,
    ) -> io::Result<(ExitStatus, String)> {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let null = std::fs::File::open("/dev/null").unwrap();
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let plan = Plan::new(Command {
            program: &argv[0],
            argv: &argv,
            arg0: None,
            cwd,
            env: env
                .iter()
                .map(|(k, v)| (OsStr::new(k), OsStr::new(v)))
                .collect(),
            stdio: [null.as_fd(), write.as_fd(), write.as_fd()],
            cgroup,
            hook,
        })?;
        let (_, exit) = plan.spawn()?;
        drop(write);
        let mut out = String::new();
        std::fs::File::from(read).read_to_string(&mut out).unwrap();
        Ok((exit.wait().await?, out))
    }

    const PATH: (&str, &str) = ("PATH", "/usr/bin:/bin");

    #[tokio::test]
    async fn a_child_is_born_in_the_leaf_without_joining_it() {
        // Needs a cgroup this test may create: root on a cgroup2 host (CI is).
        let mount = cleanroom::contain::cgroup2_mount();
        let (true, Ok(mount)) = (rustix::process::geteuid().is_root(), mount) else {
            return;
        };
        let leaf = mount.join(format!("cleanroom-spawn-test-{}", std::process::id()));
        std::fs::create_dir(&leaf).unwrap();
        let dir = std::fs::File::open(&leaf).unwrap();
        // Not a `cgroup.procs`: a child that had to join by writing to it would fail.
        let not_procs = std::fs::File::open("/dev/null").unwrap();
        let argv = ["cat", "/proc/self/cgroup"];
        let leaf_fds = Some((dir.as_fd(), not_procs.as_fd()));
        let result = run_in(&argv, Path::new("/"), &[PATH], None, leaf_fds).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::remove_dir(&leaf).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (status, out) = result.unwrap();
        assert!(status.success(), "{out}");
        let name = leaf.file_name().unwrap().to_str().unwrap();
        assert!(out.trim_end().ends_with(&format!("/{name}")), "{out}");
        assert!(!leaf.exists(), "the test's leaf is removed");
    }

    #[test]
    fn candidates_follow_execvp() {
        assert_eq!(paths("./x", "/bin"), ["./x"]);
        assert_eq!(paths("", "/bin"), [""]);
        assert_eq!(paths("sh", "/a:/b/::c"), ["/a/sh", "/b/sh", "sh", "c/sh"]);
    }

    #[tokio::test]
    async fn a_path_entry_too_long_for_the_kernel_is_passed_over() {
        let long = "/x".repeat(3000);
        assert_eq!(
            paths("true", &format!("{long}:/usr/bin")),
            ["/usr/bin/true"]
        );
        let path = format!("{long}:/usr/bin:/bin");
        let (status, _) = run(&["true"], Path::new("/"), &[("PATH", &path)], None)
            .await
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }

    #[tokio::test]
    async fn the_child_runs_with_its_own_path_env_cwd_and_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let script = "echo \"$X $(pwd)\"; exit 3";
        let (status, out) = run(&["sh", "-c", script], dir.path(), &[PATH, ("X", "x")], None)
            .await
            .unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(out, format!("x {}\n", dir.path().display()));
        let (status, _) = run(&["sh", "-c", "kill -TERM $$"], dir.path(), &[PATH], None)
            .await
            .unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[tokio::test]
    async fn missing_program_or_cwd_is_enoent_and_the_search_uses_the_childs_path() {
        let here = Path::new("/");
        let missing = run(&["true"], here, &[("PATH", "/nonexistent")], None).await;
        assert_eq!(missing.unwrap_err().raw_os_error(), Some(libc::ENOENT));
        let gone = run(&["true"], Path::new("/nonexistent/cwd"), &[PATH], None).await;
        assert_eq!(gone.unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert!(run(&["true"], here, &[PATH], None)
            .await
            .unwrap()
            .0
            .success());
    }

    #[tokio::test]
    async fn a_script_without_an_interpreter_line_runs_under_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "echo \"from sh: $1\"\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = ("PATH", dir.path().to_str().unwrap());
        let (status, out) = run(&["script", "arg"], dir.path(), &[path], None)
            .await
            .unwrap();
        assert!(status.success());
        assert_eq!(out, "from sh: arg\n");
    }

    #[tokio::test]
    async fn a_failing_hook_fails_the_spawn_with_its_errno() {
        let hook: ChildHook = Box::new(|| Err(io::Error::from_raw_os_error(libc::EPERM)));
        let result = run(&["true"], Path::new("/"), &[PATH], Some(&hook)).await;
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EPERM));
    }

    /// The mechanism itself: the child runs in the server's memory (no fork, no copy), which a
    /// hook's store shows the parent.
    #[tokio::test]
    async fn the_child_shares_the_servers_memory_until_exec() {
        static SEEN: AtomicI32 = AtomicI32::new(0);
        let hook: ChildHook = Box::new(|| {
            SEEN.store(getpid_raw(), Ordering::SeqCst);
            Ok(())
        });
        let (status, _) = run(&["true"], Path::new("/"), &[PATH], Some(&hook))
            .await
            .unwrap();
        assert!(status.success());
        let child = SEEN.load(Ordering::SeqCst);
        assert!(child > 0 && child != std::process::id() as i32, "{child}");
    }

    fn getpid_raw() -> i32 {
        // SAFETY: getpid takes no arguments.
        unsafe { libc::syscall(libc::SYS_getpid) as i32 }
    }

    /// The child starts with every signal unblocked and at its default, whatever the spawning
    /// thread blocked and the process ignored, and in a session of its own.
    #[tokio::test]
    async fn the_child_starts_with_default_signals_in_its_own_session() {
        // SAFETY: ignoring SIGURG (nothing in the tests relies on it) and blocking SIGTERM on
        // this thread only.
        unsafe {
            libc::signal(libc::SIGURG, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let script = "grep -E 'SigBlk|SigIgn' /proc/self/status; ps -o sid= -p $$; echo $$";
        let (_, out) = run(&["sh", "-c", script], Path::new("/"), &[PATH], None)
            .await
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        for line in &lines[..2] {
            let (name, mask) = line.split_once(":\t").unwrap();
            let mask = u64::from_str_radix(mask, 16).unwrap();
            assert_eq!(mask & 0x7fff_ffff, 0, "{name} of the child: {mask:#x}");
        }
        assert_eq!(lines[2].trim(), lines[3], "the child leads its own session");
    }
}
