//! The request head of the exporter's HTTP server: the request line and headers parsed from
//! at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] lines, each refusal with the status to answer.

/// Largest request head (request line and headers, with their line ends) in bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most header lines in a request.
pub const MAX_HEADERS: usize = 100;

/// HTTP version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0
    Http10,
    /// HTTP/1.1
    Http11,
}

/// A parsed request head (it borrows the bytes it was parsed from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The method, as sent (methods are case-sensitive).
    pub method: &'a str,
    /// The request target, as sent.
    pub target: &'a str,
    /// The target's path: without query, and for an absolute URI without scheme and host.
    pub path: &'a str,
    /// The version.
    pub version: Version,
    /// Header lines in order: name as sent, value without surrounding blanks.
    pub headers: Vec<(&'a str, &'a [u8])>,
    /// Whether the connection may stay open after the response.
    pub keep_alive: bool,
    /// The request announces a body (Content-Length above 0, or Transfer-Encoding).
    pub has_body: bool,
}

impl Request<'_> {
    /// The value of the first header named `name` (case-insensitive), if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// Why a request head is not (yet) a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// No end of head yet (and fewer than [`MAX_HEAD`] bytes): read more.
    Incomplete,
    /// Longer than [`MAX_HEAD`] bytes or more than [`MAX_HEADERS`] headers: `431`.
    TooLarge,
    /// Malformed: `400`, with the reason.
    Bad(&'static str),
    /// An HTTP version other than 1.0 and 1.1: `505`.
    Version,
}

impl HeadError {
    /// Status code and reason phrase of the answer to this error.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            HeadError::Incomplete => (408, "Request Timeout"),
            HeadError::TooLarge => (431, "Request Header Fields Too Large"),
            HeadError::Bad(_) => (400, "Bad Request"),
            HeadError::Version => (505, "HTTP Version Not Supported"),
        }
    }
}

/// The reason the answer gives: what is malformed ([`HeadError::Bad`]), else the reason phrase.
impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HeadError::Bad(d) => d,
            other => other.status().1,
        })
    }
}
impl std::error::Error for HeadError {}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn token(b: &[u8]) -> Option<&str> {
    if !b.is_empty() && b.iter().all(|&c| is_tchar(c)) {
        std::str::from_utf8(b).ok()
    } else {
        None
    }
}

/// Where the head in `buf` ends (the index after its blank line), if it does.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + off;
        // The blank line: "\n\n" or "\n\r\n".
        match buf.get(nl + 1..) {
            Some([b'\n', ..]) => return Some(nl + 2),
            Some([b'\r', b'\n', ..]) => return Some(nl + 3),
            _ => {}
        }
        i = nl + 1;
    }
    None
}

/// Parses the request head at the start of `buf`: the request and the bytes it took, or why
/// not. Leading blank lines are skipped (RFC 9112 2.2). Never reads past [`MAX_HEAD`] bytes.
pub fn parse_head(buf: &[u8]) -> Result<(Request<'_>, usize), HeadError> {
    let (start, end) = head_span(buf)?;
    let mut lines = buf[start..end].split(|&b| b == b'\n').map(|l| match l {
        [rest @ .., b'\r'] => rest,
        l => l,
    });
    let (method, target, version) = request_line(lines.next().unwrap_or_default())?;
    let path = target_path(target)?;
    let h = header_lines(lines)?;
    if h.chunked && h.length.is_some() {
        return Err(HeadError::Bad("both Transfer-Encoding and Content-Length"));
    }
    let has_body = h.chunked || h.length.unwrap_or(0) > 0;
    let keep_alive = !has_body
        && !h.close
        && match version {
            Version::Http11 => true,
            Version::Http10 => h.keep,
        };
    Ok((
        Request {
            method,
            target,
            path,
            version,
            headers: h.headers,
            keep_alive,
            has_body,
        },
        end,
    ))
}

/// Where the head in `buf` starts (after leading blank lines) and ends (after its blank
/// line), within [`MAX_HEAD`] bytes.
fn head_span(buf: &[u8]) -> Result<(usize, usize), HeadError> {
    let mut start = 0;
    loop {
        match &buf[start.min(buf.len())..] {
            [b'\r', b'\n', ..] => start += 2,
            [b'\n', ..] => start += 1,
            _ => break,
        }
        if start > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
    let window = &buf[..buf.len().min(MAX_HEAD + 1)];
    match head_end(&window[start..]) {
        Some(e) if start + e <= MAX_HEAD => Ok((start, start + e)),
        Some(_) => Err(HeadError::TooLarge),
        None if window.len() > MAX_HEAD => Err(HeadError::TooLarge),
        None => Err(HeadError::Incomplete),
    }
}

/// The request line `METHOD TARGET VERSION`: method, target and version.
fn request_line(line: &[u8]) -> Result<(&str, &str, Version), HeadError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(m), Some(t), Some(v), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Bad("request line is not METHOD TARGET VERSION"));
    };
    let method = token(m).ok_or(HeadError::Bad("bad method"))?;
    if t.is_empty() || !t.iter().all(|&c| (0x21..0x7f).contains(&c)) {
        return Err(HeadError::Bad("bad request target"));
    }
    let target = std::str::from_utf8(t).map_err(|_| HeadError::Bad("bad request target"))?;
    let version = match v {
        b"HTTP/1.1" => Version::Http11,
        b"HTTP/1.0" => Version::Http10,
        [b'H', b'T', b'T', b'P', b'/', a, b'.', b] if a.is_ascii_digit() && b.is_ascii_digit() => {
            return Err(HeadError::Version)
        }
        _ => return Err(HeadError::Bad("bad HTTP version")),
    };
    Ok((method, target, version))
}

/// The target's path: without query or fragment; for an absolute URI (http or https) without
/// scheme and host; `*` as it is.
fn target_path(target: &str) -> Result<&str, HeadError> {
    let no_query = target.split(['?', '#']).next().unwrap_or_default();
    if no_query.starts_with('/') {
        Ok(no_query)
    } else if let Some((scheme, rest)) = no_query.split_once("://") {
        if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
            return Err(HeadError::Bad("bad request target"));
        }
        Ok(rest.find('/').map_or("/", |i| &rest[i..]))
    } else if target == "*" {
        Ok("*")
    } else {
        Err(HeadError::Bad("bad request target"))
    }
}

/// The header lines of a head, and what the connection and the body depend on.
#[derive(Default)]
struct Headers<'a> {
    headers: Vec<(&'a str, &'a [u8])>,
    /// `Connection: close`, `Connection: keep-alive`.
    close: bool,
    keep: bool,
    /// `Content-Length` (all of its values equal), `Transfer-Encoding` present.
    length: Option<u64>,
    chunked: bool,
}

/// Reads the header lines up to the blank line (at most [`MAX_HEADERS`]).
fn header_lines<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Result<Headers<'a>, HeadError> {
    let mut h = Headers::default();
    for line in lines {
        if line.is_empty() {
            break;
        }
        if h.headers.len() >= MAX_HEADERS {
            return Err(HeadError::TooLarge);
        }
        if matches!(line[0], b' ' | b'\t') {
            return Err(HeadError::Bad("folded header line"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::Bad("header line without a colon"))?;
        let name = token(&line[..colon]).ok_or(HeadError::Bad("bad header name"))?;
        let value = line[colon + 1..].trim_ascii();
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(HeadError::Bad("control character in a header value"));
        }
        if name.eq_ignore_ascii_case("connection") {
            for opt in value.split(|&b| b == b',') {
                let opt = opt.trim_ascii();
                h.close |= opt.eq_ignore_ascii_case(b"close");
                h.keep |= opt.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            h.length = content_length(value, h.length)?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            h.chunked = true;
        }
        h.headers.push((name, value));
    }
    Ok(h)
}

/// A `Content-Length` value (a list of equal numbers) over the one seen before, if any.
fn content_length(value: &[u8], mut length: Option<u64>) -> Result<Option<u64>, HeadError> {
    for n in value.split(|&b| b == b',') {
        let n = n.trim_ascii();
        let n: u64 = std::str::from_utf8(n)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or(HeadError::Bad("bad Content-Length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(HeadError::Bad("conflicting Content-Length"));
        }
        length = Some(n);
    }
    Ok(length)
}
