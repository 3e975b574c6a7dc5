//! `cleanroom man`: man pages generated from the clap definition (`clap_mangen`), so they
//! describe exactly the flags the binary accepts.

use std::path::PathBuf;

use clap::CommandFactory;

/// Shown under `cleanroom man --help`.
pub const EXAMPLES: &str = "Examples:
  cleanroom man | man -l -
  cleanroom man --dir ~/.cargo/share/man/man1

--dir writes cleanroom.1, cleanroom-run.1 and a page for every other command,
creating DIR (and its parents) when it does not exist. man finds pages in
~/.cargo/share/man when ~/.cargo/bin is on PATH.";

/// Options of `cleanroom man`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write cleanroom.1 and one cleanroom-COMMAND.1 per subcommand into DIR (created with
    /// its parents when missing) instead of printing cleanroom.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints or writes the pages.
pub fn main(args: ManArgs) -> u8 {
    let command = crate::Cli::command();
    match args.dir {
        Some(dir) => match std::fs::create_dir_all(&dir)
            .and_then(|()| clap_mangen::generate_to(command, &dir))
        {
            Ok(()) => 0,
            Err(e) => crate::fail(format!(
                "cannot write man pages into {}: {e}",
                dir.display()
            )),
        },
        None => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(command).render(&mut out) {
                Ok(()) => crate::write_stdout(&out, "the man page"),
                Err(e) => crate::fail(format!("cannot render the man page: {e}")),
            }
        }
    }
}
