//! Containment: every process a run starts is found by membership and dies with the run.
//!
//! One module on every platform: the types every platform shares are here, and the platform's
//! code is the one private `os` child picked below, whose public items are re-exported here:
//! - Linux (`linux.rs`, with its children `container.rs` and `watchdog.rs`): the ladder below,
//!   ended by the [`Container`], which reaps the runner's children itself; the kill loop its
//!   callers share is `terminate.rs`;
//! - Windows (`windows.rs`): a `Job` Object per run (docs/windows.md);
//! - macOS (`macos.rs`, type-checked only): a process `Group` per run (docs/macos.md).
//!
//! On Linux the ladder, strongest first (the choice is reported in `-v` logs, the JSON report and
//! `cleanroom doctor`):
//! 1. [`Mechanism::Cgroup`]: a cgroup v2 leaf per run, when the runner can create one (root, or
//!    a delegated subtree). Membership is exact; `cgroup.kill` kills atomically, forks included.
//! 2. [`Mechanism::Session`], always present as the floor: the runner is a child subreaper, so
//!    `setsid` and double-forked daemons re-parent to it; membership is "every descendant of the
//!    runner", and termination loops until that set is empty (Bazel's process-wrapper).
//!
//! 2. The floor is on for the cgroup rung too: a process that left the leaf (root can write
//!    itself into another cgroup) is still a descendant of the runner, so still a member.
//!
//! A PID namespace is deliberately not the default: it changes what `ps`, pid files and
//! `kill -0` show the suite, and needs a user namespace when unprivileged, which changes the uid
//! the suite sees. The run's [`Watchdog`] kills it if the runner dies; gc finds what is left
//! after that by `CLEANROOM_RUN_ID`. A process that, before the runner died, left the leaf (or
//! runs on the session rung), the command's process group and the tag is no longer provably the
//! run's once the runner is dead, and survives (docs/containment.md says so).
//!
//! Invariants: processes are named by pid + start time and signalled through pidfds; liveness is
//! [`crate::process::is_alive`] (a `Z` leader with live threads is alive); the subreaper flag is
//! set before the first spawn; termination is TERM → grace → KILL-until-provably-empty: every KILL
//! round writes `cgroup.kill` and kills the command's group and every member, and only
//! `populated 0` plus `waitpid` finding no child (see [`Scope`]) ends it — an empty listing
//! never does; a loop that hits its bound names the survivors on stderr.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod os;
#[cfg(windows)]
#[path = "windows.rs"]
mod os;
#[cfg(target_os = "linux")]
mod terminate;

#[cfg(not(target_os = "linux"))]
use std::io;
#[cfg(not(target_os = "linux"))]
use std::time::{Duration, Instant};

use serde::Serialize;

#[cfg(target_os = "linux")]
pub use os::{
    cgroup2_mount, cgroup_root, exited_children, group_may_have_members, kill_cgroup_path,
    kill_group_of, kill_orphans, reap_exited, reap_orphans, recorded_cgroup_members,
    reset_signals_on_exec, set_subreaper, signal_group_of, CloneArgs, Contained, Container,
    Leftovers, SubCgroup, Watchdog, CLONE_INTO_CGROUP,
};
#[cfg(target_os = "linux")]
pub(crate) use os::{unescape_mountinfo, WATCHDOG_COMM, WATCHDOG_TITLE_PREFIX};
#[cfg(target_os = "macos")]
pub use os::{Ended, Group, Killed};
#[cfg(windows)]
pub use os::{Job, KILLED_EXIT_CODE};
#[cfg(target_os = "linux")]
pub use terminate::{
    kill_until_empty, terminate_set, Children, Listed, Round, Scope, Terminating, Termination,
};

/// What the caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainMode {
    /// The strongest mechanism available.
    Auto,
    /// A cgroup, or an error.
    Cgroup,
    /// The subreaper floor only.
    Session,
}

/// The mechanism in use, weakest first (so `Ord` compares strength).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Subreaper + new process group + loop over descendants.
    Session,
    /// A cgroup v2 leaf with `cgroup.kill`.
    Cgroup,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::Session => "session (subreaper + process group)",
            Mechanism::Cgroup => "cgroup v2",
        })
    }
}

/// How long the termination of a Windows job or a macOS group waits for it to empty before it
/// reports what is left.
#[cfg(not(target_os = "linux"))]
const EMPTY_WAIT: Duration = Duration::from_secs(10);

/// Waits, bounded by `limit` ([`EMPTY_WAIT`] after a kill), until `left` (how many processes a
/// signalled set still has) says none; else the error `stuck` words for the number left, or
/// the last error of `left` (a count that cannot be read is no empty set: it is asked again
/// until the deadline).
#[cfg(not(target_os = "linux"))]
fn wait_until_empty(
    limit: Duration,
    mut left: impl FnMut() -> io::Result<usize>,
    stuck: impl Fn(usize) -> String,
) -> io::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let count = left();
        if matches!(count, Ok(0)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(count.map_or_else(|e| e, |n| io::Error::other(stuck(n))));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
