//! `cleanroom run`: where its options come from (see `options` for their precedence and
//! `config` for the file), what is checked before anything starts, the one-line messages on
//! stderr, and the JSON report file. The lifecycle itself is `cleanroom::run`.
//!
//! What differs by platform is picked here once: the access check of `--report` and how wide an
//! exit status is (`os`: `run/unix.rs` on Linux and macOS, `run/windows.rs`), and the messages
//! of protection, which only Linux has (`protection`: `run/linux.rs`, the paths its rules name
//! and the hint about a refused write; none elsewhere).

#[cfg(unix)]
#[path = "run/unix.rs"]
mod os;
#[cfg(windows)]
#[path = "run/windows.rs"]
mod os;
#[cfg(target_os = "linux")]
#[path = "run/linux.rs"]
mod protection;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _};
use cleanroom::remove::RemovalStatus;
use cleanroom::report::{Ending, RunReport};
use cleanroom::run::{self, Event, KeepRoot, RunBuilder, RunConfig};

use crate::config::{self, Source};
use crate::options::{KeepRootArg, RunOptions};
use crate::Global;

/// `eprintln!` that ignores write errors: a closed or broken stderr must not make the runner
/// panic in the middle of a run (that would leave the root behind and exit 101).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Shown under `cleanroom run --help`.
pub const EXAMPLES: &str = "Examples:
  cleanroom run cargo test
  cleanroom run --timeout 10m --on-leak fail -- make check
  cleanroom run --protect strict --allow-write ~/.ccache make
  cleanroom run --net none --drop-secrets npm test
  cleanroom run --report run.json pytest

The command follows the options directly; `--` is needed only before a command
that starts with `-`. Options also come from CLEANROOM_* variables (shown above)
and from the [run] table of the nearest cleanroom.toml or .config/cleanroom.toml
(keys named like the flags, e.g. on-leak = \"fail\"): flag > environment >
config file > default. See docs/config.md.

In a terminal the command gets the foreground: Ctrl-C goes to it. If it
ignores Ctrl-C, cleanroom stops the run (as for SIGINT to cleanroom: forwarded,
--grace, then KILL); a second Ctrl-C kills at once.

Exit status: the command's; 124 timeout, 123 leak with --on-leak fail, 125
cleanroom's own failure, 126/127 command not executable/not found
(docs/exit-status.md).";

/// Options of `cleanroom run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    options: RunOptions,
    /// Write the JSON report (schema cleanroom-run-report v1) to FILE, checked before the run
    /// starts (/dev/fd/N writes to an open descriptor; `-` is refused: stdout is the command's)
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Read run options from FILE instead of discovering cleanroom.toml
    #[arg(long, value_name = "FILE", env = "CLEANROOM_CONFIG")]
    config: Option<PathBuf>,
    /// Use no config file (also ignores --config and CLEANROOM_CONFIG)
    #[arg(long)]
    no_config: bool,
    /// The command and its arguments: everything from the first word that is not an option
    /// (or everything after `--`)
    #[arg(
        trailing_var_arg = true,
        required = true,
        num_args = 1..,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

impl RunArgs {
    /// The run's configuration: defaults, then the config file, then the environment and flags.
    /// Everything that can be wrong with the invocation is found here, before anything starts.
    fn config(&self, global: &Global) -> anyhow::Result<RunConfig> {
        if let Some(path) = &self.report {
            check_report_path(path)?;
        }
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let source = match (&self.config, self.no_config) {
            (_, true) => Source::Disabled,
            (Some(path), false) => Source::Explicit(path),
            (None, false) => Source::Discover(&cwd),
        };
        let mut builder =
            RunConfig::builder(self.command.iter().cloned()).namespace(global.namespace_path());
        let file = config::load(source, &mut |warning| say!("cleanroom: warning: {warning}"))?;
        config::pass_on(file.as_ref());
        let file_layer = file.as_ref().map(|f| (f.path.as_path(), &f.run));
        crate::options::refuse_unavailable(&self.options, file_layer)?;
        if let Some(file) = &file {
            tracing::info!("config: {}", file.path.display());
            let applied = file.run.clone().apply(builder);
            let applied = applied.with_context(|| file.path.display().to_string())?;
            builder = name_file_paths(applied, &self.options, file);
        }
        let config = self.options.clone().apply(builder)?.build()?;
        if let Some(origin) = unused_keep_root_count(&self.options, file.as_ref(), &config) {
            say!(
                "cleanroom: warning: {origin} has no effect: only roots kept on failure \
                 (--keep-root=on-failure) are counted"
            );
        }
        Ok(config)
    }

    /// Whether clap read `--keep-root WHEN` as a plain `--keep-root` followed by a command named
    /// WHEN: the value of an option whose value is optional must be attached
    /// (`--keep-root=WHEN`), or `--keep-root cargo test` would not keep the root of `cargo test`.
    /// The caller then reads the command line again with the two words joined
    /// ([`crate::options::join_keep_root_value`]).
    pub fn keep_root_value_apart(&self) -> bool {
        let first = self.command.first().and_then(|w| w.to_str());
        self.options.keep_root == Some(None) && first.and_then(KeepRootArg::named).is_some()
    }
}

/// Names each `protect-path`, `allow-write` and `share-tmp` entry the config file gives (where
/// no flag replaces its list) by the file, line and key, for the library's messages about a
/// path that does not exist (its rule is absent, or refused under `--require-protection`) or
/// that cannot be shared.
fn name_file_paths(
    mut builder: RunBuilder,
    flags: &RunOptions,
    file: &config::Config,
) -> RunBuilder {
    let lists = [
        ("protect-path", &flags.protect_path, &file.run.protect_path),
        ("allow-write", &flags.allow_write, &file.run.allow_write),
        ("share-tmp", &flags.share_tmp, &file.run.share_tmp),
    ];
    for (key, flag_list, file_list) in lists {
        let (None, Some(paths)) = (flag_list, file_list) else {
            continue;
        };
        for (index, path) in paths.iter().enumerate() {
            builder =
                protection::path_origin(builder, path, format!("{} =", file.origin(key, index)));
        }
    }
    builder
}

/// Where a keep-root count that has no effect was given, if one was: the flag, or the config
/// file (unless the file keeps roots on failure itself, and a flag turned that off).
fn unused_keep_root_count(
    flags: &RunOptions,
    file: Option<&config::Config>,
    config: &RunConfig,
) -> Option<String> {
    if config.keep_root == KeepRoot::OnFailure {
        return None;
    }
    if flags.keep_root_count.is_some() {
        return Some("--keep-root-count".into());
    }
    let file = file.filter(|f| f.run.keep_root_count.is_some())?;
    let file_keeps_on_failure = file.run.keep_root == Some(Some(KeepRootArg::OnFailure));
    (!file_keeps_on_failure).then(|| format!("{}: run.keep-root-count", file.path.display()))
}

/// `--report`: refused or checked before anything starts, so a bad path costs one line instead
/// of replacing the command's status after the run.
fn check_report_path(path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    if path.as_os_str() == "-" {
        bail!(
            "--report -: stdout belongs to the command; give a file, or /dev/fd/N to write to an \
             open descriptor"
        );
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => bail!("--report {shown}: is a directory"),
        Ok(_) => os::may_write(path).map_err(|e| anyhow!("--report {shown}: cannot write it: {e}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match std::fs::metadata(parent) {
                Ok(meta) if meta.is_dir() => os::may_create_in(parent).map_err(|e| {
                    anyhow!(
                        "--report {shown}: cannot create files in {}: {e}",
                        parent.display()
                    )
                }),
                Ok(_) => bail!("--report {shown}: {} is not a directory", parent.display()),
                Err(e) => bail!("--report {shown}: directory {}: {e}", parent.display()),
            }
        }
        Err(e) => bail!("--report {shown}: {e}"),
    }
}

/// Runs a command in a fresh root.
pub fn main(args: RunArgs, global: &Global) -> u8 {
    let config = match args.config(global) {
        Ok(c) => c,
        Err(e) => return crate::fail(format!("{e:#}")),
    };
    let quiet = global.quiet;
    let mut events = |event: Event<'_>| match event {
        Event::Warning(text) => say!("cleanroom: warning: {text}"),
        Event::Waiting(text) if !quiet => say!("cleanroom: {text}"),
        Event::Waiting(_) => {}
        Event::SpawnFailed(text) => say!("cleanroom: {text}"),
    };
    let report = match run::execute(&config, &mut events) {
        Ok(r) => r,
        Err(e) => return crate::fail(e),
    };
    print_summary(&report, &config, quiet);
    if let Some(path) = &args.report {
        let text = serde_json::to_string_pretty(&report).expect("report serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            say!("cleanroom: cannot write report {}: {e}", path.display());
            return cleanroom::exit::EXIT_OWN_FAILURE;
        }
    }
    os::exit_status(report.exit.status)
}

/// Leaked processes named one per line before the rest is summed up (a fork loop leaks thousands).
const MAX_LEAK_LINES: usize = 20;

/// Quiet when all is well; one line per leak and one summary line when something happened.
/// With `-q` only a cleanup that did not finish is told (and a kept root, which was asked for).
fn print_summary(report: &RunReport, config: &RunConfig, quiet: bool) {
    let leak_lines = if quiet { 0 } else { MAX_LEAK_LINES };
    let survived = |id| report.survivors.iter().any(|s| s.id == id);
    for leak in report.leaks.iter().take(leak_lines) {
        say!(
            "cleanroom: leak: pid {} outlived the command and {}: {}",
            leak.process.id.pid,
            if survived(leak.process.id) {
                "SURVIVED SIGKILL"
            } else {
                "was killed"
            },
            leak.process.command
        );
    }
    if !quiet && report.leaks.len() > MAX_LEAK_LINES {
        say!(
            "cleanroom: leak: ... and {} more leaked processes (--report lists every one)",
            report.leaks.len() - MAX_LEAK_LINES
        );
    }
    let mut notes = Vec::new();
    match report.exit.ending {
        _ if quiet => {}
        Ending::TimedOut => notes.push("timed out".to_string()),
        Ending::Interrupted => notes.push(format!(
            "interrupted by signal {}",
            report.exit.interrupt_signal.unwrap_or_default()
        )),
        Ending::Exited => {}
    }
    let killed_leaks = report
        .leaks
        .iter()
        .filter(|l| !survived(l.process.id))
        .count();
    if !quiet && killed_leaks > 0 {
        notes.push(format!("{killed_leaks} leaked process(es) killed"));
    }
    if !report.survivors.is_empty() {
        notes.push(format!(
            "{} process(es) survived SIGKILL; root {} and its cgroup left for `cleanroom gc`",
            report.survivors.len(),
            report.root.display()
        ));
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
    match config.keep_root {
        _ if !report.kept_root => {}
        KeepRoot::OnFailure => say!(
            "cleanroom: root of the failed run kept at {} (exit status {}; the newest {} roots \
             kept on failure stay, `cleanroom gc --kept` reclaims them at once)",
            report.root.display(),
            report.exit.status,
            config.keep_root_count
        ),
        _ => say!(
            "cleanroom: root kept at {} (reclaim it with `cleanroom gc --kept` when done)",
            report.root.display()
        ),
    }
    if !notes.is_empty() {
        say!(
            "cleanroom: run {} exited {}: {}",
            report.run_id,
            report.exit.status,
            notes.join("; ")
        );
    }
    if let Some(hint) = protection::denied_write_hint(report).filter(|_| !quiet) {
        say!("cleanroom: hint: {hint}");
    }
}

/// Where no protection runs (Windows, macOS): no path to name (the options that take paths are
/// refused before any is named), no hint.
#[cfg(not(target_os = "linux"))]
mod protection {
    use std::path::Path;

    use cleanroom::report::RunReport;
    use cleanroom::run::RunBuilder;

    /// Leaves `builder` as it is.
    pub fn path_origin(builder: RunBuilder, _path: &Path, _origin: String) -> RunBuilder {
        builder
    }

    /// No hint: no write protection runs here.
    pub fn denied_write_hint(_report: &RunReport) -> Option<String> {
        None
    }
}
