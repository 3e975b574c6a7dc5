//! The two exec-servers the harness can drive: `cleanroom serve` (the binary under test) and
//! Codex's own `codex exec-server` (the reference, from the same pinned package as the client).
//! Both listen on an ephemeral loopback port and print their URL as the first stdout line; both
//! are stopped with SIGTERM and must exit within a generous deadline.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Which server the Codex client is pointed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Cleanroom,
    Reference,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Cleanroom => "cleanroom serve",
            Target::Reference => "codex exec-server",
        }
    }
}

/// The environment every process of the harness gets instead of the test's own: a fixed PATH,
/// HOME and TMPDIR inside the private work dir, so no dotfile, shell init or credential of the
/// machine leaks into what is compared.
pub fn base_env(work: &Path) -> Vec<(&'static str, OsString)> {
    let private = |name: &str| {
        let dir = work.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir.into_os_string()
    };
    vec![
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("LANG", "C.UTF-8".into()),
        ("HOME", private("home")),
        ("TMPDIR", private("tmp")),
    ]
}

/// A running exec-server.
pub struct ExecServer {
    pub target: Target,
    pub url: String,
    child: Child,
    /// cleanroom's namespace (`--state-dir`), checked empty after the stop.
    state_dir: Option<PathBuf>,
}

impl ExecServer {
    /// Starts `target` with its private dirs under `work`; `cleanroom` and `codex` are the two
    /// binaries.
    pub fn start(target: Target, work: &Path, cleanroom: &Path, codex: &Path) -> ExecServer {
        let mut command = Command::new(match target {
            Target::Cleanroom => cleanroom,
            Target::Reference => codex,
        });
        command.env_clear().envs(base_env(work));
        let mut state_dir = None;
        match target {
            Target::Cleanroom => {
                let state = work.join("cleanroom-state");
                command.arg("--state-dir").arg(&state).arg("serve");
                state_dir = Some(state);
            }
            Target::Reference => {
                let home = work.join("exec-server-codex-home");
                std::fs::create_dir_all(&home).unwrap();
                command.arg("exec-server").env("CODEX_HOME", home);
            }
        }
        let log = std::fs::File::create(work.join(format!("{target:?}.stderr"))).unwrap();
        command
            .args(["--listen", "ws://127.0.0.1:0"])
            .current_dir(work)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", target.name()));
        let binary = match target {
            Target::Cleanroom => cleanroom.canonicalize().unwrap(),
            Target::Reference => codex.to_path_buf(),
        };
        super::client::assert_runs(child.id(), &binary);
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut url = String::new();
        stdout.read_line(&mut url).unwrap();
        let url = url.trim().to_string();
        assert!(
            url.starts_with("ws://127.0.0.1:"),
            "{} printed {url:?} instead of its URL (stderr: {})",
            target.name(),
            work.join(format!("{target:?}.stderr")).display()
        );
        // Whatever else it prints is drained, so it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        ExecServer {
            target,
            url,
            child,
            state_dir,
        }
    }

    /// SIGTERM, then waits for the exit; for cleanroom, its namespace holds no root afterwards.
    pub fn stop(mut self) -> ExitStatus {
        let status = terminate(&mut self.child);
        if let Some(state) = &self.state_dir {
            let roots = roots_in(state);
            assert!(roots.is_empty(), "cleanroom serve left roots: {roots:?}");
        }
        status
    }
}

/// The roots (and pending or quarantined roots) in the namespace `state`, by name.
pub fn roots_in(state: &Path) -> Vec<String> {
    std::fs::read_dir(state)
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.contains("run-"))
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for ExecServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            terminate(&mut self.child);
        }
    }
}

/// SIGTERM and a wait of up to 30 s; SIGKILL after that (and the caller sees a signal death).
pub fn terminate(child: &mut Child) -> ExitStatus {
    // SAFETY: kill(2) on the pid of our own child, which has not been waited for yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().unwrap()
}
