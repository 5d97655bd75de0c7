//! A real HTTP file server on a loopback port, started by the tests of
//! remote plugin sources: it serves the bytes it is given under a path,
//! counts the requests it answers, and can be stopped (its port then
//! refuses connections) and started again on the same port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// How a file is sent.
#[derive(Clone)]
struct File {
    bytes: Vec<u8>,
    /// Sent in chunks without a `Content-Length`.
    chunked: bool,
}

#[derive(Clone, Default)]
struct Shared {
    files: Arc<Mutex<HashMap<String, File>>>,
    requests: Arc<AtomicUsize>,
}

/// One server; stopped when dropped.
pub struct FileServer {
    addr: SocketAddr,
    shared: Shared,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl FileServer {
    /// A server on a free loopback port, answering once this returns.
    pub async fn start() -> FileServer {
        FileServer::start_on(0).await
    }

    /// A server on loopback port `port` (0: a free one).
    pub async fn start_on(port: u16) -> FileServer {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("a loopback port for the file server");
        let addr = listener.local_addr().expect("its address");
        let mut server = FileServer {
            addr,
            shared: Shared::default(),
            task: None,
        };
        server.serve(listener);
        server
    }

    /// A loopback port nothing listens on, for a server started later:
    /// below the kernel's ephemeral range, so no other test's listener on
    /// port 0 can be handed it meanwhile (each port is given out once per
    /// process).
    pub fn free_port() -> u16 {
        use std::sync::atomic::AtomicU16;
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32768);
        static NEXT: AtomicU16 = AtomicU16::new(0);
        let span = low.saturating_sub(10_000).max(1);
        // Processes running side by side start at different places.
        let start = (std::process::id() % u32::from(span)) as u16;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::SeqCst);
            let port = 10_000 + (start.wrapping_add(n) % span);
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
        panic!("no free loopback port below {low}");
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let shared = self.shared.clone();
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let shared = shared.clone();
            async move { answer(&shared, &uri) }
        });
        self.task = Some(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
    }

    /// The URL of `path` (`/guards/x.wasm`) on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `host:port`.
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }

    /// Serves `bytes` at `path` from now on.
    pub fn put(&self, path: &str, bytes: Vec<u8>) {
        self.put_file(path, bytes, false);
    }

    /// Serves `bytes` at `path` in chunks, with no `Content-Length`.
    pub fn put_chunked(&self, path: &str, bytes: Vec<u8>) {
        self.put_file(path, bytes, true);
    }

    fn put_file(&self, path: &str, bytes: Vec<u8>, chunked: bool) {
        self.shared
            .files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path.to_string(), File { bytes, chunked });
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Stops serving: the port refuses connections.
    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn answer(shared: &Shared, uri: &Uri) -> Response {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let file = shared
        .files
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(uri.path())
        .cloned();
    match file {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(File {
            bytes,
            chunked: false,
        }) => bytes.into_response(),
        Some(File {
            bytes,
            chunked: true,
        }) => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
                .chunks(4096)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            Body::from_stream(futures_util::stream::iter(chunks)).into_response()
        }
    }
}
