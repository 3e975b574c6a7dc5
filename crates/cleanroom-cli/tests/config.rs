//! `cleanroom.toml` over the real binary: discovery upward from the working directory (both
//! names), precedence (flag > environment > config file > default), every kind of bad file
//! named by file, line and key before anything starts, the owner and mode checks that keep
//! another user's file from taking effect (ignored with a warning, never stopping a run), the
//! config a nested run takes from its outer run, and `--config` / `--no-config`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{exists, Run, Sandbox};

/// A project in the sandbox: `proj/` with a config, and `proj/sub/` to run from. It lives
/// beside the scratch directory (which an unprivileged sandbox makes world-writable, and a
/// config below it would be refused for that).
struct Project {
    dir: PathBuf,
    sub: PathBuf,
}

impl Project {
    fn new(sandbox: &Sandbox) -> Project {
        let dir = sandbox.scratch().parent().unwrap().join("proj");
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
fn a_config_others_could_have_written_is_ignored_with_a_warning_unless_named() {
    let sandbox = Sandbox::new("cfg-trust");
    let project = Project::new(&sandbox);
    let path = project.write("cleanroom.toml", "[run]\non-leak = \"fail\"\n");
    // Never used (the leak is a warning, not 123), and said so in one line naming the file.
    let ignored = |why: &str| {
        let run = run_in(&sandbox, &project.sub, &[], &[], LEAKER);
        run.assert_status(0);
        let warning = format!("cleanroom: warning: ignoring config {}: ", path.display());
        let line = run
            .stderr
            .lines()
            .find(|l| l.starts_with(&warning))
            .unwrap_or_else(|| panic!("no warning: {}", run.stderr));
        assert!(line.contains(why), "{why}: {line}");
        assert!(line.contains("--config"), "{line}");
    };
    set_mode(&path, 0o664);
    ignored("writable by others (mode 664)");
    set_mode(&path, 0o644);
    std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
    ignored("owned by uid 4242");
    std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    set_mode(&project.dir, 0o777);
    ignored(&format!("{} is writable by others", project.dir.display()));
    // A sticky directory is as safe as /tmp: others cannot replace a file they do not own.
    set_mode(&project.dir, 0o1777);
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    set_mode(&project.dir, 0o755);
    // A symlink planted by another user is ignored even when it points at a good file.
    std::fs::rename(&path, project.dir.join("real.toml")).unwrap();
    std::os::unix::fs::symlink("real.toml", &path).unwrap();
    std::os::unix::fs::lchown(&path, Some(4242), None).unwrap();
    ignored("owned by uid 4242");
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
    ignored(&format!("{} is writable by others", open_dir.display()));
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

/// Runs `argv` as [`common::NOBODY`] (a real second user) and asserts it succeeded.
fn as_nobody(argv: &[&str]) {
    let uid = common::NOBODY.to_string();
    let status = std::process::Command::new("setpriv")
        .args([
            format!("--reuid={uid}").as_str(),
            &format!("--regid={uid}"),
            "--clear-groups",
        ])
        .args(argv)
        .status()
        .unwrap();
    assert!(status.success(), "as nobody: {argv:?}");
}

/// The trust rule judges everything on the way to the file, each by itself (lstat), not only
/// the file: root, working in `x/work` below a sticky `x` (as /tmp is), never uses the config
/// of a root-owned project that another real user (uid 65534) made reachable as `x/.config`
/// with a link of their own; nor a project below a directory others may rename, and a link
/// into one. Root's own link in the same sticky directory is used.
#[test]
fn a_config_reached_through_anything_another_user_controls_is_ignored() {
    assert!(
        common::is_root(),
        "needs root (a second real user); CI runs as root"
    );
    let sandbox = Sandbox::new("cfg-path");
    let shared = sandbox.scratch().parent().unwrap();
    set_mode(shared.parent().unwrap(), 0o755);
    let project = Project::new(&sandbox);
    let config = project.write("cleanroom.toml", "[run]\non-leak = \"fail\"\n");
    let x = shared.join("x");
    let work = x.join("work");
    std::fs::create_dir_all(&work).unwrap();
    set_mode(&x, 0o1777);
    let ignored = |cwd: &Path, why: &str| {
        let run = run_in(&sandbox, cwd, &[], &[], LEAKER);
        run.assert_status(0);
        assert!(run.stderr.contains("ignoring config"), "{}", run.stderr);
        assert!(run.stderr.contains(why), "{why}: {}", run.stderr);
    };
    // Another user's `.config` in the sticky directory, naming root's project.
    let dot_config = x.join(".config");
    as_nobody(&[
        "ln",
        "-s",
        project.dir.to_str().unwrap(),
        dot_config.to_str().unwrap(),
    ]);
    ignored(
        &work,
        &format!("{} is owned by uid 65534", dot_config.display()),
    );
    // The same link made by root is root's own choice.
    std::fs::remove_file(&dot_config).unwrap();
    std::os::unix::fs::symlink(&project.dir, &dot_config).unwrap();
    run_in(&sandbox, &work, &[], &[], LEAKER).assert_status(123);
    std::fs::remove_file(&dot_config).unwrap();
    // A project below a directory others may write (and so rename the project away and put
    // another in its place) ...
    let open = shared.join("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o777);
    let inner = open.join("proj");
    std::fs::create_dir_all(inner.join("sub")).unwrap();
    std::fs::copy(&config, inner.join("cleanroom.toml")).unwrap();
    ignored(
        &inner.join("sub"),
        &format!("{} is writable by others", open.display()),
    );
    // ... and root's own link into such a place.
    std::os::unix::fs::symlink(inner.join("cleanroom.toml"), x.join("cleanroom.toml")).unwrap();
    ignored(&work, &format!("{} is writable by others", open.display()));
    sandbox.assert_no_survivors(&["daemon"]);
    sandbox.assert_namespace_empty();
}

/// Another user's `cleanroom.toml` (and `.config/cleanroom.toml`) in a sticky shared directory
/// neither takes effect nor stops anyone's runs below it: each is ignored with a warning, and
/// discovery goes on upward to the user's own config (a foreign pair is not "two config files").
#[test]
fn another_users_config_in_a_shared_directory_is_skipped_and_discovery_goes_on() {
    assert!(
        common::is_root(),
        "needs root (a second real user); CI runs as root"
    );
    let sandbox = Sandbox::new("cfg-skip");
    let shared = sandbox.scratch().parent().unwrap();
    set_mode(shared.parent().unwrap(), 0o755);
    let own = shared.join("cleanroom.toml");
    std::fs::write(&own, "[run]\non-leak = \"fail\"\n").unwrap();
    set_mode(&own, 0o644);
    let x = shared.join("x");
    let work = x.join("work");
    std::fs::create_dir_all(&work).unwrap();
    set_mode(&x, 0o1777);
    let foreign = x.join("cleanroom.toml");
    as_nobody(&["sh", "-c", &format!("echo '[run]' > {}", foreign.display())]);
    let ignored = |names: &[&Path]| {
        let run = run_in(&sandbox, &work, &[], &["-v"], LEAKER);
        run.assert_status(123);
        assert!(
            run.stderr.contains(&format!("config: {}", own.display())),
            "{}",
            run.stderr
        );
        for name in names {
            let warning = format!(
                "cleanroom: warning: ignoring config {}: it is owned by uid {}",
                name.display(),
                common::NOBODY
            );
            assert!(run.stderr.contains(&warning), "{warning}: {}", run.stderr);
        }
    };
    ignored(&[&foreign]);
    let dot_config = x.join(".config");
    as_nobody(&[
        "sh",
        "-c",
        &format!(
            "mkdir {} && echo '[run]' > {}/cleanroom.toml",
            dot_config.display(),
            dot_config.display()
        ),
    ]);
    let warning_names_the_file = dot_config.join("cleanroom.toml");
    let run = run_in(&sandbox, &work, &[], &[], LEAKER);
    run.assert_status(123);
    assert!(!run.stderr.contains("two config files"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "ignoring config {}: {} is owned by uid {}",
            warning_names_the_file.display(),
            dot_config.display(),
            common::NOBODY
        )),
        "{}",
        run.stderr
    );
    ignored(&[&foreign]);
    sandbox.assert_no_survivors(&["daemon"]);
    sandbox.assert_namespace_empty();
}

/// A hard link another user could have made: where `fs.protected_hardlinks` is off, anyone may
/// link a root-owned file (its owner stays root) into a sticky directory. A config with more
/// than one link in a directory others may write is ignored; the same link in a directory only
/// its owner writes is the owner's doing, and is used.
#[test]
fn a_hard_linked_config_in_a_directory_others_may_write_is_ignored() {
    let sandbox = Sandbox::new("cfg-hardlink");
    let project = Project::new(&sandbox);
    let original = project.write("cleanroom.toml", "[run]\non-leak = \"fail\"\n");
    let shared = sandbox.scratch().parent().unwrap();
    let x = shared.join("x");
    let work = x.join("work");
    std::fs::create_dir_all(&work).unwrap();
    set_mode(&x, 0o1777);
    let linked = x.join("cleanroom.toml");
    std::fs::hard_link(&original, &linked).unwrap();
    let run = run_in(&sandbox, &work, &[], &[], LEAKER);
    run.assert_status(0);
    assert!(
        run.stderr.contains(&format!(
            "ignoring config {}: it has 2 hard links, in a directory others may write",
            linked.display()
        )),
        "{}",
        run.stderr
    );
    // The project's own link, in a directory only root writes, is used.
    run_in(&sandbox, &project.sub, &[], &[], LEAKER).assert_status(123);
    set_mode(&x, 0o755);
    run_in(&sandbox, &work, &[], &[], LEAKER).assert_status(123);
    sandbox.assert_no_survivors(&["daemon"]);
    sandbox.assert_namespace_empty();
}

/// An unprivileged run puts its command in a user namespace that maps only the user, where
/// every other owner (root's `/`, the project) shows as the overflow uid and cannot be judged.
/// A run nested in it (as a user that is not the overflow uid itself) uses the config its
/// outer run judged, and refuses (exit 125) one no run outside judged, saying why and how to
/// name it.
#[test]
fn a_nested_run_uses_the_config_its_outer_run_judged_and_no_other() {
    assert!(
        common::is_root(),
        "needs root (a second real user); CI runs as root"
    );
    const USER: u32 = 4243;
    let sandbox = Sandbox::as_user("cfg-nested", USER);
    let project = Project::new(&sandbox);
    let path = project.write("cleanroom.toml", "[run]\non-leak = \"fail\"\n");
    let inner_state = sandbox.scratch().join("inner");
    let script = format!(
        "[ \"$(cat /proc/self/uid_map | wc -l)\" = 1 ] && grep -q ' 4294967295$' /proc/self/uid_map \\
           && {{ echo no-userns; exit 0; }}
         \"$CRT_BIN\" -v --state-dir {} run -- true 2> \"$CRT_DIR/inner.err\"
         echo \"inner=$?\"",
        inner_state.display()
    );
    let bin = [("CRT_BIN", sandbox.bin().to_str().unwrap())];
    let inner = |args: &[&str]| {
        let run = run_in(&sandbox, &project.sub, &bin, args, &script);
        run.assert_status(0);
        let err = std::fs::read_to_string(sandbox.scratch().join("inner.err")).unwrap_or_default();
        (run.stdout.trim().to_string(), err)
    };
    let (status, err) = inner(&[]);
    if status == "no-userns" {
        common::skip("the run's command is not in a user namespace here");
        return;
    }
    assert_eq!(status, "inner=0", "{err}");
    assert!(
        err.contains(&format!("config: {}", path.display())),
        "{err}"
    );
    // The outer run judged no file: the nested one cannot judge this one, and says so.
    let (status, err) = inner(&["--no-config"]);
    assert_eq!(status, "inner=125", "{err}");
    assert!(
        err.contains(&format!("cannot judge config {}", path.display()))
            && err.contains("does not map")
            && err.contains(&format!("--config {}", path.display())),
        "{err}"
    );
    // But the (empty) lock directory a protected run makes.
    let left: Vec<_> = std::fs::read_dir(&inner_state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("locks") || std::fs::read_dir(p).unwrap().next().is_some())
        .collect();
    assert!(left.is_empty(), "the nested runs left {left:?}");
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
    // Owned by a third user: ignored.
    std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
    let run = run_in(&sandbox, &project.sub, &[], &[], LEAKER);
    run.assert_status(0);
    assert!(
        run.stderr.contains("ignoring config") && run.stderr.contains("owned by uid 4242"),
        "{}",
        run.stderr
    );
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

/// The first `toml` block after `after` in the document `doc` (relative to the repository).
fn toml_example(doc: &str, after: &str) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(doc),
    )
    .unwrap();
    let from = text
        .find(after)
        .unwrap_or_else(|| panic!("{doc} has no {after:?}"));
    text[from..]
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("{doc} has no toml example after {after:?}"))
        .to_string()
}

/// The README's config example works as written in a project that lacks the directory it
/// protects: a protect path that does not exist is one behaviour wherever it comes from (its
/// rule is reported absent, with a warning), and the warning names the file, the line and the
/// key when the value came from the file (the flag otherwise). Under `--require-protection` it
/// is refused (exit 125, before anything starts), named the same way; an `allow-write` that does
/// not exist is never an error.
#[test]
fn a_rule_path_that_does_not_exist_is_absent_and_named_where_it_came_from() {
    let sandbox = Sandbox::new("cfg-absent");
    let project = Project::new(&sandbox);
    let example = toml_example("README.md", "Options a project always wants");
    assert!(example.contains("protect-path"), "{example}");
    let path = project.write("cleanroom.toml", &example);
    let run = run_in(&sandbox, &project.sub, &[], &[], "exit 0");
    run.assert_status(0);
    let warning = run
        .stderr
        .lines()
        .find(|l| l.contains("warning:") && l.contains("protect-path"))
        .unwrap_or_else(|| panic!("no warning: {}", run.stderr));
    let line = example
        .lines()
        .position(|l| l.contains("protect-path"))
        .unwrap()
        + 1;
    assert!(
        warning.contains(&format!("{}:{line}: run.protect-path[0]", path.display()))
            && warning.contains("does not exist"),
        "{warning}"
    );
    assert!(
        !warning.contains("--protect-path"),
        "names the flag: {warning}"
    );
    // The report has it too, as the library says it (so do the library's other callers).
    let reported = &run.report()["protection"]["warnings"];
    assert!(
        reported
            .as_array()
            .unwrap()
            .iter()
            .any(|w| warning.ends_with(w.as_str().unwrap())),
        "{warning} not in {reported}"
    );
    assert_eq!(
        run.stderr.matches("does not exist").count(),
        1,
        "said once: {}",
        run.stderr
    );
    let absent = run.report()["protection"]["policy"]
        .as_array()
        .unwrap()
        .iter()
        .any(|rule| rule["reason"] == "--protect-path" && rule["enforced_by"] == "absent");
    assert!(absent, "{}", run.report()["protection"]);

    // Named the same way when it is refused.
    let run = run_in(
        &sandbox,
        &project.sub,
        &[],
        &["--require-protection"],
        "touch \"$CRT_DIR/ran\"",
    );
    run.assert_status(125);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("{}:{line}: run.protect-path[0]", path.display()))
            && run.stderr.contains("--require-protection"),
        "{}",
        run.stderr
    );
    assert!(!exists(&sandbox.scratch().join("ran")));

    // From a flag, the flag is named; an allow-write in the file is named by its line.
    project.write(
        "cleanroom.toml",
        "[run]\nprotect = \"strict\"\nallow-write = [\n  \"out\",\n]\n",
    );
    let run = run_in(
        &sandbox,
        &project.sub,
        &[],
        &["--require-protection", "--protect-path", "nowhere"],
        "exit 0",
    );
    run.assert_status(125);
    assert!(
        run.stderr
            .contains("--protect-path nowhere: does not exist"),
        "{}",
        run.stderr
    );
    let run = run_in(
        &sandbox,
        &project.sub,
        &[],
        &["--require-protection"],
        "exit 0",
    );
    run.assert_status(0);
    assert!(
        run.stderr
            .contains(&format!("{}:4: run.allow-write[0]", path.display())),
        "{}",
        run.stderr
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
