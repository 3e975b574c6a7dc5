//! Transports (spec §1): WebSocket with a capability path, and newline-delimited stdio.
//!
//! Owns: accepting connections (bounded in number), the HTTP side (`GET /readyz`, the
//! capability check with close 1008), frame size limits (close 1009 before parsing), pings, and
//! each connection's writer, whose queue is bounded and whose sends time out when the client
//! stops reading.
//!
//! Invariant: anything a client does ends at most its own connection: errors of one socket are
//! logged and that socket is dropped; the listener keeps accepting.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::connection::Connection;
use crate::outlet::Outbound;
use crate::protocol::{self, RpcError};
use crate::server::Shared;

/// Messages queued per connection before senders wait.
const QUEUE: usize = 64;
/// Longest time for the HTTP upgrade.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval of server pings.
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long shutdown waits for connections to end their sessions.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(15);
/// Bytes fed to the socket before a flush.
const BATCH_BYTES: usize = 1 << 20;
/// A send that makes no progress for this long ends the connection (a client that never reads).
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Accepts WebSocket clients on `listener` until `shutdown` turns true.
pub async fn serve_websocket(
    listener: TcpListener,
    shared: Arc<Shared>,
    capability: Arc<str>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(shared.max_connections));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                "connection refused: {} connections open",
                shared.max_connections
            );
            continue;
        };
        let shared = shared.clone();
        let capability = capability.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            if let Err(e) = handle_socket(tcp, shared, &capability, shutdown).await {
                tracing::debug!("connection ended: {e}");
            }
            drop(slot);
        });
    }
    // Each connection closes with 1001 and ends its session; wait for them, boundedly.
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

async fn handle_socket(
    tcp: TcpStream,
    shared: Arc<Shared>,
    capability: &str,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), WsError> {
    let limit = shared.max_message_bytes;
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, upgrade(tcp, limit));
    let upgraded = tokio::select! {
        upgraded = handshake => upgraded.map_err(|_| WsError::Io(std::io::ErrorKind::TimedOut.into()))??,
        _ = shutdown.changed() => return Ok(()),
    };
    let Some((ws, path)) = upgraded else {
        return Ok(());
    };
    if !constant_time_eq(path.as_bytes(), capability.as_bytes()) {
        return refuse(ws).await;
    }
    run_websocket(ws, shared, shutdown).await;
    Ok(())
}

/// Answers `GET /readyz` (`None`), or completes the WebSocket upgrade and returns the path.
async fn upgrade(
    mut tcp: TcpStream,
    limit: usize,
) -> Result<Option<(WebSocketStream<TcpStream>, String)>, WsError> {
    let _ = tcp.set_nodelay(true);
    let first_line = peek_request_line(&tcp).await?;
    if first_line.starts_with("GET /readyz ") || first_line.starts_with("GET /readyz?") {
        tcp.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
            .await?;
        let _ = tcp.shutdown().await;
        return Ok(None);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit));
    let mut path = String::new();
    // The error type is tungstenite's (an HTTP response); this callback never fails.
    #[allow(clippy::result_large_err)]
    let callback = |request: &Request, response: Response| {
        path = request.uri().path().to_string();
        Ok(response)
    };
    let ws = tokio_tungstenite::accept_hdr_async_with_config(tcp, callback, Some(config)).await?;
    Ok(Some((ws, path)))
}

/// Completes the upgrade's aftermath for a wrong path: close 1008 `unauthorized`.
async fn refuse(mut ws: WebSocketStream<TcpStream>) -> Result<(), WsError> {
    let frame = CloseFrame {
        code: CloseCode::Policy,
        reason: "unauthorized".into(),
    };
    ws.close(Some(frame)).await?;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    Ok(())
}

/// Reads (without consuming) the HTTP request line.
async fn peek_request_line(tcp: &TcpStream) -> std::io::Result<String> {
    let mut buf = [0u8; 1024];
    let mut pause = Duration::from_millis(2);
    loop {
        tcp.readable().await?;
        let n = tcp.peek(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == b'\n') {
            return Ok(String::from_utf8_lossy(&buf[..end]).into_owned());
        }
        if n == buf.len() {
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        // Part of a line has arrived and stays readable; back off instead of spinning on it.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn run_websocket(
    ws: WebSocketStream<TcpStream>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut sink, mut stream) = ws.split();
    let (queue, mut outbound) = mpsc::channel::<Outbound>(QUEUE);
    let mut writer = tokio::spawn(async move {
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
        loop {
            let first = tokio::select! {
                message = outbound.recv() => match message {
                    Some(message) => Some(message),
                    None => return,
                },
                _ = ping.tick() => None,
            };
            // Feed everything already queued, then flush once: one write for a burst.
            let batch = async {
                let mut next = match first {
                    Some(message) => Some(message),
                    None => {
                        sink.feed(Message::Ping(Vec::new().into())).await?;
                        outbound.try_recv().ok()
                    }
                };
                let mut fed = 0usize;
                while let Some(message) = next.take() {
                    match message {
                        Outbound::Text(text) => {
                            fed += text.len();
                            sink.feed(Message::text(text)).await?
                        }
                        Outbound::Close(code, reason) => {
                            let frame = CloseFrame {
                                code: CloseCode::from(code),
                                reason: reason.into(),
                            };
                            // After the peer's Close this send is refused, but the flush
                            // still delivers the reply tungstenite queued.
                            let _ = sink.send(Message::Close(Some(frame))).await;
                            sink.flush().await?;
                            return Ok(false);
                        }
                    }
                    if fed < BATCH_BYTES {
                        next = outbound.try_recv().ok();
                    }
                }
                sink.flush().await.map(|()| true)
            };
            match tokio::time::timeout(STALL_TIMEOUT, batch).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return,
                Ok(Err(e)) => {
                    tracing::debug!("send failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::warn!(
                        "client stopped reading for {STALL_TIMEOUT:?}; closing its connection"
                    );
                    return;
                }
            }
        }
    });
    let connection = Connection::new(shared, queue.clone());
    let mut closing = false;
    loop {
        tokio::select! {
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => connection.handle(text.as_bytes()).await,
                Some(Ok(Message::Binary(bytes))) => connection.handle(&bytes).await,
                Some(Ok(Message::Close(_))) => {
                    // Completes the closing handshake (tungstenite has queued the reply).
                    let _ = queue.try_send(Outbound::Close(1000, ""));
                    closing = true;
                    break;
                }
                None => break,
                Some(Ok(_)) => {}
                Some(Err(WsError::Capacity(e))) => {
                    tracing::info!("closing a connection with 1009: {e}");
                    let _ = queue.try_send(Outbound::Close(1009, "message too big"));
                    closing = true;
                    break;
                }
                Some(Err(e)) => {
                    tracing::debug!("read failed: {e}");
                    break;
                }
            },
            _ = &mut writer => break,
            _ = shutdown.changed() => {
                let _ = queue.try_send(Outbound::Close(1001, "shutdown"));
                closing = true;
                break;
            }
        }
    }
    connection.close().await;
    if closing {
        let _ = tokio::time::timeout(Duration::from_secs(3), &mut writer).await;
    }
    writer.abort();
}

/// Serves one client on stdin/stdout; returns at EOF (after the session has been handled as a
/// lost connection) or when `shutdown` turns true.
pub async fn serve_stdio(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let (queue, mut outbound) = mpsc::channel::<Outbound>(QUEUE);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = outbound.recv().await {
            let Outbound::Text(text) = message else {
                return;
            };
            if stdout.write_all(text.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                return;
            }
        }
    });
    let limit = shared.max_message_bytes;
    let connection = Connection::new(shared, queue.clone());
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    let mut oversized = false;
    loop {
        let buffered = tokio::select! {
            buffered = stdin.fill_buf() => match buffered {
                Ok([]) => break,
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("reading stdin: {e}");
                    break;
                }
            },
            _ = shutdown.changed() => break,
        };
        let (part, complete) = match buffered.iter().position(|&b| b == b'\n') {
            Some(i) => (&buffered[..i], Some(i + 1)),
            None => (buffered, None),
        };
        if !oversized {
            if line.len() + part.len() > limit {
                oversized = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(part);
            }
        }
        let used = complete.unwrap_or(buffered.len());
        stdin.consume(used);
        if complete.is_some() {
            if oversized {
                let error = RpcError::invalid_request(format!(
                    "message larger than {limit} bytes (--max-message-bytes)"
                ));
                let _ = queue
                    .send(Outbound::Text(protocol::error_response(None, &error)))
                    .await;
            } else if !line.iter().all(u8::is_ascii_whitespace) {
                connection.handle(&line).await;
            }
            line.clear();
            oversized = false;
        }
    }
    connection.close().await;
    drop(queue);
    drop(connection);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}
