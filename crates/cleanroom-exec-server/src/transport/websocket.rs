//! The WebSocket transport: accepting (bounded), `/readyz`, the capability path, frame limits,
//! pings, and each connection's batching writer.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::admission::{Admission, Ticket};
use super::queue::{self, Receiver};
use super::{close, Limits, Peer, Service};
/// Longest time from accept to a shown capability (upgrade included).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval of server pings.
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long shutdown waits for connections to end their sessions.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(15);
/// Bytes fed to the socket before a flush.
const BATCH_BYTES: usize = 1 << 20;
/// Longest wait for a closed client to close its side.
const LINGER: Duration = Duration::from_secs(2);
/// A send that makes no progress for this long ends the connection (a client that never reads).
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Accepts WebSocket clients on `listener` until `shutdown` turns true.
pub async fn serve_websocket<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: Limits,
    capability: Arc<str>,
    mut shutdown: watch::Receiver<bool>,
) {
    let admission = Admission::new(limits.max_connections);
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
                admission.warn(&format!("accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ticket = admission.enter();
        let service = service.clone();
        let capability = capability.clone();
        let shutdown = shutdown.clone();
        let admission = admission.clone();
        connections.spawn(async move {
            let socket = Socket {
                service: &*service,
                admission: &admission,
                limits,
                capability: &capability,
            };
            if let Err(e) = socket.serve(tcp, ticket, shutdown).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    // Each connection closes with 1001 and ends its session; wait for them, boundedly.
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// What one accepted socket is served with.
struct Socket<'a, S> {
    service: &'a S,
    admission: &'a Admission,
    limits: Limits,
    capability: &'a str,
}

impl<S: Service> Socket<'_, S> {
    /// Upgrade and capability check within [`HANDSHAKE_TIMEOUT`] on a pending place, then the
    /// connection on an authenticated one.
    async fn serve(
        self,
        tcp: TcpStream,
        mut ticket: Ticket,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), WsError> {
        let handshake = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            upgrade(tcp, self.limits.max_message_bytes, self.capability),
        );
        let timed_out = || WsError::Io(std::io::ErrorKind::TimedOut.into());
        let upgraded = tokio::select! {
            upgraded = handshake => upgraded.map_err(|_| timed_out())??,
            () = ticket.evicted() => return Ok(()),
            _ = shutdown.changed() => return Ok(()),
        };
        let Some(ws) = upgraded else {
            return Ok(());
        };
        let Some(place) = self.admission.authenticate(ticket) else {
            return close_now(ws, close::TRY_AGAIN_LATER, "too many connections").await;
        };
        run_websocket(ws, self.service, shutdown).await;
        drop(place);
        Ok(())
    }
}

/// Answers `GET /readyz`, or completes the WebSocket upgrade; a wrong path is closed with 1008.
/// Returns the authenticated socket.
async fn upgrade(
    mut tcp: TcpStream,
    limit: usize,
    capability: &str,
) -> Result<Option<WebSocketStream<TcpStream>>, WsError> {
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
    if !constant_time_eq(path.as_bytes(), capability.as_bytes()) {
        close_now(ws, close::POLICY, "unauthorized").await?;
        return Ok(None);
    }
    Ok(Some(ws))
}

/// Closes a socket nothing else uses with `code`.
async fn close_now(
    mut ws: WebSocketStream<TcpStream>,
    code: u16,
    reason: &'static str,
) -> Result<(), WsError> {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    ws.close(Some(frame)).await?;
    linger(ws.get_mut()).await;
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

type Sink = SplitSink<WebSocketStream<TcpStream>, Message>;

async fn run_websocket<S: Service>(
    ws: WebSocketStream<TcpStream>,
    service: &S,
    mut shutdown: watch::Receiver<bool>,
) {
    let (sink, mut stream) = ws.split();
    let (queue, outbound) = queue::channel();
    let (close_tx, close_rx) = oneshot::channel();
    let mut writer = tokio::spawn(write(sink, outbound, close_rx));
    let connection = service.connect(queue);
    let mut close_tx = Some(close_tx);
    let mut close = |code: u16, reason: &'static str| {
        if let Some(tx) = close_tx.take() {
            let _ = tx.send((code, reason));
        }
    };
    let mut writer_done = false;
    loop {
        tokio::select! {
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    if !handled(connection.handle(text.as_bytes()), &mut shutdown).await {
                        close(close::GOING_AWAY, "shutdown");
                        break;
                    }
                }
                Some(Ok(Message::Binary(bytes))) => {
                    if !handled(connection.handle(&bytes), &mut shutdown).await {
                        close(close::GOING_AWAY, "shutdown");
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) => {
                    // Completes the closing handshake (tungstenite has queued the reply).
                    close(close::NORMAL, "");
                    break;
                }
                None => break,
                Some(Ok(_)) => {}
                Some(Err(WsError::Capacity(e))) => {
                    tracing::info!("closing a connection with 1009: {e}");
                    close(close::TOO_BIG, "message too big");
                    break;
                }
                Some(Err(e)) => {
                    tracing::debug!("read failed: {e}");
                    break;
                }
            },
            _ = &mut writer => {
                writer_done = true;
                break;
            }
            _ = shutdown.changed() => {
                close(close::GOING_AWAY, "shutdown");
                break;
            }
        }
    }
    let closing = close_tx.is_none();
    drop(close_tx);
    let finish = async {
        if writer_done {
            return;
        }
        // The close frame is flushed, then the socket lingers (FIN, unread input drained), so
        // the client reads the code instead of a reset.
        if let Ok(Ok(sink)) = tokio::time::timeout(Duration::from_secs(3), &mut writer).await {
            if let (true, Ok(mut ws)) = (closing, sink.reunite(stream)) {
                linger(ws.get_mut()).await;
            }
        }
    };
    tokio::join!(connection.close(), finish);
    writer.abort();
}

/// Runs `handling` (one inbound message) to its end, unless the server shuts down first: a
/// call blocked in the kernel (an `fs/*` open of a FIFO nobody writes) is then left behind, so a
/// shutdown never waits for it. Whether it ran to its end.
async fn handled(
    handling: impl std::future::Future<Output = ()>,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        () = handling => true,
        _ = shutdown.changed() => false,
    }
}

/// The connection's writer: queued messages in batches, pings, and at the end the close frame
/// (ahead of anything still queued). A message's bytes return to the queue's budget once it is
/// fed to the sink (whose buffer a flush empties every [`BATCH_BYTES`]). Returns the sink for the
/// lingering close.
async fn write(
    mut sink: Sink,
    mut outbound: Receiver,
    mut closing: oneshot::Receiver<(u16, &'static str)>,
) -> Sink {
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
    loop {
        let first = tokio::select! {
            biased;
            close = &mut closing => {
                if let Ok((code, reason)) = close {
                    let frame = CloseFrame { code: CloseCode::from(code), reason: reason.into() };
                    // After the peer's Close this send is refused, but the flush still delivers
                    // the reply tungstenite queued.
                    let _ = tokio::time::timeout(Duration::from_secs(2), async {
                        let _ = sink.send(Message::Close(Some(frame))).await;
                        let _ = sink.flush().await;
                    })
                    .await;
                }
                return sink;
            }
            message = outbound.recv() => match message {
                Some(message) => Some(message),
                None => return sink,
            },
            _ = ping.tick() => None,
        };
        // Feed everything already queued, then flush once: one write for a burst.
        let batch = async {
            let mut next = match first {
                Some(message) => Some(message),
                None => {
                    sink.feed(Message::Ping(Vec::new().into())).await?;
                    outbound.try_recv()
                }
            };
            let mut fed = 0usize;
            while let Some(message) = next.take() {
                let (text, written) = message.into_parts();
                fed += text.len();
                sink.feed(Message::Text(text)).await?;
                drop(written);
                if fed < BATCH_BYTES {
                    next = outbound.try_recv();
                }
            }
            sink.flush().await
        };
        match tokio::time::timeout(STALL_TIMEOUT, batch).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!("send failed: {e}");
                return sink;
            }
            Err(_) => {
                tracing::warn!(
                    "client stopped reading for {STALL_TIMEOUT:?}; closing its connection"
                );
                return sink;
            }
        }
    }
}

/// After a close frame: FIN, then read and discard what the client still sends until it closes
/// (bounded by [`LINGER`]); closing with unread input would reset the connection and lose the
/// close frame on the way.
async fn linger(tcp: &mut TcpStream) {
    let _ = tcp.shutdown().await;
    let mut buf = vec![0u8; 64 * 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}
