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
//!   without a complete request is closed for it, and the new one is taken at once (the
//!   closed one's thread ends on its own: at most as many again are on their way out); when
//!   every open connection is busy answering, new ones wait in the listen backlog
//!   ([`BACKLOG`], so that a burst of connections is not dropped and retried a second later).
//! - A failing `accept` (EMFILE, ENFILE, ENOBUFS, ...) never ends the server: it closes the
//!   longest-idle connection, waits briefly (2 ms, or 50 ms when no connection was idle) and
//!   accepts again, saying so on stderr (at most every 10 s). Under a small RLIMIT_NOFILE this
//!   is how the cap is enforced: descriptors, not the count, run out first.
//! - A response must be written within [`Limits::write_timeout`].
//! - A handler that panics is answered `500`; the server goes on.
//!
//! A thread per connection holds at the scale an exporter sees: measured with 2,000 idle
//! connections and 200 concurrent scrapes (tests/e2e/exporter/ops.rs, 2 loaded CPUs), the cap
//! (512) keeps ~520 descriptors and threads (256 KiB stacks, mostly untouched), every scrape
//! is answered within 0.5 s and the descriptors return to their baseline within 0.2 s of the
//! idle connections closing; so idle connections are not parked in an epoll set.
//!
//! Only GET and HEAD carry meaning for the exporter; the handler decides. Requests with a
//! body (Content-Length above 0, Transfer-Encoding) are answered and the connection closed.
//! HTTP/1.1 connections are kept alive unless the client says `Connection: close`; HTTP/1.0
//! ones only when it says `Connection: keep-alive`.
//!
//! With a TLS configuration (`serve_tls`, with the `web` feature) every connection is TLS (rustls): the handshake
//! must finish within the head timeout too, and a connection that does not speak TLS is
//! closed.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use super::head::{parse_head, HeadError, Request, Version, MAX_HEAD, MAX_HEADERS};

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
        401 => "Unauthorized",
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

/// The listen backlog the server asks for (the kernel caps it at `net.core.somaxconn`).
pub const BACKLOG: i32 = 4096;

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
    /// Of `open`, those closed for newer ones whose threads have not ended yet.
    evicted: usize,
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

/// Closes the longest-idle connection (its thread sees end of file and ends, and counts
/// itself out of `evicted`). False if none.
fn evict_oldest_idle(c: &mut Conns) -> bool {
    match c.idle.pop_first() {
        Some((_, s)) => {
            let _ = s.shutdown(std::net::Shutdown::Both);
            c.evicted += 1;
            true
        }
        None => false,
    }
}

/// A connection thread's end: whether it was evicted (no longer in the idle map), counted
/// out of `evicted` if so.
fn leave_idle(shared: &Shared, id: u64) -> bool {
    let mut c = shared.lock();
    let evicted = c.idle.remove(&id).is_none();
    if evicted {
        c.evicted = c.evicted.saturating_sub(1);
    }
    evicted
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
    serve_with(listener, limits, None, handler)
}

/// [`serve`], over TLS when `tls` is given.
#[cfg(feature = "web")]
pub fn serve_tls(
    listener: TcpListener,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: Arc<Handler>,
) -> ! {
    serve_with(listener, limits, tls, handler)
}

/// A TLS server configuration (none can exist without the `web` feature).
#[cfg(feature = "web")]
type TlsConfig = Arc<rustls::ServerConfig>;
#[cfg(not(feature = "web"))]
type TlsConfig = std::convert::Infallible;

/// A new connection's I/O: TLS over `stream` with `cfg` (None if rustls refuses).
#[cfg(feature = "web")]
fn tls_io(cfg: TlsConfig, stream: &TcpStream) -> Option<Io<'_>> {
    let c = rustls::ServerConnection::new(cfg).ok()?;
    Some(Io::Tls(Box::new(rustls::StreamOwned::new(c, stream))))
}
#[cfg(not(feature = "web"))]
fn tls_io(cfg: TlsConfig, _: &TcpStream) -> Option<Io<'_>> {
    match cfg {}
}

fn serve_with(
    listener: TcpListener,
    limits: Limits,
    tls: Option<TlsConfig>,
    handler: Arc<Handler>,
) -> ! {
    let shared = Arc::new(Shared {
        conns: Mutex::new(Conns::default()),
        freed: Condvar::new(),
    });
    let max = limits.max_connections.max(1);
    {
        use std::os::fd::AsFd;
        // Best effort: std's 128 stays if the kernel refuses.
        let _ = crate::sys::listen_backlog(listener.as_fd(), BACKLOG);
    }
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
        // A slot: make one from the longest-idle connection (taken at once while at most `max`
        // are on their way out), or wait for a busy one to end.
        {
            let mut c = shared.lock();
            while c.open - c.evicted.min(c.open) >= max || c.open >= 2 * max {
                if evict_oldest_idle(&mut c) && c.open < 2 * max {
                    continue;
                }
                c = shared
                    .freed
                    .wait_timeout(c, Duration::from_millis(100))
                    .map_or_else(|e| e.into_inner().0, |r| r.0);
            }
            c.open += 1;
        }
        let stream = Arc::new(stream);
        let (sh, h, l) = (Arc::clone(&shared), Arc::clone(&handler), limits.clone());
        #[allow(clippy::clone_on_copy)] // Option<Infallible> without the `web` feature
        let tls = tls.clone();
        let spawned = std::thread::Builder::new()
            .name("pagewise-http".into())
            // rustls's handshake (ring) wants more stack than plain HTTP.
            .stack_size(if tls.is_some() { 1 << 20 } else { 256 << 10 })
            .spawn(move || {
                let _open = Open(&sh);
                let mut io = match tls {
                    None => Io::Plain(&stream),
                    Some(cfg) => match tls_io(cfg, &stream) {
                        Some(io) => io,
                        None => return,
                    },
                };
                // The handshake writes while the head is awaited.
                let _ = stream.set_write_timeout(Some(l.head_timeout));
                connection(&mut io, &stream, &sh, &*h, &l);
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

/// A connection's bytes: plain TCP, or TLS over it.
enum Io<'a> {
    Plain(&'a TcpStream),
    #[cfg(feature = "web")]
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, &'a TcpStream>>),
}

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Io::Plain(s) => s.read(buf),
            #[cfg(feature = "web")]
            Io::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Io::Plain(s) => s.write(buf),
            #[cfg(feature = "web")]
            Io::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Io::Plain(s) => s.flush(),
            #[cfg(feature = "web")]
            Io::Tls(t) => t.flush(),
        }
    }
}

/// One connection: requests until it closes, errs, idles past the timeout or is evicted.
fn connection(
    io: &mut Io<'_>,
    stream: &Arc<TcpStream>,
    shared: &Shared,
    handler: &Handler,
    limits: &Limits,
) {
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
            match io.read(&mut buf[len..]) {
                Ok(0) => {
                    leave_idle(shared, id);
                    return;
                }
                Ok(n) => len += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => {
                    leave_idle(shared, id);
                    return;
                }
            }
        };
        if leave_idle(shared, id) {
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
                let _ = write_response(io, stream, &r, false, false, deadline);
                linger_close(io, stream);
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
                    write_response(io, stream, &r, head_only, keep, deadline).is_ok(),
                )
            }
            Err(_) => (false, false),
        };
        if !ok {
            return;
        }
        if !keep {
            linger_close(io, stream);
            return;
        }
        buf.copy_within(used..len, 0);
        len -= used;
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Writes `r` (its head only for HEAD) to `io` over `stream` within `deadline`.
fn write_response(
    io: &mut Io<'_>,
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
        io.write_all(chunk)?;
    }
    io.flush()
}

/// Closes after an answer the client may still be sending to: stops writing (our FIN follows
/// the answer; over TLS a close_notify first), then reads and drops at most 1 MiB for at most
/// 1 s, so that the client reads the answer before a reset for unread data can overtake it.
fn linger_close(io: &mut Io<'_>, stream: &TcpStream) {
    #[cfg(feature = "web")]
    if let Io::Tls(t) = io {
        t.conn.send_close_notify();
        let _ = t.flush();
    }
    #[cfg(not(feature = "web"))]
    let _ = io;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let end = Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 8192];
    let mut drained = 0usize;
    while drained < 1 << 20 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        let mut s = stream;
        match s.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}
