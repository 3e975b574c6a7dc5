//! Containment on macOS (the `os` module of `contain`): a process group per run. Type-checked
//! only (docs/macos.md).
//!
//! The command is spawned as the leader of a new process group (`setpgid(0, 0)` before exec);
//! members are listed with `proc_listpgrppids` and killed with `killpg(SIGKILL)`. Invariant
//! kept: the run's group id is the leader's pid, and nothing is signalled outside that group.
//! Weaker than Linux's cgroup and Windows' job: a process that calls `setsid`/`setpgid` leaves
//! the group unseen (kqueue's `NOTE_TRACK`, which could follow forks, is gone from macOS).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use super::{wait_until_empty, EMPTY_WAIT};
use crate::process::{self, ProcessInfo};

/// One run's process group.
#[derive(Debug)]
pub struct Group {
    pgid: i32,
}

impl Group {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> io::Result<(Group, Child)> {
        let child = command.process_group(0).spawn()?;
        let pgid = child.id() as i32;
        Ok((Group { pgid }, child))
    }

    /// The pids currently in the group (the unreaped leader included).
    pub fn pids(&self) -> io::Result<Vec<i32>> {
        let mut pids: Vec<libc::pid_t> = vec![0; 4096];
        let size = (pids.len() * std::mem::size_of::<libc::pid_t>()) as libc::c_int;
        // SAFETY: `pids` is writable for `size` bytes; the kernel writes at most that.
        let written = unsafe { libc::proc_listpgrppids(self.pgid, pids.as_mut_ptr().cast(), size) };
        if written < 0 {
            return Err(io::Error::last_os_error());
        }
        pids.truncate(written as usize / std::mem::size_of::<libc::pid_t>());
        pids.retain(|&pid| pid > 0);
        Ok(pids)
    }

    /// The group's processes, named.
    pub fn members(&self) -> Vec<ProcessInfo> {
        let pids = self.pids().unwrap_or_default();
        pids.into_iter()
            .filter_map(|pid| u32::try_from(pid).ok())
            .filter_map(process::info)
            .collect()
    }

    /// Names every member, kills the whole group, and waits (bounded) until only the leader,
    /// which the caller reaps, may be left. Returns who was killed, and an error when the group
    /// did not empty in time.
    pub fn terminate(&self) -> (Vec<ProcessInfo>, io::Result<()>) {
        let members = self.members();
        // SAFETY: killpg takes plain integers; ESRCH (group already empty) is success.
        let killed = match unsafe { libc::killpg(self.pgid, libc::SIGKILL) } {
            0 => Ok(()),
            _ => match io::Error::last_os_error() {
                e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                e => Err(e),
            },
        };
        let emptied = killed.and_then(|()| {
            wait_until_empty(
                || Ok(self.pids()?.into_iter().filter(|&p| p != self.pgid).count()),
                |n| {
                    format!(
                        "{n} process(es) still in group {} {EMPTY_WAIT:?} after SIGKILL",
                        self.pgid
                    )
                },
            )
        });
        (members, emptied)
    }
}
