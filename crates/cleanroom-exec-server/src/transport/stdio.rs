//! The stdio transport: newline-delimited JSON on stdin/stdout; EOF on stdin is the client
//! going away.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::{queue, Limits, Outbound, Peer, Service};
use crate::protocol::{self, RpcError};

/// Serves one client on stdin/stdout; returns at EOF (after the session has been handled as a
/// lost connection) or when `shutdown` turns true.
pub async fn serve_stdio<S: Service>(
    service: Arc<S>,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let (queue, mut outbound) = queue::channel();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        // Each message's bytes return to the queue's budget once it is written.
        while let Some(message) = outbound.recv().await {
            if stdout.write_all(message.text().as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                return;
            }
        }
    });
    let limit = limits.max_message_bytes;
    let connection = service.connect(queue.clone());
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
                    .send(Outbound::Text(
                        protocol::error_response(None, &error).into(),
                    ))
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
