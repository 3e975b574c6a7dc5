//! The `cleanroom` command: wires the library's parts to subcommands.
//!
//! Exit statuses scripts can rely on are listed in `docs/exit-status.md`; every failure of
//! cleanroom itself is one line on stderr and exit 125.

mod doctor;
mod gc;
mod run;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for cleanroom's own failures (bad input, unsafe state dir, setup errors).
pub const EXIT_OWN_FAILURE: u8 = 125;

/// Run commands in an owned root; nothing they start or write is left behind.
#[derive(Parser, Debug)]
#[command(name = "cleanroom", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand understands.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// The namespace holding all roots [default: /tmp/cleanroom-<euid>].
    #[arg(long, global = true, env = "CLEANROOM_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// More logging on stderr (-v: decisions, -vv: details).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl Global {
    /// The namespace path to use.
    pub fn namespace_path(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(cleanroom::Namespace::default_path)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run COMMAND in a fresh root; remove it and everything the command started afterwards.
    Run(Box<run::RunArgs>),
    /// Reclaim stale roots whose owners are provably dead.
    Gc(gc::GcArgs),
    /// List every entry of the namespace with its state.
    List(gc::ListArgs),
    /// Show what this machine allows and what `run` will use.
    Doctor(doctor::DoctorArgs),
    /// Serve the exec-server protocol (JSON-RPC over WebSocket or stdio).
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return ExitCode::from(fail(usage_error_line(&e))),
    };
    init_logging(cli.global.verbose);
    let code = match cli.command {
        Command::Run(args) => run::main(*args, &cli.global),
        Command::Gc(args) => gc::gc_main(args, &cli.global),
        Command::List(args) => gc::list_main(args, &cli.global),
        Command::Doctor(args) => doctor::main(args, &cli.global),
        Command::Serve(args) => serve::main(args, &cli.global),
    };
    ExitCode::from(code)
}

/// Logs go to stderr: warnings by default, `-v` decisions, `-vv` details; `CLEANROOM_LOG`
/// takes a full filter (`CLEANROOM_LOG=cleanroom=trace`).
fn init_logging(verbose: u8) {
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
            .with_max_level(match verbose {
                0 => tracing::Level::WARN,
                1 => tracing::Level::INFO,
                _ => tracing::Level::DEBUG,
            })
            .init(),
    }
}

/// Condenses clap's multi-line usage error into one line that names the problem.
fn usage_error_line(error: &clap::Error) -> String {
    let text = error.to_string();
    let mut parts = Vec::new();
    let mut usage = "see `cleanroom --help`".to_string();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Usage:") {
            usage = format!("usage:{rest}");
        } else if !line.is_empty()
            && !line.starts_with("tip:")
            && !line.starts_with("For more information")
        {
            parts.push(line.trim_start_matches("error: "));
        }
    }
    format!("{} ({usage})", parts.join(" "))
}

/// Prints a one-line error for cleanroom's own failure and returns its exit status.
pub fn fail(err: impl std::fmt::Display) -> u8 {
    eprintln!("cleanroom: {err}");
    EXIT_OWN_FAILURE
}
