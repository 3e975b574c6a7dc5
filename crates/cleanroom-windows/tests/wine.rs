//! The Windows guarantees, checked over the real `cleanroom.exe` and the test payload
//! (examples/payload.rs) — under Wine by scripts/windows.sh, or on Windows itself.
//!
//! The paths of both programs come from CLEANROOM_EXE and CLEANROOM_PAYLOAD (a test that cannot
//! find them fails). Tests run one at a time (`--test-threads=1`): the first one snapshots the
//! whole C: drive, and every test leaves nothing behind.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// Runs `command` to its end with stdout and stderr in files of the scratch dir
/// (CLEANROOM_TEST_SCRATCH, outside C:), not pipes: on Windows a process a broken run leaves
/// behind may inherit a pipe and hold it open, which must fail the test, not hang it.
fn finish(command: &mut Command) -> Output {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let scratch = scratch_dir("CLEANROOM_TEST_SCRATCH");
    let n = CALLS.fetch_add(1, Ordering::SeqCst);
    let (out, err) = (
        scratch.join(format!("{n}.out")),
        scratch.join(format!("{n}.err")),
    );
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

fn scratch_dir(var: &str) -> PathBuf {
    let path = PathBuf::from(
        std::env::var_os(var).unwrap_or_else(|| panic!("{var} must name a scratch directory")),
    );
    assert!(path.is_dir(), "{var}={} is not a directory", path.display());
    path
}

fn cleanroom() -> Command {
    Command::new(program("CLEANROOM_EXE"))
}

fn payload() -> PathBuf {
    program("CLEANROOM_PAYLOAD")
}

fn run(args: &[&str]) -> Output {
    let output = finish(cleanroom().arg("run").arg("--").arg(payload()).args(args));
    eprintln!(
        "cleanroom run {args:?}: {:?}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout_value(output: &Output, key: &str) -> String {
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the payload printed no {key}=…:\n{text}"))
        .trim()
        .to_string()
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
    assert_eq!(run(&["exit", "0"]).status.code(), Some(0));
    let before = snapshot();
    let output = run(&["mess", "200"]);
    assert_eq!(output.status.code(), Some(0));
    let root = stdout_value(&output, "CLEANROOM_ROOT");
    let local = std::env::var("LOCALAPPDATA").expect("the test's LOCALAPPDATA");
    assert!(
        root.starts_with(&format!(r"{local}\cleanroom-S-")),
        "the root {root} is not in the SID-keyed namespace under {local}"
    );
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
    let output = finish(
        cleanroom()
            .env("LOCALAPPDATA", &decoy)
            .env("USERPROFILE", &decoy)
            .env("TEMP", &decoy)
            .env("TMP", &decoy)
            .arg("run")
            .arg(payload())
            .args(["mess", "1"]),
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let root = stdout_value(&output, "CLEANROOM_ROOT");
    assert!(
        !root.starts_with(&*decoy.to_string_lossy()),
        "the root {root} followed LOCALAPPDATA"
    );
    assert!(!decoy.exists(), "{} was created", decoy.display());
}

#[test]
fn a_detached_daemon_is_named_and_dead_after_the_run() {
    let output = run(&["daemon"]);
    assert_eq!(output.status.code(), Some(0));
    let pid: u32 = stdout_value(&output, "daemon").parse().expect("a pid");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cleanroom: leak: pid {pid} outlived the command and was killed"
        )),
        "the daemon {pid} was not named:\n{stderr}"
    );
    assert!(!alive(pid), "the detached daemon {pid} survived the run");
}

#[test]
fn exit_codes_pass_through() {
    for code in [0, 1, 7, 255, 300] {
        let text = code.to_string();
        assert_eq!(
            run(&["exit", &text]).status.code(),
            Some(code),
            "exit {code}"
        );
    }
    let missing = finish(cleanroom().args(["run", r"C:\no\such\program.exe"]));
    assert_eq!(missing.status.code(), Some(127));
}

#[test]
fn a_timeout_kills_the_job_and_exits_124() {
    let output = finish(
        cleanroom()
            .args(["run", "--timeout", "1s", "--"])
            .arg(payload())
            .args(["sleep", "300"]),
    );
    assert_eq!(
        output.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pid: u32 = stdout_value(&output, "pid").parse().expect("a pid");
    assert!(!alive(pid), "the timed-out command {pid} survived");
}

#[test]
fn protection_is_reported_unavailable_and_serve_is_left_out() {
    let required = finish(
        cleanroom()
            .args(["run", "--require-protection", "--"])
            .arg(payload())
            .args(["exit", "0"]),
    );
    assert_eq!(required.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&required.stderr).contains("not available"));
    let best_effort = finish(
        cleanroom()
            .args(["run", "--protect", "home", "--"])
            .arg(payload())
            .args(["exit", "0"]),
    );
    assert_eq!(best_effort.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&best_effort.stderr).contains("not available on Windows"));
    let serve = finish(cleanroom().arg("serve"));
    assert_eq!(serve.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&serve.stderr).contains("not in the Windows build"));
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

fn gc(state: &Path) -> String {
    let output = finish(cleanroom().arg("--state-dir").arg(state).arg("gc"));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Starts `cleanroom run PAYLOAD sleep 300` in `state`; returns the runner, the payload's pid and
/// the run's root once its marker is written.
fn start_sleeping_run(state: &Path) -> (std::process::Child, u32, PathBuf) {
    let mut runner = cleanroom()
        .arg("--state-dir")
        .arg(state)
        .arg("run")
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
        live.contains("reclaimed 0"),
        "gc touched a live root:\n{live}"
    );
    assert!(root.exists(), "gc removed a live root");

    kill_runner(runner, pid);
    let stale = gc(&state);
    assert!(
        stale.contains("reclaimed 1"),
        "gc did not reclaim the dead runner's root:\n{stale}"
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
        stale.contains("reclaimed 1"),
        "gc did not reclaim the root of an earlier build's dead runner:\n{stale}"
    );
    assert!(!root.exists(), "{} is still there", root.display());
    std::fs::remove_dir(&state).expect("the state dir is empty after gc");
}

/// Runs `cleanroom gc` in `state`, expecting it to fail (a leftover); returns its stderr.
fn gc_leaving(state: &Path) -> String {
    let output = finish(cleanroom().arg("--state-dir").arg(state).arg("gc"));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    stderr
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

    let stderr = gc_leaving(&state);
    assert!(stderr.contains("scanned.txt"), "{stderr}");
    assert!(
        root.join("cleanroom-root.json").is_file(),
        "the leftover lost its marker; gc said:\n{stderr}"
    );
    drop(scanner);
    let done = gc(&state);
    assert!(done.contains("reclaimed 1"), "{done}");
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

    let stderr = gc_leaving(&state);
    let marker = root.join("cleanroom-root.json");
    assert!(
        marker.is_file(),
        "the leftover has no marker, so no gc can ever prove it ours; gc said:\n{stderr}"
    );
    let names: Vec<_> = std::fs::read_dir(&root)
        .expect("list the leftover")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["cleanroom-root.json"], "{stderr}");
    drop(holder);
    let done = gc(&state);
    assert!(done.contains("reclaimed 1"), "{done}");
    assert!(!root.exists(), "{} is still there", root.display());
    std::fs::remove_dir(&state).expect("the state dir is empty after gc");
}
