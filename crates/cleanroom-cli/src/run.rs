//! `cleanroom run`: option parsing, the one-line messages on stderr, and the JSON report file.
//! The lifecycle itself is `cleanroom::run`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use cleanroom::contain::ContainMode;
use cleanroom::env::EnvOptions;
use cleanroom::lock::{LockRequest, LockScope};
use cleanroom::protect::{NetMode, ProtectMode};
use cleanroom::reclaim::Budget;
use cleanroom::remove::RemovalStatus;
use cleanroom::report::{Ending, RunReport};
use cleanroom::run::{self, Event, LeakPolicy, ProtectSettings, RunConfig};

use crate::Global;

/// `eprintln!` that ignores write errors: a closed or broken stderr must not make the runner
/// panic in the middle of a run (that would leave the root behind and exit 101).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn duration(text: &str) -> Result<Duration, String> {
    cleanroom::parse_duration(text).map_err(|e| e.to_string())
}

/// `--protect`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ProtectArg {
    /// No kernel policy.
    Off,
    /// The real home and --protect-path paths are read-only.
    Home,
    /// Writes only to the root, the working directory, devices and --allow-write paths.
    Strict,
}

/// `--net`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum NetArg {
    /// The host's network.
    Host,
    /// Only loopback, in a new network namespace.
    None,
}

/// `--contain`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ContainArg {
    /// The strongest mechanism available (cgroup when possible, else session).
    Auto,
    /// A cgroup v2 leaf, or fail.
    Cgroup,
    /// Subreaper + process group only.
    Session,
}

/// `--on-leak`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OnLeakArg {
    /// Kill and report leaked processes; exit with the command's status.
    Warn,
    /// Kill and report them; exit 123 if the command itself succeeded.
    Fail,
}

/// `--lock-scope`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LockScopeArg {
    /// Locks in the user's namespace.
    User,
    /// Locks shared by every user of the machine.
    Machine,
}

/// Options of `cleanroom run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Kill the run after this long (e.g. 500ms, 30s, 10m); exit 124.
    #[arg(long, value_name = "D", value_parser = duration)]
    timeout: Option<Duration>,
    /// Time between TERM and KILL on timeout or interrupt.
    #[arg(long, value_name = "D", value_parser = duration, default_value = "10s")]
    grace: Duration,
    /// Time between TERM and KILL for processes that outlive the command.
    #[arg(long, value_name = "D", value_parser = duration, default_value = "500ms")]
    leak_grace: Duration,
    /// What leaked processes do to the exit status.
    #[arg(long, value_enum, default_value = "warn")]
    on_leak: OnLeakArg,
    /// Keep the root afterwards and print where it is.
    #[arg(long)]
    keep_root: bool,
    /// Give VAR its own directory inside the root (repeatable).
    #[arg(long = "pin", value_name = "VAR")]
    pins: Vec<String>,
    /// Containment mechanism.
    #[arg(long, value_enum, default_value = "auto")]
    contain: ContainArg,
    /// Kernel write protection.
    #[arg(long, value_enum, default_value = "home")]
    protect: ProtectArg,
    /// Also make P read-only for the run (repeatable).
    #[arg(long = "protect-path", value_name = "P")]
    protect_paths: Vec<PathBuf>,
    /// In strict mode, also allow writes to P (repeatable).
    #[arg(long = "allow-write", value_name = "P")]
    allow_write: Vec<PathBuf>,
    /// Network isolation.
    #[arg(long, value_enum, default_value = "host")]
    net: NetArg,
    /// Refuse to run (exit 125) when the kernel cannot enforce the protection asked for.
    #[arg(long)]
    require_protection: bool,
    /// Remove *KEY*, *SECRET*, *TOKEN*, *PASSWORD* variables from the command's environment.
    #[arg(long)]
    drop_secrets: bool,
    /// Keep NAME even with --drop-secrets (repeatable).
    #[arg(long = "keep-env", value_name = "NAME")]
    keep_env: Vec<String>,
    /// Wait for, then hold, the exclusive lock NAME for the whole run (repeatable; or a
    /// comma-separated list in CLEANROOM_EXCLUSIVE, e.g. set once in a project's CI config).
    #[arg(
        long = "exclusive",
        value_name = "NAME",
        env = "CLEANROOM_EXCLUSIVE",
        value_delimiter = ','
    )]
    exclusive: Vec<String>,
    /// Give up waiting for --exclusive locks after D (exit 125); default: wait forever.
    #[arg(long, value_name = "D", value_parser = duration)]
    lock_timeout: Option<Duration>,
    /// Where --exclusive locks live.
    #[arg(long, value_enum, default_value = "user")]
    lock_scope: LockScopeArg,
    /// Write the JSON report (schema cleanroom-run-report v1) to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

impl RunArgs {
    fn config(&self, global: &Global) -> Result<RunConfig, cleanroom::Error> {
        for pin in &self.pins {
            cleanroom::env::validate_pin(pin)?;
        }
        Ok(RunConfig {
            namespace: global.namespace_path(),
            command: self.command.clone(),
            timeout: self.timeout,
            grace: self.grace,
            leak_grace: self.leak_grace,
            on_leak: match self.on_leak {
                OnLeakArg::Warn => LeakPolicy::Warn,
                OnLeakArg::Fail => LeakPolicy::Fail,
            },
            keep_root: self.keep_root,
            contain: match self.contain {
                ContainArg::Auto => ContainMode::Auto,
                ContainArg::Cgroup => ContainMode::Cgroup,
                ContainArg::Session => ContainMode::Session,
            },
            env: EnvOptions {
                pins: self.pins.clone(),
                drop_secrets: self.drop_secrets,
                keep: self.keep_env.clone(),
            },
            protect: ProtectSettings {
                mode: match self.protect {
                    ProtectArg::Off => ProtectMode::Off,
                    ProtectArg::Home => ProtectMode::Home,
                    ProtectArg::Strict => ProtectMode::Strict,
                },
                protect_paths: self.protect_paths.clone(),
                allow_write: self.allow_write.clone(),
                net: match self.net {
                    NetArg::Host => NetMode::Host,
                    NetArg::None => NetMode::None,
                },
                require: self.require_protection,
            },
            locks: (!self.exclusive.is_empty()).then(|| LockRequest {
                names: self.exclusive.clone(),
                scope: match self.lock_scope {
                    LockScopeArg::User => LockScope::User,
                    LockScopeArg::Machine => LockScope::Machine,
                },
                timeout: self.lock_timeout,
            }),
            gc_budget: Budget::AT_RUN_START,
        })
    }
}

/// Runs a command in a fresh root.
pub fn main(args: RunArgs, global: &Global) -> u8 {
    let config = match args.config(global) {
        Ok(c) => c,
        Err(e) => return crate::fail(e),
    };
    let mut events = |event: Event<'_>| match event {
        Event::Warning(text) => say!("cleanroom: warning: {text}"),
        Event::Waiting(text) => say!("cleanroom: {text}"),
        Event::SpawnFailed(text) => say!("cleanroom: {text}"),
    };
    let report = match run::execute(&config, &mut events) {
        Ok(r) => r,
        Err(e) => return crate::fail(e),
    };
    print_summary(&report);
    if let Some(path) = &args.report {
        let text = serde_json::to_string_pretty(&report).expect("report serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            say!("cleanroom: cannot write report {}: {e}", path.display());
            return crate::EXIT_OWN_FAILURE;
        }
    }
    report.exit.status
}

/// Leaked processes named one per line before the rest is summed up (a fork loop leaks thousands).
const MAX_LEAK_LINES: usize = 20;

/// Quiet when all is well; one line per leak and one summary line when something happened.
fn print_summary(report: &RunReport) {
    for leak in report.leaks.iter().take(MAX_LEAK_LINES) {
        say!(
            "cleanroom: leak: pid {} outlived the command and was killed: {}",
            leak.process.id.pid,
            leak.process.command
        );
    }
    if report.leaks.len() > MAX_LEAK_LINES {
        say!(
            "cleanroom: leak: ... and {} more leaked processes, all killed (--report lists every one)",
            report.leaks.len() - MAX_LEAK_LINES
        );
    }
    let mut notes = Vec::new();
    match report.exit.ending {
        Ending::TimedOut => notes.push("timed out".to_string()),
        Ending::Interrupted => notes.push(format!(
            "interrupted by signal {}",
            report.exit.interrupt_signal.unwrap_or_default()
        )),
        Ending::Exited => {}
    }
    if !report.leaks.is_empty() {
        notes.push(format!("{} leaked process(es) killed", report.leaks.len()));
    }
    if let Some(cleanup) = &report.cleanup {
        match &cleanup.status {
            RemovalStatus::Removed => {}
            RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) => {
                notes.push(format!(
                "cleanup incomplete: {} left ({reason}); the next `cleanroom gc` or run retries it",
                cleanup.path.display()
            ))
            }
        }
    }
    if report.kept_root {
        say!(
            "cleanroom: root kept at {} (reclaim it with `cleanroom gc --kept` when done)",
            report.root.display()
        );
    }
    if !notes.is_empty() {
        say!(
            "cleanroom: run {} exited {}: {}",
            report.run_id,
            report.exit.status,
            notes.join("; ")
        );
    }
}
