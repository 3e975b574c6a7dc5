//! The lifecycle of a run on Windows (the `os` module of `run`):
//! 1. take the exclusive locks (before anything exists: a timed-out wait leaves nothing); create
//!    and publish the root, take the liveness lock;
//! 2. build the child's environment (profile, temp and XDG dirs pinned inside the root);
//! 3. spawn the command in a Job Object (suspended, assigned, resumed);
//! 4. wait for its exit, the deadline, or Ctrl-C/Ctrl-Break (the console delivers those to the
//!    command too; `--grace` later, or at a second one, the job is killed); on the deadline the
//!    job is killed at once;
//! 5. whatever is still active in the job after the main process exited is a leak: named, killed
//!    with the job; then the locks are released.
//!
//! The namespace, the reclamation at start, the end of the root, the exit status and the report
//! are `run`'s (`mod.rs`). Protection has no Windows backend yet.

use std::os::windows::io::AsHandle;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use windows_sys::Win32::Foundation::ERROR_BAD_EXE_FORMAT;
use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, CTRL_C_EVENT};

use super::{
    env_info, finish_outside_the_ladder, root_and_env_outside_the_ladder, spawn_status, take_locks,
    Event, Outcome, Ran, RunConfig,
};
use crate::contain::Job;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::report::Ending;
use crate::sys::windows as win;

/// Console control events seen by the runner.
static INTERRUPTS: AtomicU32 = AtomicU32::new(0);

/// The console control handler (Windows calls it on a thread of its own): counts Ctrl-C and
/// Ctrl-Break for the runner. A safe function: it touches only an atomic, so no call can be
/// unsound.
extern "system" fn on_console_event(event: u32) -> i32 {
    if event == CTRL_C_EVENT || event == CTRL_BREAK_EVENT {
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
        return 1;
    }
    // Close, logoff, shutdown: the default ends the runner, and the job dies with its handle.
    0
}

/// Runs `config.command` in a fresh root of `ns` named `run_id`; see the module documentation.
pub(super) fn execute(
    config: &RunConfig,
    ns: Namespace,
    run_id: &str,
    command_text: &[String],
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Ran> {
    let held_locks = take_locks(config, &ns, run_id, command_text, events)?;
    let (root, child_env, homes) =
        root_and_env_outside_the_ladder(config, ns, run_id, command_text, &held_locks)?;
    let job = match Job::new() {
        Ok(job) => job,
        Err(e) => {
            root.close();
            return Err(Error::sys("create a Job Object", e));
        }
    };
    let mut command = Command::new(&config.command[0]);
    command
        .args(&config.command[1..])
        .env_clear()
        .envs(&child_env.vars);
    let mut outcome = Outcome::default();
    // Without the handler (no console), Ctrl-C cannot reach the runner anyway.
    let _ = win::set_console_ctrl_handler(on_console_event, true);
    match job.spawn(&mut command, 0) {
        Ok(mut child) => {
            wait(&mut child, &job, config, &mut outcome);
            let exited_at = Instant::now();
            let (leaked, emptied) = job.terminate();
            outcome.leaked(leaked, exited_at.elapsed().as_millis() as u64);
            if let Err(e) = emptied {
                // As on Linux after the KILL loop's bound: the survivors fail the run (125) and
                // its root is left for gc, never removed under them.
                events(Event::Warning(&format!("the run's job did not empty: {e}")));
                outcome.survivors = job.members();
                outcome.unnamed_survivors = outcome.survivors.is_empty() && job.active() != 0;
            }
        }
        Err(e) => {
            events(Event::SpawnFailed(&format!(
                "cannot run {}: {e}",
                command_text[0]
            )));
            outcome.spawn_failure = Some(spawn_status(&e));
        }
    }
    let _ = win::set_console_ctrl_handler(on_console_event, false);
    drop((job, held_locks));
    let exit = outcome.exit_info(config.on_leak, None);
    let env = env_info(child_env, homes);
    Ok(finish_outside_the_ladder(
        root, config, exit, outcome, env, events,
    ))
}

/// Waits for the main process, the deadline or an interrupt, and records how it ended and the
/// command's exit code in `outcome`.
fn wait(child: &mut std::process::Child, job: &Job, config: &RunConfig, outcome: &mut Outcome) {
    let deadline = config.timeout.map(|t| Instant::now() + t);
    let mut interrupted_at: Option<Instant> = None;
    let seen = INTERRUPTS.load(Ordering::SeqCst);
    loop {
        let exited = win::wait_signalled(child.as_handle(), 50);
        let now = Instant::now();
        let interrupts = INTERRUPTS.load(Ordering::SeqCst) - seen;
        if interrupts > 0 && interrupted_at.is_none() {
            interrupted_at = Some(now);
            outcome.ending = Some(Ending::Interrupted);
        }
        let timed_out = !exited && deadline.is_some_and(|d| now >= d);
        if timed_out {
            outcome.ending = Some(Ending::TimedOut);
        }
        let grace_over = interrupted_at.is_some_and(|t| now >= t + config.grace);
        if !exited && !timed_out && interrupts < 2 && !grace_over {
            continue;
        }
        if !exited {
            let _ = job.terminate();
        }
        outcome.code = child.wait().ok().and_then(|s| s.code()).or(Some(1));
        return;
    }
}

/// What CreateProcess says of a file that is not a program Windows can run.
pub(super) fn not_executable(error: i32) -> bool {
    error == ERROR_BAD_EXE_FORMAT as i32
}
