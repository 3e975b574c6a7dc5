//! The response to one request, read from any buffered byte stream (the connection, or bytes in
//! a test or a fuzz target): the head, interim 1xx heads skipped, and the body in pieces framed
//! by Content-Length, chunked coding, or the end of the stream (RFC 9112 §6.3).
//!
//! Invariants: nothing is read past a bound before it is checked (the heads share [`MAX_HEAD`],
//! a chunk-size line is at most [`MAX_CHUNK_LINE`]), so a server cannot make the reader grow
//! without limit; no piece of the body is larger than [`MAX_CHUNK`]; a malformed head, a bare CR
//! or a NUL in it, whitespace between a field name and its colon, a `101 Switching Protocols`
//! (no upgrade is ever asked for), a framing RFC 9112 forbids (an empty, malformed or
//! conflicting Content-Length, Transfer-Encoding in an HTTP/1.0 response or together with
//! Content-Length, chunked applied twice), a transfer coding other than chunked (none is
//! decoded, so the body would be handed on still coded) or a malformed chunk is an error, never
//! a guess.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

use super::request::is_token;

/// Largest body piece handed out (and so the largest `bodyDelta`).
pub const MAX_CHUNK: usize = 1024 * 1024;
/// Largest response head, interim heads included.
pub const MAX_HEAD: u64 = 64 * 1024;
/// Largest chunk-size line (with its extensions).
const MAX_CHUNK_LINE: u64 = 4096;

/// A response head and the body still to read.
pub struct Response<R> {
    /// The status code (200 to 999: an interim 1xx is skipped, a 101 refused).
    pub status: u16,
    /// The header fields in order; a field whose value is not UTF-8 is left out.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body<R>,
}

/// Reads the response to a request (`head_request`: to a HEAD, which has no body).
pub async fn read<R: AsyncBufRead + Unpin>(
    mut reader: R,
    head_request: bool,
) -> io::Result<Response<R>> {
    let mut budget = MAX_HEAD;
    let (line, fields) = loop {
        let (line, fields) = read_head(&mut reader, &mut budget).await?;
        match line.status {
            101 => {
                return Err(bad(
                    "an unsolicited 101 Switching Protocols (no upgrade was asked for)".into(),
                ))
            }
            100..=199 => continue,
            _ => break (line, fields),
        }
    };
    let status = line.status;
    let framing = framing(line, &fields, head_request)?;
    let headers = fields
        .into_iter()
        .filter_map(|(name, value)| Some((name, String::from_utf8(value).ok()?)))
        .collect();
    Ok(Response {
        status,
        headers,
        body: Body { reader, framing },
    })
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// One line, without its LF (and CR before it), of at most `*budget` bytes, taken from it.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    budget: &mut u64,
    what: &str,
) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let n = (&mut *reader)
        .take(*budget)
        .read_until(b'\n', &mut line)
        .await?;
    *budget -= n as u64;
    if line.pop() != Some(b'\n') {
        return Err(bad(format!("the {what} is truncated or too large")));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.contains(&b'\r') || line.contains(&0) {
        return Err(bad(format!("the {what} contains a bare CR or a NUL")));
    }
    Ok(line)
}

type Fields = Vec<(String, Vec<u8>)>;

/// A status line and its header fields, up to the empty line.
async fn read_head<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    budget: &mut u64,
) -> io::Result<(StatusLine, Fields)> {
    let line = read_line(reader, budget, "response head").await?;
    let status = status_line(&line).ok_or_else(|| {
        bad(format!(
            "bad status line {:?}",
            String::from_utf8_lossy(&line)
        ))
    })?;
    let mut fields: Fields = Vec::new();
    loop {
        let line = read_line(reader, budget, "response head").await?;
        let Some(&first) = line.first() else {
            return Ok((status, fields));
        };
        let bad_line = || {
            bad(format!(
                "bad header line {:?}",
                String::from_utf8_lossy(&line)
            ))
        };
        if first == b' ' || first == b'\t' {
            // obs-fold: the line continues the previous field's value (RFC 9112 §5.2).
            let (_, value) = fields.last_mut().ok_or_else(bad_line)?;
            value.push(b' ');
            value.extend_from_slice(trim(&line));
            continue;
        }
        // No whitespace before the colon (RFC 9112 §5.1: such a line must be rejected, or
        // `Content-Length : 3` would frame the body for some readers and not for others).
        let colon = line.iter().position(|&b| b == b':').ok_or_else(bad_line)?;
        let name = std::str::from_utf8(&line[..colon])
            .ok()
            .filter(|n| is_token(n))
            .ok_or_else(bad_line)?;
        fields.push((name.to_string(), trim(&line[colon + 1..]).to_vec()));
    }
}

/// What a status line says.
#[derive(Clone, Copy)]
struct StatusLine {
    /// The minor version: `HTTP/1.0` or `HTTP/1.1` (or a later 1.x).
    minor: u8,
    status: u16,
}

/// `HTTP/1.x DDD[ reason]`.
fn status_line(line: &[u8]) -> Option<StatusLine> {
    let rest = line.strip_prefix(b"HTTP/1.")?;
    let [minor, b' ', d1, d2, d3, tail @ ..] = rest else {
        return None;
    };
    if !minor.is_ascii_digit() || !(tail.is_empty() || tail[0] == b' ') {
        return None;
    }
    let digits = [*d1, *d2, *d3];
    let code = std::str::from_utf8(&digits).ok()?;
    let status = code
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| code.parse().ok())
        .flatten()
        .filter(|&c| c >= 100)?;
    Some(StatusLine {
        minor: minor - b'0',
        status,
    })
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| !b" \t".contains(b));
    let end = bytes.iter().rposition(|b| !b" \t".contains(b));
    match (start, end) {
        (Some(s), Some(e)) => &bytes[s..=e],
        _ => &[],
    }
}

/// How the body is delimited (RFC 9112 §6.3), refusing what §6.1 to §6.3 forbid: a
/// Transfer-Encoding in an HTTP/1.0 response, chunked applied twice, Transfer-Encoding together
/// with Content-Length (a sign of smuggling, "ought to be handled as an error"), a Content-Length
/// that is empty, not digits, or a list of differing values; and any transfer coding but
/// chunked, which this reader does not decode.
fn framing(line: StatusLine, fields: &Fields, head_request: bool) -> io::Result<Framing> {
    let status = line.status;
    if head_request || status == 204 || status == 304 {
        return Ok(Framing::Done);
    }
    let transfer_encoding = list(fields, "transfer-encoding");
    let content_length = list(fields, "content-length");
    let Some(codings) = transfer_encoding else {
        return match content_length {
            None => Ok(Framing::Close),
            Some(lengths) => content_length_of(&lengths).map(Framing::Length),
        };
    };
    if line.minor == 0 {
        return Err(bad("a Transfer-Encoding in an HTTP/1.0 response".into()));
    }
    if content_length.is_some() {
        return Err(bad(
            "both Transfer-Encoding and Content-Length (RFC 9112 forbids sending both)".into(),
        ));
    }
    let codings: Vec<&String> = codings.iter().filter(|c| !c.is_empty()).collect();
    let (chunked, others): (Vec<&String>, Vec<&String>) = codings
        .iter()
        .partition(|c| c.eq_ignore_ascii_case("chunked"));
    match (chunked.len(), others.is_empty()) {
        (_, false) => Err(bad(format!(
            "the transfer coding {others:?} is not decoded (only chunked is)"
        ))),
        (0, true) => Err(bad("an empty Transfer-Encoding".into())),
        (1, true) => Ok(Framing::Chunked(0)),
        _ => Err(bad(format!("chunked applied more than once: {codings:?}"))),
    }
}

/// The elements of every `name` field, comma-separated lists joined, each trimmed of optional
/// whitespace (space and tab only, RFC 9110 §5.6.3: a vertical tab, form feed or no-break space
/// stays and makes the element invalid); empty ones kept; `None` when there is no such field.
fn list(fields: &Fields, name: &str) -> Option<Vec<String>> {
    let mut values = fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .peekable();
    values.peek()?;
    Some(
        values
            .flat_map(|(_, v)| {
                String::from_utf8_lossy(v)
                    .split(',')
                    .map(|s| s.trim_matches([' ', '\t']).to_string())
                    .collect::<Vec<_>>()
            })
            .collect(),
    )
}

/// The length the Content-Length elements say: digits, all the same (`42, 42` is 42).
fn content_length_of(lengths: &[String]) -> io::Result<u64> {
    let first = lengths.first().map_or("", String::as_str);
    if lengths.iter().any(|l| l != first) {
        return Err(bad(format!(
            "conflicting content-length values {lengths:?}"
        )));
    }
    first
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| first.parse().ok())
        .flatten()
        .ok_or_else(|| bad(format!("bad content-length {first:?}")))
}

enum Framing {
    /// Bytes left.
    Length(u64),
    /// Bytes left in the current chunk (0: its size line comes next).
    Chunked(u64),
    /// Until the stream ends.
    Close,
    /// Nothing more.
    Done,
}

/// The body of a response.
pub struct Body<R> {
    reader: R,
    framing: Framing,
}

impl<R: AsyncBufRead + Unpin> Body<R> {
    /// The next piece of the body (1 to [`MAX_CHUNK`] bytes, what has arrived), `None` at its
    /// end.
    pub async fn next(&mut self) -> io::Result<Option<Vec<u8>>> {
        let want = match self.framing {
            Framing::Done => return Ok(None),
            Framing::Length(0) => {
                self.framing = Framing::Done;
                return Ok(None);
            }
            Framing::Chunked(0) => match self.chunk_size().await? {
                0 => {
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                size => {
                    self.framing = Framing::Chunked(size);
                    size
                }
            },
            Framing::Length(left) | Framing::Chunked(left) => left,
            Framing::Close => MAX_CHUNK as u64,
        };
        let piece = read_some(&mut self.reader, want.min(MAX_CHUNK as u64) as usize).await?;
        let n = piece.len() as u64;
        match &mut self.framing {
            Framing::Close if n == 0 => {
                self.framing = Framing::Done;
                return Ok(None);
            }
            Framing::Close | Framing::Done => {}
            _ if n == 0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed before the end of the body",
                ))
            }
            Framing::Length(left) => *left -= n,
            Framing::Chunked(left) => {
                *left -= n;
                if *left == 0 {
                    self.chunk_end().await?;
                }
            }
        }
        Ok(Some(piece))
    }

    /// The size of the next chunk: hex digits, then extensions after `;` (ignored).
    async fn chunk_size(&mut self) -> io::Result<u64> {
        let mut budget = MAX_CHUNK_LINE;
        let line = read_line(&mut self.reader, &mut budget, "chunk size line").await?;
        let digits_end = line
            .iter()
            .position(|b| !b.is_ascii_hexdigit())
            .unwrap_or(line.len());
        let (digits, rest) = line.split_at(digits_end);
        let rest = trim(rest);
        // Leading zeros say nothing: the digits after them must fit in 64 bits.
        let zeros = digits.iter().take_while(|&&b| b == b'0').count();
        let significant = std::str::from_utf8(&digits[zeros..]).expect("hex digits are ASCII");
        let valid =
            !digits.is_empty() && significant.len() <= 16 && (rest.is_empty() || rest[0] == b';');
        let size = valid.then(|| match significant {
            "" => 0,
            _ => u64::from_str_radix(significant, 16).expect("at most 16 hex digits"),
        });
        size.ok_or_else(|| {
            bad(format!(
                "bad chunk size line {:?}",
                String::from_utf8_lossy(&line)
            ))
        })
    }

    /// The CRLF after a chunk's data.
    async fn chunk_end(&mut self) -> io::Result<()> {
        let mut budget = 2;
        let line = read_line(&mut self.reader, &mut budget, "end of a chunk").await?;
        match line.is_empty() {
            true => Ok(()),
            false => Err(bad("a chunk is longer than its size".into())),
        }
    }
}

/// Up to `want` bytes of what the reader holds, after one read if it holds nothing (empty at
/// the end of the stream); a piece is at most the reader's buffer.
async fn read_some<R: AsyncBufRead + Unpin>(reader: &mut R, want: usize) -> io::Result<Vec<u8>> {
    let available = reader.fill_buf().await?;
    let piece = available[..available.len().min(want)].to_vec();
    reader.consume(piece.len());
    Ok(piece)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    type Parsed = (u16, Vec<(String, String)>, Vec<Vec<u8>>);

    /// The status, headers and pieces of `bytes` read as a response.
    fn parse(bytes: &[u8]) -> io::Result<Parsed> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut response = read(bytes, false).await?;
                let mut pieces = Vec::new();
                while let Some(piece) = response.body.next().await? {
                    pieces.push(piece);
                }
                Ok((response.status, response.headers, pieces))
            })
    }

    fn body(bytes: &[u8]) -> Vec<u8> {
        parse(bytes).unwrap().2.concat()
    }

    #[test]
    fn bodies_are_framed_by_length_chunks_or_the_end() {
        assert_eq!(
            body(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef"),
            b"abc"
        );
        assert_eq!(
            body(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
            b"abcde"
        );
        assert_eq!(
            body(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000000003\r\nabc\r\n0000\r\n\r\n"),
            b"abc",
            "leading zeros of a chunk size"
        );
        assert_eq!(
            body(b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabcdef"),
            b"abc",
            "one length, repeated"
        );
        assert_eq!(
            body(b"HTTP/1.1 200 OK\r\nContent-Length:\t3 ,\t3\t\r\n\r\nabcdef"),
            b"abc",
            "spaces and tabs around a length"
        );
        assert_eq!(
            body(b"HTTP/1.0 200 OK\r\n\r\nuntil the end"),
            b"until the end"
        );
        assert_eq!(
            body(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"),
            b""
        );
    }

    #[test]
    fn interim_responses_are_skipped_and_folded_lines_joined() {
        let (status, headers, pieces) = parse(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n\
              HTTP/1.1 201 Created\r\nX-A: one\r\n  two\r\nContent-Length: 2\r\n\r\nok",
        )
        .unwrap();
        assert_eq!(status, 201);
        assert_eq!(headers[0], ("X-A".to_string(), "one two".to_string()));
        assert_eq!(pieces.concat(), b"ok");
    }

    #[test]
    fn malformed_responses_are_errors() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A: a\rInjected: yes\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-A\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX A: b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n folded-first: x\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n000010000000000000000\r\n",
            // Framings RFC 9112 forbids.
            b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3,,\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length:\r\n\r\nabc",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip, chunked\r\n\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
            // Whitespace before a colon, a 101 nobody asked for, codings that are not decoded.
            b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nContent-Length\t: 2\r\n\r\nok",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nabc",
            // Whitespace that is not optional whitespace around a framing value.
            b"HTTP/1.1 200 OK\r\nContent-Length: \x0b2\x0c\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\xc2\xa0\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \x0bchunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\xc2\xa0\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn an_endless_head_is_cut_at_its_bound() {
        let endless_head = [&b"HTTP/1.1 200 OK\r\nX-A: "[..], &vec![b'a'; 1 << 20]].concat();
        assert!(parse(&endless_head)
            .unwrap_err()
            .to_string()
            .contains("too large"));
        let interims = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(5000);
        assert!(parse(&interims).is_err());
    }

    #[test]
    fn an_endless_chunk_size_line_is_cut_within_its_bound() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;";
        let offered = 16u64 << 20;
        let endless = tokio::io::repeat(b'x').take(offered);
        let mut reader = BufReader::with_capacity(1024, (&head[..]).chain(endless));
        let error = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut response = read(&mut reader, false).await?;
                response.body.next().await
            })
            .unwrap_err();
        assert!(error.to_string().contains("too large"), "{error}");
        let consumed = offered - reader.get_ref().get_ref().1.limit();
        assert!(
            consumed <= MAX_CHUNK_LINE + 1024,
            "{consumed} bytes of one chunk-size line were read"
        );
    }

    #[test]
    fn no_piece_is_larger_than_max_chunk() {
        let len = MAX_CHUNK * 2 + 10;
        let whole = [
            format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").into_bytes(),
            vec![7u8; len],
        ]
        .concat();
        let pieces = parse(&whole).unwrap().2;
        assert!(pieces.iter().all(|p| !p.is_empty() && p.len() <= MAX_CHUNK));
        assert_eq!(pieces.concat().len(), len);
    }
}
