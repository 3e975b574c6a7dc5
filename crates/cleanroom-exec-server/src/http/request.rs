//! The request `http/request` sends: its method, URL, headers and body checked once, when the
//! call's params are read, and written as one HTTP/1.1 request head; and what a redirect changes.
//!
//! Invariant: a [`Request`] exists only with valid parts: the method an RFC 9110 token but
//! `CONNECT` and `TRACE` ([`REFUSED_METHODS`]), the URL an
//! `http:` URL parsed by the `url` crate (nothing dropped by the parser, no credentials), header
//! names tokens and header values without CR, LF, NUL or another control character but tab. Its
//! request target and Host are re-serialized from the parsed URL, and the framing headers (Host,
//! Content-Length, Transfer-Encoding, Connection) are the server's own, so [`Request::head`]
//! always writes exactly one request. A redirect to another origin (scheme, host or port) drops
//! the credentials ([`CREDENTIALS`]), for the rest of the chain; a `Location` that cannot be
//! followed is an [`Invalid`] too, naming it.

use std::cell::Cell;
use std::fmt;

use url::{Host, Position, SyntaxViolation, Url};

/// Methods never sent, with why: `CONNECT` asks for a tunnel with an authority-form target, not
/// the origin-form request this server writes, and `TRACE` has the server echo the request back
/// (credentials included).
const REFUSED_METHODS: &[(&str, &str)] = &[
    (
        "CONNECT",
        "asks for a tunnel, which http/request does not open",
    ),
    ("TRACE", "echoes the request, credentials included"),
];

/// Headers sent only to the origin the client named: dropped on a redirect to another origin
/// (the list of the reference's HTTP client, reqwest).
pub const CREDENTIALS: &[&str] = &[
    "authorization",
    "cookie",
    "cookie2",
    "proxy-authorization",
    "www-authenticate",
];

/// Headers the server writes itself (a client's own are left out): they frame the request.
const FRAMING: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

/// Headers describing a body, dropped with it when a redirect turns the request into a GET.
const BODY_HEADERS: [&str; 2] = ["content-type", "content-encoding"];

/// A part of the call, or a redirect's `Location`, that cannot be sent: which, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The param as the client wrote it (`method`, `url`, `headers[2].value`), or
    /// `the redirect to "LOCATION"`.
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.why)
    }
}

/// One request, valid in every part.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: Url,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    /// Checks every part; the error names the first field that is wrong. The method is sent in
    /// upper case.
    pub fn new(
        method: &str,
        url: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Request, Invalid> {
        let invalid = |field: String, why: String| Invalid { field, why };
        if !is_token(method) {
            return Err(invalid(
                "method".into(),
                format!("{method:?} is not an HTTP method (an RFC 9110 token)"),
            ));
        }
        if let Some((name, why)) = REFUSED_METHODS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(method))
        {
            return Err(invalid(
                "method".into(),
                format!("{name} is refused: it {why}"),
            ));
        }
        let url = parse_url(url).map_err(|why| invalid("url".into(), format!("{url:?} {why}")))?;
        for (i, (name, value)) in headers.iter().enumerate() {
            if !is_token(name) {
                return Err(invalid(
                    format!("headers[{i}].name"),
                    format!("{name:?} is not a header name (an RFC 9110 token)"),
                ));
            }
            if let Some(c) = value.chars().find(|&c| c.is_ascii_control() && c != '\t') {
                return Err(invalid(
                    format!("headers[{i}].value"),
                    format!("of {name:?} contains the control character {c:?} (CR, LF, NUL and other controls but tab are refused)"),
                ));
            }
        }
        Ok(Request {
            method: method.to_ascii_uppercase(),
            url,
            headers,
            body,
        })
    }

    /// The method, upper case.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Where to connect: the host (a name, or an address) and the port.
    pub fn address(&self) -> (String, u16) {
        let host = self
            .url
            .host()
            .expect("parse_checked refuses a URL without a host");
        let host = match host {
            Host::Domain(name) => name.to_string(),
            Host::Ipv4(ip) => ip.to_string(),
            Host::Ipv6(ip) => ip.to_string(),
        };
        let port = self.url.port_or_known_default();
        (
            host,
            port.expect("parse_checked accepts only http, which has a port"),
        )
    }

    /// The request head: the request line, Host, the client's headers but the framing ones,
    /// Content-Length and `Connection: close`.
    pub fn head(&self) -> Vec<u8> {
        let target = &self.url[Position::BeforePath..Position::AfterQuery];
        let host = &self.url[Position::BeforeHost..Position::AfterPort];
        let mut head = format!("{} {target} HTTP/1.1\r\nHost: {host}\r\n", self.method);
        for (name, value) in &self.headers {
            if !is_one_of(name, &FRAMING) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        head.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.body.len()
        ));
        head.into_bytes()
    }

    /// The request to send after a redirect (`status`) to `location`: the URL resolved against
    /// this one; the credentials dropped when the origin changes; a GET without the body after
    /// a 303 (but for HEAD) and after a 301 or 302 of a POST, as browsers and curl do.
    pub fn redirect(mut self, status: u16, location: &str) -> Result<Request, Invalid> {
        let next = join(&self.url, location).map_err(|why| Invalid {
            field: format!("the redirect to {location:?}"),
            why,
        })?;
        if origin(&next) != origin(&self.url) {
            self.headers
                .retain(|(name, _)| !is_one_of(name, CREDENTIALS));
        }
        let to_get = match status {
            303 => self.method != "HEAD",
            301 | 302 => self.method == "POST",
            _ => false,
        };
        if to_get {
            self.method = "GET".into();
            self.body.clear();
            self.headers
                .retain(|(name, _)| !is_one_of(name, &BODY_HEADERS));
        }
        self.url = next;
        Ok(self)
    }
}

/// `tchar` of RFC 9110 §5.6.2, at least one.
pub fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_one_of(name: &str, set: &[&str]) -> bool {
    set.iter().any(|s| name.eq_ignore_ascii_case(s))
}

/// Scheme, host and port: what a redirect must keep for the credentials to follow it.
fn origin(url: &Url) -> (&str, Option<&str>, Option<u16>) {
    (url.scheme(), url.host_str(), url.port_or_known_default())
}

/// Parses an absolute URL.
fn parse_url(text: &str) -> Result<Url, String> {
    parse_checked(text, None)
}

/// Resolves a redirect's `Location` (absolute or relative) against `base`.
fn join(base: &Url, location: &str) -> Result<Url, String> {
    parse_checked(location, Some(base))
}

/// Parses `text` (against `base` when given) and accepts only what this server can send: an
/// `http:` URL with a host and without credentials, from which the parser dropped nothing (it
/// silently removes tabs, CR and LF anywhere, and control characters and spaces at the ends).
fn parse_checked(text: &str, base: Option<&Url>) -> Result<Url, String> {
    let dropped = Cell::new(false);
    let watch = |violation| {
        if matches!(
            violation,
            SyntaxViolation::TabOrNewlineIgnored | SyntaxViolation::C0SpaceIgnored
        ) {
            dropped.set(true);
        }
    };
    let url = Url::options()
        .base_url(base)
        .syntax_violation_callback(Some(&watch))
        .parse(text)
        .map_err(|e| format!("is not a valid URL: {e}"))?;
    if dropped.get() {
        return Err("contains a tab, CR or LF, or a control character or space at an end".into());
    }
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err("is https, which this server does not speak (no TLS); use http://".into())
        }
        other => return Err(format!("has the scheme {other:?}, not http")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("carries credentials, which are not supported".into());
    }
    if url.host().is_none() {
        return Err("has no host".into());
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, url: &str, headers: &[(&str, &str)]) -> Result<Request, Invalid> {
        let headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        Request::new(method, url, headers, Vec::new())
    }

    fn head(r: &Request) -> String {
        String::from_utf8(r.head()).unwrap()
    }

    #[test]
    fn the_head_is_one_request_re_serialized_from_the_parsed_url() {
        let r = request(
            "get",
            "http://Example.COM:80/a b/../c?q=1 2#frag",
            &[
                ("X-A", "b\tc"),
                ("Host", "evil"),
                ("Transfer-Encoding", "chunked"),
            ],
        )
        .unwrap();
        assert_eq!(
            head(&r),
            "GET /c?q=1%202 HTTP/1.1\r\nHost: example.com\r\nX-A: b\tc\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let r = request("GET", "http://[::1]:8080", &[]).unwrap();
        assert!(head(&r).starts_with("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n"));
        assert_eq!(r.address(), ("::1".to_string(), 8080));
    }

    #[test]
    fn every_bad_part_is_named() {
        for (method, url, headers, field) in [
            (
                "GET / HTTP/1.1\r\nHost: evil\r\n\r\nGET",
                "http://h/",
                &[][..],
                "method",
            ),
            ("", "http://h/", &[], "method"),
            ("G T", "http://h/", &[], "method"),
            ("CONNECT", "http://h/", &[], "method"),
            ("connect", "http://h/", &[], "method"),
            ("TRACE", "http://h/", &[], "method"),
            ("GET", "http://h/a\r\nX-Injected: yes", &[], "url"),
            ("GET", "http://h/a\tb", &[], "url"),
            ("GET", " http://h/", &[], "url"),
            ("GET", "/relative", &[], "url"),
            ("GET", "https://h/", &[], "url"),
            ("GET", "ftp://h/", &[], "url"),
            ("GET", "http://u:p@h/", &[], "url"),
            (
                "GET",
                "http://h/",
                &[("X-A\r\nX-B", "v")],
                "headers[0].name",
            ),
            (
                "GET",
                "http://h/",
                &[("X-A", "v"), ("", "v")],
                "headers[1].name",
            ),
            ("GET", "http://h/", &[("X-A:", "v")], "headers[0].name"),
            (
                "GET",
                "http://h/",
                &[("X-A", "v\r\nX-Injected: yes")],
                "headers[0].value",
            ),
            ("GET", "http://h/", &[("X-A", "v\nw")], "headers[0].value"),
            ("GET", "http://h/", &[("X-A", "v\0")], "headers[0].value"),
        ] {
            let err = request(method, url, headers).unwrap_err();
            assert_eq!(err.field, field, "{method:?} {url:?} {headers:?}: {err}");
        }
    }

    #[test]
    fn credentials_follow_a_redirect_only_within_the_origin() {
        let names = |r: &Request| -> Vec<String> {
            r.headers
                .iter()
                .map(|(n, _)| n.to_ascii_lowercase())
                .collect()
        };
        let all = [
            ("Authorization", "a"),
            ("Cookie", "c"),
            ("Cookie2", "c2"),
            ("Proxy-Authorization", "p"),
            ("WWW-Authenticate", "w"),
            ("X-Keep", "k"),
        ];
        let r = request("GET", "http://127.0.0.1:1000/", &all).unwrap();
        let same = r.clone().redirect(302, "/next").unwrap();
        assert_eq!(names(&same).len(), all.len());
        let explicit_port = r.clone().redirect(302, "http://127.0.0.1:1000/x").unwrap();
        assert_eq!(names(&explicit_port).len(), all.len());
        for other in [
            "http://127.0.0.1:1001/",
            "http://127.0.0.2:1000/",
            "//localhost:1000/",
        ] {
            let moved = r.clone().redirect(302, other).unwrap();
            assert_eq!(names(&moved), ["x-keep"], "{other}");
            let back = moved.redirect(302, "http://127.0.0.1:1000/").unwrap();
            assert_eq!(
                names(&back),
                ["x-keep"],
                "dropped for the rest of the chain"
            );
        }
    }

    #[test]
    fn a_redirect_is_resolved_and_checked_like_the_url() {
        let r = request("POST", "http://h/a/b", &[("Content-Type", "x")]).unwrap();
        let r = Request {
            body: b"x".to_vec(),
            ..r
        };
        let kept = r.clone().redirect(307, "c").unwrap();
        assert_eq!((kept.method(), kept.url.as_str()), ("POST", "http://h/a/c"));
        assert_eq!(kept.body(), b"x");
        let got = r.clone().redirect(302, "/d").unwrap();
        assert_eq!((got.method(), got.body()), ("GET", &b""[..]));
        assert!(got.headers.is_empty(), "{:?}", got.headers);
        for bad in [
            "/a\r\nX-Injected: yes",
            "https://h/",
            "http://u@h/",
            "http://",
        ] {
            let err = r.clone().redirect(302, bad).unwrap_err();
            assert_eq!(err.field, format!("the redirect to {bad:?}"), "{err}");
        }
    }
}
