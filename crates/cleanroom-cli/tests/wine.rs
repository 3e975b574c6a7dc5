//! The Windows guarantees, checked over the real CLI (this crate's `cleanroom.exe`, built for
//! x86_64-pc-windows-gnu) and the test payload (examples/payload.rs): under Wine by
//! scripts/windows.sh, or on Windows itself (`cargo build -p cleanroom-cli --example payload`,
//! then `cargo test -p cleanroom-cli --test wine -- --test-threads=1`).
//!
//! The CLI is CLEANROOM_EXE (else the binary cargo built with this test), the payload
//! CLEANROOM_PAYLOAD, and CLEANROOM_TEST_SCRATCH a directory outside C: for the outputs and
//! reports (a test that cannot find them fails). Tests run one at a time (`--test-threads=1`):
//! the first one snapshots the whole C: drive, and every test leaves nothing behind. The CLI
//! gets none of the test's own CLEANROOM_* variables, so only its command line configures it.
#![cfg(windows)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use windows_sys::Win32::Foundation::{CloseHandle, WAIT_OBJECT_0};
use windows_sys::Win32::System::Threading::{
    OpenProcess, WaitForSingleObject, PROCESS_SYNCHRONIZE,
};

fn program(var: &str) -> PathBuf {
    let path = PathBuf::from(
        std::env::var_os(var).unwrap_or_else(|| panic!("{var} must name the program to test")),
    );
    assert!(path.is_file(), "{var}={} is not a file", path.display());
    path
}

fn scratch_dir() -> PathBuf {
    let var = "CLEANROOM_TEST_SCRATCH";
    let path = PathBuf::from(
        std::env::var_os(var).unwrap_or_else(|| panic!("{var} must name a scratch directory")),
    );
    assert!(path.is_dir(), "{var}={} is not a directory", path.display());
    path
}

/// A path of the scratch dir no other call of this test binary gets.
fn scratch_file(suffix: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let n = CALLS.fetch_add(1, Ordering::SeqCst);
    scratch_dir().join(format!("{n}.{suffix}"))
}

/// Runs `command` to its end with stdout and stderr in files of the scratch dir, not pipes: on
/// Windows a process a broken run leaves behind may inherit a pipe and hold it open, which must
/// fail the test, not hang it.
fn finish(command: &mut Command) -> Output {
    let (out, err) = (scratch_file("out"), scratch_file("err"));
    let status = command
        .stdout(std::fs::File::create(&out).expect("create the stdout file"))
        .stderr(std::fs::File::create(&err).expect("create the stderr file"))
        .status()
        .expect("start cleanroom.exe");
    let read = |path: &Path| std::fs::read(path).expect("read an output file");
    let output = Output {
        status,
        stdout: read(&out),
        stderr: read(&err),
    };
    // A leftover process may still hold them; they go with the scratch dir then.
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&err);
    output
}

/// The real CLI, configured by its command line only.
fn cleanroom() -> Command {
    let exe = match std::env::var_os("CLEANROOM_EXE") {
        Some(_) => program("CLEANROOM_EXE"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_cleanroom")),
    };
    let mut command = Command::new(exe);
    for (name, _) in std::env::vars_os() {
        if name
            .to_string_lossy()
            .to_ascii_uppercase()
            .starts_with("CLEANROOM_")
        {
            command.env_remove(name);
        }
    }
    command
}

fn payload() -> PathBuf {
    program("CLEANROOM_PAYLOAD")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A run of the payload and the report the CLI wrote of it (`--report`).
struct Ran {
    output: Output,
    report: Value,
}

/// `cleanroom run --report FILE [options...] -- PAYLOAD args...`.
fn run_with(options: &[&str], args: &[&str]) -> Ran {
    run_env(options, args, &[])
}

/// [`run_with`] with `vars` set in the CLI's environment.
fn run_env(options: &[&str], args: &[&str], vars: &[(&str, &Path)]) -> Ran {
    let report_file = scratch_file("report.json");
    let mut command = cleanroom();
    for (var, value) in vars {
        command.env(var, value);
    }
    let output = finish(
        command
            .arg("run")
            .arg("--report")
            .arg(&report_file)
            .args(options)
            .arg("--")
            .arg(payload())
            .args(args),
    );
    eprintln!(
        "cleanroom run {options:?} -- payload {args:?}: {:?}\n--- stderr\n{}",
        output.status,
        stderr(&output)
    );
    let text = std::fs::read_to_string(&report_file)
        .unwrap_or_else(|e| panic!("no report {}: {e}", report_file.display()));
    std::fs::remove_file(&report_file).expect("remove the report");
    let report = serde_json::from_str(&text).unwrap_or_else(|e| panic!("report: {e}: {text}"));
    Ran { output, report }
}

fn run(args: &[&str]) -> Ran {
    run_with(&[], args)
}

fn stdout_value(output: &Output, key: &str) -> String {
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the payload printed no {key}=…:\n{text}"))
        .trim()
        .to_string()
}

/// The pids of the report's leaks.
fn leaked_pids(report: &Value) -> Vec<u64> {
    report["leaks"]
        .as_array()
        .expect("leaks")
        .iter()
        .map(|leak| leak["pid"].as_u64().expect("a leak's pid"))
        .collect()
}

/// Every path on C: (Wine's prefix), directories and files.
fn snapshot() -> BTreeSet<PathBuf> {
    fn walk(dir: &Path, into: &mut BTreeSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            into.insert(path.clone());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&path, into);
            }
        }
    }
    let mut all = BTreeSet::new();
    walk(Path::new(r"C:\"), &mut all);
    all
}

/// Whether `pid` names a live process (OpenProcess fails for a reaped pid; a process object
/// kept by a handle somewhere is signaled once it exited).
fn alive(pid: u32) -> bool {
    // SAFETY: no pointers; the handle is closed below.
    let handle = unsafe { OpenProcess(PROCESS_SYNCHRONIZE, 0, pid) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` is open; a zero timeout only polls; closed once.
    unsafe {
        let exited = WaitForSingleObject(handle, 0) == WAIT_OBJECT_0;
        CloseHandle(handle);
        !exited
    }
}

/// Polls `what` until it holds; a failure after a generous bound is a failure, never a skip.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn temp_dirs_and_profile_writes_leave_nothing_anywhere_in_the_prefix() {
    // The first run creates the namespace itself (it stays, empty); then the drive is compared.
    assert_eq!(run(&["exit", "0"]).output.status.code(), Some(0));
    let before = snapshot();
    let Ran { output, report } = run(&["mess", "200"]);
    assert_eq!(output.status.code(), Some(0));
    let root = stdout_value(&output, "CLEANROOM_ROOT");
    let local = std::env::var("LOCALAPPDATA").expect("the test's LOCALAPPDATA");
    assert!(
        root.starts_with(&format!(r"{local}\cleanroom-S-")),
        "the root {root} is not in the SID-keyed namespace under {local}"
    );
    assert_eq!(report["root"].as_str(), Some(root.as_str()), "{report}");
    assert_eq!(report["cleanup"]["status"], "removed", "{report}");
    for var in [
        "GetTempPath",
        "USERPROFILE",
        "APPDATA",
        "LOCALAPPDATA",
        "TEMP",
        "TMP",
    ] {
        let value = stdout_value(&output, var);
        assert!(
            value.starts_with(&root),
            "{var}={value} is outside the root {root}"
        );
    }
    let home = format!(
        "{}{}",
        stdout_value(&output, "HOMEDRIVE"),
        stdout_value(&output, "HOMEPATH")
    );
    assert_eq!(
        home,
        stdout_value(&output, "USERPROFILE"),
        "HOMEDRIVE+HOMEPATH"
    );
    assert!(!Path::new(&root).exists(), "the root {root} is still there");
    let after = snapshot();
    let new: Vec<_> = after.difference(&before).take(10).collect();
    assert!(
        new.is_empty(),
        "the run left these (and maybe more) on C:: {new:#?}"
    );
}

#[test]
fn the_namespace_ignores_redirected_profile_variables() {
    let decoy = std::env::temp_dir().join("cleanroom-decoy");
    let vars: Vec<(&str, &Path)> = ["LOCALAPPDATA", "USERPROFILE", "TEMP", "TMP"]
        .into_iter()
        .map(|var| (var, decoy.as_path()))
        .collect();
    let Ran { output, report } = run_env(&[], &["mess", "1"], &vars);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let root = stdout_value(&output, "CLEANROOM_ROOT");
    assert!(
        !root.starts_with(&*decoy.to_string_lossy()),
        "the root {root} followed LOCALAPPDATA"
    );
    assert_eq!(report["root"].as_str(), Some(root.as_str()), "{report}");
    assert!(!decoy.exists(), "{} was created", decoy.display());
}

#[test]
fn a_detached_daemon_is_named_and_dead_after_the_run() {
    let Ran { output, report } = run(&["daemon"]);
    assert_eq!(output.status.code(), Some(0));
    let pid: u32 = stdout_value(&output, "daemon").parse().expect("a pid");
    let stderr = stderr(&output);
    assert!(
        stderr.contains(&format!(
            "cleanroom: leak: pid {pid} outlived the command and was killed"
        )),
        "the daemon {pid} was not named:\n{stderr}"
    );
    assert!(
        leaked_pids(&report).contains(&u64::from(pid)),
        "the report does not list the daemon {pid} among the leaks: {report}"
    );
    assert!(!alive(pid), "the detached daemon {pid} survived the run");
}

#[test]
fn exit_codes_pass_through() {
    for code in [0, 1, 7, 255, 300] {
        let text = code.to_string();
        let Ran { output, report } = run(&["exit", &text]);
        assert_eq!(output.status.code(), Some(code), "exit {code}");
        assert_eq!(report["exit"]["status"], code, "exit {code}: {report}");
    }
    let missing = finish(cleanroom().args(["run", "--", r"C:\no\such\program.exe"]));
    assert_eq!(missing.status.code(), Some(127), "{}", stderr(&missing));
}

#[test]
fn a_timeout_kills_the_job_and_exits_124() {
    let Ran { output, report } = run_with(&["--timeout", "1s"], &["sleep", "300"]);
    assert_eq!(output.status.code(), Some(124), "{}", stderr(&output));
    assert_eq!(report["exit"]["ending"], "timed_out", "{report}");
    let pid: u32 = stdout_value(&output, "pid").parse().expect("a pid");
    assert!(!alive(pid), "the timed-out command {pid} survived");
}

#[test]
fn protection_is_refused_and_serve_is_not_available() {
    for option in [&["--require-protection"][..], &["--protect", "home"]] {
        let refused = finish(
            cleanroom()
                .arg("run")
                .args(option)
                .arg("--")
                .arg(payload())
                .args(["mess", "1"]),
        );
        let text = stderr(&refused);
        assert_eq!(refused.status.code(), Some(125), "{option:?}: {text}");
        assert!(
            text.contains(option[0]) && text.contains("no write protection backend"),
            "the refusal does not name {option:?} and why: {text}"
        );
        assert!(
            refused.stdout.is_empty(),
            "{option:?}: the payload ran: {}",
            String::from_utf8_lossy(&refused.stdout)
        );
    }
    let serve = finish(cleanroom().arg("serve"));
    assert_eq!(serve.status.code(), Some(125));
    assert!(stderr(&serve).contains("not available on Windows"));
}

/// The one `run-*` entry of `state`, once its marker is written.
fn only_root(state: &Path) -> Option<PathBuf> {
    let roots: Vec<PathBuf> = std::fs::read_dir(state)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
        })
        .collect();
    match roots.as_slice() {
        [root] if root.join("cleanroom-root.json").is_file() => Some(root.clone()),
        _ => None,
    }
}

/// `cleanroom --state-dir STATE gc --json`: its exit status and its summary.
fn gc_json(state: &Path) -> (Option<i32>, Value, String) {
    let output = finish(
        cleanroom()
            .arg("--state-dir")
            .arg(state)
            .args(["gc", "--json"]),
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let summary: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("gc --json: {e}: {text}\n{}", stderr(&output)));
    assert_eq!(summary["format"], "cleanroom-gc", "{summary}");
    (output.status.code(), summary, stderr(&output))
}

/// `gc --json` in `state`, expected to succeed; its summary.
fn gc(state: &Path) -> Value {
    let (code, summary, stderr) = gc_json(state);
    assert_eq!(code, Some(0), "{summary}\n{stderr}");
    summary
}

/// Whether `summary` says gc removed exactly `root`.
fn reclaimed_only(summary: &Value, root: &Path) -> bool {
    let name = root.file_name().expect("a root's name").to_string_lossy();
    summary["removed"] == 1 && summary["removed_names"] == serde_json::json!([name])
}

/// Starts `cleanroom run -- PAYLOAD sleep 300` in `state`; returns the runner, the payload's pid
/// and the run's root once its marker is written.
fn start_sleeping_run(state: &Path) -> (std::process::Child, u32, PathBuf) {
    let mut runner = cleanroom()
        .arg("--state-dir")
        .arg(state)
        .args(["run", "--"])
        .arg(payload())
        .args(["sleep", "300"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cleanroom.exe run");
    let mut line = String::new();
    BufReader::new(runner.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the payload's pid line");
    let pid: u32 = line
        .trim()
        .strip_prefix("pid=")
        .expect("pid=…")
        .parse()
        .expect("a pid");
    eventually("the run's root appears", || only_root(state).is_some());
    (runner, pid, only_root(state).expect("the root"))
}

/// Kills the runner and waits until its job (the payload) is dead too.
fn kill_runner(mut runner: std::process::Child, pid: u32) {
    runner.kill().expect("kill the runner");
    runner.wait().expect("reap the runner");
    eventually("the job dies with its runner", || !alive(pid));
}

#[test]
fn gc_reclaims_the_root_of_a_killed_runner_and_only_that() {
    let state = std::env::temp_dir().join(format!("cleanroom-gc-test-{}", std::process::id()));
    let (runner, pid, root) = start_sleeping_run(&state);
    let live = gc(&state);
    assert!(
        live["removed"] == 0 && live["skipped_live"] == 1,
        "gc touched a live root, or did not see it: {live}"
    );
    assert!(root.exists(), "gc removed a live root");

    kill_runner(runner, pid);
    let stale = gc(&state);
    assert!(
        reclaimed_only(&stale, &root),
        "gc did not reclaim the dead runner's root (only): {stale}"
    );
    assert!(!root.exists(), "{} is still there", root.display());
    std::fs::remove_dir(&state).expect("the state dir is empty after gc");
}

#[test]
fn the_marker_has_the_linux_shape_and_an_earlier_builds_marker_is_still_reclaimed() {
    let state = std::env::temp_dir().join(format!("cleanroom-legacy-test-{}", std::process::id()));
    let (runner, pid, root) = start_sleeping_run(&state);
    let marker = root.join("cleanroom-root.json");
    let text = std::fs::read_to_string(&marker).expect("read the marker");
    for field in [
        r#""owner_sid":"S-1-"#,
        r#""owner":{"pid":"#,
        r#","start_time":"#,
        r#","pid_ns":0,"#,
        r#","cgroup":null}"#,
    ] {
        assert!(text.contains(field), "no {field} in the marker: {text}");
    }
    assert!(!text.contains("euid"), "{text}");
    kill_runner(runner, pid);

    // cleanroom.exe wrote `creation_time`, and neither `pid_ns` nor `cgroup`, before the marker
    // had one definition for every platform; the roots it left must stay reclaimable.
    let legacy = text
        .replace(r#","start_time":"#, r#","creation_time":"#)
        .replace(r#","pid_ns":0,"#, ",")
        .replace(r#","cgroup":null}"#, "}");
    assert!(
        !legacy.contains("start_time") && !legacy.contains("pid_ns") && !legacy.contains("cgroup"),
        "{legacy}"
    );
    std::fs::write(&marker, &legacy).expect("write the earlier build's marker");
    let stale = gc(&state);
    assert!(
        reclaimed_only(&stale, &root),
        "gc did not reclaim the root of an earlier build's dead runner: {stale}"
    );
    assert!(!root.exists(), "{} is still there", root.display());
    std::fs::remove_dir(&state).expect("the state dir is empty after gc");
}

/// `gc --json` in `state`, expected to fail (a leftover: exit 1); its errors, one string.
fn gc_leaving(state: &Path) -> String {
    let (code, summary, stderr) = gc_json(state);
    assert_eq!(code, Some(1), "{summary}\n{stderr}");
    assert_eq!(summary["removed"], 0, "{summary}");
    summary["errors"].to_string()
}

#[test]
fn a_file_another_process_holds_is_a_leftover_that_keeps_its_marker() {
    use std::os::windows::fs::OpenOptionsExt;
    use windows_sys::Win32::Storage::FileSystem::FILE_SHARE_READ;

    let state = std::env::temp_dir().join(format!("cleanroom-held-file-{}", std::process::id()));
    let (runner, pid, root) = start_sleeping_run(&state);
    // As a scanner would: open without FILE_SHARE_DELETE, so nobody can delete it meanwhile.
    let scanned = root.join("tmp").join("scanned.txt");
    std::fs::write(&scanned, "in use").expect("write a file into the root");
    let scanner = std::fs::OpenOptions::new()
        .read(true)
        .share_mode(FILE_SHARE_READ)
        .open(&scanned)
        .expect("hold the file");
    kill_runner(runner, pid);

    let errors = gc_leaving(&state);
    assert!(errors.contains("scanned.txt"), "{errors}");
    assert!(
        root.join("cleanroom-root.json").is_file(),
        "the leftover lost its marker; gc said: {errors}"
    );
    drop(scanner);
    let done = gc(&state);
    assert!(reclaimed_only(&done, &root), "{done}");
    assert!(!root.exists(), "{} is still there", root.display());
    std::fs::remove_dir(&state).expect("the state dir is empty after gc");
}

#[test]
fn a_root_that_stays_after_its_marker_went_gets_the_marker_back() {
    use std::os::windows::fs::OpenOptionsExt;
    use windows_sys::Win32::Storage::FileSystem::{
        FILE_FLAG_BACKUP_SEMANTICS, FILE_LIST_DIRECTORY, FILE_SHARE_READ, FILE_SHARE_WRITE,
    };

    let state = std::env::temp_dir().join(format!("cleanroom-held-root-{}", std::process::id()));
    let (runner, pid, root) = start_sleeping_run(&state);
    // The root itself held by another process without FILE_SHARE_DELETE: its contents and its
    // marker go, the directory cannot.
    let holder = std::fs::OpenOptions::new()
        .access_mode(FILE_LIST_DIRECTORY)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(&root)
        .expect("hold the root directory");
    kill_runner(runner, pid);

    let errors = gc_leaving(&state);
    let marker = root.join("cleanroom-root.json");
    assert!(
        marker.is_file(),
        "the leftover has no marker, so no gc can ever prove it ours; gc said: {errors}"
    );
    let names: Vec<_> = std::fs::read_dir(&root)
        .expect("list the leftover")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["cleanroom-root.json"], "{errors}");
    drop(holder);
    let done = gc(&state);
    assert!(reclaimed_only(&done, &root), "{done}");
    assert!(!root.exists(), "{} is still there", root.display());
    std::fs::remove_dir(&state).expect("the state dir is empty after gc");
}

#[test]
fn doctor_says_what_this_windows_allows() {
    let state = scratch_dir().join("doctor-state");
    let doctor = |json: bool| {
        let mut command = cleanroom();
        command.arg("--state-dir").arg(&state).arg("doctor");
        if json {
            command.arg("--json");
        }
        let output = finish(&mut command);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    let text = doctor(true);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let keys: BTreeSet<&str> = report
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    let expected: BTreeSet<&str> = [
        "format",
        "version",
        "windows",
        "user_sid",
        "job_object",
        "nested_jobs",
        "outer_job",
        "namespace",
        "file_locks",
        "containment",
        "protection",
        "net_none",
        "dev_shm",
        "tmp",
        "home_policy",
        "cwd",
        "home_policy_warnings",
    ]
    .into();
    assert_eq!(keys, expected, "{report:#}");
    assert_eq!(
        (&report["format"], &report["version"]),
        (&"cleanroom-doctor".into(), &1.into())
    );
    assert!(
        report["user_sid"]
            .as_str()
            .is_some_and(|s| s.starts_with("S-1-")),
        "{report:#}"
    );
    for check in ["job_object", "nested_jobs", "namespace", "file_locks"] {
        assert_eq!(report[check]["available"], true, "{check}: {report:#}");
    }
    assert_eq!(report["outer_job"]["in_job"], false, "{report:#}");
    assert_eq!(report["containment"]["choice"], "job-object", "{report:#}");
    assert_eq!(report["protection"]["choice"], "none", "{report:#}");
    assert_eq!(report["net_none"]["choice"], "unavailable", "{report:#}");
    assert_eq!(report["tmp"]["choice"], "root", "{report:#}");
    for decision in ["protection", "net_none"] {
        let reason = report[decision]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("not available on Windows"),
            "{decision}: {report:#}"
        );
    }
    assert_eq!(report["home_policy"], serde_json::json!([]), "{report:#}");

    let text = doctor(false);
    for line in [
        "this machine",
        "  job object          yes (",
        "  containment         job-object: ",
        "  protect home        none: not available on Windows",
        "  --net none          unavailable: not available on Windows",
        "  TEMP, TMP           root: ",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // The probe's root is gone; the namespace it made stays, empty.
    let left: Vec<_> = std::fs::read_dir(&state)
        .expect("the namespace")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "doctor left {left:?}");
    std::fs::remove_dir(&state).expect("remove the namespace");
}
