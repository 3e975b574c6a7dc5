//! The lifecycle of `cleanroom run`; see `docs/design.md` for the picture.
//!
//! One module on every platform that runs commands: what a run is asked ([`RunConfig`], built
//! with [`RunBuilder`]; [`LeakPolicy`], [`KeepRoot`]), what it tells its caller meanwhile
//! ([`Event`]) and at the end (a [`RunReport`], the same schema everywhere), how its outcome
//! becomes the exit status, and the steps every platform takes the same way, are here. The
//! platform's lifecycle is the one private `os` child picked below:
//! - Linux (`linux.rs`, with its children `signals.rs` and `terminal.rs`): containment ladder,
//!   watchdog, protection in the child, exclusive locks, signals read from a signalfd, the
//!   terminal's foreground handed to the command;
//! - Windows (`windows.rs`): exclusive locks, a Job Object per run, Ctrl-C/Ctrl-Break counted
//!   by a console handler (docs/windows.md);
//! - macOS (`macos.rs`, type-checked only): exclusive locks, a process group per run, the
//!   runner's signals counted by a handler (docs/macos.md).
//!
//! Protection and the timeout's signal are Linux's today (`protect` has no other backend):
//! their settings exist on Linux only, and the report's fields a platform cannot fill are
//! `null` or empty there (see [`crate::report`]). Exclusive locks are taken by every platform
//! first, before anything of the run exists, and released once its processes are gone.
//!
//! Every platform:
//! 1. opens the namespace and reclaims stale roots (bounded, [`RunConfig::gc_budget`]);
//! 2. creates and publishes the root, spawns the command contained, waits for its exit, the
//!    deadline or an interrupt (the platform's part);
//! 3. names and kills whatever outlived the command (a leak);
//! 4. keeps the root (always, or on failure with why recorded in its marker), leaves it for gc
//!    (processes survived) or removes it;
//! 5. reports, and exits with the command's status (signal death as 128+N), 124 on timeout, 123
//!    on a leak under [`LeakPolicy::Fail`], 125 for cleanroom's own failures ([`crate::exit`]).
//!
//! Invariant: once the root exists, every path out of [`execute`] removes it (or keeps it when
//! asked), and no process of the run is alive when [`execute`] returns.

mod builder;
#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod os;
#[cfg(windows)]
#[path = "windows.rs"]
mod os;

pub use builder::{RunBuilder, DEFAULT_GRACE, DEFAULT_KEEP_ROOT_COUNT, DEFAULT_LEAK_GRACE};
#[cfg(target_os = "linux")]
pub use os::{parse_signal, ProtectSettings};

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::contain::ContainMode;
use crate::env::{self, EnvOptions};
use crate::error::{Error, Result};
use crate::lock::{self, HeldLocks, LockOwner};
use crate::marker::Kept;
use crate::namespace::Namespace;
use crate::process::ProcessInfo;
use crate::reclaim::{self, Budget};
use crate::remove::Removal;
use crate::report::{
    ContainmentInfo, Ending, EnvInfo, ExitInfo, Leak, ProtectionStatus, RunReport, TmpLeft,
    REPORT_SCHEMA, REPORT_VERSION,
};
use crate::root::{self, Root, RootOptions};

// The exit statuses are defined once, in `crate::exit`.
pub use crate::exit::{
    EXIT_LEAKED, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_OWN_FAILURE, EXIT_TIMEOUT,
    EXIT_TIMEOUT_KILLED,
};

/// SIGINT's number: the status of a run interrupted by an unnamed signal is 128 + this.
const SIGINT: i32 = 2;
/// SIGKILL's number: a timed-out command that died of it after the grace exits 137.
const SIGKILL: i32 = 9;

/// What to do when processes outlive the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeakPolicy {
    /// Kill and report them; the exit status is the command's.
    Warn,
    /// Kill and report them; a successful command exits [`EXIT_LEAKED`].
    Fail,
}

/// When the root stays after the run (`--keep-root=WHEN`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeepRoot {
    /// Removed when the run ends (the default).
    #[default]
    Never,
    /// Kept; gc leaves it until `gc --kept`.
    Always,
    /// Kept when the run fails (its exit status is not 0), with why in its marker; gc reclaims
    /// it once [`RunConfig::keep_root_count`] newer roots were kept on failure. Where a marker
    /// cannot record it (Windows today), the root is removed with a warning.
    OnFailure,
}

/// Everything `cleanroom run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The namespace directory.
    pub namespace: PathBuf,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// `--timeout`.
    pub timeout: Option<Duration>,
    /// `--signal`: the first signal sent when the timeout fires (Linux; Windows terminates the
    /// run's job at once).
    #[cfg(target_os = "linux")]
    pub timeout_signal: rustix::process::Signal,
    /// `--grace`: between TERM and KILL on timeout or interrupt (Windows: between the first
    /// Ctrl-C and the termination of the job; macOS: between the first signal to the process
    /// group and its KILL).
    pub grace: Duration,
    /// Between TERM and KILL for leaked processes.
    pub leak_grace: Duration,
    /// `--on-leak`.
    pub on_leak: LeakPolicy,
    /// `--keep-root`.
    pub keep_root: KeepRoot,
    /// `--keep-root-count`: how many roots kept on failure stay (the newest).
    pub keep_root_count: u32,
    /// `--contain` (Linux's ladder; Windows always uses a Job Object, macOS a process group).
    pub contain: ContainMode,
    /// Environment options.
    pub env: EnvOptions,
    /// Protection (Linux).
    #[cfg(target_os = "linux")]
    pub protect: ProtectSettings,
    /// `--exclusive` locks, if any (Windows: user scope only).
    pub locks: Option<crate::lock::LockRequest>,
    /// Bound of the reclamation at start.
    pub gc_budget: Budget,
}

/// Progress the caller may want to show while the run is set up.
pub enum Event<'a> {
    /// A warning to show once (e.g. protection not enforced).
    Warning(&'a str),
    /// Waiting for an exclusive lock.
    Waiting(&'a str),
    /// The command could not be started.
    SpawnFailed(&'a str),
}

/// Runs `config.command` in a fresh root and returns the report. `Err` means nothing was run.
pub fn execute(config: &RunConfig, events: &mut dyn FnMut(Event<'_>)) -> Result<RunReport> {
    let started = Instant::now();
    let started_at = SystemTime::now();
    if config.command.is_empty() {
        return Err(Error::Invalid(
            "no command given (usage: cleanroom run [OPTIONS] -- COMMAND [ARGS...])".into(),
        ));
    }
    let ns = Namespace::open_or_create(&config.namespace)?;
    let gc = reclaim::at_run_start(&ns, config.gc_budget);
    let run_id = root::new_run_id()?;
    let command: Vec<String> = config
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let ran = os::execute(config, ns, &run_id, &command, events)?;
    Ok(RunReport {
        schema: REPORT_SCHEMA,
        version: REPORT_VERSION,
        run_id,
        root: ran.root,
        command,
        started_unix_ms: unix_ms(started_at),
        duration_ms: started.elapsed().as_millis() as u64,
        exit: ran.exit,
        containment: ran.containment,
        protection: ran.protection,
        tmp: ran.tmp,
        leaks: ran.outcome.leaks,
        killed: ran.outcome.killed,
        survivors: ran.outcome.survivors,
        cleanup: ran.cleanup,
        kept_root: ran.kept_root,
        gc,
        env: ran.env,
    })
}

/// What the platform's lifecycle hands back: the parts of the report only it knows.
struct Ran {
    root: PathBuf,
    exit: ExitInfo,
    outcome: Outcome,
    containment: ContainmentInfo,
    protection: Option<ProtectionStatus>,
    tmp: Vec<TmpLeft>,
    cleanup: Option<Removal>,
    kept_root: bool,
    env: EnvInfo,
}

/// Creates and publishes the run's root in `ns` (with the cgroup its marker records, if any),
/// with its own directory for each variable of `homes`.
fn create_root(
    ns: &Namespace,
    run_id: &str,
    command: &[String],
    config: &RunConfig,
    cgroup: Option<String>,
    homes: &[String],
) -> Result<Root> {
    let options = RootOptions {
        command: command.to_vec(),
        keep: config.keep_root == KeepRoot::Always,
        cgroup,
        homes: homes.to_vec(),
    };
    Root::create(ns, run_id, &options)
}

/// Takes the exclusive locks `config` asks for (none: nothing held), telling `events` whom the
/// run waits for. Every platform takes them first, before anything of the run exists, so a
/// timed-out, refused or interrupted wait leaves nothing behind.
fn take_locks(
    config: &RunConfig,
    ns: &Namespace,
    run_id: &str,
    command: &[String],
    events: &mut dyn FnMut(Event<'_>),
) -> Result<HeldLocks> {
    let Some(request) = &config.locks else {
        return Ok(HeldLocks::default());
    };
    let owner = LockOwner {
        run_id: run_id.to_owned(),
        command: command.to_vec(),
    };
    lock::acquire(ns, request, &owner, &mut |line| {
        events(Event::Waiting(line))
    })
}

/// Gives the command what its nested runs need to join the locks the run holds.
fn pass_locks(held: &HeldLocks, child_env: &mut env::ChildEnv) {
    child_env.vars.extend(
        held.child_env()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into())),
    );
}

/// The environment decisions of the report.
fn env_info(child_env: env::ChildEnv, homes: Vec<String>) -> EnvInfo {
    EnvInfo {
        toolchain: child_env.facts.toolchain,
        homes,
        dropped: child_env.dropped,
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// What happened while the command ran.
#[derive(Default)]
struct Outcome {
    /// The command's exit code, if it exited.
    code: Option<i32>,
    /// The signal that killed the command, if one did.
    signal: Option<i32>,
    ending: Option<Ending>,
    interrupt_signal: Option<i32>,
    leaks: Vec<Leak>,
    killed: Vec<ProcessInfo>,
    /// Alive after the KILL loop's bound: the run failed (125), its root is left for gc.
    survivors: Vec<ProcessInfo>,
    /// Processes were still alive after that bound, but none of them could be named (the
    /// platform's list or their details failed): the run failed all the same.
    unnamed_survivors: bool,
    spawn_failure: Option<u8>,
    /// The run was SIGKILLed after its grace.
    escalated: bool,
}

impl Outcome {
    /// How the run ended and the status cleanroom exits with; `timeout_signal` is the first
    /// signal of a timeout, where the platform sends one.
    fn exit_info(&self, on_leak: LeakPolicy, timeout_signal: Option<i32>) -> ExitInfo {
        let ending = self.ending.unwrap_or(Ending::Exited);
        let (code, signal) = (self.code, self.signal);
        let mut status = match (self.spawn_failure, ending, code, signal) {
            (Some(s), ..) => i32::from(s),
            (None, Ending::TimedOut, _, Some(SIGKILL)) if self.escalated => {
                i32::from(EXIT_TIMEOUT_KILLED)
            }
            (None, Ending::TimedOut, ..) => i32::from(EXIT_TIMEOUT),
            (None, Ending::Interrupted, Some(0), _) => {
                128 + self.interrupt_signal.unwrap_or(SIGINT)
            }
            (None, _, Some(c), _) => c,
            (None, _, None, Some(s)) => 128 + s,
            (None, _, None, None) => i32::from(EXIT_OWN_FAILURE),
        };
        if status == 0 && !self.leaks.is_empty() && on_leak == LeakPolicy::Fail {
            status = i32::from(EXIT_LEAKED);
        }
        if self.survived() {
            status = i32::from(EXIT_OWN_FAILURE);
        }
        ExitInfo {
            status,
            code,
            signal,
            ending,
            interrupt_signal: self.interrupt_signal,
            timeout_signal: timeout_signal.filter(|_| ending == Ending::TimedOut),
        }
    }

    /// Whether processes of the run outlived the KILL loop's bound, named or not.
    fn survived(&self) -> bool {
        !self.survivors.is_empty() || self.unnamed_survivors
    }

    /// Records processes that outlived the command, found `found_after_ms` after its exit.
    fn leaked(&mut self, processes: Vec<ProcessInfo>, found_after_ms: u64) {
        self.leaks.extend(processes.into_iter().map(|process| Leak {
            process,
            found_after_ms,
        }));
    }
}

/// The status of a command that could not be started with `e`: 127 not found, 126 not
/// executable (the platform names which errors say so), 125 anything else.
fn spawn_status(e: &std::io::Error) -> u8 {
    match e.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        std::io::ErrorKind::PermissionDenied => EXIT_NOT_EXECUTABLE,
        _ if e.raw_os_error().is_some_and(os::not_executable) => EXIT_NOT_EXECUTABLE,
        _ => EXIT_OWN_FAILURE,
    }
}

/// The root and its command's environment for a run outside Linux's ladder (Windows, macOS), which
/// adds no cgroup to the marker and no protection to the environment: the root made in `ns`
/// (which is let go then), the environment built for it with `held`'s variables, and the home
/// variables the root pins.
#[cfg(not(target_os = "linux"))]
fn root_and_env_outside_the_ladder(
    config: &RunConfig,
    ns: Namespace,
    run_id: &str,
    command: &[String],
    held: &HeldLocks,
) -> Result<(Root, env::ChildEnv, Vec<String>)> {
    let host = env::host_env();
    let homes = env::homes_needed(&host, &config.env.pins);
    let root = create_root(&ns, run_id, command, config, None, &homes)?;
    drop(ns);
    let mut child_env = env::build(&host, root.layout(), root.path(), run_id, &config.env);
    pass_locks(held, &mut child_env);
    Ok((root, child_env, homes))
}

/// The end of a run outside Linux's ladder (Windows, macOS), once its processes are gone: the
/// root kept, left or removed ([`finish_root`]), and what the report says of a containment with
/// no mechanism of the ladder, no protection and no private /tmp.
#[cfg(not(target_os = "linux"))]
fn finish_outside_the_ladder(
    root: Root,
    config: &RunConfig,
    exit: ExitInfo,
    outcome: Outcome,
    env: EnvInfo,
    events: &mut dyn FnMut(Event<'_>),
) -> Ran {
    let root_path = root.path().to_path_buf();
    let survived = outcome.survived();
    let (cleanup, kept_root) = finish_root(root, config, exit.status, survived, events);
    Ran {
        root: root_path,
        exit,
        outcome,
        containment: ContainmentInfo::outside_the_ladder(),
        protection: None,
        tmp: Vec::new(),
        cleanup,
        kept_root,
        env,
    }
}

/// The end of the root once its run is over: kept (always, or on failure with why recorded in
/// its marker), left for gc (processes of the run survived), or removed. Returns the removal,
/// when one was made, and whether the root was kept.
fn finish_root(
    mut root: Root,
    config: &RunConfig,
    exit_status: i32,
    survived: bool,
    events: &mut dyn FnMut(Event<'_>),
) -> (Option<Removal>, bool) {
    match config.keep_root {
        KeepRoot::Always => {
            root.keep();
            return (None, true);
        }
        KeepRoot::OnFailure if exit_status != 0 => {
            let kept = Kept::OnFailure {
                exit_status: u8::try_from(exit_status).unwrap_or(EXIT_OWN_FAILURE),
                retain: config.keep_root_count,
            };
            match root.record_kept(kept) {
                Ok(()) => {
                    root.keep();
                    return (None, true);
                }
                Err(e) => events(Event::Warning(&format!(
                    "could not keep the root of the failed run: {e}; it is removed instead"
                ))),
            }
        }
        KeepRoot::OnFailure | KeepRoot::Never => {}
    }
    if survived {
        tracing::error!(
            "root {} left for gc: processes of the run survived",
            root.path().display()
        );
        root.leave();
        return (None, false);
    }
    (Some(root.close()), false)
}
