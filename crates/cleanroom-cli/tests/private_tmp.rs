//! A run's private `/tmp`, `/var/tmp` and IPC namespace through the real binary (issue 27): what
//! a command writes at a fixed path there, and the System V and POSIX IPC objects it makes, are
//! gone after the run however it ends; what the host had there stays readable (files) and
//! connectable (sockets, `SSH_AUTH_SOCK`); the project, the state dir and the machine lock
//! directory stay the host's (build output kept, exclusive locks still exclude, nested runs
//! work); where /tmp cannot be private the run says so once and `--require-protection` refuses.
//!
//! These tests keep their state dir under /tmp (the default namespace lives there, inside the
//! directory made private) and remove everything they put in /tmp and /var/tmp, even on failure.

mod common;
mod serve_support;

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use common::{Run, Sandbox};
use serde_json::json;
use serve_support::{managed, path_entry, special, uri, workspace_write, Server};

/// Makes what a careless test suite leaves behind: a file at a fixed /tmp path, a directory at
/// a fixed /var/tmp path, a System V segment, queue and semaphore set (keys KEY, KEY+1, KEY+2),
/// a POSIX message queue `/MARKER`; then touches READY and exits 0, exits 3 (`fail`) or sleeps
/// (`sleep`). Usage: `python3 -c LEFTOVERS MARKER KEY MODE READY`.
const LEFTOVERS: &str = r#"
import ctypes, os, sys, time
marker, key, mode, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
def check(what, rc):
    if rc < 0:
        sys.exit(f"{what}: {os.strerror(ctypes.get_errno())}")
with open(f"/tmp/{marker}-file", "w") as f:
    f.write("left\n")
os.mkdir(f"/var/tmp/{marker}-dir")
check("shmget", libc.shmget(key, 4096, IPC_CREAT | 0o600))
check("msgget", libc.msgget(key + 1, IPC_CREAT | 0o600))
check("semget", libc.semget(key + 2, 1, IPC_CREAT | 0o600))
check("mq_open", libc.mq_open(f"/{marker}".encode(), os.O_CREAT | os.O_RDWR, 0o600, None))
open(ready, "w").close()
if mode == "fail":
    sys.exit(3)
if mode == "sleep":
    time.sleep(300)
"#;

/// A unix socket listener answering REPLY to every connection; touches PATH.ready once it
/// listens. Usage: `python3 -c LISTENER PATH REPLY MARKER`.
const LISTENER: &str = r#"
import os, socket, sys
path, reply = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
open(path + ".ready", "w").close()
while True:
    c, _ = s.accept()
    c.sendall(reply.encode())
    c.close()
"#;

/// Connects to each socket path given and prints what it answers (or the error).
const CLIENT: &str = r#"
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print(path, s.recv(100).decode())
    except OSError as e:
        print(path, "FAILED", e)
"#;

/// Takes a detached copy of `/` without its submounts (`open_tree` without `AT_RECURSIVE`):
/// under it the host's /tmp is not covered by the private one. Creates argv[1] (a path beneath
/// /tmp, relative to `/`) through it and says what happened.
const CLONE_BELOW: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int root = syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */);
    if (root < 0) { printf("clone refused: %s\n", strerror(errno)); return 0; }
    int fd = openat(root, argv[1], O_CREAT | O_WRONLY, 0644);
    printf(fd >= 0 ? "ESCAPED\n" : "create refused: %s\n", strerror(errno));
    return 0;
}
"#;

/// A directory of this test under /tmp, removed (with everything in it) on drop.
struct TmpPlace(PathBuf);

impl TmpPlace {
    /// `/tmp/<marker>`, writable by everyone (runs as nobody create their state dir in it).
    fn new(sandbox: &Sandbox) -> TmpPlace {
        let path = Path::new("/tmp").join(sandbox.marker());
        fs::create_dir(&path).unwrap();
        chmod(&path, 0o1777);
        TmpPlace(path)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TmpPlace {
    fn drop(&mut self) {
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+rwx")
            .arg(&self.0)
            .status();
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Removes what `LEFTOVERS` may have left on the host (fixed paths in /tmp and /var/tmp, its IPC
/// objects), even when a test fails.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let marker = &self.0;
        let _ = fs::remove_file(format!("/tmp/{marker}-file"));
        let _ = fs::remove_dir(format!("/var/tmp/{marker}-dir"));
        let key = ipc_key(marker);
        let name = CString::new(format!("/{marker}")).unwrap();
        // SAFETY: System V calls with integer arguments (a NULL buffer for IPC_RMID) and
        // mq_unlink with a NUL-terminated name; each fails harmlessly when nothing is there.
        unsafe {
            let shm = libc::shmget(key, 0, 0);
            if shm >= 0 {
                libc::shmctl(shm, libc::IPC_RMID, std::ptr::null_mut());
            }
            let msg = libc::msgget(key + 1, 0);
            if msg >= 0 {
                libc::msgctl(msg, libc::IPC_RMID, std::ptr::null_mut());
            }
            let sem = libc::semget(key + 2, 0, 0);
            if sem >= 0 {
                libc::semctl(sem, 0, libc::IPC_RMID);
            }
            libc::mq_unlink(name.as_ptr());
        }
    }
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// `sandbox` with its state dir in a directory of its own under /tmp.
fn in_tmp(sandbox: Sandbox) -> (Sandbox, TmpPlace) {
    let place = TmpPlace::new(&sandbox);
    (sandbox.with_state_dir(place.path("state")), place)
}

/// `python3 -c SCRIPT` as nobody (arguments to add).
fn python_as_nobody(script: &str) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", script]);
    command
}

/// A sandbox for root and one for nobody (when the tests run as root), each with its state dir
/// in a directory of its own under /tmp.
fn sandboxes(tag: &str) -> Vec<(Sandbox, TmpPlace)> {
    let mut all = vec![Sandbox::new(tag)];
    if common::root_or_skip("the unprivileged case (a run as nobody)") {
        all.push(Sandbox::as_user(&format!("{tag}-nobody"), common::NOBODY));
    }
    all.into_iter().map(in_tmp).collect()
}

/// A System V key of this marker (three in a row are used).
fn ipc_key(marker: &str) -> i32 {
    let hash = marker.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (hash >> 4) as i32 + 0x1000
}

/// Asserts that nothing `LEFTOVERS` made with `marker` and `key` exists on the host.
#[track_caller]
fn assert_nothing_left(marker: &str, key: i32, context: &str) {
    assert!(
        !common::exists(Path::new(&format!("/tmp/{marker}-file"))),
        "{context}: the /tmp file survived the run"
    );
    assert!(
        !common::exists(Path::new(&format!("/var/tmp/{marker}-dir"))),
        "{context}: the /var/tmp directory survived the run"
    );
    for (table, key) in [("shm", key), ("msg", key + 1), ("sem", key + 2)] {
        let listed = fs::read_to_string(format!("/proc/sysvipc/{table}")).unwrap();
        let keys: Vec<&str> = listed
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(
            !keys.contains(&key.to_string().as_str()),
            "{context}: the System V {table} object of key {key} survived the run"
        );
    }
    let name = CString::new(format!("/{marker}")).unwrap();
    // SAFETY: `name` is NUL-terminated; O_RDONLY without O_CREAT takes no further argument.
    let queue = unsafe { libc::mq_open(name.as_ptr(), libc::O_RDONLY) };
    let err = std::io::Error::last_os_error();
    if queue >= 0 {
        // SAFETY: `queue` was just opened; `name` is NUL-terminated.
        unsafe {
            libc::mq_close(queue);
            libc::mq_unlink(name.as_ptr());
        }
        panic!("{context}: the POSIX message queue /{marker} survived the run");
    }
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{context}: {err}");
}

fn leftovers_command<'a>(
    marker: &'a str,
    key: &'a str,
    mode: &'a str,
    ready: &'a str,
) -> [&'a str; 7] {
    [
        "/usr/bin/python3",
        "-c",
        LEFTOVERS,
        marker,
        key,
        mode,
        ready,
    ]
}

#[test]
fn fixed_paths_in_tmp_and_ipc_objects_are_gone_after_a_run_however_it_ends() {
    for (sandbox, _place) in sandboxes("tmp-ends") {
        for (mode, args, status) in [
            ("exit", &[][..], 0),
            ("fail", &[][..], 3),
            ("sleep", &["--timeout", "2s"][..], 124),
        ] {
            let marker = format!("{}-{mode}", sandbox.marker());
            let _cleanup = Leftovers(marker.clone());
            let key = ipc_key(&marker);
            let ready = sandbox.scratch().join(format!("{mode}.ready"));
            let key_text = key.to_string();
            let command = leftovers_command(&marker, &key_text, mode, ready.to_str().unwrap());
            let run = sandbox.run(args, &command);
            run.assert_status(status);
            assert!(
                ready.exists(),
                "{mode}: the command did not get going:\n{}",
                run.stderr
            );
            assert_nothing_left(&marker, key, mode);
            let report = run.report();
            assert_eq!(report["protection"]["tmp"]["kind"], "private", "{report}");
            assert_eq!(report["protection"]["ipc"]["kind"], "private", "{report}");
            let left = |dir: &str| {
                report["tmp"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|l| l["path"] == dir)
                    .unwrap_or_else(|| panic!("no count for {dir}: {report}"))
                    .clone()
            };
            assert_eq!(left("/tmp")["names"][0], format!("{marker}-file"));
            assert_eq!(left("/var/tmp")["names"][0], format!("{marker}-dir"));
            sandbox.assert_namespace_empty();
        }
    }
}

#[test]
fn a_verbose_run_says_what_the_command_wrote_under_tmp() {
    let (sandbox, _place) = in_tmp(Sandbox::new("tmp-verbose"));
    // The second name would forge a line and clear the screen if it were shown as it is.
    let (first, second) = (
        sandbox.marker().to_string(),
        format!("{}-x\n\x1b[2J", sandbox.marker()),
    );
    let _cleanup = [Leftovers(first.clone()), Leftovers(second.clone())];
    let script = format!("echo x > '/tmp/{first}-file'; echo y > '/tmp/{second}-file'");
    let out = sandbox
        .command(&["-v", "run", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let shown = second.replace('\n', "\\n").replace('\x1b', "\\u{1b}");
    let said = format!("the command wrote 2 entries under /tmp ({first}-file, {shown}-file)");
    assert!(stderr.contains(&said), "{said:?} missing:\n{stderr}");
    sandbox.assert_namespace_empty();
}

#[test]
fn fixed_paths_in_tmp_and_ipc_objects_are_gone_when_the_runner_is_killed_and_gc_runs() {
    for (sandbox, _place) in sandboxes("tmp-sigkill") {
        let marker = sandbox.marker().to_string();
        let _cleanup = Leftovers(marker.clone());
        let key = ipc_key(&marker);
        let ready = sandbox.scratch().join("sigkill.ready");
        let key_text = key.to_string();
        let command = leftovers_command(&marker, &key_text, "sleep", ready.to_str().unwrap());
        let (mut cmd, _report) = sandbox.run_command(&[], &command);
        let mut runner = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&ready, &runner);
        runner.kill().unwrap(); // SIGKILL to the runner alone
        runner.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !common::processes_with(&marker).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            common::processes_with(&marker),
            vec![],
            "the run outlived its runner"
        );
        let gc = sandbox.command(&["gc"]).output().unwrap();
        assert!(gc.status.success(), "{gc:?}");
        assert_nothing_left(&marker, key, "after SIGKILL and gc");
        sandbox.assert_namespace_empty();
    }
}

/// Waits (up to 30 s) for `path` to exist; fails if `runner` exits first.
fn wait_for(path: &Path, runner: &Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        let alive = Path::new(&format!("/proc/{}", runner.id())).exists();
        assert!(
            alive && Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_project_under_tmp_keeps_its_build_output() {
    for (sandbox, place) in sandboxes("tmp-project") {
        let member = place.path("proj/crates/a");
        fs::create_dir_all(&member).unwrap();
        fs::create_dir(place.path("proj/.git")).unwrap();
        sandbox.hand_over(&place.path("proj"));
        let (mut cmd, report) = sandbox.run_command(
            &[],
            &[
                "sh",
                "-c",
                "mkdir -p ../../target && echo built > ../../target/out && echo here > local",
            ],
        );
        cmd.current_dir(&member);
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert_eq!(
            fs::read_to_string(place.path("proj/target/out")).unwrap(),
            "built\n"
        );
        assert_eq!(fs::read_to_string(member.join("local")).unwrap(), "here\n");
        let shared = &run.report()["protection"]["tmp"]["shared"];
        let proj = place.path("proj");
        assert!(
            shared
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p == proj.to_str().unwrap()),
            "{shared}"
        );
        sandbox.assert_namespace_empty();
    }
}

/// Starts a `LISTENER` at `path` answering `reply`, and waits until it listens.
fn listen(sandbox: &Sandbox, path: &Path, reply: &str) -> Child {
    let mut server = Command::new("/usr/bin/python3")
        .args(["-c", LISTENER])
        .arg(path)
        .args([reply, sandbox.marker()])
        .spawn()
        .unwrap();
    let ready = PathBuf::from(format!("{}.ready", path.display()));
    wait_for(&ready, &server);
    fs::remove_file(ready).unwrap();
    let _ = &mut server;
    server
}

#[test]
fn sockets_and_files_that_existed_under_tmp_answer_inside_the_run() {
    for (sandbox, place) in sandboxes("tmp-sockets") {
        // A server socket in a directory (PostgreSQL's), one directly in /tmp (MySQL's), and
        // an ssh agent's, found through SSH_AUTH_SOCK.
        for dir in ["pg", "agent"] {
            fs::create_dir(place.path(dir)).unwrap();
            chmod(&place.path(dir), 0o777);
        }
        let pg = place.path("pg/.s.PGSQL.5432");
        let top = PathBuf::from(format!("/tmp/{}.sock", sandbox.marker()));
        let agent = place.path("agent/agent.1");
        let _servers: Vec<KillOnDrop> = [(&pg, "postgres"), (&top, "mysql"), (&agent, "agent")]
            .into_iter()
            .map(|(path, reply)| KillOnDrop(listen(&sandbox, path, reply), path.clone()))
            .collect();
        let data = place.path("data.txt");
        fs::write(&data, "precious\n").unwrap();
        chmod(&data, 0o644);
        let script = format!(
            "/usr/bin/python3 -c '{CLIENT}' {} {} \"$SSH_AUTH_SOCK\"; cat {}; echo changed >> {} 2>/dev/null; \
             chmod 600 {} 2>/dev/null && echo CHMODDED; true",
            pg.display(),
            top.display(),
            data.display(),
            data.display(),
            pg.display()
        );
        let (mut cmd, report) = sandbox.run_command(&[], &["sh", "-c", &script]);
        cmd.env("SSH_AUTH_SOCK", &agent);
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        for (path, reply) in [(&pg, "postgres"), (&top, "mysql"), (&agent, "agent")] {
            let line = format!("{} {reply}", path.display());
            assert!(
                run.stdout.contains(&line),
                "{line} missing:\n{}\n{}",
                run.stdout,
                run.stderr
            );
        }
        assert!(run.stdout.contains("precious"), "{}", run.stdout);
        // The bound sockets are read-only: the command cannot change the host's socket inode.
        assert!(!run.stdout.contains("CHMODDED"), "{}", run.stdout);
        assert_eq!(
            fs::metadata(&pg).unwrap().mode() & 0o777,
            0o777,
            "the socket's mode"
        );
        assert_eq!(
            fs::read_to_string(&data).unwrap(),
            "precious\n",
            "a host file changed"
        );
        let sockets = run.report()["protection"]["tmp"]["sockets"].to_string();
        for path in [&pg, &top, &agent] {
            assert!(sockets.contains(path.to_str().unwrap()), "{sockets}");
        }
        sandbox.assert_namespace_empty();
    }
}

/// Listens on `COUNT` unix sockets `DIR/s0`.. (never accepting); touches `DIR/ready` once they
/// listen. Usage: `python3 -c FLOOD DIR COUNT`.
const FLOOD: &str = r#"
import os, signal, socket, sys
d, n = sys.argv[1], int(sys.argv[2])
socks = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.bind(f"{d}/s{i}")
    s.listen(1)
    socks.append(s)
open(f"{d}/ready", "w").close()
signal.pause()
"#;

#[test]
fn another_users_sockets_under_tmp_cannot_crowd_out_the_named_one() {
    if !common::root_or_skip("sockets of another user") {
        return;
    }
    let (sandbox, place) = in_tmp(Sandbox::new("tmp-flood"));
    // Another user's 300 listening sockets, and that user's agent, named by SSH_AUTH_SOCK,
    // sorting after them.
    for dir in ["a-flood", "z-agent"] {
        fs::create_dir(place.path(dir)).unwrap();
        std::os::unix::fs::chown(place.path(dir), Some(common::NOBODY), None).unwrap();
    }
    let flood = python_as_nobody(FLOOD)
        .arg(place.path("a-flood"))
        .arg("300")
        .spawn()
        .unwrap();
    let _flood = KillOnDrop(flood, place.path("a-flood/ready"));
    wait_for(&place.path("a-flood/ready"), &_flood.0);
    let agent = place.path("z-agent/agent.1");
    let listener = python_as_nobody(LISTENER)
        .arg(&agent)
        .args(["agent", sandbox.marker()])
        .spawn()
        .unwrap();
    let _agent = KillOnDrop(listener, agent.clone());
    wait_for(
        &PathBuf::from(format!("{}.ready", agent.display())),
        &_agent.0,
    );
    let script = format!("/usr/bin/python3 -c '{CLIENT}' \"$SSH_AUTH_SOCK\"");
    let (mut cmd, report) = sandbox.run_command(&[], &["sh", "-c", &script]);
    cmd.env("SSH_AUTH_SOCK", &agent);
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    let line = format!("{} agent", agent.display());
    assert!(run.stdout.contains(&line), "{}\n{}", run.stdout, run.stderr);
    let tmp = &run.report()["protection"]["tmp"];
    let bound = tmp["sockets"].as_array().unwrap();
    assert!(
        bound.len() < 100,
        "{} of another user's sockets bound",
        bound.len()
    );
    assert!(
        !tmp["sockets_left_out"].as_array().unwrap().is_empty(),
        "{tmp}"
    );
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    sandbox.assert_namespace_empty();
}

#[test]
fn a_socket_name_with_a_newline_forges_no_listening_socket() {
    if !common::root_or_skip("sockets of another user") {
        return;
    }
    let (sandbox, place) = in_tmp(Sandbox::new("tmp-forge"));
    let forged = place.path("forged");
    // What /proc/net/unix would print for a listening socket at `forged`, after a newline in
    // the name of a real one.
    let name = format!(
        "{}/x\n0000000000000000: 00000002 00000000 00010000 0001 01 1 {}",
        place.0.display(),
        forged.display()
    );
    let parent = Path::new(&name).parent().unwrap();
    fs::create_dir_all(parent).unwrap();
    chmod(parent, 0o777);
    let listener = python_as_nobody(LISTENER)
        // Relative to `place`: sun_path holds 108 bytes.
        .arg(
            name.strip_prefix(&format!("{}/", place.0.display()))
                .unwrap(),
        )
        .args(["forger", sandbox.marker()])
        .current_dir(&place.0)
        .spawn()
        .unwrap();
    let _listener = KillOnDrop(listener, PathBuf::from(&name));
    wait_for(&PathBuf::from(format!("{name}.ready")), &_listener.0);
    // A socket file does exist at the forged path (its socket closed): only a parser fooled by
    // the newline would bind it.
    let made = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
        ])
        .arg(&forged)
        .status()
        .unwrap();
    assert!(made.success());
    let run = sandbox.run(&[], &["true"]);
    run.assert_status(0);
    let sockets = run.report()["protection"]["tmp"]["sockets"].to_string();
    assert!(!sockets.contains("/forged\""), "{sockets}");
    sandbox.assert_namespace_empty();
}

/// A server process killed (and its socket removed) on drop.
struct KillOnDrop(Child, PathBuf);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = fs::remove_file(&self.1);
    }
}

#[test]
fn exclusive_locks_still_exclude_and_a_nested_run_works_inside_a_private_tmp() {
    let (sandbox, place) = in_tmp(Sandbox::new("tmp-locks"));
    let machine = place.path("machine-locks");
    let file = |name: &str| sandbox.scratch().join(name);
    let wait = |name: &str| {
        format!(
            "while [ ! -e {} ]; do sleep 0.05; done",
            file(name).display()
        )
    };
    // Nested runs keep their roots in the state dir the run names (inside its root): the outer
    // namespace is read-only to the command, but its user locks are shared.
    let nested = "\"$CRT_BIN\" run";
    // An outer run that, once told to, tries the machine lock and the user lock from inside its
    // private /tmp, then runs a nested run of its own.
    let outer = |name: &str| {
        let script = format!(
            "touch {ready}; {wait_go}; \
             {nested} --lock-scope machine --exclusive m --lock-timeout 0 -- true; echo machine=$?; \
             {nested} --exclusive u --lock-timeout 0 -- true; echo user=$?; \
             {nested} --exclusive own -- echo nested-ran",
            ready = file(&format!("{name}.ready")).display(),
            wait_go = wait(&format!("{name}.go")),
        );
        let (mut cmd, _) = sandbox.run_command(&[], &["sh", "-c", &script]);
        cmd.env("CLEANROOM_MACHINE_LOCK_DIR", &machine);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        wait_for(&file(&format!("{name}.ready")), &child);
        child
    };
    let finish = |name: &str, child: Child| {
        fs::write(file(&format!("{name}.go")), "").unwrap();
        let out = sandbox.wait_for_runner(child, Duration::from_secs(60));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{name}: {text}");
        for expected in ["machine=125", "user=125", "nested-ran"] {
            assert!(
                text.contains(expected),
                "{name}: {expected} missing:\n{text}"
            );
        }
        text
    };
    // The first outer run starts before the machine lock directory exists.
    let early = outer("early");
    // Holders outside every private /tmp: the machine lock (which makes its directory) and a
    // user lock of the same state dir, held until `done`.
    let mut holders = Vec::new();
    for (name, args) in [
        (
            "machine",
            &["--lock-scope", "machine", "--exclusive", "m"][..],
        ),
        ("user", &["--exclusive", "u"][..]),
    ] {
        let hold = format!("touch {}; {}", file(name).display(), wait("done"));
        let mut command = sandbox.command(&[&["run"], args, &["--", "sh", "-c", &hold]].concat());
        command.env("CLEANROOM_MACHINE_LOCK_DIR", &machine);
        let holder = command.spawn().unwrap();
        wait_for(&file(name), &holder);
        holders.push(holder);
    }
    // Inside the early run, the directory the holder made is not the host's (only the run's view
    // of it): its nested run refuses rather than take a lock that excludes nobody.
    let text = finish("early", early);
    assert!(text.contains("not the host's"), "{text}");
    // A run started now keeps the host's directory: its nested run waits for the holder.
    let late = outer("late");
    let text = finish("late", late);
    assert!(!text.contains("did not exist"), "{text}");
    fs::write(file("done"), "").unwrap();
    for mut holder in holders {
        assert!(holder.wait().unwrap().success());
    }
    sandbox.assert_namespace_holds_only(&["locks"]);
}

#[test]
fn the_state_dir_under_tmp_is_read_only_to_the_command_and_nested_runs_keep_roots_in_its_root() {
    for (sandbox, _place) in sandboxes("tmp-ns-ro") {
        let state = sandbox.state().to_path_buf();
        let script = format!(
            "echo junk > {}/junk || echo refused; echo \"state=$CLEANROOM_STATE_DIR\"",
            state.display()
        );
        let run = sandbox.run(&[], &["sh", "-c", &script]);
        run.assert_status(0);
        assert!(
            run.stdout.contains("refused"),
            "{}\n{}",
            run.stdout,
            run.stderr
        );
        assert!(
            !state.join("junk").exists(),
            "the command wrote into its state dir"
        );
        let nested = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("state="))
            .unwrap();
        assert!(
            Path::new(nested).starts_with(&state) && nested.ends_with("/nested"),
            "nested runs' state dir {nested} is not inside the run's root"
        );
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn another_owners_open_directory_in_tmp_is_writable_and_a_missing_output_dir_is_warned_of() {
    for (sandbox, place) in sandboxes("tmp-edges") {
        // TmpPlace is root's, mode 1777, directly in /tmp: an ordinary user's overlay cannot
        // copy it up, so its upper directory is made first.
        let file = place.path("written");
        let target = place.path("target");
        let script = format!("echo x > {} && echo wrote", file.display());
        let (mut cmd, report) = sandbox.run_command(&[], &["sh", "-c", &script]);
        cmd.env("CARGO_TARGET_DIR", &target);
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert!(run.stdout.contains("wrote"), "{}", run.stderr);
        assert!(!file.exists(), "the write landed on the host");
        assert!(
            run.stderr.contains("CARGO_TARGET_DIR") && run.stderr.contains("does not exist"),
            "{}",
            run.stderr
        );
        let names = run.report()["tmp"].to_string();
        assert!(names.contains(sandbox.marker()), "{names}");
        sandbox.assert_namespace_empty();
    }
    // --share-tmp is checked whatever the mode.
    let sandbox = Sandbox::new("tmp-share-off");
    let refused = sandbox.run(&["--protect", "off", "--share-tmp", "/etc"], &["true"]);
    refused.assert_status(125);
    assert!(
        refused.stderr.contains("--share-tmp /etc"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_machine_lock_directory_inside_a_shared_path_is_the_hosts() {
    let (sandbox, place) = in_tmp(Sandbox::new("tmp-lock-shared"));
    let locks = place.path("share/locks");
    fs::create_dir_all(&locks).unwrap();
    chmod(&locks, 0o1777);
    let nested = "\"$CRT_BIN\" run --exclusive x --lock-scope machine -- echo nested-ran";
    let share = place.path("share");
    let (mut cmd, report) = sandbox.run_command(
        &["--share-tmp", share.to_str().unwrap()],
        &["sh", "-c", nested],
    );
    cmd.env("CLEANROOM_MACHINE_LOCK_DIR", &locks);
    let run = sandbox.finish(cmd, &report);
    run.assert_status(0);
    assert!(run.stdout.contains("nested-ran"), "{}", run.stderr);
    sandbox.assert_namespace_empty();
}

#[test]
fn where_tmp_cannot_be_private_the_run_says_so_once_and_require_protection_refuses() {
    let (sandbox, _place) = in_tmp(Sandbox::new("tmp-fallback"));
    let started = sandbox.scratch().join("started");
    let touch = ["touch", started.to_str().unwrap()];
    let (mut cmd, report) = sandbox.run_command(&["--require-protection"], &touch);
    cmd.env("CLEANROOM_TEST_NO_MOUNT_NS", "1");
    let refused = sandbox.finish(cmd, &report);
    refused.assert_status(125);
    assert!(
        refused.stderr.contains("private /tmp"),
        "{}",
        refused.stderr
    );
    assert!(
        !started.exists(),
        "the command ran although protection was required"
    );

    let (mut cmd, report) = sandbox.run_command(&[], &touch);
    cmd.env("CLEANROOM_TEST_NO_MOUNT_NS", "1");
    let warned = sandbox.finish(cmd, &report);
    warned.assert_status(0);
    assert_eq!(
        warned.stderr.matches("warning").count(),
        1,
        "{}",
        warned.stderr
    );
    assert!(
        warned.stderr.contains("/tmp and /var/tmp"),
        "{}",
        warned.stderr
    );
    assert_eq!(
        warned.report()["protection"]["tmp"]["kind"],
        "host_fallback"
    );
    assert_eq!(
        warned.report()["protection"]["ipc"]["kind"],
        "host_fallback"
    );
    sandbox.assert_namespace_empty();
}

#[test]
fn a_root_command_cannot_reach_the_hosts_tmp_through_the_mount_below() {
    if !common::root_or_skip("a command running as root") {
        return;
    }
    let (sandbox, place) = in_tmp(Sandbox::new("tmp-clone"));
    let program = common::compile_c(sandbox.scratch(), "clone_below", CLONE_BELOW);
    let target = place.path("escaped");
    let relative = target
        .strip_prefix("/")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    // With Landlock the host's /tmp has no write rule; without it (best effort), only the
    // dropped CAP_SYS_ADMIN keeps the command from cloning the mount below the private /tmp.
    for landlock_absent in ["0", "1"] {
        let (mut cmd, report) = sandbox.run_command(&[], &[program.to_str().unwrap(), &relative]);
        cmd.env("CLEANROOM_TEST_LANDLOCK_ABSENT", landlock_absent);
        let run = sandbox.finish(cmd, &report);
        run.assert_status(0);
        assert!(
            run.stdout.contains("refused"),
            "{landlock_absent}: {}",
            run.stdout
        );
        assert!(
            !target.exists(),
            "the command wrote {} on the host",
            target.display()
        );
    }
    sandbox.assert_namespace_empty();
}

/// Mounts a tmpfs at `$1` (only root may enter its parent) and a world-writable one holding
/// `host.txt` at `$2`, runs the rest of the arguments, then lists `$2` and prints its
/// `host.txt` into `$3`. Run in a mount namespace of its own, so no other test sees the mounts.
const WITH_HOST_MOUNTS: &str = r#"
mount -t tmpfs -o mode=0755 cleanroom-test "$1" && mount -t tmpfs -o mode=1777 cleanroom-test "$2" \
    && echo host > "$2/host.txt" && chmod 666 "$2/host.txt" || exit 99
hidden=$1 open=$2 after=$3
shift 3
"$@"
rc=$?
ls "$open" > "$after" && cat "$open/host.txt" >> "$after"
exit $rc
"#;

/// `cmd` (a run of the binary) inside a new mount namespace with the mounts of
/// [`WITH_HOST_MOUNTS`] at `hidden` and `open`; what `open` holds afterwards goes to `after`.
fn with_host_mounts(cmd: &Command, hidden: &Path, open: &Path, after: &Path) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped
        .args([
            "-m",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            WITH_HOST_MOUNTS,
            "sh",
        ])
        .args([hidden, open, after])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

#[test]
fn host_mounts_under_tmp_neither_stop_a_run_nor_take_its_writes() {
    if !common::root_or_skip("mounting on the host") {
        return;
    }
    for (i, (sandbox, place)) in sandboxes("tmp-submount").into_iter().enumerate() {
        // A mount in a directory only root may enter (another user's FUSE mount is as
        // unreachable), and one everybody may write.
        let locked = place.path("locked");
        fs::create_dir_all(locked.join("inner")).unwrap();
        chmod(&locked, 0o700);
        let open = place.path("open");
        fs::create_dir(&open).unwrap();
        let after = sandbox.scratch().join("after.txt");
        let script = format!(
            "cat {0}/host.txt; echo run > {0}/new.txt; echo run >> {0}/host.txt; echo ran",
            open.display()
        );
        let command = |args: &[&str]| {
            let (cmd, report) = sandbox.run_command(args, &["sh", "-c", &script]);
            let cmd = with_host_mounts(&cmd, &locked.join("inner"), &open, &after);
            sandbox.finish(cmd, &report)
        };
        let run = command(&[]);
        run.assert_status(0);
        assert!(
            run.stdout.contains("host\nran"),
            "{}\n{}",
            run.stdout,
            run.stderr
        );
        let tmp = &run.report()["protection"]["tmp"];
        if i == 0 {
            // Root's overlay keeps the host's mounts, read-only: nothing lands in them.
            assert_eq!(tmp["kind"], "private", "{tmp}");
            assert_eq!(
                fs::read_to_string(&after).unwrap(),
                "host.txt\nhost\n",
                "a write landed in the host's mount"
            );
        } else {
            // The kernel refuses an ordinary user's overlay over a host mount: the run shares
            // /tmp, says so once, and --require-protection refuses.
            assert_eq!(tmp["kind"], "host_fallback", "{tmp}");
            assert_eq!(run.stderr.matches("warning").count(), 1, "{}", run.stderr);
            assert!(run.stderr.contains("mount at"), "{}", run.stderr);
            let refused = command(&["--require-protection"]);
            refused.assert_status(125);
            assert!(
                refused.stderr.contains("private /tmp"),
                "{}",
                refused.stderr
            );
        }
        sandbox.assert_namespace_empty();
    }
}

#[test]
fn host_tmp_gives_the_hosts_tmp_and_share_tmp_keeps_one_path_the_hosts() {
    let (sandbox, place) = in_tmp(Sandbox::new("tmp-opt-out"));
    let shared = place.path("shared");
    fs::create_dir(&shared).unwrap();
    let write = |args: &[&str], path: &Path| -> Run {
        let script = format!("echo x > {}", path.display());
        sandbox.run(args, &["sh", "-c", &script])
    };
    let run = write(&["--host-tmp"], &place.path("host-tmp"));
    run.assert_status(0);
    assert!(place.path("host-tmp").exists());
    assert_eq!(run.report()["protection"]["tmp"]["kind"], "host");

    let share = shared.to_str().unwrap();
    let run = write(&["--share-tmp", share], &shared.join("kept"));
    run.assert_status(0);
    assert!(
        shared.join("kept").exists(),
        "--share-tmp {share} was not the host's"
    );
    let run = write(&["--share-tmp", share], &place.path("next-to-it"));
    run.assert_status(0);
    assert!(
        !place.path("next-to-it").exists(),
        "the rest of /tmp was not private"
    );

    let refused = write(&["--share-tmp", "/etc"], &place.path("never"));
    refused.assert_status(125);
    assert!(
        refused.stderr.contains("--share-tmp /etc"),
        "{}",
        refused.stderr
    );

    // The same from cleanroom.toml (discovered from the working directory, the scratch dir).
    let config = sandbox.scratch().join("cleanroom.toml");
    fs::write(&config, format!("[run]\nshare-tmp = [\"{share}\"]\n")).unwrap();
    write(&[], &shared.join("from-config")).assert_status(0);
    assert!(
        shared.join("from-config").exists(),
        "share-tmp in the config"
    );
    // A path that cannot be shared is named where the file gives it.
    fs::write(&config, "[run]\n\nshare-tmp = [\n  \"/etc\",\n]\n").unwrap();
    let refused = write(&[], &place.path("never"));
    refused.assert_status(125);
    let said = format!(
        "{}:4: run.share-tmp[0] = /etc: not beneath",
        config.display()
    );
    assert!(
        refused.stderr.contains(&said),
        "{said:?}:\n{}",
        refused.stderr
    );
    fs::write(&config, "[run]\nhost-tmp = true\n").unwrap();
    write(&[], &place.path("host-from-config")).assert_status(0);
    assert!(
        place.path("host-from-config").exists(),
        "host-tmp in the config"
    );
    sandbox.assert_namespace_empty();
}

#[tokio::test]
async fn serves_processes_share_one_private_tmp_that_a_workspace_write_sandbox_may_write() {
    for server in [Server::start(&[]), Server::start_unprivileged(&[])] {
        let name = common::unique_marker("tmp-serve");
        let _cleanup = [
            Leftovers(name.clone()),
            Leftovers(format!("{name}-managed")),
        ];
        let work = server.work();
        let mut c = server.client().await;
        let (_, out, code) = c
            .run(
                "w",
                &work,
                serde_json::Value::Null,
                &format!("echo shared > /tmp/{name}"),
            )
            .await;
        assert_eq!(code, 0, "{out}");
        let (_, out, code) = c
            .run(
                "r",
                &work,
                serde_json::Value::Null,
                &format!("cat /tmp/{name}"),
            )
            .await;
        assert_eq!((code, out.as_str()), (0, "shared\n"));
        // Codex's workspace-write makes /tmp writable: the private one this process sees (its
        // rule is opened inside the environment's namespaces, not on the host's /tmp).
        let script = format!("cat /tmp/{name} && echo managed > /tmp/{name}-managed && echo ok");
        let (_, out, code) = c.run("m", &work, workspace_write(&work), &script).await;
        assert_eq!((code, out.as_str()), (0, "shared\nok\n"));
        for leaked in [name.clone(), format!("{name}-managed")] {
            assert!(
                !common::exists(&Path::new("/tmp").join(&leaked)),
                "{leaked} on the host"
            );
        }
        server.stop();
    }
}

/// A path under /tmp (a directory or a file), removed with what is in it on drop.
struct HostDir(PathBuf);

impl Drop for HostDir {
    fn drop(&mut self) {
        if fs::remove_dir_all(&self.0).is_err() {
            let _ = fs::remove_file(&self.0);
        }
    }
}

#[tokio::test]
async fn a_serve_process_working_under_tmp_writes_the_hosts_directory() {
    for server in [Server::start(&[]), Server::start_unprivileged(&[])] {
        let mut c = server.client().await;
        // Made on the host after the server started (its private /tmp exists already), as a
        // checkout an agent clones into /tmp.
        let dir = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-serve-cwd")));
        fs::create_dir(&dir.0).unwrap();
        chmod(&dir.0, 0o777);
        fs::write(dir.0.join("src.txt"), "v1\n").unwrap();
        chmod(&dir.0.join("src.txt"), 0o666);
        let (_, out, code) = c
            .run(
                "p",
                &dir.0,
                serde_json::Value::Null,
                "cat src.txt && echo built > out.txt",
            )
            .await;
        assert_eq!((code, out.as_str()), (0, "v1\n"));
        // A managed sandbox that may write its working directory writes the host's, too.
        let (_, out, code) = c
            .run(
                "m",
                &dir.0,
                workspace_write(&dir.0),
                "echo managed > managed.txt",
            )
            .await;
        assert_eq!(code, 0, "{out}");
        server.stop();
        for name in ["out.txt", "managed.txt"] {
            assert!(
                dir.0.join(name).exists(),
                "{name} was written into the server's private /tmp, not the host's directory"
            );
        }
    }
}

#[tokio::test]
async fn a_serve_cwd_under_tmp_stays_the_hosts_when_the_host_replaces_it() {
    for unprivileged in [false, true] {
        let dir = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-serve-replaced")));
        let make = |content: &str| {
            fs::create_dir(&dir.0).unwrap();
            chmod(&dir.0, 0o777);
            fs::write(dir.0.join("f"), content).unwrap();
            chmod(&dir.0.join("f"), 0o666);
        };
        make("old\n");
        let cwd = ["--cwd", dir.0.to_str().unwrap()];
        let server = match unprivileged {
            false => Server::start(&cwd),
            true => Server::start_unprivileged(&cwd),
        };
        let mut c = server.client().await;
        let (_, out, code) = c.run("a", &dir.0, serde_json::Value::Null, "cat f").await;
        assert_eq!((code, out.as_str()), (0, "old\n"));
        // The host re-clones the checkout while the server runs.
        fs::remove_dir_all(&dir.0).unwrap();
        make("new\n");
        let script = "cat f && echo out > out.txt";
        let (_, out, code) = c.run("b", &dir.0, serde_json::Value::Null, script).await;
        assert_eq!((code, out.as_str()), (0, "new\n"), "{unprivileged}");
        server.stop();
        assert!(
            dir.0.join("out.txt").exists(),
            "{unprivileged}: out.txt not on the host"
        );
    }
}

#[tokio::test]
async fn serve_host_tmp_and_share_tmp_keep_the_hosts_tmp() {
    let shared = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-serve-shared")));
    fs::create_dir(&shared.0).unwrap();
    let elsewhere = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-serve-private")));
    let host = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-serve-host")));
    let server = Server::start(&["--share-tmp", shared.0.to_str().unwrap()]);
    let mut c = server.client().await;
    let script = format!(
        "echo s > {}/f && echo p > {}",
        shared.0.display(),
        elsewhere.0.display()
    );
    let (_, out, code) = c
        .run("s", &server.work(), serde_json::Value::Null, &script)
        .await;
    assert_eq!(code, 0, "{out}");
    server.stop();
    assert!(
        shared.0.join("f").exists(),
        "--share-tmp was not the host's"
    );
    assert!(!elsewhere.0.exists(), "the rest of /tmp was not private");

    let server = Server::start(&["--host-tmp"]);
    let mut c = server.client().await;
    let script = format!("echo h > {}", host.0.display());
    let (_, out, code) = c
        .run("h", &server.work(), serde_json::Value::Null, &script)
        .await;
    assert_eq!(code, 0, "{out}");
    server.stop();
    assert!(host.0.exists(), "--host-tmp did not give the host's /tmp");
}

/// Removes every `/tmp/<marker>-*` a test made (directories too), even on failure.
struct TmpNames(String);

impl Drop for TmpNames {
    fn drop(&mut self) {
        let prefix = format!("{}-", self.0);
        for entry in fs::read_dir("/tmp").into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let path = entry.path();
                let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
            }
        }
    }
}

#[tokio::test]
async fn serves_fs_calls_see_the_private_tmp_its_processes_see() {
    for server in [Server::start(&[]), Server::start_unprivileged(&[])] {
        let name = common::unique_marker("tmp-fs");
        let _cleanup = TmpNames(name.clone());
        let tmp = |suffix: &str| PathBuf::from(format!("/tmp/{name}-{suffix}"));
        let work = server.work();
        let mut c = server.client().await;
        let made = format!(
            "echo process > {} && mkdir {}",
            tmp("p").display(),
            tmp("ro").display()
        );
        let (_, out, code) = c.run("made", &work, serde_json::Value::Null, &made).await;
        assert_eq!(code, 0, "{out}");
        let read = json!({"path": uri(&tmp("p")), "sandbox": null});
        let data = c.call("fs/readFile", read).await.unwrap();
        assert_eq!(data["dataBase64"], BASE64.encode("process\n"));
        // A read-only entry beneath /tmp makes the thread's cover descend /tmp, so a new entry
        // there is made by the forked child, inside the environment's namespaces.
        let mut child_route = workspace_write(&work);
        child_route["permissions"]["file_system"]["entries"]
            .as_array_mut()
            .unwrap()
            .push(path_entry(&tmp("ro"), "read"));
        let routes = [
            serde_json::Value::Null,
            workspace_write(&work),
            child_route.clone(),
        ];
        for (i, sandbox) in routes.into_iter().enumerate() {
            let file = json!({"path": uri(&tmp(&format!("f{i}"))), "dataBase64": BASE64.encode("fs"),
                              "sandbox": sandbox});
            c.call("fs/writeFile", file)
                .await
                .unwrap_or_else(|e| panic!("route {i}: {e:?}"));
            let dir = json!({"path": uri(&tmp(&format!("d{i}/a/b"))), "sandbox": sandbox});
            c.call("fs/createDirectory", dir)
                .await
                .unwrap_or_else(|e| panic!("route {i}: {e:?}"));
        }
        let denied = json!({"path": uri(&tmp("ro").join("x")), "dataBase64": BASE64.encode("no"),
                            "sandbox": child_route});
        assert_eq!(c.call("fs/writeFile", denied).await.unwrap_err().0, -32600);
        let removed = json!({"path": uri(&tmp("d2")), "sandbox": child_route});
        c.call("fs/remove", removed).await.unwrap();
        let check = format!(
            "cat {f0} {f1} {f2} && test -d {d0}/a/b && test -d {d1}/a/b && test ! -e {d2} && \
             test ! -e {ro}/x && echo seen",
            f0 = tmp("f0").display(),
            f1 = tmp("f1").display(),
            f2 = tmp("f2").display(),
            d0 = tmp("d0").display(),
            d1 = tmp("d1").display(),
            d2 = tmp("d2").display(),
            ro = tmp("ro").display(),
        );
        let (_, out, code) = c.run("check", &work, serde_json::Value::Null, &check).await;
        assert_eq!((code, out.as_str()), (0, "fsfsfsseen\n"));
        let prefix = format!("{name}-");
        let on_host: Vec<_> = fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .collect();
        assert!(on_host.is_empty(), "on the host: {on_host:?}");
        server.stop();
    }
}

/// No `sandbox`.
fn null_sandbox() -> serde_json::Value {
    serde_json::Value::Null
}

/// `fs/readFile` of `path` under `sandbox`: the text, or the error code.
async fn read_text(
    c: &mut serve_support::Client,
    path: &Path,
    sandbox: &serde_json::Value,
) -> Result<String, i64> {
    let read = json!({"path": uri(path), "sandbox": sandbox});
    let data = c.call("fs/readFile", read).await.map_err(|e| e.0)?;
    let bytes = BASE64.decode(data["dataBase64"].as_str().unwrap()).unwrap();
    Ok(String::from_utf8(bytes).unwrap())
}

/// `fs/writeFile` of `text` to `path` under `sandbox`.
async fn write_text(
    c: &mut serve_support::Client,
    path: &Path,
    text: &str,
    sandbox: &serde_json::Value,
) {
    let write = json!({"path": uri(path), "dataBase64": BASE64.encode(text), "sandbox": sandbox});
    c.call("fs/writeFile", write)
        .await
        .unwrap_or_else(|e| panic!("fs/writeFile {}: {e:?}", path.display()));
}

#[tokio::test]
async fn serves_fs_calls_see_a_workspace_under_tmp_as_its_processes_do() {
    for (who, server) in [
        ("root", Server::start(&[])),
        ("an ordinary user", Server::start_unprivileged(&[])),
    ] {
        let mut c = server.client().await;
        // The agent's checkout, made on the host after the server started.
        let dir = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-fs-work")));
        fs::create_dir(&dir.0).unwrap();
        chmod(&dir.0, 0o777);
        let sandbox = workspace_write(&dir.0);
        write_text(&mut c, &dir.0.join("fs.txt"), "fs\n", &sandbox).await;
        // Looked for before the process makes it (as an agent checks, then builds).
        let made = dir.0.join("proc.txt");
        assert_eq!(
            read_text(&mut c, &made, &sandbox).await,
            Err(-32004),
            "{who}"
        );
        let script = "cat fs.txt; echo proc > proc.txt";
        let (_, out, code) = c.run("p", &dir.0, sandbox.clone(), script).await;
        assert_eq!(
            (code, out.as_str()),
            (0, "fs\n"),
            "{who}: the process does not see what fs/writeFile wrote in its workspace"
        );
        assert_eq!(
            read_text(&mut c, &made, &sandbox).await,
            Ok("proc\n".into()),
            "{who}: fs/readFile does not see what the process wrote in its workspace"
        );
        // The rest of /tmp stays the private one for the same call (the sandbox may write /tmp).
        let elsewhere = HostDir(PathBuf::from(format!("{}-elsewhere", dir.0.display())));
        write_text(&mut c, &elsewhere.0, "private\n", &sandbox).await;
        assert!(
            !elsewhere.0.exists(),
            "{who}: fs/writeFile wrote the host's /tmp"
        );
        let script = format!("cat {}", elsewhere.0.display());
        let (_, out, code) = c.run("e", &server.work(), null_sandbox(), &script).await;
        assert_eq!((code, out.as_str()), (0, "private\n"), "{who}");
        // A call without a sandbox (Codex's danger-full-access) reaches the host's tree beneath
        // /tmp as it does anywhere else: the directory it writes in is the host's, so the file
        // outlives the server; a new name directly in /tmp stays the private /tmp's.
        let null = serde_json::Value::Null;
        let unsandboxed = dir.0.join("unsandboxed.txt");
        write_text(&mut c, &unsandboxed, "u\n", &null).await;
        assert_eq!(
            fs::read_to_string(&unsandboxed).ok().as_deref(),
            Some("u\n"),
            "{who}: an fs/* call without a sandbox did not write the host's directory"
        );
        let top = HostDir(PathBuf::from(format!("{}-top", dir.0.display())));
        write_text(&mut c, &top.0, "top\n", &null).await;
        assert!(!top.0.exists(), "{who}: a new name in /tmp is the host's");
        server.stop();
        for name in ["fs.txt", "proc.txt", "unsandboxed.txt"] {
            assert!(
                dir.0.join(name).exists(),
                "{who}: {name} is not in the host's workspace"
            );
        }
    }
}

#[tokio::test]
async fn serves_fs_calls_under_tmp_work_when_their_sandbox_hides_the_servers_checkout() {
    // The server works in a checkout under /tmp (the suite run from a copy there); a call's
    // sandbox that gives that checkout no access hides it in the call's namespace, where the
    // child that sets that namespace up must not need its working directory.
    for ordinary in [false, true] {
        let checkout = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-fs-checkout")));
        let cwd = checkout.0.join("a crate");
        fs::create_dir_all(checkout.0.join(".git")).unwrap();
        fs::create_dir(&cwd).unwrap();
        chmod(&checkout.0, 0o755);
        chmod(&cwd, 0o755);
        let ws = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-fs-ws")));
        fs::create_dir(&ws.0).unwrap();
        chmod(&ws.0, 0o777);
        let outside = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-fs-out")));
        fs::write(&outside.0, "o").unwrap();
        chmod(&outside.0, 0o644);
        let server = Server::start_prepared(&[], ordinary, |_, command| {
            command.current_dir(&cwd);
        });
        let mut c = server.client().await;
        let sandbox = managed(
            &ws.0,
            vec![
                special("root", None, "read"),
                path_entry(&checkout.0, "none"),
                special("project_roots", None, "write"),
            ],
            "restricted",
        );
        let read = read_text(&mut c, &outside.0, &sandbox).await;
        assert_eq!(read, Ok("o".into()), "ordinary: {ordinary}");
        let hidden = read_text(&mut c, &checkout.0.join(".git"), &sandbox).await;
        assert!(matches!(hidden, Err(-32600 | -32004)), "{hidden:?}");
        write_text(&mut c, &ws.0.join("in.txt"), "in\n", &sandbox).await;
        server.stop();
        assert!(ws.0.join("in.txt").exists(), "ordinary: {ordinary}");
    }
}

#[tokio::test]
async fn serves_fs_calls_follow_share_tmp_and_host_tmp() {
    let shared = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-fs-shared")));
    fs::create_dir(&shared.0).unwrap();
    chmod(&shared.0, 0o777);
    let host = HostDir(Path::new("/tmp").join(common::unique_marker("tmp-fs-host")));
    let null = serde_json::Value::Null;
    let share = ["--share-tmp", shared.0.to_str().unwrap()];
    for (who, server) in [
        ("root", Server::start(&share)),
        ("an ordinary user", Server::start_unprivileged(&share)),
    ] {
        let mut c = server.client().await;
        let (written, made) = (shared.0.join("fs.txt"), shared.0.join("proc.txt"));
        write_text(&mut c, &written, "fs\n", &null).await;
        let script = format!(
            "cat {} && echo proc > {}",
            written.display(),
            made.display()
        );
        let (_, out, code) = c.run("s", &server.work(), null.clone(), &script).await;
        assert_eq!((code, out.as_str()), (0, "fs\n"), "{who}");
        assert_eq!(read_text(&mut c, &made, &null).await, Ok("proc\n".into()));
        server.stop();
        assert!(
            written.exists(),
            "{who}: fs/writeFile did not keep --share-tmp the host's"
        );
        fs::remove_file(&written).unwrap();
        fs::remove_file(&made).unwrap();
    }
    let server = Server::start(&["--host-tmp"]);
    let mut c = server.client().await;
    write_text(&mut c, &host.0, "fs\n", &null).await;
    assert!(
        host.0.exists(),
        "fs/writeFile did not write the host's /tmp under --host-tmp"
    );
    let (_, out, code) = c
        .run(
            "h",
            &server.work(),
            null.clone(),
            &format!("cat {}", host.0.display()),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "fs\n"));
    server.stop();
}
