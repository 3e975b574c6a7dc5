//! A loopback stand-in for the model API: the Responses API as the Codex client uses it.
//!
//! The client sends `POST <base_url>/responses` with a JSON body (`model`, `input` items, `tools`,
//! `stream: true`) and reads the reply as server-sent events (`event: <type>` / `data: <json>`
//! pairs: `response.created`, `response.output_item.done` carrying a `function_call`,
//! `custom_tool_call` or `message` item, then `response.completed`). Each request is handed to
//! the test, which looks at it (what the client showed the model: tool outputs, images,
//! AGENTS.md) and scripts the next events. Any other request is answered 404 and recorded, so
//! a test can show what else the client asked for.
//!
//! HTTP/1.1 with keep-alive, written out here: the stand-in needs only what the client sends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// One request of the client for a model response, waiting for the test's script.
pub struct ModelRequest {
    pub body: Value,
    reply: oneshot::Sender<String>,
}

impl ModelRequest {
    /// Streams `items` (output items: tool calls, messages) as one complete response.
    pub fn respond(self, id: &str, items: Vec<Value>) {
        let mut events = vec![json!({"type": "response.created", "response": {"id": id}})];
        events.extend(
            items
                .into_iter()
                .map(|item| json!({"type": "response.output_item.done", "item": item})),
        );
        events.push(json!({
            "type": "response.completed",
            "response": {"id": id, "usage": {"input_tokens": 0, "input_tokens_details": null,
                "output_tokens": 0, "output_tokens_details": null, "total_tokens": 0}},
        }));
        let stream: String = events
            .iter()
            .map(|event| {
                format!(
                    "event: {}\ndata: {event}\n\n",
                    event["type"].as_str().unwrap()
                )
            })
            .collect();
        // The client may have given up on the request; its next one tells the test.
        let _ = self.reply.send(stream);
    }

    /// The output the client reports for tool call `call_id`, if this request carries it.
    pub fn tool_output(&self, call_id: &str) -> Option<&Value> {
        self.input().iter().find_map(|item| {
            let kind = item["type"].as_str().unwrap_or("");
            (kind.ends_with("call_output") && item["call_id"] == call_id).then(|| &item["output"])
        })
    }

    /// [`ModelRequest::tool_output`] as text (a JSON rendering when it is not a string).
    pub fn tool_output_text(&self, call_id: &str) -> String {
        match self.tool_output(call_id) {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => format!("<no output for tool call {call_id} in the request>"),
        }
    }

    /// Every text the client put into message items (instructions, context, user input).
    pub fn message_texts(&self) -> Vec<&str> {
        self.input()
            .iter()
            .filter(|item| item["type"] == "message")
            .filter_map(|item| item["content"].as_array())
            .flatten()
            .filter_map(|part| part["text"].as_str())
            .collect()
    }

    /// The names of the tools the client offered the model.
    pub fn tool_names(&self) -> Vec<&str> {
        let tools = self.body["tools"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        tools.iter().filter_map(|t| t["name"].as_str()).collect()
    }

    fn input(&self) -> &[Value] {
        self.body["input"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// The running stand-in.
pub struct ModelApi {
    port: u16,
    requests: mpsc::UnboundedReceiver<ModelRequest>,
    /// Requests other than a plain `POST /v1/responses`: "METHOD PATH (content-encoding E)".
    pub unexpected: Arc<Mutex<Vec<String>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl ModelApi {
    /// Listens on an ephemeral loopback port.
    pub async fn start() -> ModelApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (sender, requests) = mpsc::unbounded_channel();
        let unexpected = Arc::new(Mutex::new(Vec::new()));
        let recorded = unexpected.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(stream, sender.clone(), recorded.clone()));
            }
        });
        ModelApi {
            port,
            requests,
            unexpected,
            accept,
        }
    }

    /// The provider's `base_url` for the client's config.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The client's next request for a model response.
    pub async fn next(&mut self) -> ModelRequest {
        self.requests
            .recv()
            .await
            .expect("the stand-in keeps listening")
    }
}

impl Drop for ModelApi {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Serves one keep-alive connection until the client closes it.
async fn serve_connection(
    stream: TcpStream,
    requests: mpsc::UnboundedSender<ModelRequest>,
    unexpected: Arc<Mutex<Vec<String>>>,
) {
    let mut stream = BufReader::new(stream);
    while let Some(request) = read_request(&mut stream).await {
        let readable = request.content_encoding.is_none();
        let (status, body) = match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/v1/responses") if readable => answer(request, &requests).await,
            (method, path) => {
                let encoding = request.content_encoding.as_deref().unwrap_or("identity");
                let seen = format!("{method} {path} (content-encoding {encoding})");
                unexpected.lock().unwrap().push(seen);
                ("404 Not Found", String::new())
            }
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        let inner = stream.get_mut();
        if inner.write_all(head.as_bytes()).await.is_err()
            || inner.write_all(body.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

/// Hands a responses request to the test and waits for its script (or says why there is none).
async fn answer(
    request: HttpRequest,
    requests: &mpsc::UnboundedSender<ModelRequest>,
) -> (&'static str, String) {
    let Ok(body) = serde_json::from_slice(&request.body) else {
        return ("400 Bad Request", String::new());
    };
    let (reply, script) = oneshot::channel();
    if requests.send(ModelRequest { body, reply }).is_err() {
        return ("503 Service Unavailable", String::new());
    }
    // A test that never answers has already failed; the client then sees a closed stream.
    match tokio::time::timeout(Duration::from_secs(300), script).await {
        Ok(Ok(stream)) => ("200 OK", stream),
        _ => ("503 Service Unavailable", String::new()),
    }
}

struct HttpRequest {
    method: String,
    path: String,
    content_encoding: Option<String>,
    body: Vec<u8>,
}

/// Reads one request (head and body, by content-length or chunked); `None` at end of stream.
async fn read_request(stream: &mut BufReader<TcpStream>) -> Option<HttpRequest> {
    let mut line = String::new();
    stream.read_line(&mut line).await.ok().filter(|&n| n > 0)?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let (mut length, mut chunked, mut content_encoding) = (0usize, false, None);
    loop {
        line.clear();
        stream.read_line(&mut line).await.ok().filter(|&n| n > 0)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().ok()?,
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "content-encoding" => content_encoding = Some(value.to_string()),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(stream).await?
    } else {
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.ok()?;
        body
    };
    Some(HttpRequest {
        method,
        path,
        content_encoding,
        body,
    })
}

async fn read_chunked(stream: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        stream.read_line(&mut line).await.ok()?;
        let size = usize::from_str_radix(line.trim().split(';').next()?, 16).ok()?;
        let mut chunk = vec![0; size + 2];
        stream.read_exact(&mut chunk).await.ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}
