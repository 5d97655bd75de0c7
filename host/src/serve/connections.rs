//! The HTTP service's accept loop: a cap on open connections, a deadline
//! for each request's head, an idle timeout, and graceful shutdown.
//!
//! axum's own `serve` has none of the first three, so a client that opens
//! connections and sends nothing (or half a header) could hold them open
//! for ever, until the process runs out of file descriptors. Here:
//!
//! - At most `max_connections` are open at once. A connection accepted
//!   beyond that is closed at once (and counted), never queued.
//! - A request's head (request line and headers) must arrive in full within
//!   `header_read_timeout` of its first byte, however slowly it trickles in.
//! - A connection with no request in progress on which nothing is read or
//!   written for `idle_timeout` is closed: a connection that never sends
//!   anything, a kept-alive one between requests, a client that stops
//!   reading its answer.
//! - While a request is being handled (its body read, its guards run) the
//!   request timeout applies instead.
//!
//! Connections speak HTTP/1.1 with keep-alive (hyper). Every refusal is
//! answered, never a silent close:
//!
//! - A request hyper cannot parse gets hyper's own status — 400 (a garbage
//!   request line or header), 414 (a target over 65,534 bytes) or 431 (a
//!   head over ~400 KiB or 100 fields) — which hyper sends with no body;
//!   here it gets the service's one-line JSON body `{"error": "..."}`
//!   saying what was wrong, and `Connection: close`.
//! - A connection that opens with HTTP/2's preface (prior knowledge, as
//!   `curl --http2-prior-knowledge` sends) gets HTTP/2's own refusal: an
//!   empty SETTINGS frame and a GOAWAY with `HTTP_1_1_REQUIRED`, whose
//!   debug data says to use HTTP/1.1; then the connection is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::serve::metrics::Metrics;

/// Connection limits of [`serve_connections`].
#[derive(Clone, Debug)]
pub(crate) struct ConnectionLimits {
    pub(crate) max_connections: usize,
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
}

/// No timestamp recorded (no request head in progress).
const NONE: u64 = u64::MAX;

/// What one connection is doing, shared by its I/O, its service and its
/// watchdog. Times are milliseconds since the connection was accepted.
struct ConnState {
    opened: Instant,
    /// Last time a byte was read or written.
    last_io: AtomicU64,
    /// When the first byte of a request head arrived, or [`NONE`].
    head_started: AtomicU64,
    /// Requests being handled (their handler has not finished).
    in_flight: AtomicUsize,
    /// Wakes the watchdog when a request head begins (its deadline is
    /// usually earlier than the idle one it is sleeping towards).
    head_begun: Notify,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            opened: Instant::now(),
            last_io: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            in_flight: AtomicUsize::new(0),
            head_begun: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, millis: u64) -> Instant {
        self.opened + Duration::from_millis(millis)
    }

    fn read(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            // The first byte of a new request head (or of a body nobody
            // is reading any more; the head deadline bounds it as well).
            if self
                .head_started
                .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.head_begun.notify_one();
            }
        }
    }

    fn wrote(&self, bytes: usize) {
        if bytes > 0 {
            self.last_io.store(self.now(), Ordering::Relaxed);
        }
    }

    /// When the watchdog must look again, and whether the connection has
    /// already overrun a limit (and which).
    fn check(&self, limits: &ConnectionLimits) -> Result<Instant, Expired> {
        let now = Instant::now();
        if self.in_flight.load(Ordering::Acquire) > 0 {
            // The request timeout governs a request being handled.
            return Ok(now + limits.idle_timeout);
        }
        let head = self.head_started.load(Ordering::Acquire);
        if head != NONE {
            let deadline = self.at(head) + limits.header_read_timeout;
            if now >= deadline {
                return Err(Expired::Header);
            }
            let idle = self.at(self.last_io.load(Ordering::Relaxed)) + limits.idle_timeout;
            if now >= idle {
                return Err(Expired::Idle);
            }
            return Ok(deadline.min(idle));
        }
        let idle = self.at(self.last_io.load(Ordering::Relaxed)) + limits.idle_timeout;
        if now >= idle {
            return Err(Expired::Idle);
        }
        Ok(idle)
    }
}

/// Why the watchdog closed a connection.
#[derive(Clone, Copy, Debug)]
enum Expired {
    Header,
    Idle,
}

impl Expired {
    fn as_str(self) -> &'static str {
        match self {
            Expired::Header => "header",
            Expired::Idle => "idle",
        }
    }
}

/// Marks a request in flight from its head's arrival until its handler
/// finishes (or is dropped).
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn enter(state: &Arc<ConnState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        // The head is complete: the head deadline no longer applies.
        state.head_started.store(NONE, Ordering::Release);
        InFlight(Arc::clone(state))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // The answer is about to be written: idle time counts from now.
        self.0.last_io.store(self.0.now(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A TCP stream that reports its reads and writes to its [`ConnState`],
/// and puts a body into hyper's bodiless answers to requests it cannot
/// parse ([`explain`]).
struct Tracked {
    stream: TcpStream,
    state: Arc<ConnState>,
    /// An answer of [`explain`]'s written in place of hyper's, and how
    /// much of it is sent.
    explained: Option<(Vec<u8>, usize)>,
}

impl Tracked {
    /// Sends what is left of an explained answer; ready once all is sent.
    fn poll_explained(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((answer, sent)) = &mut self.explained {
            let Some(rest) = answer.get(*sent..).filter(|r| !r.is_empty()) else {
                self.explained = None;
                break;
            };
            let n = std::task::ready!(Pin::new(&mut self.stream).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
            self.state.wrote(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `head` in full if it is an answer [`explain`] rewrites: the
    /// rewritten one goes out instead (now, or on the next write or flush).
    fn poll_explain(
        &mut self,
        cx: &mut Context<'_>,
        head: &[u8],
    ) -> Option<Poll<io::Result<usize>>> {
        let answer = explain(head)?;
        self.explained = Some((answer, 0));
        Some(match self.poll_explained(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(head.len())),
        })
    }
}

/// hyper's answer to a request it cannot parse — exactly a status line of
/// 400, 414 or 431 and headers with `content-length: 0`, which the router
/// never writes (its errors always have a body) — rewritten with a
/// one-line JSON body that says what was wrong, and `connection: close`
/// (hyper closes the connection after it). `None` for anything else.
fn explain(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let (status_line, rest) = text.split_once("\r\n")?;
    let message = match status_line {
        "HTTP/1.1 400 Bad Request" => {
            "malformed request: the request line or a header is not valid HTTP/1.1"
        }
        "HTTP/1.1 414 URI Too Long" => "request target too long: at most 65534 bytes",
        "HTTP/1.1 431 Request Header Fields Too Large" => {
            "request head too large: at most 100 header fields and about 400 KiB"
        }
        _ => return None,
    };
    let headers = rest.strip_suffix("\r\n\r\n")?;
    let mut bodiless = false;
    let mut kept = String::new();
    for line in headers.split("\r\n") {
        if line.eq_ignore_ascii_case("content-length: 0") {
            bodiless = true;
        } else if !line.is_empty() {
            kept.push_str(line);
            kept.push_str("\r\n");
        }
    }
    if !bodiless {
        return None;
    }
    let body = serde_json::json!({ "error": message }).to_string();
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n{kept}\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            this.state.read(buf.filled().len().saturating_sub(before));
        }
        poll
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_explained(cx))?;
        if let Some(taken) = this.poll_explain(cx, data) {
            return taken;
        }
        let poll = Pin::new(&mut this.stream).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &poll {
            this.state.wrote(*n);
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_explained(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && let Some(taken) = this.poll_explain(cx, first)
        {
            return taken;
        }
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &poll {
            this.state.wrote(*n);
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_explained(cx))?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_explained(cx))?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Accepts connections on `listener` and serves `router` on each, within
/// `limits`, until `shutdown` completes; then stops accepting, lets every
/// connection finish the request it is handling, and returns once all are
/// closed.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Option<Arc<Metrics>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let slots = Arc::new(Semaphore::new(max as usize));
    let (stop_tx, stop_rx) = watch::channel(false);
    let limits = Arc::new(limits);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors (or a similar resource error):
                // back off briefly rather than spin.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the cap: closed at once, never queued.
            if let Some(m) = &metrics {
                m.record_connection_refused();
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let limits = Arc::clone(&limits);
        let metrics = metrics.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            if let Some(m) = &metrics {
                m.connection_opened();
            }
            let expired = serve_one(stream, router, &limits, stop).await;
            if let Some(m) = &metrics {
                m.connection_closed(expired.map(Expired::as_str));
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it closes.
    let _all = slots.acquire_many(max).await;
    Ok(())
}

/// Serves one connection until it closes, a limit expires (returned), or
/// shutdown is signalled (then the request in flight is finished first).
async fn serve_one(
    stream: TcpStream,
    router: Router,
    limits: &ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) -> Option<Expired> {
    match opens_with_h2(&stream, limits, &mut stop).await {
        Ok(false) => {}
        Ok(true) => {
            tokio::select! {
                () = refuse_h2(stream, limits.idle_timeout) => {}
                _ = stop.changed() => {}
            }
            return None;
        }
        Err(closed) => return closed,
    }
    let state = Arc::new(ConnState::new());
    let io = TokioIo::new(Tracked {
        stream,
        state: Arc::clone(&state),
        explained: None,
    });
    let service_state = Arc::clone(&state);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_flight = InFlight::enter(&service_state);
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await;
            drop(in_flight);
            response
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let wake = match state.check(limits) {
            Ok(at) => at,
            Err(expired) => {
                tracing::debug!("closing a connection: {} timeout", expired.as_str());
                return Some(expired);
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
                return None;
            }
            () = tokio::time::sleep_until(wake) => {}
            () = state.head_begun.notified() => {}
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The start of HTTP/2's client preface (RFC 9113 §3.4): no HTTP/1.1
/// request this service answers starts so (its method would be `PRI`).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Whether the connection opens with HTTP/2's preface, by its first bytes
/// (peeked, so hyper still reads them all otherwise). `Err`: the
/// connection is to be closed before a byte came — by the peer
/// (`Err(None)`), the idle timeout (`Err(Some(Idle))`) or shutdown.
async fn opens_with_h2(
    stream: &TcpStream,
    limits: &ConnectionLimits,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, Option<Expired>> {
    if *stop.borrow() {
        return Err(None);
    }
    let mut first = [0u8; H2_PREFACE.len()];
    let peeked = tokio::select! {
        peeked = tokio::time::timeout(limits.idle_timeout, stream.peek(&mut first)) => peeked,
        _ = stop.changed() => return Err(None),
    };
    match peeked {
        Err(_) => Err(Some(Expired::Idle)),
        Ok(Err(_) | Ok(0)) => Err(None),
        // Four bytes (`PRI `) tell it from any request served here.
        Ok(Ok(n)) => Ok(n >= 4 && first.get(..n) == H2_PREFACE.get(..n)),
    }
}

/// HTTP/2's refusal of an HTTP/2 connection: an empty SETTINGS frame (the
/// server's preface) and a GOAWAY with error `HTTP_1_1_REQUIRED` (0xd)
/// whose debug data says why; then the write side is closed and what the
/// client sent is read and dropped (at most 64 KiB, within `idle`), so the
/// close does not reset the connection before the client reads it.
async fn refuse_h2(mut stream: TcpStream, idle: Duration) {
    const SETTINGS: [u8; 9] = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    const REASON: &[u8] = b"toolgate serves HTTP/1.1 only: send HTTP/1.1 requests";
    const HTTP_1_1_REQUIRED: u32 = 0xd;
    let payload = 8 + REASON.len();
    let mut frames = SETTINGS.to_vec();
    frames.extend_from_slice(&u32::try_from(payload).unwrap_or(0).to_be_bytes()[1..]);
    frames.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]);
    frames.extend_from_slice(&0u32.to_be_bytes());
    frames.extend_from_slice(&HTTP_1_1_REQUIRED.to_be_bytes());
    frames.extend_from_slice(REASON);
    tracing::debug!("refusing an HTTP/2 connection (GOAWAY HTTP_1_1_REQUIRED)");
    let _ = tokio::time::timeout(idle, async {
        stream.write_all(&frames).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 1 << 16 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        io::Result::Ok(())
    })
    .await;
}
