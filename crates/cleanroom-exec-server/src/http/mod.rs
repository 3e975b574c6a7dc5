//! `http/request` (Codex's executor-side HTTP, spec §6a): one request from the server's
//! network, its body whole in the result, or streamed as `http/request/bodyDelta`
//! notifications after the result when `streamResponse` is set.
//!
//! Owns: reading the params into a checked [`Request`] (`request.rs`; every refusal is -32602
//! naming the field, before any connection), refusing any call whose `sandbox` restricts the
//! network, the connection, redirects (`redirectPolicy`, at most [`MAX_REDIRECTS`], each one
//! checked like the URL, credentials dropped across origins), the deadline (`timeoutMs`), and
//! the delta sequence. `response.rs` reads what comes back.
//!
//! Invariants: a call under `network: restricted` never opens a socket, nor does a call with an
//! invalid method, URL or header; deltas of one request carry seqs 1, 2, … and exactly one has
//! `done: true`, the last; each is at most 1 MiB.

pub(crate) mod request;
pub(crate) mod response;

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::process::Outlet;
use crate::protocol::{self, Params, RpcError};
use request::Request;

/// The connection a response is read from, through a buffer of [`response::MAX_CHUNK`]: a
/// body piece is what one read of the socket gave.
type Connection = BufReader<TcpStream>;
type Body = response::Body<Connection>;

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 10;
/// Largest body returned whole (`streamResponse` false).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Deadline without `timeoutMs`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// What an `http/request` answers: the result, and the body still to stream after it.
pub struct Reply {
    /// The result to send now.
    pub result: Value,
    /// With `streamResponse`: the body, to send with [`Streaming::run`] after the result.
    pub stream: Option<Streaming>,
}

/// A response body streamed as `http/request/bodyDelta` notifications.
pub struct Streaming {
    request_id: String,
    body: Body,
    deadline: tokio::time::Instant,
}

/// Performs the request of `params`.
pub async fn call(params: &Value) -> Result<Reply, RpcError> {
    let p = Params::new(params)?;
    refuse_restricted_network(&p)?;
    let request = request_of(&p)?;
    let follow = match p.opt_string("redirectPolicy")? {
        None | Some("follow") => true,
        Some("stop") => false,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "redirectPolicy {other:?} is not follow or stop"
            )))
        }
    };
    let request_id = p.string("requestId")?.to_string();
    let stream = p.bool_or("streamResponse", false)?;
    let timeout = p
        .opt_u64("timeoutMs")?
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let deadline = tokio::time::Instant::now() + timeout;
    let exchange = async {
        let response = fetch(request, follow).await?;
        let head = json!({
            "status": response.status,
            "headers": response.headers.iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect::<Vec<_>>(),
        });
        if stream {
            let stream = Streaming {
                request_id,
                body: response.body,
                deadline,
            };
            return Ok(Reply {
                result: with_body(head, &[]),
                stream: Some(stream),
            });
        }
        let data = read_all(response.body).await?;
        Ok(Reply {
            result: with_body(head, &data),
            stream: None,
        })
    };
    tokio::time::timeout_at(deadline, exchange)
        .await
        .map_err(|_| failed(format!("timed out after {} ms", timeout.as_millis())))?
}

/// The request the params describe, every part checked; -32602 names the first bad field.
pub(crate) fn request_of(p: &Params<'_>) -> Result<Request, RpcError> {
    let method = p.string("method")?;
    let url = p.string("url")?;
    let headers = headers(p)?;
    let body = match p.opt_string("bodyBase64")? {
        None => Vec::new(),
        Some(b) => BASE64
            .decode(b)
            .map_err(|e| RpcError::invalid_params(format!("bodyBase64 must be base64: {e}")))?,
    };
    Request::new(method, url, headers, body).map_err(|e| RpcError::invalid_params(e.to_string()))
}

fn with_body(mut head: Value, data: &[u8]) -> Value {
    head["bodyBase64"] = json!(BASE64.encode(data));
    head
}

fn failed(why: impl std::fmt::Display) -> RpcError {
    RpcError::internal(format!("http/request failed: {why}"))
}

/// A call whose `sandbox` restricts the network gets no socket at all. `network` is read as the
/// sandbox of `process/start` and `fs/*` reads it: `enabled` or `restricted` (absent or null:
/// enabled); any other value, or a `sandbox` or `permissions` that is not an object, is refused
/// (-32602 naming it), never taken for enabled.
fn refuse_restricted_network(p: &Params<'_>) -> Result<(), RpcError> {
    let Some(sandbox) = p.get("sandbox") else {
        return Ok(());
    };
    let sandbox =
        Params::new(sandbox).map_err(|_| RpcError::invalid_params("sandbox must be an object"))?;
    let Some(permissions) = sandbox.get("permissions") else {
        return Ok(());
    };
    let permissions = Params::new(permissions)
        .map_err(|_| RpcError::invalid_params("sandbox.permissions must be an object"))?;
    match permissions.get("network") {
        None => Ok(()),
        Some(Value::String(network)) if network == "enabled" => Ok(()),
        Some(Value::String(network)) if network == "restricted" => Err(RpcError::invalid_params(
            "http/request is refused under network: restricted (the sandbox allows no network)",
        )),
        Some(other) => Err(RpcError::invalid_params(format!(
            "sandbox.permissions.network {other} is not restricted or enabled"
        ))),
    }
}

/// The `{name, value}` pairs of `headers` (a missing or null value is empty).
fn headers(p: &Params<'_>) -> Result<Vec<(String, String)>, RpcError> {
    let Some(list) = p.get("headers") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| RpcError::invalid_params("headers must be an array of {name, value}"))?;
    let string = |h: &Value, i: usize, field: &str, required: bool| match h.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) if !required => Ok(String::new()),
        _ => Err(RpcError::invalid_params(format!(
            "headers[{i}].{field} must be a string"
        ))),
    };
    list.iter()
        .enumerate()
        .map(|(i, h)| {
            if h.get("valueEnvVar").is_some_and(|v| !v.is_null()) {
                return Err(RpcError::invalid_params(format!(
                    "headers[{i}].valueEnvVar is not supported: this server passes no variable of its own"
                )));
            }
            Ok((string(h, i, "name", true)?, string(h, i, "value", false)?))
        })
        .collect()
}

/// Sends `request`, following redirects when `follow`.
async fn fetch(
    mut request: Request,
    follow: bool,
) -> Result<response::Response<Connection>, RpcError> {
    for _ in 0..=MAX_REDIRECTS {
        let response = send(&request).await.map_err(failed)?;
        let location = response
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("location"))
            .map(|(_, v)| v.clone());
        let (true, Some(location), 301 | 302 | 303 | 307 | 308) =
            (follow, location, response.status)
        else {
            return Ok(response);
        };
        request = request
            .redirect(response.status, &location)
            .map_err(failed)?;
    }
    Err(failed(format!("more than {MAX_REDIRECTS} redirects")))
}

/// Sends one request on a new connection and reads the response head.
async fn send(request: &Request) -> std::io::Result<response::Response<Connection>> {
    let (host, port) = request.address();
    let mut stream = TcpStream::connect((host.as_str(), port)).await?;
    stream.write_all(&request.head()).await?;
    stream.write_all(request.body()).await?;
    let reader = BufReader::with_capacity(response::MAX_CHUNK, stream);
    response::read(reader, request.method() == "HEAD").await
}

async fn read_all(mut body: Body) -> Result<Vec<u8>, RpcError> {
    let mut data = Vec::new();
    while let Some(chunk) = body.next().await.map_err(failed)? {
        data.extend_from_slice(&chunk);
        if data.len() > MAX_BODY {
            return Err(failed(format!(
                "the body exceeds {MAX_BODY} bytes; use streamResponse"
            )));
        }
    }
    Ok(data)
}

impl Streaming {
    /// Sends the body as deltas to `outlet`, the last one `done` (with `error` on failure).
    pub async fn run(mut self, outlet: Arc<Outlet>) {
        let mut seq = 0u64;
        loop {
            seq += 1;
            let next = tokio::time::timeout_at(self.deadline, self.body.next()).await;
            let (delta, done, error) = match next {
                Ok(Ok(Some(chunk))) => (chunk, false, None),
                Ok(Ok(None)) => (Vec::new(), true, None),
                Ok(Err(e)) => (Vec::new(), true, Some(e.to_string())),
                Err(_) => (Vec::new(), true, Some("timed out".to_string())),
            };
            let mut params = json!({"requestId": self.request_id, "seq": seq,
                                    "deltaBase64": BASE64.encode(&delta), "done": done});
            if let Some(error) = error {
                params["error"] = json!(error);
            }
            outlet
                .send(protocol::notification("http/request/bodyDelta", params).into())
                .await;
            if done {
                return;
            }
        }
    }
}
