//! Runs a test body in namespaces of its own, by re-executing the test binary (just that test)
//! under `unshare`:
//! - a network namespace whose only interface is `lo`, brought up: nothing the body starts can
//!   reach any address but loopback;
//! - a pid namespace whose init is the body's process (`--kill-child` ties it to `unshare`), so
//!   every process the body started dies with it, however it ends, and the body can prove that
//!   none outlived its servers by listing its own /proc;
//! - a mount namespace with private tmpfs on /tmp and /dev/shm: the Codex client writes
//!   `/tmp/codex-daemon-<uid>` whatever TMPDIR says; the body asserts at its end what is left
//!   there, and nothing of it reaches the machine's /tmp.
//!
//! The outer test owns the private work dir (under cargo's target tmp dir, never /tmp: Codex
//! refuses to put its helper links under the temp dir, and its bubblewrap sandbox hides
//! /dev/shm), removes it afterwards, and replays the inner run's output.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Set to the test's name in the re-executed, isolated process.
const INSIDE: &str = "CLEANROOM_INTEROP_INSIDE";
/// The private work dir the outer test made for the inner one.
const WORK_DIR: &str = "CLEANROOM_INTEROP_WORK_DIR";
/// Longest an isolated body may run before it is killed (a hang guard, not a measurement).
const HANG_GUARD: Duration = Duration::from_secs(600);
/// What the Codex client leaves in /tmp by design (a literal path, not under TMPDIR).
const CODEX_TMP_LEFTOVER: &str = "codex-daemon-";

/// Runs `body(work_dir)` inside the namespaces; `test_name` is the calling test's full name.
pub fn run_isolated(test_name: &str, body: impl FnOnce(&Path)) {
    if std::env::var(INSIDE).as_deref() == Ok(test_name) {
        let work = PathBuf::from(std::env::var_os(WORK_DIR).expect("work dir from the outer test"));
        enter();
        body(&work);
        leave();
        return;
    }
    let work = tempfile::Builder::new()
        .prefix("cleanroom-interop-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a private work dir under cargo's target tmp dir");
    let log_path = work.path().join("isolated.log");
    let status = wait_guarded(spawn_isolated(test_name, work.path(), &log_path));
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    print!("{output}");
    assert!(
        status.success() && output.contains("1 passed"),
        "the isolated run of {test_name} failed ({status}); its output is above"
    );
}

/// This test binary, running just `test_name`, under `unshare` (output to `log`).
fn spawn_isolated(test_name: &str, work: &Path, log: &Path) -> Child {
    let log = File::create(log).unwrap();
    let mut command = Command::new("unshare");
    if !rustix::process::geteuid().is_root() {
        command.arg("--map-root-user");
    }
    command
        .args([
            "--net",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([test_name, "--exact", "--include-ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(INSIDE, test_name)
        .env(WORK_DIR, work)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    // SAFETY: prctl(2) between fork and exec, async-signal-safe: `unshare` (and with
    // --kill-child everything inside) dies if this test thread dies first.
    unsafe {
        command.pre_exec(
            || match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            },
        );
    }
    command
        .spawn()
        .unwrap_or_else(|e| panic!("prerequisite missing: unshare (util-linux): {e}"))
}

/// Waits for the isolated run; kills it after [`HANG_GUARD`].
fn wait_guarded(mut child: Child) -> ExitStatus {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            // --kill-child: the namespace's init, and with it every process inside, dies too.
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Inside: this process is the pid namespace's init, `lo` is up and alone, /tmp and /dev/shm
/// are private.
fn enter() {
    assert_eq!(
        std::process::id(),
        1,
        "the isolated body is its pid namespace's init"
    );
    run(&["ip", "link", "set", "lo", "up"], "iproute2");
    for dir in ["/tmp", "/dev/shm"] {
        run(
            &["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", dir],
            "mount",
        );
    }
    let interfaces = interfaces();
    assert_eq!(
        interfaces,
        ["lo"],
        "the network namespace has only loopback"
    );
}

/// The interfaces of this process's network namespace (/proc/self/net/dev, which, unlike
/// /sys/class/net, follows the reader's namespace).
fn interfaces() -> Vec<String> {
    std::fs::read_to_string("/proc/self/net/dev")
        .unwrap()
        .lines()
        .skip(2)
        .filter_map(|line| line.split(':').next())
        .map(|name| name.trim().to_string())
        .collect()
}

fn run(argv: &[&str], package: &str) {
    let status = Command::new(argv[0])
        .args(&argv[1..])
        .status()
        .unwrap_or_else(|e| panic!("prerequisite missing: {} ({package}): {e}", argv[0]));
    assert!(status.success(), "{argv:?}: {status}");
}

/// At the end of the body: no process but this one is alive in the namespace, /dev/shm is empty
/// and /tmp holds only the Codex client's own daemon dir.
fn leave() {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let others = live_processes();
        if others.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes outlived the test's servers: {others:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let shm = entries(Path::new("/dev/shm"));
    assert!(shm.is_empty(), "left in /dev/shm: {shm:?}");
    let tmp = entries(Path::new("/tmp"));
    let foreign: Vec<_> = tmp
        .iter()
        .filter(|name| !name.starts_with(CODEX_TMP_LEFTOVER))
        .collect();
    assert!(foreign.is_empty(), "left in /tmp: {foreign:?}");
    if !tmp.is_empty() {
        let why = "a literal path in its code, whatever TMPDIR says";
        println!("isolation: Codex left {tmp:?} in the private /tmp ({why})");
    }
}

/// Every living process of the namespace other than this one: (pid, command line).
fn live_processes() -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if pid == 1 || state.is_empty() || state.starts_with('Z') || state.starts_with('X') {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, cmdline));
    }
    found
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}
