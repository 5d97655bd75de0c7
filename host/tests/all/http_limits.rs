//! The HTTP service under abuse: idle and slow connections are bounded in
//! number and time, POSTs must be JSON, and requests cut by the request
//! timeout are counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate::Metrics;
use toolgate::Registry;
use toolgate::server::{self, ServerConfig};
use toolgate_tests::SQL_GUARD;

/// A server on a free loopback port, serving one SQL guard with `config`,
/// whose metrics the test can read directly (without a connection slot).
struct Server {
    addr: String,
    metrics: Arc<Metrics>,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Server {
    async fn start(config: ServerConfig) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(SQL_GUARD, dir.path().join("10-sql-guard.wasm")).expect("copy");
        let registry = Registry::open(super::engine(), dir.path())
            .await
            .expect("registry");
        let metrics = Arc::new(Metrics::new());
        let router = server::router(Arc::new(registry), Arc::clone(&metrics), config.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let m = Arc::clone(&metrics);
        let task = tokio::spawn(async move {
            server::serve_with(listener, router, &config, Some(m), async move {
                let _ = stopped.await;
            })
            .await
        });
        Server {
            addr,
            metrics,
            client: reqwest::Client::new(),
            _dir: dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn series(&self, name_and_labels: &str) -> Option<f64> {
        let text = self.metrics.encode();
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name_and_labels)?;
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
    }

    async fn steer(&self, content_type: Option<&str>) -> (StatusCode, Value) {
        let body = json!({"event": {"run_id": "r", "tool_name": "run_query", "call_id": "c",
            "args": {"sql": "DELETE FROM t"}}});
        let mut request = self
            .client
            .post(self.url("/v1/steering"))
            .body(body.to_string());
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        (status, response.json().await.expect("JSON body"))
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("server stops")
                .expect("server task")
                .expect("server ran");
        }
    }
}

/// Reads from `stream` until the server closes it (EOF or a reset), for at
/// most `within`; returns how long that took, or `None` if it stayed open.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 512];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

/// Sends `GET /healthz` on `stream` (kept alive) and reads until a `200`
/// status line arrives (true) or the stream closes (false).
async fn answers_health(stream: &mut TcpStream) -> bool {
    let request = b"GET /healthz HTTP/1.1\r\nhost: toolgate\r\n\r\n";
    if stream.write_all(request).await.is_err() {
        return false;
    }
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&seen);
            if text.contains("HTTP/1.1 200") && text.contains("\r\n\r\n") {
                return true;
            }
        }
    })
    .await;
    read.unwrap_or(false)
}

fn steer_where() -> Value {
    json!({"action": "skip", "content": "Add a WHERE clause before running this query.", "is_error": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_must_be_json() {
    let s = Server::start(ServerConfig::default()).await;
    for refused in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
        None,
    ] {
        let (status, body) = s.steer(refused).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{refused:?}");
        assert!(
            body["error"]
                .as_str()
                .expect("error")
                .contains("application/json"),
            "{refused:?}: {body}"
        );
    }
    // A reload is a POST too: a cross-site text/plain one does nothing.
    let reload = s
        .client
        .post(s.url("/v1/reload"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .expect("request");
    assert_eq!(reload.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let health: Value = s
        .client
        .get(s.url("/healthz"))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    assert_eq!(health["generation"], json!(1), "{health}");
    for accepted in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
    ] {
        let (status, body) = s.steer(Some(accepted)).await;
        assert_eq!(status, StatusCode::OK, "{accepted}: {body}");
        assert_eq!(body, steer_where());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_is_bounded_in_count_and_time() {
    const CAP: usize = 8;
    let s = Server::start(ServerConfig {
        max_connections: CAP,
        header_read_timeout: Duration::from_millis(1500),
        idle_timeout: Duration::from_millis(1500),
        ..ServerConfig::default()
    })
    .await;
    // Twice the cap: half say nothing at all, half send half a header.
    let mut flood = Vec::new();
    for i in 0..2 * CAP {
        let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
        if i % 2 == 1 {
            stream
                .write_all(b"POST /v1/steering HTTP/1.1\r\nhost: x\r\ncontent-")
                .await
                .expect("write");
        }
        flood.push(stream);
    }
    // Give the server a moment to accept them all, then check the count.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let refused = s
            .series("toolgate_http_connections_refused_total")
            .unwrap_or(0.0);
        if refused >= CAP as f64 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open = s.series("toolgate_http_connections_open").unwrap_or(-1.0);
    assert!(open <= CAP as f64, "{open} connections open, cap {CAP}");
    assert_eq!(
        s.series("toolgate_http_connections_refused_total"),
        Some(CAP as f64),
        "the connections beyond the cap are refused"
    );
    // A client that keeps trying gets through once the idle ones are cut,
    // while the flood's sockets are all still held open by their client.
    let started = Instant::now();
    let answered = loop {
        let attempt = s
            .client
            .post(s.url("/v1/steering"))
            .header("content-type", "application/json")
            .body(
                json!({"event": {"run_id": "r", "tool_name": "run_query", "call_id": "c",
                    "args": {"sql": "DELETE FROM t"}}})
                .to_string(),
            )
            .send()
            .await;
        if let Ok(response) = attempt {
            break response.json::<Value>().await.expect("JSON");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no request got through in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answered, steer_where());
    // Every flood connection is closed by the server (refused, or cut by a
    // timeout), well within a generous bound.
    for (i, stream) in flood.iter_mut().enumerate() {
        assert!(
            closed_within(stream, Duration::from_secs(20))
                .await
                .is_some(),
            "flood connection {i} still open"
        );
    }
    let timed_out = s
        .series("toolgate_http_connections_timed_out_total{reason=\"idle\"}")
        .unwrap_or(0.0)
        + s.series("toolgate_http_connections_timed_out_total{reason=\"header\"}")
            .unwrap_or(0.0);
    assert!(timed_out >= CAP as f64, "{}", s.metrics.encode());
    // And after the flood, the service answers as usual.
    let (status, body) = s.steer(Some("application/json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_trickled_byte_by_byte_is_cut_by_the_header_timeout() {
    let s = Server::start(ServerConfig {
        header_read_timeout: Duration::from_millis(1000),
        idle_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
    // One byte every 100 ms: the connection is never idle, and the whole
    // head would take 20 s.
    let head = format!(
        "GET /healthz HTTP/1.1\r\nx-pad: {}\r\n\r\n",
        "a".repeat(160)
    );
    let mut sent = 0;
    let mut cut = false;
    for byte in head.as_bytes() {
        sent += 1;
        if stream.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => {
                cut = true;
                break;
            }
            Ok(Ok(n)) => panic!(
                "answered a head that never finished: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(_) => {}
        }
    }
    // Cut before its head was whole (counted in bytes, not time).
    assert!(cut, "the trickle was never cut");
    assert!(sent < head.len(), "cut only after all {sent} bytes");
    assert!(
        s.series("toolgate_http_connections_timed_out_total{reason=\"header\"}")
            .is_some_and(|n| n >= 1.0),
        "{}",
        s.metrics.encode()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_serves_several_requests_then_idles_out() {
    let s = Server::start(ServerConfig {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_millis(800),
        ..ServerConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
    for _ in 0..3 {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.ends_with(b"}") {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("answered")
                .expect("read");
            assert!(n > 0, "closed early");
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        // Shorter than the idle timeout: the connection stays.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        closed_within(&mut stream, Duration::from_secs(15))
            .await
            .is_some(),
        "an idle kept-alive connection is closed"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_by_the_request_timeout_is_counted() {
    let s = Server::start(ServerConfig {
        request_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    // Promise a body, send part of it, go quiet: the handler waits on it
    // until the request timeout cuts it.
    let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
    stream
        .write_all(
            b"POST /v1/steering HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"event\":",
        )
        .await
        .expect("write");
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while !answer.windows(9).any(|w| w == b"timed out") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(answer.starts_with(b"HTTP/1.1 503"));
    assert_eq!(
        s.series("toolgate_http_request_timeouts_total{endpoint=\"/v1/steering\"}"),
        Some(1.0),
        "{}",
        s.metrics.encode()
    );
    assert_eq!(
        s.series("toolgate_decisions_total{seam=\"steering\",verdict=\"timeout\"}"),
        Some(1.0),
        "{}",
        s.metrics.encode()
    );
    s.stop().await;
}

/// The connection flags of `toolgate serve` reach the server.
#[test]
fn the_binary_takes_connection_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("10-sql-guard.wasm")).expect("copy");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--plugins", &dir.path().display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--max-connections", "0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-connections"));

    let (mut child, addr, _) = super::server::spawn_serve(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-cache",
            "--max-connections",
            "2",
            // No timeout could cut a connection within this test: whatever
            // closes one is the cap.
            "--idle-timeout-ms",
            "600000",
            "--header-timeout-ms",
            "600000",
        ],
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // Two connections, each answered: both are being served.
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            assert!(answers_health(&mut stream).await, "within the cap");
            held.push(stream);
        }
        // The third is over the cap: closed without an answer.
        let mut third = TcpStream::connect(&addr).await.expect("connect");
        assert!(
            closed_within(&mut third, Duration::from_secs(60))
                .await
                .is_some(),
            "the connection over the cap is closed"
        );
        // ... and the two within it are still served.
        for stream in &mut held {
            assert!(answers_health(stream).await, "still served");
        }
    });
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads one answer from `stream`: its status line, its headers and its
/// body (by `content-length`), waiting for it at most `within`.
async fn read_answer(stream: &mut TcpStream, within: Duration) -> (String, Vec<String>, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(within, async {
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).into_owned();
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    return (head, got[end + 4..end + 4 + length].to_vec());
                }
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    panic!(
                        "closed before a whole answer: {:?}",
                        String::from_utf8_lossy(&got)
                    )
                }
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("answered");
    let (head, body) = read;
    let mut lines = head.split("\r\n").map(str::to_string);
    let status = lines.next().unwrap_or_default();
    (status, lines.collect(), body)
}

/// A `Content-Length` over the body limit is answered 413 while the body
/// is still unsent (and never will be), and the connection is closed; the
/// request timeout is far away and never what answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_limit_content_length_is_answered_413_without_its_body() {
    let s = Server::start(ServerConfig {
        max_body_bytes: 1 << 20,
        request_timeout: Duration::from_secs(120),
        idle_timeout: Duration::from_secs(120),
        ..ServerConfig::default()
    })
    .await;
    for length in ["2000000", "10000000000"] {
        let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
        stream
            .write_all(
                format!(
                    "POST /v1/steering HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                     content-length: {length}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .expect("write");
        // Generous: the request timeout (120 s) is the only other answer.
        let (status, _, body) = read_answer(&mut stream, Duration::from_secs(100)).await;
        assert_eq!(status, "HTTP/1.1 413 Payload Too Large", "{length}");
        let body: Value = serde_json::from_slice(&body).expect("JSON body");
        let error = body["error"].as_str().expect("error");
        assert!(error.contains("1048576 bytes"), "{error}");
        assert!(
            closed_within(&mut stream, Duration::from_secs(100))
                .await
                .is_some(),
            "the connection is closed (the body is never read)"
        );
    }
    assert_eq!(
        s.series("toolgate_http_request_timeouts_total{endpoint=\"/v1/steering\"}"),
        None,
        "{}",
        s.metrics.encode()
    );
    // The service answers as usual after.
    let (status, body) = s.steer(Some("application/json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    s.stop().await;
}

/// What hyper refuses before the router sees it — a garbage request line,
/// a target too long, a head too large — is answered with its status and
/// a one-line JSON body saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparseable_requests_get_a_one_line_reason() {
    let s = Server::start(ServerConfig::default()).await;
    let long_target = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000));
    let many_headers = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\n{}\r\n",
        (0..200)
            .map(|i| format!("x-h{i}: v\r\n"))
            .collect::<String>()
    );
    for (request, status, says) in [
        (
            "\u{1}\u{2}garbage\r\n\r\n".to_string(),
            "HTTP/1.1 400 Bad Request",
            "malformed request",
        ),
        (long_target, "HTTP/1.1 414 URI Too Long", "too long"),
        (
            many_headers,
            "HTTP/1.1 431 Request Header Fields Too Large",
            "too large",
        ),
    ] {
        let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let (got, headers, body) = read_answer(&mut stream, Duration::from_secs(60)).await;
        assert_eq!(got, status);
        assert!(
            headers
                .iter()
                .any(|h| h.eq_ignore_ascii_case("content-type: application/json")),
            "{headers:?}"
        );
        let text = String::from_utf8(body).expect("UTF-8 body");
        assert!(!text.contains('\n'), "one line: {text:?}");
        let json: Value = serde_json::from_str(&text).expect("JSON body");
        assert!(
            json["error"].as_str().expect("error").contains(says),
            "{status}: {json}"
        );
        assert!(
            closed_within(&mut stream, Duration::from_secs(60))
                .await
                .is_some()
        );
    }
    let (status, body) = s.steer(Some("application/json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    s.stop().await;
}

/// An HTTP/2 client with prior knowledge gets HTTP/2's own refusal — a
/// GOAWAY with `HTTP_1_1_REQUIRED` saying why — not a silent close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_is_refused_with_a_reason() {
    let s = Server::start(ServerConfig::default()).await;
    let mut stream = TcpStream::connect(&s.addr).await.expect("connect");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // An empty SETTINGS frame.
    hello.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    stream.write_all(&hello).await.expect("write");
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut got))
        .await
        .expect("closed")
        .expect("read");
    // Walk the frames: 3 bytes length, type, flags, 4 bytes stream id.
    let mut goaway = None;
    let mut rest = &got[..];
    while rest.len() >= 9 {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let Some(payload) = rest.get(9..9 + len) else {
            break;
        };
        if rest[3] == 0x7 {
            goaway = Some(payload.to_vec());
        }
        rest = &rest[9 + len..];
    }
    let goaway = goaway.unwrap_or_else(|| panic!("no GOAWAY in {got:?}"));
    assert_eq!(goaway[4..8], [0, 0, 0, 0xd], "HTTP_1_1_REQUIRED");
    let reason = String::from_utf8_lossy(&goaway[8..]);
    assert!(reason.contains("HTTP/1.1"), "{reason}");
    drop(stream);
    // HTTP/1.1 is served as ever.
    let (status, body) = s.steer(Some("application/json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, steer_where());
    s.stop().await;
}
