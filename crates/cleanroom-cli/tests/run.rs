//! The lifecycle of `cleanroom run`, driving the real binary with private state dirs: every
//! pinned variable points inside the root and the root is gone however the run ends (success,
//! failure, signal death, timeout, SIGINT to the runner); temp dirs land in the root and /tmp
//! gains nothing; exit statuses follow the documented table (command's code, 128+N, 124, 127,
//! 126, 125 for cleanroom's own failures, which create nothing); TERM and INT reach the command
//! before any KILL; removal never follows a symlink out of the root; `--keep-root` and
//! `gc --kept`; a real `cargo test --offline` and a real `git commit` work inside a run; the
//! `--report` file carries the documented fields; and a broken stderr changes nothing.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{exists, Sandbox};
use rustix::process::Signal;

/// Variables that must point inside the root (beside CLEANROOM_ROOT, which is the root).
const PINNED: [&str; 11] = [
    "HOME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "CODEX_HOME",
    "CRT_PINNED_HOME",
];

/// The pinned XDG base directories a root is not created with (the first program that writes
/// there makes them, as the XDG base directory specification asks).
const LAZY_XDG: [&str; 4] = [
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
];

#[test]
fn pinned_variables_point_inside_the_root_which_is_gone_afterwards() {
    let sandbox = Sandbox::new("pins");
    // One line per variable: NAME, value, its mode when the command started (or "missing"),
    // and whether the command can write there (after `mkdir -p`, as the XDG spec asks of a
    // program that finds a base directory missing).
    let script = format!(
        r#"for v in CLEANROOM_ROOT {}; do
             eval "d=\${{$v-}}"
             m=$(stat -c %a "$d" 2>/dev/null || echo missing)
             if mkdir -p "$d" && touch "$d/probe" 2>/dev/null; then w=writable; else w=not-writable; fi
             printf '%s\t%s\t%s\t%s\n' "$v" "$d" "$m" "$w"
           done"#,
        PINNED.join(" ")
    );
    let (mut cmd, report) =
        sandbox.run_command(&["--pin", "CRT_PINNED_HOME"], &["bash", "-c", &script]);
    cmd.env("CODEX_HOME", "/nonexistent/host-codex-home")
        .env("CRT_PINNED_HOME", "/nonexistent/host-pinned")
        .env("TMPDIR", "/var/tmp")
        .env("XDG_CONFIG_HOME", "/nonexistent/host-config");
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    let root = run.root();
    assert!(root.starts_with(sandbox.state()), "{}", root.display());
    let mut seen = Vec::new();
    for line in run.stdout.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [var, value, mode, writable] = fields[..] else {
            panic!("unexpected line {line:?}");
        };
        // The four XDG base directories are the programs' to create; everything else exists,
        // private, before the command starts.
        let made_by_programs = LAZY_XDG.contains(&var);
        let expected_mode = if made_by_programs { "missing" } else { "700" };
        assert_eq!(
            mode, expected_mode,
            "{var}={value} when the command started"
        );
        let value = Path::new(value);
        if var == "CLEANROOM_ROOT" {
            assert_eq!(value, root, "CLEANROOM_ROOT is the root");
        } else {
            assert!(
                value.starts_with(&root) && value != root,
                "{var}={} is not inside the root {}",
                value.display(),
                root.display()
            );
        }
        assert_eq!(writable, "writable", "{var}={}", value.display());
        seen.push(var.to_string());
    }
    assert_eq!(seen.len(), PINNED.len() + 1, "{}", run.stdout);
    assert!(!exists(&root), "the root outlived the run");
    sandbox.assert_namespace_empty();
}

/// `--timeout` values for a command that must be ready (its traps set) when the timeout fires,
/// tried in turn (see `Sandbox::run_bash_timed`).
const TIMEOUTS: &[&str] = &["300ms", "3s", "30s"];

/// How a run is made to end, and the status cleanroom must exit with.
struct Ending {
    name: &'static str,
    args: &'static [&'static str],
    /// What the command does after filling its root and marking itself ready.
    then: &'static str,
    /// Whether the test sends SIGINT to the runner once the command is ready.
    interrupt: bool,
    /// `--timeout` values, tried in turn until the command got ready before its timeout fired
    /// (on a loaded machine the first may fire before the command has filled its root).
    timeouts: &'static [&'static str],
    status: i32,
}

const ENDINGS: [Ending; 5] = [
    Ending {
        name: "success",
        args: &[],
        then: "exit 0",
        interrupt: false,
        timeouts: &[],
        status: 0,
    },
    Ending {
        name: "failure",
        args: &[],
        then: "exit 3",
        interrupt: false,
        timeouts: &[],
        status: 3,
    },
    Ending {
        name: "signal death",
        args: &[],
        then: "kill -USR1 $$",
        interrupt: false,
        timeouts: &[],
        status: 128 + libc::SIGUSR1,
    },
    // The command dies of the signal itself: a grace longer than the harness's 60 s keeps a
    // loaded machine from turning a slow exit into a KILL (137). `exec`: the shell that marked
    // itself ready is the process the signal reaches, with no child forked in between (a
    // shell waiting for a child defers SIGINT, and a child forked just after the runner listed
    // the run's processes would not get it).
    Ending {
        name: "timeout",
        args: &["--grace", "300s"],
        then: "exec sleep 300",
        interrupt: false,
        timeouts: TIMEOUTS,
        status: 124,
    },
    Ending {
        name: "interrupt",
        args: &["--grace", "300s"],
        then: "exec sleep 300",
        interrupt: true,
        timeouts: &[],
        status: 130,
    },
];

#[test]
fn the_root_is_removed_however_the_run_ends() {
    let fill = r#"mkdir -p "$HOME/a/b/c" "$XDG_CACHE_HOME/x" && echo data > "$HOME/a/b/c/f"
        echo data > "$TMPDIR/t" && chmod 0555 "$HOME/a/b"
        echo "$CLEANROOM_ROOT" > "$CRT_DIR/root"
        mark_ready main"#;
    for ending in ENDINGS {
        let sandbox = Sandbox::new("ending");
        let script = format!("{fill}\n{}", ending.then);
        let run = if ending.interrupt {
            sandbox.run_bash_interrupted(ending.args, &script, &["main"], Signal::INT)
        } else if !ending.timeouts.is_empty() {
            sandbox.run_bash_timed(ending.timeouts, ending.args, &script, "main")
        } else {
            sandbox.run_bash(ending.args, &script)
        };
        assert_eq!(
            run.status,
            Some(ending.status),
            "{}: stderr:\n{}",
            ending.name,
            run.stderr
        );
        let root = std::fs::read_to_string(sandbox.scratch().join("root")).unwrap();
        let root = Path::new(root.trim());
        assert_eq!(root, run.root(), "{}", ending.name);
        assert!(!exists(root), "{}: the root outlived the run", ending.name);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn missing_and_unexecutable_commands_exit_127_and_126() {
    let sandbox = Sandbox::new("spawn");
    let not_exec = sandbox.scratch().join("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\nexit 0\n").unwrap();
    let dir = sandbox.scratch().to_str().unwrap().to_string();
    let missing = format!("{dir}/no-such-command");
    let cases: [(&str, i32); 4] = [
        (&missing, 127),
        ("no-such-command-on-path-crt", 127),
        (not_exec.to_str().unwrap(), 126),
        (&dir, 126),
    ];
    for (command, status) in cases {
        let run = sandbox.run(&[], &[command]);
        run.assert_status(status);
        assert!(
            run.stderr.contains(command),
            "the error names {command}:\n{}",
            run.stderr
        );
        assert_eq!(run.report()["exit"]["status"], status);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn term_and_int_reach_the_command_before_any_kill() {
    let sandbox = Sandbox::new("polite");
    // The command cleans up on the signal and exits 0 by itself: no SIGKILL may be needed, and
    // the (long) grace must not be waited out.
    let script = |sig: &str| {
        format!(
            r#"trap 'echo {sig} > "$CRT_DIR/caught-{sig}"; exit 0' {sig}
               mark_ready {sig}
               while :; do sleep 0.05; done"#
        )
    };
    // A grace longer than the harness's 60 s for a run: one that waited it out fails.
    let timeout = sandbox.run_bash_timed(TIMEOUTS, &["--grace", "300s"], &script("TERM"), "TERM");
    timeout.assert_status(124);
    let interrupt =
        sandbox.run_bash_interrupted(&["--grace", "300s"], &script("INT"), &["INT"], Signal::INT);
    interrupt.assert_status(130);
    for (run, sig) in [(&timeout, "TERM"), (&interrupt, "INT")] {
        let caught = std::fs::read_to_string(sandbox.scratch().join(format!("caught-{sig}")));
        assert_eq!(
            caught.ok().as_deref().map(str::trim),
            Some(sig),
            "the command never saw SIG{sig}"
        );
        assert_eq!(run.report()["killed"], serde_json::json!([]), "{sig}");
    }
    sandbox.assert_namespace_empty();
}

#[test]
fn a_second_sigint_kills_at_once() {
    let sandbox = Sandbox::new("twice");
    // -v: the runner says when it forwarded the first SIGINT, so the second is sent after it
    // (two pending SIGINTs would be one). The grace is longer than the 60 s the harness waits.
    let (mut cmd, report) = sandbox.bash_command(
        &["-v", "--grace", "300s"],
        "trap '' INT TERM\nmark_ready main\nwhile :; do sleep 0.05; done",
    );
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (forwarded, seen) = std::sync::mpsc::channel();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            if line.contains("forwarding signal 2 to the run") {
                let _ = forwarded.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    if let Err(e) = sandbox.wait_ready(&["main"], &child) {
        sandbox.stop_runner(&mut child);
        panic!("{e}");
    }
    common::send_signal(&child, Signal::INT);
    if seen.recv_timeout(Duration::from_secs(60)).is_err() {
        sandbox.stop_runner(&mut child);
        panic!(
            "the runner never forwarded the first SIGINT:\n{}",
            log.join().unwrap()
        );
    }
    common::send_signal(&child, Signal::INT);
    let out = sandbox.wait_for_runner(child, Duration::from_secs(60));
    let log = log.join().unwrap();
    assert!(
        log.contains("second signal: killing every process of the run"),
        "{log}"
    );
    let status = out.status.code().expect("the runner exits");
    assert!(status > 128, "status {status}");
    assert!(std::fs::read_to_string(report).is_ok(), "no report");
    sandbox.assert_no_survivors(&[]);
    sandbox.assert_namespace_empty();
}

#[test]
fn temp_dirs_of_mktemp_and_python_land_in_the_root_and_tmp_gains_nothing() {
    let sandbox = Sandbox::new("mktemp");
    let script = r#"set -e
        d1=$(mktemp -d); touch "$d1/$CRT_MARK"
        f1=$(mktemp); echo x > "$f1"
        d2=$(python3 -c 'import tempfile; print(tempfile.mkdtemp())'); touch "$d2/$CRT_MARK"
        d3=$(python3 -c 'import tempfile; print(tempfile.gettempdir())')
        printf '%s\n' "$d1" "$f1" "$d2" "$d3""#;
    let run = sandbox.run_bash(&[], script);
    run.assert_status(0);
    let tmp = run.root().join("tmp");
    let paths: Vec<PathBuf> = run.stdout.lines().map(PathBuf::from).collect();
    assert_eq!(paths.len(), 4, "{}", run.stdout);
    for path in &paths {
        assert!(
            path.starts_with(&tmp),
            "{} is not in the root's tmp {}",
            path.display(),
            tmp.display()
        );
        assert!(!exists(path), "{} outlived the run", path.display());
    }
    let in_tmp = files_named(Path::new("/tmp"), sandbox.marker(), 2);
    assert!(in_tmp.is_empty(), "the run wrote into /tmp: {in_tmp:?}");
    sandbox.assert_namespace_empty();
}

/// Paths under `dir`, at most `depth` levels down, whose name is `name`.
fn files_named(dir: &Path, name: &str, depth: u32) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            found.push(path.clone());
        }
        if depth > 1 && entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(files_named(&path, name, depth - 1));
        }
    }
    found
}

/// Usage errors, each with a word its message must contain.
const USAGE_ERRORS: [(&[&str], &str); 7] = [
    (&["run", "--bogus", "--", "true"], "--bogus"),
    (&["run"], "<COMMAND>"),
    (&["run", "--on-leak", "maybe", "--", "true"], "--on-leak"),
    (&["run", "--"], "<COMMAND>"),
    (&["run", "--timeout", "5x", "--", "true"], "--timeout"),
    (&["run", "--grace", "soon", "--", "true"], "--grace"),
    (&["run", "--pin", "A/B", "--", "true"], "--pin"),
];

/// Runs every usage error; returns (args, expected word, stderr) after checking the status and
/// that nothing was created.
fn usage_errors(sandbox: &Sandbox) -> Vec<(&'static [&'static str], &'static str, String)> {
    USAGE_ERRORS
        .iter()
        .map(|&(args, named)| {
            let out = sandbox.command(args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
            assert!(
                !exists(sandbox.state()),
                "{args:?}: the state dir was created"
            );
            (args, named, stderr)
        })
        .collect()
}

#[test]
fn own_failures_exit_125_with_the_problem_named_and_nothing_created() {
    let sandbox = Sandbox::new("usage");
    for (args, named, stderr) in usage_errors(&sandbox) {
        assert!(
            stderr.contains(named),
            "{args:?}: stderr does not name {named}: {stderr}"
        );
    }
}

#[test]
fn own_failures_are_one_line_on_stderr() {
    let sandbox = Sandbox::new("oneline");
    for (args, named, stderr) in usage_errors(&sandbox) {
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            lines.len() == 1 && lines[0].contains(named),
            "{args:?}: expected one line naming {named}, got: {stderr}"
        );
    }
}

#[test]
fn unsafe_state_dirs_are_refused_in_one_line_and_left_untouched() {
    let sandbox = Sandbox::new("unsafe");
    let base = sandbox.scratch();
    let target = base.join("private");
    std::fs::create_dir(&target).unwrap();
    set_mode(&target, 0o700);
    let link = base.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let group_writable = base.join("group-writable");
    std::fs::create_dir(&group_writable).unwrap();
    set_mode(&group_writable, 0o770);
    let mut cases = vec![(link, "symbolic link"), (group_writable, "0770")];
    if common::is_root() {
        let foreign = base.join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        set_mode(&foreign, 0o700);
        std::os::unix::fs::chown(&foreign, Some(common::NOBODY), Some(common::NOBODY)).unwrap();
        cases.push((foreign, "owned by uid 65534"));
    }
    for (dir, reason) in cases {
        let out = std::process::Command::new(common::BIN)
            .arg("--state-dir")
            .arg(&dir)
            .args(["run", "--", "touch", "should-not-exist"])
            .current_dir(sandbox.scratch())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{}: {stderr}", dir.display());
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line expected: {stderr}");
        assert!(
            lines[0].contains(dir.to_str().unwrap()) && lines[0].contains(reason),
            "the line must name {} and say {reason:?}: {stderr}",
            dir.display()
        );
        let resolved = std::fs::canonicalize(&dir).unwrap();
        let left: Vec<_> = std::fs::read_dir(&resolved).unwrap().collect();
        assert!(left.is_empty(), "{}: created {left:?}", dir.display());
        assert!(!exists(&sandbox.scratch().join("should-not-exist")));
    }
}

/// A runner short of descriptors fails at every step of its set-up in turn (the signalfd, the
/// root's open, its lock, the marker, the Landlock rules, the spawn), once per limit: whichever
/// step it is, the run exits 125 and the state dir is left empty at once, with no
/// `.pending-run-*` waiting a minute for gc and no `.trash-run-*`.
#[test]
fn a_run_short_of_descriptors_leaves_nothing_in_the_state_dir() {
    let mut sandboxes = vec![Sandbox::new("nofile")];
    if common::is_root() {
        sandboxes.push(Sandbox::as_user("nofile-user", common::NOBODY));
    }
    for sandbox in sandboxes {
        let mut failed = 0;
        for limit in 4..=32u64 {
            let mut cmd = sandbox.command(&["run", "--", "true"]);
            // SAFETY: close_range and setrlimit are async-signal-safe and touch only the child.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    // Descriptors the test itself inherited (a CI runner's, say) would eat the
                    // limit before the dynamic loader runs; they close at exec.
                    libc::syscall(
                        libc::SYS_close_range,
                        3,
                        libc::c_uint::MAX,
                        libc::CLOSE_RANGE_CLOEXEC,
                    );
                    let rlimit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => {}
                Some(125) if stderr.contains("Too many open files") => failed += 1,
                other => panic!("limit {limit}: status {other:?}: {stderr}"),
            }
            let left = sandbox.namespace_entries();
            assert!(
                left.is_empty(),
                "limit {limit}: the failed run left {left:?} ({stderr})"
            );
        }
        assert!(failed > 3, "the limits never made a run fail");
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn removal_does_not_follow_symlinks_out_of_the_root() {
    let sandbox = Sandbox::new("victim");
    let victim = sandbox.scratch().join("victim");
    std::fs::create_dir_all(victim.join("sub")).unwrap();
    std::fs::write(victim.join("precious"), "keep me").unwrap();
    std::fs::write(victim.join("sub/precious"), "keep me too").unwrap();
    let script = r#"set -e
        v="$CRT_DIR/victim"
        ln -s "$v" "$HOME/to-victim"
        ln -s "$v/precious" "$TMPDIR/to-file"
        mkdir -p "$XDG_DATA_HOME/a/b" && ln -s "$v/sub" "$XDG_DATA_HOME/a/b/to-sub"
        ln -s ../../../../../.. "$HOME/up""#;
    let run = sandbox.run_bash(&[], script);
    run.assert_status(0);
    assert!(!exists(&run.root()), "the root outlived the run");
    assert_eq!(
        std::fs::read_to_string(victim.join("precious")).unwrap(),
        "keep me"
    );
    assert_eq!(
        std::fs::read_to_string(victim.join("sub/precious")).unwrap(),
        "keep me too"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn keep_root_keeps_it_and_gc_kept_reclaims_it() {
    let sandbox = Sandbox::new("keep");
    let run = sandbox.run_bash(&["--keep-root"], r#"echo kept > "$HOME/file""#);
    run.assert_status(0);
    let root = run.root();
    assert_eq!(
        std::fs::read_to_string(root.join("home/file")).unwrap(),
        "kept\n"
    );
    assert!(
        run.stderr.contains(root.to_str().unwrap()),
        "the kept root is named: {}",
        run.stderr
    );
    assert_eq!(run.report()["kept_root"], true);
    let gc = sandbox.command(&["gc"]).output().unwrap();
    assert_eq!(gc.status.code(), Some(0));
    assert!(exists(&root), "plain gc reclaimed a kept root");
    // A later run must not reclaim it either.
    sandbox.run(&[], &["true"]).assert_status(0);
    assert!(exists(&root), "a run's gc reclaimed a kept root");
    let gc = sandbox.command(&["gc", "--kept"]).output().unwrap();
    assert_eq!(
        gc.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(!exists(&root), "gc --kept left the kept root");
    sandbox.assert_namespace_empty();
}

/// The `list --json` entries of `sandbox`'s state dir, keyed by name.
fn listed(sandbox: &Sandbox) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = sandbox.command(&["list", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        // The lock directory a protected run makes holds no root.
        .filter(|e| e["state"] != "locks")
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect()
}

/// `--keep-root on-failure` (or `=on-failure`) keeps the root of a run that fails, with why in
/// its marker (version 2) and in `list`, and removes the root of one that succeeds. The newest
/// `--keep-root-count` (3 unless told) roots kept on failure stay; a plain gc reclaims older
/// ones, never a root kept with `--keep-root` (until `gc --kept`), and `gc --kept` takes them
/// all. A plain `--keep-root` followed by the command still keeps always.
#[test]
fn keep_root_on_failure_keeps_the_newest_failed_roots_and_says_why() {
    let sandbox = Sandbox::new("keep-failed");
    let on_failure = |args: &[&str], status: &str| {
        let mut full = vec!["run"];
        full.extend_from_slice(args);
        full.extend([
            "sh",
            "-c",
            "echo evidence > \"$HOME/file\"; exit \"$0\"",
            status,
        ]);
        sandbox.command(&full).output().unwrap()
    };
    let out = on_failure(&["--keep-root", "on-failure"], "0");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    sandbox.assert_namespace_empty();
    let mut failed = Vec::new();
    for (args, status) in [
        (&["--keep-root", "on-failure"][..], "3"),
        (&["--keep-root=on-failure", "--timeout", "30"], "4"),
        (&["--keep-root", "on-failure", "--timeout", "30"], "5"),
    ] {
        let out = on_failure(args, status);
        assert_eq!(
            out.status.code(),
            Some(status.parse().unwrap()),
            "{args:?}: {out:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("root of the failed run kept at"),
            "{args:?}: {stderr}"
        );
        let mut names = sandbox.namespace_entries();
        names.retain(|n| !failed.contains(n));
        assert_eq!(names.len(), 1, "{args:?}: one more root: {names:?}");
        failed.push(names.pop().unwrap());
    }
    let last = sandbox.state().join(&failed[2]);
    assert_eq!(
        std::fs::read_to_string(last.join("home/file")).unwrap(),
        "evidence\n"
    );
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(last.join("cleanroom-root.json")).unwrap()).unwrap();
    assert_eq!(marker["version"], 2, "{marker}");
    assert_eq!(marker["keep"], true, "{marker}");
    assert_eq!(
        marker["kept"],
        serde_json::json!({"when": "on-failure", "exit_status": 5, "retain": 3})
    );
    // A root kept always, in between, is not counted and never expires.
    let always = sandbox.run(&["--keep-root"], &["true"]);
    always.assert_status(0);
    let always = always
        .root()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let entries = listed(&sandbox);
    assert_eq!(
        entries[&always]["kept"],
        serde_json::json!({"when": "always"})
    );
    for name in &failed {
        let entry = &entries[name];
        assert_eq!(entry["state"], "kept", "{entry}");
        assert_eq!(entry["kept"]["when"], "on-failure", "{entry}");
        assert!(entry["reason"]
            .as_str()
            .unwrap()
            .contains("kept on failure (exit status"));
    }
    let text = sandbox.command(&["list"]).output().unwrap().stdout;
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("kept on failure (exit status 4)"), "{text}");
    // Two more failures, one of them kept only while it is the newest: the three oldest go.
    let out = on_failure(
        &["--keep-root", "on-failure", "--keep-root-count", "1"],
        "6",
    );
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let out = on_failure(&["--keep-root", "on-failure"], "7");
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let entries = listed(&sandbox);
    let stale: Vec<&String> = entries
        .iter()
        .filter(|(_, e)| e["state"] == "stale")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(stale.len(), 3, "{entries:#?}");
    assert!(failed[..2].iter().all(|n| stale.contains(&n)), "{stale:?}");
    let gc = sandbox.command(&["gc"]).output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{gc:?}");
    let mut left = sandbox.namespace_entries();
    left.sort();
    let kept: Vec<String> = entries
        .keys()
        .filter(|n| !stale.contains(n))
        .cloned()
        .collect();
    assert_eq!(left, kept);
    assert_eq!(
        left.len(),
        3,
        "the always root and two failed ones: {left:?}"
    );
    assert!(
        left.contains(&always) && left.contains(&failed[2]),
        "{left:?}"
    );
    let gc = sandbox.command(&["gc", "--kept"]).output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{gc:?}");
    sandbox.assert_namespace_empty();
}

/// A failed run that put a directory where its marker was: why its root is kept cannot be
/// recorded, and a root kept without its record would escape the retention bound (and be listed
/// unproven forever): it is removed as `--keep-root=never` would remove it, and the warning
/// says so.
#[test]
fn keep_root_on_failure_removes_a_root_whose_record_cannot_be_written() {
    let sandbox = Sandbox::new("keep-unrecorded");
    let run = sandbox.run(
        &["--keep-root=on-failure"],
        &[
            "sh",
            "-c",
            "rm \"$CLEANROOM_ROOT/cleanroom-root.json\"; mkdir \"$CLEANROOM_ROOT/cleanroom-root.json\"; exit 1",
        ],
    );
    run.assert_status(1);
    assert!(
        run.stderr
            .contains("could not keep the root of the failed run")
            && run.stderr.contains("removed instead"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("kept at"), "{}", run.stderr);
    assert_eq!(run.report()["kept_root"], false, "{}", run.report());
    assert_eq!(
        run.report()["cleanup"]["status"],
        "removed",
        "{}",
        run.report()
    );
    sandbox.assert_namespace_empty();
}

/// A run whose set-up fails (exit 125: here a protect path that does not exist, refused under
/// `--require-protection`) never started its command: `--keep-root=on-failure` keeps nothing of
/// it, as docs/config.md says.
#[test]
fn keep_root_on_failure_keeps_nothing_when_the_set_up_fails() {
    let sandbox = Sandbox::new("keep-setup");
    let missing = sandbox.scratch().join("missing");
    let run = sandbox.run(
        &[
            "--keep-root=on-failure",
            "--require-protection",
            "--protect-path",
            missing.to_str().unwrap(),
        ],
        &["sh", "-c", "touch \"$CRT_DIR/ran\""],
    );
    run.assert_status(125);
    assert!(!run.stderr.contains("kept"), "{}", run.stderr);
    assert!(!exists(&sandbox.scratch().join("ran")));
    sandbox.assert_namespace_empty();
}

/// `keep-root` and `keep-root-count` in the config: `"on-failure"` and a count, and the old
/// switch `keep-root = true` (always); a flag's `--keep-root=never` turns the file's off.
#[test]
fn keep_root_comes_from_the_config_too() {
    let sandbox = Sandbox::new("keep-config");
    let config = sandbox.scratch().join("keep.toml");
    let with = |text: &str, args: &[&str], status: &str| {
        std::fs::write(&config, text).unwrap();
        let mut full = vec!["run", "--config", config.to_str().unwrap()];
        full.extend_from_slice(args);
        full.extend(["sh", "-c", "exit \"$0\"", status]);
        sandbox.command(&full).output().unwrap()
    };
    let on_failure = "[run]\nkeep-root = \"on-failure\"\nkeep-root-count = 2\n";
    assert_eq!(with(on_failure, &[], "0").status.code(), Some(0));
    sandbox.assert_namespace_empty();
    assert_eq!(
        with(on_failure, &["--keep-root=never"], "1").status.code(),
        Some(1)
    );
    sandbox.assert_namespace_empty();
    assert_eq!(with(on_failure, &[], "1").status.code(), Some(1));
    let entries = listed(&sandbox);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let kept = &entries.values().next().unwrap()["kept"];
    assert_eq!(
        kept,
        &serde_json::json!({"when": "on-failure", "exit_status": 1, "retain": 2})
    );
    assert_eq!(
        with("[run]\nkeep-root = true\n", &[], "0").status.code(),
        Some(0)
    );
    assert_eq!(sandbox.namespace_entries().len(), 2);
    let out = with("[run]\nkeep-root = \"sometimes\"\n", &[], "0");
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(":2: run.keep-root") && stderr.contains("on-failure"),
        "{stderr}"
    );
    let out = with("[run]\nkeep-root-count = 0\n", &[], "0");
    assert_eq!(out.status.code(), Some(125));
    let gc = sandbox.command(&["gc", "--kept"]).output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{gc:?}");
    sandbox.assert_namespace_empty();
}

#[test]
fn cargo_test_offline_passes_inside_a_run() {
    let sandbox = Sandbox::new("cargo");
    let krate = sandbox.scratch().join("tiny");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("src/lib.rs"),
        "#[test]\nfn home_is_inside_the_root() {\n    \
         let home = std::env::var(\"HOME\").unwrap();\n    \
         assert!(home.starts_with(&std::env::var(\"CLEANROOM_ROOT\").unwrap()));\n}\n",
    )
    .unwrap();
    let manifest = krate.join("Cargo.toml");
    let (mut cmd, report) = sandbox.run_command(
        &["--timeout", "120s"],
        &[
            "cargo",
            "test",
            "--offline",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ],
    );
    // The toolchain must be found from the real HOME alone, as on a user's machine.
    for var in [
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_TARGET_DIR", krate.join("target"));
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    assert!(
        run.stdout.contains("test home_is_inside_the_root ... ok"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let toolchain = run.report()["env"]["toolchain"].as_array().unwrap().clone();
    let var_of = |name: &str| {
        toolchain
            .iter()
            .find(|t| t["var"] == name)
            .and_then(|t| t["path"].as_str())
            .map(PathBuf::from)
    };
    let real_home = PathBuf::from(std::env::var_os("HOME").unwrap());
    for var in ["CARGO_HOME", "RUSTUP_HOME"] {
        let path = var_of(var).unwrap_or_else(|| panic!("{var} not passed through"));
        assert!(path.starts_with(&real_home), "{var}={}", path.display());
    }
    sandbox.assert_namespace_empty();
}

#[test]
fn git_commit_works_with_the_hosts_global_identity() {
    let sandbox = Sandbox::new("git");
    let host_home = sandbox.scratch().join("host-home");
    std::fs::create_dir(&host_home).unwrap();
    std::fs::write(
        host_home.join(".gitconfig"),
        "[user]\n\tname = Cleanroom Tester\n\temail = tester@example.invalid\n",
    )
    .unwrap();
    let script = r#"set -e
        cd "$HOME"
        git init -q repo && cd repo
        git commit -q --allow-empty -m probe
        git log -1 --format='%an <%ae>'
        echo "$GIT_CONFIG_GLOBAL""#;
    let (mut cmd, report) = sandbox.run_command(&[], &["bash", "-c", script]);
    cmd.env("HOME", &host_home);
    for var in [
        "GIT_CONFIG_GLOBAL",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
        "XDG_CONFIG_HOME",
    ] {
        cmd.env_remove(var);
    }
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "Cleanroom Tester <tester@example.invalid>",
            host_home.join(".gitconfig").to_str().unwrap()
        ],
        "{}",
        run.stderr
    );
    let entries: Vec<_> = std::fs::read_dir(&host_home).unwrap().flatten().collect();
    assert_eq!(entries.len(), 1, "the run wrote into the real home");
    sandbox.assert_namespace_empty();
}

#[test]
fn the_report_file_carries_the_documented_fields() {
    let sandbox = Sandbox::new("report");
    let run = sandbox.run(&[], &["sh", "-c", "exit 3"]);
    run.assert_status(3);
    let report = run.report();
    assert_eq!(report["schema"], "cleanroom-run-report");
    assert_eq!(report["version"], 1);
    assert_eq!(report["exit"]["status"], 3);
    assert_eq!(report["exit"]["code"], 3);
    assert_eq!(report["exit"]["ending"], "exited");
    assert_eq!(
        report["containment"]["mechanism"],
        common::Rung::Default.expected_mechanism()
    );
    assert_eq!(report["leaks"], serde_json::json!([]));
    assert_eq!(report["cleanup"]["status"], "removed");
    assert_eq!(report["command"], serde_json::json!(["sh", "-c", "exit 3"]));
    let run_id = report["run_id"].as_str().unwrap();
    assert!(run.root().ends_with(format!("run-{run_id}")));
    let mode = std::fs::metadata(sandbox.state()).unwrap().mode();
    assert_eq!(mode & 0o777, 0o700, "the state dir is private");
    sandbox.assert_namespace_empty();
}

#[test]
fn a_broken_stderr_neither_strands_the_root_nor_changes_the_status() {
    let sandbox = Sandbox::new("epipe");
    // 127 is reported through a message printed before the root is removed; the leak through
    // messages printed after.
    let missing = sandbox.run_command(&[], &["no-such-command-on-path-crt"]);
    let leak = sandbox.bash_command(&[], "escapee leak &\nready leak");
    for ((mut cmd, _), status) in [(missing, 127), (leak, 0)] {
        let (read, write) = rustix::pipe::pipe().unwrap();
        drop(read);
        cmd.stderr(std::process::Stdio::from(write));
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(status), "{cmd:?}");
        sandbox.assert_namespace_empty();
    }
    sandbox.assert_no_survivors(&["leak"]);
}

#[test]
fn a_runner_started_with_sigchld_ignored_still_sees_the_command_exit() {
    // An ignored SIGCHLD survives exec and makes the kernel reap children itself; the runner
    // must take the default action back or it never learns how the command ended (and hangs).
    let sandbox = Sandbox::new("sigchld-ignored");
    let (mut cmd, report) = sandbox.run_command(&[], &["sh", "-c", "exit 7"]);
    // SAFETY: signal(2) is async-signal-safe; it only changes this child's disposition.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        });
    }
    let run = sandbox.finish(cmd, &report);
    run.assert_status(7);
    sandbox.assert_namespace_empty();
}

#[test]
fn a_runner_started_with_int_ignored_gives_the_command_default_signals() {
    // A shell starts background jobs with INT and QUIT ignored; a command inheriting that could
    // never be interrupted through the runner. It starts with no signal ignored or blocked.
    let sandbox = Sandbox::new("sigint-ignored");
    let (mut cmd, report) =
        sandbox.run_command(&[], &["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]);
    // SAFETY: signal(2) is async-signal-safe; it only changes this child's dispositions.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            Ok(())
        });
    }
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    let mask = |name: &str| {
        let line = run.stdout.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{}", run.stdout);
    let int_or_quit = (1 << (libc::SIGINT - 1)) | (1 << (libc::SIGQUIT - 1));
    assert_eq!(mask("SigIgn:") & int_or_quit, 0, "{}", run.stdout);
}

#[test]
fn a_timeout_exits_124_when_the_signal_was_enough_and_137_when_kill_was_needed() {
    let sandbox = Sandbox::new("timeoutkill");
    // TERM is enough: 124, nothing SIGKILLed, the signal named.
    let run = sandbox.run(&["--timeout", "1s", "--grace", "30s"], &["sleep", "100"]);
    run.assert_status(124);
    let report = run.report();
    assert_eq!(report["exit"]["signal"], 15, "{report}");
    assert_eq!(report["exit"]["timeout_signal"], 15, "{report}");
    assert_eq!(report["killed"], serde_json::json!([]), "{report}");
    // TERM ignored: KILL after the grace, 137 as `timeout -k`, and the report says who.
    let run = sandbox.run_bash_timed(
        TIMEOUTS,
        &["--grace", "500ms"],
        "trap '' TERM\nmark_ready main\nwhile :; do sleep 0.1; done",
        "main",
    );
    run.assert_status(137);
    let report = run.report();
    assert_eq!(report["exit"]["signal"], 9, "{report}");
    let killed = report["killed"].as_array().unwrap();
    assert!(
        killed.iter().any(|k| k["command"]
            .as_str()
            .is_some_and(|c| c.contains(sandbox.marker()))),
        "the SIGKILLed command is not in the killed list: {report}"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn signal_chooses_the_first_signal_of_a_timeout() {
    let sandbox = Sandbox::new("signal");
    // The command ignores TERM and dies of INT: --signal INT ends it before any KILL.
    let script = "trap '' TERM\nexec perl -e '$SIG{TERM} = \"IGNORE\"; sleep 100'";
    let run = sandbox.run_bash(
        &["--timeout", "1s", "--grace", "30s", "--signal", "INT"],
        script,
    );
    run.assert_status(124);
    let report = run.report();
    assert_eq!(report["exit"]["signal"], 2, "{report}");
    assert_eq!(report["exit"]["timeout_signal"], 2, "{report}");
    assert_eq!(report["killed"], serde_json::json!([]), "{report}");
    for bad in ["NOPE", "0", "99"] {
        let run = sandbox.run(&["--timeout", "1s", "--signal", bad], &["true"]);
        run.assert_status(125);
    }
    sandbox.assert_namespace_empty();
}

/// A state dir below a symbolic link (`/home` -> `/data/home`) works: its parent is resolved
/// once, and the run binds paths beneath it without following links. One inside the working
/// directory is warned of: cleanroom's namespace is read-only to the command, which then may
/// not create new entries directly in that directory.
#[test]
fn a_state_dir_below_a_link_works_and_one_inside_the_working_directory_is_warned_of() {
    let sandbox = Sandbox::new("state-link");
    let scratch = sandbox.scratch().to_path_buf();
    std::fs::create_dir(scratch.join("real")).unwrap();
    std::os::unix::fs::symlink("real", scratch.join("link")).unwrap();
    let below_link = Sandbox::new("state-link").with_state_dir(scratch.join("link/ns"));
    let run = below_link.run(&[], &["true"]);
    run.assert_status(0);
    assert!(below_link.namespace_entries().is_empty());
    let inside_cwd = Sandbox::new("state-inside");
    let state = inside_cwd.scratch().join("cr");
    let inside_cwd = inside_cwd.with_state_dir(state);
    let run = inside_cwd.run(&[], &["true"]);
    run.assert_status(0);
    assert!(
        run.stderr.contains("lies inside") && run.stderr.contains("--state-dir"),
        "{}",
        run.stderr
    );
}
