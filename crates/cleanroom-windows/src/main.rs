//! The `cleanroom` command on Windows: `run`, `gc` and `list` over the library's Windows
//! backend (docs/windows.md). `serve` and `doctor` are Linux-only and say so.
//!
//! Exit statuses as on Linux (docs/exit-status.md): the command's own, 124 on timeout, 126/127
//! when the command cannot be executed or is not found, 125 for cleanroom's own failures.

#[cfg(not(windows))]
compile_error!("cleanroom-windows builds the Windows binary; elsewhere use crates/cleanroom-cli");

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use cleanroom::env::EnvOptions;
use cleanroom::exit::{EXIT_GC_LEFTOVERS, EXIT_OWN_FAILURE};
use cleanroom::reclaim::{self, Budget, GcOptions};
use cleanroom::remove::RemovalStatus;
use cleanroom::report::Ending;
use cleanroom::run::{self, Event, KeepRoot, RunConfig};
use cleanroom::Namespace;

const USAGE: &str = "\
Run commands in an owned root; nothing they start or write is left behind.

Usage: cleanroom [--state-dir DIR] [-v] <COMMAND>

Commands:
  run [OPTIONS] [--] COMMAND [ARGS...]   run COMMAND in a fresh root, then remove it
      --timeout DURATION      kill the run's job after DURATION (e.g. 90s, 10m); exit 124
      --keep-root             leave the root for inspection (`cleanroom gc --kept` reclaims it)
      --pin VAR               give VAR its own directory inside the root
      --drop-secrets          drop secret-looking variables from the command's environment
      --keep-env NAME         exempt NAME from --drop-secrets
      --protect MODE          write protection: not available on Windows (a warning)
      --require-protection    fail unless protection is enforced (always fails on Windows)
  gc [--dry-run] [--kept]     reclaim roots whose owners are provably dead
  list                        list the namespace's entries and their states
  serve, doctor               Linux-only: not in the Windows build

The namespace is <LocalAppData>\\cleanroom-<SID> (--state-dir or CLEANROOM_STATE_DIR to change).
Exit status: the command's; 124 timeout; 126/127 not executable/not found; 125 cleanroom's own failure.";

fn main() {
    let code = match parse(std::env::args_os().skip(1).collect()) {
        Ok(invocation) => invocation.execute(),
        Err(message) => fail(message),
    };
    std::process::exit(code);
}

/// Prints a one-line error for cleanroom's own failure and returns its exit status.
fn fail(message: impl std::fmt::Display) -> i32 {
    eprintln!("cleanroom: {message}");
    i32::from(EXIT_OWN_FAILURE)
}

struct Invocation {
    state_dir: Option<PathBuf>,
    verbose: bool,
    command: Sub,
}

enum Sub {
    Help,
    Version,
    Run(RunConfigArgs),
    Gc(GcOptions),
    List,
    LinuxOnly(String),
}

/// What the user asked of protection, which has no Windows backend yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Protection {
    /// `--protect off`.
    #[default]
    Off,
    /// `--protect MODE`: the run warns that it is not protected.
    BestEffort,
    /// `--require-protection`: the run is refused.
    Required,
}

#[derive(Default)]
struct RunConfigArgs {
    timeout: Option<Duration>,
    keep_root: bool,
    env: EnvOptions,
    protection: Protection,
    command: Vec<OsString>,
}

fn parse(args: Vec<OsString>) -> Result<Invocation, String> {
    let mut args = args.into_iter();
    let mut state_dir = std::env::var_os("CLEANROOM_STATE_DIR").map(PathBuf::from);
    let mut verbose = false;
    let sub = loop {
        let Some(arg) = args.next() else {
            break Sub::Help;
        };
        match arg.to_str() {
            Some("--state-dir") => state_dir = Some(value(&mut args, "--state-dir")?.into()),
            Some("-v" | "--verbose") => verbose = true,
            Some("-h" | "--help" | "help") => break Sub::Help,
            Some("-V" | "--version") => break Sub::Version,
            Some("run") => break Sub::Run(parse_run(&mut args)?),
            Some("gc") => break Sub::Gc(parse_gc(&mut args)?),
            Some("list") => break Sub::List,
            Some(name @ ("serve" | "doctor" | "completions" | "man")) => {
                break Sub::LinuxOnly(name.to_string())
            }
            _ => {
                return Err(format!(
                    "unknown argument {:?} (see `cleanroom --help`)",
                    arg.to_string_lossy()
                ))
            }
        }
    };
    Ok(Invocation {
        state_dir,
        verbose,
        command: sub,
    })
}

fn value(args: &mut impl Iterator<Item = OsString>, flag: &str) -> Result<OsString, String> {
    args.next().ok_or_else(|| format!("{flag} needs a value"))
}

fn text(args: &mut impl Iterator<Item = OsString>, flag: &str) -> Result<String, String> {
    value(args, flag)?
        .into_string()
        .map_err(|v| format!("{flag} {v:?}: not valid Unicode"))
}

fn parse_run(args: &mut impl Iterator<Item = OsString>) -> Result<RunConfigArgs, String> {
    let mut run = RunConfigArgs::default();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--") => break,
            Some("--timeout") => {
                let t = text(args, "--timeout")?;
                run.timeout =
                    Some(cleanroom::parse_duration(&t).map_err(|e| format!("--timeout {t}: {e}"))?);
            }
            Some("--keep-root") => run.keep_root = true,
            Some("--pin") => {
                let var = text(args, "--pin")?;
                cleanroom::env::validate_pin(&var).map_err(|e| e.to_string())?;
                run.env.pins.push(var);
            }
            Some("--drop-secrets") => run.env.drop_secrets = true,
            Some("--keep-env") => run.env.keep.push(text(args, "--keep-env")?),
            Some("--protect") => {
                let mode = text(args, "--protect")?;
                if mode != "off" && run.protection == Protection::Off {
                    run.protection = Protection::BestEffort;
                }
            }
            Some("--require-protection") => run.protection = Protection::Required,
            Some(flag) if flag.starts_with('-') => {
                return Err(format!(
                    "run: unknown option {flag} (see `cleanroom --help`)"
                ))
            }
            _ => {
                run.command.push(arg);
                break;
            }
        }
    }
    run.command.extend(args);
    if run.command.is_empty() {
        return Err(
            "run: no command given (usage: cleanroom run [OPTIONS] [--] COMMAND [ARGS...])".into(),
        );
    }
    Ok(run)
}

fn parse_gc(args: &mut impl Iterator<Item = OsString>) -> Result<GcOptions, String> {
    let mut options = GcOptions {
        dry_run: false,
        include_kept: false,
        budget: Budget::UNLIMITED,
    };
    for arg in args {
        match arg.to_str() {
            Some("--dry-run") => options.dry_run = true,
            Some("--kept") => options.include_kept = true,
            _ => return Err(format!("gc: unknown argument {:?}", arg.to_string_lossy())),
        }
    }
    Ok(options)
}

impl Invocation {
    fn execute(self) -> i32 {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_target(false)
            .without_time()
            .with_max_level(if self.verbose {
                tracing::Level::DEBUG
            } else {
                tracing::Level::WARN
            })
            .init();
        let namespace = match self.state_dir {
            Some(dir) => dir,
            None => match Namespace::default_path() {
                Ok(path) => path,
                Err(e) => return fail(e),
            },
        };
        match self.command {
            Sub::Help => {
                println!("{USAGE}");
                0
            }
            Sub::Version => {
                println!("cleanroom {} (windows)", env!("CARGO_PKG_VERSION"));
                0
            }
            Sub::Run(args) => run_main(args, namespace),
            Sub::Gc(options) => gc_main(&options, &namespace),
            Sub::List => list_main(&namespace),
            Sub::LinuxOnly(name) => fail(format!(
                "`{name}` is not in the Windows build: the exec-server, doctor and the generated \
                 docs are Linux-only for now (docs/windows.md); use `run`, `gc` or `list`"
            )),
        }
    }
}

fn run_main(args: RunConfigArgs, namespace: PathBuf) -> i32 {
    match args.protection {
        Protection::Off => {}
        Protection::BestEffort => eprintln!(
            "cleanroom: warning: write protection is not available on Windows (Landlock is \
             Linux-only): the run is contained and cleaned up, but not protected"
        ),
        Protection::Required => {
            return fail(
                "write protection (--require-protection) is not available here: Windows has no \
                 Landlock equivalent that cleanroom enforces yet; run without \
                 --require-protection, or on Linux",
            )
        }
    }
    let config = RunConfig::builder(args.command)
        .namespace(namespace)
        .timeout(args.timeout)
        .keep_root(if args.keep_root {
            KeepRoot::Always
        } else {
            KeepRoot::Never
        })
        .pins(args.env.pins)
        .drop_secrets(args.env.drop_secrets)
        .keep_env(args.env.keep)
        .build();
    let mut events = |event: Event<'_>| match event {
        Event::Warning(text) => eprintln!("cleanroom: warning: {text}"),
        Event::Waiting(text) | Event::SpawnFailed(text) => eprintln!("cleanroom: {text}"),
    };
    let report = match config.and_then(|config| run::execute(&config, &mut events)) {
        Ok(report) => report,
        Err(e) => return fail(e),
    };
    for leak in &report.leaks {
        eprintln!(
            "cleanroom: leak: pid {} outlived the command and was killed: {}",
            leak.process.id.pid, leak.process.command
        );
    }
    let mut notes = Vec::new();
    match report.exit.ending {
        Ending::TimedOut => notes.push("timed out".to_string()),
        Ending::Interrupted => notes.push("interrupted".to_string()),
        Ending::Exited => {}
    }
    if !report.leaks.is_empty() {
        notes.push(format!("{} leaked process(es) killed", report.leaks.len()));
    }
    match &report.cleanup {
        Some(removal) => {
            if let RemovalStatus::Leftover(reason) | RemovalStatus::Refused(reason) =
                &removal.status
            {
                notes.push(format!(
                    "cleanup incomplete: {} left ({reason}); the next `cleanroom gc` or run retries it",
                    removal.path.display()
                ));
            }
        }
        None => eprintln!(
            "cleanroom: root kept at {} (reclaim it with `cleanroom gc --kept` when done)",
            report.root.display()
        ),
    }
    if !notes.is_empty() {
        eprintln!(
            "cleanroom: run {} exited {}: {}",
            report.run_id,
            report.exit.status,
            notes.join("; ")
        );
    }
    report.exit.status
}

fn gc_main(options: &GcOptions, namespace: &std::path::Path) -> i32 {
    let ns = match Namespace::open_or_create(namespace) {
        Ok(ns) => ns,
        Err(e) => return fail(e),
    };
    let summary = reclaim::gc(&ns, options, &mut |_, _| {});
    let verb = if options.dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    for name in &summary.removed_names {
        println!("{verb} {}", ns.path().join(name).display());
    }
    for error in &summary.errors {
        eprintln!("cleanroom: gc: {error}");
    }
    let skipped =
        summary.skipped_live + summary.kept + summary.unproven.len() + summary.locked.len();
    println!(
        "gc: scanned {}, {verb} {}, skipped {skipped}, errors {}",
        summary.scanned,
        summary.removed,
        summary.errors.len()
    );
    if summary.errors.is_empty() {
        0
    } else {
        i32::from(EXIT_GC_LEFTOVERS)
    }
}

fn list_main(namespace: &std::path::Path) -> i32 {
    let ns = match Namespace::open(namespace) {
        Ok(ns) => ns,
        Err(e) => return fail(e),
    };
    for entry in reclaim::list(&ns, false) {
        println!(
            "{}\t{} ({})\t{}",
            ns.path().join(&entry.raw_name).display(),
            entry.state.as_str(),
            entry.reason,
            entry.command.join(" ")
        );
    }
    0
}
