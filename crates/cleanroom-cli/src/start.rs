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
unsafe fn open_standard_fds() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    while libc::poll(fds.as_mut_ptr(), 3, 0) == -1 {
        match *libc::__errno_location() {
            libc::EINTR => continue,
            // RLIMIT_NOFILE or a temporary allocation failure: ask each descriptor instead.
            libc::EINVAL | libc::EAGAIN | libc::ENOMEM => {
                for fd in &mut fds {
                    if libc::fcntl(fd.fd, libc::F_GETFD) == -1
                        && *libc::__errno_location() == libc::EBADF
                    {
                        fd.revents = libc::POLLNVAL;
                    }
                }
                break;
            }
            _ => libc::abort(),
        }
    }
    for fd in fds {
        // The lowest free descriptor is the closed one (all lower ones are open by now).
        if fd.revents & libc::POLLNVAL != 0 && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) < 0 {
            libc::abort();
        }
    }
}
