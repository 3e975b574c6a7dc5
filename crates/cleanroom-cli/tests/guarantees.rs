//! Documented guarantees of `cleanroom run` that no other test file covered, each over the real
//! binary and each failing when its guarantee breaks (docs/guarantees.md maps every guarantee to
//! its tests):
//! - SIGHUP and SIGQUIT to the runner are forwarded to the command, the run ends with 128+N and
//!   nothing it started, nor its root, is left (docs/containment.md, docs/exit-status.md);
//! - terminal handoff: a runner that is the terminal's foreground job makes the command's own
//!   process group the foreground group (the command reads the terminal), and takes the terminal
//!   back afterwards (docs/containment.md);
//! - the cgroup rung is refused when the runner's own cgroup has controllers enabled
//!   (docs/containment.md);
//! - the report carries its documented fields with their documented types (docs/report.md).
//!
//! Root-only cases record a counted skip when not root (CI runs as root, where a skip fails).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{exists, root_or_skip, Sandbox, BIN};
use rustix::process::Signal;
use serde_json::Value;

/// A command that records the signal it got (`got-SIG`) and exits 0 on it, with a background
/// payload that must die with the run.
fn trapping_script(signal: &str) -> String {
    format!(
        r#"trap 'echo > "$CRT_DIR/got-{signal}"; exit 0' {signal}
escapee child &
ready child
mark_ready main
while :; do sleep 0.05; done"#
    )
}

#[test]
fn hup_and_quit_to_the_runner_are_forwarded_and_the_run_ends_with_nothing_left() {
    for (name, signal, number) in [
        ("HUP", Signal::HUP, libc::SIGHUP),
        ("QUIT", Signal::QUIT, libc::SIGQUIT),
    ] {
        let sandbox = Sandbox::new(&format!("fwd-{name}"));
        let run = sandbox.run_bash_interrupted(
            &["--grace", "30s"],
            &trapping_script(name),
            &["main", "child"],
            signal,
        );
        run.assert_status(128 + number);
        assert!(
            exists(&sandbox.scratch().join(format!("got-{name}"))),
            "SIG{name} never reached the command: {}",
            run.stderr
        );
        let exit = &run.report()["exit"];
        assert_eq!(exit["ending"], "interrupted", "{exit}");
        assert_eq!(exit["interrupt_signal"], number, "{exit}");
        assert_eq!(exit["code"], 0, "{exit}");
        sandbox.assert_no_survivors(&["main", "child"]);
        run.assert_cgroup_removed();
        assert!(!exists(&run.root()), "the root outlived the run");
        sandbox.assert_namespace_empty();
    }
}

/// What the command run on a terminal writes to `$CRT_DIR/fg`: its pid, its process group, the
/// terminal's foreground group, and the line it read from the terminal; the shell that started
/// the runner then writes its own group and the foreground group to `$CRT_DIR/after`.
const ON_A_TERMINAL: &str = r#"read -r line
read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/self/stat
echo "$$ $pgrp $tpgid $line" > "$CRT_DIR/fg""#;

/// `sh -c shell_line` started by script(1) on a new pty (the shell's group in its foreground),
/// from the sandbox's scratch dir with `CRT_DIR` set; stdin (what is typed), stdout (what the
/// terminal shows) and stderr piped.
fn on_a_pty(sandbox: &Sandbox, shell_line: &str) -> std::process::Child {
    let mut cmd = Command::new("script");
    cmd.args(["-qec", shell_line, "/dev/null"])
        .current_dir(sandbox.scratch())
        .env("CRT_DIR", sandbox.scratch())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::without_cleanroom_settings(&mut cmd);
    cmd.spawn().expect("spawn script(1)")
}

#[test]
fn the_command_gets_the_terminals_foreground_and_the_runner_takes_it_back() {
    let sandbox = Sandbox::new("foreground");
    let report = sandbox.scratch().join("report.json");
    // `script` gives the shell a pty as its controlling terminal, with the shell's group in the
    // foreground; the non-interactive shell runs cleanroom in that group. --timeout bounds a
    // command left in a background group (reading the terminal would stop it).
    let runner = format!(
        "'{BIN}' --state-dir '{}' run --timeout 20 --report '{}' -- sh -c '{ON_A_TERMINAL}'; \
         read -r _ _ _ _ pgrp _ _ tpgid _ < /proc/$$/stat; echo \"$pgrp $tpgid\" > \"$CRT_DIR/after\"",
        sandbox.state().display(),
        report.display(),
    );
    let mut child = on_a_pty(&sandbox, &runner);
    // Kept open until the run is over: at EOF script(1) would end the session early.
    let mut terminal_input = child.stdin.take().unwrap();
    terminal_input
        .write_all(b"typed-at-the-terminal\n")
        .unwrap();
    let out = sandbox.wait_for_runner(child, Duration::from_secs(60));
    drop(terminal_input);
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{terminal}");
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(report["exit"]["ending"], "exited", "{terminal}");
    let fg = std::fs::read_to_string(sandbox.scratch().join("fg"))
        .unwrap_or_else(|e| panic!("the command never read the terminal ({e}): {terminal}"));
    let fields: Vec<&str> = fg.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{fg}");
    let (shell, group, foreground, line) = (fields[0], fields[1], fields[2], fields[3]);
    assert_eq!(
        group, shell,
        "the command leads its own process group: {fg}"
    );
    assert_eq!(
        foreground, group,
        "the command's group is the foreground group: {fg}"
    );
    assert_eq!(line, "typed-at-the-terminal");
    let after = std::fs::read_to_string(sandbox.scratch().join("after")).unwrap();
    let after: Vec<&str> = after.split_whitespace().collect();
    assert_eq!(
        after.first(),
        after.get(1),
        "the terminal went back to the runner's group: {after:?}"
    );
    assert!(!after.is_empty());
    sandbox.assert_namespace_empty();
}

/// A runner started by a shell on a terminal (`script` gives it a pty whose foreground is the
/// shell's group), with `-v` on, whose terminal output arrives chunk by chunk; the test types
/// on the terminal through `type_keys`.
struct OnATerminal {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
    report: PathBuf,
}

impl OnATerminal {
    /// `cleanroom -v run RUN_ARGS --report FILE -- sh -c SCRIPT` on a terminal.
    fn start(sandbox: &Sandbox, run_args: &str, script: &str) -> OnATerminal {
        let report = sandbox.scratch().join("report.json");
        let runner = format!(
            "'{BIN}' -v --state-dir '{}' run {run_args} --report '{}' -- sh -c '{script}'",
            sandbox.state().display(),
            report.display(),
        );
        let mut child = on_a_pty(sandbox, &runner);
        let input = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut stdout, &mut chunk) {
                if n == 0 || tx.send(chunk[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        OnATerminal {
            child,
            input,
            output,
            seen: String::new(),
            report,
        }
    }

    /// Waits (hang guard: 60 s) until the terminal showed `text`.
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.seen.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("the terminal never showed {text:?}:\n{}", self.seen),
            }
        }
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.input.write_all(keys).unwrap();
        self.input.flush().unwrap();
    }

    /// Waits (hang guard: 60 s) for the session to end; the run's report.
    fn finish(mut self, sandbox: &Sandbox) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                panic!("the run did not end:\n{}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while let Ok(chunk) = self.output.recv_timeout(Duration::from_secs(5)) {
            self.seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        let report = std::fs::read(&self.report)
            .unwrap_or_else(|e| panic!("no report ({e}):\n{}", self.seen));
        sandbox.assert_namespace_empty();
        serde_json::from_slice(&report).unwrap()
    }
}

impl Drop for OnATerminal {
    /// A test that failed half-way leaves nothing running: script(1) and everything under it
    /// (the runner's watchdog then ends the run) are SIGKILLed.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let mut tree = vec![self.child.id() as i32];
        let mut i = 0;
        while i < tree.len() {
            let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", tree[i]))
                .unwrap_or_default();
            tree.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
            i += 1;
        }
        for pid in tree.into_iter().rev() {
            // SAFETY: kill(2) with a pid read from /proc; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}

/// Waits until the command whose pid is in `$CRT_DIR/main.pid` has the runner's key relay in
/// its process group (the relay joins it right after the command started).
fn wait_for_the_relay(sandbox: &Sandbox) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let main = sandbox.pid_of("main").unwrap_or(0);
        let relay = std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let group = stat.rsplit_once(')').and_then(|(_, rest)| {
                rest.split_whitespace()
                    .nth(2)
                    .map(|g| g == main.to_string())
            });
            stat.contains("(cr-keys)") && group == Some(true)
        });
        if relay {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no key relay in the command's group"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The command writes its pid, then loops (each `sleep` inherits its disposition of SIGINT)
/// until `$CRT_DIR/stop` exists.
const LOOP_UNTIL_STOPPED: &str = r#"echo $$ > "$CRT_DIR/main.pid.tmp"; mv "$CRT_DIR/main.pid.tmp" "$CRT_DIR/main.pid"; while [ ! -e "$CRT_DIR/stop" ]; do sleep 0.05; done"#;

#[test]
fn ctrl_c_at_the_terminal_stops_a_command_that_ignores_it_and_twice_kills_it() {
    let sandbox = Sandbox::new("ctrl-c");
    // --grace 300: the run ends within the hang guard only if the second Ctrl-C kills at once.
    let script = format!("trap \"\" INT; {LOOP_UNTIL_STOPPED}");
    let mut terminal = OnATerminal::start(&sandbox, "--grace 300", &script);
    wait_for_the_relay(&sandbox);
    terminal.type_keys(b"\x03");
    terminal.wait_for("forwarding signal 2 to the run");
    terminal.type_keys(b"\x03");
    terminal.wait_for("second signal: killing every process of the run");
    let report = terminal.finish(&sandbox);
    assert_eq!(report["exit"]["ending"], "interrupted", "{report}");
    assert_eq!(report["exit"]["interrupt_signal"], 2, "{report}");
    assert_eq!(report["exit"]["status"], 128 + 9, "{report}");
    assert_eq!(
        report["leaks"],
        serde_json::json!([]),
        "the relay is no leak"
    );
    sandbox.assert_no_survivors(&["main"]);
}

#[test]
fn ctrl_c_at_the_terminal_is_left_to_a_command_that_handles_it() {
    let sandbox = Sandbox::new("ctrl-c-handled");
    // It ends with `exit 0`: the loop's status is that of the last `sleep`, which the Ctrl-C
    // killed when the stop file is seen right after the trap.
    let script =
        format!("trap \"echo > \\\"\\$CRT_DIR/caught\\\"\" INT; {LOOP_UNTIL_STOPPED}; exit 0");
    let mut terminal = OnATerminal::start(&sandbox, "--grace 300", &script);
    wait_for_the_relay(&sandbox);
    terminal.type_keys(b"\x03");
    terminal.wait_for("signal 2 typed at the terminal: the command handles it");
    std::fs::write(sandbox.scratch().join("stop"), "").unwrap();
    let report = terminal.finish(&sandbox);
    assert!(
        exists(&sandbox.scratch().join("caught")),
        "the command never saw the Ctrl-C"
    );
    assert_eq!(report["exit"]["ending"], "exited", "{report}");
    assert_eq!(report["exit"]["status"], 0, "{report}");
    assert_eq!(
        report["leaks"],
        serde_json::json!([]),
        "the relay is no leak"
    );
}

/// The cgroup v2 directory of this process (mount point from mountinfo + `0::` path).
fn own_cgroup() -> PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mountinfo
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split(' ').nth(4))
        .expect("a cgroup2 mount");
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let relative = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 membership");
    Path::new(mount).join(relative.trim_start_matches('/'))
}

/// A cgroup made for a test, removed (with any leaf a run left in it) when dropped.
struct TestCgroup(PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(entries) = std::fs::read_dir(&self.0) {
                for e in entries.flatten().filter(|e| e.path().is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            if std::fs::remove_dir(&self.0).is_ok() || Instant::now() > deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `cleanroom run [args] -- true`, started from inside `cgroup` and in a private mount namespace
/// where `controllers`, when given, is bind-mounted over the cgroup's `cgroup.subtree_control`.
fn run_in_cgroup(
    sandbox: &Sandbox,
    cgroup: &Path,
    controllers: Option<&Path>,
    args: &str,
) -> common::Run {
    let control = cgroup.join("cgroup.subtree_control");
    let mount = controllers
        .map(|file| {
            format!(
                "mount --bind '{}' '{}' && ",
                file.display(),
                control.display()
            )
        })
        .unwrap_or_default();
    let report = sandbox
        .scratch()
        .join(format!("report-{}.json", common::unique_marker("cg")));
    let script = format!(
        "{mount}echo $$ > '{}/cgroup.procs' && exec '{BIN}' --state-dir '{}' run {args} --report '{}' -- true",
        cgroup.display(),
        sandbox.state().display(),
        report.display()
    );
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .current_dir(sandbox.scratch())
        .stdin(Stdio::null());
    common::without_cleanroom_settings(&mut unshare);
    sandbox.finish(unshare, &report)
}

#[test]
fn the_cgroup_rung_is_refused_when_the_runners_cgroup_has_controllers() {
    if !root_or_skip("creating a cgroup for the runner") {
        return;
    }
    // The kernel never lets a non-root cgroup have both processes and controllers (the
    // no-internal-process rule; this machine's cgroup2 offers only hugetlb, not threaded), so
    // the state a runner can meet under another manager's cgroup is shown to it through a bind
    // mount of `cgroup.subtree_control`, in a mount namespace of its own.
    let sandbox = Sandbox::new("cgroup-controllers");
    let cgroup = TestCgroup(own_cgroup().join(common::unique_marker("cgroup-controllers")));
    std::fs::create_dir(&cgroup.0).expect("create a test cgroup");
    let controllers = sandbox.scratch().join("subtree_control");
    std::fs::write(&controllers, "hugetlb\n").unwrap();

    // Without controllers, the same start uses the cgroup rung: only they make the difference.
    let plain = run_in_cgroup(&sandbox, &cgroup.0, None, "");
    plain.assert_status(0);
    assert_eq!(plain.mechanism(), "cgroup", "{}", plain.stderr);
    let leaf = plain.report()["containment"]["cgroup"].as_str().unwrap();
    assert!(leaf.starts_with(cgroup.0.to_str().unwrap()), "{leaf}");

    let auto = run_in_cgroup(&sandbox, &cgroup.0, Some(&controllers), "");
    auto.assert_status(0);
    assert_eq!(auto.mechanism(), "session", "{}", auto.stderr);
    let reason = auto.report()["containment"]["fallback_reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("controllers enabled (hugetlb)"), "{reason}");
    assert_eq!(auto.report()["containment"]["cgroup"], Value::Null);

    let forced = run_in_cgroup(&sandbox, &cgroup.0, Some(&controllers), "--contain cgroup");
    forced.assert_status(125);
    assert!(
        forced.stderr.contains("controllers enabled"),
        "{}",
        forced.stderr
    );
    sandbox.assert_namespace_empty();
}

/// Asserts the field at `pointer` has the JSON type `kind` (`"int"`, `"string"`, `"bool"`,
/// `"array"`, `"object"`, `"null"`, or `"int|null"`-style alternatives; `absent` allows the
/// field to be left out, as `cleanup.reason` is when there is none).
#[track_caller]
fn assert_kind(report: &Value, pointer: &str, kind: &str) {
    let Some(value) = report.pointer(pointer) else {
        assert!(kind.contains("absent"), "report has no {pointer}: {report}");
        return;
    };
    let is = |k: &str| match k {
        "int" => value.is_u64() || value.is_i64(),
        "string" => value.is_string(),
        "bool" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        "absent" => false,
        other => panic!("unknown kind {other}"),
    };
    assert!(kind.split('|').any(is), "{pointer} is {value}, not {kind}");
}

/// Every field docs/report.md lists, with its type.
const REPORT_FIELDS: &[(&str, &str)] = &[
    ("/schema", "string"),
    ("/version", "int"),
    ("/run_id", "string"),
    ("/root", "string"),
    ("/command", "array"),
    ("/started_unix_ms", "int"),
    ("/duration_ms", "int"),
    ("/exit/status", "int"),
    ("/exit/code", "int|null"),
    ("/exit/signal", "int|null"),
    ("/exit/ending", "string"),
    ("/exit/interrupt_signal", "int|null"),
    ("/containment/mechanism", "string"),
    ("/containment/fallback_reason", "string|null"),
    ("/containment/cgroup", "string|null"),
    ("/protection/mode", "string"),
    ("/protection/enforcement", "string"),
    ("/protection/reason", "string|null"),
    ("/protection/landlock_abi", "int|null"),
    ("/protection/rules", "int"),
    ("/protection/homes", "array"),
    ("/protection/read_only", "array"),
    ("/protection/writable", "array"),
    ("/protection/policy", "array"),
    ("/protection/no_new_entries_in", "array"),
    ("/protection/dev_shm/kind", "string"),
    ("/protection/mount_namespace", "string|null"),
    ("/protection/net_isolation", "string|null"),
    ("/protection/dev_shm/reason", "string|null|absent"),
    ("/protection/tmp/kind", "string"),
    ("/protection/tmp/dirs", "array"),
    ("/protection/tmp/shared", "array"),
    ("/protection/tmp/sockets", "array"),
    ("/protection/ipc/kind", "string"),
    ("/tmp", "array"),
    ("/protection/net", "string"),
    ("/protection/fresh_sysfs", "bool"),
    ("/protection/warnings", "array"),
    ("/leaks", "array"),
    ("/killed", "array"),
    ("/cleanup/path", "string"),
    ("/cleanup/status", "string"),
    ("/cleanup/reason", "string|null|absent"),
    ("/cleanup/attempts", "int"),
    ("/cleanup/stats/files", "int"),
    ("/cleanup/stats/dirs", "int"),
    ("/cleanup/stats/mounts", "array"),
    ("/cleanup/stats/errors", "array"),
    ("/cleanup/elapsed_ms", "int"),
    ("/kept_root", "bool"),
    ("/gc/format", "string"),
    ("/gc/scanned", "int"),
    ("/gc/removed", "int"),
    ("/gc/removed_names", "array"),
    ("/gc/skipped_live", "int"),
    ("/gc/kept", "int"),
    ("/gc/foreign", "int"),
    ("/gc/unproven", "array"),
    ("/gc/locked", "array"),
    ("/gc/stuck_skipped", "array"),
    ("/gc/errors", "array"),
    ("/gc/truncated", "bool"),
    ("/gc/bytes_freed", "int"),
    ("/gc/killed", "array"),
    ("/gc/locks_removed", "array"),
    ("/env/toolchain", "array"),
    ("/env/homes", "array"),
    ("/env/dropped", "array"),
];

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn the_report_carries_every_documented_field_with_what_happened() {
    let sandbox = Sandbox::new("report-fields");
    let before = unix_ms();
    // A leak that ignores TERM (so it needs KILL), files in the root, and the command's code.
    let run = sandbox.run_bash(
        &["--leak-grace", "0"],
        "escapee held hold &\nready held\necho data > \"$HOME/file\"\nexit 7",
    );
    let after = unix_ms();
    run.assert_status(7);
    let report = run.report();
    for (pointer, kind) in REPORT_FIELDS {
        assert_kind(report, pointer, kind);
    }
    assert_eq!(report["schema"], "cleanroom-run-report");
    assert_eq!(report["version"], 1);
    assert_eq!(report["gc"]["format"], "cleanroom-gc");
    let run_id = report["run_id"].as_str().unwrap();
    assert!(run.root().ends_with(format!("run-{run_id}")));
    assert_eq!(report["command"][0], "bash");
    let started = report["started_unix_ms"].as_u64().unwrap();
    assert!((before..=after).contains(&started), "{started}");
    assert!(report["duration_ms"].as_u64().unwrap() <= after - before);
    let exit = &report["exit"];
    assert_eq!(
        (&exit["status"], &exit["code"], &exit["signal"]),
        (&Value::from(7), &Value::from(7), &Value::Null)
    );
    assert_eq!(exit["ending"], "exited");
    assert_eq!(exit["interrupt_signal"], Value::Null);
    assert_eq!(
        report["containment"]["mechanism"],
        common::Rung::Default.expected_mechanism()
    );
    let held = sandbox.pid_of("held").expect("the payload ran");
    for list in ["leaks", "killed"] {
        let entries = report[list].as_array().unwrap();
        let entry = entries
            .iter()
            .find(|e| e["pid"] == held)
            .unwrap_or_else(|| panic!("{list} misses pid {held}: {entries:?}"));
        assert!(entry["start_time"].as_u64().unwrap() > 0, "{entry}");
        assert!(
            entry["command"]
                .as_str()
                .unwrap()
                .contains(sandbox.marker()),
            "{entry}"
        );
    }
    assert_kind(report, "/leaks/0/found_after_ms", "int");
    let cleanup = &report["cleanup"];
    assert_eq!(cleanup["status"], "removed", "{cleanup}");
    assert_eq!(cleanup["attempts"], 1, "{cleanup}");
    // The marker is removed last and outside the walk's counts: one file is the command's, and
    // one per overlay of a private directory its volatile mark (`work/incompat/volatile/dirty`).
    let overlays = report["protection"]["tmp"]["dirs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|dir| dir["mechanism"] == "overlay")
        .count();
    assert_eq!(cleanup["stats"]["files"], 1 + overlays, "{cleanup}");
    assert!(cleanup["stats"]["dirs"].as_u64().unwrap() >= 1, "{cleanup}");
    assert_eq!(
        cleanup["stats"]["errors"],
        serde_json::json!([]),
        "{cleanup}"
    );
    let quarantine = format!(".trash-run-{run_id}");
    assert!(
        cleanup["path"].as_str().unwrap().ends_with(&quarantine),
        "{cleanup}"
    );
    assert_eq!(report["kept_root"], false);
    assert!(!exists(&run.root()));

    // A command killed by a signal, and a timeout.
    let killed = sandbox.run(&[], &["sh", "-c", "kill -KILL $$"]);
    killed.assert_status(137);
    let exit = &killed.report()["exit"];
    assert_eq!(
        (&exit["code"], &exit["signal"]),
        (&Value::Null, &Value::from(9))
    );
    let timed = sandbox.run(&["--timeout", "1", "--grace", "0"], &["sleep", "60"]);
    timed.assert_status(124);
    assert_eq!(timed.report()["exit"]["ending"], "timed_out");
    sandbox.assert_no_survivors(&["held"]);
    sandbox.assert_namespace_empty();
}
