//! `cleanroom completions SHELL`: a completion script generated from the clap definition, so it
//! always knows every subcommand, flag and value the binary does.

use clap::CommandFactory;
use clap_complete::Shell;

/// Shown under `cleanroom completions --help`.
pub const EXAMPLES: &str = "Examples:
  cleanroom completions bash > /etc/bash_completion.d/cleanroom
  cleanroom completions zsh > ~/.zfunc/_cleanroom
  cleanroom completions fish | source

For zsh, ~/.zfunc must be in fpath (fpath+=(~/.zfunc) in ~/.zshrc).";

/// Options of `cleanroom completions`.
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to generate for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the script.
pub fn main(args: CompletionsArgs) -> u8 {
    let mut command = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "cleanroom", &mut out);
    crate::write_stdout(&out, "the completion script")
}
