//! `cleanroom serve` driven as a user would: the real binary, a real WebSocket, a Rust client.
//!
//! Every test owns a private state dir, reads the URL from the first stdout line, and ends by
//! stopping the server with SIGTERM and checking that it exited 0, that no root is left, and that
//! no process of the server survived (by pid, by the server's run id in `/proc/*/environ`, and by
//! a unique marker in `/proc/*/cmdline`).

mod common;
mod serve_support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use serve_support::{decode, Client, Ws};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

const TIMEOUT: Duration = Duration::from_secs(15);

/// A running `cleanroom serve`.
struct Server {
    child: Child,
    url: String,
    state: tempfile::TempDir,
    marker: String,
    /// Everything the server writes to stdout after the URL (must stay empty).
    stdout_rest: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_with(args, env, false)
    }

    /// The server's stderr goes to [`Server::log`] instead of the test's.
    fn start_logged(args: &[&str]) -> Server {
        Server::start_with(args, &[("CLEANROOM_TEST_LOG", "1")], false)
    }

    /// What a server started with [`Server::start_logged`] wrote to stderr so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("stderr.log")).unwrap()
    }

    /// `blocked`: start the server with TERM, INT, HUP and CHLD blocked and INT, QUIT ignored,
    /// as some supervisors and `cmd &` in scripts do.
    /// `HOME` removed from the server's environment.
    fn start_without_home(args: &[&str]) -> Server {
        Server::start_with(args, &[("CLEANROOM_TEST_UNSET_HOME", "1")], false)
    }

    fn start_with(args: &[&str], env: &[(&str, &str)], blocked: bool) -> Server {
        let base = Path::new("/dev/shm");
        let state = if base.is_dir() {
            tempfile::tempdir_in(base).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_cleanroom"));
        command
            .arg("--state-dir")
            .arg(state.path().join("ns"))
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if env.iter().any(|(k, _)| *k == "CLEANROOM_TEST_UNSET_HOME") {
            command.env_remove("HOME");
        }
        if env.iter().any(|(k, _)| *k == "CLEANROOM_TEST_LOG") {
            let log = std::fs::File::create(state.path().join("stderr.log")).unwrap();
            command.stderr(log);
        }
        if blocked {
            use std::os::unix::process::CommandExt;
            // SAFETY: sigemptyset/sigaddset/pthread_sigmask on a stack set between fork and
            // exec; async-signal-safe, no allocation.
            unsafe {
                command.pre_exec(|| {
                    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
                    libc::sigemptyset(set.as_mut_ptr());
                    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
                        libc::sigaddset(set.as_mut_ptr(), signal);
                    }
                    libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
                    libc::signal(libc::SIGQUIT, libc::SIG_IGN);
                    libc::signal(libc::SIGINT, libc::SIG_IGN);
                    Ok(())
                });
            }
        }
        serve_support::stop_with_the_test(&mut command);
        let mut child = command.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut url = String::new();
        stdout.read_line(&mut url).unwrap();
        let url = url.trim().to_string();
        assert!(
            url.starts_with("ws://127.0.0.1:"),
            "first stdout line: {url:?}"
        );
        let rest = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stdout.read_to_string(&mut rest);
            rest
        });
        let marker = format!("crmark{}x{}", std::process::id(), random_u64());
        Server {
            child,
            url,
            state,
            marker,
            stdout_rest: Some(rest),
        }
    }

    fn addr(&self) -> String {
        self.url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .to_string()
    }

    fn ns(&self) -> PathBuf {
        self.state.path().join("ns")
    }

    async fn client(&self) -> Client {
        let mut client = Client::connect(&self.url).await;
        client.initialize().await;
        client
    }

    /// SIGTERM, exit 0, no root left, nothing of the server alive.
    fn stop(self, run_id: &str) {
        self.stop_with(libc::SIGTERM, run_id);
    }

    /// `signal`, exit 0, no root left, nothing of the server alive.
    fn stop_with(mut self, signal: i32, run_id: &str) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on the pid of our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        // A hang guard, not a measurement: how fast a shutdown is belongs to the bench.
        let status = wait_timeout(&mut self.child, Duration::from_secs(60)).expect("server exits");
        assert_eq!(status.code(), Some(0), "server exit status");
        let rest = self.stdout_rest.take().unwrap().join().unwrap();
        assert!(
            rest.is_empty(),
            "serve wrote more than the URL to stdout: {rest:?}"
        );
        let left: Vec<String> = std::fs::read_dir(self.ns())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("run-"))
            .collect();
        assert!(left.is_empty(), "roots left behind: {left:?}");
        assert_no_survivors(run_id, &self.marker);
    }
}

impl Drop for Server {
    /// A failed test still asks the server to reap its processes before killing it, and has
    /// `cleanroom gc` reclaim what a server that would not stop left.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the pid of our own child, which has not been waited for.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            if wait_timeout(&mut self.child, Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
                serve_support::gc(&self.ns(), None);
            }
        }
    }
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    u64::from_le_bytes(bytes)
}

fn alive(pid: i32) -> bool {
    // A zombie is dead for our purposes: it runs nothing and holds nothing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn wait_dead(pids: &[i32], limit: Duration) {
    let deadline = Instant::now() + limit;
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "still alive: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No living process carries the server's run id in its environment or `marker` in its argv
/// (polled for a generous bound: the server's KILL loop alone may take 10 s).
fn assert_no_survivors(run_id: &str, marker: &str) {
    let needle = format!("CLEANROOM_RUN_ID={run_id}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let has_id = environ.split(|&b| b == 0).any(|e| e == needle.as_bytes());
            let has_marker = String::from_utf8_lossy(&cmdline).contains(marker);
            if (has_id || has_marker) && alive(pid) {
                found.push(pid);
            }
        }
        if found.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "survivors: {found:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn output_of(notifications: &[Value]) -> String {
    notifications
        .iter()
        .filter(|n| n["method"] == "process/output")
        .map(|n| decode(&n["params"]["chunk"]))
        .collect()
}

fn pids_in(text: &str) -> Vec<i32> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// The code and reason of the close frame `stream` ends with (other frames skipped).
async fn close_frame(
    stream: &mut (impl futures_util::Stream<Item = Result<Message, WsError>> + Unpin),
) -> (u16, String) {
    loop {
        match tokio::time::timeout(TIMEOUT, stream.next()).await {
            Ok(Some(Ok(Message::Close(Some(close))))) => {
                return (u16::from(close.code), close.reason.as_str().to_string())
            }
            Ok(Some(Ok(Message::Close(None)))) => panic!("a close frame without a code"),
            Ok(Some(Ok(_))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn prints_only_the_url_and_reports_an_environment_inside_its_root() {
    let server = Server::start(&["--cwd", "/"]);
    let cap = server.url.rsplit('/').next().unwrap().to_string();
    let hex = cap.strip_prefix("cleanroom-").unwrap();
    assert!(
        hex.len() >= 32 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{cap}"
    );

    let mut tcp = std::net::TcpStream::connect(server.addr()).unwrap();
    tcp.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let mut client = server.client().await;
    let info = client.call("environment/info", json!({})).await.unwrap();
    let ns = format!("file://{}/run-", server.ns().display());
    assert!(
        info["userHomeDir"].as_str().unwrap().starts_with(&ns),
        "{info}"
    );
    assert!(info["tempDir"].as_str().unwrap().starts_with(&ns), "{info}");
    assert_eq!(info["cwd"], "file:///");
    assert_capabilities_are_implemented(&mut client, &info["capabilities"], &server).await;
    assert!(info["shell"]["path"].is_string());
    assert_eq!(
        client.call("environment/status", json!({})).await.unwrap(),
        json!({"status": "ready"})
    );
    // Beside the lock directory its protection makes (where nested runs take user locks).
    let roots: Vec<_> = std::fs::read_dir(server.ns())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "locks")
        .collect();
    assert_eq!(roots.len(), 1, "one root while serving");
    let run_id = client.run_id.clone();
    client.ws.close(None).await.unwrap();
    let reply = tokio::time::timeout(TIMEOUT, client.ws.next())
        .await
        .unwrap();
    assert!(
        matches!(reply, Some(Ok(Message::Close(_))) | None),
        "the closing handshake completes: {reply:?}"
    );
    server.stop(&run_id);
}

/// `capabilities` names exactly what is implemented: the one it turns on works (a sandboxed
/// `fs/open` read in blocks), and what each one it turns off gates is refused.
async fn assert_capabilities_are_implemented(c: &mut Client, caps: &Value, server: &Server) {
    let on: Vec<&str> = caps
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.as_bool().unwrap())
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(on, ["sandboxedFileStreaming"], "{caps}");
    for off in [
        "networkProxyLaunch",
        "environmentConfigRead",
        "fsWatchMissing",
        "fileWriteStreaming",
    ] {
        assert_eq!(caps[off], false, "{caps}");
    }
    let file = server.state.path().join("streamed");
    std::fs::write(&file, b"0123456789").unwrap();
    let read_only = json!({"permissions": {"type": "managed", "network": "restricted",
        "file_system": {"type": "restricted", "entries": [
            {"access": "read", "path": {"type": "special", "value": {"kind": "root"}}}]}}});
    let path = format!("file://{}", file.display());
    let opened = c
        .call(
            "fs/open",
            json!({"handleId": "h", "path": path, "sandbox": read_only}),
        )
        .await
        .unwrap();
    assert_eq!(opened["handleId"], "h");
    let block = c
        .call(
            "fs/readBlock",
            json!({"handleId": "h", "offset": 4, "len": 100}),
        )
        .await
        .unwrap();
    assert_eq!(
        BASE64.decode(block["chunk"].as_str().unwrap()).unwrap(),
        b"456789"
    );
    assert_eq!(block["eof"], true);
    c.call("fs/close", json!({"handleId": "h"})).await.unwrap();
    for method in [
        "environmentConfig/read",
        "fs/watchMissing",
        "fs/writeBlock",
        "capabilityRoots/discoverV2",
    ] {
        assert_eq!(c.error(method, json!({})).await.0, -32601, "{method}");
    }
    let request = json!({"method": "GET", "url": "http://127.0.0.1:9/", "requestId": "r",
        "headers": [{"name": "Authorization", "valueEnvVar": "HOME"}]});
    assert_eq!(c.error("http/request", request).await.0, -32602);
}

#[tokio::test]
async fn a_wrong_capability_path_is_closed_with_1008() {
    let server = Server::start(&[]);
    let wrong = format!(
        "ws://{}/cleanroom-00000000000000000000000000000000",
        server.addr()
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(&wrong).await.unwrap();
    assert_eq!(close_frame(&mut ws).await, (1008, "unauthorized".into()));
    let run_id = server.client().await.run_id.clone();
    server.stop(&run_id);
}

/// Opens a WebSocket to `url` and sends `initialize`: the socket once it is answered, or the
/// close code when the server closes the socket instead.
async fn try_initialize(url: &str) -> Result<Ws, u16> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let initialize = json!({"id": 1, "method": "initialize", "params": {}});
    // A refused socket may already be closed for writing; its close frame is read below.
    let _ = ws.send(Message::text(initialize.to_string())).await;
    loop {
        match tokio::time::timeout(TIMEOUT, ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                let reply: Value = serde_json::from_str(&text).unwrap();
                assert!(reply["result"]["sessionId"].is_string(), "{reply}");
                return Ok(ws);
            }
            Ok(Some(Ok(Message::Close(Some(close))))) => return Err(u16::from(close.code)),
            Ok(Some(Ok(_))) => continue,
            other => panic!("expected a reply or a close frame, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn authenticated_connections_past_max_connections_are_closed_with_1013() {
    let server = Server::start(&["--max-connections", "2"]);
    // Sockets that never show the capability take none of the places.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(server.addr()).await.unwrap());
    }
    let first = server.client().await;
    let mut second = server.client().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(&server.url).await.unwrap();
    assert_eq!(
        close_frame(&mut ws).await,
        (1013, "too many connections".into())
    );
    assert_eq!(
        second.call("environment/status", json!({})).await.unwrap()["status"],
        "ready",
        "a refusal ends only the refused socket"
    );
    // A place frees when a connection ends, and the limit still holds afterwards.
    drop(first);
    let deadline = Instant::now() + TIMEOUT;
    let third = loop {
        match try_initialize(&server.url).await {
            Ok(ws) => break ws,
            Err(code) => assert_eq!(code, 1013),
        }
        assert!(Instant::now() < deadline, "the place never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(try_initialize(&server.url).await.err(), Some(1013));
    drop((third, idle));
    let run_id = second.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn an_oversized_frame_is_closed_with_1009_and_others_keep_being_served() {
    let server = Server::start(&["--max-message-bytes", "4096"]);
    let mut big = server.client().await;
    let mut other = server.client().await;
    let huge =
        json!({"id": 1, "method": "environment/status", "params": {"pad": "x".repeat(10_000)}});
    big.send_text(huge.to_string()).await;
    assert_eq!(close_frame(&mut big.ws).await.0, 1009);
    assert_eq!(
        other.call("environment/status", json!({})).await.unwrap()["status"],
        "ready"
    );
    let run_id = other.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn garbage_wrong_types_and_unknown_methods_get_the_spec_errors() {
    let server = Server::start(&[]);
    let mut c = Client::connect(&server.url).await;
    c.send_text("{not json".into()).await;
    let r = c.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].as_i64()),
        (Value::Null, Some(-32700))
    );
    c.send_text("[1,2,3]".into()).await;
    let r = c.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].as_i64()),
        (Value::Null, Some(-32600))
    );
    c.ws.send(Message::binary(vec![0xff, 0x00, 0x12]))
        .await
        .unwrap();
    assert_eq!(c.recv().await["error"]["code"], -32700);

    let (code, message) = c.error("environment/status", json!({})).await;
    assert_eq!(
        (code, message.as_str()),
        (-32600, "client must call initialize first")
    );
    c.initialize().await;
    let (code, message) = c.error("fs/walk", json!({"path": "file:///etc"})).await;
    assert_eq!(code, -32601);
    assert_eq!(message, "Unsupported cleanroom exec-server method: fs/walk");
    assert_eq!(c.error("no/such", json!({})).await.0, -32601);
    assert_eq!(c.error("initialize", json!({})).await.0, -32600);

    let start = |extra: Value| {
        let mut p = json!({"processId": "p", "argv": ["true"], "cwd": "file:///", "env": {}, "tty": false, "arg0": null});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    for (bad, field) in [
        (json!({"argv": []}), "argv"),
        (json!({"argv": "true"}), "argv"),
        (json!({"argv": [1]}), "argv"),
        (json!({"processId": 7}), "processId"),
        (json!({"tty": "yes"}), "tty"),
        (json!({"env": {"A": 1}}), "env"),
        (json!({"cwd": "/tmp"}), "process cwd"),
        (json!({"cwd": "file://remote/tmp"}), "process cwd"),
        (json!({"cwd": "file:///C:/x"}), "process cwd"),
        (json!({"cwd": "file:///tmp/%00"}), "process cwd"),
        (json!({"arg0": 5}), "arg0"),
        (json!({"networkProxy": {}}), "cannot be enforced"),
        (
            json!({"managedNetwork": {"loopbackPorts": [], "allowLocalBinding": false}}),
            "cannot be enforced",
        ),
        (
            json!({"sandbox": {"permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [{"access": "none", "path": {"type": "special", "value": {"kind": "nonesuch"}}}]}, "network": "enabled"}}}),
            "filesystem sandbox restrictions cannot be enforced",
        ),
    ] {
        let (code, message) = c.error("process/start", start(bad.clone())).await;
        assert_eq!(code, -32602, "{bad}: {message}");
        assert!(message.contains(field), "{bad}: {message}");
    }
    assert!(c.notifications.is_empty(), "a failed start emits nothing");
    c.call("process/start", start(json!({"argv": ["sleep", "5"]})))
        .await
        .unwrap();
    assert_eq!(c.error("process/start", start(json!({}))).await.0, -32600);
    let (code, message) = c.error("process/read", json!({"processId": "nope"})).await;
    assert_eq!(
        (code, message.as_str()),
        (-32600, "unknown process id nope")
    );
    assert_eq!(
        c.error(
            "process/signal",
            json!({"processId": "p", "signal": "kill"})
        )
        .await
        .0,
        -32602
    );
    assert_eq!(
        c.error("process/read", json!({"processId": "p", "afterSeq": "x"}))
            .await
            .0,
        -32602
    );
    assert_eq!(
        c.error("process/write", json!({"processId": "p", "chunk": "!!"}))
            .await
            .0,
        -32602
    );
    assert_eq!(
        c.call("process/status", json!({})).await.unwrap_err().0,
        -32601
    );
    assert_eq!(
        c.call("environment/status", json!({})).await.unwrap()["status"],
        "ready"
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn output_exit_and_close_arrive_in_seq_order_after_the_start_result() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let result = c
        .start(
            "p1",
            &["sh", "-c", "printf out; printf err >&2; exit 3"],
            json!({}),
        )
        .await;
    // `--protect home` (the default) is a kernel policy: the reply says so.
    assert_eq!(
        result,
        json!({"processId": "p1", "sandboxType": "linuxSeccomp"})
    );
    assert!(
        c.notifications.is_empty(),
        "the start result precedes notifications"
    );
    let events = c.until_closed("p1").await;
    let seqs: Vec<u64> = events
        .iter()
        .map(|n| n["params"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "{events:?}"
    );
    let methods: Vec<&str> = events
        .iter()
        .map(|n| n["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        &methods[methods.len() - 2..],
        ["process/exited", "process/closed"]
    );
    let exited = &events[events.len() - 2]["params"];
    assert_eq!(exited["exitCode"], 3);
    assert_eq!(exited["sandboxDenied"], false);
    let mut by_stream = BTreeMap::new();
    for n in events.iter().filter(|n| n["method"] == "process/output") {
        by_stream
            .entry(n["params"]["stream"].as_str().unwrap().to_string())
            .or_insert_with(String::new)
            .push_str(&decode(&n["params"]["chunk"]));
    }
    assert_eq!(by_stream["stdout"], "out");
    assert_eq!(by_stream["stderr"], "err");

    // Both pumps publish at once (full chunks on both streams): every seq still goes out once,
    // in order.
    let script = "head -c 8000000 /dev/zero & head -c 8000000 /dev/zero >&2; wait";
    c.start("both", &["sh", "-c", script], json!({})).await;
    let events = c.until_closed("both").await;
    let seqs: Vec<u64> = events
        .iter()
        .map(|n| n["params"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let mut both = BTreeMap::new();
    for n in events.iter().filter(|n| n["method"] == "process/output") {
        *both
            .entry(n["params"]["stream"].as_str().unwrap().to_string())
            .or_insert(0) += decode(&n["params"]["chunk"]).len();
    }
    assert_eq!(both["stdout"], 8_000_000);
    assert_eq!(both["stderr"], 8_000_000);

    // Output still in the pipe when the main process exits precedes `exited`, even while a
    // descendant keeps the pipe open.
    let script = format!(
        "head -c 300000 /dev/zero; (sleep 0.5; : {}) & exit 0",
        server.marker
    );
    c.start("drain", &["sh", "-c", &script], json!({})).await;
    let events = c.until_closed("drain").await;
    let exit_index = events
        .iter()
        .position(|n| n["method"] == "process/exited")
        .unwrap();
    let before: usize = events[..exit_index]
        .iter()
        .map(|n| {
            BASE64
                .decode(n["params"]["chunk"].as_str().unwrap())
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(
        before, 300_000,
        "all output written before the exit precedes exited"
    );
    assert_eq!(events.len(), exit_index + 2, "then only closed");

    c.start("p2", &["sh", "-c", "kill -9 $$"], json!({})).await;
    let events = c.until_closed("p2").await;
    assert_eq!(events[events.len() - 2]["params"]["exitCode"], 137);
    let read = c
        .call("process/read", json!({"processId": "p2"}))
        .await
        .unwrap();
    assert_eq!(read["exited"], true);
    assert_eq!(read["closed"], true);
    assert_eq!(read["exitCode"], 137);
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn late_output_after_exit_is_delivered_and_closed_waits_for_the_descendant() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let script = format!("(sleep 0.6; echo late; : {}) & echo early", server.marker);
    c.start("p", &["sh", "-c", &script], json!({})).await;
    let events = c.until_closed("p").await;
    let methods: Vec<&str> = events
        .iter()
        .map(|n| n["method"].as_str().unwrap())
        .collect();
    let exit_index = methods
        .iter()
        .position(|m| *m == "process/exited")
        .expect("exited before closed");
    assert_eq!(methods.last(), Some(&"process/closed"));
    // The descendant still held stdout when the main process exited: exited, late output, closed.
    assert_eq!(
        methods.iter().filter(|m| **m == "process/exited").count(),
        1
    );
    assert!(
        output_of(&events[exit_index..]).contains("late"),
        "late output comes after exited: {events:?}"
    );
    assert!(output_of(&events[..exit_index]).contains("early"));
    let read = c
        .call("process/read", json!({"processId": "p"}))
        .await
        .unwrap();
    assert_eq!(output_of_read(&read), "early\nlate\n");
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

fn output_of_read(read: &Value) -> String {
    read["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| decode(&c["chunk"]))
        .collect()
}

#[tokio::test]
async fn a_pty_process_has_a_terminal_and_ctrl_c_interrupts_it() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let script = format!(
        "trap 'exit 42' INT; tty; stty size; echo ready; for i in $(seq 6000); do sleep 0.05; done; : {}",
        server.marker
    );
    c.start("t", &["sh", "-c", &script], json!({"tty": true}))
        .await;
    let text = c.output_until("t", "ready").await;
    assert!(text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("24 80"), "{text}");
    let write = c
        .call(
            "process/write",
            json!({"processId": "t", "chunk": BASE64.encode("\u{3}"), "writeId": "w1"}),
        )
        .await
        .unwrap();
    assert_eq!(write["status"], "accepted");
    let events = c.until_closed("t").await;
    let exited = events
        .iter()
        .find(|n| n["method"] == "process/exited")
        .unwrap();
    assert_eq!(exited["params"]["exitCode"], 42);
    assert!(events
        .iter()
        .filter(|n| n["method"] == "process/output")
        .all(|n| n["params"]["stream"] == "pty"));

    c.start(
        "i",
        &[
            "sh",
            "-c",
            "trap 'exit 7' INT; echo ready; for i in $(seq 6000); do sleep 0.05; done",
        ],
        json!({}),
    )
    .await;
    c.output_until("i", "ready").await;
    assert_eq!(
        c.call(
            "process/signal",
            json!({"processId": "i", "signal": "interrupt"})
        )
        .await
        .unwrap(),
        json!({})
    );
    let events = c.until_closed("i").await;
    assert_eq!(events[events.len() - 2]["params"]["exitCode"], 7);
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn stdin_reaches_the_process_and_a_repeated_write_id_is_written_once() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    c.start(
        "s",
        &["sh", "-c", "read line; echo got:$line"],
        json!({"pipeStdin": true}),
    )
    .await;
    for (chunk, id) in [("ab", "w1"), ("ab", "w1"), ("c\n", "w2")] {
        let r = c
            .call(
                "process/write",
                json!({"processId": "s", "chunk": BASE64.encode(chunk), "writeId": id}),
            )
            .await
            .unwrap();
        assert_eq!(r["status"], "accepted");
    }
    let events = c.until_closed("s").await;
    assert_eq!(output_of(&events), "got:abc\n");

    c.start("n", &["sleep", "5"], json!({})).await;
    let r = c
        .call("process/write", json!({"processId": "n", "chunk": "eA=="}))
        .await
        .unwrap();
    assert_eq!(r["status"], "stdinClosed");
    let r = c
        .call("process/write", json!({"processId": "zz", "chunk": "eA=="}))
        .await
        .unwrap();
    assert_eq!(r["status"], "unknownProcess");

    // An id that needs escaping in JSON.
    let odd_id = "z \"quoted\" \\ é";
    c.start(
        odd_id,
        &["cat", "/proc/self/cmdline"],
        json!({"arg0": "renamed-zero"}),
    )
    .await;
    let cmdline = output_of(&c.until_closed(odd_id).await);
    assert_eq!(
        cmdline, "renamed-zero\0/proc/self/cmdline\0",
        "arg0 becomes argv[0]"
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn read_cursors_are_byte_limited_and_long_polls_wait_for_events() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    c.start(
        "r",
        &[
            "sh",
            "-c",
            "printf aaaa; sleep 0.1; printf bbbb; sleep 0.1; printf cccc",
        ],
        json!({}),
    )
    .await;
    c.until_closed("r").await;
    let mut cursor = 0u64;
    let mut text = String::new();
    let mut reads = 0;
    loop {
        let r = c
            .call(
                "process/read",
                json!({"processId": "r", "afterSeq": cursor, "maxBytes": 1}),
            )
            .await
            .unwrap();
        let chunks = r["chunks"].as_array().unwrap();
        if chunks.is_empty() {
            assert_eq!(r["closed"], true);
            break;
        }
        assert_eq!(
            chunks.len(),
            1,
            "maxBytes returns at least one chunk and stops: {r}"
        );
        assert_eq!(
            r["nextSeq"].as_u64().unwrap(),
            chunks[0]["seq"].as_u64().unwrap() + 1
        );
        text.push_str(&output_of_read(&r));
        cursor = r["nextSeq"].as_u64().unwrap() - 1;
        reads += 1;
    }
    assert_eq!(text, "aaaabbbbcccc");
    assert!(reads >= 2, "several chunks were read one by one");
    let all = c
        .call("process/read", json!({"processId": "r"}))
        .await
        .unwrap();
    let last = all["chunks"].as_array().unwrap().last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    assert_eq!(all["nextSeq"].as_u64().unwrap(), last + 1);
    let tail = c
        .call(
            "process/read",
            json!({"processId": "r", "afterSeq": last + 2, "waitMs": 5000}),
        )
        .await
        .unwrap();
    assert_eq!(tail["chunks"], json!([]));
    assert_eq!(
        tail["nextSeq"].as_u64().unwrap(),
        last + 3,
        "next seq counts exited and closed"
    );

    c.start("big", &["head", "-c", "3145728", "/dev/zero"], json!({}))
        .await;
    let streamed: usize = c
        .until_closed("big")
        .await
        .iter()
        .filter(|n| n["method"] == "process/output")
        .map(|n| {
            BASE64
                .decode(n["params"]["chunk"].as_str().unwrap())
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(streamed, 3 << 20, "notifications carry everything");
    let kept = c
        .call("process/read", json!({"processId": "big"}))
        .await
        .unwrap();
    let chunks = kept["chunks"].as_array().unwrap();
    let kept_bytes: usize = chunks
        .iter()
        .map(|c| BASE64.decode(c["chunk"].as_str().unwrap()).unwrap().len())
        .sum();
    assert!(
        kept_bytes <= 1 << 20,
        "retention keeps the newest 1 MiB: {kept_bytes}"
    );
    assert!(
        chunks[0]["seq"].as_u64().unwrap() > 1,
        "the oldest chunks were dropped"
    );

    // A long poll ends with the output: one that waited out its 300 s would outlast the
    // client's patience (TIMEOUT) and fail the call.
    c.start("w", &["sh", "-c", "sleep 0.3; echo x"], json!({}))
        .await;
    let r = c
        .call(
            "process/read",
            json!({"processId": "w", "afterSeq": 0, "waitMs": 300_000}),
        )
        .await
        .unwrap();
    assert_eq!(output_of_read(&r), "x\n");
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn interrupt_and_terminate_after_exit_are_no_ops() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    c.start("t", &["true"], json!({})).await;
    let events = c.until_closed("t").await;
    assert_eq!(
        events.len(),
        2,
        "exactly one exited and one closed: {events:?}"
    );
    let r = c
        .call(
            "process/signal",
            json!({"processId": "t", "signal": "interrupt"}),
        )
        .await
        .unwrap();
    assert_eq!(r, json!({}));
    let r = c
        .call("process/terminate", json!({"processId": "t"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"running": false}));
    let r = c
        .call("process/terminate", json!({"processId": "unknown"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"running": false}));
    let r = c
        .call(
            "process/signal",
            json!({"processId": "unknown", "signal": "interrupt"}),
        )
        .await
        .unwrap();
    assert_eq!(r, json!({}));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        c.notifications.is_empty(),
        "no further notifications: {:?}",
        c.notifications
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Starts a TERM-ignoring shell with a TERM-ignoring setsid child; returns both pids.
async fn start_resistant_tree(c: &mut Client, id: &str, marker: &str) -> Vec<i32> {
    let script = format!(
        "trap '' TERM; setsid sh -c \"trap '' TERM; for i in \\$(seq 3000); do sleep 0.1; done; : {marker}\" & echo pids $$ $!; for i in $(seq 3000); do sleep 0.1; done; : {marker}"
    );
    c.start(id, &["sh", "-c", &script], json!({})).await;
    let text = c.output_until(id, "\n").await;
    let pids = pids_in(&text);
    assert_eq!(pids.len(), 2, "{text}");
    assert!(pids.iter().all(|&p| alive(p)));
    pids
}

#[tokio::test]
async fn terminate_kills_a_term_resistant_tree_and_replies_after_reaping() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let pids = start_resistant_tree(&mut c, "k", &server.marker).await;
    let started = Instant::now();
    let (a, b) = tokio::join!(
        async {
            let mut other = Client::connect(&server.url).await;
            other.initialize().await;
            // Another session cannot reach this process.
            other
                .call("process/terminate", json!({"processId": "k"}))
                .await
                .unwrap()
        },
        c.call("process/terminate", json!({"processId": "k"}))
    );
    assert_eq!(a, json!({"running": false}));
    assert_eq!(b.unwrap(), json!({"running": true}));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "TERM, 1 s grace, then KILL"
    );
    assert!(
        pids.iter().all(|&p| !alive(p)),
        "replied after the tree was reaped"
    );
    let events = c.until_closed("k").await;
    assert_eq!(events[events.len() - 2]["params"]["exitCode"], 137);
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn socket_loss_reaps_a_term_resistant_group_and_its_setsid_child() {
    let server = Server::start(&["--session-ttl", "0"]);
    let mut c = server.client().await;
    let mut pids = start_resistant_tree(&mut c, "g", &server.marker).await;
    // A descendant that clears its environment and outlives its parent, holding stdout.
    let escapee = format!(
        "env -i setsid sh -c \"trap '' TERM; for i in \\$(seq 3000); do sleep 0.1; done; : {}\" & echo $!",
        server.marker
    );
    c.start("e", &["sh", "-c", &escapee], json!({})).await;
    let text = c.output_until("e", "\n").await;
    let escaped = pids_in(&text)[0];
    let exited = loop {
        let n = c.notification().await;
        if n["params"]["processId"] == "e" && n["method"] != "process/output" {
            break n;
        }
    };
    assert_eq!(
        exited["method"], "process/exited",
        "not closed while the escapee holds stdout"
    );
    assert!(alive(escaped));
    pids.push(escaped);
    let run_id = c.run_id.clone();
    drop(c);
    wait_dead(&pids, Duration::from_secs(10));
    let mut again = server.client().await;
    assert_eq!(
        again.call("environment/status", json!({})).await.unwrap()["status"],
        "ready"
    );
    server.stop(&run_id);
}

/// Two sessions with TERM-resistant trees; `signal` to the server reaps both, removes the
/// root and exits 0 (within the stop's patience).
async fn assert_signal_reaps_every_session(signal: i32) {
    let server = Server::start(&[]);
    let mut a = server.client().await;
    let mut b = server.client().await;
    let mut pids = start_resistant_tree(&mut a, "a", &server.marker).await;
    pids.extend(start_resistant_tree(&mut b, "b", &server.marker).await);
    let run_id = a.run_id.clone();
    server.stop_with(signal, &run_id);
    assert!(pids.iter().all(|&p| !alive(p)));
}

#[tokio::test]
async fn sigterm_reaps_every_session_and_removes_the_root() {
    assert_signal_reaps_every_session(libc::SIGTERM).await;
}

#[tokio::test]
async fn sigint_reaps_every_session_and_removes_the_root() {
    assert_signal_reaps_every_session(libc::SIGINT).await;
}

#[tokio::test]
async fn sighup_reaps_every_session_and_removes_the_root() {
    assert_signal_reaps_every_session(libc::SIGHUP).await;
}

#[tokio::test]
async fn host_secrets_in_the_server_environment_never_reach_a_child() {
    let server = Server::start_with_env(
        &[],
        &[
            ("OPENAI_API_KEY", "sk-hostsecret-1"),
            ("GITHUB_TOKEN", "ghp-hostsecret-2"),
            ("DB_PASSWORD", "hostsecret-3"),
            ("SOME_PLAIN", "plain-value"),
        ],
    );
    let mut c = server.client().await;
    for (id, policy) in [
        ("default", Value::Null),
        (
            "all",
            json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [], "set": {}, "includeOnly": []}),
        ),
    ] {
        c.start(
            id,
            &["env"],
            json!({
                "envPolicy": policy,
                "env": {"CLIENT_API_KEY": "clientsecret-4", "CLIENT_VISIBLE": "yes"},
            }),
        )
        .await;
        let env = output_of(&c.until_closed(id).await);
        assert!(!env.contains("hostsecret"), "{id}: {env}");
        assert!(!env.contains("clientsecret"), "{id}: {env}");
        assert!(env.contains("CLIENT_VISIBLE=yes"), "{id}: {env}");
        assert_eq!(
            env.contains("SOME_PLAIN=plain-value"),
            id == "all",
            "{id}: {env}"
        );
        assert!(env.contains("CLEANROOM_EXEC_ID="), "{id}: {env}");
        let home = format!("HOME={}/run-", server.ns().display());
        assert!(env.contains(&home), "{id}: {env}");
    }
    c.start(
        "none",
        &["/usr/bin/env"],
        json!({"envPolicy": {"inherit": "none", "ignoreDefaultExcludes": false, "exclude": [], "set": {"ONLY": "1"}, "includeOnly": []}}),
    )
    .await;
    let env = output_of(&c.until_closed("none").await);
    assert!(!env.contains("SOME_PLAIN"), "{env}");
    assert!(env.contains("ONLY=1"), "{env}");
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Without `envPolicy` the child gets the client's `env` over cleanroom's pinned base (HOME,
/// temp and XDG dirs inside the root, `CLEANROOM_*`) and nothing else of the server's
/// environment, as Codex's exec-server gives exactly `env`.
#[tokio::test]
async fn without_an_env_policy_a_child_gets_the_client_env_over_the_pinned_base_only() {
    let server = Server::start_with_env(
        &[],
        &[
            ("SERVER_ONLY_SECRET", "x"),
            ("SERVER_ONLY_MARKER", "server-only-value"),
        ],
    );
    let mut c = server.client().await;
    c.start(
        "bare",
        &["/usr/bin/env"],
        json!({"env": {"CLIENT_VISIBLE": "yes", "PATH": "/usr/bin:/bin"}}),
    )
    .await;
    let env = output_of(&c.until_closed("bare").await);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    assert!(!env.contains("SERVER_ONLY"), "{env}");
    assert!(env.contains("CLIENT_VISIBLE=yes"), "{env}");
    assert!(env.contains("PATH=/usr/bin:/bin\n"), "{env}");
    let ns = server.ns().display().to_string();
    for var in [
        "HOME",
        "TMPDIR",
        "TMP",
        "TEMP",
        "XDG_CONFIG_HOME",
        "XDG_RUNTIME_DIR",
    ] {
        let pinned = format!("{var}={ns}/run-");
        assert!(env.lines().any(|l| l.starts_with(&pinned)), "{var}: {env}");
    }
    let pinned = |name: &&str| {
        name.starts_with("CLEANROOM_")
            || name.starts_with("XDG_")
            || ["HOME", "TMPDIR", "TMP", "TEMP", "CLIENT_VISIBLE", "PATH"].contains(name)
    };
    let others: Vec<&&str> = names.iter().filter(|n| !pinned(n)).collect();
    assert!(
        others.is_empty(),
        "not the client's, not pinned: {others:?}\n{env}"
    );
    for var in [
        "CLEANROOM_RUN_ID",
        "CLEANROOM_EXEC_ID",
        "CLEANROOM_SESSION_ID",
    ] {
        assert!(names.contains(&var), "{var}: {env}");
    }
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn a_session_resumes_within_its_ttl_and_is_reaped_after_it() {
    let server = Server::start(&["--session-ttl", "3s"]);
    let mut c = server.client().await;
    let session = c.session.clone();
    let run_id = c.run_id.clone();
    let script = format!(
        "echo pid $$; sleep 0.3; echo buffered; sleep 30; : {}",
        server.marker
    );
    c.start("p", &["sh", "-c", &script], json!({})).await;
    drop(c);
    // Until the server has noticed the lost socket, the session is still attached (-32010).
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut resumed = loop {
        let mut attempt = Client::connect(&server.url).await;
        match attempt
            .initialize_with(json!({"resumeSessionId": session}))
            .await
        {
            Ok(()) => break attempt,
            Err((-32010, _)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("resume failed: {e:?}"),
        }
    };
    assert_eq!(resumed.session, session);
    let r = resumed
        .call("process/read", json!({"processId": "p", "waitMs": 2000}))
        .await
        .unwrap();
    let mut text = output_of_read(&r);
    if !text.contains("buffered") {
        let cursor = r["nextSeq"].as_u64().unwrap() - 1;
        let more = resumed
            .call(
                "process/read",
                json!({"processId": "p", "afterSeq": cursor, "waitMs": 5000}),
            )
            .await
            .unwrap();
        text.push_str(&output_of_read(&more));
    }
    assert!(
        text.ends_with("buffered\n"),
        "output kept while detached: {text:?}"
    );
    let pid = pids_in(&text)[0];
    let mut thief = Client::connect(&server.url).await;
    let (code, _) = thief
        .error("initialize", json!({"resumeSessionId": session}))
        .await;
    assert_eq!(code, -32010);
    drop(resumed);
    let detached = Instant::now();
    wait_dead(&[pid], Duration::from_secs(15));
    assert!(
        detached.elapsed() >= Duration::from_millis(2500),
        "kept for the ttl: {:?}",
        detached.elapsed()
    );
    let mut late = Client::connect(&server.url).await;
    let (code, _) = late
        .error("initialize", json!({"resumeSessionId": session}))
        .await;
    assert_eq!(code, -32600, "an expired session is gone");
    assert_no_survivors(&run_id, &server.marker);
    server.stop(&run_id);
}

#[tokio::test]
async fn session_and_process_limits_are_clear_errors() {
    let server = Server::start(&["--max-sessions", "1", "--max-processes", "2"]);
    let mut c = server.client().await;
    let mut second = Client::connect(&server.url).await;
    let (code, message) = second.error("initialize", json!({})).await;
    assert_eq!(code, -32600);
    assert!(message.contains("--max-sessions"), "{message}");
    c.start("a", &["sleep", "30"], json!({})).await;
    c.start("b", &["true"], json!({})).await;
    c.until_closed("b").await;
    c.start("c", &["sleep", "30"], json!({})).await;
    let (code, message) = c
        .error(
            "process/start",
            json!({"processId": "d", "argv": ["true"], "cwd": "file:///"}),
        )
        .await;
    assert_eq!(code, -32600);
    assert!(message.contains("--max-processes"), "{message}");
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn the_server_survives_floods_stalled_readers_and_thousands_of_connections() {
    let server = Server::start(&[]);
    // A client that starts a flood of output and never reads.
    let mut stalled = server.client().await;
    let flood = format!("head -c 200000000 /dev/zero; : {}", server.marker);
    stalled
        .start("flood", &["sh", "-c", &flood], json!({}))
        .await;
    // Thousands of connections: raw junk, a request line that never ends, silence.
    let addr = server.addr();
    let mut sockets = Vec::new();
    for i in 0..1500 {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        {
            use tokio::io::AsyncWriteExt;
            match i % 3 {
                0 => drop(tcp.write_all(b"\x00\xffgarbage\r\n\r\n").await),
                1 => drop(tcp.write_all(b"GET /cleanroom-").await),
                _ => {}
            }
        }
        sockets.push(tcp);
    }
    // Garbage frames on an upgraded socket.
    let mut junk = server.client().await;
    for text in [
        "",
        "null",
        "{\"id\":{}}",
        "{\"method\":5,\"id\":1}",
        "\"str\"",
    ] {
        junk.send_text(text.into()).await;
        let r = junk.recv().await;
        assert!(r["error"]["code"].is_i64(), "{text}: {r}");
    }
    junk.send_text(json!({"method": "surprise/notification"}).to_string())
        .await;
    // Everyone else is still served (within the client's patience, TIMEOUT).
    let mut fresh = server.client().await;
    fresh.start("ok", &["echo", "alive"], json!({})).await;
    assert_eq!(output_of(&fresh.until_closed("ok").await), "alive\n");
    assert_eq!(
        junk.call("environment/status", json!({})).await.unwrap()["status"],
        "ready"
    );
    // The unread flood is held back by the child's pipe, not buffered by the server.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_kib = rss_kib(server.child.id());
    assert!(
        rss_kib < 100 * 1024,
        "server RSS {rss_kib} KiB with a stalled reader"
    );
    drop(sockets);
    let run_id = fresh.run_id.clone();
    drop(stalled);
    // Half-open handshakes do not hold the shutdown up (how fast it is belongs to the bench).
    server.stop(&run_id);
}

#[test]
fn stdio_mode_speaks_newline_delimited_json_and_eof_ends_everything() {
    let state = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_cleanroom"))
        .arg("--state-dir")
        .arg(state.path().join("ns"))
        .args(["serve", "--listen", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut call = |request: Value| -> Value {
        writeln!(stdin, "{request}").unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let init = call(json!({"id": 1, "method": "initialize", "params": {}}));
    let run_id = init["result"]["environmentInfo"]["cleanroom"]["runId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        call(json!({"id": 2, "method": "environment/status"}))["result"]["status"],
        "ready"
    );
    let garbage = {
        writeln!(stdin, "{{oops").unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    assert_eq!(garbage["error"]["code"], -32700);
    let started = {
        let request = json!({"id": 3, "method": "process/start", "params": {"processId": "s", "argv": ["sleep", "30"], "cwd": "file:///"}});
        writeln!(stdin, "{request}").unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    assert_eq!(started["result"]["processId"], "s");
    drop(stdin);
    let status = wait_timeout(&mut child, Duration::from_secs(10)).expect("EOF ends the server");
    assert_eq!(status.code(), Some(0));
    assert_no_survivors(&run_id, "sleep 30 stdio-never-matches");
    let left = std::fs::read_dir(state.path().join("ns"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "locks")
        .count();
    assert_eq!(left, 0, "root removed");
}

#[tokio::test]
async fn strict_protection_keeps_every_process_writing_inside_the_root_and_cwd() {
    let work = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let cwd = work.path().to_str().unwrap().to_string();
    let server = Server::start(&["--protect", "strict", "--cwd", &cwd]);
    let mut c = server.client().await;
    let outside = server.state.path().join("outside.txt");
    let script = format!(
        "echo a > \"$HOME/in-root\" && echo root-ok; echo b > {cwd}/in-cwd && echo cwd-ok; \
         (echo c > {}) 2>/dev/null && echo outside-WRITTEN || echo outside-denied",
        outside.display()
    );
    c.start("w", &["sh", "-c", &script], json!({})).await;
    let text = output_of(&c.until_closed("w").await);
    let info = c.call("environment/info", json!({})).await.unwrap();
    let protection = &info["cleanroom"]["protection"];
    assert_eq!(protection["mode"], "strict", "{info}");
    if protection["enforcement"] == "full" {
        for expected in ["root-ok", "cwd-ok", "outside-denied"] {
            assert!(text.contains(expected), "{text}");
        }
        assert!(!outside.exists());
    } else {
        common::skip(&format!(
            "Landlock does not fully enforce here: protection reported as {protection}"
        ));
    }
    // With the root inside the host's /dev/shm, `strict` narrows there by mounts, so its
    // namespaces are not shared: a process under a managed policy still gets a private
    // /dev/shm of its own, never the host's.
    let name = format!("cleanroom-strict-{}", std::process::id());
    let everything = json!({"permissions": {"type": "managed", "network": "enabled",
        "file_system": {"type": "restricted", "entries": [
            {"access": "write", "path": {"type": "special", "value": {"kind": "root"}}}]}}});
    let script = format!("echo m > /dev/shm/{name} && cat /dev/shm/{name}");
    c.start("m", &["sh", "-c", &script], json!({"sandbox": everything}))
        .await;
    assert_eq!(output_of(&c.until_closed("m").await), "m\n");
    assert!(
        !Path::new("/dev/shm").join(&name).exists(),
        "written to the host's /dev/shm"
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn a_killed_server_leaves_a_root_and_processes_that_gc_reclaims() {
    let mut server = Server::start(&[]);
    let mut c = server.client().await;
    let pids = start_resistant_tree(&mut c, "orphans", &server.marker).await;
    let run_id = c.run_id.clone();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert!(
        pids.iter().all(|&p| alive(p)),
        "SIGKILL gives the server no chance"
    );
    let roots = |ns: &Path| {
        std::fs::read_dir(ns)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("run-"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        roots(&server.ns()).len(),
        1,
        "the dead server's root is still there"
    );
    let gc = Command::new(env!("CARGO_BIN_EXE_cleanroom"))
        .arg("--state-dir")
        .arg(server.ns())
        .arg("gc")
        .output()
        .unwrap();
    assert!(
        gc.status.success(),
        "gc: {}",
        String::from_utf8_lossy(&gc.stderr)
    );
    wait_dead(&pids, Duration::from_secs(10));
    let left = roots(&server.ns());
    assert!(left.is_empty(), "gc reclaimed the root: {left:?}");
    assert_no_survivors(&run_id, &server.marker);
}

#[tokio::test]
async fn gc_never_reclaims_a_live_servers_root_even_with_a_forged_marker_but_does_once_killed() {
    // The server holds its root's lock for its whole life, so a concurrent gc leaves the root
    // live, even when its marker was rewritten through fs/writeFile to name pid 1 (alive
    // forever). Once the server is SIGKILLed, pid 1 does not hold the lock: the marker lies,
    // and gc reclaims the root, its processes and its cgroup (review s2, finding 2).
    let mut server = Server::start(&[]);
    let mut c = server.client().await;
    let pids = start_resistant_tree(&mut c, "orphans", &server.marker).await;
    let run_id = c.run_id.clone();
    let root = server.ns().join(format!("run-{run_id}"));
    let path = root.join("cleanroom-root.json");
    let mut marker: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let stat = std::fs::read_to_string("/proc/1/stat").unwrap();
    let pid1_start: u64 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    marker["owner"] = json!({"pid": 1, "start_time": pid1_start});
    let data = BASE64.encode(marker.to_string());
    let uri = format!("file://{}", path.display());
    c.call("fs/writeFile", json!({"path": uri, "dataBase64": data}))
        .await
        .unwrap();
    let written: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        written["owner"]["pid"], 1,
        "the marker was not forged: {written}"
    );
    let cgroup = marker["cgroup"].as_str().map(PathBuf::from);
    for _ in 0..3 {
        let gc = serve_support::gc(&server.ns(), None);
        assert!(gc.status.success(), "gc: {gc:?}");
        assert!(root.is_dir(), "gc removed a live server's root: {gc:?}");
        assert!(
            pids.iter().all(|&p| alive(p)),
            "gc killed a live server's process"
        );
    }
    let info = c.call("environment/info", json!({})).await.unwrap();
    assert_eq!(info["cleanroom"]["runId"], run_id.as_str(), "{info}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let gc = serve_support::gc(&server.ns(), None);
    assert!(gc.status.success(), "gc: {gc:?}");
    wait_dead(&pids, Duration::from_secs(10));
    assert!(!root.exists(), "gc left the killed server's root: {gc:?}");
    if let Some(cgroup) = cgroup {
        assert!(
            !cgroup.exists(),
            "the server's cgroup is left: {}",
            cgroup.display()
        );
    }
    assert_no_survivors(&run_id, &server.marker);
}

#[test]
fn bad_options_and_a_non_loopback_address_are_refused() {
    let state = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    for args in [
        &["--listen", "ws://0.0.0.0:0"][..],
        &["--listen", "http://127.0.0.1:0"],
        &["--session-ttl", "ten"],
        &["--protect", "everything"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cleanroom"))
            .arg("--state-dir")
            .arg(state.path().join("ns"))
            .arg("serve")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.trim().is_empty(), "{args:?}: an explanation");
    }
    let left = std::fs::read_dir(state.path().join("ns"))
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    assert_eq!(left, 0, "no root was created");
}

#[tokio::test]
async fn a_server_started_with_signals_blocked_still_stops_and_its_children_start_unblocked() {
    let server = Server::start_with(&[], &[], true);
    let mut c = server.client().await;
    c.start(
        "m",
        &["grep", "-E", "SigBlk|SigIgn", "/proc/self/status"],
        json!({}),
    )
    .await;
    let text = output_of(&c.until_closed("m").await);
    // Standard signals (1-31) only: 32 and 33 belong to the C library.
    for line in text.lines() {
        let (name, mask) = line.split_once(":\t").unwrap();
        let mask = u64::from_str_radix(mask, 16).unwrap();
        assert_eq!(mask & 0x7fff_ffff, 0, "{name} of a child: {mask:#x}");
    }
    assert_eq!(text.lines().count(), 2, "{text}");
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Starts a detached daemon (`setsid`, output to /dev/null) whose start closes at once; returns
/// the daemon's pid once its process record is closed.
async fn start_daemon(c: &mut Client, id: &str, marker: &str) -> i32 {
    let script = format!(
        "setsid sh -c 'for i in $(seq 3000); do sleep 0.1; done; : {marker}' </dev/null >/dev/null 2>&1 & echo $!"
    );
    c.start(id, &["sh", "-c", &script], json!({})).await;
    let daemon = pids_in(&output_of(&c.until_closed(id).await))[0];
    assert!(alive(daemon), "the daemon runs on after its start closed");
    daemon
}

#[tokio::test]
async fn a_daemon_whose_record_expired_dies_with_the_dropped_socket() {
    let server = Server::start(&["--session-ttl", "0", "--process-retention", "1s"]);
    let mut c = server.client().await;
    let daemon = start_daemon(&mut c, "d", &server.marker).await;
    // The closed record leaves the table after its retention.
    loop {
        match c.call("process/read", json!({"processId": "d"})).await {
            Err((-32600, message)) if message.contains("unknown process") => break,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(alive(daemon));
    let run_id = c.run_id.clone();
    drop(c);
    wait_dead(&[daemon], Duration::from_secs(10));
    server.stop(&run_id);
}

#[tokio::test]
async fn a_daemon_evicted_by_300_later_starts_dies_with_the_dropped_socket() {
    let server = Server::start(&["--session-ttl", "0"]);
    let mut c = server.client().await;
    let daemon = start_daemon(&mut c, "d", &server.marker).await;
    for i in 0..300 {
        let id = format!("t{i}");
        c.start(&id, &["true"], json!({})).await;
        c.until_closed(&id).await;
    }
    // 256 records at most: the daemon's was evicted to make room.
    let (code, _) = c.error("process/read", json!({"processId": "d"})).await;
    assert_eq!(code, -32600);
    assert!(alive(daemon));
    let run_id = c.run_id.clone();
    drop(c);
    wait_dead(&[daemon], Duration::from_secs(10));
    server.stop(&run_id);
}

#[tokio::test]
async fn by_default_a_dropped_session_resumes_with_the_output_produced_meanwhile() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let session = c.session.clone();
    let run_id = c.run_id.clone();
    // The output comes only once the first socket is gone and the test says so.
    let go = server.state.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo after detached; sleep 30; : {}",
        go.display(),
        server.marker
    );
    c.start("p", &["sh", "-c", &script], json!({})).await;
    drop(c);
    let mut resumed = Client::connect(&server.url).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match resumed
            .initialize_with(json!({"resumeSessionId": session}))
            .await
        {
            Ok(()) => break,
            Err((-32010, _)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                resumed = Client::connect(&server.url).await;
            }
            Err(e) => panic!("resume within the default ttl failed: {e:?}"),
        }
    }
    std::fs::write(&go, "").unwrap();
    let mut text = String::new();
    let mut cursor = 0;
    while !text.contains("after detached") {
        let r = resumed
            .call(
                "process/read",
                json!({"processId": "p", "afterSeq": cursor, "waitMs": 2000}),
            )
            .await
            .unwrap();
        text.push_str(&output_of_read(&r));
        cursor = r["nextSeq"].as_u64().unwrap() - 1;
        assert!(!r["closed"].as_bool().unwrap(), "still running: {r}");
    }
    server.stop(&run_id);
}

#[tokio::test]
async fn idle_unauthenticated_connections_neither_lock_the_client_out_nor_flood_the_log() {
    let server = Server::start_logged(&[]);
    let addr = server.addr();
    let started = std::time::Instant::now();
    // More idle sockets than --max-connections (4096): none ever sends a byte.
    let mut idle = Vec::new();
    for _ in 0..4150 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Accepted after all of them, the real client gets in at once.
    let mut c = server.client().await;
    assert_eq!(
        c.call("environment/status", json!({})).await.unwrap()["status"],
        "ready"
    );
    c.start("p", &["echo", "served"], json!({})).await;
    assert_eq!(output_of(&c.until_closed("p").await), "served\n");
    drop(idle);
    let log = server.log();
    let warnings = log.lines().filter(|l| l.contains("WARN")).count() as u64;
    // One warning per 10 s window (the connects take 15-20 s here: the accept queue overflows
    // now and then and the kernel's SYN retry waits a second), thousands of evictions.
    let windows = started.elapsed().as_secs() / 10 + 1;
    assert!(
        (1..=windows).contains(&warnings),
        "one rate-limited warning per 10 s window ({windows}), not a flood:\n{log}"
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// The server's peak resident memory, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_message_of_millions_of_tiny_values_is_refused_without_parsing_it() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    // 40 MiB, 20 million array elements: under --max-message-bytes, over the value budget.
    let mut message = String::from(r#"{"id":"big","method":"environment/status","params":{"v":["#);
    message.push_str(&"0,".repeat(20_000_000));
    message.push_str("0]}}");
    c.send_text(message).await;
    let reply = c.recv().await;
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    let text = reply["error"]["message"].as_str().unwrap();
    assert!(text.contains("JSON values"), "{text}");
    let peak = peak_rss_kib(server.child.id());
    assert!(peak < 256 * 1024, "server peak RSS {peak} KiB");
    assert_eq!(
        c.call("environment/status", json!({})).await.unwrap()["status"],
        "ready"
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn every_oversized_frame_reaches_the_client_as_1009_not_a_reset() {
    let server = Server::start(&["--max-message-bytes", "4096", "--session-ttl", "0"]);
    for round in 0..8 {
        let mut client = server.client().await;
        // Odd rounds: a flood of output the client has not read yet fills the connection's
        // queue, so the close has to get past it.
        if round % 2 == 1 {
            let flood = format!("head -c 100000000 /dev/zero; : {}", server.marker);
            client.start("f", &["sh", "-c", &flood], json!({})).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (mut sink, mut stream) = client.ws.split();
        // Bytes the server will never read (10 KiB, or 4 MiB every fourth round): the close
        // must still arrive intact.
        let size = if round % 4 == 2 { 4 << 20 } else { 10_000 };
        let sending = tokio::spawn(async move {
            let _ = sink.send(Message::text(" ".repeat(size))).await;
            sink
        });
        assert_eq!(close_frame(&mut stream).await.0, 1009, "round {round}");
        drop(sending.await);
    }
    let c = server.client().await;
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn a_missing_program_or_cwd_is_a_spawn_not_found_internal_error() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    assert_spawn_not_found(
        &mut c,
        "x",
        "/nonexistent/program",
        "file:///",
        "/nonexistent/program",
    )
    .await;
    // A cwd that does not exist is the same spawn failure (the reference's answer), not a
    // validation error; it names the cwd.
    assert_spawn_not_found(
        &mut c,
        "y",
        "true",
        "file:///nonexistent/cwd",
        "/nonexistent/cwd",
    )
    .await;
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Starts `program` in `cwd` and asserts the answer is -32603 `spawnNotFound` naming `named`.
async fn assert_spawn_not_found(
    c: &mut Client,
    process_id: &str,
    program: &str,
    cwd: &str,
    named: &str,
) {
    c.next_id += 1;
    let id = json!(c.next_id);
    let request = json!({"id": id, "method": "process/start", "params": {
        "processId": process_id, "argv": [program], "cwd": cwd, "env": {}}});
    c.send_text(request.to_string()).await;
    let response = c.response(&id).await;
    let error = &response["error"];
    assert_eq!(error["code"], -32603, "{response}");
    assert_eq!(
        error["data"],
        json!({"kind": "spawnNotFound"}),
        "{response}"
    );
    assert!(error["message"].as_str().unwrap().contains(named));
}

#[tokio::test]
async fn terminate_answers_running_before_the_exit_and_close_notifications() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    for round in 0..5 {
        let id = format!("t{round}");
        let script = format!("echo up; sleep 30; : {}", server.marker);
        c.start(&id, &["sh", "-c", &script], json!({})).await;
        c.output_until(&id, "up").await;
        c.notifications.clear();
        let reply = c
            .call("process/terminate", json!({"processId": id}))
            .await
            .unwrap();
        assert_eq!(reply, json!({"running": true}));
        assert!(
            c.notifications
                .iter()
                .all(|n| n["params"]["processId"] != id.as_str()),
            "round {round}: notified before the reply: {:?}",
            c.notifications
        );
        let events = c.until_closed(&id).await;
        assert_eq!(events[events.len() - 2]["method"], "process/exited");
    }
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn pipelined_requests_are_handled_and_answered_in_order() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let process = format!("p{i}");
        let script = format!("read line; echo \"got $line\"; : {}", server.marker);
        let start = json!({"processId": process, "argv": ["sh", "-c", script], "cwd": "file:///",
            "env": {}, "pipeStdin": true});
        let write = json!({"processId": process, "chunk": BASE64.encode(format!("{i}\n"))});
        for (method, params) in [("process/start", start), ("process/write", write)] {
            c.next_id += 1;
            ids.push(c.next_id);
            let request = json!({"id": c.next_id, "method": method, "params": params});
            c.send_text(request.to_string()).await;
        }
    }
    let mut answered = Vec::new();
    while answered.len() < ids.len() {
        let message = c.recv().await;
        if message.get("method").is_some() {
            c.notifications.push(message);
            continue;
        }
        if answered.len() % 2 == 1 {
            assert_eq!(message["result"]["status"], "accepted", "{message}");
        } else {
            assert!(message["result"]["processId"].is_string(), "{message}");
        }
        answered.push(message["id"].as_i64().unwrap());
    }
    assert_eq!(answered, ids, "responses in request order");
    let mut events = Vec::new();
    while events
        .iter()
        .filter(|n: &&Value| n["method"] == "process/closed")
        .count()
        < 20
    {
        events.push(c.notification().await);
    }
    for i in 0..20 {
        let of: Vec<Value> = events
            .iter()
            .filter(|n| n["params"]["processId"] == format!("p{i}").as_str())
            .cloned()
            .collect();
        assert_eq!(output_of(&of), format!("got {i}\n"));
    }
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// The home the password database gives the current user.
fn passwd_home() -> PathBuf {
    // SAFETY: getpwuid returns a pointer into static storage or null; it is read at once, on
    // this thread, before any other passwd call.
    unsafe {
        let entry = libc::getpwuid(libc::getuid());
        assert!(!entry.is_null(), "no passwd entry for this uid");
        let dir = std::ffi::CStr::from_ptr((*entry).pw_dir);
        PathBuf::from(std::ffi::OsStr::from_encoded_bytes_unchecked(
            dir.to_bytes(),
        ))
    }
}

#[tokio::test]
async fn with_home_unset_protect_home_still_protects_the_passwd_home() {
    let server = Server::start_without_home(&["--protect", "home"]);
    let mut c = server.client().await;
    let home = passwd_home();
    let probe = home.join(format!(".{}", server.marker));
    let script = format!(
        "(echo x > {}) 2>/dev/null && echo home-WRITTEN || echo home-denied",
        probe.display()
    );
    c.start("w", &["sh", "-c", &script], json!({})).await;
    let text = output_of(&c.until_closed("w").await);
    let written = probe.exists();
    let _ = std::fs::remove_file(&probe);
    let info = c.call("environment/info", json!({})).await.unwrap();
    let protection = &info["cleanroom"]["protection"];
    assert_eq!(
        protection["enforcement"], "full",
        "Landlock is required for this test: {protection}"
    );
    assert_eq!(text, "home-denied\n", "{protection}");
    assert!(!written);
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Whether any thread of `pid` still runs (a zombie leader with live threads is alive).
fn has_live_thread(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        })
    })
}

#[tokio::test]
async fn a_daemon_whose_main_thread_exited_dies_with_its_session() {
    let server = Server::start(&["--session-ttl", "0"]);
    let mut c = server.client().await;
    // The leader thread exits, another thread runs on: the leader is a zombie, the process is
    // alive, and its environment is readable only through the live thread.
    let python = format!(
        "import ctypes, threading, time\n\
         threading.Thread(target=lambda: [time.sleep(0.1) for _ in iter(int, 1)]).start()\n\
         ctypes.CDLL(None).pthread_exit(None)  # {}",
        server.marker
    );
    let script = format!("setsid python3 -c '{python}' </dev/null >/dev/null 2>&1 & echo $!");
    c.start("z", &["sh", "-c", &script], json!({})).await;
    let pid = pids_in(&output_of(&c.until_closed("z").await))[0];
    let deadline = Instant::now() + TIMEOUT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "the leader thread never exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(has_live_thread(pid), "a zombie leader with a live thread");
    let run_id = c.run_id.clone();
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    while has_live_thread(pid) {
        assert!(
            Instant::now() < deadline,
            "{pid} still runs after its session ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop(&run_id);
}

/// Starts a fork-and-exit chain (TERM ignored, each process forks and exits at once; see
/// [`common::CHAIN_C`]) with `marker` in its arguments, drops the socket while it forks, and
/// checks that nothing of it outlives the session.
///
/// Proof of death: every generation inherits the write end of a FIFO the test reads, so the
/// read end sees end-of-file only once no process of the chain is left (a `/proc` scan alone
/// can miss a chain that moves while it is read).
async fn a_chain_dies_with_the_session(server_args: &[&str]) {
    let server = Server::start(server_args);
    let dir = server.state.path();
    let bin = common::compile_c(dir, "chain", common::CHAIN_C);
    let fifo = dir.join("alive");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let mut holders = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut c = server.client().await;
    // Bounded twice over, as PID 1 here never reaps: 20,000 generations at most, and for an
    // unprivileged server a process limit (root ignores RLIMIT_NPROC).
    let script = r#"exec 3>"$CRT_DIR/alive"; exec prlimit --nproc=200 -- "$0" 20000 "$1""#;
    let argv = ["sh", "-c", script, bin.to_str().unwrap(), &server.marker];
    let env = json!({"env": {"CRT_DIR": dir.to_str().unwrap()}});
    c.start("chain", &argv, env).await;
    let deadline = Instant::now() + TIMEOUT;
    while !dir.join("chain.pid").exists() {
        assert!(Instant::now() < deadline, "the chain never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let run_id = c.run_id.clone();
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match holders.read(&mut [0u8; 64]) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read {}: {e}", fifo.display()),
        }
        assert!(
            Instant::now() < deadline,
            "the chain outlived its session: {:?}",
            common::processes_with(&server.marker)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_no_survivors(&run_id, &server.marker);
    server.stop(&run_id);
}

#[tokio::test]
async fn a_fork_and_exit_chain_dies_with_the_dropped_socket() {
    a_chain_dies_with_the_session(&["--session-ttl", "0"]).await;
}

#[tokio::test]
async fn a_fork_and_exit_chain_dies_when_its_session_ttl_expires() {
    a_chain_dies_with_the_session(&["--session-ttl", "1s"]).await;
}

#[tokio::test]
async fn a_client_cannot_read_write_signal_or_terminate_another_sessions_process() {
    let server = Server::start(&[]);
    let mut owner = server.client().await;
    let mut other = server.client().await;
    assert_ne!(owner.session, other.session);
    let script = format!("echo ready; exec cat; : {}", server.marker);
    owner
        .start("p", &["sh", "-c", &script], json!({"pipeStdin": true}))
        .await;
    owner.output_until("p", "ready\n").await;
    let (code, message) = other
        .error("process/read", json!({"processId": "p", "waitMs": 0}))
        .await;
    assert_eq!((code, message.as_str()), (-32600, "unknown process id p"));
    let theirs = json!({"processId": "p", "chunk": BASE64.encode("theirs\n")});
    let r = other.call("process/write", theirs).await.unwrap();
    assert_eq!(r["status"], "unknownProcess");
    let interrupt = json!({"processId": "p", "signal": "interrupt"});
    other.call("process/signal", interrupt).await.unwrap();
    let r = other
        .call("process/terminate", json!({"processId": "p"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"running": false}));
    // The ids are per session: the other client's own "p" is another process.
    other.start("p", &["true"], json!({})).await;
    other.until_closed("p").await;
    // The owner's process saw none of it: alive, and its stdin carries only the owner's bytes.
    let mine = json!({"processId": "p", "chunk": BASE64.encode("mine\n")});
    let r = owner.call("process/write", mine).await.unwrap();
    assert_eq!(r["status"], "accepted");
    assert_eq!(owner.output_until("p", "mine\n").await, "mine\n");
    let r = owner
        .call("process/terminate", json!({"processId": "p"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"running": true}));
    let run_id = owner.run_id.clone();
    server.stop(&run_id);
}

/// The newest suffix of `outputs` (`(seq, bytes)` in seq order) that retention keeps: at most
/// 1 MiB and 50,000 chunks (exec-server-protocol.md §4).
fn retained_seqs(outputs: &[(u64, usize)]) -> Vec<u64> {
    let (mut bytes, mut kept) = (0usize, Vec::new());
    for &(seq, len) in outputs.iter().rev() {
        if bytes + len > 1 << 20 || kept.len() == 50_000 {
            break;
        }
        bytes += len;
        kept.push(seq);
    }
    kept.reverse();
    kept
}

/// `(seq, chunk)` of every chunk of a `process/read` result.
fn read_chunks(read: &Value) -> Vec<(u64, Vec<u8>)> {
    read["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let data = BASE64.decode(c["chunk"].as_str().unwrap()).unwrap();
            (c["seq"].as_u64().unwrap(), data)
        })
        .collect()
}

#[tokio::test]
async fn retention_keeps_the_newest_mebibyte_of_a_processs_output() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    c.start("big", &["seq", "1", "500000"], json!({})).await;
    let events = c.until_closed("big").await;
    let outputs: Vec<(u64, usize)> = events
        .iter()
        .filter(|n| n["method"] == "process/output")
        .map(|n| {
            let len = BASE64
                .decode(n["params"]["chunk"].as_str().unwrap())
                .unwrap()
                .len();
            (n["params"]["seq"].as_u64().unwrap(), len)
        })
        .collect();
    let total: usize = outputs.iter().map(|o| o.1).sum();
    assert!(total > 3 << 20, "seq wrote {total} bytes");
    let read = c
        .call("process/read", json!({"processId": "big"}))
        .await
        .unwrap();
    let chunks = read_chunks(&read);
    let seqs: Vec<u64> = chunks.iter().map(|c| c.0).collect();
    assert_eq!(
        seqs,
        retained_seqs(&outputs),
        "the newest chunks within 1 MiB"
    );
    let kept: Vec<u8> = chunks.into_iter().flat_map(|c| c.1).collect();
    // Dropping whole chunks, retention keeps more than 1 MiB less the largest chunk.
    let largest = outputs.iter().map(|o| o.1).max().unwrap();
    assert!(
        kept.len() > (1 << 20) - largest,
        "{} bytes kept (largest chunk {largest})",
        kept.len()
    );
    assert!(kept.ends_with(b"\n499999\n500000\n"));
    assert_eq!(read["closed"], true);
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn a_closed_process_stays_readable_for_the_process_retention_then_is_forgotten() {
    // Clocks are read only on the side that load cannot make wrong: the instant before the
    // start is earlier than the close, so "forgotten at least 2 s after it" holds however late
    // the reads come (readable long after closing: the one-minute test below, with a margin).
    let server = Server::start(&["--process-retention", "2s"]);
    let mut c = server.client().await;
    let before_start = Instant::now();
    c.start("done", &["echo", "kept"], json!({})).await;
    c.until_closed("done").await;
    let read = json!({"processId": "done"});
    let forgotten = loop {
        match c.call("process/read", read.clone()).await {
            Ok(r) => {
                assert_eq!(output_of_read(&r), "kept\n");
                assert!(before_start.elapsed() < 2 * TIMEOUT, "never forgotten");
            }
            Err(e) => break (e, before_start.elapsed()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(forgotten.0, (-32600, "unknown process id done".into()));
    assert!(
        forgotten.1 >= Duration::from_secs(2),
        "forgotten {:?} after closing",
        forgotten.1
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Reads `ws` until `deadline`, noting when each ping arrives; any other message is a failure.
async fn idle_until(ws: &mut Ws, deadline: Instant, pings: &mut Vec<Instant>) {
    loop {
        let frame = tokio::time::timeout_at(deadline.into(), ws.next()).await;
        match frame {
            Err(_) => return,
            Ok(Some(Ok(Message::Ping(_)))) => pings.push(Instant::now()),
            Ok(Some(Ok(Message::Pong(_)))) => {}
            other => panic!("an idle connection got {other:?}"),
        }
    }
}

/// One real minute: the defaults (30 s, 60 s) are what is promised, so no knob shortens them.
/// Each clock reading is on the side load cannot make wrong (a late read or a late ping only
/// lengthens what is measured): the instant before connecting precedes the server's accept, the
/// instant after the close follows the server's; "readable" is checked 15 s before the 60 s,
/// "forgotten" 10 s after, and the pings counted till then (the second is due at 60 s).
#[tokio::test]
async fn by_default_an_idle_client_is_pinged_every_30_s_and_a_closed_process_is_kept_60_s() {
    let server = Server::start(&[]);
    let before_connect = Instant::now();
    let mut c = server.client().await;
    c.start("done", &["echo", "kept"], json!({})).await;
    c.until_closed("done").await;
    let closed = Instant::now();
    let read = json!({"processId": "done"});
    let mut pings = Vec::new();
    idle_until(&mut c.ws, closed + Duration::from_secs(45), &mut pings).await;
    let r = c.call("process/read", read.clone()).await.unwrap();
    assert_eq!(output_of_read(&r), "kept\n", "readable 45 s after closing");
    idle_until(&mut c.ws, closed + Duration::from_secs(70), &mut pings).await;
    let (code, _) = c.error("process/read", read).await;
    assert_eq!(code, -32600, "forgotten 70 s after closing");
    let after: Vec<Duration> = pings.iter().map(|p| *p - before_connect).collect();
    assert!(after.len() >= 2, "pings at {after:?}");
    for (i, at) in after.iter().enumerate() {
        assert!(
            *at >= Duration::from_secs(30 * (i as u64 + 1)),
            "ping {} came before {} s: {after:?}",
            i + 1,
            30 * (i + 1)
        );
    }
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

/// Starts `id`, whose main process lives on with two members that only membership rules find: a
/// double-forked daemon re-parented to the server (found by its tag) and a child that cleared its
/// environment (found as a descendant of the living main process); neither holds an output.
/// Returns their pids.
async fn start_hidden_members(c: &mut Client, id: &str, marker: &str) -> Vec<i32> {
    let quiet = format!(
        "exec </dev/null >/dev/null 2>&1; for i in $(seq 3000); do sleep 0.1; done; : {marker}"
    );
    let script = format!(
        "(setsid sh -c 'echo pid $$; {quiet}' &); env -i sh -c '{quiet}' & echo pid $!; \
         for i in $(seq 3000); do sleep 0.1; done; : {marker}"
    );
    c.start(id, &["sh", "-c", &script], json!({})).await;
    let mut text = String::new();
    while pids_in(&text).len() < 2 {
        text.push_str(&c.output_until(id, "\n").await);
    }
    let pids = pids_in(&text);
    assert!(pids.iter().all(|&p| alive(p)), "{text}");
    pids
}

/// Waits until `pid` is gone from `/proc` (reaped, not a zombie).
fn wait_reaped(pid: i32, limit: Duration) {
    let deadline = Instant::now() + limit;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "{pid} was never reaped");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn terminating_a_process_or_dropping_a_session_spares_every_other_process_and_session() {
    // Membership is by the process's own tree, tag or output descriptors, and by the session's
    // tag: the server's other descendants (a daemon of the same session, another session's
    // daemon) are never members, however alive: a termination kills and waits for its own
    // set only, and every exited orphan is reaped.
    let server = Server::start(&["--session-ttl", "0"]);
    let mut c = server.client().await;
    let mut other = server.client().await;
    let sibling = start_daemon(&mut c, "d", &server.marker).await;
    let neighbour = start_daemon(&mut other, "n", &server.marker).await;
    let hidden = start_hidden_members(&mut c, "h", &server.marker).await;
    let reply = c.call("process/terminate", json!({"processId": "h"})).await;
    assert_eq!(reply.unwrap(), json!({"running": true}));
    assert!(hidden.iter().all(|&p| !alive(p)), "a member of h survived");
    let tree = start_resistant_tree(&mut c, "k", &server.marker).await;
    let reply = c.call("process/terminate", json!({"processId": "k"})).await;
    assert_eq!(reply.unwrap(), json!({"running": true}));
    assert!(
        tree.iter().all(|&p| !alive(p)),
        "replied after the tree was reaped"
    );
    assert!(
        alive(sibling),
        "a termination killed another process of its session"
    );
    assert!(
        alive(neighbour),
        "a termination killed another session's process"
    );
    drop(c);
    wait_dead(&[sibling], Duration::from_secs(10));
    wait_reaped(sibling, Duration::from_secs(5));
    // The session's sweep by its tag follows its processes' terminations.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        alive(neighbour),
        "ending a session killed another session's process"
    );
    let run_id = other.run_id.clone();
    drop(other);
    wait_dead(&[neighbour], Duration::from_secs(10));
    server.stop(&run_id);
}

#[tokio::test]
async fn terminate_sends_sigterm_to_every_member_before_any_sigkill() {
    // A process tree that honours SIGTERM ends by it: the main process by its handler's exit
    // status, and every other member gets its own SIGTERM (not only the first one listed).
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let m = &server.marker;
    let script = format!(
        "sh -c \"trap 'echo term child; exit 0' TERM; echo up; for i in \\$(seq 3000); do sleep 0.1; done; : {m}\" & \
         trap 'exit 3' TERM; for i in $(seq 3000); do sleep 0.1; done; : {m}"
    );
    c.start("t", &["sh", "-c", &script], json!({})).await;
    let mut text = c.output_until("t", "up").await;
    let reply = c.call("process/terminate", json!({"processId": "t"})).await;
    assert_eq!(reply.unwrap(), json!({"running": true}));
    let events = c.until_closed("t").await;
    text.push_str(&output_of(&events));
    assert!(
        text.contains("term child"),
        "the child got no SIGTERM: {text:?}"
    );
    assert_eq!(
        events[events.len() - 2]["params"]["exitCode"],
        3,
        "{events:?}"
    );
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}

#[tokio::test]
async fn a_process_runs_in_its_sessions_cgroup_leaf_from_its_start() {
    // As root each session has a leaf `s-<session id>` below the server's `cleanroom-<run id>`,
    // and its processes live in it from their start: born there (clone3 with
    // CLONE_INTO_CGROUP), or joined before exec (a terminal's process, or where the kernel
    // cannot do that).
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let info = c.call("environment/info", json!({})).await.unwrap();
    if info["cleanroom"]["containment"] != "cgroup" {
        common::skip(&format!(
            "no cgroup containment here: {}",
            info["cleanroom"]["containment"]
        ));
    } else {
        let leaf = format!("/cleanroom-{}/s-{}", c.run_id, c.session);
        for tty in [false, true] {
            let id = format!("cg{tty}");
            c.start(&id, &["cat", "/proc/self/cgroup"], json!({"tty": tty}))
                .await;
            let text = output_of(&c.until_closed(&id).await);
            let unified = text
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or_else(|| panic!("no cgroup v2 line: {text}"));
            assert!(
                unified.trim_end().ends_with(&leaf),
                "{unified} is not {leaf}"
            );
        }
    }
    let run_id = c.run_id.clone();
    server.stop(&run_id);
}
