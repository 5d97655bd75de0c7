//! Guard state in Redis, beyond what every store does (`state::redis::*`):
//! two replicas counting together, and a Redis that goes away, stalls or
//! fills up — each a `state-unavailable` fault under the guard's
//! `on_error`, the host serving on, and the store back by itself.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolgate::{Engine, Fault, Limits, OnError, Outcome, Plugin, StateBackend};
use toolgate_tests::TOOL_CALL_LIMIT;

use crate::redis_server::RedisServer;
use crate::state::{ask, call_in, futures_join, read, stateful, tally, with_state};

fn replica(url: &str) -> Engine {
    with_state(StateBackend::Redis { url: url.into() })
}

/// The counter every test here uses: adds 1 to `hits` in the tenant scope.
fn counter() -> serde_json::Value {
    json!({"ops": [{"op": "add", "scope": "tenant", "key": "hits", "delta": 1}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_sharing_redis_let_exactly_n_of_1000_concurrent_calls_through() {
    let url = RedisServer::shared().fresh_url();
    let limit = 37;
    let config = json!({"budget": {"scope": "tenant", "key": "sent", "limit": limit}});
    let (a, b) = (replica(&url), replica(&url));
    let guards = [
        stateful(&a, "budget", config.clone(), Limits::default()).await,
        stateful(&b, "budget", config, Limits::default()).await,
    ];
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let calls = (0..1000).map(|i| {
        let (guard, gate) = (Arc::clone(&guards[i % 2]), Arc::clone(&gate));
        tokio::spawn(async move {
            let _permit = gate.acquire().await.expect("gate");
            ask(
                &guard,
                &call_in(&format!("run-{}", i % 7), &format!("c{i}"), "send"),
            )
            .await
        })
    });
    // Which replica's calls get the N depends on timing; that together
    // they let exactly N through does not.
    assert_eq!(tally(futures_join(calls).await), (limit, 1000 - limit));
    for engine in [&a, &b] {
        let left = read(engine, "budget", &[("tenant", "sent")], "any").await;
        assert_eq!(
            left,
            json!([limit.to_string()]),
            "each replica sees the same count"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_killed_and_restarted_faults_calls_meanwhile_and_comes_back_by_itself() {
    let mut server = RedisServer::start();
    let engine = replica(&server.url(0));
    let guard = stateful(&engine, "c", counter(), Limits::default()).await;
    let results = |content: Option<String>| content.expect("results");
    let (content, outcome, fault) = ask(&guard, &call_in("r", "1", "t")).await;
    assert_eq!(
        (results(content), outcome, fault),
        ("[1]".into(), Outcome::Skip, None)
    );

    server.stop();
    // While it is down, every call faults `state-unavailable` (the guard
    // is skipped: its `on_error`) and the breaker spares the next calls
    // the attempt: some of them are refused without one.
    let mut spared = 0;
    for i in 0..20 {
        let (content, outcome, fault) = ask(&guard, &call_in("r", &format!("d{i}"), "t")).await;
        assert_eq!(
            (content, outcome, fault),
            (None, Outcome::Fault, Some(Fault::StateUnavailable))
        );
        let trace = crate::chain(&[&guard])
            .steering(&call_in("r", "x", "t"), &crate::no_state())
            .await;
        let detail = trace.trace[0].detail.clone().unwrap_or_default();
        assert!(
            detail.contains("state store at redis://127.0.0.1:"),
            "{detail}"
        );
        spared += usize::from(detail.contains("not tried again"));
    }
    assert!(spared > 0, "the breaker opened");

    server.restart();
    // Back: the first calls after the breaker's wait find it (a new
    // server, empty: it kept nothing in memory).
    let mut back = None;
    for i in 0..200 {
        let (content, outcome, _) = ask(&guard, &call_in("r", &format!("b{i}"), "t")).await;
        if outcome == Outcome::Skip {
            back = content;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        back.as_deref(),
        Some("[1]"),
        "the store came back with Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slower_than_the_deadline_faults_the_call_at_its_deadline_and_serving_goes_on() {
    let server = RedisServer::start();
    let engine = replica(&server.url(0));
    let quick = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let guard = stateful(&engine, "c", counter(), quick).await;
    assert_eq!(ask(&guard, &call_in("r", "1", "t")).await.1, Outcome::Skip);
    // Redis answers nobody for 3 s: the call gives up at its 200 ms.
    assert!(
        server
            .command("CLIENT PAUSE 3000 ALL")
            .is_some_and(|r| r.starts_with("+OK"))
    );
    let (_, outcome, fault) = ask(&guard, &call_in("r", "2", "t")).await;
    assert_eq!(
        (outcome, fault),
        (Outcome::Fault, Some(Fault::StateUnavailable))
    );
    assert!(
        server
            .command("CLIENT UNPAUSE")
            .is_some_and(|r| r.starts_with("+OK"))
    );
    // Once it answers again, the count holds the calls that were applied:
    // the successful one, and the abandoned add, which may have been
    // applied late (an abandoned add is not given back: see
    // docs/state.md).
    let mut seen = None;
    for _ in 0..200 {
        let (content, outcome, _) = ask(&guard, &call_in("r", "3", "t")).await;
        if outcome == Outcome::Skip {
            seen = content;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = seen.expect("the store came back");
    assert!(seen == "[2]" || seen == "[3]", "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_faults_writes_and_loses_nothing_already_committed() {
    let server = RedisServer::start();
    let engine = replica(&server.url(0));
    let setter = |value: &str| json!({"ops": [{"op": "set", "scope": "tenant", "key": "k", "value": value}]});
    let kept = stateful(&engine, "s", setter("kept"), Limits::default()).await;
    assert_eq!(ask(&kept, &call_in("r", "1", "t")).await.1, Outcome::Skip);
    for line in [
        "CONFIG SET maxmemory-policy noeviction",
        "CONFIG SET maxmemory 1",
    ] {
        assert!(
            server.command(line).is_some_and(|r| r.starts_with("+OK")),
            "{line}"
        );
    }
    let more = stateful(&engine, "s", setter(&"v".repeat(1000)), Limits::default()).await;
    // A full Redis is the host's fault, not the guard's: not decided
    // (never "the guard said nothing"), never counted toward quarantine.
    let (_, outcome, fault) = ask(&more, &call_in("r", "2", "t")).await;
    assert_eq!(
        (outcome, fault),
        (Outcome::Unavailable, Some(Fault::StateFull))
    );
    let detail = crate::chain(&[&more])
        .steering(&call_in("r", "3", "t"), &crate::no_state())
        .await
        .trace[0]
        .detail
        .clone()
        .unwrap_or_default();
    assert!(
        detail.contains("full") || detail.contains("not tried again"),
        "{detail}"
    );
    assert!(
        server
            .command("CONFIG SET maxmemory 0")
            .is_some_and(|r| r.starts_with("+OK"))
    );
    assert_eq!(
        read(&engine, "s", &[("tenant", "k")], "r").await,
        json!(["kept"])
    );
}

/// A plugin directory holding `tool-call-limit`, at most `limit` calls of
/// `send_email` per run.
pub(crate) fn send_email_limit_dir(limit: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        toolgate_tests::TOOL_CALL_LIMIT,
        dir.path().join("tool-call-limit.wasm"),
    )
    .expect("copy");
    std::fs::write(
        dir.path().join("toolgate.toml"),
        format!(
            "[[plugin]]\npath = \"tool-call-limit.wasm\"\n\
             [plugin.config]\ntool = \"send_email\"\nrun_limit = {limit}\n"
        ),
    )
    .expect("manifest");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_replicas_with_state_in_redis_count_one_run_together() {
    let dir = send_email_limit_dir(2);
    let url = RedisServer::shared().fresh_url();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--state",
        url.as_str(),
        "--no-cache",
    ];
    let (_a, addr_a, banner) = crate::server::spawn_serve(dir.path(), &args);
    let (_b, addr_b, _) = crate::server::spawn_serve(dir.path(), &args);
    assert!(banner.contains("state in redis"), "{banner}");
    let client = reqwest::Client::new();
    let email = |addr: &str, call: &str| {
        let request = client
            .post(format!("http://{addr}/v1/steering"))
            .json(&json!({"event": {"run_id": "r", "tool_name": "send_email",
                "call_id": call, "args": {"n": call}}}));
        async move {
            let r = request.send().await.expect("send");
            assert_eq!(r.status(), reqwest::StatusCode::OK);
            r.json::<serde_json::Value>().await.expect("json")
        }
    };
    let cancelled = json!({"action": "skip", "is_error": false,
        "content": "Tool call limit exceeded. Do not call 'send_email' again."});
    assert_eq!(email(&addr_a, "1").await, serde_json::Value::Null);
    assert_eq!(email(&addr_b, "2").await, serde_json::Value::Null);
    assert_eq!(
        email(&addr_a, "3").await,
        cancelled,
        "the run's third, counted by both"
    );
    assert_eq!(email(&addr_b, "4").await, cancelled);
}

#[test]
fn serve_refuses_a_state_it_cannot_use_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "serve",
            "--plugins",
            &dir.path().display().to_string(),
            "--state",
            "mongo://x",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"mongo://x\"") && stderr.contains("redis://"),
        "{stderr}"
    );
}

/// `toolgate state ARGS`: its exit code and standard output as JSON.
fn state_cli(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("state")
        .args(args)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), json, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_cli_shows_and_clears_a_tenants_state_in_redis_and_through_serve() {
    // In Redis, directly.
    let url = RedisServer::shared().fresh_url();
    let engine = replica(&url);
    let guard = Arc::new(
        stateful(&engine, "c", counter(), Limits::default())
            .await
            .serving("acme"),
    );
    assert_eq!(ask(&guard, &call_in("r", "1", "t")).await.1, Outcome::Skip);
    let other = Arc::new(
        stateful(&engine, "c", counter(), Limits::default())
            .await
            .serving("zeta"),
    );
    assert_eq!(ask(&other, &call_in("r", "1", "t")).await.1, Outcome::Skip);
    let (code, got, err) = state_cli(&["get", "--state", &url, "--tenant", "acme"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        got,
        json!({"entries": [{"tenant": "acme", "plugin": "c", "run": null, "key": "hits", "value": "1", "ttl_ms": null}]})
    );
    let (code, got, err) = state_cli(&[
        "clear", "--state", &url, "--tenant", "acme", "--plugin", "c",
    ]);
    assert_eq!((code, got), (Some(0), json!({"removed": 1})), "{err}");
    assert_eq!(
        state_cli(&["get", "--state", &url, "--tenant", "acme"]).1,
        json!({"entries": []})
    );
    assert_eq!(
        state_cli(&["get", "--state", &url, "--tenant", "zeta"]).1["entries"][0]["value"],
        "1",
        "another tenant's is untouched"
    );

    // In a serve's memory, through its /v1/state, with the operator's token.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        toolgate_tests::TOOL_CALL_LIMIT,
        dir.path().join("tool-call-limit.wasm"),
    )
    .expect("copy");
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"tool-call-limit.wasm\"\n[plugin.config]\nrun_limit = 5\n",
    )
    .expect("manifest");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let token = token.display().to_string();
    let (_serve, addr, _) = crate::server::spawn_serve(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-cache",
            "--token-file",
            &token,
        ],
    );
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/steering"))
        .bearer_auth("s3cret")
        .json(
            &json!({"event": {"run_id": "r9", "tool_name": "search", "call_id": "1", "args": {}}}),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let server = format!("http://{addr}");
    let (code, got, err) = state_cli(&[
        "get",
        "--server",
        &server,
        "--token-file",
        &token,
        "--tenant",
        "",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(got["entries"][0]["key"], "calls:*", "{got}");
    assert_eq!(got["entries"][0]["run"], "r9");
    let (code, got, _) = state_cli(&[
        "clear",
        "--server",
        &server,
        "--token-file",
        &token,
        "--tenant",
        "",
        "--run",
        "r9",
    ]);
    assert_eq!((code, got), (Some(0), json!({"removed": 1})));
    // Without the token, the server's refusal, named.
    let (code, _, err) = state_cli(&["get", "--server", &server, "--tenant", ""]);
    assert_eq!(code, Some(2));
    assert!(err.contains("401"), "{err}");
    // A memory store cannot be reached from outside its process.
    let (code, _, err) = state_cli(&["get", "--state", "memory", "--tenant", "a"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--server"), "{err}");
}

/// The bundled `tool-call-limit` with `config`, failing closed, its calls
/// made for `tenant`.
async fn limit_for(engine: &Engine, tenant: &str, config: serde_json::Value) -> Arc<Plugin> {
    let plugin = crate::plugin_with(
        engine,
        "tool-call-limit",
        TOOL_CALL_LIMIT,
        config,
        Limits::default(),
        OnError::Deny,
    )
    .await;
    Arc::new(plugin.serving(tenant))
}

/// Whether `plugin` lets a `search` of run `run` proceed.
async fn proceeds(plugin: &Arc<Plugin>, run: &str, call: &str) -> bool {
    let d = crate::chain(&[plugin])
        .steering(&call_in(run, call, "search"), &crate::no_state())
        .await;
    d.result.is_none() && d.unavailable().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_filling_redis_faults_state_budget_and_another_tenants_budget_stays_exact() {
    let server = RedisServer::start();
    for line in [
        "CONFIG SET maxmemory-policy noeviction",
        "CONFIG SET maxmemory 32mb",
    ] {
        assert!(
            server.command(line).is_some_and(|r| r.starts_with("+OK")),
            "{line}"
        );
    }
    let engine = replica(&server.url(0));
    // Tenant a: 99 values of 1 KB per call, each call a new run.
    let value = "v".repeat(1000);
    let ops: Vec<serde_json::Value> = (0..99)
        .map(|i| json!({"op": "set", "scope": "run", "key": format!("k{i}"), "value": value}))
        .collect();
    let filler = stateful(&engine, "filler", json!({ "ops": ops }), Limits::default()).await;
    let filler = Arc::new(filler.serving("a"));
    let limit = limit_for(&engine, "b", json!({"run_limit": 5})).await;
    let (mut kept, mut over) = (0, 0);
    for i in 0..400 {
        match ask(&filler, &call_in(&format!("a-{i}"), "c", "t")).await {
            (_, Outcome::Skip, None) => kept += 1,
            (_, Outcome::Fault, Some(Fault::StateBudget)) => over += 1,
            other => panic!("a's call {i}: {other:?}"),
        }
    }
    // a's part is a quarter of 32 MB: about 75 calls' worth; past it, a's
    // own fault, every time.
    assert!((40..200).contains(&kept), "{kept} kept");
    assert_eq!(over, 400 - kept);
    // b's limit holds exactly in every run, a's state notwithstanding.
    for run in 0..15 {
        let mut through = 0;
        for call in 0..40 {
            through += usize::from(proceeds(&limit, &format!("b-{run}"), &call.to_string()).await);
        }
        assert_eq!(through, 5, "run {run}");
    }
}

/// A TCP proxy on loopback in front of `port` that holds each chunk a
/// client sends for `delay()` before passing it on, in order; answers come
/// back at once. Its port.
async fn delaying_proxy(port: u16, delay: impl Fn() -> Duration + Send + Sync + 'static) -> u16 {
    use tokio::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let at = listener.local_addr().expect("addr").port();
    let delay = Arc::new(delay);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
                continue;
            };
            let (client_in, client_out) = client.into_split();
            let (server_in, server_out) = server.into_split();
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
            let delay = Arc::clone(&delay);
            tokio::spawn(async move {
                let mut last = tokio::time::Instant::now();
                while let Some(chunk) = read_chunk(&client_in).await {
                    last = last.max(tokio::time::Instant::now() + delay());
                    if tx.send((last, chunk)).is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                while let Some((when, chunk)) = rx.recv().await {
                    tokio::time::sleep_until(when).await;
                    if !write_all(&server_out, &chunk).await {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                while let Some(chunk) = read_chunk(&server_in).await {
                    if !write_all(&client_out, &chunk).await {
                        return;
                    }
                }
            });
        }
    });
    at
}

async fn read_chunk(from: &tokio::net::tcp::OwnedReadHalf) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        from.readable().await.ok()?;
        match from.try_read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => {
                buf.truncate(n);
                return Some(buf);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
}

async fn write_all(to: &tokio::net::tcp::OwnedWriteHalf, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        if to.writable().await.is_err() {
            return false;
        }
        match to.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_redis_never_lets_a_budget_through_more_than_its_limit() {
    let server = RedisServer::start();
    let port: u16 = server
        .url(0)
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next()?.parse().ok())
        .expect("port");
    let limit = 5;
    // The proxy's delay, ms (`JITTER`: 0 to 250, a xorshift's).
    const JITTER: u64 = u64::MAX;
    let mode = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seed = std::sync::atomic::AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let delay = {
        let mode = Arc::clone(&mode);
        move || {
            let ms = match mode.load(std::sync::atomic::Ordering::Relaxed) {
                JITTER => {
                    let mut x = seed.load(std::sync::atomic::Ordering::Relaxed);
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    seed.store(x, std::sync::atomic::Ordering::Relaxed);
                    x % 251
                }
                ms => ms,
            };
            Duration::from_millis(ms)
        }
    };
    let proxy = delaying_proxy(port, delay).await;
    let engine = replica(&format!("redis://127.0.0.1:{proxy}/0"));
    let guard = limit_for(&engine, "t", json!({"run_limit": limit})).await;
    for (name, ms) in [("120 ms", 120), ("200 ms", 200), ("0-250 ms", JITTER)] {
        // Connected, its scripts loaded, the breaker closed: then slow.
        mode.store(0, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert!(
            proceeds(&guard, &format!("warm {name}"), "0").await,
            "{name}: warm"
        );
        mode.store(ms, std::sync::atomic::Ordering::Relaxed);
        // One call after another.
        let run = format!("seq {name}");
        let mut through = 0;
        for call in 0..14 {
            through += usize::from(proceeds(&guard, &run, &call.to_string()).await);
        }
        assert!(
            through <= limit,
            "{name}, sequential: {through} of 14 through"
        );
        if ms == 120 {
            assert!(through > 0, "a Redis this slow still answers in time");
        }
        // 300 calls, 50 in flight.
        let gate = Arc::new(tokio::sync::Semaphore::new(50));
        let run = format!("flight {name}");
        let calls = (0..300).map(|call| {
            let (guard, gate, run) = (Arc::clone(&guard), Arc::clone(&gate), run.clone());
            tokio::spawn(async move {
                let _permit = gate.acquire().await.expect("gate");
                proceeds(&guard, &run, &call.to_string()).await
            })
        });
        let through = futures_join(calls).await.into_iter().filter(|p| *p).count();
        assert!(
            through <= limit,
            "{name}, 50 in flight: {through} of 300 through"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_part_comes_back_as_its_runs_go_idle_neither_leaked_nor_exceeded() {
    let server = RedisServer::start();
    for line in [
        "CONFIG SET maxmemory-policy noeviction",
        "CONFIG SET maxmemory 8mb",
    ] {
        assert!(
            server.command(line).is_some_and(|r| r.starts_with("+OK")),
            "{line}"
        );
    }
    let engine = replica(&server.url(0));
    let value = "v".repeat(1000);
    let ops: Vec<serde_json::Value> = (0..20)
        .map(|i| json!({"op": "set", "scope": "run", "key": format!("k{i}"), "value": value}))
        .collect();
    let idle = Limits {
        state_run_ttl: Duration::from_secs(4),
        ..Limits::default()
    };
    let filler = stateful(&engine, "filler", json!({ "ops": ops }), idle).await;
    let filler = Arc::new(filler.serving("a"));
    // Runs of 20 KB until a's part (2 MB) is full; then every one of them
    // goes idle, Redis drops them, and a's part is whole again: as many
    // runs fit as the first time (none leaked), no more (none counted
    // twice).
    let mut kept = Vec::new();
    for round in 0..2 {
        let mut n: usize = 0;
        for i in 0..200 {
            match ask(&filler, &call_in(&format!("{round}-{i}"), "c", "t")).await {
                (_, Outcome::Skip, None) => n += 1,
                (_, Outcome::Fault, Some(Fault::StateBudget)) => break,
                other => panic!("round {round}, call {i}: {other:?}"),
            }
        }
        kept.push(n);
        tokio::time::sleep(Duration::from_millis(4500)).await;
    }
    assert!((50..150).contains(&kept[0]), "{kept:?}");
    assert!(kept[0].abs_diff(kept[1]) <= 2, "{kept:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_use_past_its_first_idle_time_keeps_its_state() {
    let engine = replica(&RedisServer::shared().fresh_url());
    let idle = Limits {
        state_run_ttl: Duration::from_millis(800),
        ..Limits::default()
    };
    let count = json!({"ops": [{"op": "add", "scope": "run", "key": "n", "delta": 1}]});
    let counter = stateful(&engine, "counter", count, idle).await;
    // Used every 250 ms for 3 s: never idle for 800 ms, so never reclaimed
    // — though its first idle time is long past.
    for i in 1..=12 {
        let (content, outcome, fault) = ask(&counter, &call_in("r", &i.to_string(), "t")).await;
        assert_eq!(
            (content, outcome, fault),
            (Some(format!("[{i}]")), Outcome::Skip, None)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
