//! `http/request` (Codex's executor-side HTTP, spec §6a): one request from the server's
//! network, its body whole in the result, or streamed as `http/request/bodyDelta`
//! notifications after the result when `streamResponse` is set.
//!
//! Owns: parsing and refusing (`https://`, header values from server variables, any call whose
//! `sandbox` restricts the network), redirects (`redirectPolicy`, at most [`MAX_REDIRECTS`]),
//! the deadline (`timeoutMs`), and the delta sequence.
//!
//! Invariants: a call under `network: restricted` never opens a socket; deltas of one request
//! carry seqs 1, 2, … and exactly one has `done: true`, the last; each is at most 1 MiB.

mod wire;

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};

use crate::process::Outlet;
use crate::protocol::{self, Params, RpcError};
use wire::{Body, Url};

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
    let method = p.string("method")?.to_ascii_uppercase();
    let url = Url::parse(p.string("url")?).map_err(RpcError::invalid_params)?;
    let headers = headers(&p)?;
    let body = match p.opt_string("bodyBase64")? {
        None => Vec::new(),
        Some(b) => BASE64
            .decode(b)
            .map_err(|e| RpcError::invalid_params(format!("bodyBase64 must be base64: {e}")))?,
    };
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
        let response = fetch(&method, url, &headers, body, follow).await?;
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

fn with_body(mut head: Value, data: &[u8]) -> Value {
    head["bodyBase64"] = json!(BASE64.encode(data));
    head
}

fn failed(why: impl std::fmt::Display) -> RpcError {
    RpcError::internal(format!("http/request failed: {why}"))
}

/// A call whose `sandbox` restricts the network gets no socket at all.
fn refuse_restricted_network(p: &Params<'_>) -> Result<(), RpcError> {
    let network = p
        .get("sandbox")
        .and_then(|s| s.get("permissions"))
        .and_then(|perms| perms.get("network"))
        .and_then(Value::as_str);
    match network {
        Some("restricted") => Err(RpcError::invalid_params(
            "http/request is refused under network: restricted (the sandbox allows no network)",
        )),
        _ => Ok(()),
    }
}

fn headers(p: &Params<'_>) -> Result<Vec<(String, String)>, RpcError> {
    let Some(list) = p.get("headers") else {
        return Ok(Vec::new());
    };
    let bad = || RpcError::invalid_params("headers must be an array of {name, value}");
    let list = list.as_array().ok_or_else(bad)?;
    list.iter()
        .map(|h| {
            if h.get("valueEnvVar").is_some_and(|v| !v.is_null()) {
                return Err(RpcError::invalid_params(
                    "headers[].valueEnvVar is not supported: this server passes no variable of its own",
                ));
            }
            let name = h.get("name").and_then(Value::as_str).ok_or_else(bad)?;
            let value = h.get("value").and_then(Value::as_str).unwrap_or("");
            Ok((name.to_string(), value.to_string()))
        })
        .collect()
}

/// Sends the request, following redirects when `follow`.
async fn fetch(
    method: &str,
    mut url: Url,
    headers: &[(String, String)],
    mut body: Vec<u8>,
    follow: bool,
) -> Result<wire::Response, RpcError> {
    let mut method = method.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let response = wire::send(&method, &url, headers, &body)
            .await
            .map_err(failed)?;
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
        if response.status == 303 || (matches!(response.status, 301 | 302) && method == "POST") {
            method = "GET".into();
            body.clear();
        }
        url = match location.starts_with('/') {
            true => Url {
                target: location,
                ..url
            },
            false => Url::parse(&location).map_err(failed)?,
        };
    }
    Err(failed(format!("more than {MAX_REDIRECTS} redirects")))
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
