//! The exporter's HTTP/1.1 server: std::net, a thread per connection, every resource bounded.
//!
//! - A request head (request line and headers) may be at most [`MAX_HEAD`] bytes and
//!   [`MAX_HEADERS`] header lines: a longer one is answered `431` and the connection closed,
//!   without reading more than a bounded tail of what the client still sends.
//! - A head must arrive within [`Limits::head_timeout`] of the connection opening (or of the
//!   previous response on a kept-alive connection). A connection that sent nothing is then
//!   closed; one that sent part of a head is answered `408` and closed.
//! - At most [`Limits::max_connections`] connections are open at once (by default a share of
//!   RLIMIT_NOFILE). When a new one arrives at the cap, the connection that has waited longest
//!   without a complete request is closed for it; when every open connection is busy
//!   answering, new ones wait in the listen backlog.
//! - A failing `accept` (EMFILE, ENFILE, ENOBUFS, ...) never ends the server: it closes the
//!   longest-idle connection, waits briefly (2 ms, or 50 ms when no connection was idle) and
//!   accepts again, saying so on stderr (at most every 10 s). Under a small RLIMIT_NOFILE this
//!   is how the cap is enforced: descriptors, not the count, run out first.
//! - A response must be written within [`Limits::write_timeout`].
//! - A handler that panics is answered `500`; the server goes on.
//!
//! Only GET and HEAD carry meaning for the exporter; the handler decides. Requests with a
//! body (Content-Length above 0, Transfer-Encoding) are answered and the connection closed.
//! HTTP/1.1 connections are kept alive unless the client says `Connection: close`; HTTP/1.0
//! ones only when it says `Connection: keep-alive`.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// A response of the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content-Type.
    pub content_type: &'static str,
    /// Further header lines (`Name: value`).
    pub headers: Vec<(&'static str, String)>,
    /// The body (left out for HEAD; Content-Length says its length either way).
    pub body: Vec<u8>,
}

impl Response {
    /// A response with a body of text.
    pub fn text(status: u16, content_type: &'static str, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// The server's bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Time for a request head to arrive (idle keep-alive connections included).
    pub head_timeout: Duration,
    /// Time to write one response.
    pub write_timeout: Duration,
}

impl Default for Limits {
    /// 5 s for a head, 30 s for a response, and half of [`crate::sys::fd_budget`] (at least 4,
    /// at most 512) connections.
    fn default() -> Self {
        Limits {
            max_connections: (crate::sys::fd_budget() / 2).clamp(4, 512),
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Connections open, and those waiting for a request head (by when they started waiting).
#[derive(Default)]
struct Conns {
    open: usize,
    next: u64,
    idle: BTreeMap<u64, Arc<TcpStream>>,
}

struct Shared {
    conns: Mutex<Conns>,
    freed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Conns> {
        // No code holding the lock panics; a poisoned lock still holds consistent counts.
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes the longest-idle connection (its thread sees end of file and ends). False if none.
fn evict_oldest_idle(c: &mut Conns) -> bool {
    match c.idle.pop_first() {
        Some((_, s)) => {
            let _ = s.shutdown(std::net::Shutdown::Both);
            true
        }
        None => false,
    }
}

/// What a request handler is.
pub type Handler = dyn Fn(&Request<'_>) -> Response + Send + Sync;

/// Messages at most every 10 s.
struct RateLimited(Option<Instant>, u64);

impl RateLimited {
    fn say(&mut self, what: &str) {
        self.1 += 1;
        if self
            .0
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            let more = if self.1 > 1 {
                format!(" ({} times since the previous message)", self.1)
            } else {
                String::new()
            };
            eprintln!("pagewise exporter: {what}{more}");
            self.0 = Some(Instant::now());
            self.1 = 0;
        }
    }
}

/// Serves `listener` with `handler` within `limits`, for ever: errors of `accept` and of
/// connections are survived (and said on stderr), never returned.
pub fn serve(listener: TcpListener, limits: Limits, handler: Arc<Handler>) -> ! {
    let shared = Arc::new(Shared {
        conns: Mutex::new(Conns::default()),
        freed: Condvar::new(),
    });
    let max = limits.max_connections.max(1);
    let mut accept_msg = RateLimited(None, 0);
    let mut spawn_msg = RateLimited(None, 0);
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(e) => {
                accept_failed(&e, &shared, &mut accept_msg);
                continue;
            }
        };
        // A slot: make one from the longest-idle connection, or wait for a busy one to end.
        {
            let mut c = shared.lock();
            while c.open >= max {
                evict_oldest_idle(&mut c);
                c = shared
                    .freed
                    .wait_timeout(c, Duration::from_millis(100))
                    .map_or_else(|e| e.into_inner().0, |r| r.0);
            }
            c.open += 1;
        }
        let stream = Arc::new(stream);
        let (sh, h, l) = (Arc::clone(&shared), Arc::clone(&handler), limits.clone());
        let spawned = std::thread::Builder::new()
            .name("pagewise-http".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _open = Open(&sh);
                connection(&stream, &sh, &*h, &l);
            });
        if let Err(e) = spawned {
            // The closure (and the stream) is dropped: the connection is closed.
            let mut c = shared.lock();
            c.open -= 1;
            drop(c);
            spawn_msg.say(&format!("cannot start a connection thread: {e}"));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// After `accept` failed with `e` (EMFILE, ENFILE, ENOBUFS, ENOMEM and anything else): frees
/// a descriptor if an idle connection holds one, says so (rate-limited) and backs off before
/// the caller accepts again.
fn accept_failed(e: &std::io::Error, shared: &Shared, msg: &mut RateLimited) {
    let evicted = evict_oldest_idle(&mut shared.lock());
    msg.say(&format!(
        "accept failed: {e}{}; retrying",
        if evicted {
            "; closed the longest-idle connection"
        } else {
            ""
        }
    ));
    // An evicted connection's thread closes its descriptor at once: retry soon, so that a
    // scrape queued behind idle connections is reached quickly.
    std::thread::sleep(Duration::from_millis(if evicted { 2 } else { 50 }));
}

/// Counts a connection open until dropped (also when its thread unwinds).
struct Open<'a>(&'a Shared);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        let mut c = self.0.lock();
        c.open = c.open.saturating_sub(1);
        drop(c);
        self.0.freed.notify_one();
    }
}

/// One connection: requests until it closes, errs, idles past the timeout or is evicted.
fn connection(stream: &Arc<TcpStream>, shared: &Shared, handler: &Handler, limits: &Limits) {
    let mut buf = vec![0u8; MAX_HEAD + 1];
    let mut len = 0;
    loop {
        // Waiting for a head: idle, may be evicted.
        let id = {
            let mut c = shared.lock();
            c.next += 1;
            let id = c.next;
            c.idle.insert(id, Arc::clone(stream));
            id
        };
        let deadline = Instant::now() + limits.head_timeout;
        let parsed = loop {
            match parse_head(&buf[..len]) {
                Err(HeadError::Incomplete) => {}
                other => break other.map(|(_, n)| n),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || len == buf.len() {
                break Err(HeadError::Incomplete);
            }
            let _ = stream.set_read_timeout(Some(left));
            match (&**stream).read(&mut buf[len..]) {
                Ok(0) => {
                    shared.lock().idle.remove(&id);
                    return;
                }
                Ok(n) => len += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => {
                    shared.lock().idle.remove(&id);
                    return;
                }
            }
        };
        if shared.lock().idle.remove(&id).is_none() {
            return; // evicted (shut down) meanwhile
        }
        let deadline = Instant::now() + limits.write_timeout;
        let used = match parsed {
            Ok(n) => n,
            Err(HeadError::Incomplete) if len == 0 => return, // idle: just close
            Err(e) => {
                let (status, why) = e.status();
                let detail = match e {
                    HeadError::Bad(d) => d,
                    _ => why,
                };
                let r = Response::text(status, TEXT, format!("{detail}\n"));
                let _ = write_response(stream, &r, false, false, deadline);
                linger_close(stream);
                return;
            }
        };
        let (keep, ok) = match parse_head(&buf[..len]) {
            Ok((req, _)) => {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&req)))
                    .unwrap_or_else(|_| Response::text(500, TEXT, "internal error\n"));
                let head_only = req.method == "HEAD";
                let keep = req.keep_alive;
                (
                    keep,
                    write_response(stream, &r, head_only, keep, deadline).is_ok(),
                )
            }
            Err(_) => (false, false),
        };
        if !ok {
            return;
        }
        if !keep {
            let _ = stream.shutdown(std::net::Shutdown::Write);
            linger_close(stream);
            return;
        }
        buf.copy_within(used..len, 0);
        len -= used;
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Writes `r` (its head only for HEAD) within `deadline`.
fn write_response(
    stream: &TcpStream,
    r: &Response,
    head_only: bool,
    keep_alive: bool,
    deadline: Instant,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        if keep_alive { "keep-alive" } else { "close" }
    );
    for (n, v) in &r.headers {
        head.push_str(n);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let body: &[u8] = if head_only { &[] } else { &r.body };
    for chunk in std::iter::once(head.as_bytes()).chain(body.chunks(64 << 10)) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        let mut s = stream;
        s.write_all(chunk)?;
    }
    Ok(())
}

/// Closes after an answer the client may still be sending to: stops writing (our FIN follows
/// the answer), then reads and drops at most 1 MiB for at most 1 s, so that the client reads
/// the answer before a reset for unread data can overtake it.
fn linger_close(stream: &TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let end = Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 8192];
    let mut drained = 0usize;
    while drained < 1 << 20 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match (&*stream).read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}
