//! Command-line conventions of `cleanroom` over the real binary: the command may follow the
//! options without `--` (as timeout(1), env(1) and bwrap take it), typos get clap's tips in one
//! line, plain `cleanroom` shows the help and exits 2, `-q` silences the chatter but not the
//! status, durations read as timeout(1) reads them, `--report` is checked before anything
//! starts, and completions, man pages and every subcommand's examples come from the one clap
//! definition.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use common::{exists, Sandbox, BIN};

/// Runs the binary with `args` (through the sandbox: its state dir, cwd and environment).
fn output(sandbox: &Sandbox, args: &[&str]) -> (Option<i32>, String, String) {
    let out = sandbox.command(args).output().expect("run cleanroom");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts cleanroom refused the invocation: exit 125, one line on stderr containing each of `named`, nothing
/// created in the state dir.
#[track_caller]
fn assert_refused(sandbox: &Sandbox, args: &[&str], named: &[&str]) {
    let (status, _, stderr) = output(sandbox, args);
    assert_eq!(status, Some(125), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: expected one line, got: {stderr}");
    for word in named {
        assert!(
            lines[0].contains(word),
            "{args:?}: no {word:?} in: {stderr}"
        );
    }
    assert!(
        !exists(sandbox.state()),
        "{args:?}: the state dir was created"
    );
}

#[test]
fn the_command_may_follow_the_options_without_a_double_dash() {
    let sandbox = Sandbox::new("nodash");
    // Everything from the first word that is not an option is the command, options included.
    let (status, stdout, stderr) = output(
        &sandbox,
        &[
            "run",
            "--on-leak",
            "fail",
            "printf",
            "%s|",
            "-v",
            "--timeout",
            "--",
            "x",
        ],
    );
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stdout, "-v|--timeout|--|x|");
    // `--` still ends the options, and what follows it may look like an option.
    let (status, stdout, stderr) = output(&sandbox, &["run", "--", "printf", "%s|", "--help"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stdout, "--help|");
    // A command named like an option is reached only through `--`.
    let (status, _, stderr) = output(&sandbox, &["run", "--", "--no-such-command"]);
    assert_eq!(status, Some(127), "{stderr}");
    sandbox.assert_namespace_empty();
}

#[test]
fn typos_get_clap_tips_in_one_line_and_exit_125() {
    let sandbox = Sandbox::new("typos");
    assert_refused(
        &sandbox,
        &["run", "--timout", "5s", "--", "true"],
        &["'--timout'", "tip: a similar argument exists: '--timeout'"],
    );
    assert_refused(
        &sandbox,
        &["run", "--on-lek", "fail", "true"],
        &["'--on-lek'", "'--on-leak'"],
    );
    assert_refused(
        &sandbox,
        &["rnu", "true"],
        &["'rnu'", "tip: a similar subcommand exists: 'run'"],
    );
    assert_refused(&sandbox, &["lsit"], &["'lsit'", "'list'"]);
    assert_refused(&sandbox, &["run"], &["<COMMAND>"]);
    assert_refused(
        &sandbox,
        &["run", "-q", "-v", "true"],
        &["--quiet", "--verbose"],
    );
}

#[test]
fn plain_cleanroom_prints_the_help_on_stderr_and_exits_2() {
    let sandbox = Sandbox::new("plain");
    let mut bare = Command::new(BIN);
    common::without_cleanroom_settings(&mut bare);
    let bare = bare.stdin(Stdio::null()).output().unwrap();
    // With global options only (the sandbox adds --state-dir) nothing is asked either.
    let with_global = sandbox.command(&["-v"]).output().unwrap();
    for out in [bare, with_global] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(out.stdout.is_empty(), "the help goes to stderr");
        assert!(
            stderr.contains("Usage: cleanroom [OPTIONS] <COMMAND>"),
            "{stderr}"
        );
        assert!(
            stderr.contains("\n  run "),
            "the subcommands are listed: {stderr}"
        );
    }
    assert!(!exists(sandbox.state()));
    // --help is asked for: stdout, exit 0.
    let (status, stdout, _) = output(&sandbox, &["--help"]);
    assert_eq!(status, Some(0));
    assert!(stdout.contains("Usage: cleanroom"), "{stdout}");
}

#[test]
fn quiet_hides_leak_lines_and_the_summary_but_not_the_status() {
    let sandbox = Sandbox::new("quiet");
    let script = "escapee daemon &\nready daemon\nexit 0";
    let loud = sandbox.run_bash(&["--on-leak", "fail"], script);
    loud.assert_status(123);
    assert!(
        loud.stderr.contains("cleanroom: leak: pid"),
        "{}",
        loud.stderr
    );
    sandbox.assert_no_survivors(&["daemon"]);

    // -q is a global option: it may follow the subcommand.
    let quiet = sandbox.run_bash(&["-q", "--on-leak", "fail"], script);
    quiet.assert_status(123);
    assert_eq!(
        quiet.stderr, "",
        "-q prints nothing when every guarantee held"
    );
    assert!(!quiet.report()["leaks"].as_array().unwrap().is_empty());
    sandbox.assert_no_survivors(&["daemon"]);
    sandbox.assert_namespace_empty();
}

#[test]
fn durations_read_as_timeout_reads_them() {
    let sandbox = Sandbox::new("durations");
    // A bare number is seconds: the deadline fires.
    let run = sandbox.run(&["--timeout", "1"], &["sleep", "30"]);
    run.assert_status(124);
    assert_eq!(run.report()["exit"]["ending"], "timed_out");
    // 0 is no limit (were it a zero deadline, the run would time out at once).
    let run = sandbox.run(&["--timeout", "0"], &["sh", "-c", "sleep 0.2; exit 7"]);
    run.assert_status(7);
    assert_eq!(run.report()["exit"]["ending"], "exited");
    // Compound forms are accepted everywhere a duration is.
    let run = sandbox.run(
        &[
            "--timeout",
            "1h30m",
            "--grace",
            "1m30s",
            "--leak-grace",
            "1s500ms",
        ],
        &["true"],
    );
    run.assert_status(0);
    // From the environment too, with the same rules.
    let (mut cmd, report) = sandbox.run_command(&[], &["sleep", "30"]);
    cmd.env("CLEANROOM_TIMEOUT", "1");
    sandbox.finish(cmd, &report).assert_status(124);
    for (flag, value, why) in [
        ("--timeout", "30m1h", "out of order"),
        ("--grace", "5x", "unknown unit"),
        ("--leak-grace", "1m5", "missing unit"),
        ("--lock-timeout", "1.2.3", "not a number"),
    ] {
        assert_refused(
            &Sandbox::new("bad-duration"),
            &["run", flag, value, "--", "true"],
            &[flag, value, why],
        );
    }
    sandbox.assert_namespace_empty();
}

/// A negative duration is a bad value of its option, said so, not an unknown option `-1` with a
/// tip to write `-- -1` (which would make `-1` the command).
#[test]
fn a_negative_duration_is_refused_as_negative() {
    for (flag, value) in [
        ("--timeout", "-1"),
        ("--grace", "-5s"),
        ("--leak-grace", "-0.5"),
        ("--lock-timeout", "-1m"),
    ] {
        let sandbox = Sandbox::new("negative");
        assert_refused(
            &sandbox,
            &["run", flag, value, "--", "true"],
            &[flag, value, "durations cannot be negative"],
        );
        let (_, _, stderr) = output(&sandbox, &["run", flag, value, "true"]);
        assert!(!stderr.contains("tip: to pass"), "{flag} {value}: {stderr}");
    }
    // A value left out is said to be missing, naming what came next, never called negative.
    for (args, next) in [
        (&["run", "--timeout", "--", "true"][..], "\"--\""),
        (
            &["run", "--grace", "--keep-root", "--", "true"],
            "\"--keep-root\" is an option",
        ),
        (
            &["run", "--timeout", "-v", "--", "true"],
            "\"-v\" is an option",
        ),
        (
            &["run", "--lock-timeout", "--on-leak=fail", "true"],
            "\"--on-leak=fail\"",
        ),
    ] {
        let sandbox = Sandbox::new("missing-duration");
        assert_refused(&sandbox, args, &["a value is required", next]);
        let (_, _, stderr) = output(&sandbox, args);
        assert!(!stderr.contains("negative"), "{args:?}: {stderr}");
    }
    let sandbox = Sandbox::new("negative-fraction");
    assert_refused(
        &sandbox,
        &["run", "--timeout", "-.5", "true"],
        &["durations cannot be negative"],
    );
    let sandbox = Sandbox::new("negative-env");
    let (mut cmd, _) = sandbox.run_command(&[], &["true"]);
    cmd.env("CLEANROOM_TIMEOUT", "-1");
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("durations cannot be negative"), "{stderr}");
    assert!(!exists(sandbox.state()));
}

/// `--keep-root` takes only its documented values (a plain `--keep-root` is always; nothing
/// hidden such as `bare`), `--keep-root-count` says when a number is too large rather than not
/// whole, and a count that cannot matter (no `on-failure`) is warned about.
#[test]
fn keep_root_values_are_the_documented_ones_and_a_useless_count_is_told() {
    let sandbox = Sandbox::new("keep-values");
    assert_refused(
        &sandbox,
        &["run", "--keep-root=bare", "--", "false"],
        &["invalid value 'bare'", "always, on-failure, never"],
    );
    assert_refused(
        &sandbox,
        &["run", "--keep-root-count", "99999999999", "--", "true"],
        &["too large"],
    );
    assert_refused(
        &sandbox,
        &["run", "--keep-root-count", "2x", "--", "true"],
        &["not a whole number"],
    );
    for args in [
        &["run", "--keep-root-count", "2", "--", "true"][..],
        &["run", "--keep-root", "--keep-root-count", "2", "--", "true"],
    ] {
        let (status, _, stderr) = output(&sandbox, args);
        assert_eq!(status, Some(0), "{args:?}: {stderr}");
        assert!(
            stderr.contains("warning: --keep-root-count has no effect"),
            "{args:?}: {stderr}"
        );
    }
    let (status, _, stderr) = output(
        &sandbox,
        &[
            "run",
            "--keep-root=on-failure",
            "--keep-root-count",
            "2",
            "--",
            "true",
        ],
    );
    assert_eq!(status, Some(0), "{stderr}");
    assert!(!stderr.contains("no effect"), "{stderr}");
    // In a config file: named by the file, unless the file keeps on failure itself.
    let config = sandbox.scratch().join("count.toml");
    let config_arg = config.to_str().unwrap();
    std::fs::write(&config, "[run]\nkeep-root-count = 2\n").unwrap();
    let (status, _, stderr) = output(&sandbox, &["run", "--config", config_arg, "true"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("{config_arg}: run.keep-root-count has no effect")),
        "{stderr}"
    );
    std::fs::write(
        &config,
        "[run]\nkeep-root = \"on-failure\"\nkeep-root-count = 2\n",
    )
    .unwrap();
    let args = ["run", "--config", config_arg, "--keep-root=never", "true"];
    let (status, _, stderr) = output(&sandbox, &args);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(!stderr.contains("no effect"), "{stderr}");
    let (status, _, _) = output(&sandbox, &["gc", "--kept"]);
    assert_eq!(status, Some(0));
    sandbox.assert_namespace_empty();
}

/// A command that leaves evidence when it runs: `$CRT_DIR/ran`.
const TOUCH_RAN: &[&str] = &["sh", "-c", "touch \"$CRT_DIR/ran\""];

/// Asserts `--report PATH` is refused before anything starts: 125, one line naming the path,
/// the command never ran, no state dir.
#[track_caller]
fn assert_report_refused(sandbox: &Sandbox, path: &Path, why: &str) {
    let mut args = vec!["run", "--report", path.to_str().unwrap(), "--"];
    args.extend(TOUCH_RAN);
    let out = sandbox.command(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{path:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--report"), "{stderr}");
    assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
    assert!(
        stderr.contains(why),
        "{path:?}: expected {why:?} in {stderr}"
    );
    assert!(!exists(&sandbox.scratch().join("ran")), "the command ran");
    assert!(!exists(sandbox.state()), "the state dir was created");
}

#[test]
fn an_unwritable_report_path_exits_125_before_the_command_starts() {
    let sandbox = Sandbox::new("report-check");
    let scratch = sandbox.scratch();
    assert_report_refused(
        &sandbox,
        &scratch.join("no-such-dir/r.json"),
        "No such file",
    );
    std::fs::write(scratch.join("a-file"), "").unwrap();
    assert_report_refused(&sandbox, &scratch.join("a-file/r.json"), "Not a directory");
    std::fs::create_dir(scratch.join("a-dir")).unwrap();
    assert_report_refused(&sandbox, &scratch.join("a-dir"), "is a directory");
    // `-` is refused, and no file named `-` appears.
    assert_report_refused(&sandbox, Path::new("-"), "stdout belongs to the command");
    assert!(!exists(&scratch.join("-")));
}

#[test]
fn an_ordinary_user_cannot_report_into_a_directory_it_cannot_write() {
    let sandbox = Sandbox::as_user("report-perm", common::NOBODY);
    let locked = sandbox.scratch().join("root-only");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_report_refused(&sandbox, &locked.join("r.json"), "Permission denied");
    let existing = sandbox.scratch().join("root-owned.json");
    std::fs::write(&existing, "old").unwrap();
    std::fs::set_permissions(
        &existing,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    assert_report_refused(&sandbox, &existing, "cannot write it");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "old");
}

#[test]
fn a_report_to_a_descriptor_never_mixes_with_the_commands_stdout() {
    let sandbox = Sandbox::new("report-fd");
    let out_file = sandbox.scratch().join("command-stdout");
    // fd 3 is the captured pipe; the command's stdout goes to a file.
    let script = "exec \"$0\" --state-dir \"$1\" run --report /dev/fd/3 -- echo from-the-command \
                  3>&1 1>\"$2\"";
    let mut bash = Command::new("bash");
    common::without_cleanroom_settings(&mut bash);
    let out = bash
        .arg("-c")
        .arg(script)
        .arg(BIN)
        .arg(sandbox.state())
        .arg(&out_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("fd 3 holds the report and nothing else");
    assert_eq!(report["schema"], "cleanroom-run-report");
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        "from-the-command\n"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn completion_scripts_are_generated_for_every_shell() {
    let sandbox = Sandbox::new("completions");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (status, script, stderr) = output(&sandbox, &["completions", shell]);
        assert_eq!(status, Some(0), "{shell}: {stderr}");
        for word in ["run", "timeout", "on-leak", "completions"] {
            assert!(script.contains(word), "{shell}: no {word} in the script");
        }
    }
    // The scripts the machine can parse are parsed (CI installs zsh).
    for shell in ["bash", "zsh"] {
        let (_, script, _) = output(&sandbox, &["completions", shell]);
        let path = sandbox.scratch().join(format!("completion.{shell}"));
        std::fs::write(&path, script).unwrap();
        let check = Command::new(shell)
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{shell} is needed to check its completion script: {e}"));
        assert!(
            check.status.success(),
            "{shell} -n: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    // bash completes the subcommands and run's options from the script.
    let completed = Command::new("bash")
        .arg("-c")
        .arg(
            "source \"$1\"; COMP_WORDS=(cleanroom run --time); COMP_CWORD=2; \
             _cleanroom cleanroom --time run; printf '%s\\n' \"${COMPREPLY[@]}\"",
        )
        .arg("bash")
        .arg(sandbox.scratch().join("completion.bash"))
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&completed.stdout);
    assert!(words.lines().any(|w| w == "--timeout"), "{words}");
    assert_refused(&sandbox, &["completions", "tcsh"], &["'tcsh'"]);
}

#[test]
fn man_pages_are_generated_for_every_subcommand_and_render() {
    let sandbox = Sandbox::new("man");
    let (status, page, stderr) = output(&sandbox, &["man"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(page.contains(".TH cleanroom 1"), "{page}");
    // The directory and its parents are created (a new account has no ~/.cargo/share/man).
    let dir = sandbox.scratch().join("share/man/man1");
    let (status, _, stderr) = output(&sandbox, &["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(status, Some(0), "{stderr}");
    for sub in [
        "",
        "-run",
        "-gc",
        "-list",
        "-doctor",
        "-serve",
        "-completions",
        "-man",
    ] {
        assert!(
            dir.join(format!("cleanroom{sub}.1")).is_file(),
            "no cleanroom{sub}.1"
        );
    }
    // groff renders the run page without warnings, with its options and examples.
    let rendered = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(dir.join("cleanroom-run.1"))
        .output()
        .expect("groff is needed to check the man page");
    assert!(
        rendered.stderr.is_empty(),
        "groff warnings: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let text = Command::new("groff")
        .args(["-man", "-Tascii", "-P-cbou"])
        .arg(dir.join("cleanroom-run.1"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for word in [
        "--timeout",
        "--on-leak",
        "Examples:",
        "cleanroom run cargo test",
    ] {
        assert!(
            text.contains(word),
            "no {word} in the rendered page:\n{text}"
        );
    }
    let file = sandbox.scratch().join("a-file");
    std::fs::write(&file, "").unwrap();
    assert_refused(
        &sandbox,
        &["man", "--dir", file.join("man1").to_str().unwrap()],
        &["cannot write man pages", "a-file/man1"],
    );
}

/// What `cleanroom run ... <Tab>` offers in bash with the bash-completion package: the words of
/// a line being typed are handed to the function `complete -p cleanroom` names, as readline
/// does.
fn bash_completions(script: &Path, words: &[&str]) -> Vec<String> {
    const DRIVER: &str = r#"source /usr/share/bash-completion/bash_completion || exit 90
source "$1" || exit 91
shift
spec=$(complete -p cleanroom) || exit 92
func=${spec##*-F }; func=${func%% *}
COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9
"$func" cleanroom "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}""#;
    let out = Command::new("bash")
        .args(["--norc", "-c", DRIVER, "bash"])
        .arg(script)
        .args(words)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "the driver failed ({:?}; 90: the bash-completion package is needed): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_the_command_after_run_and_then_its_own_arguments() {
    let sandbox = Sandbox::new("complete-run");
    let (status, script, stderr) = output(&sandbox, &["completions", "bash"]);
    assert_eq!(status, Some(0), "{stderr}");
    let path = sandbox.scratch().join("cleanroom.bash");
    std::fs::write(&path, script).unwrap();
    let offers = |words: &[&str], expected: &str| {
        let got = bash_completions(&path, words);
        assert!(
            got.iter().any(|w| w == expected),
            "{words:?}: no {expected:?} in {got:?}"
        );
    };
    // The command's name, after run's options and their values, with or without `--`.
    offers(&["cleanroom", "run", "timeo"], "timeout");
    offers(
        &[
            "cleanroom",
            "run",
            "--timeout",
            "5",
            "--on-leak",
            "fail",
            "timeo",
        ],
        "timeout",
    );
    offers(
        &["cleanroom", "--state-dir", "/x", "-v", "run", "--", "timeo"],
        "timeout",
    );
    // Then the command's own completion (timeout's, from bash-completion).
    offers(&["cleanroom", "run", "timeout", "--fore"], "--foreground");
    offers(
        &["cleanroom", "run", "--grace=1s", "--", "timeout", "--fore"],
        "--foreground",
    );
    // As readline splits `--grace=1s` (`=` is a word break).
    offers(
        &[
            "cleanroom",
            "run",
            "--grace",
            "=",
            "1s",
            "timeout",
            "--fore",
        ],
        "--foreground",
    );
    // Before the command: cleanroom's own subcommands and options.
    offers(&["cleanroom", "ru"], "run");
    offers(&["cleanroom", "run", "--time"], "--timeout");
    let value = bash_completions(&path, &["cleanroom", "run", "--protect", ""]);
    assert!(
        !value.iter().any(|w| w == "timeout"),
        "the value of --protect completed as a command: {value:?}"
    );
}

#[test]
fn every_subcommand_help_shows_examples() {
    let sandbox = Sandbox::new("help");
    for sub in ["run", "gc", "list", "doctor", "serve", "completions", "man"] {
        let (status, help, stderr) = output(&sandbox, &[sub, "--help"]);
        assert_eq!(status, Some(0), "{sub}: {stderr}");
        assert!(
            help.contains(&format!("Examples:\n  cleanroom {sub}")),
            "{sub} --help has no examples:\n{help}"
        );
        // Example lines fit a man page (they are not wrapped there).
        let examples = help.split("Examples:\n").nth(1).unwrap();
        for line in examples.lines().take_while(|l| !l.is_empty()) {
            assert!(
                line.len() <= 70,
                "{sub}: example too long for a man page: {line}"
            );
        }
    }
}

/// The `[default: X]` the help of `run` shows for `flag`.
fn help_default(help: &str, flag: &str) -> String {
    let line = help
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(&format!("{flag} ")) || l.starts_with(&format!("{flag}[=")))
        .unwrap_or_else(|| panic!("no {flag} in the help"));
    let start = line.find("[default: ").expect("a default") + "[default: ".len();
    line[start..].split(']').next().unwrap().to_string()
}

#[test]
fn the_help_of_run_shows_the_librarys_defaults() {
    let sandbox = Sandbox::new("defaults");
    let (_, help, _) = output(&sandbox, &["run", "-h"]);
    let defaults = cleanroom::run::RunConfig::default();
    let duration = |flag| cleanroom::parse_duration(&help_default(&help, flag)).unwrap();
    assert_eq!(duration("--grace"), defaults.grace);
    assert_eq!(duration("--leak-grace"), defaults.leak_grace);
    assert_eq!(
        cleanroom::duration::parse_limit(&help_default(&help, "--timeout")).unwrap(),
        defaults.timeout
    );
    let shown = |flag| help_default(&help, flag);
    assert_eq!(shown("--protect"), defaults.protect.mode.to_string());
    assert_eq!(shown("--net"), defaults.protect.net.to_string());
    assert_eq!(
        shown("--on-leak"),
        format!("{:?}", defaults.on_leak).to_lowercase()
    );
    assert_eq!(
        shown("--contain"),
        format!("{:?}", defaults.contain).to_lowercase()
    );
    assert!(defaults.locks.is_none());
    assert_eq!(shown("--lock-scope"), "user");
    assert_eq!(
        shown("--keep-root"),
        format!("{:?}", defaults.keep_root).to_lowercase()
    );
    assert_eq!(
        shown("--keep-root-count"),
        defaults.keep_root_count.to_string()
    );
    // A run with no options really uses them: the report's protection mode is the default.
    let run = sandbox.run(&[], &["true"]);
    assert_eq!(run.report()["protection"]["mode"], "home");
}

/// The SIGPIPE bit of a `SigIgn:` line of `/proc/<pid>/status`.
fn sigpipe_ignored(status: &str) -> bool {
    let line = status.lines().find(|l| l.starts_with("SigIgn:")).unwrap();
    let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
    mask & (1 << (libc::SIGPIPE - 1)) != 0
}

#[test]
fn the_binary_ignores_sigpipe_and_its_command_starts_with_the_default() {
    // A write to a closed pipe is an error for cleanroom, never its death by SIGPIPE.
    let sandbox = Sandbox::new("sigpipe");
    // Its stdout is a pipe whose read end is closed before it starts: the help's write fails.
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors, each owned exactly once below.
    let (read, write) = unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(read);
    let out = sandbox
        .command(&["--help"])
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The command gets SIGPIPE back at its default, as from any program.
    let run = sandbox.run(&[], &["cat", "/proc/self/status"]);
    run.assert_status(0);
    assert!(!sigpipe_ignored(&run.stdout), "{}", run.stdout);
    sandbox.assert_namespace_empty();
}

#[test]
fn a_closed_standard_stream_is_reopened_on_dev_null_before_anything_is_opened() {
    // Otherwise the first file the runner opens would take descriptor 0 (and, being
    // close-on-exec, leave the command without a stdin).
    let sandbox = Sandbox::new("closedstdin");
    let (mut cmd, report) = sandbox.run_command(&[], &["readlink", "/proc/self/fd/0"]);
    // SAFETY: close(2) is async-signal-safe; it only changes this child's descriptors.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::close(0);
            Ok(())
        });
    }
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    assert_eq!(run.stdout.trim(), "/dev/null", "{}", run.stderr);
    sandbox.assert_namespace_empty();
}

#[test]
fn a_start_loads_neither_libm_nor_libgcc_s() {
    // The binary defines `pow`, its one libm symbol, and links the unwinder statically, so that
    // no start maps those two libraries (src/start.rs). The dynamic loader, asked to list what
    // it loads at the binary's start (what ldd(1) asks it), names neither; should a new
    // dependency need more of them, this fails and names it. (A password database module that
    // NSS loads later for an account missing from /etc/passwd may bring libm in; that is not a
    // start's.)
    let out = Command::new(BIN)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("libc.so"), "{listed}");
    let unwanted: Vec<&str> = (listed.lines())
        .filter(|l| l.contains("libm.so") || l.contains("libgcc_s.so"))
        .collect();
    assert!(unwanted.is_empty(), "a start loads: {unwanted:?}");
}

/// The README's install lines, run as written by a new account (uid 65534 when the tests run as
/// root) whose home holds nothing yet, with `cargo install` replaced by what it does (the binary
/// put into ~/.cargo/bin): they succeed, `man` finds the pages through PATH, and bash-completion
/// loads the completion script on its own.
#[test]
fn the_readmes_install_lines_work_for_a_new_account() {
    let readme = include_str!("../../../README.md");
    let install = readme
        .split_once("## Install\n")
        .and_then(|(_, rest)| rest.split_once("```sh\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("README has an Install section with a sh block");
    let (cargo_install, rest): (Vec<&str>, Vec<&str>) = install
        .lines()
        .partition(|line| line.starts_with("cargo install "));
    assert_eq!(cargo_install.len(), 1, "{install}");
    let root = common::is_root();
    let sandbox = match root {
        true => Sandbox::as_user("install", common::NOBODY),
        false => Sandbox::new("install"),
    };
    let home = sandbox.scratch().join("new-account");
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    common::copy_executable(Path::new(common::BIN), &bin.join("cleanroom"));
    if root {
        let status = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&home)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let as_the_account = |script: &str| {
        let mut cmd = match root {
            true => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash"]);
                c
            }
            false => Command::new("bash"),
        };
        cmd.args(["--norc", "-c", script])
            .env_clear()
            .env("HOME", &home)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("LANG", "C.UTF-8")
            .current_dir(&home);
        let out = cmd.output().expect("bash");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{script}\nfailed: {text}");
        text
    };
    as_the_account(&format!("set -e\n{}", rest.join("\n")));
    let page = as_the_account("man -w cleanroom-run");
    assert_eq!(
        page.trim(),
        home.join(".cargo/share/man/man1/cleanroom-run.1")
            .display()
            .to_string()
    );
    let loaded = as_the_account(
        "source /usr/share/bash-completion/bash_completion; _completion_loader cleanroom; \
         complete -p cleanroom",
    );
    assert!(loaded.contains("-F _cleanroom_run_command"), "{loaded}");
}
