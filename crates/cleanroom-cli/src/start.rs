//! The process entry point on Linux with glibc: the part of std's runtime start-up
//! (`lang_start`) that cleanroom relies on, without the rest.
//!
//! std's start-up also finds the main thread's stack through `pthread_getattr_np`, which on
//! glibc reads and parses `/proc/self/maps` (and queries the CPU affinity), only to install the
//! handler that prints "has overflowed its stack": a tenth of a millisecond or more of every
//! run. Without it a stack overflow, on the main thread or any other (the exec-server's tokio
//! workers), still hits the guard page and kills the process, by a plain SIGSEGV without that
//! message; memory safety is the same. The main thread has no name (a panic says
//! `'<unnamed>'`). glibc only: std reads the arguments through an `.init_array` hook there,
//! while on other C libraries only `lang_start` records them.
//!
//! Invariant: before any other code runs, exactly what std would have done and cleanroom needs
//! is done — descriptors 0–2 are open (on `/dev/null` if they were closed, so no file opened
//! later can become a standard stream), and SIGPIPE is ignored (a write to a closed pipe is an
//! `EPIPE` error, not death) the way std's default does it, so std still resets SIGPIPE to the
//! default in every child it spawns. A panic escaping `main` exits 101, as with std's start-up,
//! and stdout is flushed before the process exits.
//!
//! It also keeps two shared libraries out of every start, so that none maps and relocates them
//! (measured in BENCHMARKS.md, issue 30): `libm.so`, whose one symbol the binary took, `pow`
//! (tokio's scheduler statistics and indicatif's rate estimates), is defined here from the
//! `libm` crate; `libgcc_s.so`, std's unwinder, is linked statically from gcc's `libgcc_eh.a`,
//! the same code. The linker resolves their symbols here first and drops both libraries
//! (`--as-needed`). A dependency that needs more of either brings the library back, correctly,
//! only slower (`tests/cli.rs` says which). One cost: where gcc was built against glibc 2.35 or
//! later, its unwinder calls `_dl_find_object`, so a binary built there needs glibc 2.35 where
//! it runs (2.34 otherwise); building on the machine that runs it, as the README does, is
//! unaffected.

use std::ffi::{c_char, c_int};
use std::io::Write;

/// The C `main`: std's runtime start-up, then the command.
#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    // SAFETY: the first code of the process, on its only thread.
    unsafe {
        open_standard_fds();
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let code = std::panic::catch_unwind(crate::cli_main).unwrap_or(101);
    let _ = std::io::stdout().flush();
    c_int::from(code)
}

/// Opens `/dev/null` on each of the descriptors 0–2 that is closed (std's
/// `sanitize_standard_fds`); aborts when that is impossible.
///
/// # Safety
/// Only as the first code of the process, on its only thread: the descriptor `open` returns
/// is the lowest free one only while nothing else opens or closes descriptors.
unsafe fn open_standard_fds() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll writes the `revents` of the three entries of `fds`, on our stack, whose
    // length is passed with it; errno is this thread's own slot.
    while unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } == -1 {
        match errno() {
            libc::EINTR => continue,
            // RLIMIT_NOFILE or a temporary allocation failure: ask each descriptor instead.
            libc::EINVAL | libc::EAGAIN | libc::ENOMEM => {
                for fd in &mut fds {
                    // SAFETY: F_GETFD takes no memory and changes nothing.
                    if unsafe { libc::fcntl(fd.fd, libc::F_GETFD) } == -1 && errno() == libc::EBADF
                    {
                        fd.revents = libc::POLLNVAL;
                    }
                }
                break;
            }
            // SAFETY: abort takes nothing and does not return.
            _ => unsafe { libc::abort() },
        }
    }
    for fd in fds {
        if fd.revents & libc::POLLNVAL == 0 {
            continue;
        }
        // The lowest free descriptor is the closed one (all lower ones are open by now).
        // SAFETY: the path is a static C string; the new descriptor becomes a standard stream,
        // owned by the process from now on (the caller's contract makes it land on `fd`).
        if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } < 0 {
            // SAFETY: as above.
            unsafe { libc::abort() };
        }
    }
}

/// The calling thread's errno.
fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's own errno slot, valid for its life.
    unsafe { *libc::__errno_location() }
}

/// C's `pow`, for the binary's dependencies, without loading `libm.so` (see the module
/// documentation): the `libm` crate's port of FreeBSD's, nearly rounded (a power of integers
/// that is representable comes out exact), where glibc's is under one ulp; its callers estimate
/// rates. Where the linker exports it (rust-lld does: `libm.so`, in the link, defines it too),
/// a library loaded later that calls `pow` gets this one.
#[no_mangle]
extern "C" fn pow(base: f64, exponent: f64) -> f64 {
    libm::pow(base, exponent)
}

// The unwinder (`_Unwind_*`: panics, backtraces) linked from gcc's static `libgcc_eh.a`, which
// the linker meets before std's `-lgcc_s` and so drops `libgcc_s.so` (see the module
// documentation). Its symbols stay hidden in the binary; a library loaded later keeps its own.
#[link(name = "gcc_eh", kind = "static")]
extern "C" {}
