//! Helpers of the gc, list and stress tests (on top of `common`): a private state directory
//! per test, the real binary, realistic stale roots (real markers in the exact format of
//! `cleanroom::marker`, owned by a process that has really exited), tree snapshots to prove that
//! something was not touched, procfs queries, and guards that always undo what a test did to the
//! machine (bind mounts, immutable flags, stray processes).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Mode, OFlags};
use serde_json::{json, Value};

pub use cleanroom::marker::MARKER_FILE as MARKER;
/// Every directory a root may have been created with: this build's
/// [`cleanroom::root::LAYOUT_DIRS`] and the four XDG base directories earlier builds made too,
/// so fabricated roots and skeletons have the largest shape gc must still accept.
pub const LAYOUT: [&str; 9] = [
    "home",
    "tmp",
    "xdg",
    "xdg/config",
    "xdg/cache",
    "xdg/data",
    "xdg/state",
    "xdg/runtime",
    "homes",
];

pub use crate::common::{is_root, NOBODY};

/// The binary under test.
pub fn bin() -> &'static str {
    crate::common::BIN
}

/// Fails the test unless it runs as root: it needs what only root can do here (chattr, mounts,
/// other uids, cgroups). CI runs as root; a test that cannot run must not pass silently.
pub fn require_root(test: &str) {
    assert!(
        is_root(),
        "{test} needs root (chattr, mounts, other uids, cgroups); CI runs the suite as root"
    );
}

/// A string no other test or process uses.
pub fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("cr-{tag}-{}-{n}-{nanos:x}", std::process::id())
}

/// A fresh, valid run id (`<YYYYmmddTHHMMSSZ>-<16 hex>`), distinct across calls.
pub fn new_run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut random = [0u8; 4];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .unwrap();
    let hex = u32::from_ne_bytes(random);
    format!(
        "20261129T093000Z-{:04x}{:04x}{hex:08x}",
        std::process::id() & 0xffff,
        n & 0xffff
    )
}

/// The namespace name of a published root.
pub fn root_name(run_id: &str) -> String {
    format!("run-{run_id}")
}

/// A private state directory (the namespace) inside a temporary directory on tmpfs.
pub struct Sandbox {
    /// The temporary directory; everything a test creates lives below it.
    pub dir: tempfile::TempDir,
    /// The namespace (`--state-dir`), mode 0700.
    pub ns: PathBuf,
    /// `Some(uid)` when commands run as that unprivileged user.
    pub user: Option<u32>,
    /// The binary as that user can run it (a copy when the checkout is out of its reach).
    user_bin: Option<crate::common::RunnableByNobody>,
}

impl Sandbox {
    /// A namespace owned by the current user.
    pub fn new() -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("cleanroom-gctest-")
            .tempdir_in("/dev/shm")
            .unwrap();
        let ns = dir.path().join("ns");
        fs::create_dir(&ns).unwrap();
        fs::set_permissions(&ns, fs::Permissions::from_mode(0o700)).unwrap();
        Sandbox {
            dir,
            ns,
            user: None,
            user_bin: None,
        }
    }

    /// A namespace owned by [`NOBODY`], whose commands run as that user (needs root).
    pub fn for_nobody() -> Sandbox {
        let mut sandbox = Sandbox::new();
        fs::set_permissions(sandbox.dir.path(), fs::Permissions::from_mode(0o711)).unwrap();
        chown(&sandbox.ns, NOBODY);
        sandbox.user = Some(NOBODY);
        sandbox.user_bin = Some(crate::common::RunnableByNobody::new(Path::new(bin())));
        sandbox
    }

    /// The euid the namespace belongs to.
    pub fn euid(&self) -> u32 {
        self.user
            .unwrap_or_else(|| rustix::process::geteuid().as_raw())
    }

    /// A path inside the temporary directory but outside the namespace.
    pub fn outside(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `cleanroom --state-dir <ns> ARGS...`, as the sandbox's user.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = match self.user {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                // From a directory that user reaches: the checkout may lie in a 0700 one.
                c.current_dir(self.dir.path());
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg(
                        self.user_bin
                            .as_ref()
                            .map_or(Path::new(bin()), |b| b.path()),
                    );
                c
            }
            None => Command::new(bin()),
        };
        cmd.arg("--state-dir").arg(&self.ns).args(args);
        cmd.env_remove("CLEANROOM_STATE_DIR");
        cmd.env_remove("CLEANROOM_EXCLUSIVE");
        // `list` shows machine locks: a private directory keeps other users' out of the listing.
        cmd.env(
            "CLEANROOM_MACHINE_LOCK_DIR",
            self.dir.path().join("machine-locks"),
        );
        cmd
    }

    /// Runs `cleanroom ARGS...` to completion.
    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    /// `cleanroom gc --json EXTRA...`: the parsed summary and the exit code.
    pub fn gc_json(&self, extra: &[&str]) -> (Value, i32) {
        let mut args = vec!["gc", "--json"];
        args.extend_from_slice(extra);
        let out = self.output(&args);
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "gc --json printed no JSON ({e}): stdout {:?} stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (summary, out.status.code().expect("gc exited normally"))
    }

    /// `cleanroom list --json [--sizes]`, keyed by entry name.
    pub fn list(&self, sizes: bool) -> BTreeMap<String, Value> {
        let mut args = vec!["list", "--json"];
        if sizes {
            args.push("--sizes");
        }
        let out = self.output(&args);
        assert!(out.status.success(), "list failed: {out:?}");
        let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listing["format"], "cleanroom-list", "{listing}");
        assert_eq!(listing["version"], 1, "{listing}");
        let entries = listing["entries"].as_array().unwrap().clone();
        entries
            .into_iter()
            .map(|e| (e["name"].as_str().unwrap().to_string(), e))
            .collect()
    }

    /// The state and reason `list` gives `name`.
    pub fn state_of(&self, name: &str) -> (String, String) {
        let entries = self.list(false);
        let e = entries
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not listed: {entries:?}"));
        (
            e["state"].as_str().unwrap().to_string(),
            e["reason"].as_str().unwrap().to_string(),
        )
    }

    /// The names in the namespace, sorted, but an empty `locks` (a protected run makes it for
    /// the user locks of its nested runs).
    pub fn names(&self) -> Vec<String> {
        let locks = self.ns.join("locks");
        let empty_locks = fs::read_dir(&locks).is_ok_and(|mut d| d.next().is_none());
        let mut names: Vec<String> = fs::read_dir(&self.ns)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !(empty_locks && name == "locks"))
            .collect();
        names.sort();
        names
    }
}

/// `lchown` to `uid:uid`.
pub fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

/// `chown -hR uid:uid path` (never following symlinks).
pub fn chown_tree(path: &Path, uid: u32) {
    chown(path, uid);
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for e in fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

/// A process identity as the marker records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The pid.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat`.
    pub start_time: u64,
}

/// Field 22 of `/proc/<pid>/stat`, or `None` when the pid does not exist.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The state letter of `/proc/<pid>/stat`.
pub fn state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// A process that really existed and has exited and been reaped.
pub fn dead_owner() -> Owner {
    let mut child = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let start_time = start_time(pid).expect("child is running");
    drop(child.stdin.take());
    child.wait().unwrap();
    Owner { pid, start_time }
}

/// This test process (alive for as long as the test runs).
pub fn own_process() -> Owner {
    let pid = std::process::id() as i32;
    Owner {
        pid,
        start_time: start_time(pid).unwrap(),
    }
}

/// Whether the process `owner` still exists (same pid and start time) and is not dead: a
/// zombie leader whose other threads still run (it called `pthread_exit`) is alive.
pub fn is_alive(owner: Owner) -> bool {
    let threads = || fs::read_dir(format!("/proc/{}/task", owner.pid)).map_or(0, |t| t.count());
    start_time(owner.pid) == Some(owner.start_time)
        && match state(owner.pid) {
            Some('Z') => threads() > 1,
            Some('X') | None => false,
            Some(_) => true,
        }
}

/// Living (non-zombie) processes whose command line contains `needle`, except this process.
pub fn processes_with(needle: &str) -> Vec<Owner> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            if let Some(start_time) = start_time(pid) {
                let owner = Owner { pid, start_time };
                if is_alive(owner) {
                    out.push(owner);
                }
            }
        }
    }
    out
}

/// Living descendants of `pid`.
pub fn descendants(pid: i32) -> Vec<Owner> {
    let mut out = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let text = fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in text
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                if let Some(start_time) = start_time(c) {
                    out.push(Owner { pid: c, start_time });
                    stack.push(c);
                }
            }
        }
    }
    out
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILLs, on drop, every process it was given that is still alive (when a test fails
/// half-way), and kills and reaps the child it holds.
#[derive(Default)]
pub struct Reaper {
    /// Processes to kill if still alive.
    pub processes: Vec<Owner>,
    /// A child to kill and reap.
    pub child: Option<Child>,
}

impl Reaper {
    /// A reaper holding `child`.
    pub fn of(child: Child) -> Reaper {
        Reaper {
            processes: Vec::new(),
            child: Some(child),
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in &self.processes {
            if is_alive(*p) {
                // The start time was checked just before; a pid reused in between is the
                // accepted risk of a test clean-up path that only runs after a failure.
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(p.pid).unwrap(),
                    rustix::process::Signal::KILL,
                );
            }
        }
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where a marker says its owner ran.
#[derive(Clone, Debug)]
pub struct HostInfo {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// Inode of `/proc/self/ns/pid`.
    pub pid_ns: u64,
    /// The UTS hostname.
    pub hostname: String,
}

/// This machine, boot and pid namespace.
pub fn host_now() -> HostInfo {
    HostInfo {
        boot_id: fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
            .to_string(),
        pid_ns: fs::metadata("/proc/self/ns/pid").unwrap().ino(),
        hostname: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
    }
}

/// A root as a run would have left it: a real marker (version 1 of `cleanroom::marker`), the
/// layout, and a few files.
#[derive(Clone, Debug)]
pub struct RootSpec {
    /// The run id (the root is `run-<run_id>`).
    pub run_id: String,
    /// The marker's `euid`.
    pub euid: u32,
    /// The marker's owner.
    pub owner: Owner,
    /// The marker's host.
    pub host: HostInfo,
    /// `--keep-root`.
    pub keep: bool,
    /// The marker's version.
    pub version: u32,
    /// Small files written into `home/` and `tmp/`.
    pub files: usize,
    /// The marker's `cgroup` (what a run could have forged into its own marker).
    pub cgroup: Option<String>,
    /// How long before now the marker says the root was created.
    pub age_secs: u64,
}

impl RootSpec {
    /// A root of `sandbox`'s user whose owner has exited: gc must reclaim it.
    pub fn stale(sandbox: &Sandbox) -> RootSpec {
        RootSpec {
            run_id: new_run_id(),
            euid: sandbox.euid(),
            owner: dead_owner(),
            host: host_now(),
            keep: false,
            version: 1,
            files: 3,
            cgroup: None,
            age_secs: 0,
        }
    }

    /// The same root, owned by `owner`.
    pub fn owned_by(mut self, owner: Owner) -> RootSpec {
        self.owner = owner;
        self
    }

    /// The published name, `run-<id>`.
    pub fn name(&self) -> String {
        root_name(&self.run_id)
    }

    /// The marker's JSON text.
    pub fn marker_json(&self) -> String {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            - self.age_secs * 1000;
        json!({
            "format": "cleanroom-root-marker",
            "version": self.version,
            "run_id": self.run_id,
            "euid": self.euid,
            "owner": {"pid": self.owner.pid, "start_time": self.owner.start_time},
            "host": {
                "boot_id": self.host.boot_id,
                "pid_ns": self.host.pid_ns,
                "hostname": self.host.hostname,
            },
            "created_unix_ms": created,
            "command": ["sh", "-c", "test-made root"],
            "keep": self.keep,
            "cgroup": self.cgroup,
        })
        .to_string()
            + "\n"
    }

    /// Creates the root as `<ns>/<name>` (name usually [`RootSpec::name`]); returns its path.
    /// Owned by the sandbox's user.
    pub fn create_as(&self, sandbox: &Sandbox, name: &str) -> PathBuf {
        let root = sandbox.ns.join(name);
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        write_private(&root.join(MARKER), &self.marker_json());
        for sub in LAYOUT {
            fs::create_dir(root.join(sub)).unwrap();
            fs::set_permissions(root.join(sub), fs::Permissions::from_mode(0o700)).unwrap();
        }
        for i in 0..self.files {
            fs::write(root.join(format!("home/file{i}")), format!("home {i}\n")).unwrap();
            fs::write(root.join(format!("tmp/file{i}")), format!("tmp {i}\n")).unwrap();
        }
        if let Some(uid) = sandbox.user {
            chown_tree(&root, uid);
        }
        root
    }

    /// Creates the root under its own name.
    pub fn create(&self, sandbox: &Sandbox) -> PathBuf {
        self.create_as(sandbox, &self.name())
    }
}

/// The shared lock a live owner holds on its root (`flock(LOCK_SH)`, from before its marker
/// exists until the root is gone), for a root whose marker names a live process such as
/// [`own_process`]: held while the returned reaper lives. Without it, a marker naming a live
/// process is a lie (the owner does not hold its root) and gc reclaims it. A holder process
/// takes it, not this test process: a `flock` belongs to the open file description, which a
/// fork by any other test thread shares until that child's exec, so a descriptor of ours would
/// not free the lock the moment it is closed.
pub fn hold_as_owner(root: &Path) -> Reaper {
    hold_lock(root, None).0
}

/// Writes `text` to a new file with mode 0600.
pub fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A directory outside the namespace, full of files the tests must never lose.
pub fn make_victim(path: &Path) -> PathBuf {
    fs::create_dir_all(path.join("sub")).unwrap();
    fs::write(path.join("precious.txt"), "do not delete\n").unwrap();
    fs::write(path.join("sub/nested.txt"), "nor this\n").unwrap();
    path.to_path_buf()
}

/// Everything about a tree that a removal, chmod or write would change, without following
/// symlinks: kind, mode, owner, size, mtime, and file contents or link targets.
pub fn snapshot(path: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).unwrap();
        let detail = if m.file_type().is_symlink() {
            format!("-> {}", fs::read_link(&p).unwrap().display())
        } else if m.is_file() {
            String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned()
        } else if m.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
            String::new()
        } else {
            format!("{:?}", m.file_type())
        };
        out.insert(
            p.strip_prefix(path).unwrap().to_path_buf(),
            format!(
                "mode {:o} uid {} gid {} size {} mtime {}.{} {detail}",
                m.mode(),
                m.uid(),
                m.gid(),
                if m.is_dir() { 0 } else { m.size() },
                m.mtime(),
                m.mtime_nsec()
            ),
        );
    }
    out
}

/// Creates `levels` nested directories named `name` below `parent`, each holding one file,
/// through descriptors (the total path is far longer than PATH_MAX).
pub fn make_deep_tree(parent: &Path, levels: usize, name: &str) {
    let name = CString::new(name).unwrap();
    let mut dir = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    for _ in 0..levels {
        rustix::fs::mkdirat(&dir, name.as_c_str(), Mode::RWXU).unwrap();
        let file = rustix::fs::openat(
            &dir,
            c"leaf.txt",
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .unwrap();
        rustix::io::write(&file, b"deep\n").unwrap();
        dir = rustix::fs::openat(
            &dir,
            name.as_c_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
    }
    // The deepest directory must exist where we think it does.
    assert!(rustix::fs::statat(&dir, c"..", AtFlags::SYMLINK_NOFOLLOW).is_ok());
}

/// Mount points at or below `prefix`, from `/proc/self/mountinfo`, deepest first.
pub fn mounts_below(prefix: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut mounts: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(prefix))
        .collect();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    mounts
}

/// Bind-mounts `source` on `target` and, on drop, unmounts (lazily) every mount below the
/// sandbox, wherever a removal may have moved it.
pub struct MountGuard {
    prefix: PathBuf,
}

impl MountGuard {
    /// Unmounts, on drop, whatever a test mounted below `prefix` (the sandbox directory).
    pub fn below(prefix: &Path) -> MountGuard {
        MountGuard {
            prefix: prefix.to_path_buf(),
        }
    }

    /// `mount --bind source target`; `prefix` is the sandbox directory.
    pub fn bind(source: &Path, target: &Path, prefix: &Path) -> MountGuard {
        let guard = MountGuard::below(prefix);
        let status = Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(target)
            .status()
            .unwrap();
        assert!(status.success(), "mount --bind failed");
        guard
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        for _ in 0..3 {
            let mounts = mounts_below(&self.prefix);
            if mounts.is_empty() {
                return;
            }
            for m in mounts {
                let _ = Command::new("umount").arg("-l").arg(&m).status();
            }
        }
        let left = mounts_below(&self.prefix);
        if !left.is_empty() && !std::thread::panicking() {
            panic!("could not unmount {left:?}");
        }
    }
}

/// Sets the immutable flag (`chattr +i`) on a file and clears it on drop, through a descriptor
/// that follows the file wherever a removal renames its directory.
pub struct ImmutableGuard {
    file: fs::File,
}

impl ImmutableGuard {
    /// `chattr +i path`.
    pub fn set(path: &Path) -> ImmutableGuard {
        let file = fs::File::open(path).unwrap();
        let flags = rustix::fs::ioctl_getflags(file.as_fd()).unwrap();
        rustix::fs::ioctl_setflags(file.as_fd(), flags | rustix::fs::IFlags::IMMUTABLE).unwrap();
        ImmutableGuard { file }
    }

    /// `chattr +i path` of a file in a root, after a second link at `outside`: a removal clears
    /// the flags only of what is the root's alone, so this file stays stuck.
    pub fn pin(path: &Path, outside: &Path) -> ImmutableGuard {
        fs::hard_link(path, outside).unwrap();
        ImmutableGuard::set(path)
    }
}

impl Drop for ImmutableGuard {
    fn drop(&mut self) {
        let flags = rustix::fs::ioctl_getflags(self.file.as_fd()).unwrap();
        rustix::fs::ioctl_setflags(self.file.as_fd(), flags - rustix::fs::IFlags::IMMUTABLE)
            .unwrap();
    }
}

/// The names in a gc summary's `removed_names`.
pub fn removed_names(summary: &Value) -> Vec<String> {
    summary["removed_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The messages in a gc summary's `errors`.
pub fn errors(summary: &Value) -> Vec<String> {
    summary["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Spawns `cleanroom run ARGS...` with its output captured.
pub fn spawn_run(sandbox: &Sandbox, args: &[&str]) -> Child {
    let mut full = vec!["run"];
    full.extend_from_slice(args);
    sandbox
        .command(&full)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Path of the one published root in the namespace, once it appears.
pub fn wait_for_root(sandbox: &Sandbox) -> PathBuf {
    let mut found = None;
    let appeared = wait_until(Duration::from_secs(10), || {
        found = sandbox.names().into_iter().find(|n| n.starts_with("run-"));
        found.is_some()
    });
    assert!(appeared, "no root appeared in {}", sandbox.ns.display());
    sandbox.ns.join(found.unwrap())
}

/// `cleanroom run --report FILE ARGS...` to completion: its output and the parsed report.
pub fn run_with_report(sandbox: &Sandbox, args: &[&str]) -> (Output, Value) {
    let report = sandbox.outside(&unique("report"));
    let mut full = vec!["run", "--report", report.to_str().unwrap()];
    full.extend_from_slice(args);
    let out = sandbox.output(&full);
    let text = fs::read(&report).unwrap_or_else(|e| panic!("no report ({e}): {out:?}"));
    fs::remove_file(&report).unwrap();
    (out, serde_json::from_slice(&text).unwrap())
}

/// The extended attribute of the namespace directory where the start of runs keeps its state.
pub const GC_STATE_XATTR: &str = "user.cleanroom.gc-state";

/// The state the start of runs remembers (`Value::Null` when none was written yet).
pub fn gc_state(sandbox: &Sandbox) -> Value {
    let mut buf = vec![0u8; 64 * 1024];
    match rustix::fs::getxattr(&sandbox.ns, GC_STATE_XATTR, &mut buf[..]) {
        Ok(n) => serde_json::from_slice(&buf[..n]).unwrap(),
        Err(rustix::io::Errno::NODATA) => Value::Null,
        Err(e) => panic!("cannot read {GC_STATE_XATTR}: {e}"),
    }
}

/// Makes the next run's pass due, as a minute going by would, keeping the rest of the state.
pub fn make_pass_due(sandbox: &Sandbox) {
    let mut state = gc_state(sandbox);
    assert!(state.is_object(), "no state to age: {state}");
    state["last_full_pass_unix_ms"] = json!(0);
    let bytes = serde_json::to_vec(&state).unwrap();
    rustix::fs::setxattr(
        &sandbox.ns,
        GC_STATE_XATTR,
        &bytes,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
}

/// A run id carrying the current time (an entry named with it is younger than a minute).
pub fn current_run_id() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y%m%dT%H%M%SZ"])
        .output()
        .unwrap();
    let stamp = String::from_utf8(out.stdout).unwrap();
    let old = new_run_id();
    format!("{}{}", stamp.trim(), &old[16..])
}

/// One process outside any run (no `CLEANROOM_RUN_ID`) holding a shared `flock` on `path`, as
/// long as the returned reaper lives; returns once `/proc/locks` shows the lock.
pub fn hold_lock_outside_the_run(path: &Path) -> (Reaper, i32) {
    hold_lock(path, None)
}

/// One process holding a shared `flock` on `path`, tagged `CLEANROOM_RUN_ID=<run_id>` when
/// `run_id` is given (a process the run left), as long as the returned reaper lives; returns once
/// `/proc/locks` shows the lock.
pub fn hold_lock(path: &Path, run_id: Option<&str>) -> (Reaper, i32) {
    let mut command = Command::new("python3");
    command
        .args([
            "-c",
            "import fcntl, os, sys, time\n\
             fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             fcntl.flock(fd, fcntl.LOCK_SH)\n\
             time.sleep(300)",
        ])
        .arg(path)
        .env_remove("CLEANROOM_RUN_ID")
        .env_remove("CLEANROOM_ROOT");
    if let Some(run_id) = run_id {
        command.env("CLEANROOM_RUN_ID", run_id);
    }
    let child = command.spawn().unwrap();
    let pid = child.id() as i32;
    let reaper = Reaper::of(child);
    let ino = fs::metadata(path).unwrap().ino();
    let held = wait_until(Duration::from_secs(10), || {
        fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .any(|l| l.contains(&format!(" {pid} ")) && l.contains(&format!(":{ino} ")))
    });
    assert!(held, "the holder never took its lock on {}", path.display());
    (reaper, pid)
}

/// The watchdogs of the runner `pid`: its children titled `cleanroom watchdog <run id>` (forks
/// of it that did not exec and that kill its run if it dies).
pub fn twins_of(pid: i32) -> Vec<Owner> {
    descendants(pid)
        .into_iter()
        .filter(|c| {
            let parent = fs::read_to_string(format!("/proc/{}/stat", c.pid))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                });
            parent == Some(pid)
                && fs::read(format!("/proc/{}/cmdline", c.pid))
                    .is_ok_and(|l| l.starts_with(b"cleanroom watchdog "))
        })
        .collect()
}

/// Sends `signal` to each of `processes` still alive (checked by start time just before).
pub fn signal_all(processes: &[Owner], signal: rustix::process::Signal) {
    for p in processes {
        if start_time(p.pid) == Some(p.start_time) {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(p.pid).unwrap(),
                signal,
            );
        }
    }
}

/// A `sleep` tagged `CLEANROOM_RUN_ID=<run_id>` (and no `CLEANROOM_ROOT`), as a dead run leaves
/// it: the reaper that kills it, and its identity.
pub fn tagged_sleep(run_id: &str) -> (Reaper, Owner) {
    let child = Command::new("sleep")
        .arg("300")
        .env("CLEANROOM_RUN_ID", run_id)
        .env_remove("CLEANROOM_ROOT")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let owner = Owner {
        pid,
        start_time: start_time(pid).unwrap(),
    };
    (Reaper::of(child), owner)
}

/// Makes `<ns>/<name>` as a creation that failed leaves it: `marker` as the marker's text, the
/// empty layout directories and one empty tool home. Returns its path.
pub fn make_skeleton(sandbox: &Sandbox, name: &str, marker: &str) -> PathBuf {
    let dir = sandbox.ns.join(name);
    fs::create_dir(&dir).unwrap();
    write_private(&dir.join(MARKER), marker);
    for sub in LAYOUT {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    fs::create_dir(dir.join("homes/CARGO_HOME")).unwrap();
    dir
}
