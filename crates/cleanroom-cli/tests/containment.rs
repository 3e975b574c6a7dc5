//! Containment, driving the real binary: whatever a command starts — a `setsid` daemon, a double
//! fork on /dev/null, a `nohup` job, a loop that ignores TERM, a grandchild holding stdout, a
//! process forking while it is killed — is dead when `cleanroom run` returns, on both rungs
//! (the default cgroup as root, and the `--contain session` subreaper floor), after a normal
//! exit, a `--timeout` and a SIGINT to the runner, and also when the runner is unprivileged.
//! Survivors are looked for by pid and by a unique marker in /proc, never in the runner's report.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use common::{Rung, Sandbox};
use rustix::process::Signal;

/// A `setsid` daemon: a new session, out of the command's process group.
const SETSID: &str =
    r#"setsid perl "$CRT_DIR/sleeper.pl" setsid "$CRT_MARK" </dev/null >/dev/null 2>&1 &"#;
/// A classic double fork with stdio on /dev/null: the middle process exits at once.
const DOUBLE_FORK: &str = r#"( escapee doublefork & ) </dev/null >/dev/null 2>&1"#;
/// A `nohup` job (ignores SIGHUP).
const NOHUP: &str =
    r#"nohup perl "$CRT_DIR/sleeper.pl" nohup "$CRT_MARK" </dev/null >/dev/null 2>&1 &"#;
/// A shell loop that ignores TERM, in its own session.
const TRAP_LOOP: &str = r#"setsid bash -c 'trap "" TERM; echo $$ > "$CRT_DIR/trap.pid.tmp"; mv "$CRT_DIR/trap.pid.tmp" "$CRT_DIR/trap.pid"; while :; do sleep 0.05; done' "$CRT_MARK" </dev/null >/dev/null 2>&1 &"#;
/// A process that ignores TERM and forks marked children every millisecond, until killed.
const FORKER: &str = r#"escapee forker fork </dev/null >/dev/null 2>&1 &"#;

/// Held by the tests that run a fork loop, so that two of them do not compete for this 2-core
/// machine's process table at once.
static FORK_LOOPS: Mutex<()> = Mutex::new(());

/// A grandchild that keeps the run's stdout open.
const STDOUT_HOLDER: &str = "escapee holder &";

/// A script starting every escape, the fork loop last (so it only runs while the run is being
/// stopped), that returns once all are running; and the names of the payloads.
fn all_escapes() -> (String, Vec<&'static str>) {
    let quiet = [SETSID, DOUBLE_FORK, NOHUP, TRAP_LOOP, STDOUT_HOLDER].join("\n");
    (
        format!("{quiet}\nready setsid doublefork nohup trap holder\n{FORKER}\nready forker"),
        vec!["setsid", "doublefork", "nohup", "trap", "holder", "forker"],
    )
}

/// The command's main process after the escapes: the payload itself, so that it dies of the
/// signal it gets (no shell in between to re-raise it).
const MAIN: &str = r#"exec perl "$CRT_DIR/sleeper.pl" main "$CRT_MARK""#;

/// Runs `escape` (which starts the payloads `names`), lets the command exit 0 once they are
/// ready, and checks, on every rung, that the run returns, reports the leak, and leaves no
/// survivor and no root. The payloads would live 300 s and the harness gives a run 60 s, so a
/// run that returned did not wait for them: no clock is read.
fn escape_dies_with_the_run(tag: &str, escape: &str, names: &[&str]) {
    for rung in Rung::ALL {
        let sandbox = Sandbox::new(tag);
        let script = format!("{escape}\nready {}\nexit 0", names.join(" "));
        let run = sandbox.run_bash(&rung.args(), &script);
        run.assert_status(0);
        assert_eq!(run.mechanism(), rung.expected_mechanism(), "{rung:?}");
        sandbox.assert_no_survivors(names);
        sandbox.assert_namespace_empty();
        run.assert_cgroup_removed();
        assert!(
            run.stderr.lines().any(|l| l.contains("leak")),
            "{rung:?}: no leak reported on stderr:\n{}",
            run.stderr
        );
    }
}

#[test]
fn setsid_child_dies_with_the_run() {
    escape_dies_with_the_run("setsid", SETSID, &["setsid"]);
}

#[test]
fn double_forked_daemon_on_dev_null_dies_with_the_run() {
    escape_dies_with_the_run("doublefork", DOUBLE_FORK, &["doublefork"]);
}

#[test]
fn nohup_job_dies_with_the_run() {
    escape_dies_with_the_run("nohup", NOHUP, &["nohup"]);
}

#[test]
fn loop_ignoring_term_dies_with_the_run() {
    escape_dies_with_the_run("trap", TRAP_LOOP, &["trap"]);
}

#[test]
fn process_forking_while_being_killed_dies_with_all_its_children() {
    let _serial = FORK_LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let script = format!("{FORKER}\nready forker\nsleep 1");
    escape_dies_with_the_run("forker", &script, &["forker"]);
}

#[test]
fn grandchild_holding_stdout_does_not_keep_the_run_waiting() {
    for rung in Rung::ALL {
        let sandbox = Sandbox::new("stdout");
        let script = format!("{STDOUT_HOLDER}\nready holder\necho command-done");
        let (mut cmd, report) = sandbox.bash_command(&rung.args(), &script);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn cleanroom");
        // Read stdout to EOF on another thread: EOF only comes once the holder is dead.
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).unwrap();
            text
        });
        // The holder would keep the pipe open for 300 s: a runner that waited for it would not
        // return within the 20 s the harness gives it, nor would stdout reach its end.
        let out = sandbox.wait_for_runner(child, Duration::from_secs(20));
        let text = reader.join().unwrap();
        assert_eq!(text.trim(), "command-done", "{rung:?}");
        assert_eq!(out.status.code(), Some(0), "{rung:?}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
        assert_eq!(
            report["containment"]["mechanism"],
            rung.expected_mechanism()
        );
        sandbox.assert_no_survivors(&["holder"]);
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn every_escape_dies_when_the_timeout_fires() {
    let _serial = FORK_LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let (escapes, names) = all_escapes();
    for rung in Rung::ALL {
        let sandbox = Sandbox::new("timeout");
        let script = format!("{escapes}\n{MAIN}");
        let mut args = rung.args().to_vec();
        args.extend(["--grace", "500ms"]);
        // Longer timeouts in turn until every payload was running when it fired.
        let run = sandbox.run_bash_timed(&["3s", "10s", "30s"], &args, &script, "main");
        run.assert_status(124);
        assert_eq!(run.mechanism(), rung.expected_mechanism());
        assert_eq!(run.report()["exit"]["ending"], "timed_out");
        sandbox.assert_no_survivors(&names);
        sandbox.assert_namespace_empty();
        run.assert_cgroup_removed();
    }
}

#[test]
fn every_escape_dies_when_the_runner_gets_sigint() {
    let _serial = FORK_LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let (escapes, mut names) = all_escapes();
    for rung in Rung::ALL {
        let sandbox = Sandbox::new("sigint");
        let script = format!("{escapes}\n{MAIN}");
        let mut args = rung.args().to_vec();
        args.extend(["--grace", "500ms"]);
        names.push("main");
        let run = sandbox.run_bash_interrupted(&args, &script, &names, Signal::INT);
        names.pop();
        run.assert_status(130);
        assert_eq!(run.mechanism(), rung.expected_mechanism());
        assert_eq!(run.report()["exit"]["ending"], "interrupted");
        sandbox.assert_no_survivors(&names);
        sandbox.assert_no_survivors(&["main"]);
        sandbox.assert_namespace_empty();
        run.assert_cgroup_removed();
    }
}

/// Every leak gets TERM and its `--leak-grace` before any SIGKILL: each of several TERM-abiding
/// daemons sees the TERM and acts on it, and none is reported killed.
#[test]
fn every_leak_gets_term_and_its_grace_before_any_sigkill() {
    let sandbox = Sandbox::new("termall");
    let names = ["terma", "termb", "termc"];
    let daemons: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                r#"setsid perl "$CRT_DIR/sleeper.pl" {n} "$CRT_MARK" term </dev/null >/dev/null 2>&1 &"#
            )
        })
        .collect();
    let script = format!("{}\nready {}\nexit 0", daemons.join("\n"), names.join(" "));
    let run = sandbox.run_bash(&["--leak-grace", "5s"], &script);
    run.assert_status(0);
    for name in names {
        assert!(
            sandbox.scratch().join(format!("{name}.term")).exists(),
            "{name} never got the TERM:\n{}",
            run.stderr
        );
    }
    assert_eq!(
        run.report()["killed"],
        serde_json::json!([]),
        "a TERM-abiding leak was SIGKILLed"
    );
    sandbox.assert_no_survivors(&names);
    sandbox.assert_namespace_empty();
}

#[test]
fn leaks_are_named_on_stderr_and_in_the_report_and_on_leak_decides_the_status() {
    let sandbox = Sandbox::new("onleak");
    let leak = format!("{SETSID}\nready setsid");
    let cases = [
        ("warn", "exit 0", 0),
        ("fail", "exit 0", 123),
        ("fail", "exit 5", 5),
        ("warn", "exit 5", 5),
    ];
    for (policy, exit, expected) in cases {
        let _ = std::fs::remove_file(sandbox.scratch().join("setsid.pid"));
        let run = sandbox.run_bash(&["--on-leak", policy], &format!("{leak}\n{exit}"));
        run.assert_status(expected);
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains("leak") && l.contains(sandbox.marker()))
            .unwrap_or_else(|| {
                panic!(
                    "--on-leak {policy}: no leak line naming the command:\n{}",
                    run.stderr
                )
            });
        assert!(line.contains("sleeper.pl"), "{line}");
        let leaks = run.report()["leaks"].as_array().expect("report.leaks");
        assert!(
            leaks.iter().any(|l| l["command"]
                .as_str()
                .is_some_and(|c| c.contains(sandbox.marker()))
                && l["pid"].as_i64() == sandbox.pid_of("setsid").map(i64::from)),
            "--on-leak {policy}: the report does not name the leak: {leaks:?}"
        );
        // The daemon honours TERM, so it must have died of the TERM, not needed a SIGKILL.
        assert_eq!(
            run.report()["killed"],
            serde_json::json!([]),
            "--on-leak {policy}: a TERM-abiding leak was SIGKILLed"
        );
        sandbox.assert_no_survivors(&["setsid"]);
    }
    // No leak: nothing reported, and `fail` does not change a success.
    let run = sandbox.run(&["--on-leak", "fail"], &["true"]);
    run.assert_status(0);
    assert_eq!(run.report()["leaks"], serde_json::json!([]));
    assert!(!run.stderr.contains("leak"), "{}", run.stderr);
    sandbox.assert_namespace_empty();
}

#[test]
fn unprivileged_run_falls_back_to_session_and_still_kills_a_setsid_daemon() {
    if !common::root_or_skip("dropping to uid nobody") {
        return;
    }
    let sandbox = Sandbox::as_user("unpriv", common::NOBODY);
    let run = sandbox.run_bash(&[], &format!("{SETSID}\nready setsid\nexit 0"));
    run.assert_status(0);
    assert_eq!(run.mechanism(), "session");
    assert!(
        run.report()["containment"]["fallback_reason"].is_string(),
        "the fallback is explained"
    );
    let pid = sandbox.pid_of("setsid").unwrap();
    let owner = std::fs::metadata(sandbox.scratch().join("setsid.pid"))
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    assert_eq!(owner, common::NOBODY, "the daemon ran unprivileged");
    assert!(run.stderr.contains(&format!("pid {pid}")), "{}", run.stderr);
    sandbox.assert_no_survivors(&["setsid"]);
    sandbox.assert_namespace_empty();
    let state = std::fs::metadata(sandbox.state()).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&state), common::NOBODY);
}

/// The rungs the hard-exit tests cover: the cgroup and the session rung as root, and the session
/// rung unprivileged (uid 65534 through setpriv), each with its sandbox.
fn hard_rungs(tag: &str) -> Vec<(Sandbox, [&'static str; 2], &'static str)> {
    assert!(
        common::is_root(),
        "{tag}: needs root (the cgroup rung, and setpriv to another uid); CI runs as root"
    );
    vec![
        (Sandbox::new(tag), ["--contain", "cgroup"], "cgroup"),
        (Sandbox::new(tag), ["--contain", "session"], "session"),
        (
            Sandbox::as_user(tag, common::NOBODY),
            ["--contain", "auto"],
            "session",
        ),
    ]
}

#[test]
fn a_process_whose_leader_called_pthread_exit_dies_with_the_run_and_is_named() {
    for (sandbox, args, mechanism) in hard_rungs("threadexit") {
        let bin = common::compile_c(sandbox.scratch(), "threadexit", common::THREAD_EXIT_C);
        let script = format!(
            "\"{}\" threadexit \"$CRT_MARK\" &\nready threadexit\nexit 0",
            bin.display()
        );
        let run = sandbox.run_bash(&args, &script);
        run.assert_status(0);
        assert_eq!(run.mechanism(), mechanism);
        let pid = sandbox.pid_of("threadexit").expect("the payload ran");
        assert!(
            !common::is_alive_pid(pid),
            "{mechanism}: the thread group of pid {pid} survived the run"
        );
        assert!(
            run.stderr.contains(&format!("leak: pid {pid} ")),
            "{mechanism}: the thread group is not named a leak:\n{}",
            run.stderr
        );
        let leaks = run.report()["leaks"].as_array().unwrap().clone();
        assert!(
            leaks
                .iter()
                .any(|l| l["pid"].as_i64() == Some(i64::from(pid))),
            "{mechanism}: {leaks:?}"
        );
        sandbox.assert_no_survivors(&["threadexit"]);
        sandbox.assert_namespace_empty();
        run.assert_cgroup_removed();
    }
}

#[test]
fn a_fork_and_exit_chain_dies_with_the_run_on_every_rung() {
    let _serial = FORK_LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    for (sandbox, args, mechanism) in hard_rungs("chain") {
        let bin = common::compile_c(sandbox.scratch(), "chain", common::CHAIN_C);
        // Bounded twice over, as PID 1 here never reaps: 20,000 generations at most, and for
        // the unprivileged runner a process limit (root ignores RLIMIT_NPROC). The chain may
        // still be forking when the command exits, or may have ended in its last, pausing
        // generation: either way it must die. Which of its short-lived processes a listing
        // catches is chance, so the leak that must be named is a steady one started with it.
        let script = format!(
            "escapee anchor &\nprlimit --nproc=200 -- \"{}\" 20000 \"$CRT_MARK\" &\n\
             ready anchor chain\nexit 0",
            bin.display()
        );
        let run = sandbox.run_bash(&args, &script);
        run.assert_status(0);
        assert_eq!(run.mechanism(), mechanism);
        let anchor = sandbox.pid_of("anchor").expect("the anchor ran");
        assert!(
            run.stderr.contains(&format!("leak: pid {anchor} ")),
            "{mechanism}: the steady leak is not named:\n{}",
            run.stderr
        );
        sandbox.assert_no_survivors(&["anchor", "chain"]);
        sandbox.assert_namespace_empty();
        run.assert_cgroup_removed();
    }
}

#[test]
fn a_process_that_moves_to_the_parent_cgroup_is_still_killed_and_reported() {
    assert!(common::is_root(), "writing cgroup.procs needs root");
    let sandbox = Sandbox::new("cgescape");
    let mount = cleanroom::contain::cgroup_root().expect("the runner's cgroup (cgroup v2)");
    let script = format!(
        "setsid bash -c 'echo $$ > \"{}/cgroup.procs\" && exec perl \"$CRT_DIR/sleeper.pl\" escaped \"$CRT_MARK\"' </dev/null >/dev/null 2>&1 &\nready escaped\nexit 0",
        mount.display()
    );
    let run = sandbox.run_bash(&["--contain", "cgroup"], &script);
    run.assert_status(0);
    assert_eq!(run.mechanism(), "cgroup");
    let pid = sandbox.pid_of("escaped").expect("the escapee ran");
    assert!(
        run.stderr.contains(&format!("leak: pid {pid} ")),
        "the escapee is not reported:\n{}",
        run.stderr
    );
    sandbox.assert_no_survivors(&["escaped"]);
    sandbox.assert_namespace_empty();
    run.assert_cgroup_removed();
}

/// Run inside a private pid namespace (pid 1 is this script, so `ns_last_pid` hands the chosen
/// pid to the next fork and to nobody else): the command's main exits, leaving a leak that
/// ignores TERM; once the main is reaped, a foreign process takes its pid, hence its process
/// group number; then the runner either finishes its leak handling (`runner`) or is SIGKILLed
/// and leaves it to its watchdog (`watchdog`). `$@` is the `cleanroom --state-dir DIR run
/// OPTIONS` prefix.
const GROUP_REUSE: &str = r#"
mode=$1; shift
alive() { [ -e /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status; }
"$@" -- sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 300" </dev/null >/dev/null 2>&1 &
  echo $$ > "$CRT_DIR/main.tmp"; mv "$CRT_DIR/main.tmp" "$CRT_DIR/main"; sleep 0.2' & runner=$!
until [ -s "$CRT_DIR/main" ]; do alive $runner || { echo "setup: the run ended"; exit 2; }; sleep 0.01; done
G=$(cat "$CRT_DIR/main")
while [ -e /proc/$G ]; do sleep 0.01; done
echo $((G - 1)) > /proc/sys/kernel/ns_last_pid
setsid sleep 300 & foreign=$!
[ "$foreign" = "$G" ] || { echo "setup: the foreign process got pid $foreign, not $G"; exit 2; }
until [ "$(ps -o pgid= -p $G | tr -d ' ')" = "$G" ]; do sleep 0.01; done
if [ "$mode" = watchdog ]; then
  # The watchdog titles itself after the fork, when first scheduled.
  until wd=$(pgrep -f '^cleanroom watchdog '); do sleep 0.01; done
  kill -9 $runner
  while alive $wd; do sleep 0.02; done
  # The dead run's root, reclaimed from inside the namespace its recorded pid belongs to.
  "$1" "$2" "$3" gc >/dev/null || echo "gc failed"
else
  wait $runner
fi
alive $G && echo "foreign group survived" || echo "foreign group $G was killed"
"#;

#[test]
fn a_foreign_process_group_that_reuses_the_commands_number_is_never_signalled() {
    assert!(
        common::is_root(),
        "needs root (a pid namespace and ns_last_pid)"
    );
    for mode in ["runner", "watchdog"] {
        for rung in ["cgroup", "session"] {
            let sandbox = Sandbox::new("pgreuse");
            let inner = sandbox.command(&["run", "--contain", rung, "--leak-grace", "2s"]);
            let mut cmd = std::process::Command::new("unshare");
            cmd.args(["--pid", "--fork", "--mount-proc", "bash", "-c", GROUP_REUSE])
                .arg("group-reuse")
                .arg(mode)
                .arg(inner.get_program())
                .args(inner.get_args())
                .current_dir(sandbox.scratch())
                .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .stdin(Stdio::null());
            let out = cmd.output().expect("run unshare");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("foreign group survived"),
                "{mode}/{rung}: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            sandbox.assert_namespace_empty();
        }
    }
}

/// A v1 freezer cgroup for one test: `/sys/fs/cgroup/freezer/<name>`, or the freezer hierarchy
/// mounted privately under the target dir when the host has none mounted; thawed, emptied and
/// removed (and unmounted) on drop.
struct Freezer {
    dir: std::path::PathBuf,
    mount: Option<std::path::PathBuf>,
}

impl Freezer {
    fn new(name: &str) -> Freezer {
        let host = std::path::Path::new("/sys/fs/cgroup/freezer");
        let (base, mount) = if host.join("cgroup.procs").exists() {
            (host.to_path_buf(), None)
        } else {
            let at = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fz-{name}"));
            std::fs::create_dir_all(&at).unwrap();
            let ok = std::process::Command::new("mount")
                .args(["-t", "cgroup", "-o", "freezer", "freezer"])
                .arg(&at)
                .status()
                .unwrap()
                .success();
            assert!(
                ok,
                "cannot mount a v1 freezer hierarchy at {}",
                at.display()
            );
            (at.clone(), Some(at))
        };
        let dir = base.join(name);
        std::fs::create_dir(&dir).unwrap();
        Freezer { dir, mount }
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.thaw();
        for _ in 0..500 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            if procs.trim().is_empty() && std::fs::remove_dir(&self.dir).is_ok() {
                break;
            }
            for pid in procs.split_whitespace().filter_map(|p| p.parse().ok()) {
                // SAFETY: kill(2) on pids of this test's own freezer cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(at) = &self.mount {
            let _ = std::process::Command::new("umount").arg(at).status();
            let _ = std::fs::remove_dir(at);
        }
    }
}

/// A member frozen in a v1 freezer cgroup cannot be finished by SIGKILL: when the KILL loop hits
/// its bound the run never says "killed" or succeeds: it exits 125, the report lists the
/// survivor, and the root (and the run's cgroup, on that rung) is left for gc, which finishes
/// the job once the member is thawed.
#[test]
fn a_member_that_survives_sigkill_fails_the_run_and_leaves_its_root_for_gc() {
    assert!(common::is_root(), "needs root (a v1 freezer cgroup)");
    for rung in ["cgroup", "session"] {
        let sandbox = Sandbox::new("frozen");
        let freezer = Freezer::new(sandbox.marker());
        let script = format!(
            r#"sh -c 'echo $$ > "{fz}/cgroup.procs"; exec perl "$CRT_DIR/sleeper.pl" frozen "$CRT_MARK"' </dev/null >/dev/null 2>&1 &
ready frozen
echo FROZEN > "{fz}/freezer.state"
exit 0"#,
            fz = freezer.dir.display()
        );
        let run = sandbox.run_bash(&["--contain", rung, "--leak-grace", "100ms"], &script);
        run.assert_status(125);
        let pid = sandbox.pid_of("frozen").expect("the frozen member ran");
        let report = run.report();
        let survivors: Vec<i64> = report["survivors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["pid"].as_i64())
            .collect();
        assert_eq!(survivors, vec![i64::from(pid)], "{rung}: {report}");
        assert!(
            report["killed"]
                .as_array()
                .unwrap()
                .iter()
                .all(|k| k["pid"].as_i64() != Some(i64::from(pid))),
            "{rung}: a survivor reported as killed: {report}"
        );
        assert!(
            run.stderr.contains(&format!(
                "pid {pid} outlived the command and SURVIVED SIGKILL"
            )) && !run.stderr.contains("was killed"),
            "{rung}: {}",
            run.stderr
        );
        let entries = sandbox.namespace_entries();
        assert!(
            entries.iter().any(|e| e.starts_with("run-")),
            "{rung}: the root was not left for gc: {entries:?}"
        );
        let cgroup = report["containment"]["cgroup"]
            .as_str()
            .map(std::path::PathBuf::from);
        if let Some(cgroup) = &cgroup {
            assert!(cgroup.exists(), "{rung}: the populated cgroup was removed");
        }
        freezer.thaw();
        let gc = sandbox.command(&["gc"]).output().unwrap();
        assert!(gc.status.success(), "{rung}: {gc:?}");
        sandbox.assert_no_survivors(&["frozen"]);
        sandbox.assert_namespace_empty();
        if let Some(cgroup) = &cgroup {
            assert!(!cgroup.exists(), "{rung}: gc left {}", cgroup.display());
        }
    }
}
