//! A minimal HTTP/1.1 client over one TCP connection (`Connection: close`): the request, the
//! response head, and the body in chunks (Content-Length, chunked, or until close).
//!
//! Invariant: no chunk is larger than [`MAX_CHUNK`]; a head larger than [`MAX_HEAD`] or a
//! malformed one is an error, never a guess.

use std::io;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Largest body chunk handed out (and so the largest `bodyDelta`).
pub const MAX_CHUNK: usize = 1024 * 1024;
/// Largest response head.
const MAX_HEAD: usize = 64 * 1024;

/// An `http://` URL, split.
#[derive(Clone, Debug)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub target: String,
}

impl Url {
    /// Parses `http://host[:port][/path]`; anything else is an error naming why.
    pub fn parse(url: &str) -> Result<Url, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(format!("url {url:?} is not absolute"));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "http" => {}
            "https" => {
                return Err(format!(
                    "url {url:?}: https is not supported by this server (no TLS); use http://"
                ))
            }
            other => return Err(format!("url {url:?}: scheme {other:?} is not http")),
        }
        let (authority, target) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let target = target.split('#').next().unwrap_or("/").to_string();
        if authority.contains('@') {
            return Err(format!(
                "url {url:?}: credentials in the URL are not supported"
            ));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                h.to_string(),
                p.parse()
                    .map_err(|_| format!("url {url:?}: bad port {p:?}"))?,
            ),
            _ => (authority.to_string(), 80),
        };
        if host.is_empty() {
            return Err(format!("url {url:?} has no host"));
        }
        Ok(Url { host, port, target })
    }

    /// `host` or `host:port` for the Host header.
    fn host_header(&self) -> String {
        match self.port {
            80 => self.host.clone(),
            port => format!("{}:{port}", self.host),
        }
    }
}

/// A response head and the body still to read.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

/// Sends one request and reads the response head.
pub async fn send(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<Response> {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let mut stream = TcpStream::connect((host, url.port)).await?;
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\n",
        url.target,
        url.host_header()
    );
    for (name, value) in headers {
        if name.contains(['\r', '\n', ':']) || value.contains(['\r', '\n']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("header {name:?} is malformed"),
            ));
        }
        if !name.eq_ignore_ascii_case("host")
            && !name.eq_ignore_ascii_case("connection")
            && !name.eq_ignore_ascii_case("content-length")
        {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader).await?;
    let header = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.trim())
    };
    let mode = if method.eq_ignore_ascii_case("HEAD")
        || status == 204
        || status == 304
        || (100..200).contains(&status)
    {
        Mode::Length(0)
    } else if header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        Mode::Chunked(0)
    } else if let Some(len) = header("content-length") {
        Mode::Length(
            len.parse()
                .map_err(|_| bad(format!("bad content-length {len:?}")))?,
        )
    } else {
        Mode::Close
    };
    Ok(Response {
        status,
        headers,
        body: Body { reader, mode },
    })
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

async fn read_head(reader: &mut BufReader<TcpStream>) -> io::Result<(u16, Vec<(String, String)>)> {
    let mut total = 0;
    let mut line = String::new();
    let mut lines = Vec::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).await?;
        total += n;
        if n == 0 || total > MAX_HEAD {
            return Err(bad("the response head is truncated or too large".into()));
        }
        let text = line.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        lines.push(text.to_string());
    }
    let status_line = lines.first().ok_or_else(|| bad("empty response".into()))?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let headers = lines[1..]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok((status, headers))
}

enum Mode {
    /// Bytes left.
    Length(u64),
    /// Bytes left in the current chunk; `u64::MAX` once the last chunk was read.
    Chunked(u64),
    Close,
}

/// The body of a response.
pub struct Body {
    reader: BufReader<TcpStream>,
    mode: Mode,
}

impl Body {
    /// The next piece of the body (at most [`MAX_CHUNK`] bytes), `None` at its end.
    pub async fn next(&mut self) -> io::Result<Option<Vec<u8>>> {
        let want = match &mut self.mode {
            Mode::Length(0) => return Ok(None),
            Mode::Length(left) => (*left).min(MAX_CHUNK as u64) as usize,
            Mode::Chunked(u64::MAX) => return Ok(None),
            Mode::Chunked(0) => {
                let size = self.chunk_size().await?;
                if size == 0 {
                    self.mode = Mode::Chunked(u64::MAX);
                    return Ok(None);
                }
                self.mode = Mode::Chunked(size);
                size.min(MAX_CHUNK as u64) as usize
            }
            Mode::Chunked(left) => (*left).min(MAX_CHUNK as u64) as usize,
            Mode::Close => MAX_CHUNK,
        };
        let mut buf = vec![0u8; want];
        let n = match self.mode {
            Mode::Close => self.reader.read(&mut buf).await?,
            _ => {
                self.reader.read_exact(&mut buf).await?;
                want
            }
        };
        buf.truncate(n);
        match &mut self.mode {
            Mode::Length(left) => *left -= n as u64,
            Mode::Chunked(left) => {
                *left -= n as u64;
                if *left == 0 {
                    let mut crlf = [0u8; 2];
                    self.reader.read_exact(&mut crlf).await?;
                }
            }
            Mode::Close if n == 0 => return Ok(None),
            Mode::Close => {}
        }
        Ok(Some(buf))
    }

    async fn chunk_size(&mut self) -> io::Result<u64> {
        let mut line = String::new();
        self.reader.read_line(&mut line).await?;
        let size = line.trim().split(';').next().unwrap_or("");
        u64::from_str_radix(size, 16).map_err(|_| bad(format!("bad chunk size {size:?}")))
    }
}
