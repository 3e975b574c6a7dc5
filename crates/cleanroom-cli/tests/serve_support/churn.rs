//! An agent host under churn, as issue 26 describes it: N clients, each in a loop until the
//! deadline: connect, `initialize`, start three processes (64 KiB of output, a `setsid` and a
//! `nohup` daemon, a long `sleep`; the output one on a terminal 20 % of the time), read the output
//! until it is closed, terminate the `sleep` half of the time, drop the socket without a close
//! 30 % of the time (else close it properly), and reconnect at once.
//!
//! Shared by the soak test (`tests/serve_soak.rs`) and the bench client
//! (`cleanroom-exec-server/examples/bench.rs --churn`), which drives Codex's own exec-server
//! with the same requests: every process gets `CHURN_MARK=<mark>` in its environment, so the
//! processes a client left are counted by that mark in `/proc/*/environ`, whatever the server.
//!
//! Besides the clients, [`Watch`] samples the server process (descriptors, threads, RSS).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long one step of a client (a connect, a response, the output) may take before the
/// client counts a failure and starts over.
const STEP_LIMIT: Duration = Duration::from_secs(30);
/// Bytes the output process writes.
pub const OUTPUT_BYTES: usize = 64 * 1024;
/// The name of the variable every process of the churn carries.
pub const MARK_VAR: &str = "CHURN_MARK";

/// What the clients do.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Clients at once.
    pub clients: usize,
    /// How long they churn.
    pub duration: Duration,
    /// `CHURN_MARK`'s value in every process.
    pub mark: String,
}

/// What the clients saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Sessions initialized.
    pub sessions: u64,
    /// `initialize` refused (an error response).
    pub refused: u64,
    /// The first refusals' messages.
    pub refusals: Vec<String>,
    /// Anything else that went wrong (a lost connection, an error response, a step that took
    /// longer than [`STEP_LIMIT`]): how many, and the first few.
    pub failed: u64,
    pub failures: Vec<String>,
    /// Processes started.
    pub started: u64,
    /// `process/terminate` of a running `sleep` that answered `running: true`.
    pub terminated: u64,
    /// Sockets dropped without a close.
    pub dropped: u64,
    /// Output bytes received.
    pub output: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.sessions += other.sessions;
        self.refused += other.refused;
        self.failed += other.failed;
        self.started += other.started;
        self.terminated += other.terminated;
        self.dropped += other.dropped;
        self.output += other.output;
        for (mine, theirs) in [
            (&mut self.refusals, other.refusals),
            (&mut self.failures, other.failures),
        ] {
            mine.extend(theirs);
            mine.truncate(5);
        }
    }

    fn fail(&mut self, why: String) {
        self.failed += 1;
        if self.failures.len() < 5 {
            self.failures.push(why);
        }
    }
}

/// Runs `shape.clients` clients against `url` for `shape.duration`; returns what they saw.
pub async fn churn(url: &str, shape: &Shape) -> Tally {
    let deadline = Instant::now() + shape.duration;
    let mut clients = tokio::task::JoinSet::new();
    for index in 0..shape.clients {
        let (url, mark) = (url.to_string(), shape.mark.clone());
        clients.spawn(async move { client(&url, &mark, index as u64, deadline).await });
    }
    let mut tally = Tally::default();
    while let Some(done) = clients.join_next().await {
        tally.add(done.expect("a churn client panicked"));
    }
    tally
}

/// One client's loop.
async fn client(url: &str, mark: &str, index: u64, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut random = Random::new(index);
    let mut round = 0u64;
    while Instant::now() < deadline {
        round += 1;
        let ws = match tokio::time::timeout(STEP_LIMIT, tokio_tungstenite::connect_async(url)).await
        {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                tally.fail(format!("connect: {e}"));
                continue;
            }
            Err(_) => {
                tally.fail("connect: timed out".into());
                continue;
            }
        };
        let mut session = Session {
            ws,
            next_id: 0,
            pending: Vec::new(),
        };
        let plan = Plan {
            tty: random.chance(20),
            terminate: random.chance(50),
            drop: random.chance(30),
        };
        let prefix = format!("c{index}r{round}");
        match tokio::time::timeout(
            STEP_LIMIT * 2,
            session.round(&prefix, mark, plan, &mut tally),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tally.fail(e),
            Err(_) => tally.fail(format!("{prefix}: a round took over {:?}", STEP_LIMIT * 2)),
        }
        if plan.drop {
            tally.dropped += 1;
            drop(session);
        } else {
            session.close().await;
        }
    }
    tally
}

/// What one round does besides starting and reading.
#[derive(Clone, Copy, Debug)]
struct Plan {
    tty: bool,
    terminate: bool,
    drop: bool,
}

struct Session {
    ws: Ws,
    next_id: u64,
    /// Notifications read while a response was awaited.
    pending: Vec<Value>,
}

impl Session {
    /// initialize, three starts, the output read until closed, maybe a terminate.
    async fn round(
        &mut self,
        prefix: &str,
        mark: &str,
        plan: Plan,
        tally: &mut Tally,
    ) -> Result<(), String> {
        match self
            .call("initialize", json!({"clientName": "churn"}))
            .await?
        {
            Ok(_) => tally.sessions += 1,
            Err(message) => {
                tally.refused += 1;
                if tally.refusals.len() < 5 {
                    tally.refusals.push(message);
                }
                return Ok(());
            }
        }
        self.send(json!({"method": "initialized"})).await?;
        let output = format!("{prefix}-out");
        let head = format!("head -c {OUTPUT_BYTES} /dev/zero");
        let daemons = "setsid sleep 300 </dev/null & nohup sleep 300 >/dev/null 2>&1 & echo ok";
        let starts: [(&str, Vec<&str>, bool); 3] = [
            (&output, vec!["/bin/sh", "-c", &head], plan.tty),
            ("daemons", vec!["/bin/sh", "-c", daemons], false),
            ("sleep", vec!["/bin/sleep", "300"], false),
        ];
        for (id, argv, tty) in starts {
            self.start(id, &argv, tty, mark).await?;
            tally.started += 1;
        }
        tally.output += self.read_until_closed(&output).await? as u64;
        let read = self
            .call("process/read", json!({"processId": output, "afterSeq": 0}))
            .await?
            .map_err(|e| format!("process/read: {e}"))?;
        if read["closed"] != true {
            return Err(format!("process/read of a closed process: {read}"));
        }
        if plan.terminate {
            let reply = self
                .call("process/terminate", json!({"processId": "sleep"}))
                .await?
                .map_err(|e| format!("process/terminate: {e}"))?;
            if reply["running"] != true {
                return Err(format!("process/terminate of a running sleep: {reply}"));
            }
            tally.terminated += 1;
        }
        Ok(())
    }

    async fn start(
        &mut self,
        id: &str,
        argv: &[&str],
        tty: bool,
        mark: &str,
    ) -> Result<(), String> {
        let env_policy = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
            "set": {}, "includeOnly": []});
        let params = json!({"processId": id, "argv": argv, "cwd": "file:///", "tty": tty,
            "arg0": null, "env": {MARK_VAR: mark}, "envPolicy": env_policy});
        self.call("process/start", params)
            .await?
            .map(drop)
            .map_err(|e| format!("process/start {id}: {e}"))
    }

    /// The output of `id` until its `process/closed`; returns its byte count, which must be
    /// [`OUTPUT_BYTES`] (a terminal passes the zeros unchanged).
    async fn read_until_closed(&mut self, id: &str) -> Result<usize, String> {
        let mut bytes = 0;
        loop {
            let message = match self.pending.is_empty() {
                true => self.recv().await?,
                false => self.pending.remove(0),
            };
            if message["params"]["processId"] != id {
                continue;
            }
            match message["method"].as_str() {
                Some("process/output") => {
                    use base64::Engine as _;
                    let chunk = message["params"]["chunk"].as_str().unwrap_or_default();
                    bytes += base64::engine::general_purpose::STANDARD
                        .decode(chunk)
                        .map_err(|e| format!("chunk: {e}"))?
                        .len();
                }
                Some("process/closed") if bytes == OUTPUT_BYTES => return Ok(bytes),
                Some("process/closed") => return Err(format!("{id}: {bytes} bytes of output")),
                _ => {}
            }
        }
    }

    /// The result of `method`, or its error's message; `Err` when the connection failed.
    async fn call(&mut self, method: &str, params: Value) -> Result<Result<Value, String>, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"id": id, "method": method, "params": params}))
            .await?;
        loop {
            let message = self.recv().await?;
            if message.get("method").is_some() {
                self.pending.push(message);
            } else if message["id"] == id {
                return Ok(match message.get("error") {
                    Some(error) => Err(error["message"].as_str().unwrap_or("?").to_string()),
                    None => Ok(message["result"].clone()),
                });
            }
        }
    }

    async fn send(&mut self, message: Value) -> Result<(), String> {
        self.ws
            .send(Message::text(message.to_string()))
            .await
            .map_err(|e| format!("send: {e}"))
    }

    async fn recv(&mut self) -> Result<Value, String> {
        loop {
            let frame = tokio::time::timeout(STEP_LIMIT, self.ws.next())
                .await
                .map_err(|_| format!("no message for {STEP_LIMIT:?}"))?;
            match frame {
                Some(Ok(Message::Text(text))) => {
                    return serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
                }
                Some(Ok(Message::Close(close))) => return Err(format!("closed: {close:?}")),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("receive: {e}")),
                None => return Err("the connection ended".into()),
            }
        }
    }

    /// A proper close: the close frame, then whatever the server still sends until its close.
    async fn close(mut self) {
        let _ = self.ws.close(None).await;
        let _ = tokio::time::timeout(STEP_LIMIT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }
}

/// A small deterministic generator per client (xorshift64*), so runs are comparable.
struct Random(u64);

impl Random {
    fn new(seed: u64) -> Random {
        Random(0x9E37_79B9_7F4A_7C15 ^ (seed.wrapping_add(1)).wrapping_mul(0xBF58_476D_1CE4_E5B9))
    }

    /// True `percent` % of the time.
    fn chance(&mut self, percent: u64) -> bool {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) % 100 < percent
    }
}

/// One look at a process: open descriptors, threads, resident memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub fds: usize,
    pub threads: usize,
    pub rss_kib: u64,
}

/// Samples process `pid` (None once it is gone).
pub fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(Sample {
        fds,
        threads: field("Threads:")? as usize,
        rss_kib: field("VmRSS:")?,
    })
}

/// The peak of the thread count of `pid`, sampled every 50 ms on a thread of its own until
/// dropped.
pub struct Watch {
    peak: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    pub fn start(pid: u32) -> Watch {
        use std::sync::atomic::Ordering;
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(now) = sample(pid) {
                        peak.fetch_max(now.threads, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Watch {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// The most threads seen so far.
    pub fn peak_threads(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The living processes (zombies excluded) whose environment has `CHURN_MARK=<mark>`.
pub fn marked(mark: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| is_marked(pid, mark))
        .collect()
}

/// Whether process `pid` is alive (not a zombie) and has `CHURN_MARK=<mark>`.
pub fn is_marked(pid: i32, mark: &str) -> bool {
    let needle = format!("{MARK_VAR}={mark}");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    environ.split(|&b| b == 0).any(|e| e == needle.as_bytes()) && !zombie(pid)
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        state.starts_with('Z') || state.starts_with('X')
    })
}
