//! Containment on Windows (the `os` module of `contain`): a Job Object per run.
//!
//! The command is created suspended, assigned to a job with `KILL_ON_JOB_CLOSE` (and no
//! breakaway allowed), then resumed, so not one instruction of it runs outside the job; every
//! process it starts is born in the job (`CREATE_BREAKAWAY_FROM_JOB` is refused), detached
//! daemons (`DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP`) included. A leak is a process still
//! active in the job after the main process exited: named, then killed with the whole job
//! (`TerminateJobObject`). The job handle is not inheritable and only the runner holds it, so
//! when the runner dies, however it dies, Windows closes it and kills the run: gc never has
//! orphans to kill on Windows.

use std::io;
use std::os::windows::io::{AsHandle, OwnedHandle};
use std::os::windows::process::CommandExt;
use std::process::{Child, Command};

use windows_sys::Win32::System::JobObjects::JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
use windows_sys::Win32::System::Threading::CREATE_SUSPENDED;

use super::{wait_until_empty, EMPTY_WAIT};
use crate::process::{self, ProcessInfo};
use crate::sys::windows as win;

/// Exit code the processes of a terminated job get.
pub const KILLED_EXIT_CODE: u32 = 1;

/// One run's job.
#[derive(Debug)]
pub struct Job {
    handle: OwnedHandle,
}

impl Job {
    /// A new job that kills every member when its last handle closes and lets none break away.
    pub fn new() -> io::Result<Job> {
        // Neither JOB_OBJECT_LIMIT_BREAKAWAY_OK nor SILENT_BREAKAWAY_OK: nothing leaves the job.
        let handle = win::create_job(JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)?;
        Ok(Job { handle })
    }

    /// Spawns `command` suspended, assigns it to the job, then resumes it. On any failure after
    /// the spawn the process is killed before it ran.
    pub fn spawn(&self, command: &mut Command, extra_flags: u32) -> io::Result<Child> {
        let mut child = command
            .creation_flags(CREATE_SUSPENDED | extra_flags)
            .spawn()?;
        let started = self.assign(&child).and_then(|()| resume(child.id()));
        if let Err(e) = started {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        Ok(child)
    }

    /// Assigns the suspended `child`, which has run nothing yet, to the job.
    fn assign(&self, child: &Child) -> io::Result<()> {
        win::assign_to_job(self.handle.as_handle(), child.as_handle())
    }

    /// The pids of the job's active processes.
    pub fn pids(&self) -> Vec<u32> {
        win::job_process_ids(self.handle.as_handle())
    }

    /// How many processes of the job are still active.
    pub fn active(&self) -> u32 {
        // Unknown counts as "still active": termination keeps trying.
        win::job_active_processes(self.handle.as_handle()).unwrap_or(u32::MAX)
    }

    /// The job's active processes, named.
    pub fn members(&self) -> Vec<ProcessInfo> {
        self.pids().into_iter().filter_map(process::info).collect()
    }

    /// Names every active process, kills the whole job, and waits (bounded) until it is empty.
    /// Returns who was killed, and an error when the job did not empty in time.
    pub fn terminate(&self) -> (Vec<ProcessInfo>, io::Result<()>) {
        let members = self.members();
        let killed = win::terminate_job(self.handle.as_handle(), KILLED_EXIT_CODE);
        let emptied = killed.and_then(|()| {
            wait_until_empty(
                EMPTY_WAIT,
                || Ok(self.active() as usize),
                |n| format!("{n} process(es) still active in the job {EMPTY_WAIT:?} after it was terminated"),
            )
        });
        (members, emptied)
    }
}

/// Resumes every thread of the suspended process `pid` (its main thread; std does not keep
/// the thread handle CreateProcess returned).
fn resume(pid: u32) -> io::Result<()> {
    if win::resume_threads(pid)? == 0 {
        return Err(io::Error::other(format!(
            "no thread of the suspended process {pid} was found to resume"
        )));
    }
    Ok(())
}
