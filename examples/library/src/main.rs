//! Uses the cleanroom library from another program: runs a command (by default one that writes
//! into its HOME and leaves a daemon behind) in a fresh root, then shows that the root, the file
//! and the daemon are gone. `CLEANROOM_STATE_DIR` picks the namespace, as for the CLI.
//!
//! ```sh
//! cargo run --manifest-path examples/library/Cargo.toml            # the leaky default
//! cargo run --manifest-path examples/library/Cargo.toml -- make test
//! ```

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use cleanroom::run::{self, Event, RunConfig};

/// Writes a file into HOME, starts a daemon that outlives it, and exits 0.
const LEAKY: &str = "echo hello > \"$HOME/greeting\"; sleep 300 & echo \"wrote $HOME/greeting\"";

fn main() -> ExitCode {
    let mut command: Vec<OsString> = std::env::args_os().skip(1).collect();
    let default_command = command.is_empty();
    if default_command {
        command = ["sh", "-c", LEAKY].map(OsString::from).to_vec();
    }
    let mut builder = RunConfig::builder(command).timeout(Some(Duration::from_secs(600)));
    if let Some(dir) = std::env::var_os("CLEANROOM_STATE_DIR") {
        builder = builder.namespace(dir);
    }
    let report = match builder.build().and_then(|config| {
        run::execute(&config, &mut |event| match event {
            Event::Warning(text) | Event::Waiting(text) | Event::SpawnFailed(text) => {
                eprintln!("cleanroom: {text}")
            }
        })
    }) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("cleanroom: {e}");
            return ExitCode::from(run::EXIT_OWN_FAILURE);
        }
    };
    for leak in &report.leaks {
        println!(
            "leaked and killed: pid {} {}",
            leak.process.id.pid, leak.process.command
        );
    }
    let root_gone = !report.root.exists();
    println!(
        "root {} {}; exit status {}",
        report.root.display(),
        if root_gone { "removed" } else { "LEFT BEHIND" },
        report.exit.status
    );
    if default_command && (report.leaks.is_empty() || !root_gone || report.exit.status != 0) {
        eprintln!("the leaky default did not end as documented");
        return ExitCode::FAILURE;
    }
    // 0-255 on Linux; a Windows exit code can be wider.
    ExitCode::from(u8::try_from(report.exit.status).unwrap_or(cleanroom::exit::EXIT_OWN_FAILURE))
}
