//! The `cleanroom` command: wires the library's parts to subcommands.
//!
//! Exit statuses scripts can rely on are listed in `docs/exit-status.md`: every failure of
//! cleanroom itself, usage errors included, is one line on stderr and exit 125 (as timeout(1)
//! and env(1) do, so it never looks like a status of the command); plain `cleanroom` with no
//! subcommand prints the help on stderr and exits 2.
#![cfg_attr(all(target_os = "linux", target_env = "gnu", not(test)), no_main)]
// `unsafe` only in `start` (the process entry point); system calls go through the library's
// `sys` layer or rustix.
#![deny(unsafe_code)]

mod completions;
mod config;
mod gc;
mod man;
mod options;
mod run;
#[cfg(all(target_os = "linux", target_env = "gnu", not(test)))]
#[allow(unsafe_code)]
mod start;

// `doctor` says what Linux or Windows allows; `serve` serves with what only Linux has (the
// exec-server). Elsewhere they keep their options and say what is missing (exit 125).
#[cfg(any(target_os = "linux", windows))]
mod doctor;
#[cfg(target_os = "linux")]
mod serve;
#[cfg(not(target_os = "linux"))]
mod unavailable;
#[cfg(not(any(target_os = "linux", windows)))]
use unavailable::doctor;
#[cfg(not(target_os = "linux"))]
use unavailable::serve;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};
use cleanroom::exit::{EXIT_NO_SUBCOMMAND, EXIT_OWN_FAILURE};

/// Run commands in an owned root; nothing they start or write is left behind.
#[derive(Parser, Debug)]
#[command(
    name = "cleanroom",
    version,
    after_help = "Examples:\n  cleanroom run cargo test\n  cleanroom run --timeout 10m --on-leak fail -- make check\n  cleanroom list\n  cleanroom gc --dry-run\n\nExit statuses: docs/exit-status.md (125: cleanroom's own failure, usage\nerrors included)."
)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand understands.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// The namespace holding all roots [default: /tmp/cleanroom-<euid>].
    #[arg(long, global = true, env = "CLEANROOM_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// More logging on stderr (-v: decisions, -vv: details).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Print only errors and warnings that a guarantee did not hold: `run` prints no leak
    /// lines, summary or lock-wait messages (the status and --report still tell).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

impl Global {
    /// The namespace path to use: `--state-dir`, else the default, as [`cli_main`] resolved it
    /// once ([`with_real_parent`]).
    pub fn namespace_path(&self) -> PathBuf {
        self.state_dir
            .clone()
            .expect("cli_main resolves the state directory first")
    }
}

/// `path` with the directories above it resolved once, here (links followed, made absolute):
/// a run binds paths beneath the namespace into its mount namespace without following links,
/// so a link among them (`/home` -> `/data/home`) would fail every protected run. The last
/// component stays as given, so a state dir that is itself a link is still refused, and a
/// parent that cannot be resolved leaves the path as it was for the namespace to judge.
#[cfg(unix)]
fn with_real_parent(path: PathBuf) -> PathBuf {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return path;
    };
    let parent = match parent.as_os_str().is_empty() {
        true => std::path::Path::new("."),
        false => parent,
    };
    match std::fs::canonicalize(parent) {
        Ok(real) => real.join(name),
        Err(_) => path,
    }
}

/// `path` as given: Windows runs bind nothing into a mount namespace, and resolving the
/// parent there would turn every path shown into a `\\?\` path.
#[cfg(windows)]
fn with_real_parent(path: PathBuf) -> PathBuf {
    path
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run COMMAND in a fresh root; remove it and everything the command started afterwards.
    #[command(after_help = run::EXAMPLES)]
    Run(Box<run::RunArgs>),
    /// Reclaim stale roots whose owners are provably dead.
    #[command(
        after_help = "Examples:\n  cleanroom gc --dry-run\n  cleanroom gc\n  cleanroom gc --kept\n\n--dry-run shows what would be reclaimed; --kept also reclaims roots kept\nwith --keep-root."
    )]
    Gc(gc::GcArgs),
    /// List every entry of the namespace with its state.
    #[command(after_help = "Examples:\n  cleanroom list\n  cleanroom list --sizes --json")]
    List(gc::ListArgs),
    /// Show what this machine allows and what `run` will use.
    #[command(after_help = "Examples:\n  cleanroom doctor\n  cleanroom doctor --json")]
    Doctor(doctor::DoctorArgs),
    /// Serve the exec-server protocol (JSON-RPC over WebSocket or stdio).
    #[command(
        after_help = "Examples:\n  cleanroom serve\n  cleanroom serve --listen stdio\n\nBy default it listens on ws://127.0.0.1 on a free port and prints the\naddress on stdout."
    )]
    Serve(serve::ServeArgs),
    /// Print a completion script for SHELL on stdout.
    #[command(after_help = completions::EXAMPLES)]
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff) on stdout, or write one page per command into a directory.
    #[command(after_help = man::EXAMPLES)]
    Man(man::ManArgs),
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(test))))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(cli_main())
}

/// Parses the command line and runs the subcommand; returns the exit status.
fn cli_main() -> u8 {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) if no_subcommand(&e) => {
            // Plain `cleanroom` (perhaps with global options only): nothing was asked.
            eprint!("{}", Cli::command().render_help());
            return EXIT_NO_SUBCOMMAND;
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return 0;
        }
        Err(e) => return fail(usage_error_line(&e)),
    };
    init_logging(&cli.global);
    let mut cli = cli;
    let state_dir = match cli.global.state_dir.take() {
        Some(path) => path,
        None => match cleanroom::Namespace::default_path() {
            Ok(path) => path,
            Err(e) => return fail(e),
        },
    };
    cli.global.state_dir = Some(with_real_parent(state_dir));
    match cli.command {
        Command::Run(args) => run::main(*args, &cli.global),
        Command::Gc(args) => gc::gc_main(args, &cli.global),
        Command::List(args) => gc::list_main(args, &cli.global),
        Command::Doctor(args) => doctor::main(args, &cli.global),
        Command::Serve(args) => serve::main(args, &cli.global),
        Command::Completions(args) => completions::main(args),
        Command::Man(args) => man::main(args),
    }
}

/// Parses the command line; `run --keep-root WHEN` is read as `--keep-root=WHEN` (see
/// [`options::join_keep_root_value`]).
fn parse() -> Result<Cli, clap::Error> {
    let read = |args: Vec<std::ffi::OsString>| match parse_run(args.clone()) {
        Some(cli) => Ok(cli),
        None => Cli::try_parse_from(args),
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = read(args.clone())?;
    match &cli.command {
        Command::Run(run) if run.keep_root_value_apart() => {
            read(options::join_keep_root_value(args))
        }
        _ => Ok(cli),
    }
}

/// The command line of a run, read by a parser that knows only the global options and `run`
/// (the same definitions as [`Cli`]'s): building every subcommand's options was a third of the
/// parsing that every run pays (issue 30). `None` for anything it does not accept (another
/// subcommand, `--help`, `--version`, a usage error): [`Cli`] reads that command line again, so
/// every message and every other subcommand is [`Cli`]'s own.
fn parse_run(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<Cli> {
    use clap::{Args, FromArgMatches};
    let parser = Global::augment_args(clap::Command::new("cleanroom"))
        .subcommand(run::RunArgs::augment_args(clap::Command::new("run")))
        .subcommand_required(true);
    let matches = parser.try_get_matches_from(args).ok()?;
    let global = Global::from_arg_matches(&matches).ok()?;
    let run = run::RunArgs::from_arg_matches(matches.subcommand_matches("run")?).ok()?;
    Some(Cli {
        global,
        command: Command::Run(Box::new(run)),
    })
}

/// Logs go to stderr: warnings by default (and with `-q`: they say a guarantee did not hold),
/// `-v` decisions, `-vv` details; `CLEANROOM_LOG` takes a full filter
/// (`CLEANROOM_LOG=cleanroom=trace`).
fn init_logging(global: &Global) {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time();
    match std::env::var("CLEANROOM_LOG") {
        Ok(filter) => builder
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .init(),
        Err(_) => builder
            .with_max_level(match global.verbose {
                0 => tracing::Level::WARN,
                1 => tracing::Level::INFO,
                _ => tracing::Level::DEBUG,
            })
            .init(),
    }
}

/// Whether clap stopped because no subcommand was given.
fn no_subcommand(error: &clap::Error) -> bool {
    use clap::error::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    )
}

/// Condenses clap's multi-line usage error into one line that names the problem and keeps its
/// tips ("a similar argument exists: '--timeout'").
fn usage_error_line(error: &clap::Error) -> String {
    let text = error.to_string();
    let mut line = String::new();
    let mut usage = "see `cleanroom --help`".to_string();
    for part in text.lines().map(str::trim) {
        if let Some(rest) = part.strip_prefix("Usage:") {
            usage = format!("usage:{rest}");
        } else if !part.is_empty() && !part.starts_with("For more information") {
            if !line.is_empty() {
                line.push_str(if line.ends_with(':') { " " } else { "; " });
            }
            line.push_str(part.trim_start_matches("error: "));
        }
    }
    if !line.contains("tip:") {
        if let Some(tip) = subcommand_tip(error) {
            line.push_str(&format!("; tip: a similar subcommand exists: '{tip}'"));
        }
    }
    format!("{line} ({usage})")
}

/// A subcommand one edit away (a swap of two letters included) from an unknown one: clap's own
/// suggestions miss transpositions in short words (`rnu`).
fn subcommand_tip(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(typed)) = error.get(ContextKind::InvalidSubcommand) else {
        return None;
    };
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .find(|name| strsim::damerau_levenshtein(name, typed) == 1)
}

/// Writes generated text (completions, man page) to stdout; a failed write is named.
pub fn write_stdout(bytes: &[u8], what: &str) -> u8 {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => fail(format!("cannot write {what} to stdout: {e}")),
    }
}

/// Prints a one-line error for cleanroom's own failure and returns its exit status.
pub fn fail(err: impl std::fmt::Display) -> u8 {
    eprintln!("cleanroom: {err}");
    EXIT_OWN_FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<std::ffi::OsString> {
        line.split(' ').map(Into::into).collect()
    }

    #[test]
    fn the_run_parser_reads_a_run_as_the_whole_cli_does_and_leaves_the_rest_to_it() {
        for line in [
            "cleanroom run true",
            "cleanroom run -- ls -la",
            "cleanroom -v --state-dir /x run --timeout 5s --on-leak fail cargo test -q",
            "cleanroom run -q --keep-root=on-failure --protect strict --allow-write /a sh -c x",
            "cleanroom run --exclusive db --net none --drop-secrets --report r.json make",
            "cleanroom run --state-dir /y -vv --share-tmp /tmp/.X11-unix xterm",
        ] {
            let whole = Cli::try_parse_from(words(line)).expect(line);
            let run = parse_run(words(line)).expect(line);
            assert_eq!(format!("{run:?}"), format!("{whole:?}"), "{line}");
        }
        for line in [
            "cleanroom gc --dry-run",
            "cleanroom --version",
            "cleanroom run --help",
            "cleanroom run",
            "cleanroom run --timeout",
            "cleanroom rnu true",
            "cleanroom -V run true",
        ] {
            assert!(parse_run(words(line)).is_none(), "{line}");
        }
    }
}
