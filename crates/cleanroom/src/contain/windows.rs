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
use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::os::windows::process::CommandExt;
use std::process::{Child, Command};

use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
    JobObjectBasicProcessIdList, JobObjectExtendedLimitInformation, QueryInformationJobObject,
    SetInformationJobObject, TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::{
    OpenThread, ResumeThread, CREATE_SUSPENDED, THREAD_SUSPEND_RESUME,
};

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
        // SAFETY: no security attributes, no name; the handle is owned below.
        let handle = win::owned(unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) })?;
        // SAFETY: plain old data; all-zero means "no limits".
        let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        // Neither JOB_OBJECT_LIMIT_BREAKAWAY_OK nor SILENT_BREAKAWAY_OK: nothing leaves the job.
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: `limits` is the structure this information class expects, of the size given.
        win::check(unsafe {
            SetInformationJobObject(
                handle.as_raw_handle(),
                JobObjectExtendedLimitInformation,
                (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        })?;
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

    fn assign(&self, child: &Child) -> io::Result<()> {
        // SAFETY: both handles are open; the child is suspended, so it has run nothing yet.
        win::check(unsafe {
            AssignProcessToJobObject(self.handle.as_raw_handle(), child.as_raw_handle())
        })
    }

    /// The pids of the job's active processes.
    pub fn pids(&self) -> Vec<u32> {
        let mut capacity = 64usize;
        loop {
            // Two u32 counts, then the list of ULONG_PTR ids.
            let mut buf = vec![0usize; 1 + capacity];
            // SAFETY: `buf` is writable for the size given and aligned for the structure.
            let ok = unsafe {
                QueryInformationJobObject(
                    self.handle.as_raw_handle(),
                    JobObjectBasicProcessIdList,
                    buf.as_mut_ptr().cast(),
                    (buf.len() * std::mem::size_of::<usize>()) as u32,
                    std::ptr::null_mut(),
                )
            };
            let assigned = buf[0] as u32 as usize;
            let listed = ((buf[0] >> 32) as u32 as usize).min(capacity);
            if (ok != 0 && listed >= assigned) || capacity >= 1 << 20 {
                return buf[1..=listed].iter().map(|&p| p as u32).collect();
            }
            capacity = (assigned.max(capacity) * 2).max(64);
        }
    }

    /// How many processes of the job are still active.
    pub fn active(&self) -> u32 {
        // SAFETY: plain old data.
        let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is the structure this class expects, of the size given.
        let ok = unsafe {
            QueryInformationJobObject(
                self.handle.as_raw_handle(),
                JobObjectBasicAccountingInformation,
                (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            // Unknown counts as "still active": termination keeps trying.
            return u32::MAX;
        }
        info.ActiveProcesses
    }

    /// The job's active processes, named.
    pub fn members(&self) -> Vec<ProcessInfo> {
        self.pids().into_iter().filter_map(process::info).collect()
    }

    /// Names every active process, kills the whole job, and waits (bounded) until it is empty.
    /// Returns who was killed, and an error when the job did not empty in time.
    pub fn terminate(&self) -> (Vec<ProcessInfo>, io::Result<()>) {
        let members = self.members();
        // SAFETY: the job handle is open.
        let killed = win::check(unsafe {
            TerminateJobObject(self.handle.as_raw_handle(), KILLED_EXIT_CODE)
        });
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
    // SAFETY: a snapshot of all threads; owned below.
    let snapshot = win::owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) })?;
    // SAFETY: plain old data; dwSize is set as the API requires.
    let mut entry: THREADENTRY32 = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    let mut resumed = 0;
    // SAFETY: `snapshot` is open and `entry` is a valid, sized out-parameter.
    let mut more = unsafe { Thread32First(snapshot.as_raw_handle(), &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: no pointers; the handle is owned below.
            let thread =
                win::owned(unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) })?;
            // SAFETY: `thread` is open with THREAD_SUSPEND_RESUME.
            if unsafe { ResumeThread(thread.as_raw_handle()) } == u32::MAX {
                return Err(win::last_error());
            }
            resumed += 1;
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot.as_raw_handle(), &mut entry) } != 0;
    }
    if resumed == 0 {
        return Err(io::Error::other(format!(
            "no thread of the suspended process {pid} was found to resume"
        )));
    }
    Ok(())
}
