//! Helpers shared by the protection tests of this crate: who a child runs as, the `try` shell
//! function that prints whether each write was allowed, the verdict checks, and the scenario
//! runner for process-wide test switches; counted skips (`skip`); binaries and directories
//! made reachable by uid 65534 (`reach`).

#![allow(dead_code)]

mod reach;
mod skip;
#[allow(unused_imports)]
pub use reach::*;
#[allow(unused_imports)]
pub use skip::*;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

pub const NOBODY: u32 = 65534;
pub const PRECIOUS: &str = "precious\n";

/// Who the child runs as.
#[derive(Clone, Copy, PartialEq)]
pub enum Who {
    /// The test process's own user.
    Me,
    /// `nobody` (65534), through `setpriv` when the tests run as root.
    Nobody,
}

pub fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub fn shell(who: Who, script: &str) -> Command {
    if who == Who::Nobody && running_as_root() {
        let mut command = Command::new("setpriv");
        command.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ]);
        command
    } else {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }
}

/// `try <label> <command...>` prints `ALLOWED <label>` or `REFUSED <label>`.
pub const TRY: &str = r#"try() { label=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "ALLOWED $label"; else echo "REFUSED $label"; fi; }
write() { echo new > "$1"; }
append() { echo more >> "$1"; }
shtruncate() { : > "$1"; }
prename() { perl -e 'rename($ARGV[0], $ARGV[1]) or die "$!\n"' "$1" "$2"; }
ptruncate() { perl -e 'truncate($ARGV[0], 0) or die "$!\n"' "$1"; }
"#;

/// The verdict of each `try` line.
pub fn verdicts(output: &Output) -> BTreeMap<String, String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (verdict, label) = line.split_once(' ')?;
            matches!(verdict, "ALLOWED" | "REFUSED").then(|| (label.to_string(), verdict.into()))
        })
        .collect()
}

pub fn assert_all(output: &Output, expected: &str, labels: &[&str]) {
    let got = verdicts(output);
    let wrong: Vec<String> = labels
        .iter()
        .filter(|label| got.get(**label).map(String::as_str) != Some(expected))
        .map(|label| format!("{label}: {:?}", got.get(*label)))
        .collect();
    assert!(
        wrong.is_empty(),
        "expected {expected} for {wrong:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The kernel's Landlock ABI, asked directly (independently of the library).
pub fn kernel_landlock_abi() -> Option<u32> {
    // SAFETY: NULL attributes, size 0 and LANDLOCK_CREATE_RULESET_VERSION only return a number.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    u32::try_from(rc).ok().filter(|abi| *abi > 0)
}

/// What a scenario prints (on stdout, after its last check) to prove it ran to the end.
const SCENARIO_DONE: &str = "cleanroom-scenario-done:";

/// Runs the ignored test `scenario` in a fresh copy of this test binary with `var=value` set
/// (the test-only switches are process-wide, so they must not leak into concurrent tests), and
/// asserts it passed and reached its end ([`scenario_done`]): a scenario that returned early
/// fails here instead of counting as "1 passed".
pub fn run_scenario(scenario: &str, var: &str, value: &str) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            scenario,
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(var, value)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let done = format!("{SCENARIO_DONE} {scenario}\n");
    assert!(
        output.status.success() && stdout.contains("1 passed") && stdout.contains(&done),
        "the scenario {scenario} did not pass to its end ({done:?} missing?)\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The first line of a scenario: it runs only as [`run_scenario`]'s child, with its switch set;
/// run any other way (`cargo test -- --ignored`) it fails rather than pass without checking.
#[track_caller]
pub fn require_switch(var: &str, value: &str) {
    assert!(
        switch_is(var, value),
        "this scenario needs {var}={value}; it is run by its parent test (see its ignore reason)"
    );
}

/// The last line of a scenario: tells [`run_scenario`] every check before it ran.
pub fn scenario_done(scenario: &str) {
    println!("{SCENARIO_DONE} {scenario}");
}

pub fn switch_is(var: &str, value: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == value)
}

/// Drops the child to nobody before the protection hook runs, so `--net none` takes its
/// unprivileged path (a user namespace) even when the tests run as root.
pub fn drop_to_nobody(command: &mut Command) {
    if !running_as_root() {
        return;
    }
    // SAFETY: the hook runs between fork and exec and makes only raw system calls.
    unsafe {
        command.pre_exec(|| {
            let id = NOBODY;
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(id, id, id) != 0
                || libc::setresuid(id, id, id) != 0
                // Changing uid made the process non-dumpable, which makes /proc/self/uid_map
                // root's; exec would undo that, but the protection hook runs before exec.
                || libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs `command` to completion and asserts it succeeded, showing its output when not.
#[track_caller]
pub fn checked_output(command: &mut Command) -> Output {
    let output = command.output().expect("spawn the child");
    assert!(
        output.status.success(),
        "child failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
