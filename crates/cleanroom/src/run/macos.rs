//! The lifecycle of a run on macOS (the `os` module of `run`). Type-checked only
//! (docs/macos.md):
//! 1. take exclusive locks (`flock`, as on Linux), while signals still have their default effect;
//! 2. count the runner's signals (INT, TERM, HUP, QUIT: a handler counts them; SIGCHLD takes its
//!    default action); create and publish the root with its liveness lock; build the child's
//!    environment;
//! 3. spawn the command as the leader of a new process group (`contain`'s [`Group`]), which takes
//!    the terminal's foreground when the runner had it (as a shell gives it to a job: Ctrl-C then
//!    reaches the command directly);
//! 4. wait for the leader's exit, the deadline or a signal to the runner, polling every
//!    [`POLL`] (macOS has no signalfd or pidfd): on the deadline TERM to the group, on a signal
//!    that signal; `--grace` later, or at a second signal, KILL until the group is empty;
//! 5. whatever is still in the group once the leader exited is a leak: named, TERMed, given
//!    `--leak-grace`, KILLed; then the leader is reaped;
//! 6. take the terminal back, release the locks, keep, leave or remove the root; signals are
//!    counted (and ignored) until the root is gone, so an impatient Ctrl-C cannot cut the removal
//!    short.
//!
//! The namespace, the reclamation at start, the end of the root, the exit status and the report
//! are `run`'s (`mod.rs`). No protection (the report's `protection` is `null`), no watchdog: if
//! the runner is killed, the group outlives it (docs/macos.md).

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::{
    env_info, finish_outside_the_ladder, root_and_env_outside_the_ladder, spawn_status, take_locks,
    Event, Outcome, Ran, RunConfig,
};
use crate::contain::{Group, Killed};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::report::Ending;
use crate::sys::macos::{CountedSignals, Terminal};

/// Signals to the runner that end the run (forwarded to the command's group first).
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// How often the runner looks at the command, the clock and its signals.
const POLL: Duration = Duration::from_millis(10);

/// Runs `config.command` in a fresh root of `ns` named `run_id`; see the module documentation.
pub(super) fn execute(
    config: &RunConfig,
    ns: Namespace,
    run_id: &str,
    command_text: &[String],
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Ran> {
    let held_locks = take_locks(config, &ns, run_id, command_text, events)?;
    let signals = CountedSignals::install(&FORWARDED, &[libc::SIGCHLD])
        .map_err(|e| Error::sys("install the runner's signal handlers", e))?;
    let (root, child_env, homes) =
        root_and_env_outside_the_ladder(config, ns, run_id, command_text, &held_locks)?;
    let mut command = Command::new(&config.command[0]);
    command
        .args(&config.command[1..])
        .env_clear()
        .envs(&child_env.vars);
    let terminal = Terminal::foreground();
    if let Some(terminal) = &terminal {
        terminal.hand_over_on_exec(&mut command);
    }
    let mut outcome = Outcome::default();
    match Group::spawn(&mut command) {
        Ok(group) => supervise(config, group, &signals, &mut outcome),
        Err(e) => {
            events(Event::SpawnFailed(&format!(
                "cannot run {}: {e}",
                command_text[0]
            )));
            outcome.spawn_failure = Some(spawn_status(&e));
        }
    }
    if let Some(terminal) = &terminal {
        terminal.take_back();
    }
    drop((command, held_locks));
    let exit = outcome.exit_info(config.on_leak, Some(libc::SIGTERM));
    let env = env_info(child_env, homes);
    let ran = finish_outside_the_ladder(root, config, exit, outcome, env, events);
    drop(signals);
    Ok(ran)
}

/// Waits for the group's leader while honouring the deadline and the runner's signals; then
/// ends the group (leaks) and records how the command ended in `outcome`.
fn supervise(config: &RunConfig, group: Group, signals: &CountedSignals, outcome: &mut Outcome) {
    let deadline = config.timeout.map(|t| Instant::now() + t);
    // Counted since the handlers were installed: a signal that came during the set-up is
    // forwarded as soon as the command runs, as one blocked on Linux is read then.
    let mut handled = 0;
    // When the run was asked to stop: KILL at this instant, unless it is over by then.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    while !group.leader_exited() {
        let now = Instant::now();
        let (received, last) = signals.received();
        if received != handled {
            handled = received;
            outcome.interrupt_signal = Some(last);
            outcome.ending = outcome.ending.max(Some(Ending::Interrupted));
            match kill_at {
                None => {
                    tracing::info!("forwarding signal {last} to the run");
                    stop(&group, Signal::from_named_raw(last).unwrap_or(Signal::TERM));
                    kill_at = Some(now + config.grace);
                }
                Some(_) => {
                    tracing::info!("second signal: killing every process of the run");
                    kill_at = Some(now);
                }
            }
        }
        if kill_at.is_none() && deadline.is_some_and(|d| now >= d) {
            tracing::info!("timeout: sending TERM to every process of the run");
            outcome.ending = Some(Ending::TimedOut);
            stop(&group, Signal::TERM);
            kill_at = Some(now + config.grace);
        }
        if !killed && kill_at.is_some_and(|at| now >= at) {
            tracing::info!("grace period over: killing every process of the run");
            outcome.escalated = true;
            let Killed {
                killed: dead,
                survivors,
                unnamed_survivors,
            } = group.kill_until_empty();
            outcome.killed.extend(dead);
            outcome.survivors.extend(survivors);
            outcome.unnamed_survivors |= unnamed_survivors;
            killed = true;
            continue;
        }
        std::thread::sleep(POLL);
    }
    let exited_at = Instant::now();
    let ended = group.finish(config.leak_grace);
    outcome.leaked(ended.leaked, exited_at.elapsed().as_millis() as u64);
    outcome.killed.extend(ended.killed);
    outcome.survivors.extend(ended.survivors);
    outcome.unnamed_survivors |= ended.unnamed_survivors;
    if let Some(status) = ended.status {
        outcome.code = status.code();
        outcome.signal = status.signal();
    }
}

/// Sends `signal` to the group, saying on stderr when it cannot.
fn stop(group: &Group, signal: Signal) {
    if let Err(e) = group.signal(signal) {
        tracing::warn!("cannot signal the run's process group: {e}");
    }
}

/// ENOEXEC: the file is not a format the kernel can execute.
pub(super) fn not_executable(errno: i32) -> bool {
    errno == libc::ENOEXEC
}
