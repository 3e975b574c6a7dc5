//! The exec-server tests' WebSocket client (every `serve*.rs`), and a `cleanroom serve` of its
//! own for the tests of the fs methods, http and the managed policies (`serve.rs` starts its
//! servers itself: it checks survivors by marker and run id).
//!
//! Every server has a private state dir and works in a private dir under the test target's
//! tmp dir (nothing in /tmp); [`Server::stop`] ends it with SIGTERM and checks it exited 0 and
//! left no root behind. A test that fails before it stops its server still leaves nothing: the
//! server is stopped in order on drop (SIGTERM, then SIGKILL and `cleanroom gc` of its state
//! dir if it does not exit), and gets SIGTERM if the test process dies (`PR_SET_PDEATHSIG`).

#![allow(dead_code)]

// serve.rs has `common` too, which includes the same file: two copies, one per module.
#[allow(clippy::duplicate_mod)]
#[path = "../../../cleanroom/tests/support/reach.rs"]
mod reach;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const TIMEOUT: Duration = Duration::from_secs(20);

/// A client's WebSocket.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The uid (and gid) of `nobody`, for servers run as an ordinary user.
pub const NOBODY: u32 = 65534;

/// A running `cleanroom serve` with a private work dir.
pub struct Server {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
    /// The binary's copy, for a server run as a uid that cannot reach the checkout.
    bin_copy: Option<reach::RunnableByNobody>,
    /// The ordinary user it runs as, if not the test's.
    uid: Option<u32>,
}

/// The program a server started in a private mount namespace of its own runs through: a shell
/// script (the first argument after it) in a new mount namespace, whose mounts stay private.
const IN_A_MOUNT_NAMESPACE: [&str; 6] = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-ec",
];

/// Wraps `command` to run in a private mount namespace of its own after `setup` (a shell
/// script, run as root there), as the user `uid` when given (through `setpriv`).
fn in_a_mount_namespace(command: &mut Command, setup: &str, uid: Option<u32>) {
    let as_user = match uid {
        Some(uid) => format!("setpriv --reuid={uid} --regid={uid} --clear-groups "),
        None => String::new(),
    };
    let script = format!("{setup}\nexec {as_user}\"$@\"");
    wrap(command, &IN_A_MOUNT_NAMESPACE, &[script.as_str(), "sh"]);
}

impl Server {
    /// Starts the server with `args` after `serve`.
    pub fn start(args: &[&str]) -> Server {
        Server::start_with(args, None, false)
    }

    /// Starts the server as an ordinary user: as `nobody` when the test runs as root (the work
    /// and state dirs are theirs), else as the test's own user.
    pub fn start_unprivileged(args: &[&str]) -> Server {
        Server::start_with(args, ordinary_uid(), false)
    }

    /// Starts the server with `args` as root, or as an ordinary user (`ordinary`, as
    /// [`Server::start_unprivileged`]), after `prepare` has filled the work dir (its argument,
    /// canonical) and set up the command (environment, working directory); what `prepare`
    /// creates for an ordinary user's server is given to that user.
    pub fn start_prepared(
        args: &[&str],
        ordinary: bool,
        prepare: impl FnOnce(&Path, &mut Command),
    ) -> Server {
        let uid = if ordinary { ordinary_uid() } else { None };
        Server::start_with_prepared(args, uid, false, None, prepare)
    }

    /// [`Server::start_prepared`] in a private mount namespace of its own, where `setup` (a shell
    /// script, given the work dir) runs as root before the server starts (bind mounts, a lower
    /// descriptor limit); an ordinary user's server is then started through `setpriv`. Root only.
    pub fn start_in_mount_namespace(
        args: &[&str],
        ordinary: bool,
        prepare: impl FnOnce(&Path, &mut Command),
        setup: impl FnOnce(&Path) -> String,
    ) -> Server {
        let uid = if ordinary { ordinary_uid() } else { None };
        let wrapper = move |work: &Path, command: &mut Command| {
            in_a_mount_namespace(command, &setup(work), uid);
        };
        Server::start_with_prepared(args, uid, false, None, |work, command| {
            prepare(work, command);
            wrapper(work, command);
        })
    }

    /// [`Server::start_prepared`] in a private mount namespace of its own over fresh, empty
    /// `/tmp` and `/var/tmp` (tmpfs), as root, or as an ordinary user (`ordinary`, as
    /// [`Server::start_unprivileged`], through `setpriv` once the tmpfs are mounted). Its work
    /// dir and a copy of the binary are placed beneath `/run`, so that they stay in the server's
    /// sight wherever the checkout lives (from a checkout under `/tmp` they would be in `/tmp`
    /// or `/var/tmp`, hidden by the tmpfs). `entries`: names of files made in each of those
    /// (owned by root, mode 0644) before the server starts. Root only.
    pub fn start_over_fresh_tmp(
        args: &[&str],
        ordinary: bool,
        entries: &[&str],
        prepare: impl FnOnce(&Path, &mut Command),
    ) -> Server {
        let uid = if ordinary { ordinary_uid() } else { None };
        let made: String = entries
            .iter()
            .map(|name| format!("echo host > /tmp/{name}\necho host > /var/tmp/{name}\n"))
            .collect();
        let script = format!(
            "mount -t tmpfs -o mode=1777 tmpfs /tmp\n\
             mount -t tmpfs -o mode=1777 tmpfs /var/tmp\n\
             {made}"
        );
        let run = Some(Path::new("/run"));
        Server::start_with_prepared(args, uid, false, run, |work, command| {
            prepare(work, command);
            in_a_mount_namespace(command, &script, uid);
        })
    }

    /// [`Server::start`] (or [`Server::start_unprivileged`]), with the server's stderr in a file
    /// of the work dir ([`Server::log`]).
    pub fn start_logged(args: &[&str], unprivileged: bool) -> Server {
        let uid = if unprivileged { ordinary_uid() } else { None };
        Server::start_with(args, uid, true)
    }

    fn start_with(args: &[&str], uid: Option<u32>, logged: bool) -> Server {
        Server::start_with_prepared(args, uid, logged, None, |_, _| {})
    }

    /// The work and state dirs are under the test target's tmp dir (or /var/tmp for a checkout
    /// under /tmp, see `reach::outside_tmp`); a server run as another uid gets them (and the
    /// binary) where that uid can reach them (see `reach`). With `beside`, the server's work
    /// and state dirs are beneath that directory instead, with a copy of the binary.
    fn start_with_prepared(
        args: &[&str],
        uid: Option<u32>,
        logged: bool,
        beside: Option<&Path>,
        prepare: impl FnOnce(&Path, &mut Command),
    ) -> Server {
        let target_tmp = reach::outside_tmp(Path::new(env!("CARGO_TARGET_TMPDIR")));
        let target_tmp = target_tmp.as_path();
        let bin = Path::new(env!("CARGO_BIN_EXE_cleanroom"));
        let (dir, runnable) = match (uid, beside) {
            (None, None) => (tempfile::tempdir_in(target_tmp).unwrap(), None),
            (None, Some(parent)) => {
                let dir = tempfile::Builder::new()
                    .prefix("cleanroom-it-serve-")
                    .tempdir_in(parent);
                let dir =
                    dir.unwrap_or_else(|e| panic!("a directory in {}: {e}", parent.display()));
                let copy = reach::RunnableByNobody::copied_into(bin, dir.path());
                (dir, Some(copy))
            }
            (Some(_), Some(parent)) => {
                let dir = reach::tempdir_reachable_by_nobody(parent, "cleanroom-it-serve-");
                let copy = reach::RunnableByNobody::copied_into(bin, dir.path());
                (dir, Some(copy))
            }
            (Some(_), None) => (
                reach::tempdir_reachable_by_nobody(target_tmp, "serve-"),
                Some(reach::RunnableByNobody::new(bin)),
            ),
        };
        std::fs::create_dir(dir.path().join("work")).unwrap();
        let mut command = Command::new(runnable.as_ref().map_or(bin, |copy| copy.path()));
        let work = std::fs::canonicalize(dir.path().join("work")).unwrap();
        let stderr = match logged {
            true => Stdio::from(std::fs::File::create(dir.path().join("stderr.log")).unwrap()),
            false => Stdio::inherit(),
        };
        if let Some(uid) = uid {
            use std::os::unix::fs::{chown, PermissionsExt};
            use std::os::unix::process::CommandExt;
            std::fs::create_dir(dir.path().join("ns")).unwrap();
            // Its working directory too must be one it can reach (not the crate's, in a
            // checkout that may be out of its reach).
            command
                .uid(uid)
                .gid(uid)
                .env("HOME", "/nonexistent")
                .current_dir(&work);
            prepare(&work, &mut command);
            give_tree(&work, uid);
            chown(dir.path().join("ns"), Some(uid), Some(uid)).unwrap();
            std::fs::set_permissions(
                dir.path().join("ns"),
                std::fs::Permissions::from_mode(0o700),
            )
            .unwrap();
        } else {
            prepare(&work, &mut command);
        }
        stop_with_the_test(&mut command);
        let mut child = command
            .arg("--state-dir")
            .arg(dir.path().join("ns"))
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut url = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        assert!(url.starts_with("ws://127.0.0.1:"), "first line: {url:?}");
        Server {
            child,
            url: url.trim().to_string(),
            dir,
            bin_copy: runnable,
            uid,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL clients connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What a server started with [`Server::start_logged`] wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// The private work dir (canonical).
    pub fn work(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path().join("work")).unwrap()
    }

    /// A connected, initialized client.
    pub async fn client(&self) -> Client {
        let mut client = Client::connect(&self.url).await;
        client.initialize().await;
        client
    }

    /// SIGTERM; the server exits 0 and leaves no root. Returns what it logged (see
    /// [`Server::start_logged`]).
    pub fn stop(mut self) -> String {
        // SAFETY: kill(2) takes no memory; the pid is our own child's, not yet waited for, so
        // it still names the server.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "server exit status");
        let left: Vec<_> = std::fs::read_dir(self.dir.path().join("ns"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("run-"))
            .collect();
        assert!(left.is_empty(), "roots left behind: {left:?}");
        self.log()
    }
}

/// `nobody` when the test runs as root, else `None` (the test's own user is an ordinary one).
fn ordinary_uid() -> Option<u32> {
    rustix::process::geteuid().is_root().then_some(NOBODY)
}

impl Drop for Server {
    /// A test that did not stop its server (it failed) still leaves nothing behind: SIGTERM,
    /// which reaps every session; if the server does not exit within the bound, SIGKILL and
    /// `cleanroom gc` of its state dir, which reclaims its root, cgroup and processes (before
    /// the state dir itself is removed).
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own child, not yet waited for.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let bin = self.bin_copy.as_ref().map(|copy| copy.path());
        gc_with(bin, &self.dir.path().join("ns"), self.uid);
    }
}

/// Makes `command` run through `wrapper` (a program and its arguments, then `extra`, then the
/// command's program), keeping its environment and working directory; the command's own
/// arguments are added afterwards, as before.
pub fn wrap(command: &mut Command, wrapper: &[&str], extra: &[&str]) {
    let mut wrapped = Command::new(wrapper[0]);
    wrapped
        .args(&wrapper[1..])
        .args(extra)
        .arg(command.get_program());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    *command = wrapped;
}

/// `cleanroom gc` of the state dir `ns`, as `uid` (the server's user) when given.
pub fn gc(ns: &Path, uid: Option<u32>) -> std::process::Output {
    gc_with(None, ns, uid)
}

/// `cleanroom gc` of `ns` as `uid`, through `bin` (a copy `uid` can reach) when given.
fn gc_with(bin: Option<&Path>, ns: &Path, uid: Option<u32>) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(bin.unwrap_or(Path::new(env!("CARGO_BIN_EXE_cleanroom"))));
    if let Some(uid) = uid {
        command.uid(uid).gid(uid).env("HOME", "/nonexistent");
    }
    command
        .arg("--state-dir")
        .arg(ns)
        .arg("gc")
        .stdin(Stdio::null())
        .output()
        .expect("cleanroom gc runs")
}

/// Makes the server started by `command` get SIGTERM when the test's thread (or process) dies,
/// so that a test killed by its harness still has its server reap its processes. (Set after
/// the uid change: a change of credentials clears it.)
pub fn stop_with_the_test(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(PR_SET_PDEATHSIG) between fork and exec: one async-signal-safe call.
    unsafe {
        command.pre_exec(
            || match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            },
        );
    }
}

/// Gives `path` and everything beneath it (links themselves, not followed) to `uid`.
pub fn give_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            give_tree(&entry.unwrap().path(), uid);
        }
    }
}

/// A JSON-RPC client over one WebSocket.
pub struct Client {
    /// The socket, for tests that speak WebSocket directly.
    pub ws: Ws,
    /// The last request id used (tests that send requests by hand take the next ones).
    pub next_id: i64,
    /// Notifications that arrived while a response was awaited, oldest first.
    pub notifications: Vec<Value>,
    /// The server's run id (`environmentInfo.cleanroom.runId`), once initialized.
    pub run_id: String,
    /// This connection's session id, once initialized.
    pub session: String,
}

impl Client {
    pub async fn connect(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Client {
            ws,
            next_id: 0,
            notifications: Vec::new(),
            run_id: String::new(),
            session: String::new(),
        }
    }

    pub async fn initialize(&mut self) {
        self.initialize_with(json!({"clientName": "test"}))
            .await
            .unwrap();
    }

    pub async fn initialize_with(&mut self, params: Value) -> Result<(), (i64, String)> {
        let result = self.call("initialize", params).await?;
        let info = &result["environmentInfo"];
        self.run_id = info["cleanroom"]["runId"].as_str().unwrap().to_string();
        self.session = result["sessionId"].as_str().unwrap().to_string();
        Ok(())
    }

    pub async fn send_text(&mut self, text: String) {
        self.ws.send(Message::text(text)).await.unwrap();
    }

    pub async fn recv(&mut self) -> Value {
        loop {
            let frame = tokio::time::timeout(TIMEOUT, self.ws.next())
                .await
                .expect("a message within the timeout")
                .expect("the socket stays open")
                .unwrap();
            match frame {
                Message::Text(text) => {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(value["jsonrpc"], "2.0", "{value}");
                    return value;
                }
                Message::Binary(_) => panic!("the server sends text frames"),
                _ => continue,
            }
        }
    }

    /// Waits for the response to `id`, keeping notifications that arrive meanwhile.
    pub async fn response(&mut self, id: &Value) -> Value {
        loop {
            let message = self.recv().await;
            if message.get("method").is_some() {
                self.notifications.push(message);
            } else if &message["id"] == id {
                return message;
            } else {
                panic!("unexpected message {message}");
            }
        }
    }

    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        self.next_id += 1;
        let id = json!(self.next_id);
        let request = json!({"id": id, "method": method, "params": params});
        self.send_text(request.to_string()).await;
        let response = self.response(&id).await;
        match response.get("error") {
            Some(error) => Err((
                error["code"].as_i64().unwrap(),
                error["message"].as_str().unwrap().to_string(),
            )),
            None => Ok(response["result"].clone()),
        }
    }

    pub async fn error(&mut self, method: &str, params: Value) -> (i64, String) {
        self.call(method, params)
            .await
            .expect_err("an error response")
    }

    pub async fn start(&mut self, id: &str, argv: &[&str], extra: Value) -> Value {
        let mut params = json!({
            "processId": id, "argv": argv, "cwd": "file:///", "env": {}, "tty": false, "arg0": null,
        });
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        self.call("process/start", params).await.unwrap()
    }

    pub async fn notification(&mut self) -> Value {
        if !self.notifications.is_empty() {
            return self.notifications.remove(0);
        }
        let message = self.recv().await;
        assert!(
            message.get("method").is_some(),
            "expected a notification: {message}"
        );
        message
    }

    /// Every notification of `process_id` up to and including `process/closed`.
    pub async fn until_closed(&mut self, process_id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let n = self.notification().await;
            if n["params"]["processId"] != process_id {
                continue;
            }
            let done = n["method"] == "process/closed";
            out.push(n);
            if done {
                return out;
            }
        }
    }

    /// Output of `process_id` until `needle` appears in it.
    pub async fn output_until(&mut self, process_id: &str, needle: &str) -> String {
        let mut text = String::new();
        while !text.contains(needle) {
            let n = self.notification().await;
            if n["params"]["processId"] == process_id && n["method"] == "process/output" {
                text.push_str(&decode(&n["params"]["chunk"]));
            }
        }
        text
    }

    /// Runs `script` with bash in `cwd` under `sandbox` (a `sandbox` argument or null) and
    /// returns its start result, its stdout+stderr and its exit code.
    pub async fn run(
        &mut self,
        id: &str,
        cwd: &Path,
        sandbox: Value,
        script: &str,
    ) -> (Value, String, i64) {
        let started = self
            .call(
                "process/start",
                json!({"processId": id, "argv": ["/bin/bash", "-c", script], "cwd": uri(cwd),
                       "env": {}, "tty": false, "arg0": null, "sandbox": sandbox}),
            )
            .await
            .unwrap_or_else(|e| panic!("process/start {id}: {e:?}"));
        let mut output = String::new();
        let mut code = -1;
        loop {
            let n = self.notification().await;
            if n["params"]["processId"] != id {
                continue;
            }
            match n["method"].as_str().unwrap() {
                "process/output" => output.push_str(&String::from_utf8_lossy(
                    &BASE64
                        .decode(n["params"]["chunk"].as_str().unwrap())
                        .unwrap(),
                )),
                "process/exited" => code = n["params"]["exitCode"].as_i64().unwrap(),
                "process/closed" => return (started, output, code),
                _ => {}
            }
        }
    }
}

/// The text of a base64 `chunk`.
pub fn decode(chunk: &Value) -> String {
    String::from_utf8_lossy(&BASE64.decode(chunk.as_str().unwrap()).unwrap()).into_owned()
}

/// The `file:` URI of an absolute path (test paths need no escaping).
pub fn uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &byte in path.as_os_str().as_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                uri.push(char::from(byte))
            }
            _ => uri.push_str(&format!("%{byte:02X}")),
        }
    }
    uri
}

/// A special root entry.
pub fn special(kind: &str, subpath: Option<&str>, access: &str) -> Value {
    let mut value = json!({"kind": kind});
    if let Some(sub) = subpath {
        value["subpath"] = json!(sub);
    }
    json!({"access": access, "path": {"type": "special", "value": value}})
}

/// A path entry.
pub fn path_entry(path: &Path, access: &str) -> Value {
    json!({"access": access, "path": {"type": "path", "path": uri(path)}})
}

/// A managed sandbox with `entries` over `cwd` (also the one project root).
pub fn managed(cwd: &Path, entries: Vec<Value>, network: &str) -> Value {
    json!({"cwd": uri(cwd), "workspaceRoots": [uri(cwd)],
           "permissions": {"type": "managed", "network": network,
                           "file_system": {"type": "restricted", "entries": entries}}})
}

/// Codex 0.171's `workspace-write` exactly as it sends it, over `cwd`.
pub fn workspace_write(cwd: &Path) -> Value {
    let mut entries = vec![
        special("root", None, "read"),
        special("project_roots", None, "write"),
        special("slash_tmp", None, "write"),
        special("tmpdir", None, "write"),
    ];
    for name in [".git", ".agents", ".codex", ".aws"] {
        let mut entry = special("project_roots", Some(name), "read");
        entry["missing_path_behavior"] = json!("skip");
        entries.push(entry);
    }
    managed(cwd, entries, "restricted")
}

/// Codex 0.171's `read-only`, over `cwd`.
pub fn read_only(cwd: &Path) -> Value {
    managed(cwd, vec![special("root", None, "read")], "restricted")
}
