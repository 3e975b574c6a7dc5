//! The exec-server's system interface: every raw system call, FFI call and fork/clone
//! trampoline of the crate, behind small safe functions (owned or borrowed descriptors,
//! `io::Result`s, checked lengths), as rustix wraps the kernel. The rest of the crate denies
//! `unsafe` (`#![deny(unsafe_code)]` in `lib.rs`).
//!
//! The parts:
//! - [`spawn`]: the vfork-style `clone`/`clone3` of a pipe-connected process, its stack, its
//!   steps up to exec, and the pidfd wait;
//! - [`fork`]: the children forked for `fs/*` calls (what such a child may do is listed there);
//! - [`exec`]: hooks a forked `Command` runs between fork and exec;
//! - [`hook`]: the only code of other crates a child runs before exec (the library's sandbox
//!   hooks), and the capability drops that keep a command out of the server;
//! - [`reactor`]: descriptors registered with tokio's reactor;
//! - here: the signal mask and glibc's allocator.
//!
//! Invariant: every `unsafe` block wraps what it names with a `// SAFETY:` note on the contract
//! it keeps; an `unsafe fn` (only what runs in a vfork child) says when it may be called
//! (`# Safety`) and is called only from this module. Code that runs between fork/clone and
//! exec makes raw, async-signal-safe system calls only: it never allocates, locks or panics.

pub mod exec;
pub mod fork;
pub mod hook;
pub mod reactor;
pub mod spawn;

use std::ffi::c_int;
use std::io;

/// The errno of the last failed call. Async-signal-safe (no allocation: an OS error is a code).
fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Sets the calling thread's signal mask to `mask` (one bit per signal) with the raw system call
/// (glibc's wrapper keeps two signals of its own unblocked); returns the previous mask, or the
/// errno. Async-signal-safe: the vfork child empties its mask with it.
pub fn set_signal_mask(mask: u64) -> Result<u64, c_int> {
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

/// Empties the calling thread's signal mask (`pthread_sigmask` with an empty set).
pub fn unblock_all_signals() -> io::Result<()> {
    // SAFETY: sigemptyset initialises the set; pthread_sigmask only reads it.
    let rc = unsafe {
        let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(empty.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut())
    };
    match rc {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Sets glibc's mmap threshold and trim threshold (`mallopt`); nothing elsewhere.
pub fn tune_allocator(mmap_threshold: c_int, trim_threshold: c_int) {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets two parameters of glibc's allocator (it takes the allocator's
    // own lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim_threshold);
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = (mmap_threshold, trim_threshold);
}

/// Gives glibc's free pages back to the system (`malloc_trim(0)`); nothing elsewhere.
pub fn trim_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes each arena's lock and only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Ends the calling process at once with `code` (`_exit`): no destructor, no atexit handler, no
/// flush of Rust's standard I/O. For a forked child, whose copies of the server's state are not
/// its own to clean up.
pub fn exit_now(code: c_int) -> ! {
    // SAFETY: _exit takes an integer and never returns; skipping destructors is safe (a leak).
    unsafe { libc::_exit(code) }
}

/// Makes the process ignore `signal` (`SIG_IGN`); for tests of what a child inherits.
#[cfg(test)]
pub fn ignore_signal(signal: c_int) {
    // SAFETY: SIG_IGN installs no handler.
    unsafe { libc::signal(signal, libc::SIG_IGN) };
}

/// Blocks `signal` on the calling thread; for tests of what a child inherits.
#[cfg(test)]
pub fn block_signal(signal: c_int) {
    // SAFETY: sigset_t is plain data (all zeroes is valid), initialised by sigemptyset;
    // pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
