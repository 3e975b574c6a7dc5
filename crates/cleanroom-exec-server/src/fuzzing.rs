//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz and libFuzzer; `fuzz/README.md`).
//! Each hands one of the server's parsers whatever bytes the fuzzer made up and panics when an
//! invariant of that parser breaks, so a broken invariant is a crash the fuzzer reports.
//!
//! Not an API: hidden from the documentation, and changed with the fuzz targets.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::Value;
use tokio::io::BufReader;

use crate::http::request::{is_token, Request};
use crate::http::response;
use crate::policy::{self, Base, Target};
use crate::protocol::{self, Incoming, Params, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};
use crate::uri;

/// One JSON-RPC frame: an invalid one gets a JSON error response with a spec code, and the
/// value budget's scan never counts fewer values than the message holds.
pub fn jsonrpc(bytes: &[u8]) {
    if let Incoming::Invalid(text) = protocol::decode(bytes) {
        let response: Value = serde_json::from_str(&text).expect("an error response is JSON");
        assert_eq!(response["jsonrpc"], "2.0", "{text}");
        let code = response["error"]["code"].as_i64();
        assert!(
            matches!(code, Some(PARSE_ERROR | INVALID_REQUEST)),
            "{text}"
        );
        let id = &response["id"];
        assert!(id.is_null() || id.is_string() || id.is_i64(), "{text}");
    }
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        let values = count_values(&value);
        assert!(
            !protocol::values_at_most(bytes, values - 1),
            "the budget's scan counted fewer than the {values} values"
        );
    }
}

fn count_values(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_values).sum(),
        Value::Object(fields) => fields.values().map(count_values).sum(),
        _ => 0,
    }
}

/// A `file:` URI: an error starts with the label; a path is absolute, without NUL, and comes
/// back from its own URI. And any absolute path comes back from its URI (but drive-shaped ones,
/// which are refused).
pub fn file_uri(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        match uri::parse_file_uri(text, "fuzzed") {
            Err(e) => assert!(e.starts_with("fuzzed "), "{e}"),
            Ok(path) => {
                assert!(path.is_absolute(), "{text:?} gave {path:?}");
                assert!(!path.as_os_str().as_bytes().contains(&0), "{text:?}");
                let again = uri::parse_file_uri(&uri::file_uri(&path), "fuzzed");
                assert_eq!(again.as_ref(), Ok(&path), "{text:?}");
            }
        }
    }
    let raw = [b"/", bytes].concat();
    if !raw.contains(&0) {
        let path = Path::new(OsStr::from_bytes(&raw));
        match uri::parse_file_uri(&uri::file_uri(path), "fuzzed") {
            Ok(back) => assert_eq!(back, path),
            Err(e) => assert!(e.contains("Windows drive path"), "{path:?}: {e}"),
        }
    }
}

/// `http/request` params (JSON), with `redirects: [{status, location}]` to follow: every
/// request that can be built is exactly one well-formed request head, redirects included.
pub fn http_request(bytes: &[u8]) {
    let Ok(params) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    let Ok(p) = Params::new(&params) else {
        return;
    };
    let Ok(mut request) = crate::http::request_of(&p) else {
        return;
    };
    check_one_request(&request);
    let redirects = params.get("redirects").and_then(Value::as_array);
    for redirect in redirects.into_iter().flatten() {
        let status = redirect["status"].as_u64().unwrap_or(302) as u16;
        let location = redirect["location"].as_str().unwrap_or_default();
        match request.redirect(status, location) {
            Ok(next) => request = next,
            Err(_) => return,
        }
        check_one_request(&request);
    }
}

/// The head is one request line, header lines of a token, `: ` and a value without controls
/// (but tab), and the empty line, once, at the end; Host, Content-Length and Connection appear
/// once, Transfer-Encoding never.
fn check_one_request(request: &Request) {
    let head = String::from_utf8(request.head()).expect("the head is UTF-8");
    let end = head.find("\r\n\r\n").expect("the head has an end");
    assert_eq!(end + 4, head.len(), "one head, ending at its end: {head:?}");
    let mut lines = head[..end].split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let parts: Vec<&str> = request_line.split(' ').collect();
    let [method, target, "HTTP/1.1"] = parts[..] else {
        panic!("bad request line {request_line:?}");
    };
    assert!(is_token(method), "{request_line:?}");
    assert!(target.starts_with('/'), "{request_line:?}");
    assert!(
        target.bytes().all(|b| b > b' ' && b != 0x7f),
        "{request_line:?}"
    );
    let mut framing = [0; 4];
    for line in lines {
        let (name, value) = line
            .split_once(": ")
            .expect("a header line is `name: value`");
        assert!(is_token(name), "{line:?}");
        assert!(
            !value.chars().any(|c| c.is_ascii_control() && c != '\t'),
            "{line:?}"
        );
        let names = ["host", "content-length", "connection", "transfer-encoding"];
        if let Some(i) = names.iter().position(|n| name.eq_ignore_ascii_case(n)) {
            framing[i] += 1;
        }
    }
    assert_eq!(framing, [1, 1, 1, 0], "{head:?}");
}

/// Bytes from a server: read with a large and a tiny buffer, the outcome is the same; a
/// response is final (or 101), its header names are tokens, its body pieces 1 byte to
/// `MAX_CHUNK` and never more than the bytes given; a response to HEAD has no body.
pub fn http_response(bytes: &[u8]) {
    let whole = read_response(bytes, 8192, false);
    let tiny = read_response(bytes, 3, false);
    assert_eq!(whole, tiny, "the reader's buffer size changed the outcome");
    if let Ok((status, headers, body)) = whole {
        assert!((200..1000).contains(&status) || status == 101, "{status}");
        assert!(
            headers.iter().all(|(name, _)| is_token(name)),
            "{headers:?}"
        );
        assert!(body.len() <= bytes.len());
    }
    if let Ok((_, _, body)) = read_response(bytes, 8192, true) {
        assert!(body.is_empty(), "a response to HEAD had a body");
    }
}

type Read = Result<(u16, Vec<(String, String)>, Vec<u8>), String>;

fn read_response(bytes: &[u8], capacity: usize, head_request: bool) -> Read {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
    }
    let read = async {
        let reader = BufReader::with_capacity(capacity, bytes);
        let mut response = response::read(reader, head_request).await?;
        let mut body = Vec::new();
        while let Some(piece) = response.body.next().await? {
            assert!((1..=response::MAX_CHUNK).contains(&piece.len()));
            body.extend(piece);
        }
        Ok::<_, std::io::Error>((response.status, response.headers, body))
    };
    RUNTIME.with(|runtime| runtime.block_on(read).map_err(|e| e.to_string()))
}

/// A `sandbox` argument (JSON) of an `fs/*` call, resolved against `tmpdir` and `cwd` (when it
/// names no `cwd` of its own: a relative glob then walks the target's tree, not `/`): it is
/// compiled, or refused with -32602 (never an internal error, never a panic).
pub fn sandbox(bytes: &[u8], cwd: &Path, tmpdir: &Path) {
    let Ok(mut sandbox) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if let Some(fields) = sandbox.as_object_mut() {
        fields
            .entry("cwd")
            .or_insert_with(|| Value::String(uri::file_uri(cwd)));
    }
    let params = serde_json::json!({ "sandbox": sandbox, "path": uri::file_uri(cwd) });
    let p = Params::new(&params).expect("an object");
    let base = Base {
        tmpdir: tmpdir.to_path_buf(),
        ..Base::default()
    };
    if let Err(e) = policy::for_fs_call(&p, &base, Target::Thread, false) {
        assert_eq!(e.code, INVALID_PARAMS, "{}", e.message);
    }
}

/// A glob component and a name, split at the first NUL: a pattern without wildcards matches
/// only itself; what a pattern matches, a `*` before or after it matches with more around.
pub fn glob(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let (pattern, name) = text.split_once('\0').unwrap_or((&text, ""));
    let matched = policy::glob::component_match(pattern, name);
    if !pattern.contains(['*', '?', '[']) {
        assert_eq!(matched, pattern == name, "{pattern:?} {name:?}");
    }
    if matched {
        let star_after =
            policy::glob::component_match(&format!("{pattern}*"), &format!("{name}.x"));
        let star_before =
            policy::glob::component_match(&format!("*{pattern}"), &format!("x.{name}"));
        assert!(star_after && star_before, "{pattern:?} {name:?}");
    }
}
