//! The lifecycle of a run on Linux (the `os` module of `run`):
//!
//! 1. take exclusive locks (signals still default: an interrupted wait leaves nothing behind);
//! 2. block the runner's signals; contain (subreaper, cgroup); create and publish the root with
//!    its liveness lock; build the environment and the protection policy;
//! 3. fork the watchdog; spawn the command (born in the cgroup; own process group, terminal,
//!    protection in `pre_exec`);
//! 4. wait for its exit, the deadline, or a signal to the runner (forward, grace, KILL; a second
//!    signal kills at once);
//! 5. whatever is still alive afterwards is a leak: named, TERMed, given a short grace, KILLed;
//! 6. tell the watchdog the run is over; release locks; remove the cgroup and the root (or keep
//!    it); reap the watchdog (it exited meanwhile).
//!
//! The namespace, the reclamation at start and the report are `run`'s (`mod.rs`).

mod signals;
mod terminal;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::{
    create_root, env_info, finish_root, pass_locks, spawn_status, take_locks, Event, Outcome, Ran,
    RunConfig, EXIT_OWN_FAILURE,
};
use crate::contain::Container;
use crate::env;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::process::ProcessInfo;
use crate::protect::{NetMode, ProtectMode, Protection, ProtectionRequest};
use crate::report::{ContainmentInfo, Ending};
use crate::root::Root;

use signals::{Received, RunnerSignals};

/// Reads a signal as kill(1) and timeout(1) take it: `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse_signal(text: &str) -> std::result::Result<Signal, String> {
    const NAMES: [(&str, libc::c_int); 14] = [
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("ABRT", libc::SIGABRT),
        ("KILL", libc::SIGKILL),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("PIPE", libc::SIGPIPE),
        ("ALRM", libc::SIGALRM),
        ("TERM", libc::SIGTERM),
        ("CONT", libc::SIGCONT),
        ("STOP", libc::SIGSTOP),
        ("TSTP", libc::SIGTSTP),
        ("XCPU", libc::SIGXCPU),
    ];
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let raw = match name.parse::<libc::c_int>() {
        Ok(n) => Some(n),
        Err(_) => NAMES.iter().find(|(n, _)| *n == name).map(|&(_, v)| v),
    };
    raw.and_then(Signal::from_named_raw)
        .ok_or_else(|| format!("unknown signal {text:?} (a name such as TERM or INT, or a number)"))
}

/// Protection settings of a run (the run fills in the paths it knows).
#[derive(Clone, Debug)]
pub struct ProtectSettings {
    /// Filesystem mode.
    pub mode: ProtectMode,
    /// `--protect-path`.
    pub protect_paths: Vec<PathBuf>,
    /// `--allow-write`.
    pub allow_write: Vec<PathBuf>,
    /// Where entries of the two lists were named, for messages (see
    /// [`ProtectionRequest::path_origins`]).
    pub path_origins: std::collections::BTreeMap<PathBuf, String>,
    /// `--net`.
    pub net: NetMode,
    /// `--require-protection`.
    pub require: bool,
    /// A private `/tmp` and `/var/tmp` (`--host-tmp` turns it off).
    pub private_tmp: bool,
    /// `--share-tmp`.
    pub share_tmp: Vec<PathBuf>,
}

/// Escalation of the run's termination, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// Nothing asked the run to stop.
    Running,
    /// TERM (or the forwarded signal) was sent; KILL at the instant.
    Signalled(Instant),
    /// Everything was SIGKILLed.
    Killed,
}

/// Runs `config.command` in a fresh root of `ns` named `run_id`; see the module documentation.
pub(super) fn execute(
    config: &RunConfig,
    ns: Namespace,
    run_id: &str,
    command_text: &[String],
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Ran> {
    // Locks come first, while signals still have their default effect: an interrupted or
    // timed-out wait leaves nothing behind, because nothing has been created yet.
    let held_locks = take_locks(config, &ns, run_id, command_text, events)?;
    let mut signals = RunnerSignals::block()?;
    let mut container = Container::new(run_id, config.contain)?;
    tracing::info!(
        "containment: {}{}",
        container.mechanism(),
        container
            .fallback_reason()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let host = env::host_env();
    let homes = env::homes_needed(&host, &config.env.pins);
    let root = create_root(
        &ns,
        run_id,
        command_text,
        config,
        container.cgroup_path().map(|p| p.display().to_string()),
        &homes,
    )?;
    tracing::info!("root: {}", root.path().display());
    let setup = prepare_child(config, &root, &host, events);
    let (mut child_env, mut protection) = match setup {
        Ok(v) => v,
        Err(e) => {
            // Descriptors may be what ran out: the removal needs some, the container and the
            // locks need theirs no longer (nothing of the run has started).
            drop((container, held_locks, ns));
            signals.close_descriptor();
            let removal = root.close();
            if !removal.is_removed() {
                tracing::warn!(
                    "cleanup after a failed setup left {}",
                    removal.path.display()
                );
            }
            return Err(e);
        }
    };
    pass_locks(&held_locks, &mut child_env);

    let mut command = Command::new(&config.command[0]);
    command
        .args(&config.command[1..])
        .env_clear()
        .envs(&child_env.vars);
    crate::contain::reset_signals_on_exec(&mut command);
    // setpgid(0, 0) in the child, before every pre_exec hook (the terminal's handoff needs the
    // group).
    command.process_group(0);
    let foreground = terminal::Foreground::detect();
    if let Some(fg) = &foreground {
        fg.configure(&mut command);
    }
    protection.configure(&mut command);

    // The watchdog is forked last, just before the command (no process of the run exists
    // before it, so nothing can outlive a runner that dies earlier; a dead runner's root and
    // empty cgroup are gc's): the runner's setup then writes its pages before the fork, not
    // through copy-on-write faults after it.
    container.arm_watchdog(run_id);
    let mut outcome = Outcome::default();
    // Armed after the watchdog's fork, so only the command's child holds the report's pipe.
    let setup_report = protection.arm_report().unwrap_or_else(|e| {
        tracing::debug!("no report of the sandbox's best-effort steps: {e}");
        None
    });
    let spawned = container.spawn(&mut command);
    if let Some(report) = setup_report {
        for warning in protection.settle(report) {
            events(Event::Warning(&warning));
        }
    }
    match spawned {
        Ok(main) => {
            container.started(main);
            if let Some((relay, socket)) = foreground.as_ref().and_then(|fg| fg.relay_keys(main)) {
                container.keep(relay.pid());
                signals.watch_keys(relay, socket);
            }
            supervise(config, &mut container, &signals, &mut outcome);
        }
        Err(e) => {
            let (status, message) = spawn_failure(&e, &protection, &command_text[0]);
            events(Event::SpawnFailed(&message));
            outcome.spawn_failure = Some(status);
        }
    }
    if let Some(fg) = &foreground {
        fg.restore();
    }
    // Descriptors may be what ran out (the spawn failed for want of them): what only the spawn
    // needed (the Landlock ruleset, the terminal), the locks and the namespace's handle are
    // given back before the removal needs its own.
    // Survivors: the kill loop gave up; the cgroup and the root stay for gc to retry.
    let survived = outcome.survived();
    let tmp = if survived {
        Vec::new()
    } else {
        protection.tmp_left()
    };
    let protection_status = protection.status().clone();
    drop((command, protection, foreground, held_locks, ns));
    signals.close_descriptor();

    if survived {
        container.left_survivors();
    }
    // Told `D`one now, reaped last: it exits while the cgroup and the root are removed.
    let (watchdog, watchdog_lost) = container.release_watchdog();
    let guarded = watchdog.is_some();
    let exit = outcome.exit_info(config.on_leak, Some(config.timeout_signal.as_raw()));
    let containment = ContainmentInfo {
        mechanism: Some(container.mechanism()),
        fallback_reason: container.fallback_reason().map(str::to_owned),
        cgroup: container.cgroup_path().map(PathBuf::from),
        watchdog: guarded,
        watchdog_lost: watchdog_lost.map(str::to_owned),
    };
    drop(container);
    for left in tmp.iter().filter(|left| left.entries > 0) {
        tracing::info!("{left}, removed with the root");
    }
    let root_path = root.path().to_path_buf();
    let (cleanup, kept_root) = finish_root(root, config, exit.status, survived, events);
    if let Some(watchdog) = watchdog {
        watchdog.disarm();
    }
    // Signals stay blocked until the root is gone, so an impatient Ctrl-C cannot cut the removal
    // short; what arrived meanwhile is discarded rather than delivered when the mask is restored.
    signals.discard();
    drop(signals);
    Ok(Ran {
        root: root_path,
        exit,
        outcome,
        containment,
        protection: Some(protection_status),
        tmp,
        cleanup,
        kept_root,
        env: env_info(child_env, homes),
    })
}

/// The exit status and message of a spawn that failed with `e`: the sandbox's set-up, named by
/// its step and path, is cleanroom's own failure (125); a command that could not be found or
/// executed is 127 or 126.
fn spawn_failure(e: &std::io::Error, protection: &Protection, program: &str) -> (u8, String) {
    if let Some(what) = protection.explain(e) {
        return (
            EXIT_OWN_FAILURE,
            format!("cannot set up the sandbox of {program}: cannot {what}"),
        );
    }
    let status = spawn_status(e);
    (status, format!("cannot run {program}: {e}"))
}

/// ENOEXEC: the file is not a format the kernel can execute.
pub(super) fn not_executable(errno: i32) -> bool {
    errno == libc::ENOEXEC
}

/// Environment and protection: everything between the root and the spawn.
fn prepare_child(
    config: &RunConfig,
    root: &Root,
    host: &std::collections::BTreeMap<OsString, OsString>,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(env::ChildEnv, Protection)> {
    let mut child_env = env::build(host, root.layout(), root.path(), root.run_id(), &config.env);
    let cwd = std::env::current_dir().map_err(|e| Error::sys("read the current directory", e))?;
    let mut request = ProtectionRequest::new(config.protect.mode, &child_env, root.path(), &cwd);
    request
        .protect_paths
        .clone_from(&config.protect.protect_paths);
    request.allow_write.clone_from(&config.protect.allow_write);
    request
        .path_origins
        .clone_from(&config.protect.path_origins);
    request.net = config.protect.net;
    request.require = config.protect.require;
    request.private_tmp = config.protect.private_tmp;
    request.share_tmp.clone_from(&config.protect.share_tmp);
    let protection = Protection::prepare(&request)?;
    let status = protection.status();
    for warning in &status.warnings {
        events(Event::Warning(warning));
    }
    tracing::info!("protection: {status}");
    child_env.vars.extend(
        protection
            .child_env()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into())),
    );
    Ok((child_env, protection))
}

/// Waits for the main process while honouring the deadline and signals; then handles leaks.
fn supervise(
    config: &RunConfig,
    container: &mut Container,
    signals: &RunnerSignals,
    outcome: &mut Outcome,
) {
    let deadline = config.timeout.map(|t| Instant::now() + t);
    let mut stage = Stage::Running;
    // The members signalled when the run was asked to stop: the first to be KILLed.
    let mut known: Vec<ProcessInfo> = Vec::new();
    loop {
        container.reap();
        if container.main_status().is_some() {
            break;
        }
        let now = Instant::now();
        if let (Some(d), Stage::Running) = (deadline, stage) {
            if now >= d {
                tracing::info!(
                    "timeout: sending signal {} to every process of the run",
                    config.timeout_signal.as_raw()
                );
                outcome.ending = Some(Ending::TimedOut);
                known = container.signal_all(config.timeout_signal);
                stage = Stage::Signalled(now + config.grace);
            }
        }
        if let Stage::Signalled(kill_at) = stage {
            if now >= kill_at {
                tracing::info!("grace period over: killing every process of the run");
                kill_all(container, &known, outcome);
                stage = Stage::Killed;
                continue;
            }
        }
        let wake = match stage {
            Stage::Running => deadline,
            Stage::Signalled(kill_at) => Some(kill_at),
            Stage::Killed => Some(now + Duration::from_millis(10)),
        };
        for received in signals.wait(wake.map(|w| w.saturating_duration_since(Instant::now()))) {
            let Received::Forward(sig) = received else {
                continue;
            };
            outcome.interrupt_signal = Some(sig);
            outcome.ending = outcome.ending.max(Some(Ending::Interrupted));
            match stage {
                Stage::Running => {
                    tracing::info!("forwarding signal {sig} to the run");
                    if let Some(signal) = Signal::from_named_raw(sig) {
                        known = container.signal_all(signal);
                    }
                    stage = Stage::Signalled(Instant::now() + config.grace);
                }
                Stage::Signalled(_) => {
                    tracing::info!("second signal: killing every process of the run");
                    kill_all(container, &known, outcome);
                    stage = Stage::Killed;
                }
                Stage::Killed => {}
            }
        }
    }
    match container.main_status() {
        Some(raw) if libc::WIFEXITED(raw) => outcome.code = Some(libc::WEXITSTATUS(raw)),
        Some(raw) if libc::WIFSIGNALED(raw) => outcome.signal = Some(libc::WTERMSIG(raw)),
        _ => {}
    }
    terminate_leaks(config, container, outcome);
}

/// Whatever of the run is alive once the main process is reaped is a leak: named, TERMed, given
/// `--leak-grace`, KILLed (see [`Container::finish`]).
fn terminate_leaks(config: &RunConfig, container: &mut Container, outcome: &mut Outcome) {
    let exited_at = Instant::now();
    let left = container.finish(config.leak_grace);
    let found_after_ms = exited_at.elapsed().as_millis() as u64;
    outcome.leaked(left.leaked, found_after_ms);
    outcome.merge(left.ended);
}

impl Outcome {
    /// Adds what a termination killed and what survived it, once each.
    fn merge(&mut self, ended: crate::contain::Termination) {
        for (list, more) in [
            (&mut self.killed, ended.killed),
            (&mut self.survivors, ended.survivors),
        ] {
            for process in more {
                if !list.iter().any(|k| k.id == process.id) {
                    list.push(process);
                }
            }
        }
    }
}

/// The KILL phase of a timeout or interrupt: `known` first, then everything until the run is
/// provably empty; what needed SIGKILL goes to the report.
fn kill_all(container: &mut Container, known: &[ProcessInfo], outcome: &mut Outcome) {
    outcome.escalated = true;
    outcome.merge(container.kill_until_empty(known));
}
