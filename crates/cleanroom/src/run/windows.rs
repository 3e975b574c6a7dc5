//! The lifecycle of one run on Windows, from the namespace to the exit status:
//! 1. open the namespace; reclaim stale roots (bounded);
//! 2. create and publish the root, take the liveness lock;
//! 3. build the child's environment (profile, temp and XDG dirs pinned inside the root);
//! 4. spawn the command in a Job Object (suspended, assigned, resumed);
//! 5. wait for its exit, the deadline, or Ctrl-C/Ctrl-Break (the console delivers those to the
//!    command too; a second one kills at once); on the deadline or an interrupt the job is killed;
//! 6. whatever is still active in the job after the main process exited is a leak: named, killed;
//! 7. remove the root; return the command's exit code (124 on timeout).
//!
//! Protection (Landlock's role on Linux) has no Windows backend: asking for it best-effort warns,
//! requiring it fails before anything starts.

use std::ffi::OsString;
use std::os::windows::io::AsRawHandle;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::WAIT_OBJECT_0;
use windows_sys::Win32::System::Console::{SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_C_EVENT};
use windows_sys::Win32::System::Threading::WaitForSingleObject;

use crate::contain::Job;
use crate::env::{self, EnvOptions};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::process::ProcessInfo;
use crate::reclaim::{self, Budget, GcSummary};
use crate::remove::Removal;
use crate::root::{Root, RootOptions};

// The exit statuses are defined once, in `crate::exit`.
pub use crate::exit::{EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_TIMEOUT};

/// How long the start of a run may spend reclaiming what other runs left.
const START_GC_BUDGET: Duration = Duration::from_millis(500);
/// How long a command gets after an interrupt before its job is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// What the user asked of protection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protection {
    /// `--protect off`.
    #[default]
    Off,
    /// `--protect MODE`: applied where the platform can; here it warns.
    BestEffort,
    /// `--require-protection`: an error where the platform cannot enforce it.
    Required,
}

/// One run's configuration.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// The namespace directory.
    pub namespace: PathBuf,
    /// Kill the run after this long.
    pub timeout: Option<Duration>,
    /// Leave the root in place.
    pub keep_root: bool,
    /// Environment options (pins, secrets).
    pub env: EnvOptions,
    /// Protection request.
    pub protection: Protection,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It exited by itself.
    Exited,
    /// The deadline passed and the job was killed.
    TimedOut,
    /// Ctrl-C or Ctrl-Break, then the job was killed if it had not exited.
    Interrupted,
}

/// What happened.
#[derive(Debug)]
pub struct RunOutcome {
    /// The run id.
    pub run_id: String,
    /// The root's path.
    pub root: PathBuf,
    /// How the command ended.
    pub ending: Ending,
    /// The exit status to return (the command's, or 124, 126, 127).
    pub status: i32,
    /// Processes alive in the job after the command ended, all killed.
    pub leaks: Vec<ProcessInfo>,
    /// Warnings worth a line on stderr.
    pub warnings: Vec<String>,
    /// How the root's removal went (`None` when kept).
    pub removal: Option<Removal>,
    /// Stale roots reclaimed at the start.
    pub gc: GcSummary,
}

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

/// Runs the command contained and cleans up; see the module documentation.
pub fn execute(config: &RunConfig) -> Result<RunOutcome> {
    let mut warnings = Vec::new();
    match config.protection {
        Protection::Off => {}
        Protection::BestEffort => warnings.push(
            "write protection is not available on Windows (Landlock is Linux-only): the run is \
             contained and cleaned up, but not protected"
                .to_string(),
        ),
        Protection::Required => {
            return Err(Error::Unsupported {
                what: "write protection (--require-protection)",
                reason: "Windows has no Landlock equivalent that cleanroom enforces yet; \
                         run without --require-protection, or on Linux"
                    .into(),
            })
        }
    }
    let program = config
        .command
        .first()
        .ok_or_else(|| Error::Invalid("no command given".into()))?;
    let ns = Namespace::open_or_create(&config.namespace)?;
    let gc = reclaim::at_run_start(
        &ns,
        Budget {
            max_time: Some(START_GC_BUDGET),
            max_count: None,
        },
    );
    let host = env::host_env();
    let run_id = crate::root::new_run_id()?;
    let root = Root::create(
        &ns,
        &run_id,
        &RootOptions {
            command: config
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            keep: config.keep_root,
            cgroup: None,
            homes: env::homes_needed(&host, &config.env.pins),
        },
    )?;
    let child_env = env::build(&host, root.layout(), root.path(), &run_id, &config.env);
    let job = Job::new().map_err(|e| Error::sys("create a Job Object", e))?;
    let mut command = Command::new(program);
    command
        .args(&config.command[1..])
        .env_clear()
        .envs(&child_env.vars);
    // SAFETY: the handler is a plain function that only touches an atomic.
    unsafe { SetConsoleCtrlHandler(Some(on_console_event), 1) };
    let (ending, status, leaks) = match job.spawn(&mut command, 0) {
        Ok(mut child) => {
            let (ending, code) = wait(&mut child, &job, config.timeout);
            let (leaks, emptied) = job.terminate();
            if let Err(e) = emptied {
                warnings.push(format!("the run's job did not empty: {e}"));
            }
            let status = match ending {
                Ending::TimedOut => i32::from(EXIT_TIMEOUT),
                _ => code,
            };
            (ending, status, leaks)
        }
        Err(e) => {
            let status = if e.kind() == std::io::ErrorKind::NotFound {
                i32::from(EXIT_NOT_FOUND)
            } else {
                i32::from(EXIT_NOT_EXECUTABLE)
            };
            warnings.push(format!("cannot run {}: {e}", program.to_string_lossy()));
            (Ending::Exited, status, Vec::new())
        }
    };
    // SAFETY: removes the handler added above.
    unsafe { SetConsoleCtrlHandler(Some(on_console_event), 0) };
    let path = root.path().to_path_buf();
    let removal = if config.keep_root {
        root.keep();
        None
    } else {
        Some(root.close())
    };
    Ok(RunOutcome {
        run_id,
        root: path,
        ending,
        status,
        leaks,
        warnings,
        removal,
        gc,
    })
}

/// Waits for the main process, the deadline or an interrupt; returns how it ended and the
/// command's exit code (meaningful when it exited).
fn wait(child: &mut std::process::Child, job: &Job, timeout: Option<Duration>) -> (Ending, i32) {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut interrupted_at: Option<Instant> = None;
    let seen = INTERRUPTS.load(Ordering::SeqCst);
    loop {
        // SAFETY: the child's process handle is open; a bounded wait.
        if unsafe { WaitForSingleObject(child.as_raw_handle(), 50) } == WAIT_OBJECT_0 {
            let code = child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
            let ending = if interrupted_at.is_some() {
                Ending::Interrupted
            } else {
                Ending::Exited
            };
            return (ending, code);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            let _ = job.terminate();
            let _ = child.wait();
            return (Ending::TimedOut, i32::from(EXIT_TIMEOUT));
        }
        let interrupts = INTERRUPTS.load(Ordering::SeqCst) - seen;
        if interrupts > 0 && interrupted_at.is_none() {
            interrupted_at = Some(now);
        }
        let grace_over = interrupted_at.is_some_and(|t| now >= t + INTERRUPT_GRACE);
        if interrupts > 1 || grace_over {
            let _ = job.terminate();
            let code = child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
            return (Ending::Interrupted, code);
        }
    }
}
