//! Counted skips, shared by the test harnesses of both crates (`cleanroom-cli`'s `tests/common`
//! includes this file): a test, or the part of one, that cannot run on this machine says so in
//! one greppable form instead of passing unseen.
//!
//! Invariant: every skip is a line `cleanroom-test-skip: <test>: <reason>` on stderr and, when
//! `CLEANROOM_TEST_SKIP_LOG` names a file, the same line appended to it (one `O_APPEND` write,
//! so concurrent tests and processes never interleave). `scripts/test.sh` sets that variable and
//! fails when `CI` is set and the file is not empty; CI runs as root with Landlock and cgroups,
//! where nothing may skip.

#![allow(dead_code)]

use std::io::Write;

/// The variable naming the file every skip is appended to.
pub const SKIP_LOG_ENV: &str = "CLEANROOM_TEST_SKIP_LOG";

/// The prefix of every skip line.
pub const SKIP_PREFIX: &str = "cleanroom-test-skip";

/// Records that the current test (libtest names its thread after it) skipped something, and
/// why. The caller then returns, or goes on without the skipped part.
pub fn skip(reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test thread>");
    let line = format!("{SKIP_PREFIX}: {test}: {reason}\n");
    eprint!("{line}");
    let Some(log) = std::env::var_os(SKIP_LOG_ENV) else {
        return;
    };
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("record the skip in {}: {e}", log.to_string_lossy()));
}

/// Whether the tests run as root; when not, records a skip of `what` ("the nobody case") and
/// returns false.
pub fn root_or_skip(what: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        skip(&format!("{what} needs root"));
    }
    root
}
