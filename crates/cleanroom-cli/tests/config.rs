//! `cleanroom.toml` over the real binary: discovery upward from the working directory (both
//! names), precedence (flag > environment > config file > default), every kind of bad file
//! named by file, line and key before anything starts, the owner and mode checks that keep
//! another user's file from taking effect, and `--config` / `--no-config`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{exists, Run, Sandbox};

/// A project in the sandbox: `proj/` with a config, and `proj/sub/` to run from.
struct Project {
    dir: PathBuf,
    sub: PathBuf,
}

impl Project {
    fn new(sandbox: &Sandbox) -> Project {
        let dir = sandbox.scratch().join("proj");
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        Project { dir, sub }
    }

    /// Writes `proj/<name>` (0644) and returns its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        set_mode(&path, 0o644);
        path
    }
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `run [args] -- bash -c script` from `cwd` with extra environment.
fn run_in(sandbox: &Sandbox, cwd: &Path, env: &[(&str, &str)], args: &[&str], script: &str) -> Run {
    let (mut cmd, report) = sandbox.bash_command(args, script);
    cmd.current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    sandbox.finish(cmd, &report)
}

/// A command that leaves a daemon behind and exits 0: 123 under `on-leak = fail`, 0 under warn.
const LEAKER: &str = "escapee daemon &\nready daemon\nexit 0";

#[test]
fn a_config_above_the_working_directory_sets_run_options() {
    for name in ["cleanroom.toml", ".config/cleanroom.toml"] {
        let sandbox = Sandbox::new("cfg-found");
        let project = Project::new(&sandbox);
        project.write(
            name,
            "# the project's defaults\n[run]\non-leak = \"fail\"\n",
        );
        let run = run_in(&sandbox, &project.sub, &[], &[], LEAKER);
        run.assert_status(123);
        sandbox.assert_no_survivors(&["daemon"]);
        // -v names the file in use.
        let run = run_in(&sandbox, &project.sub, &[], &["-v"], "exit 0");
        assert!(
            run.stderr
                .contains(&format!("config: {}", project.dir.join(name).display())),
            "{name}: {}",
            run.stderr
        );
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn flags_beat_the_environment_which_beats_the_config_which_beats_the_default() {
    let sandbox = Sandbox::new("cfg-precedence");
    let project = Project::new(&sandbox);
    project.write(
        "cleanroom.toml",
        "[run]\non-leak = \"fail\"\ntimeout = 1\npin = [\"CFG_HOME\"]\n",
    );
    let sub = &project.sub;
    // config > default (warn)
    run_in(&sandbox, sub, &[], &[], LEAKER).assert_status(123);
    // environment > config
    run_in(&sandbox, sub, &[("CLEANROOM_ON_LEAK", "warn")], &[], LEAKER).assert_status(0);
    // flag > environment
    let env = [("CLEANROOM_ON_LEAK", "warn")];
    run_in(&sandbox, sub, &env, &["--on-leak", "fail"], LEAKER).assert_status(123);
    sandbox.assert_no_survivors(&["daemon"]);
    // The config's timeout applies (a bare number of seconds) ...
    run_in(&sandbox, sub, &[], &[], "sleep 30").assert_status(124);
    // ... until a flag lifts it (0: no limit).
    run_in(&sandbox, sub, &[], &["--timeout", "0"], "sleep 1.5; exit 4").assert_status(4);
    // A list on the command line replaces the config's list.
    let show = "printf '%s|%s' \"${CFG_HOME:-unset}\" \"${FLAG_HOME:-unset}\"";
    let run = run_in(&sandbox, sub, &[], &[], show);
    let root = run.root();
    let (cfg, flag) = run.stdout.split_once('|').unwrap();
    assert!(Path::new(cfg).starts_with(&root), "CFG_HOME pinned: {cfg}");
    assert_eq!(flag, "unset");
    let run = run_in(&sandbox, sub, &[], &["--pin", "FLAG_HOME"], show);
    let (cfg, flag) = run.stdout.split_once('|').unwrap();
    assert_eq!(cfg, "unset", "the flag's list replaced the config's");
    assert!(
        Path::new(flag).starts_with(run.root()),
        "FLAG_HOME pinned: {flag}"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn every_bad_config_is_refused_naming_file_line_and_key_before_anything_starts() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "[run]\ntimout = 5\n",
            ":2:",
            &["run.timout", "unknown field", "`timeout`"],
        ),
        (
            "# top\ntimeout = 5\n",
            ":2:",
            &["timeout", "unknown field", "[run]"],
        ),
        ("[serve]\nx = 1\n", ":1:", &["serve", "unknown field"]),
        (
            "[run]\ntimeout = \"5x\"\n",
            ":2:",
            &["run.timeout", "invalid duration \"5x\""],
        ),
        (
            "[run]\ngrace = \"30m1h\"\n",
            ":2:",
            &["run.grace", "out of order"],
        ),
        (
            "[run]\ntimeout = -3\n",
            ":2:",
            &["run.timeout", "invalid duration"],
        ),
        (
            "[run]\non-leak = \"maybe\"\n",
            ":2:",
            &["run.on-leak", "`warn` or `fail`"],
        ),
        (
            "[run]\nprotect = \"paranoid\"\n",
            ":2:",
            &["run.protect", "`strict`"],
        ),
        ("[run]\nnet = true\n", ":2:", &["run.net", "string"]),
        (
            "[run]\ndrop-secrets = \"yes\"\n",
            ":2:",
            &["run.drop-secrets", "boolean"],
        ),
        (
            "[run]\nexclusive = \"db\"\n",
            ":2:",
            &["run.exclusive", "sequence"],
        ),
        (
            "[run]\nprotect-path = [\n  \"a\",\n  5,\n]\n",
            ":4:",
            &["run.protect-path[1]", "invalid type"],
        ),
        ("[run]\npin = [\"A/B\"]\n", ":2:", &["run.pin[0]", "A/B"]),
        ("[run\n", ":1:", &["unclosed table"]),
        (
            "[run]\ntimeout = 5\ntimeout = 6\n",
            ":3:",
            &["duplicate key"],
        ),
    ];
    for (text, line, words) in cases {
        let sandbox = Sandbox::new("cfg-bad");
        let project = Project::new(&sandbox);
        let path = project.write("cleanroom.toml", text);
        let run = run_in(&sandbox, &project.sub, &[], &[], "touch \"$CRT_DIR/ran\"");
        let context = format!("config {text:?}: {}", run.stderr);
        run.assert_status(125);
        assert_eq!(run.stderr.lines().count(), 1, "one line: {context}");
        let located = format!("{}{line}", path.display());
        assert!(run.stderr.contains(&located), "no {located}: {context}");
        for word in *words {
            assert!(run.stderr.contains(word), "no {word:?}: {context}");
        }
        assert!(!exists(&sandbox.scratch().join("ran")), "ran: {context}");
        assert!(!exists(sandbox.state()), "state dir created: {context}");
    }
}

#[test]
fn two_configs_in_one_directory_are_refused() {
    let sandbox = Sandbox::new("cfg-two");
    let project = Project::new(&sandbox);
    project.write("cleanroom.toml", "[run]\n");
    project.write(".config/cleanroom.toml", "[run]\n");
    let run = run_in(&sandbox, &project.sub, &[], &[], "exit 0");
    run.assert_status(125);
    assert!(run.stderr.contains("two config files"), "{}", run.stderr);
    // The nearest file wins over one further up, whichever name it has.
    std::fs::remove_file(project.dir.join("cleanroom.toml")).unwrap();
    std::fs::write(
        project.sub.join("cleanroom.toml"),
        "[run]\non-leak = \"fail\"\n",
    )
    .unwrap();
    std::fs::write(
        project.dir.join(".config/cleanroom.toml"),
        "[run]\non-leak = \"warn\"\n",
    )
    .unwrap();
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    sandbox.assert_no_survivors(&["daemon"]);
}

#[test]
fn a_config_others_could_have_written_is_refused_unless_named() {
    let sandbox = Sandbox::new("cfg-trust");
    let project = Project::new(&sandbox);
    let path = project.write("cleanroom.toml", "[run]\non-leak = \"fail\"\n");
    let refused = |why: &str| {
        let run = run_in(&sandbox, &project.sub, &[], &[], "touch \"$CRT_DIR/ran\"");
        run.assert_status(125);
        assert!(run.stderr.contains("refusing config"), "{}", run.stderr);
        assert!(run.stderr.contains(why), "{why}: {}", run.stderr);
        assert!(!exists(&sandbox.scratch().join("ran")));
    };
    set_mode(&path, 0o664);
    refused("writable by others (mode 664)");
    set_mode(&path, 0o644);
    std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
    refused("owned by uid 4242");
    std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    set_mode(&project.dir, 0o777);
    refused(&format!("{} is writable by others", project.dir.display()));
    // A sticky directory is as safe as /tmp: others cannot replace a file they do not own.
    set_mode(&project.dir, 0o1777);
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    set_mode(&project.dir, 0o755);
    // A symlink planted by another user is refused even when it points at a good file.
    std::fs::rename(&path, project.dir.join("real.toml")).unwrap();
    std::os::unix::fs::symlink("real.toml", &path).unwrap();
    std::os::unix::fs::lchown(&path, Some(4242), None).unwrap();
    refused("owned by uid 4242");
    // The user's own symlink into a safe directory is fine (a dotfiles checkout) ...
    std::os::unix::fs::lchown(&path, Some(0), None).unwrap();
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    // ... into a directory others can write, it is not.
    let open_dir = sandbox.scratch().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    set_mode(&open_dir, 0o777);
    std::fs::rename(project.dir.join("real.toml"), open_dir.join("real.toml")).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(open_dir.join("real.toml"), &path).unwrap();
    refused(&format!("{} is writable by others", open_dir.display()));
    // Named explicitly, the same file is the user's choice; --no-config ignores every file.
    let named = ["--config", path.to_str().unwrap()];
    run_in(&sandbox, &project.sub, &[], &named, LEAKER).assert_status(123);
    let env = [("CLEANROOM_CONFIG", path.to_str().unwrap())];
    run_in(&sandbox, &project.sub, &env, &[], LEAKER).assert_status(123);
    run_in(&sandbox, &project.sub, &env, &["--no-config"], LEAKER).assert_status(0);
    run_in(&sandbox, &project.sub, &[], &["--no-config"], LEAKER).assert_status(0);
    sandbox.assert_no_survivors(&["daemon"]);
    sandbox.assert_namespace_empty();
}

#[test]
fn an_ordinary_user_trusts_its_own_and_roots_configs_only() {
    let sandbox = Sandbox::as_user("cfg-user", common::NOBODY);
    let project = Project::new(&sandbox);
    set_mode(&project.dir, 0o755);
    set_mode(&project.sub, 0o777);
    let path = project.write("cleanroom.toml", "[run]\non-leak = \"fail\"\n");
    // Owned by root (the test runs as root): trusted.
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    // Owned by the user itself: trusted.
    std::os::unix::fs::chown(&path, Some(common::NOBODY), None).unwrap();
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    // Owned by a third user: refused.
    std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
    let run = run_in(&sandbox, &project.sub, &[], &[], "exit 0");
    run.assert_status(125);
    assert!(run.stderr.contains("owned by uid 4242"), "{}", run.stderr);
    sandbox.assert_no_survivors(&["daemon"]);
}

#[test]
fn relative_paths_in_a_config_are_relative_to_its_directory() {
    let sandbox = Sandbox::new("cfg-relative");
    let project = Project::new(&sandbox);
    let guarded = project.dir.join("guarded");
    std::fs::create_dir(&guarded).unwrap();
    project.write("cleanroom.toml", "[run]\nprotect-path = [\"guarded\"]\n");
    let write = format!("echo x > {}/f", guarded.display());
    let run = run_in(&sandbox, &project.sub, &[], &[], &write);
    assert_ne!(run.status, Some(0), "the write was refused: {}", run.stderr);
    assert!(!exists(&guarded.join("f")));
    assert!(
        run.report()["protection"]["read_only"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str() == Some(guarded.to_str().unwrap())),
        "{}",
        run.report()["protection"]
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn the_example_in_docs_config_md_is_a_valid_config() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md"))
        .unwrap();
    let example = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/config.md has a toml example");
    let sandbox = Sandbox::new("cfg-doc");
    let project = Project::new(&sandbox);
    project.write("cleanroom.toml", example);
    std::fs::create_dir(project.dir.join("secrets")).unwrap();
    let run = run_in(
        &sandbox,
        &project.sub,
        &[],
        &["-v"],
        "printf %s \"$MY_TOOL_HOME\"",
    );
    run.assert_status(0);
    assert!(
        Path::new(&run.stdout).starts_with(run.root()),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("config: "), "{}", run.stderr);
    sandbox.assert_namespace_holds_only(&["locks"]);
}
