//! Shared harness of the `cleanroom` integration tests: a private state dir and scratch dir per
//! test (under /dev/shm, removed on drop), the real binary run against them, a unique marker per
//! test, and survivor checks that read /proc directly instead of trusting the runner's report.
//!
//! Escapee payloads record their pid in `$CRT_DIR/<name>.pid` once they run, so the command can
//! wait for them before exiting and the test can check each of them by pid afterwards.

#![allow(dead_code)]

#[path = "../../../cleanroom/tests/support/reach.rs"]
mod reach;
#[path = "../../../cleanroom/tests/support/skip.rs"]
mod skip;
#[allow(unused_imports)]
pub use reach::*;
#[allow(unused_imports)]
pub use skip::*;

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_cleanroom");

/// The uid the unprivileged tests run as (nobody).
pub const NOBODY: u32 = 65534;

/// A payload that writes its pid to `$CRT_DIR/<name>.pid` (atomically) and sleeps; with a third
/// argument `hold` it ignores SIGTERM; with `term` it records a SIGTERM in `$CRT_DIR/<name>.term`
/// and exits; with `fork` it ignores SIGTERM and forks children named MARKER (`sleep 300` with
/// the marker as argv[0]) every millisecond until it is killed.
/// Usage: `perl sleeper.pl NAME MARKER [hold|term|fork]`.
const SLEEPER: &str = r#"
my ($name, $marker, $mode) = @ARGV;
$mode //= '';
$SIG{TERM} = 'IGNORE' if $mode eq 'hold' || $mode eq 'fork';
$SIG{CHLD} = 'IGNORE';
$SIG{TERM} = sub { open(my $t, '>', "$ENV{CRT_DIR}/$name.term"); close $t; exit 0 } if $mode eq 'term';
my $path = "$ENV{CRT_DIR}/$name.pid";
open(my $f, '>', "$path.tmp") or die "open $path.tmp: $!";
print $f "$$\n";
close $f;
rename("$path.tmp", $path) or die "rename: $!";
while ($mode eq 'fork') {
    my $pid = fork();
    if (defined $pid && $pid == 0) {
        $SIG{TERM} = 'DEFAULT';
        exec { 'sleep' } $marker, '300';
        exit 1;
    }
    select(undef, undef, undef, 0.001);
}
sleep 300 while 1;
"#;

/// Bash functions every script gets: `escapee NAME [hold]` runs the sleeper payload in the
/// foreground (callers add `&`, `setsid`, `nohup`...), `ready NAME...` waits for payloads to
/// have written their pid files, `mark_ready NAME` records the calling shell's own pid. It is a
/// builtin alone: a forked helper (`mv`) could still be running when the test signals the shell,
/// and bash, waiting for it, would then let the signal go and run on ([`Sandbox::pid_of`] waits
/// for the whole line instead of a rename).
const PRELUDE: &str = r#"
escapee() { perl "$CRT_DIR/sleeper.pl" "$1" "$CRT_MARK" "${2:-}"; }
ready() {
  local name i
  for name in "$@"; do
    for i in $(seq 1 3000); do
      [ -e "$CRT_DIR/$name.pid" ] && continue 2
      sleep 0.01
    done
    echo "payload $name never started" >&2
    exit 99
  done
}
mark_ready() { echo $$ > "$CRT_DIR/$1.pid"; }
"#;

/// A unique marker: put it in the argv of every process a test starts.
pub fn unique_marker(tag: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "crt-{tag}-{}-{}-{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The containment rungs a run can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rung {
    /// The default (`--contain auto`): a cgroup when the runner is root.
    Default,
    /// `--contain session`: subreaper + process group + loop over descendants.
    Session,
}

impl Rung {
    /// Both rungs, strongest first.
    pub const ALL: [Rung; 2] = [Rung::Default, Rung::Session];

    /// The `--contain` option for this rung.
    pub fn args(self) -> [&'static str; 2] {
        match self {
            Rung::Default => ["--contain", "auto"],
            Rung::Session => ["--contain", "session"],
        }
    }

    /// The mechanism the report must name for this rung on this machine. Not root, the
    /// default rung falls back to the session floor: then the cgroup rung goes untested, and
    /// that is recorded as a skip.
    pub fn expected_mechanism(self) -> &'static str {
        match self {
            Rung::Default if root_or_skip("the cgroup rung of --contain auto") => "cgroup",
            _ => "session",
        }
    }
}

/// Whether the tests run as root (CI does; the cgroup rung and the unprivileged tests need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// One finished run of the binary.
#[derive(Debug)]
pub struct Run {
    /// Exit status of the binary (`None`: killed by a signal).
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// The JSON report, when the run got as far as writing it.
    pub report: Option<Value>,
}

impl Run {
    /// Asserts the exit status, showing stderr when it differs.
    #[track_caller]
    pub fn assert_status(&self, expected: i32) -> &Run {
        assert_eq!(
            self.status,
            Some(expected),
            "exit status; stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The report, which must exist.
    #[track_caller]
    pub fn report(&self) -> &Value {
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report written; stderr:\n{}", self.stderr))
    }

    /// The root the report names.
    #[track_caller]
    pub fn root(&self) -> PathBuf {
        PathBuf::from(self.report()["root"].as_str().expect("report.root"))
    }

    /// Asserts the run's cgroup (if it had one) was removed with the run.
    #[track_caller]
    pub fn assert_cgroup_removed(&self) {
        if let Some(cgroup) = self.report()["containment"]["cgroup"].as_str() {
            assert!(
                !exists(Path::new(cgroup)),
                "the run's cgroup {cgroup} outlived it"
            );
        }
    }

    /// The containment mechanism the report names.
    #[track_caller]
    pub fn mechanism(&self) -> &str {
        self.report()["containment"]["mechanism"]
            .as_str()
            .expect("report.containment.mechanism")
    }
}

/// A test's private world: a state dir nobody else uses, a scratch dir for pid files, payloads
/// and victims, and a marker; everything is removed (and any marked process killed) on drop.
pub struct Sandbox {
    dir: tempfile::TempDir,
    state: PathBuf,
    scratch: PathBuf,
    marker: String,
    runs: AtomicUsize,
    /// Run the binary as this uid/gid through setpriv, from where that uid can run it.
    as_user: Option<(u32, RunnableByNobody)>,
}

impl Sandbox {
    /// A sandbox for the current user.
    pub fn new(tag: &str) -> Sandbox {
        Sandbox::build(tag, None)
    }

    /// A sandbox whose runs execute as `uid` (through `setpriv`): the state dir does not exist
    /// yet inside a sticky world-writable dir, so the unprivileged runner creates it itself.
    pub fn as_user(tag: &str, uid: u32) -> Sandbox {
        Sandbox::build(tag, Some(uid))
    }

    fn build(tag: &str, uid: Option<u32>) -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("cleanroom-it-")
            .tempdir_in("/dev/shm")
            .expect("create a sandbox in /dev/shm");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let scratch = shared.join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        if uid.is_some() {
            chmod(dir.path(), 0o755);
            chmod(&shared, 0o1777);
            chmod(&scratch, 0o777);
        }
        std::fs::write(scratch.join("sleeper.pl"), SLEEPER).unwrap();
        chmod(&scratch.join("sleeper.pl"), 0o644);
        // In the scratch dir, the runs' working directory: a run with a private /dev/shm still
        // sees it (a nested `cleanroom run` of the command).
        let as_user = uid.map(|uid| (uid, RunnableByNobody::new_in(Path::new(BIN), &scratch)));
        Sandbox {
            state: shared.join("state"),
            dir,
            scratch,
            marker: unique_marker(tag),
            runs: AtomicUsize::new(0),
            as_user,
        }
    }

    /// This sandbox with its state dir at `state` instead (under /tmp, where users' namespaces
    /// live by default); whoever made its parent removes it.
    pub fn with_state_dir(mut self, state: PathBuf) -> Sandbox {
        self.state = state;
        self
    }

    /// Gives `path` and everything in it to this sandbox's user, as a project of their own (a
    /// project root is taken only from what the user or root owns and nobody else may write).
    pub fn hand_over(&self, path: &Path) {
        if let Some((uid, _)) = &self.as_user {
            let owner = format!("{uid}:{uid}");
            let status = Command::new("chown")
                .args(["-R", &owner])
                .arg(path)
                .status();
            assert!(status.unwrap().success(), "chown {}", path.display());
        }
    }

    /// The state dir (`--state-dir`); created by the first run.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// A directory for files outside any root (pid files, victims, fixtures).
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// This test's marker.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// The binary as this sandbox's user runs it (a copy when the checkout is out of its
    /// reach); commands see it as `$CRT_BIN`.
    pub fn bin(&self) -> &Path {
        self.as_user
            .as_ref()
            .map_or(Path::new(BIN), |(_, bin)| bin.path())
    }

    /// The binary with `--state-dir` and `args`, run from the scratch dir with the payload
    /// variables (and `CRT_BIN`, [`Sandbox::bin`]) set; stdin is /dev/null.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = match &self.as_user {
            Some((uid, bin)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg(bin.path());
                c
            }
            None => Command::new(BIN),
        };
        cmd.arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .current_dir(&self.scratch)
            .env("CRT_DIR", &self.scratch)
            .env("CRT_MARK", &self.marker)
            .env("CRT_BIN", self.bin())
            .stdin(Stdio::null());
        without_cleanroom_settings(&mut cmd);
        cmd
    }

    /// `cleanroom run [run_args] --report FILE -- command...`, waited for.
    pub fn run(&self, run_args: &[&str], command: &[&str]) -> Run {
        let (cmd, report) = self.run_command(run_args, command);
        self.finish(cmd, &report)
    }

    /// Like [`Sandbox::run`] with `bash -c PRELUDE+script MARKER` as the command.
    pub fn run_bash(&self, run_args: &[&str], script: &str) -> Run {
        let (cmd, report) = self.bash_command(run_args, script);
        self.finish(cmd, &report)
    }

    /// [`Sandbox::run_bash`] with `--timeout T` before `run_args`, for each T of `timeouts` in
    /// turn until the payload `ready` had recorded its pid by the end of the run: on a loaded
    /// machine a short timeout can fire before the command got that far (before it set its
    /// traps, say). Returns the last run.
    pub fn run_bash_timed(
        &self,
        timeouts: &[&str],
        run_args: &[&str],
        script: &str,
        ready: &str,
    ) -> Run {
        let pid_file = self.scratch.join(format!("{ready}.pid"));
        let mut last = None;
        for timeout in timeouts {
            let _ = std::fs::remove_file(&pid_file);
            let mut args = vec!["--timeout", timeout];
            args.extend(run_args);
            last = Some(self.run_bash(&args, script));
            if exists(&pid_file) {
                break;
            }
        }
        last.expect("at least one timeout")
    }

    /// Builds the `run` invocation; returns it with the report path it will write.
    pub fn run_command(&self, run_args: &[&str], command: &[&str]) -> (Command, PathBuf) {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let report = self.scratch.join(format!("report-{n}.json"));
        let mut args: Vec<&OsStr> = vec![OsStr::new("run")];
        args.extend(run_args.iter().map(OsStr::new));
        args.extend([OsStr::new("--report"), report.as_os_str(), OsStr::new("--")]);
        args.extend(command.iter().map(OsStr::new));
        (self.command(&args), report)
    }

    /// The `run` invocation of `bash -c PRELUDE+script MARKER`: the marker is the shell's `$0`,
    /// so the command itself is found by the survivor checks too.
    pub fn bash_command(&self, run_args: &[&str], script: &str) -> (Command, PathBuf) {
        let full = format!("{PRELUDE}\n{script}");
        self.run_command(run_args, &["bash", "-c", &full, &self.marker])
    }

    /// Runs `cmd` to completion (at most 60 s) and collects its output and report; its stdout
    /// and stderr must reach EOF soon after it exits.
    pub fn finish(&self, mut cmd: Command, report: &Path) -> Run {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let started = Instant::now();
        let child = cmd.spawn().expect("spawn cleanroom");
        let out = self.wait_for_runner(child, Duration::from_secs(60));
        collect(
            out.status,
            out.stdout,
            out.stderr,
            started.elapsed(),
            report,
        )
    }

    /// Spawns `bash -c PRELUDE+script` under `cleanroom run`, waits until the payloads `names`
    /// are ready, sends `signal` to the runner (only the runner) and collects the run.
    pub fn run_bash_interrupted(
        &self,
        run_args: &[&str],
        script: &str,
        names: &[&str],
        signal: rustix::process::Signal,
    ) -> Run {
        let (mut cmd, report) = self.bash_command(run_args, script);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().expect("spawn cleanroom");
        if let Err(e) = self.wait_ready(names, &child) {
            self.stop_runner(&mut child);
            panic!("{e}");
        }
        send_signal(&child, signal);
        let out = self.wait_for_runner(child, Duration::from_secs(60));
        collect(
            out.status,
            out.stdout,
            out.stderr,
            started.elapsed(),
            &report,
        )
    }

    /// [`Sandbox::wait_for_runner`], then asserts the runner exited 0 (its stderr shown if not).
    pub fn assert_runner_succeeds(&self, child: Child, limit: Duration) {
        let out = self.wait_for_runner(child, limit);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits for the runner to exit, draining its piped stdout and stderr meanwhile (a run with
    /// many leaks writes more than a pipe holds). After `limit` it kills the runner and every
    /// marked process and panics. The pipes must reach EOF within 30 s of the runner's exit.
    pub fn wait_for_runner(&self, mut child: Child, limit: Duration) -> std::process::Output {
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the runner") {
                break status;
            }
            if Instant::now() > deadline {
                self.stop_runner(&mut child);
                panic!("the runner did not return within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // A hang guard: a leaked payload holding a pipe would hold it for 300 s.
        let eof = |rx: std::sync::mpsc::Receiver<Vec<u8>>, name: &str| {
            rx.recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("the runner's {name} stayed open after it exited"))
        };
        std::process::Output {
            status,
            stdout: eof(stdout, "stdout"),
            stderr: eof(stderr, "stderr"),
        }
    }

    /// Failure path: asks the runner to stop as a user would (SIGTERM: it forwards, escalates
    /// and cleans up, its cgroup included), SIGKILLs it after 15 s, then sweeps marked processes.
    pub fn stop_runner(&self, child: &mut Child) {
        send_signal(child, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        self.kill_marked();
    }

    /// SIGKILLs every process carrying this sandbox's marker, sweeping again (up to 5 s) while a
    /// fork loop may still be adding some.
    fn kill_marked(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let marked = processes_with(&self.marker);
            if marked.is_empty() || Instant::now() > deadline {
                return;
            }
            for (pid, _) in marked {
                // SAFETY: kill(2) with a pid read from /proc; no memory is involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (up to 30 s) for the pid files of `names`; fails if the runner exits first.
    pub fn wait_ready(&self, names: &[&str], runner: &Child) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        for name in names {
            while self.pid_of(name).is_none() {
                if !Path::new(&format!("/proc/{}", runner.id())).exists() {
                    return Err(format!("the runner exited before {name} was ready"));
                }
                if Instant::now() > deadline {
                    return Err(format!("{name} never became ready"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// The pid a payload recorded, if it did (the whole line: `mark_ready` writes in place).
    pub fn pid_of(&self, name: &str) -> Option<i32> {
        let line = std::fs::read_to_string(self.scratch.join(format!("{name}.pid"))).ok()?;
        line.strip_suffix('\n')?.trim().parse().ok()
    }

    /// Asserts that every payload in `names` recorded its pid (it really ran) and that neither
    /// those pids nor any process carrying this sandbox's marker is alive.
    #[track_caller]
    pub fn assert_no_survivors(&self, names: &[&str]) {
        for name in names {
            let pid = self
                .pid_of(name)
                .unwrap_or_else(|| panic!("payload {name} never ran (no pid file)"));
            if let Some(cmdline) = live_cmdline(pid) {
                assert!(
                    !cmdline.contains(&self.marker),
                    "{name} (pid {pid}) survived the run: {cmdline}"
                );
            }
        }
        let survivors = processes_with(&self.marker);
        assert!(
            survivors.is_empty(),
            "processes of the run survived it: {survivors:?}"
        );
    }

    /// The entries of the state dir (an empty list when it does not exist), but an empty
    /// `locks` (a protected run makes it for the user locks of its nested runs).
    pub fn namespace_entries(&self) -> Vec<String> {
        let locks = self.state.join("locks");
        let empty_locks = std::fs::read_dir(&locks).is_ok_and(|mut d| d.next().is_none());
        match std::fs::read_dir(&self.state) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| !(empty_locks && name == "locks"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("read {}: {e}", self.state.display()),
        }
    }

    /// Asserts the state dir holds nothing: no root, no quarantine, no pending entry.
    #[track_caller]
    pub fn assert_namespace_empty(&self) {
        self.assert_namespace_holds_only(&[]);
    }

    /// Asserts the state dir holds nothing but the named entries (e.g. `locks`, whose lock
    /// files outlive their holders by design).
    #[track_caller]
    pub fn assert_namespace_holds_only(&self, allowed: &[&str]) {
        let mut entries = self.namespace_entries();
        entries.retain(|e| !allowed.contains(&e.as_str()));
        assert!(
            entries.is_empty(),
            "the state dir {} still holds {entries:?}",
            self.state.display()
        );
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // A failed test must not leave its processes behind either.
        self.kill_marked();
        // Roots kept or left by a failing test may hold read-only directories.
        let _ = Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(self.dir.path())
            .stderr(Stdio::null())
            .status();
    }
}

/// Reads `pipe` to EOF on a thread; the bytes arrive on the returned channel (empty for `None`).
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        let _ = tx.send(bytes);
    });
    rx
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn collect(
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    elapsed: Duration,
    report: &Path,
) -> Run {
    let report = std::fs::read_to_string(report)
        .ok()
        .map(|text| serde_json::from_str(&text).expect("the report is JSON"));
    Run {
        status: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        elapsed,
        report,
    }
}

/// Removes every CLEANROOM_* variable of whoever runs the tests (CLEANROOM_ON_LEAK, _TIMEOUT,
/// ...) from `cmd`'s environment, so none changes what a test sees; a test sets the ones it
/// needs afterwards.
pub fn without_cleanroom_settings(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CLEANROOM_") {
            cmd.env_remove(name);
        }
    }
}

/// Sends `signal` to `child` alone.
pub fn send_signal(child: &Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, signal).expect("signal the runner");
}

/// The command line of `pid` if it is alive, arguments joined by spaces. A zombie leader
/// whose other threads still run (it called `pthread_exit`) is alive; its command line is read
/// through one of those threads.
pub fn live_cmdline(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
    let path = match state {
        "X" => return None,
        "Z" => std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
            .map(|t| t.path())
            .find(|t| !t.ends_with(pid.to_string()))?
            .join("cmdline"),
        _ => format!("/proc/{pid}/cmdline").into(),
    };
    let raw = std::fs::read(path).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Compiles the C program `source` into `dir/name` (with `-pthread`), runnable by everyone.
pub fn compile_c(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let out = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("run cc (gcc is needed by these tests)");
    assert!(out.status.success(), "cc {name}: {out:?}");
    chmod(&bin, 0o755);
    bin
}

/// A payload whose main thread calls `pthread_exit` while a worker thread sleeps: the leader
/// shows `Z` but the process is alive. Once the leader is a zombie it writes its pid to
/// `$CRT_DIR/$1.pid` (when `CRT_DIR` is set); its arguments carry the marker (argv[2]).
pub const THREAD_EXIT_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static char *name;
static void *worker(void *arg) {
    char path[4096], tmp[4200];
    (void)arg;
    usleep(100000);
    if (!getenv("CRT_DIR")) for (;;) sleep(1000);
    snprintf(path, sizeof path, "%s/%s.pid", getenv("CRT_DIR"), name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, path);
    for (;;) sleep(1000);
    return 0;
}
int main(int argc, char **argv) {
    pthread_t t;
    name = argc > 1 ? argv[1] : "threadexit";
    pthread_create(&t, 0, worker, 0);
    pthread_exit(0);
}
"#;

/// A fork-and-exit chain: ignores TERM; each process forks and exits at once, for argv[1]
/// generations (bounded: PID 1 here never reaps), the last one pauses. Writes its first pid to
/// `$CRT_DIR/chain.pid`; its arguments carry the marker (argv[2]).
pub const CHAIN_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000;
    char path[4096], tmp[4200];
    signal(SIGTERM, SIG_IGN);
    snprintf(path, sizeof path, "%s/chain.pid", getenv("CRT_DIR"));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, path);
    for (long i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0) { usleep(1000); continue; }
        if (p > 0) _exit(0);
    }
    for (;;) pause();
}
"#;

/// Whether `pid` is alive by the liveness rule (a zombie leader with other threads is).
pub fn is_alive_pid(pid: i32) -> bool {
    live_cmdline(pid).is_some()
}

/// Every living process (other than this one) whose arguments contain `marker`.
pub fn processes_with(marker: &str) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| live_cmdline(pid).map(|c| (pid, c)))
        .filter(|(_, cmdline)| cmdline.contains(marker))
        .collect()
}

/// Whether `path` exists (without following a final symlink).
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
