//! `cleanroom completions SHELL`: a completion script generated from the clap definition, so it
//! always knows every subcommand, flag and value the binary does.
//!
//! For bash, the words after `cleanroom run [OPTIONS]` are a command line of their own: they are
//! completed as bash-completion completes after timeout(1) or env(1) (the command's name, then
//! that command's own completion), by a wrapper around clap's function that knows which of
//! run's options take a value (read from the same definition).

use clap::CommandFactory;
use clap_complete::Shell;

/// Shown under `cleanroom completions --help`.
pub const EXAMPLES: &str = "Examples:
  cleanroom completions bash > \"$dir/cleanroom\"
  cleanroom completions zsh > ~/.zfunc/_cleanroom
  cleanroom completions fish | source

bash-completion loads $dir/cleanroom on first use, with
dir=~/.local/share/bash-completion/completions (mkdir -p it first); then
`cleanroom run <Tab>` completes command names, then that command's own
arguments. For zsh, ~/.zfunc must be in fpath (fpath+=(~/.zfunc) in ~/.zshrc).";

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
    if args.shell == Shell::Bash {
        out.extend_from_slice(bash_run_command(&command).as_bytes());
    }
    crate::write_stdout(&out, "the completion script")
}

/// The bash wrapper that completes the command of `cleanroom run` (see the module docs); it
/// replaces clap's registration of `_cleanroom`.
fn bash_run_command(cli: &clap::Command) -> String {
    let global = valued_options(cli);
    let mut run = cli
        .find_subcommand("run")
        .map(valued_options)
        .unwrap_or_default();
    run.retain(|option| !global.contains(option));
    BASH_RUN_COMMAND
        .replace("@GLOBAL_VALUED@", &global.join("|"))
        .replace("@RUN_VALUED@", &[global, run].concat().join("|"))
}

/// The spellings (`--long`, `-s`) of `command`'s options that take a value.
fn valued_options(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter(|arg| !arg.is_positional() && arg.get_action().takes_values())
        .flat_map(|arg| {
            let long = arg.get_long().map(|l| format!("--{l}"));
            let short = arg.get_short().map(|s| format!("-{s}"));
            long.into_iter().chain(short)
        })
        .collect()
}

/// Finds where run's COMMAND starts (after the options, their values and a `--`) and hands
/// the words from there to bash-completion's `_comp_command_offset` (2.12) or
/// `_command_offset` (earlier); without bash-completion, command names, then file names.
const BASH_RUN_COMMAND: &str = r#"
_cleanroom_run_command() {
    local i=1 word run= found=
    while ((i < COMP_CWORD)); do
        word=${COMP_WORDS[i]}
        if [[ -z $run ]]; then
            case $word in
                run) run=1 ;;
                @GLOBAL_VALUED@) [[ ${COMP_WORDS[i + 1]} == = ]] && ((i++)); ((i++)) ;;
                -*) ;;
                *) break ;;
            esac
        else
            case $word in
                --) ((i++)); found=1; break ;;
                @RUN_VALUED@) [[ ${COMP_WORDS[i + 1]} == = ]] && ((i++)); ((i++)) ;;
                -*) ;;
                *) found=1; break ;;
            esac
        fi
        ((i++))
    done
    if [[ -z $run ]] || ((i > COMP_CWORD)) || { [[ -z $found ]] && [[ ${COMP_WORDS[i]} == -* ]]; }; then
        _cleanroom "$@"
    elif declare -F _comp_command_offset >/dev/null; then
        _comp_command_offset "$i"
    elif declare -F _command_offset >/dev/null; then
        _command_offset "$i"
    elif ((i == COMP_CWORD)); then
        COMPREPLY=($(compgen -c -- "${COMP_WORDS[COMP_CWORD]}"))
    else
        COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}"))
    fi
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _cleanroom_run_command -o nosort -o bashdefault -o default cleanroom
else
    complete -F _cleanroom_run_command -o bashdefault -o default cleanroom
fi
"#;
