//! The system interface of the library's macOS files, as safe functions, so that those files
//! hold no `unsafe`: `sysctlbyname` strings, the per-user temp dir from
//! `confstr(_CS_DARWIN_USER_TEMP_DIR)`, the runner's counted signals, the terminal's foreground
//! handed to a run, a process's `proc_pidinfo` and a process group's members. Type-checked only
//! (docs/macos.md).
//!
//! Every `unsafe` block here wraps one libc call (or a few on the same stack data), with the
//! buffer's real length passed in, and says why it is sound.

use std::ffi::{CStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// The string value of the sysctl `name`.
pub fn sysctl_string(name: &CStr) -> io::Result<String> {
    let mut buf = [0u8; 256];
    let mut len = buf.len();
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most that and updates `len`.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let value = CStr::from_bytes_until_nul(&buf[..len])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "sysctl string without NUL"))?;
    Ok(value.to_string_lossy().into_owned())
}

/// The per-user temp dir (`/var/folders/…/T/`), which launchd creates mode 0700 for the user;
/// `None` when confstr does not know it.
pub fn user_temp_dir() -> Option<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its length; confstr returns the length it needed, NUL included.
    let needed = unsafe {
        libc::confstr(
            libc::_CS_DARWIN_USER_TEMP_DIR,
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if needed == 0 || needed > buf.len() {
        return None;
    }
    buf.truncate(needed - 1);
    Some(PathBuf::from(OsString::from_vec(buf)))
}

/// What the runner does with the signals others send it while it waits for a run: each of
/// `counted` is counted by a handler that only touches atomics (so it is async-signal-safe, and
/// exec resets it to the default in the command), each of `defaulted` takes its default action
/// (SIGCHLD ignored by whoever started the runner would let the kernel reap the command before
/// the runner learns how it ended). The previous actions come back when this is dropped.
pub struct CountedSignals {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

/// Signals counted since the last [`CountedSignals::install`].
static COUNTED: AtomicU32 = AtomicU32::new(0);
/// The last of them.
static LAST_COUNTED: AtomicI32 = AtomicI32::new(0);

/// The handler of counted signals: two atomic operations, nothing else.
extern "C" fn count_signal(signal: libc::c_int) {
    LAST_COUNTED.store(signal, Ordering::SeqCst);
    COUNTED.fetch_add(1, Ordering::SeqCst);
}

impl CountedSignals {
    /// Counts `counted` and gives `defaulted` their default action, from now until the drop.
    pub fn install(
        counted: &[libc::c_int],
        defaulted: &[libc::c_int],
    ) -> io::Result<CountedSignals> {
        COUNTED.store(0, Ordering::SeqCst);
        let mut installed = CountedSignals {
            previous: Vec::new(),
        };
        let handler = count_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for (signal, action) in counted
            .iter()
            .map(|&s| (s, handler))
            .chain(defaulted.iter().map(|&s| (s, libc::SIG_DFL)))
        {
            let previous = set_action(signal, action)?;
            installed.previous.push((signal, previous));
        }
        Ok(installed)
    }

    /// How many counted signals arrived since [`CountedSignals::install`], and the last one.
    pub fn received(&self) -> (u32, libc::c_int) {
        (
            COUNTED.load(Ordering::SeqCst),
            LAST_COUNTED.load(Ordering::SeqCst),
        )
    }
}

impl Drop for CountedSignals {
    fn drop(&mut self) {
        for (signal, previous) in self.previous.drain(..).rev() {
            // SAFETY: `previous` is the action sigaction gave back for `signal`, unchanged.
            unsafe { libc::sigaction(signal, &previous, std::ptr::null_mut()) };
        }
    }
}

/// Makes `handler` (a function or `SIG_DFL`) the action of `signal`, restarting interrupted
/// calls; returns the previous action.
fn set_action(signal: libc::c_int, handler: libc::sighandler_t) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain data for which all zeroes is a valid value (an empty mask).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: as above.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both structures are valid for the call; the handler, when not SIG_DFL, is
    // `count_signal`, which only touches atomics.
    match unsafe { libc::sigaction(signal, &action, &mut previous) } {
        0 => Ok(previous),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The terminal on stdin, when the runner's process group is its foreground: the command's group
/// takes the foreground for the run (as a shell gives it to a job), so that interactive tools
/// read the terminal instead of being stopped by SIGTTIN, and Ctrl-C reaches them; the runner
/// takes it back afterwards.
pub struct Terminal {
    runner_group: rustix::process::Pid,
}

impl Terminal {
    /// The terminal on stdin, when the runner's group is its foreground.
    pub fn foreground() -> Option<Terminal> {
        let stdin = std::io::stdin();
        if !rustix::termios::isatty(&stdin) {
            return None;
        }
        let foreground = rustix::termios::tcgetpgrp(&stdin).ok()?;
        let own = rustix::process::getpgrp();
        (foreground == own).then_some(Terminal { runner_group: own })
    }

    /// Makes the child of `command`, once it leads its own process group, take the terminal's
    /// foreground before it executes the command.
    pub fn hand_over_on_exec(&self, command: &mut Command) {
        // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
        // (pthread_sigmask, getpid, tcsetpgrp) on stack data.
        unsafe {
            command.pre_exec(|| {
                with_sigttou_blocked(|| libc::tcsetpgrp(0, libc::getpid()));
                Ok(())
            });
        }
    }

    /// Takes the terminal back for the runner's group.
    pub fn take_back(&self) {
        let group = self.runner_group.as_raw_nonzero().get();
        // SAFETY: tcsetpgrp takes a descriptor and a group id; SIGTTOU is blocked so that the
        // runner, in a background group until this returns, is not stopped by it.
        with_sigttou_blocked(|| unsafe { libc::tcsetpgrp(0, group) });
    }
}

/// Runs `f` with SIGTTOU blocked in the calling thread (tcsetpgrp from a background group would
/// otherwise stop it). Async-signal-safe itself (pthread_sigmask on stack sets), so usable
/// between fork and exec when `f` is.
fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) {
    let mut set: libc::sigset_t = 0;
    let mut old: libc::sigset_t = 0;
    // SAFETY: the set functions and pthread_sigmask write only to these two stack variables.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
    }
    f();
    // SAFETY: restores the mask saved above, read from the stack.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
}

/// What `proc_pidinfo(PROC_PIDTBSDINFO)` says of `pid` now; `ESRCH` when it names no process.
pub fn proc_bsd_info(pid: u32) -> io::Result<libc::proc_bsdinfo> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: proc_bsdinfo is plain old data; all zeroes is a valid value to be filled in.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: the buffer is `info`, of exactly `size` bytes, on our stack; the kernel writes at
    // most that many and reads nothing of ours.
    let written =
        unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    match written {
        n if n == size => Ok(info),
        0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short proc_pidinfo answer",
        )),
    }
}

/// Whether `pid` is a zombie (it has exited; only its parent's wait is missing); `false` when
/// it cannot be read.
pub fn is_zombie(pid: i32) -> bool {
    u32::try_from(pid)
        .ok()
        .and_then(|pid| proc_bsd_info(pid).ok())
        .is_some_and(|info| info.pbi_status == libc::SZOMB)
}

/// The pids in the process group `pgid` (zombies included), up to 4096 of them.
pub fn process_group_pids(pgid: i32) -> io::Result<Vec<i32>> {
    let mut pids: Vec<libc::pid_t> = vec![0; 4096];
    let size = (pids.len() * std::mem::size_of::<libc::pid_t>()) as libc::c_int;
    // SAFETY: `pids` is writable for `size` bytes; the kernel writes at most that.
    let listed = unsafe { libc::proc_listpgrppids(pgid, pids.as_mut_ptr().cast(), size) };
    // libproc answers 0, not -1, when the kernel call fails; a group this process asks about
    // always holds at least its unreaped leader, so 0 is a failure too.
    if listed <= 0 {
        return Err(io::Error::last_os_error());
    }
    // libproc's wrapper answers a number of pids (proc_listpids' bytes divided by the size of
    // one), not of bytes.
    pids.truncate(listed as usize);
    pids.retain(|&pid| pid > 0);
    Ok(pids)
}
