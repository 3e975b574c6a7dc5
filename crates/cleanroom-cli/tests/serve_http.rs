//! `http/request` of `cleanroom serve` against loopback HTTP servers of the test's own: whole
//! bodies (Content-Length, chunked), a request body, redirects followed or stopped, a streamed
//! body as `http/request/bodyDelta` notifications, and the refusals (https, a call whose sandbox
//! restricts the network — which opens no connection at all).

mod serve_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Value};
use serve_support::{workspace_write, Server};

/// Size of the streamed body: more than two deltas of 1 MiB.
const BIG: usize = (5 << 20) / 2;

/// A loopback HTTP server answering by path; counts the connections it accepted.
fn origin() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || answer(stream));
        }
    });
    (port, accepted)
}

fn answer(stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim().is_empty() {
            break;
        }
        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    let mut out = stream;
    let response = match path.as_str() {
        "/plain" => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Test: yes\r\n\r\nhello".to_vec(),
        "/echo" => [format!("HTTP/1.1 201 Created\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes(), body].concat(),
        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n".to_vec(),
        "/moved" => b"HTTP/1.1 302 Found\r\nLocation: /plain\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "/big" => [format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes(), big()].concat(),
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
    };
    let _ = out.write_all(&response);
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
    let (port, _) = origin();
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
    let (port, _) = origin();
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
async fn https_and_a_restricted_network_are_refused_without_a_connection() {
    let server = Server::start(&[]);
    let (port, accepted) = origin();
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
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "a refused request connected"
    );
    server.stop();
}
