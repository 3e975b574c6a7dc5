//! `http/request` of `cleanroom serve` against loopback HTTP servers of the test's own: whole
//! bodies (Content-Length, chunked), a request body, redirects followed or stopped, a streamed
//! body as `http/request/bodyDelta` notifications, and the refusals (https, a call whose sandbox
//! restricts the network — which opens no connection at all; a method, URL or header that
//! would put a second request or another header on the wire). The servers record every byte
//! each connection sent, so the tests see exactly what went out: one request, no injected
//! header, credentials only where the client sent them.

mod serve_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use serve_support::{workspace_write, Client, Server};

/// Size of the streamed body: more than two deltas of 1 MiB.
const BIG: usize = (5 << 20) / 2;

/// A loopback HTTP server answering by path ([`answer`]).
struct Origin {
    port: u16,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    /// Everything each connection sent, in the order they were closed.
    sent: Receiver<Vec<u8>>,
    /// Bytes of `/endless-head` or `/endless-chunk-line` written before the client closed the
    /// connection.
    endless_written: Arc<AtomicUsize>,
}

impl Origin {
    /// On 127.0.0.1, a free port.
    fn start() -> Origin {
        Origin::on("127.0.0.1:0")
    }

    fn on(address: &str) -> Origin {
        let listener = TcpListener::bind(address).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let endless_written = Arc::new(AtomicUsize::new(0));
        let written = endless_written.clone();
        let (tx, sent) = channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let (tx, written) = (tx.clone(), written.clone());
                std::thread::spawn(move || {
                    let _ = tx.send(answer(stream, &written));
                });
            }
        });
        Origin {
            port,
            accepted,
            sent,
            endless_written,
        }
    }

    /// What the next connection sent, once the client closed it.
    fn next_sent(&self) -> String {
        let bytes = self
            .sent
            .recv_timeout(Duration::from_secs(60))
            .expect("a connection was closed");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// Reads one request, answers it by its path, then reads whatever else the client sends until
/// it closes the connection; returns every byte received.
fn answer(stream: TcpStream, endless_written: &AtomicUsize) -> Vec<u8> {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut received = Vec::new();
    let mut length = 0;
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
            return received;
        }
        received.extend_from_slice(&line);
        let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
        if let Some(v) = text.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if text.trim().is_empty() {
            break;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    received.extend_from_slice(&body);
    let text = String::from_utf8_lossy(&received).into_owned();
    let path = text.split(' ').nth(1).unwrap_or("/");
    let port = stream.local_addr().unwrap().port();
    let mut out = stream;
    let response = match path {
        "/plain" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Test: yes\r\n\r\nhello".to_vec(),
        "/echo" => [format!("HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes(), body].concat(),
        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n".to_vec(),
        "/moved" => b"HTTP/1.1 302 Found\r\nLocation: /plain\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "/relative" => b"HTTP/1.1 302 Found\r\nLocation: plain\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "/big" => [format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes(), big()].concat(),
        "/bare-cr" => b"HTTP/1.1 302 Found\r\nLocation: /plain\rX-Injected: yes\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "/to-https" => format!("HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:{port}/plain\r\nContent-Length: 0\r\n\r\n").into_bytes(),
        "/to-file" => b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "/tab-location" => b"HTTP/1.1 302 Found\r\nLocation: /pl\tain\r\nContent-Length: 0\r\n\r\n".to_vec(),
        // Framings RFC 9112 forbids, and one it allows that a strict reader might not.
        "/empty-length" => b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nabcdef".to_vec(),
        "/length-and-chunked" => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
        "/chunked-in-1.0" => b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
        "/chunked-twice" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
        "/space-before-colon" => b"HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\nabcdef".to_vec(),
        "/switching-protocols" => b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".to_vec(),
        "/gzip-chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
        "/zeros" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000000003\r\nabc\r\n0\r\n\r\n".to_vec(),
        "/endless-head" => {
            endless(out, b"HTTP/1.1 200 OK\r\nX-Endless: ", endless_written);
            return received;
        }
        "/endless-chunk-line" => {
            let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;x=";
            endless(out, head, endless_written);
            return received;
        }
        // `/redirect/<status>/<location>`: that status, that Location.
        _ if path.starts_with("/redirect/") => {
            let (status, location) = path["/redirect/".len()..].split_once('/').unwrap();
            format!("HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n").into_bytes()
        }
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
    };
    let _ = out.write_all(&response);
    let _ = out.shutdown(Shutdown::Write);
    let _ = reader.read_to_end(&mut received);
    received
}

/// `start`, then a line that does not end: up to 256 MiB, written until the client closes the
/// connection; counts the bytes written.
fn endless(mut out: TcpStream, start: &[u8], written: &AtomicUsize) {
    let _ = out.write_all(start);
    let block = vec![b'a'; 64 * 1024];
    for _ in 0..4096 {
        if out.write_all(&block).is_err() {
            break;
        }
        written.fetch_add(block.len(), Ordering::SeqCst);
    }
}

fn big() -> Vec<u8> {
    (0..BIG).map(|i| (i % 251) as u8).collect()
}

fn request(port: u16, path: &str, extra: Value) -> Value {
    let mut params = json!({"method": "GET", "url": format!("http://127.0.0.1:{port}{path}"),
                            "headers": [], "requestId": path});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    params
}

fn body(result: &Value) -> Vec<u8> {
    BASE64
        .decode(result["bodyBase64"].as_str().unwrap())
        .unwrap()
}

#[tokio::test]
async fn requests_return_status_headers_and_body_and_follow_redirects() {
    let server = Server::start(&[]);
    let port = Origin::start().port;
    let mut c = server.client().await;

    let plain = c
        .call("http/request", request(port, "/plain", json!({})))
        .await
        .unwrap();
    assert_eq!(
        (plain["status"].as_u64(), body(&plain)),
        (Some(200), b"hello".to_vec())
    );
    assert!(
        plain["headers"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "X-Test", "value": "yes"})),
        "{plain}"
    );
    let posted = json!({"method": "POST", "bodyBase64": BASE64.encode("payload")});
    let echo = c
        .call("http/request", request(port, "/echo", posted))
        .await
        .unwrap();
    assert_eq!(
        (echo["status"].as_u64(), body(&echo)),
        (Some(201), b"payload".to_vec())
    );
    let chunked = c
        .call("http/request", request(port, "/chunked", json!({})))
        .await
        .unwrap();
    assert_eq!(body(&chunked), b"abcdefg");
    let followed = c
        .call("http/request", request(port, "/moved", json!({})))
        .await
        .unwrap();
    assert_eq!(
        (followed["status"].as_u64(), body(&followed)),
        (Some(200), b"hello".to_vec())
    );
    let stopped = c
        .call(
            "http/request",
            request(port, "/moved", json!({"redirectPolicy": "stop"})),
        )
        .await
        .unwrap();
    assert_eq!(stopped["status"], 302);
    let refused = c
        .call("http/request", request(1, "/", json!({"timeoutMs": 2000})))
        .await
        .unwrap_err();
    assert_eq!(refused.0, -32603, "{refused:?}");
    server.stop();
}

#[tokio::test]
async fn a_streamed_body_arrives_as_ordered_deltas_after_the_result() {
    let server = Server::start(&[]);
    let port = Origin::start().port;
    let mut c = server.client().await;
    let head = c
        .call(
            "http/request",
            request(port, "/big", json!({"streamResponse": true})),
        )
        .await
        .unwrap();
    assert_eq!(
        (head["status"].as_u64(), body(&head)),
        (Some(200), Vec::new())
    );
    let mut data = Vec::new();
    for seq in 1.. {
        let n = c.notification().await;
        assert_eq!(n["method"], "http/request/bodyDelta", "{n}");
        let p = &n["params"];
        assert_eq!(
            (p["requestId"].as_str(), p["seq"].as_u64()),
            (Some("/big"), Some(seq))
        );
        let delta = BASE64.decode(p["deltaBase64"].as_str().unwrap()).unwrap();
        assert!(delta.len() <= 1 << 20);
        data.extend(delta);
        if p["done"] == true {
            assert!(p.get("error").is_none(), "{p}");
            break;
        }
    }
    assert!(
        data == big(),
        "the streamed body differs ({} bytes)",
        data.len()
    );
    server.stop();
}

#[tokio::test]
async fn https_and_a_restricted_or_unreadable_network_are_refused_without_a_connection() {
    let server = Server::start(&[]);
    let origin = Origin::start();
    let port = origin.port;
    let mut c = server.client().await;
    let https = json!({"method": "GET", "url": format!("https://127.0.0.1:{port}/"), "headers": [], "requestId": "s"});
    let (code, message) = c.call("http/request", https).await.unwrap_err();
    assert_eq!(code, -32602);
    assert!(message.contains("https"), "{message}");
    let work = server.work();
    let restricted = request(port, "/plain", json!({"sandbox": workspace_write(&work)}));
    let (code, message) = c.call("http/request", restricted).await.unwrap_err();
    assert_eq!(code, -32602);
    assert!(message.contains("network: restricted"), "{message}");
    // A network the policy parser would refuse is refused here too, never taken for enabled.
    let with_network = |network: Value| {
        let permissions = json!({"type": "managed", "network": network,
                                 "file_system": {"type": "unrestricted"}});
        json!({"sandbox": {"permissions": permissions}})
    };
    for (extra, named) in [
        (
            with_network(json!("Restricted")),
            "sandbox.permissions.network",
        ),
        (
            with_network(json!(["restricted"])),
            "sandbox.permissions.network",
        ),
        (
            with_network(json!({"type": "restricted"})),
            "sandbox.permissions.network",
        ),
        (with_network(json!(0)), "sandbox.permissions.network"),
        (
            json!({"sandbox": {"permissions": "restricted"}}),
            "sandbox.permissions",
        ),
        (json!({"sandbox": "restricted"}), "sandbox"),
    ] {
        let call = request(port, "/plain", extra.clone());
        let (code, message) = c.call("http/request", call).await.unwrap_err();
        assert_eq!(code, -32602, "{extra}: {message}");
        assert!(message.starts_with(named), "{extra}: {message}");
    }
    assert_eq!(
        origin.accepted.load(Ordering::SeqCst),
        0,
        "a refused request connected"
    );
    for network in [json!("enabled"), Value::Null] {
        let call = request(port, "/plain", with_network(network));
        assert_eq!(c.call("http/request", call).await.unwrap()["status"], 200);
    }
    server.stop();
}

/// The message of a GET of `path` that fails in the exchange (-32603).
async fn exchange_failure(c: &mut Client, port: u16, path: &str) -> String {
    let call = request(port, path, json!({}));
    let (code, message) = c.call("http/request", call).await.unwrap_err();
    assert_eq!(code, -32603, "{message}");
    message
}

/// The header names of the request in `sent`, lower case.
fn header_names(sent: &str) -> Vec<String> {
    let head = sent.split("\r\n\r\n").next().unwrap();
    head.split("\r\n")
        .skip(1)
        .map(|line| line.split(':').next().unwrap().to_ascii_lowercase())
        .collect()
}

#[tokio::test]
async fn a_method_url_or_header_that_would_inject_is_refused_before_any_byte_is_sent() {
    let server = Server::start(&[]);
    let origin = Origin::start();
    let mut c = server.client().await;
    let smuggle = "GET /plain HTTP/1.1\r\nHost: evil\r\nContent-Length: 0\r\n\r\nGET /smuggled";
    let header = |name: &str, value: &str| json!({"headers": [{"name": "X-Ok", "value": "1"}, {"name": name, "value": value}]});
    for (extra, field) in [
        (json!({"method": smuggle}), "method"),
        (json!({"method": "GET /"}), "method"),
        (json!({"method": ""}), "method"),
        (json!({"method": "CONNECT"}), "method"),
        (json!({"method": "trace"}), "method"),
        (
            json!({"url": origin.url("/plain\r\nX-Injected: yes")}),
            "url",
        ),
        (json!({"url": origin.url("/plain\nX-Injected: yes")}), "url"),
        (
            json!({"url": format!("{}\r\n", origin.url("/plain"))}),
            "url",
        ),
        (header("X-Injected: yes\r\nX-A", "v"), "headers[1].name"),
        (header("Bad Name", "v"), "headers[1].name"),
        (header("", "v"), "headers[1].name"),
        (header("X-A", "v\r\nX-Injected: yes"), "headers[1].value"),
        (header("X-A", "v\nX-Injected: yes"), "headers[1].value"),
        (header("X-A", "v\rX-Injected: yes"), "headers[1].value"),
        (header("X-A", "v\u{0}"), "headers[1].value"),
    ] {
        let call = request(origin.port, "/plain", extra.clone());
        let (code, message) = c.call("http/request", call).await.unwrap_err();
        assert_eq!(code, -32602, "{extra}: {message}");
        assert!(message.starts_with(field), "{extra}: {message}");
    }
    assert_eq!(
        origin.accepted.load(Ordering::SeqCst),
        0,
        "a refused request connected"
    );
    // A client's framing headers are left out: the server frames the request itself.
    let framing = json!({"headers": [
        {"name": "Host", "value": "evil"},
        {"name": "X-A", "value": "v\tw"},
        {"name": "Transfer-Encoding", "value": "chunked"},
        {"name": "content-length", "value": "999"},
        {"name": "Connection", "value": "keep-alive"}]});
    let good = request(origin.port, "/plain", framing);
    assert_eq!(c.call("http/request", good).await.unwrap()["status"], 200);
    let sent = origin.next_sent();
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(sent.matches(" HTTP/1.1\r\n").count(), 1, "{sent:?}");
    assert!(sent.starts_with("GET /plain HTTP/1.1\r\n"), "{sent:?}");
    assert_eq!(
        header_names(&sent),
        ["host", "x-a", "content-length", "connection"],
        "{sent:?}"
    );
    let host = format!("\r\nHost: 127.0.0.1:{}\r\n", origin.port);
    assert!(sent.contains(&host), "{sent:?}");
    assert!(sent.contains("\r\nX-A: v\tw\r\n"), "{sent:?}");
    assert!(sent.contains("\r\nContent-Length: 0\r\n"), "{sent:?}");
    assert!(sent.contains("\r\nConnection: close\r\n"), "{sent:?}");
    assert!(!sent.to_ascii_lowercase().contains("injected"), "{sent:?}");
    assert!(sent.ends_with("\r\n\r\n"), "{sent:?}");
    server.stop();
}

#[tokio::test]
async fn a_redirect_cannot_inject_either() {
    let server = Server::start(&[]);
    let origin = Origin::start();
    let mut c = server.client().await;
    let message = exchange_failure(&mut c, origin.port, "/bare-cr").await;
    assert!(message.contains("bare CR"), "{message}");
    let sent = origin.next_sent();
    assert!(sent.starts_with("GET /bare-cr "), "{sent:?}");
    assert_eq!(
        origin.accepted.load(Ordering::SeqCst),
        1,
        "the redirect was followed"
    );
    // A Location is checked as the URL is: not https, not another scheme, no tab (which the
    // parser would drop, following another URL than the one written); none is followed.
    for (path, why) in [
        ("/to-https", "is https"),
        ("/to-file", "has the scheme \"file\""),
        ("/tab-location", "contains a tab"),
    ] {
        let message = exchange_failure(&mut c, origin.port, path).await;
        assert!(message.contains("the redirect to"), "{path}: {message}");
        assert!(message.contains(why), "{path}: {message}");
        let sent = origin.next_sent();
        assert!(sent.starts_with(&format!("GET {path} ")), "{sent:?}");
    }
    assert_eq!(
        origin.accepted.load(Ordering::SeqCst),
        4,
        "a refused redirect was followed"
    );
    // A relative Location is resolved against the URL, as the URL standard says.
    let relative = request(origin.port, "/relative", json!({}));
    let followed = c.call("http/request", relative).await.unwrap();
    assert_eq!(
        (followed["status"].as_u64(), body(&followed)),
        (Some(200), b"hello".to_vec())
    );
    server.stop();
}

#[tokio::test]
async fn credentials_are_dropped_on_a_redirect_to_another_origin_and_kept_within_it() {
    let server = Server::start(&[]);
    let first = Origin::start();
    let other_port = Origin::start();
    // The same port on another loopback address: only the host differs.
    let other_host = Origin::on(&format!("127.0.0.2:{}", first.port));
    let mut c = server.client().await;
    let credentials = json!({"headers": [
        {"name": "Authorization", "value": "Bearer secret"},
        {"name": "cookie", "value": "session=secret"},
        {"name": "Cookie2", "value": "session=secret"},
        {"name": "Proxy-Authorization", "value": "Basic secret"},
        {"name": "WWW-Authenticate", "value": "Basic realm=secret"},
        {"name": "X-Kept", "value": "yes"}]});
    let all = [
        "host",
        "authorization",
        "cookie",
        "cookie2",
        "proxy-authorization",
        "www-authenticate",
        "x-kept",
        "content-length",
        "connection",
    ];
    let landings = [
        (&first, first.url("/plain")),
        (&other_port, other_port.url("/plain")),
        (
            &other_host,
            format!("http://127.0.0.2:{}/plain", first.port),
        ),
    ];
    for (landing, location) in landings {
        let path = format!("/redirect/302/{location}");
        let call = request(first.port, &path, credentials.clone());
        let followed = c.call("http/request", call).await.unwrap();
        assert_eq!(followed["status"], 200, "{location}");
        let redirecting = first.next_sent();
        assert_eq!(header_names(&redirecting), all, "{redirecting:?}");
        let landed = landing.next_sent();
        let names = header_names(&landed);
        let same_origin = std::ptr::eq(landing, &first);
        let expected: &[&str] = match same_origin {
            true => &all,
            false => &["host", "x-kept", "content-length", "connection"],
        };
        assert_eq!(names, expected, "redirected to {location}: {landed:?}");
        assert_eq!(landed.contains("secret"), same_origin, "{landed:?}");
    }
    server.stop();
}

#[tokio::test]
async fn an_endless_response_head_or_chunk_size_line_is_cut_at_its_bound() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    for path in ["/endless-head", "/endless-chunk-line"] {
        let origin = Origin::start();
        let message = exchange_failure(&mut c, origin.port, path).await;
        assert!(message.contains("too large"), "{message}");
        origin.next_sent();
        // 64 KiB (4 KiB) read, then the connection closed: what was written beyond sits in
        // socket buffers (a few MiB on loopback), far from the 256 MiB offered.
        let written = origin.endless_written.load(Ordering::SeqCst);
        assert!(
            written < 64 << 20,
            "{path}: the server could write {written} bytes of one line"
        );
    }
    server.stop();
}

#[tokio::test]
async fn a_response_framed_as_rfc_9112_forbids_is_refused() {
    let server = Server::start(&[]);
    let origin = Origin::start();
    let mut c = server.client().await;
    for (path, why) in [
        ("/empty-length", "bad content-length"),
        (
            "/length-and-chunked",
            "both Transfer-Encoding and Content-Length",
        ),
        ("/chunked-in-1.0", "HTTP/1.0"),
        ("/chunked-twice", "chunked applied more than once"),
        ("/space-before-colon", "bad header line"),
        (
            "/switching-protocols",
            "unsolicited 101 Switching Protocols",
        ),
        ("/gzip-chunked", "is not decoded"),
    ] {
        let message = exchange_failure(&mut c, origin.port, path).await;
        assert!(message.contains(why), "{path}: {message}");
    }
    // Leading zeros of a chunk size are not digits too many.
    let zeros = c
        .call("http/request", request(origin.port, "/zeros", json!({})))
        .await
        .unwrap();
    assert_eq!(body(&zeros), b"abc");
    server.stop();
}

/// What each request of a redirect chain started with `method` at `path` sent, by request line.
async fn redirect_chain(c: &mut Client, origin: &Origin, method: &str, path: &str) -> Vec<String> {
    let post = json!({"method": method, "bodyBase64": BASE64.encode("payload"),
                      "headers": [{"name": "Content-Type", "value": "text/plain"}]});
    let followed = c
        .call("http/request", request(origin.port, path, post))
        .await
        .unwrap();
    assert!(
        followed["status"] == 200 || followed["status"] == 201,
        "{followed}"
    );
    let mut sent = vec![origin.next_sent(), origin.next_sent()];
    sent.sort_by_key(|s| !s.contains(" /redirect/"));
    sent
}

#[tokio::test]
async fn a_303_or_a_301_of_a_post_continues_as_a_get_without_the_body() {
    let server = Server::start(&[]);
    let origin = Origin::start();
    let mut c = server.client().await;
    for status in [303, 301, 302] {
        let path = format!("/redirect/{status}//plain");
        let sent = redirect_chain(&mut c, &origin, "POST", &path).await;
        assert!(sent[0].starts_with("POST /redirect/"), "{sent:?}");
        assert!(sent[0].ends_with("\r\n\r\npayload"), "{sent:?}");
        let landed = &sent[1];
        assert!(
            landed.starts_with("GET /plain HTTP/1.1\r\n"),
            "{status}: {landed:?}"
        );
        assert!(landed.contains("\r\nContent-Length: 0\r\n"), "{landed:?}");
        assert!(landed.ends_with("\r\n\r\n"), "{status}: a body: {landed:?}");
        assert!(!landed.contains("Content-Type"), "{landed:?}");
    }
    // A 307, and a 301 to another method than POST, keep the method and the body.
    for (status, method) in [(307, "POST"), (301, "PUT")] {
        let path = format!("/redirect/{status}//echo");
        let sent = redirect_chain(&mut c, &origin, method, &path).await;
        let landed = &sent[1];
        assert!(
            landed.starts_with(&format!("{method} /echo ")),
            "{landed:?}"
        );
        assert!(
            landed.contains("\r\nContent-Type: text/plain\r\n"),
            "{landed:?}"
        );
        assert!(landed.ends_with("\r\n\r\npayload"), "{landed:?}");
    }
    server.stop();
}
