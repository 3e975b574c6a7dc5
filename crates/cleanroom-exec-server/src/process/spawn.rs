//! Starting a pipe-connected process without fork: `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)`
//! on a stack of its own, waited for through the pidfd, and born in the container's cgroup leaf
//! (`clone3` with `CLONE_INTO_CGROUP`) where the kernel and architecture allow, else joining it
//! by a write to `cgroup.procs` before exec.
//!
//! `std::process::Command` with `pre_exec` hooks forks the whole multi-threaded server (its page
//! tables copied, then a copy-on-write fault for every page either side writes before the exec);
//! a vfork-style child shares the server's memory and only its calling thread waits, until the
//! child has executed the command or failed.
//!
//! Owns: the [`Plan`] (everything the child touches, prepared before the clone: the `execvp`
//! search list, the command line and environment as C strings), and [`Exit`], the wait for the
//! started process. The clone itself, the child's steps up to exec and the rules they keep
//! (async-signal-safe, one clone at a time, every signal blocked) are [`crate::sys::spawn`]'s.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Arc, OnceLock};

use tokio::io::Interest;

use crate::sys::hook::ChildHook;
use crate::sys::reactor::Registered;
use crate::sys::spawn::{Image, Setup};

/// The limit on open descriptors every started process gets back, when the server raised its
/// own ([`keep_descriptor_limit_for_children`]).
static CHILD_NOFILE: OnceLock<libc::rlimit> = OnceLock::new();

/// The server is about to raise its soft limit on open descriptors from `soft`: every process it
/// starts from now on gets `soft` back before exec (a program using `select` breaks on
/// descriptors past 1024), under the hard limit, which stays.
pub fn keep_descriptor_limit_for_children(soft: u64) {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard.unwrap_or(libc::RLIM_INFINITY),
    };
    let _ = CHILD_NOFILE.set(limit);
}

/// Makes a forked `command` take the descriptor limit the server was given back before exec
/// (see [`keep_descriptor_limit_for_children`]).
pub fn restore_descriptor_limit_on_exec(command: &mut std::process::Command) {
    if let Some(&limit) = CHILD_NOFILE.get() {
        crate::sys::exec::set_descriptor_limit_on_exec(command, limit);
    }
}

/// `PATH` when the child's environment has none (glibc's `_CS_PATH`, what `execvp` uses).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// What the child is to run, prepared before the clone so the child only reads it.
pub struct Plan<'a> {
    image: Image,
    setup: Setup<'a>,
}

/// The command line and surroundings of a [`Plan`].
pub struct Command<'a> {
    pub program: &'a str,
    pub argv: &'a [String],
    pub arg0: Option<&'a str>,
    pub cwd: &'a Path,
    /// The environment; a later entry for a name replaces an earlier one.
    pub env: Vec<(&'a OsStr, &'a OsStr)>,
    pub stdio: [BorrowedFd<'a>; 3],
    /// The container's leaf directory and its `cgroup.procs`.
    pub cgroup: Option<(BorrowedFd<'a>, BorrowedFd<'a>)>,
    pub hook: Option<&'a ChildHook>,
}

impl<'a> Plan<'a> {
    /// Prepares `command`; fails (InvalidInput) on a NUL byte, as `Command::spawn` does.
    pub fn new(command: Command<'a>) -> io::Result<Plan<'a>> {
        let env: BTreeMap<OsString, &OsStr> = command
            .env
            .iter()
            .map(|(k, v)| (k.to_os_string(), *v))
            .collect();
        let path = env.get(OsStr::new("PATH")).map(|p| p.as_bytes());
        let candidates = candidates(command.program.as_bytes(), path.unwrap_or(DEFAULT_PATH))?;
        let mut argv = vec![cstring(command.arg0.unwrap_or(command.program).as_bytes())?];
        for arg in &command.argv[1..] {
            argv.push(cstring(arg.as_bytes())?);
        }
        let envp = env
            .iter()
            .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<io::Result<Vec<_>>>()?;
        let cwd = cstring(command.cwd.as_os_str().as_bytes())?;
        Ok(Plan {
            image: Image::new(candidates, argv, envp, cwd),
            setup: Setup {
                stdio: command.stdio,
                cgroup: command.cgroup,
                hook: command.hook,
                // The descriptor limit to set back (see [`keep_descriptor_limit_for_children`]).
                nofile: CHILD_NOFILE.get().copied(),
            },
        })
    }

    /// Starts the child; returns its pid and its exit once it has executed the command (the
    /// calling thread waits that long), or the error of the step that failed (the child is then
    /// reaped).
    pub fn spawn(mut self) -> io::Result<(i32, Exit)> {
        let (pid, pidfd) = crate::sys::spawn::spawn(&mut self.image, &self.setup)?;
        Ok((pid, Exit::new(pidfd)?))
    }
}

/// Every path `execvp` would try for `program` over `path`, in order (an entry of `PATH_MAX`
/// bytes or more is passed over, as glibc does).
fn candidates(program: &[u8], path: &[u8]) -> io::Result<Vec<CString>> {
    if program.is_empty() || program.contains(&b'/') {
        return Ok(vec![cstring(program)?]);
    }
    path.split(|&b| b == b':')
        .filter(|dir| dir.len() < libc::PATH_MAX as usize)
        .map(|dir| match dir {
            b"" => cstring(program),
            dir if dir.ends_with(b"/") => cstring(&[dir, program].concat()),
            dir => cstring(&[dir, b"/", program].concat()),
        })
        .collect()
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// The exit of a started process, read through its pidfd (which reaps it).
pub struct Exit {
    pidfd: Option<Registered<Arc<OwnedFd>>>,
}

impl Exit {
    fn new(pidfd: OwnedFd) -> io::Result<Exit> {
        let pidfd = crate::sys::reactor::register(Arc::new(pidfd), Interest::READABLE)?;
        Ok(Exit { pidfd: Some(pidfd) })
    }

    /// The pidfd, shared: it names the process (and its process group) even once reaped.
    pub fn pidfd(&self) -> Option<Arc<OwnedFd>> {
        self.pidfd.as_ref().map(|fd| fd.get_ref().clone())
    }

    /// Waits for the process to exit and reaps it.
    pub async fn wait(mut self) -> io::Result<ExitStatus> {
        let pidfd = self.pidfd.take().expect("an exit is waited for once");
        wait_on(&pidfd).await
    }
}

async fn wait_on(pidfd: &Registered<Arc<OwnedFd>>) -> io::Result<ExitStatus> {
    loop {
        let mut ready = pidfd.readable().await?;
        match crate::sys::spawn::wait_exit(pidfd.get_ref(), true)? {
            Some(status) => return Ok(status),
            None => ready.clear_ready(),
        }
    }
}

impl Drop for Exit {
    /// A process whose exit nobody waited for is still reaped, in the background.
    fn drop(&mut self) {
        if let (Some(pidfd), Ok(runtime)) =
            (self.pidfd.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move { wait_on(&pidfd).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::process::ExitStatusExt;
    use std::sync::atomic::{AtomicI32, Ordering};

    use super::*;

    fn paths(program: &str, path: &str) -> Vec<String> {
        candidates(program.as_bytes(), path.as_bytes())
            .unwrap()
            .into_iter()
            .map(|c| c.into_string().unwrap())
            .collect()
    }

    /// Runs `argv` in `cwd` with `env` through [`Plan`]: its exit status and its stdout.
    async fn run(
        argv: &[&str],
        cwd: &Path,
        env: &[(&str, &str)],
        hook: Option<&ChildHook>,
    ) -> io::Result<(ExitStatus, String)> {
        run_in(argv, cwd, env, hook, None).await
    }

    /// [`run`] with the cgroup leaf's descriptors (directory, `cgroup.procs`).
    async fn run_in(
        argv: &[&str],
        cwd: &Path,
        env: &[(&str, &str)],
        hook: Option<&ChildHook>,
        cgroup: Option<(BorrowedFd<'_>, BorrowedFd<'_>)>,
    ) -> io::Result<(ExitStatus, String)> {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let null = std::fs::File::open("/dev/null").unwrap();
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let plan = Plan::new(Command {
            program: &argv[0],
            argv: &argv,
            arg0: None,
            cwd,
            env: env
                .iter()
                .map(|(k, v)| (OsStr::new(k), OsStr::new(v)))
                .collect(),
            stdio: [null.as_fd(), write.as_fd(), write.as_fd()],
            cgroup,
            hook,
        })?;
        let (_, exit) = plan.spawn()?;
        drop(write);
        let mut out = String::new();
        std::fs::File::from(read).read_to_string(&mut out).unwrap();
        Ok((exit.wait().await?, out))
    }

    const PATH: (&str, &str) = ("PATH", "/usr/bin:/bin");

    #[tokio::test]
    async fn a_child_is_born_in_the_leaf_without_joining_it() {
        // Needs a cgroup this test may create: root on a cgroup2 host (CI is).
        let mount = cleanroom::contain::cgroup2_mount();
        let (true, Ok(mount)) = (rustix::process::geteuid().is_root(), mount) else {
            return;
        };
        let leaf = mount.join(format!("cleanroom-spawn-test-{}", std::process::id()));
        std::fs::create_dir(&leaf).unwrap();
        let dir = std::fs::File::open(&leaf).unwrap();
        // Not a `cgroup.procs`: a child that had to join by writing to it would fail.
        let not_procs = std::fs::File::open("/dev/null").unwrap();
        let argv = ["cat", "/proc/self/cgroup"];
        let leaf_fds = Some((dir.as_fd(), not_procs.as_fd()));
        let result = run_in(&argv, Path::new("/"), &[PATH], None, leaf_fds).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::remove_dir(&leaf).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (status, out) = result.unwrap();
        assert!(status.success(), "{out}");
        let name = leaf.file_name().unwrap().to_str().unwrap();
        assert!(out.trim_end().ends_with(&format!("/{name}")), "{out}");
        assert!(!leaf.exists(), "the test's leaf is removed");
    }

    #[test]
    fn candidates_follow_execvp() {
        assert_eq!(paths("./x", "/bin"), ["./x"]);
        assert_eq!(paths("", "/bin"), [""]);
        assert_eq!(paths("sh", "/a:/b/::c"), ["/a/sh", "/b/sh", "sh", "c/sh"]);
    }

    #[tokio::test]
    async fn a_path_entry_too_long_for_the_kernel_is_passed_over() {
        let long = "/x".repeat(3000);
        assert_eq!(
            paths("true", &format!("{long}:/usr/bin")),
            ["/usr/bin/true"]
        );
        let path = format!("{long}:/usr/bin:/bin");
        let (status, _) = run(&["true"], Path::new("/"), &[("PATH", &path)], None)
            .await
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }

    #[tokio::test]
    async fn the_child_runs_with_its_own_path_env_cwd_and_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let script = "echo \"$X $(pwd)\"; exit 3";
        let (status, out) = run(&["sh", "-c", script], dir.path(), &[PATH, ("X", "x")], None)
            .await
            .unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(out, format!("x {}\n", dir.path().display()));
        let (status, _) = run(&["sh", "-c", "kill -TERM $$"], dir.path(), &[PATH], None)
            .await
            .unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[tokio::test]
    async fn missing_program_or_cwd_is_enoent_and_the_search_uses_the_childs_path() {
        let here = Path::new("/");
        let missing = run(&["true"], here, &[("PATH", "/nonexistent")], None).await;
        assert_eq!(missing.unwrap_err().raw_os_error(), Some(libc::ENOENT));
        let gone = run(&["true"], Path::new("/nonexistent/cwd"), &[PATH], None).await;
        assert_eq!(gone.unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert!(run(&["true"], here, &[PATH], None)
            .await
            .unwrap()
            .0
            .success());
    }

    #[tokio::test]
    async fn a_script_without_an_interpreter_line_runs_under_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "echo \"from sh: $1\"\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = ("PATH", dir.path().to_str().unwrap());
        // A child another test of this binary forks meanwhile may still hold the descriptor the
        // write used (until it executes, when close-on-exec closes it): the kernel then refuses
        // to execute the file (ETXTBSY) for that moment.
        let mut tries = 0;
        let (status, out) = loop {
            match run(&["script", "arg"], dir.path(), &[path], None).await {
                Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                result => break result.unwrap(),
            }
        };
        assert!(status.success());
        assert_eq!(out, "from sh: arg\n");
    }

    #[tokio::test]
    #[allow(unsafe_code)]
    async fn a_failing_hook_fails_the_spawn_with_its_errno() {
        // SAFETY: the hook makes an error of a code: no allocation, no lock.
        let hook = unsafe { ChildHook::from_fn(|| Err(io::Error::from_raw_os_error(libc::EPERM))) };
        let result = run(&["true"], Path::new("/"), &[PATH], Some(&hook)).await;
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EPERM));
    }

    /// The mechanism itself: the child runs in the server's memory (no fork, no copy), which a
    /// hook's store shows the parent.
    #[tokio::test]
    #[allow(unsafe_code)]
    async fn the_child_shares_the_servers_memory_until_exec() {
        static SEEN: AtomicI32 = AtomicI32::new(0);
        // SAFETY: rustix's getpid is the raw system call, and an atomic store takes no lock:
        // async-signal-safe.
        let hook = unsafe {
            ChildHook::from_fn(|| {
                SEEN.store(
                    rustix::process::getpid().as_raw_nonzero().get(),
                    Ordering::SeqCst,
                );
                Ok(())
            })
        };
        let (status, _) = run(&["true"], Path::new("/"), &[PATH], Some(&hook))
            .await
            .unwrap();
        assert!(status.success());
        let child = SEEN.load(Ordering::SeqCst);
        assert!(child > 0 && child != std::process::id() as i32, "{child}");
    }

    /// The child starts with every signal unblocked and at its default, whatever the spawning
    /// thread blocked and the process ignored, and in a session of its own.
    #[tokio::test]
    async fn the_child_starts_with_default_signals_in_its_own_session() {
        // Ignoring SIGURG (nothing in the tests relies on it) and blocking SIGTERM on this
        // thread only.
        crate::sys::ignore_signal(libc::SIGURG);
        crate::sys::block_signal(libc::SIGTERM);
        let script = "grep -E 'SigBlk|SigIgn' /proc/self/status; ps -o sid= -p $$; echo $$";
        let (_, out) = run(&["sh", "-c", script], Path::new("/"), &[PATH], None)
            .await
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        for line in &lines[..2] {
            let (name, mask) = line.split_once(":\t").unwrap();
            let mask = u64::from_str_radix(mask, 16).unwrap();
            assert_eq!(mask & 0x7fff_ffff, 0, "{name} of the child: {mask:#x}");
        }
        assert_eq!(lines[2].trim(), lines[3], "the child leads its own session");
    }
}
