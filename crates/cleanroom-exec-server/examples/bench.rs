//! Benchmark client of an exec-server: `cleanroom serve`, or Codex's own `codex exec-server` as
//! the reference, each driven with exactly the same requests.
//!
//! Measures, with one client over loopback:
//! 1. the round trip `process/start` → `process/closed` of `/bin/true` (median and p90 over N
//!    runs; `--gap-ms` pauses before each, untimed, as an agent's commands are spaced out);
//! 2. throughput of streaming B bytes of child output (`/usr/bin/head -c B /dev/zero`) as
//!    `process/output` notifications, K times (the median stream, with the CPU time the
//!    server's own threads spent on it, from its CPU-time clock);
//! 3. unless `--no-baselines`, baselines in the same harness through tokio-tungstenite: the same
//!    B bytes sent as raw binary frames of the server's chunk size, and as the very notification
//!    text frames the server would send (the client parses and decodes them exactly as in 2),
//!    by a sender on a thread and runtime of its own, as a server process has.
//!
//! The client runs on one thread (tokio's current-thread runtime): a frame it receives wakes the
//! task waiting for it without a hop between threads, which the round trip would count.
//!
//! The requests are what both servers accept: `initialize`, the `initialized` notification
//! (Codex requires it before exec methods, cleanroom accepts it), and `process/start` with the
//! fields Codex requires (`env`, `tty`, `arg0`) and the `envPolicy` the Codex client sends
//! (inherit all), cwd `file:///`, no `sandbox` field. Both servers get the same cleared
//! environment: a fixed PATH, LANG, and HOME and TMPDIR private to the work dir.
//!
//! The reference is started only inside a network namespace whose only interface is `lo`
//! (`scripts/bench` runs this client under `unshare --net`): it can reach nothing but loopback.
//!
//! The client keeps its own work small so the figures measure the server: a chunk is found by
//! SIMD search and decoded by a SIMD base64 decoder straight from the frame into one reused
//! buffer, and only the small JSON around it goes through serde_json (see [`Decoder`]). It still
//! checks everything: per process seqs strictly increasing (only unique for the reference, which
//! delivers them out of order), every chunk from stdout and nothing but zeros, the byte count
//! exact.
//!
//! With `--churn SECONDS` it measures instead what issue 26 asks of a server under churn: the
//! churn client (`cleanroom-cli/tests/serve_support/churn.rs`, shared with the soak test) runs
//! `--clients N` (16) clients for that long, then the server's descriptors, threads and RSS are
//! read up to `--after SECONDS` (90) after the last client, with the processes the clients left
//! and the shutdown's length (processes a server left are killed afterwards, by their mark).
//!
//! Usage: `bench (--cleanroom PATH | --reference CODEX) --work DIR [--rounds N] [--bytes B]
//! [--streams K] [--gap-ms MS] [--no-baselines] [--churn SECONDS [--clients N] [--after S]]`;
//! DIR is an existing private dir the caller removes (cleanroom's state dir, the servers' HOME,
//! TMPDIR and CODEX_HOME go in it). `scripts/bench` builds it and runs it once per round and
//! server for its `serve-*` pairs, and once per server for `serve-churn`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64_simd::{AsOut, STANDARD as BASE64};
use futures_util::{SinkExt, StreamExt};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Bytes per chunk: what one read of a default-sized pipe returns at most.
const CHUNK: usize = 64 * 1024;

/// How long a server may take to exit after SIGTERM.
const STOP_PATIENCE: Duration = Duration::from_secs(30);

/// The exec-server to drive.
enum Server {
    /// `cleanroom --state-dir WORK/state serve`.
    Cleanroom(PathBuf),
    /// `codex exec-server`, with CODEX_HOME in the work dir.
    Reference(PathBuf),
}

struct Options {
    server: Server,
    work: PathBuf,
    rounds: usize,
    bytes: usize,
    streams: usize,
    /// Pause before each round trip (untimed): starts spaced out as an agent's are.
    gap: Duration,
    baselines: bool,
    /// `--churn SECONDS`: the churn figures instead of the round trips and streams.
    churn: Option<Duration>,
    /// `--clients N` of the churn.
    clients: usize,
    /// `--after SECONDS`: how long the churn's aftermath is watched.
    after: Duration,
}

fn options() -> Options {
    let mut server = None;
    let mut o = Options {
        server: Server::Cleanroom(PathBuf::new()),
        work: PathBuf::new(),
        rounds: 200,
        bytes: 256 << 20,
        streams: 1,
        gap: Duration::ZERO,
        baselines: true,
        churn: None,
        clients: 16,
        after: Duration::from_secs(90),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--cleanroom" => server = Some(Server::Cleanroom(absolute(value()))),
            "--reference" => server = Some(Server::Reference(absolute(value()))),
            "--work" => o.work = value().into(),
            "--rounds" => o.rounds = value().parse().expect("--rounds N"),
            "--bytes" => o.bytes = value().parse().expect("--bytes B"),
            "--streams" => o.streams = value().parse().expect("--streams K"),
            "--gap-ms" => o.gap = Duration::from_millis(value().parse().expect("--gap-ms MS")),
            "--no-baselines" => o.baselines = false,
            "--churn" => o.churn = Some(seconds(&value(), "--churn SECONDS")),
            "--clients" => o.clients = value().parse().expect("--clients N"),
            "--after" => o.after = seconds(&value(), "--after SECONDS"),
            other => panic!("unknown option {other}"),
        }
    }
    o.server = server.expect("--cleanroom PATH or --reference CODEX");
    assert!(o.work.is_dir(), "--work DIR: an existing private dir");
    o
}

fn seconds(text: &str, what: &str) -> Duration {
    Duration::from_secs(text.parse().unwrap_or_else(|_| panic!("{what}")))
}

/// `path` made absolute: the servers run in the work dir.
fn absolute(path: String) -> PathBuf {
    std::path::absolute(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

impl Server {
    fn name(&self) -> &'static str {
        match self {
            Server::Cleanroom(_) => "cleanroom serve",
            Server::Reference(_) => "codex exec-server",
        }
    }

    /// The server's command line, cleared environment and cwd, every private path under `work`.
    fn command(&self, work: &Path) -> Command {
        let private = |name: &str| {
            let dir = work.join(name);
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            dir
        };
        let mut command = match self {
            Server::Cleanroom(binary) => {
                let mut command = Command::new(binary);
                command
                    .env_clear()
                    .arg("--state-dir")
                    .arg(work.join("state"))
                    .arg("serve");
                command
            }
            Server::Reference(codex) => {
                assert_only_loopback();
                let mut command = Command::new(codex);
                command
                    .env_clear()
                    .arg("exec-server")
                    .env("CODEX_HOME", private("codex-home"));
                command
            }
        };
        command
            .args(["--listen", "ws://127.0.0.1:0"])
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", private("home"))
            .env("TMPDIR", private("tmp"))
            .current_dir(work);
        command
    }

    /// Starts the server with `args` after its own; returns it and the URL it printed as its
    /// first stdout line. With `log`, its stderr goes to that file.
    fn start(&self, work: &Path, args: &[&str], log: Option<&Path>) -> (Child, String) {
        let mut command = self.command(work);
        command.args(args);
        if let Some(log) = log {
            let file = std::fs::File::create(log).unwrap_or_else(|e| panic!("{log:?}: {e}"));
            command.stderr(file);
        }
        // SAFETY: prctl(2) between fork and exec, async-signal-safe: the server dies with this
        // client (the main thread, which starts and stops it), however the client ends.
        unsafe {
            command.pre_exec(
                || match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                },
            );
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.name()));
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut url = String::new();
        stdout.read_line(&mut url).unwrap();
        let url = url.trim().to_string();
        assert!(
            url.starts_with("ws://127.0.0.1:"),
            "{} printed {url:?} instead of its loopback URL",
            self.name()
        );
        // Whatever else it prints is drained, so it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        (child, url)
    }

    /// SIGTERM, then an exit 0 within [`STOP_PATIENCE`] (SIGKILL and a panic after it).
    fn stop(&self, mut child: Child) {
        // SAFETY: kill(2) on our own child's pid, not yet waited for.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not exit within {STOP_PATIENCE:?} of SIGTERM",
                    self.name()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{} exit {status:?}", self.name());
    }
}

/// Panics unless this process's network namespace has `lo` as its only interface
/// (/proc/self/net/dev follows the reader's namespace).
fn assert_only_loopback() {
    let dev = std::fs::read_to_string("/proc/self/net/dev").unwrap();
    let interfaces: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|line| line.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(
        interfaces,
        ["lo"],
        "the reference runs only in a network namespace with nothing but loopback: \
         unshare --net sh -c 'ip link set lo up && exec bench --reference ...'"
    );
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What the client reads of any frame, borrowed from it (or from its copy with the chunk cut out).
#[derive(Deserialize)]
struct Frame<'a> {
    id: Option<u64>,
    error: Option<IgnoredAny>,
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<Params<'a>>,
}

#[derive(Default, Deserialize)]
struct Params<'a> {
    #[serde(borrow, rename = "processId")]
    process_id: Option<&'a str>,
    seq: Option<u64>,
    #[serde(borrow)]
    stream: Option<&'a str>,
    /// A `Cow` so that the full parse takes a chunk with JSON escapes too.
    #[serde(borrow)]
    chunk: Option<Cow<'a, str>>,
}

/// A frame as the client sees it: response id, whether it is an error, method, and of a
/// notification its process id, seq, stream and decoded chunk.
struct Seen<'a> {
    id: Option<u64>,
    error: bool,
    method: Option<&'a str>,
    process_id: Option<&'a str>,
    seq: Option<u64>,
    stream: Option<&'a str>,
    data: &'a [u8],
}

/// The chunk's key as a compact serializer writes it; a raw `"` never occurs inside a JSON
/// string, so this is a key followed by a string value wherever it is found.
const CHUNK_KEY: &[u8] = br#""chunk":""#;

/// Parses frames, decoding the chunks of `process/output` notifications into one reused buffer.
///
/// Fast path: the chunk's base64 is found by SIMD search (its key, then the next `"`), decoded
/// straight from the frame (the decoder rejects anything outside the base64 alphabet, so an
/// escape makes it fail), and the rest of the frame, the chunk cut out, parsed by serde_json:
/// per frame the scalar work is the small JSON around the chunk. It counts only if that rest
/// has the cut chunk as `params.chunk`; anything else (no such key, an escape, the key at
/// another place) takes the full parse of the whole frame.
#[derive(Default)]
struct Decoder {
    buf: Vec<u8>,
    /// The frame with its chunk cut out, when the fast path applied.
    rest: String,
}

impl Decoder {
    fn decode<'a>(&'a mut self, text: &'a str) -> Seen<'a> {
        if let Some(len) = self.cut_and_decode(text) {
            let frame: Frame = serde_json::from_str(&self.rest).unwrap();
            return seen(frame, &self.buf[..len]);
        }
        let frame: Frame = serde_json::from_str(text).unwrap();
        let len = match frame.params.as_ref().and_then(|p| p.chunk.as_deref()) {
            Some(chunk) => decode_into(&mut self.buf, chunk.as_bytes())
                .unwrap_or_else(|e| panic!("chunk is not base64: {e}")),
            None => 0,
        };
        seen(frame, &self.buf[..len])
    }

    /// The fast path: with the chunk found, decoded into `buf` and cut out into `rest`, and the
    /// rest's `params.chunk` the cut (empty) one, the decoded length.
    fn cut_and_decode(&mut self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        let start = memchr::memmem::find(bytes, CHUNK_KEY)? + CHUNK_KEY.len();
        let end = start + memchr::memchr(b'"', &bytes[start..])?;
        let len = decode_into(&mut self.buf, &bytes[start..end]).ok()?;
        self.rest.clear();
        self.rest.push_str(&text[..start]);
        self.rest.push_str(&text[end..]);
        let frame: Frame = serde_json::from_str(&self.rest).ok()?;
        let cut = frame.params.and_then(|p| p.chunk);
        (cut.as_deref() == Some("")).then_some(len)
    }
}

/// Decodes base64 `chunk` into `buf`; returns the decoded length.
fn decode_into(buf: &mut Vec<u8>, chunk: &[u8]) -> Result<usize, base64_simd::Error> {
    buf.resize(BASE64.estimated_decoded_length(chunk.len()), 0);
    Ok(BASE64.decode(chunk, buf.as_out())?.len())
}

fn seen<'a>(frame: Frame<'a>, data: &'a [u8]) -> Seen<'a> {
    let params = frame.params.unwrap_or_default();
    Seen {
        id: frame.id,
        error: frame.error.is_some(),
        method: frame.method,
        process_id: params.process_id,
        seq: params.seq,
        stream: params.stream,
        data,
    }
}

/// Whether `data` is all zeros: an OR over blocks, which the compiler vectorizes (an `all` over
/// bytes, which may stop at any byte, runs one byte at a time).
fn zeros(data: &[u8]) -> bool {
    data.chunks(4096)
        .all(|block| block.iter().fold(0, |acc, &b| acc | b) == 0)
}

/// Checks one `process/output` chunk: from stdout, and nothing but the zeros of `head -c B
/// /dev/zero`; returns its length.
fn check_output(seen: &Seen) -> usize {
    assert_eq!(seen.stream, Some("stdout"), "process/output stream");
    assert!(zeros(seen.data), "process/output chunk is not zeros");
    seen.data.len()
}

async fn send(ws: &mut Ws, message: Value) {
    ws.send(Message::text(message.to_string())).await.unwrap();
}

async fn next_text(ws: &mut Ws) -> tokio_tungstenite::tungstenite::Utf8Bytes {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => return text,
            Some(Ok(_)) => continue,
            other => panic!("connection lost: {other:?}"),
        }
    }
}

/// Connects, `initialize`s and sends `initialized`.
async fn connect(url: &str) -> Ws {
    let (mut ws, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(client_config()), true)
            .await
            .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    send(
        &mut ws,
        json!({"id": 0, "method": "initialize", "params": {"clientName": "bench"}}),
    )
    .await;
    loop {
        let text = next_text(&mut ws).await;
        let mut decoder = Decoder::default();
        let seen = decoder.decode(&text);
        if seen.id == Some(0) {
            assert!(!seen.error, "initialize: {text}");
            break;
        }
    }
    send(&mut ws, json!({"method": "initialized"})).await;
    ws
}

/// The seqs of one process's notifications (one counter, shared by output, exited and closed).
enum Seqs {
    /// They must arrive in increasing order (cleanroom's guarantee): the last one seen.
    Increasing(u64),
    /// They must only be unique (the reference delivers them out of order): those seen.
    Unique(HashSet<u64>),
}

impl Seqs {
    fn new(ordered: bool) -> Seqs {
        if ordered {
            Seqs::Increasing(0)
        } else {
            Seqs::Unique(HashSet::new())
        }
    }

    fn check(&mut self, seq: u64) {
        match self {
            Seqs::Increasing(last) => {
                assert!(seq > *last, "seq {seq} after {last}");
                *last = seq;
            }
            Seqs::Unique(seen) => assert!(seen.insert(seq), "seq {seq} twice"),
        }
    }
}

/// Starts `argv` as request `id` and reads until its `process/closed` (its response and its
/// notifications may come in any order); returns decoded output bytes and chunks. With
/// `ordered`, the process's seqs must arrive in increasing order.
async fn run(
    ws: &mut Ws,
    id: u64,
    process_id: &str,
    argv: &[&str],
    ordered: bool,
) -> (usize, usize) {
    let env_policy = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
        "set": {}, "includeOnly": []});
    let params = json!({"processId": process_id, "argv": argv, "cwd": "file:///", "env": {},
        "envPolicy": env_policy, "tty": false, "arg0": null});
    send(
        ws,
        json!({"id": id, "method": "process/start", "params": params}),
    )
    .await;
    let (mut bytes, mut chunks, mut started) = (0, 0, false);
    let mut seqs = Seqs::new(ordered);
    let mut decoder = Decoder::default();
    loop {
        let text = next_text(ws).await;
        let seen = decoder.decode(&text);
        if seen.id == Some(id) && seen.method.is_none() {
            assert!(!seen.error, "process/start: {text}");
            started = true;
            continue;
        }
        if seen.process_id != Some(process_id) {
            continue;
        }
        seqs.check(
            seen.seq
                .unwrap_or_else(|| panic!("no seq: {:?}", seen.method)),
        );
        match seen.method {
            Some("process/output") => {
                bytes += check_output(&seen);
                chunks += 1;
            }
            Some("process/closed") => {
                assert!(started, "process/closed before the process/start response");
                return (bytes, chunks);
            }
            _ => {}
        }
    }
}

fn client_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(256 << 20))
        .max_frame_size(Some(256 << 20))
}

/// What one server showed.
struct Figures {
    /// Round trips of `true`, sorted.
    trips: Vec<Duration>,
    /// Per stream: bytes/s and the server's CPU time (its own threads, not the child's).
    streams: Vec<(f64, Duration)>,
    avg_chunk: usize,
}

/// The round trips of `true` (10 warm-up runs first), then the streams.
async fn bench_server(o: &Options) -> Figures {
    let (server, url) = o.server.start(&o.work, &[], None);
    let mut ws = connect(&url).await;
    let ordered = matches!(o.server, Server::Cleanroom(_));
    let mut trips = Vec::new();
    let mut id = 0;
    for round in 0..o.rounds + 10 {
        if !o.gap.is_zero() {
            tokio::time::sleep(o.gap).await;
        }
        let started = Instant::now();
        id += 1;
        run(&mut ws, id, &format!("t{round}"), &["/bin/true"], ordered).await;
        if round >= 10 {
            trips.push(started.elapsed());
        }
    }
    trips.sort();
    let size = o.bytes.to_string();
    let argv = ["/usr/bin/head", "-c", size.as_str(), "/dev/zero"];
    let (mut streams, mut chunks) = (Vec::new(), 0);
    for stream in 0..o.streams {
        let (started, cpu) = (Instant::now(), cpu_time(server.id()));
        id += 1;
        let (bytes, n) = run(&mut ws, id, &format!("big{stream}"), &argv, ordered).await;
        let rate = bytes as f64 / started.elapsed().as_secs_f64();
        assert_eq!(bytes, o.bytes, "every byte arrives");
        streams.push((rate, cpu_time(server.id()) - cpu));
        chunks += n;
    }
    drop(ws);
    o.server.stop(server);
    streams.sort_by(|a, b| a.0.total_cmp(&b.0));
    Figures {
        trips,
        streams,
        avg_chunk: (o.bytes * o.streams) / chunks.max(1),
    }
}

/// CPU time so far of process `pid`, all its threads, exited ones included, to the nanosecond
/// (its CPU-time clock; /proc/PID/stat counts clock ticks, 10 ms here).
fn cpu_time(pid: u32) -> Duration {
    let mut clock: libc::clockid_t = 0;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both calls only write the out-parameters given, which live across the calls.
    let read = unsafe {
        libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0
            && libc::clock_gettime(clock, &mut now) == 0
    };
    assert!(
        read,
        "CPU-time clock of process {pid}: {}",
        std::io::Error::last_os_error()
    );
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Sends `bytes` in `frames` from an in-process tokio-tungstenite server; returns bytes/s as
/// counted by a client that does `consume` on every frame.
async fn bench_baseline(
    bytes: usize,
    frame: Message,
    consume: fn(&mut Decoder, &Message) -> usize,
) -> f64 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = bytes.div_ceil(CHUNK);
    // The sender on a thread and runtime of its own, as a server process has.
    let sender = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = TcpListener::from_std(listener).unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            for _ in 0..count {
                ws.send(frame.clone()).await.unwrap();
            }
            ws.close(None).await.unwrap();
        });
    });
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(
        format!("ws://{addr}/"),
        Some(client_config()),
        true,
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut received = 0usize;
    let mut decoder = Decoder::default();
    while let Some(Ok(message)) = ws.next().await {
        if message.is_close() {
            break;
        }
        received += consume(&mut decoder, &message);
    }
    let elapsed = started.elapsed().as_secs_f64();
    sender.join().unwrap();
    assert_eq!(received, count * CHUNK);
    received as f64 / elapsed
}

fn consume_binary(_: &mut Decoder, message: &Message) -> usize {
    message.len()
}

fn consume_notification(decoder: &mut Decoder, message: &Message) -> usize {
    let Message::Text(text) = message else {
        return 0;
    };
    check_output(&decoder.decode(text))
}

#[path = "../../cleanroom-cli/tests/serve_support/churn.rs"]
mod churn;

/// The churn of issue 26 against one server (`--session-ttl 2` for cleanroom), and what the
/// server holds afterwards: at the start, 5 s, 30 s and `o.after` after the last client (the
/// earlier looks no later than the last). Prints the figures, then all of them as one
/// `churn-json:` line for `scripts/bench`.
async fn churn_server(o: &Options, seconds: Duration) {
    let mark = format!("bench{}", std::process::id());
    let log = o.work.join("server.log");
    let args: &[&str] = match o.server {
        Server::Cleanroom(_) => &["--session-ttl", "2"],
        Server::Reference(_) => &[],
    };
    let (server, url) = o.server.start(&o.work, args, Some(&log));
    let pid = server.id();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let look = || churn::sample(pid).expect("the server is running");
    let start = look();
    let watch = churn::Watch::start(pid);
    let shape = churn::Shape {
        clients: o.clients,
        duration: seconds,
        mark: mark.clone(),
    };
    let tally = churn::churn(&url, &shape).await;
    let last = tokio::time::Instant::now();
    let at = |s: u64| tokio::time::sleep_until(last + Duration::from_secs(s).min(o.after));
    at(5).await;
    let after5 = look();
    at(30).await;
    let after30 = look();
    tokio::time::sleep_until(last + o.after).await;
    let after = look();
    let left = churn::marked(&mark).len();
    let peak = watch.peak_threads();
    drop(watch);
    let stopping = Instant::now();
    o.server.stop(server);
    let shutdown = stopping.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let left_after_exit = kill_marked(&mark);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let survived = text.lines().filter(|l| l.contains("survived")).count();
    let after_s = o.after.as_secs();
    println!("server: {}", o.server.name());
    println!(
        "churn: {} clients for {} s: {} sessions, {} processes, {} terminated, {} dropped",
        o.clients,
        seconds.as_secs(),
        tally.sessions,
        tally.started,
        tally.terminated,
        tally.dropped
    );
    println!(
        "churn: initialize refused {} {:?}; failures {} {:?}",
        tally.refused, tally.refusals, tally.failed, tally.failures
    );
    println!("churn: server log lines with 'survived': {survived}");
    println!(
        "churn: descriptors at start {}, 5 s after the last client {}",
        start.fds, after5.fds
    );
    println!(
        "churn: threads at start {}, peak {peak}, 30 s after {}",
        start.threads, after30.threads
    );
    println!(
        "churn: RSS at start {} KiB, {after_s} s after {} KiB",
        start.rss_kib, after.rss_kib
    );
    println!(
        "churn: processes left {after_s} s after {left}, after the server exited \
         {left_after_exit}; shutdown {} ms",
        shutdown.as_millis()
    );
    let figures = json!({
        "clients": o.clients, "seconds": seconds.as_secs(), "after_s": after_s,
        "sessions": tally.sessions, "processes": tally.started, "refused": tally.refused,
        "failures": tally.failed, "survived_lines": survived,
        "fds_start": start.fds, "fds_after_5s": after5.fds,
        "threads_start": start.threads, "threads_peak": peak, "threads_after_30s": after30.threads,
        "rss_kib_start": start.rss_kib, "rss_kib_after": after.rss_kib,
        "left_after": left, "left_after_exit": left_after_exit,
        "shutdown_ms": shutdown.as_millis() as u64,
    });
    println!("churn-json: {figures}");
}

/// SIGKILLs every living process marked `mark` (a server that let them escape); returns how
/// many there were.
fn kill_marked(mark: &str) -> usize {
    let left = churn::marked(mark);
    for &pid in &left {
        let Some(pid) = rustix::process::Pid::from_raw(pid) else {
            continue;
        };
        // Through a pidfd taken before the mark is read again: a pid reused meanwhile is not
        // killed.
        if let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            if churn::is_marked(pid.as_raw_nonzero().get(), mark) {
                let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            }
        }
    }
    left.len()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = options();
    if let Some(seconds) = o.churn {
        churn_server(&o, seconds).await;
        return;
    }
    let figures = bench_server(&o).await;
    let trips = &figures.trips;
    let (served, cpu) = figures.streams[figures.streams.len() / 2];
    let mib = |r: f64| r / (1024.0 * 1024.0);
    println!("server: {}", o.server.name());
    println!(
        "round trip start->closed of `true`: median {:.2?}, p90 {:.2?} over {} runs",
        trips[trips.len() / 2],
        trips[trips.len() * 9 / 10],
        trips.len()
    );
    println!(
        "streaming {} MiB of child output: {:.0} MiB/s (average chunk {} bytes, server CPU {} ms; \
         median of {} streams)",
        o.bytes >> 20,
        mib(served),
        figures.avg_chunk,
        cpu.as_millis(),
        o.streams
    );
    if !o.baselines {
        return;
    }
    let raw = bench_baseline(o.bytes, Message::binary(vec![0u8; CHUNK]), consume_binary).await;
    let notification = json!({"jsonrpc": "2.0", "method": "process/output",
        "params": {"processId": "big", "seq": 1, "stream": "stdout", "chunk": BASE64.encode_to_string(vec![0u8; CHUNK])}});
    let shaped = bench_baseline(
        o.bytes,
        Message::text(notification.to_string()),
        consume_notification,
    )
    .await;
    println!(
        "baseline raw binary frames of {CHUNK} bytes: {:.0} MiB/s",
        mib(raw)
    );
    println!(
        "baseline notification-shaped text frames, same client work: {:.0} MiB/s",
        mib(shaped)
    );
    println!(
        "ratio served/raw = {:.2}, served/notification-shaped = {:.2}",
        served / raw,
        served / shaped
    );
}

/// `cargo test -p cleanroom-exec-server --example bench`
#[cfg(test)]
mod tests {
    use super::*;

    /// (fast path taken, id, method, process id, seq, decoded chunk) of `text`.
    fn see(
        text: &str,
    ) -> (
        bool,
        Option<u64>,
        Option<String>,
        Option<String>,
        Option<u64>,
        Vec<u8>,
    ) {
        let fast = Decoder::default().cut_and_decode(text).is_some();
        let mut decoder = Decoder::default();
        let s = decoder.decode(text);
        let owned = |v: Option<&str>| v.map(str::to_string);
        (
            fast,
            s.id,
            owned(s.method),
            owned(s.process_id),
            s.seq,
            s.data.to_vec(),
        )
    }

    #[test]
    fn the_fast_path_sees_what_the_full_parse_sees_in_any_field_order() {
        let chunk = BASE64.encode_to_string(b"hello\0world");
        for text in [
            format!(
                r#"{{"jsonrpc":"2.0","method":"process/output","params":{{"processId":"p","seq":7,"stream":"stdout","chunk":"{chunk}"}}}}"#
            ),
            format!(
                r#"{{"params":{{"chunk":"{chunk}","seq":7,"stream":"stdout","processId":"p"}},"method":"process/output"}}"#
            ),
        ] {
            let seen = see(&text);
            assert!(seen.0, "fast path on {text}");
            let expected = (
                Some("process/output".into()),
                Some("p".into()),
                Some(7),
                b"hello\0world".to_vec(),
            );
            assert_eq!((seen.2, seen.3, seen.4, seen.5), expected);
        }
    }

    #[test]
    fn an_escaped_or_misplaced_chunk_takes_the_full_parse() {
        // `\/` is a valid JSON escape of `/`, which the base64 decoder rejects.
        let escaped =
            r#"{"method":"process/output","params":{"processId":"p","seq":1,"chunk":"YS\/h"}}"#;
        let seen = see(escaped);
        assert!(!seen.0);
        assert_eq!(seen.5, BASE64.decode_to_vec("YS/h").unwrap());
        // A `chunk` key outside `params`: the rest's params.chunk is not the cut one.
        let misplaced =
            r#"{"id":3,"result":{"chunk":"YWJj"},"params":{"processId":"p","chunk":"eHl6"}}"#;
        let seen = see(misplaced);
        assert!(!seen.0);
        assert_eq!((seen.1, seen.5), (Some(3), b"xyz".to_vec()));
        // No chunk at all.
        let closed = r#"{"method":"process/closed","params":{"processId":"p","seq":2}}"#;
        assert_eq!(
            see(closed),
            (
                false,
                None,
                Some("process/closed".into()),
                Some("p".into()),
                Some(2),
                vec![]
            )
        );
    }

    #[test]
    fn only_zeros_are_zeros() {
        let mut data = vec![0u8; 10_000];
        assert!(zeros(&data));
        data[9_999] = 1;
        assert!(!zeros(&data));
    }
}
