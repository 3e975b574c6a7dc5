//! Runs a test body in namespaces of its own, by re-executing the test binary (just that test)
//! under `unshare`:
//! - a network namespace whose only interface is `lo`, brought up: nothing the body starts can
//!   reach any address but loopback;
//! - a pid namespace whose init is the body's process (`--kill-child` ties it to `unshare`), so
//!   every process the body started dies with it, however it ends, and the body can prove that
//!   none outlived its servers by listing its own /proc;
//! - a mount namespace with private tmpfs on /tmp and /dev/shm: the Codex client writes
//!   `/tmp/codex-daemon-<uid>` whatever TMPDIR says; the body asserts at its end what is left
//!   there, and nothing of it reaches the machine's /tmp. What the body needs that lives under
//!   either (a checkout under /tmp: its `target/` with the binaries, the Codex install and the
//!   work dir) is bound back at its own path on the fresh tmpfs, so the test runs from any
//!   checkout.
//!
//! The outer test owns the private work dir (under cargo's target tmp dir, never /tmp: Codex
//! refuses to put its helper links under the temp dir, its bubblewrap sandbox hides /dev/shm,
//! and its default sandbox, workspace-write, makes all of /tmp writable, so that a dir "outside
//! the workspace" there is not; for a checkout under /tmp it is under /var/tmp instead),
//! removes it afterwards, and replays the inner run's output.

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
        let bound = enter(&[
            work.clone(),
            parent_of(&std::env::current_exe().unwrap()),
            parent_of(Path::new(super::scenario::CLEANROOM)),
            super::client::pinned_install_dir(),
        ]);
        body(&work);
        leave(&bound);
        return;
    }
    let work = tempfile::Builder::new()
        .prefix("cleanroom-interop-")
        .tempdir_in(super::reach::outside_tmp(Path::new(env!(
            "CARGO_TARGET_TMPDIR"
        ))))
        .expect("a private work dir");
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
/// are private, and the directories of `keep` under them are reachable at their paths; returns
/// the entries of the private /tmp and /dev/shm made for them.
fn enter(keep: &[PathBuf]) -> Vec<PathBuf> {
    assert_eq!(
        std::process::id(),
        1,
        "the isolated body is its pid namespace's init"
    );
    run(&["ip", "link", "set", "lo", "up"], "iproute2");
    let keep: Vec<PathBuf> = keep.iter().filter_map(|p| p.canonicalize().ok()).collect();
    let mut bound = Vec::new();
    for dir in ["/tmp", "/dev/shm"] {
        bound.extend(private_tmpfs_keeping(Path::new(dir), &keep));
    }
    let interfaces = interfaces();
    assert_eq!(
        interfaces,
        ["lo"],
        "the network namespace has only loopback"
    );
    bound
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent().expect("a file's directory").to_path_buf()
}

/// Mounts a fresh tmpfs (mode 1777) on `dir`, then binds each directory of `keep` that lay
/// under `dir` back at its path, from the original mount (reached through a descriptor opened
/// before the tmpfs hid it); returns the entries of `dir` made for them.
fn private_tmpfs_keeping(dir: &Path, keep: &[PathBuf]) -> Vec<PathBuf> {
    let mut hidden: Vec<&Path> = keep
        .iter()
        .filter(|p| p.starts_with(dir) && p.as_path() != dir)
        .map(PathBuf::as_path)
        .collect();
    hidden.sort();
    hidden.dedup_by(|inner, outer| inner.starts_with(outer));
    let original = std::fs::File::open(dir).unwrap();
    mount(Some("tmpfs"), dir, Some("tmpfs"), 0, Some("mode=1777"));
    let mut made = Vec::new();
    for path in hidden {
        let relative = path.strip_prefix(dir).unwrap();
        std::fs::create_dir_all(path).unwrap();
        let source = format!(
            "/proc/self/fd/{}/{}",
            std::os::fd::AsRawFd::as_raw_fd(&original),
            relative.display()
        );
        mount(
            Some(&source),
            path,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        );
        made.push(dir.join(relative.components().next().unwrap()));
    }
    made
}

/// mount(2), panicking with what failed.
fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: u64,
    data: Option<&str>,
) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: Option<&str>| s.map(|s| CString::new(s).unwrap());
    let (source_c, fstype_c, data_c) = (c(source), c(fstype), c(data));
    let target_c = CString::new(target.as_os_str().as_bytes()).unwrap();
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            ptr(&source_c),
            target_c.as_ptr(),
            ptr(&fstype_c),
            flags,
            ptr(&data_c).cast(),
        )
    };
    assert_eq!(
        rc,
        0,
        "mount {source:?} on {}: {}",
        target.display(),
        std::io::Error::last_os_error()
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
/// and /tmp holds only the Codex client's own daemon dir (besides the entries `bound` made for
/// what had to stay reachable).
fn leave(bound: &[PathBuf]) {
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
    let unbound = |dir: &str| -> Vec<String> {
        let dir = Path::new(dir);
        let mut names = entries(dir);
        names.retain(|name| !bound.contains(&dir.join(name)));
        names
    };
    let shm = unbound("/dev/shm");
    assert!(shm.is_empty(), "left in /dev/shm: {shm:?}");
    let tmp = unbound("/tmp");
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
