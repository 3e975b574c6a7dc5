//! Benchmark of `cleanroom serve` against raw loopback WebSocket throughput.
//!
//! Measures, with one client over loopback:
//! 1. the round trip `process/start` → `process/closed` of `true` (median and p90 over N runs);
//! 2. throughput of streaming B bytes of child output (`head -c B /dev/zero`) as
//!    `process/output` notifications;
//! 3. baselines in the same harness through tokio-tungstenite: the same B bytes sent as raw
//!    binary frames of the server's chunk size, and as the very notification text frames the
//!    server would send (the client parses and decodes them exactly as in 2).
//!
//! The client keeps its own work small so the figures measure the server: each notification is
//! parsed borrowing from the frame (no `Value`, no copy of the chunk) and its chunk decoded by
//! a SIMD base64 decoder into one reused buffer.
//!
//! Usage: `bench --cleanroom PATH [--state-dir DIR] [--rounds N] [--bytes B]`
//! (`scripts/bench` builds it and runs it once per round for its `serve-*` pairs).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64_simd::{AsOut, STANDARD as BASE64};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Bytes per chunk: what one read of a default-sized pipe returns at most.
const CHUNK: usize = 64 * 1024;

struct Options {
    cleanroom: String,
    state_dir: String,
    rounds: usize,
    bytes: usize,
}

fn options() -> Options {
    let mut o = Options {
        cleanroom: "target/release/cleanroom".into(),
        state_dir: "/dev/shm/cleanroom-bench".into(),
        rounds: 200,
        bytes: 256 << 20,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--cleanroom" => o.cleanroom = value,
            "--state-dir" => o.state_dir = value,
            "--rounds" => o.rounds = value.parse().expect("--rounds N"),
            "--bytes" => o.bytes = value.parse().expect("--bytes B"),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn call(ws: &mut Ws, id: u64, method: &str, params: Value) -> Value {
    let request = json!({"id": id, "method": method, "params": params});
    ws.send(Message::text(request.to_string())).await.unwrap();
    loop {
        let Some(Ok(Message::Text(text))) = ws.next().await else {
            continue;
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        if v["id"] == id {
            assert!(v.get("error").is_none(), "{v}");
            return v["result"].clone();
        }
    }
}

/// A notification, borrowed from its frame.
#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<Params<'a>>,
}

#[derive(Default, Deserialize)]
struct Params<'a> {
    #[serde(borrow, rename = "processId")]
    process_id: Option<&'a str>,
    #[serde(borrow)]
    chunk: Option<&'a str>,
}

/// Decodes the chunks of `process/output` notifications into one reused buffer.
#[derive(Default)]
struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// The method, process id and decoded chunk length of a notification frame.
    fn decode<'a>(&mut self, text: &'a str) -> (Option<&'a str>, Option<&'a str>, usize) {
        let n: Notification = serde_json::from_str(text).unwrap();
        let params = n.params.unwrap_or_default();
        let len = params.chunk.map_or(0, |chunk| {
            let chunk = chunk.as_bytes();
            self.buf
                .resize(BASE64.estimated_decoded_length(chunk.len()), 0);
            BASE64.decode(chunk, self.buf.as_out()).unwrap().len()
        });
        (n.method, params.process_id, len)
    }
}

/// Reads notifications until `process/closed` of `id`; returns decoded output bytes and chunks.
async fn drain(ws: &mut Ws, id: &str) -> (usize, usize) {
    let (mut bytes, mut chunks) = (0, 0);
    let mut decoder = Decoder::default();
    loop {
        let Some(Ok(message)) = ws.next().await else {
            panic!("connection lost");
        };
        let Message::Text(text) = message else {
            continue;
        };
        match decoder.decode(&text) {
            (Some("process/output"), Some(p), len) if p == id => {
                bytes += len;
                chunks += 1;
            }
            (Some("process/closed"), Some(p), _) if p == id => return (bytes, chunks),
            _ => {}
        }
    }
}

fn client_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(256 << 20))
        .max_frame_size(Some(256 << 20))
}

async fn bench_server(o: &Options) -> (Vec<Duration>, f64, usize) {
    let mut server = Command::new(&o.cleanroom)
        .args(["--state-dir", &o.state_dir, "serve"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cleanroom serve");
    let mut url = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let (mut ws, _) =
        tokio_tungstenite::connect_async_with_config(url.trim(), Some(client_config()), true)
            .await
            .unwrap();
    call(&mut ws, 0, "initialize", json!({"clientName": "bench"})).await;
    let mut id = 1;
    let mut trips = Vec::new();
    for round in 0..o.rounds + 10 {
        let pid = format!("t{round}");
        let started = Instant::now();
        id += 1;
        call(
            &mut ws,
            id,
            "process/start",
            json!({"processId": pid, "argv": ["true"], "cwd": "file:///"}),
        )
        .await;
        drain(&mut ws, &pid).await;
        if round >= 10 {
            trips.push(started.elapsed());
        }
    }
    let started = Instant::now();
    id += 1;
    let head = format!("head -c {} /dev/zero", o.bytes);
    call(
        &mut ws,
        id,
        "process/start",
        json!({"processId": "big", "argv": ["sh", "-c", head], "cwd": "file:///"}),
    )
    .await;
    let (bytes, chunks) = drain(&mut ws, "big").await;
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(bytes, o.bytes, "every byte arrives");
    // SAFETY: kill(2) on our own child's pid, not yet waited for.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let status = server.wait().unwrap();
    assert!(status.success(), "server exit {status:?}");
    (trips, bytes as f64 / elapsed, bytes / chunks.max(1))
}

/// Sends `bytes` in `frames` from an in-process tokio-tungstenite server; returns bytes/s as
/// counted by a client that does `consume` on every frame.
async fn bench_baseline(
    bytes: usize,
    frame: Message,
    consume: fn(&mut Decoder, &Message) -> usize,
) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = bytes.div_ceil(CHUNK);
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        for _ in 0..count {
            ws.send(frame.clone()).await.unwrap();
        }
        ws.close(None).await.unwrap();
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
    decoder.decode(text).2
}

#[tokio::main]
async fn main() {
    let o = options();
    let (mut trips, served, avg_chunk) = bench_server(&o).await;
    trips.sort();
    let median = trips[trips.len() / 2];
    let p90 = trips[trips.len() * 9 / 10];
    let raw = bench_baseline(o.bytes, Message::binary(vec![0u8; CHUNK]), consume_binary).await;
    let notification = json!({"jsonrpc": "2.0", "method": "process/output",
        "params": {"processId": "big", "seq": 1, "stream": "stdout", "chunk": BASE64.encode_to_string(vec![0u8; CHUNK])}});
    let shaped = bench_baseline(
        o.bytes,
        Message::text(notification.to_string()),
        consume_notification,
    )
    .await;
    let mib = |r: f64| r / (1024.0 * 1024.0);
    println!(
        "round trip start->closed of `true`: median {median:.2?}, p90 {p90:.2?} over {} runs",
        trips.len()
    );
    println!(
        "streaming {} MiB of child output: {:.0} MiB/s (average chunk {} bytes)",
        o.bytes >> 20,
        mib(served),
        avg_chunk
    );
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
