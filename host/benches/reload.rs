//! Hot-reload benchmark (run by hand: `cargo bench -p toolgate --bench reload`).
//!
//! 1. Time from writing the Rust sql-guard into a watched plugin directory
//!    (atomic rename) to the new guard answering a call: cold (nothing
//!    cached) and warm (compiled cache on disk, fresh registry), with the
//!    watcher's settle delay shown separately; and `Registry::reload()`
//!    alone, cold and warm.
//! 2. Steering-call latency while the guard is replaced (new bytes, so a
//!    real compile) every 100 ms, against the same calls with no reload.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::cache::CompiledCache;
use toolgate::event::BeforeToolCallEvent;
use toolgate::{Engine, EngineConfig, Registry, RegistryOptions};

const ROUNDS: usize = 10;
const SETTLE: Duration = Duration::from_millis(50);

fn event() -> BeforeToolCallEvent {
    serde_json::from_value(json!({
        "run_id": "r", "tool_name": "run_query", "call_id": "c",
        "args": {"sql": "DELETE FROM users"},
    }))
    .expect("event")
}

/// The sql-guard with a custom section appended: same behaviour, new bytes
/// (so a new digest, so a real compile).
fn variant(n: u64) -> Vec<u8> {
    let mut bytes = std::fs::read(toolgate_tests::SQL_GUARD).expect("read guard");
    let name = b"toolgate-bench";
    let payload = n.to_le_bytes();
    let body_len = 1 + name.len() + payload.len();
    bytes.push(0); // custom section
    bytes.push(u8::try_from(body_len).expect("small"));
    bytes.push(u8::try_from(name.len()).expect("small"));
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&payload);
    bytes
}

fn install(dir: &Path, bytes: &[u8]) {
    let tmp = dir.join(".sql-guard.wasm.tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, dir.join("sql-guard.wasm")).expect("rename");
}

async fn answers(reg: &Registry) -> bool {
    let set = reg.plugin_set();
    set.chain(None)
        .steering(&event(), &json!({}))
        .await
        .result
        .is_some()
}

fn engine() -> Engine {
    Engine::new(EngineConfig::default()).expect("engine")
}

async fn open(dir: &Path, cache: CompiledCache) -> Arc<Registry> {
    let options = RegistryOptions {
        cache,
        ..Default::default()
    };
    Arc::new(
        Registry::open_with(engine(), dir, options)
            .await
            .expect("open"),
    )
}

fn stats(name: &str, unit: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<56} n={:<6} p50 {:>8.2} {unit}  p99 {:>8.2} {unit}  max {:>8.2} {unit}",
        v.len(),
        p(0.5),
        p(0.99),
        v[v.len() - 1]
    );
}

/// Writes the guard into a watched empty directory and polls until it
/// answers; returns milliseconds.
async fn write_to_answer(cache: CompiledCache, bytes: &[u8]) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = open(dir.path(), cache).await;
    let _watch = Arc::clone(&reg).watch(SETTLE).expect("watch");
    // Let inotify settle in.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let start = Instant::now();
    install(dir.path(), bytes);
    while !answers(&reg).await {
        tokio::time::sleep(Duration::from_micros(200)).await;
        assert!(start.elapsed() < Duration::from_secs(30), "never answered");
    }
    start.elapsed().as_secs_f64() * 1e3
}

async fn reload_alone(cache: CompiledCache, bytes: &[u8]) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = open(dir.path(), cache).await;
    install(dir.path(), bytes);
    let start = Instant::now();
    reg.reload().await.expect("reload");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(answers(&reg).await);
    ms
}

async fn latency_under(reload_every: Option<Duration>, run_for: Duration) -> (Vec<f64>, usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    install(dir.path(), &variant(0));
    let reg = open(dir.path(), CompiledCache::disabled()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let caller = {
        let (reg, stop) = (Arc::clone(&reg), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // A short guard call finishes inside one epoch tick, never
                // returning Pending: yield so the loop shares its worker.
                tokio::task::yield_now().await;
                let start = Instant::now();
                assert!(answers(&reg).await);
                lat.push(start.elapsed().as_secs_f64() * 1e6);
            }
            lat
        })
    };
    let start = Instant::now();
    let mut reloads = 0;
    while start.elapsed() < run_for {
        match reload_every {
            Some(every) => {
                tokio::time::sleep(every).await;
                reloads += 1;
                install(dir.path(), &variant(reloads as u64));
                let r = reg.reload().await.expect("reload");
                assert_eq!(r.compiled.len(), 1);
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    stop.store(true, Ordering::Relaxed);
    (caller.await.expect("caller"), reloads)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!(
            "# reload benchmark: Rust sql-guard ({} bytes), {ROUNDS} rounds, settle {} ms",
            std::fs::read(toolgate_tests::SQL_GUARD)
                .expect("read")
                .len(),
            SETTLE.as_millis()
        );
        let bytes = variant(0);
        let warm_cache = tempfile::tempdir().expect("tempdir");
        // Populate the warm cache once.
        reload_alone(CompiledCache::at(warm_cache.path()), &bytes).await;

        let mut cold = Vec::new();
        let mut warm = Vec::new();
        let mut cold_r = Vec::new();
        let mut warm_r = Vec::new();
        for i in 0..ROUNDS {
            // Cold: bytes never seen, no cache.
            cold.push(write_to_answer(CompiledCache::disabled(), &variant(1000 + i as u64)).await);
            warm.push(write_to_answer(CompiledCache::at(warm_cache.path()), &bytes).await);
            cold_r.push(reload_alone(CompiledCache::disabled(), &variant(2000 + i as u64)).await);
            warm_r.push(reload_alone(CompiledCache::at(warm_cache.path()), &bytes).await);
        }
        stats(
            "write -> new guard answers, watched, cold (compile)",
            "ms",
            cold,
        );
        stats(
            "write -> new guard answers, watched, warm cache",
            "ms",
            warm,
        );
        stats("Registry::reload() alone, cold (compile)", "ms", cold_r);
        stats("Registry::reload() alone, warm cache", "ms", warm_r);

        let run_for = Duration::from_secs(5);
        let (base, _) = latency_under(None, run_for).await;
        stats("steering call latency, no reload", "µs", base);
        let (under, n) = latency_under(Some(Duration::from_millis(100)), run_for).await;
        stats(
            &format!("steering call latency, {n} replace+compile reloads"),
            "µs",
            under,
        );
    });
}
