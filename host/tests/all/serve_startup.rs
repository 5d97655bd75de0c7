//! `toolgate serve` listens at once: while its global guards load it
//! answers `/healthz`, says on `/readyz` which guard is loading and at
//! what step, and answers every call 503 not ready — never a decision
//! without the guards; once they are in, their verdicts. A global
//! manifest that fails still stops the server with the error.
//!
//! The slow load is a global guard fetched from a `url` whose server holds
//! the answer until the test lets it go: no clock decides anything.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::Notify;
use toolgate_tests::SQL_GUARD;

/// A file server on loopback that answers its one file only once
/// released; counts the requests that arrived.
struct Gated {
    addr: std::net::SocketAddr,
    release: Arc<Notify>,
    arrived: Arc<AtomicUsize>,
}

impl Gated {
    async fn start(bytes: Vec<u8>) -> Gated {
        let (release, arrived) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
        let (r, a) = (Arc::clone(&release), Arc::clone(&arrived));
        let app = axum::Router::new().route(
            "/guard.wasm",
            get(move || {
                let (r, a, bytes) = (Arc::clone(&r), Arc::clone(&a), bytes.clone());
                async move {
                    a.fetch_add(1, Ordering::SeqCst);
                    r.notified().await;
                    bytes
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Gated {
            addr,
            release,
            arrived,
        }
    }
}

/// Waits (generously) until `done` holds; panics with `what` if never.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..1200 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never: {what}");
}

/// Standard error's lines as they come, and the address of the first
/// `listening at http://ADDR` line.
fn spawn(dir: &std::path::Path) -> (crate::KillOnDrop, String, std::sync::mpsc::Receiver<String>) {
    let mut child = crate::KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--plugins", &dir.display().to_string()])
            .args(["--listen", "127.0.0.1:0", "--no-cache", "--no-watch"])
            .env_remove("TOOLGATE_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no `listening` line ({e}): {seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if let Some((_, rest)) = line.split_once("listening at http://") {
            let addr = rest.split_whitespace().next().expect("an address");
            return (child, addr.to_string(), rx);
        }
    }
}

fn steering(sql: &str) -> Value {
    json!({"event": {"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": sql}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_listens_at_once_and_answers_not_ready_until_its_global_guard_is_in() {
    let gated = Gated::start(std::fs::read(SQL_GUARD).expect("read the guard")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let digest = toolgate::digest(&std::fs::read(SQL_GUARD).expect("read"));
    std::fs::write(
        dir.path().join("toolgate.toml"),
        format!(
            "[[plugin]]\nname = \"sql-guard\"\nurl = \"http://{}/guard.wasm\"\nsha256 = \"{digest}\"\n",
            gated.addr
        ),
    )
    .expect("manifest");
    let (_child, addr, lines) = spawn(dir.path());
    let base = format!("http://{addr}");
    let client = reqwest::Client::new();
    // The guard's fetch has begun, and is held.
    let arrived = Arc::clone(&gated.arrived);
    eventually("the guard's fetch arrives", async || {
        arrived.load(Ordering::SeqCst) > 0
    })
    .await;

    let health = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    let ready = client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 503);
    assert!(ready.headers().contains_key("retry-after"));
    let body: Value = ready.json().await.expect("JSON");
    assert_eq!(body["status"], "starting", "{body}");
    assert_eq!(body["loading"][0]["plugin"], "sql-guard", "{body}");
    assert_eq!(body["loading"][0]["step"], "fetching", "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("503")),
        "{body}"
    );
    // Every call is answered not ready: a decision (with a tenant or
    // not), an event, the hooks worth sending.
    for (path, body) in [
        ("/v1/steering", steering("DELETE FROM users")),
        (
            "/v1/steering",
            json!({"event": steering("DELETE FROM users")["event"], "tenant": "acme"}),
        ),
        (
            "/v1/observe",
            json!({"hook": "on_llm_end", "event": {
                "model": "m", "output": "o", "usage": {"input_tokens": 8, "output_tokens": 4},
                "run_id": "r",
            }}),
        ),
    ] {
        let answer = client
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .expect("call");
        assert_eq!(answer.status(), 503, "{path}");
        assert!(answer.headers().contains_key("retry-after"), "{path}");
        let text = answer.text().await.expect("body");
        assert!(text.contains("not ready"), "{path}: {text}");
    }
    let hooks = client
        .get(format!("{base}/v1/hooks"))
        .send()
        .await
        .expect("hooks");
    assert_eq!(hooks.status(), 503);
    let plugins: Value = client
        .get(format!("{base}/v1/plugins"))
        .send()
        .await
        .expect("plugins")
        .json()
        .await
        .expect("JSON");
    assert_eq!(plugins["starting"], true, "{plugins}");

    // Let the fetch go: the guard loads and decides.
    gated.release.notify_waiters();
    gated.release.notify_one();
    eventually("ready", async || {
        client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let answer = client
        .post(format!("{base}/v1/steering"))
        .json(&steering("DELETE FROM users"))
        .send()
        .await
        .expect("steering");
    assert_eq!(answer.status(), 200);
    let verdict: Value = answer.json().await.expect("JSON");
    assert_eq!(verdict["action"], "skip", "{verdict}");
    assert_eq!(
        verdict["content"], "Add a WHERE clause before running this query.",
        "{verdict}"
    );
    // The log says what was loading, and for how long.
    let mut log = String::new();
    while !log.contains("serving 1 global plugin(s)") {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("no `serving` line ({e}): {log}"));
        log.push_str(&line);
        log.push('\n');
    }
    assert!(
        log.contains("loading plugin `sql-guard`: compiling"),
        "{log}"
    );
    assert!(log.contains("loaded plugin `sql-guard` in "), "{log}");
}

#[test]
fn a_global_manifest_that_fails_still_stops_serve_with_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("toolgate.toml"), "[[plugin]\nname = 3\n").expect("manifest");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--plugins", &dir.path().display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--no-cache", "--no-watch"])
        .output()
        .expect("run toolgate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("toolgate: error: "), "{stderr}");
    assert!(stderr.contains("toolgate.toml"), "{stderr}");
    assert!(!stderr.contains("toolgate: serving"), "{stderr}");
}
