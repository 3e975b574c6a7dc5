//! The death of the runner takes its run along, without gc: after a SIGKILL to `cleanroom run`
//! alone, every process of the run — the command, a `setsid` daemon, a background job that
//! ignores TERM, a process whose leader called `pthread_exit` — is dead once the run's watchdog
//! is done (it kills for a bounded time, then exits; the payloads would live 300 s), on the
//! cgroup rung, the session rung as root and the session rung unprivileged. The watchdog that
//! does it is named in the report. Processes are found by pid and marker in /proc; no clock
//! decides (how fast the watchdog acts is the bench's business).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Sandbox;

/// Everything the run starts; the command's main process is the last, `sleep`-like payload.
const SCRIPT: &str = r#"setsid perl "$CRT_DIR/sleeper.pl" daemon "$CRT_MARK" </dev/null >/dev/null 2>&1 &
escapee holder hold </dev/null >/dev/null 2>&1 &
"$CRT_DIR/threadexit" threadexit "$CRT_MARK" &
ready daemon holder threadexit
exec perl "$CRT_DIR/sleeper.pl" main "$CRT_MARK""#;

/// The payloads of [`SCRIPT`].
const NAMES: [&str; 4] = ["daemon", "holder", "threadexit", "main"];

/// Direct children of `pid` titled `cleanroom watchdog <run id>`.
fn watchdogs_of(pid: i32) -> Vec<i32> {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    text.split_whitespace()
        .filter_map(|c| c.parse::<i32>().ok())
        .filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .is_ok_and(|l| l.starts_with(b"cleanroom watchdog "))
        })
        .collect()
}

/// The watchdog of the runner `pid`, once it has taken its title (it writes it after the fork,
/// when it is first scheduled; a hang guard of 60 s).
fn watchdog_of(pid: i32) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match watchdogs_of(pid)[..] {
            [watchdog] => return watchdog,
            [] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            ref found => panic!("runner {pid}: one watchdog expected, found {found:?}"),
        }
    }
}

/// The payloads `names` of `sandbox` and its marked processes still alive once `watchdog` has
/// exited (or as soon as none is): the watchdog kills for a bounded time and then exits, so
/// what is alive after it is a survivor. A hang guard of 60 s.
fn survivors_once_done(
    sandbox: &Sandbox,
    names: &[&str],
    watchdog: i32,
) -> (Vec<i32>, Vec<(i32, String)>) {
    let pids: Vec<i32> = names.iter().map(|n| sandbox.pid_of(n).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = !common::is_alive_pid(watchdog);
        let alive: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|&p| common::is_alive_pid(p))
            .collect();
        let marked = common::processes_with(sandbox.marker());
        if (alive.is_empty() && marked.is_empty()) || done || Instant::now() > deadline {
            break (alive, marked);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_sigkilled_runner_takes_every_process_of_its_run_along() {
    assert!(
        common::is_root(),
        "needs root (the cgroup rung, and setpriv to another uid); CI runs as root"
    );
    let rungs = [
        (Sandbox::new("death"), "cgroup"),
        (Sandbox::new("death"), "session"),
        (Sandbox::as_user("death", common::NOBODY), "auto"),
    ];
    for (sandbox, contain) in rungs {
        common::compile_c(sandbox.scratch(), "threadexit", common::THREAD_EXIT_C);
        let (mut cmd, _) = sandbox.bash_command(&["--contain", contain], SCRIPT);
        let mut runner = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if let Err(e) = sandbox.wait_ready(&NAMES, &runner) {
            sandbox.stop_runner(&mut runner);
            panic!("{contain}: {e}");
        }
        let watchdog = watchdog_of(runner.id() as i32);
        runner.kill().unwrap(); // SIGKILL to the runner alone
        runner.wait().unwrap();
        assert_eq!(
            survivors_once_done(&sandbox, &NAMES, watchdog),
            (vec![], vec![]),
            "{contain}: processes of the run outlived its runner and its watchdog"
        );
        // The watchdog is done too (within its own bound).
        let gone = Instant::now() + Duration::from_secs(60);
        while common::is_alive_pid(watchdog) && Instant::now() < gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !common::is_alive_pid(watchdog),
            "{contain}: the watchdog did not exit"
        );
        // The watchdog removed the emptied cgroup; gc reclaims the dead run's root.
        let entries = sandbox.namespace_entries();
        let run_id = entries
            .iter()
            .find_map(|e| e.strip_prefix("run-"))
            .unwrap_or_else(|| panic!("{contain}: no root left: {entries:?}"));
        let cgroup = cleanroom::contain::cgroup_root()
            .unwrap()
            .join(format!("cleanroom-{run_id}"));
        assert!(!cgroup.exists(), "{contain}: {} is left", cgroup.display());
        let gc = sandbox.command(&["gc"]).output().unwrap();
        assert!(gc.status.success(), "{contain}: {gc:?}");
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn the_report_says_a_watchdog_guarded_the_run() {
    let sandbox = Sandbox::new("watchdog");
    for contain in ["cgroup", "session"] {
        let run = sandbox.run(&["--contain", contain], &["true"]);
        run.assert_status(0);
        assert_eq!(
            run.report()["containment"]["watchdog"],
            true,
            "{contain}: {}",
            run.report()
        );
    }
}

/// The command stops or kills its own watchdog (same uid): the run says so on stderr and in the
/// report (`containment.watchdog_lost`), the watchdog's pid stays held (a killed watchdog is a
/// zombie until the run ends, so no process of the run can take its number), and no watchdog is
/// left behind, stopped or not.
#[test]
fn a_watchdog_the_command_stops_or_kills_is_reported_held_and_never_left_behind() {
    let sandbox = Sandbox::new("wdlost");
    for (signal, why) in [("STOP", "stopped"), ("KILL", "killed")] {
        for contain in ["cgroup", "session"] {
            // The watchdog writes its title after the fork, when it is scheduled: on a busy
            // machine the command can start first.
            let script = format!(
                r#"for i in $(seq 1 1000); do
  wd=$(pgrep -f "^cleanroom watchdog $CLEANROOM_RUN_ID") && break
  sleep 0.01
done
echo $wd > "$CRT_DIR/watchdog"
kill -{signal} $wd
sleep 0.3
[ -e /proc/$wd ] || {{ echo "watchdog pid $wd was released" >&2; exit 3; }}"#
            );
            let run = sandbox.run_bash(&["--contain", contain], &script);
            run.assert_status(0);
            let report = run.report();
            assert_eq!(
                report["containment"]["watchdog_lost"], why,
                "{signal}/{contain}: {report}"
            );
            assert!(
                run.stderr.contains("watchdog (pid ") && run.stderr.contains(why),
                "{signal}/{contain}: {}",
                run.stderr
            );
            let pid: i32 = std::fs::read_to_string(sandbox.scratch().join("watchdog"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(
                !std::path::Path::new(&format!("/proc/{pid}")).exists(),
                "{signal}/{contain}: the watchdog {pid} is left: {:?}",
                common::live_cmdline(pid)
            );
            sandbox.assert_namespace_empty();
        }
    }
}

/// With `--protect off` the command has a `setsid` daemon reopen every pipe and socket of the
/// runner through `/proc/<runner>/fd` (the runner's end of its watchdog's channel among them)
/// and hold them: the runner's death must still
/// reach the watchdog (a socket cannot be reopened through /proc, and the watchdog watches the
/// runner through a pidfd as well), which kills the daemon.
#[test]
fn a_command_holding_the_runners_end_of_the_watchdog_channel_does_not_blind_it() {
    for contain in ["cgroup", "session"] {
        // A sandbox per rung: the first rung's ready files would let the second's wait return
        // before its runner had even made its root.
        let sandbox = Sandbox::new("hijack");
        let script = r#"setsid bash -c 'n=10
for f in /proc/$1/fd/*; do
  case "$(readlink $f)" in pipe:*|socket:*) eval "exec $n>\"\$f\""; n=$((n + 1));; esac
done
exec perl "$CRT_DIR/sleeper.pl" victim "$CRT_MARK"' _ $PPID </dev/null >/dev/null 2>&1 &
ready victim
exec perl "$CRT_DIR/sleeper.pl" main "$CRT_MARK""#;
        let (mut cmd, _) =
            sandbox.bash_command(&["--contain", contain, "--protect", "off"], script);
        let mut runner = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if let Err(e) = sandbox.wait_ready(&["victim", "main"], &runner) {
            sandbox.stop_runner(&mut runner);
            panic!("{contain}: {e}");
        }
        let watchdog = watchdog_of(runner.id() as i32);
        runner.kill().unwrap();
        runner.wait().unwrap();
        let (alive, _) = survivors_once_done(&sandbox, &["victim", "main"], watchdog);
        for &p in &alive {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(p).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        assert!(
            alive.is_empty(),
            "{contain}: alive after the runner's death and its watchdog's: {alive:?}"
        );
        let gc = sandbox.command(&["gc"]).output().unwrap();
        assert!(gc.status.success(), "{contain}: {gc:?}");
        sandbox.assert_namespace_empty();
    }
}

/// On the session rung the watchdog kills the command's process group: a job of that group that
/// dropped `CLEANROOM_RUN_ID` (so the tagged sweep misses it) dies with the runner too.
#[test]
fn an_untagged_job_of_the_commands_group_dies_with_a_sigkilled_runner() {
    let sandbox = Sandbox::new("untagged");
    let script = r#"env -u CLEANROOM_RUN_ID perl "$CRT_DIR/sleeper.pl" untagged "$CRT_MARK" hold </dev/null >/dev/null 2>&1 &
ready untagged
exec perl "$CRT_DIR/sleeper.pl" main "$CRT_MARK""#;
    let (mut cmd, _) = sandbox.bash_command(&["--contain", "session"], script);
    let mut runner = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Err(e) = sandbox.wait_ready(&["untagged", "main"], &runner) {
        sandbox.stop_runner(&mut runner);
        panic!("{e}");
    }
    let watchdog = watchdog_of(runner.id() as i32);
    runner.kill().unwrap(); // SIGKILL to the runner alone
    runner.wait().unwrap();
    assert_eq!(
        survivors_once_done(&sandbox, &["untagged", "main"], watchdog),
        (vec![], vec![]),
        "the command's group outlived its runner and its watchdog"
    );
    let gc = sandbox.command(&["gc"]).output().unwrap();
    assert!(gc.status.success(), "{gc:?}");
    sandbox.assert_namespace_empty();
}
