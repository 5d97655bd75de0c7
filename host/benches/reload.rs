//! Hot-reload benchmark (run by hand: `cargo bench -p toolgate --bench reload`;
//! `-- tenants` runs part 3 alone).
//!
//! 1. Time from writing the Rust sql-guard into a watched plugin directory
//!    (atomic rename) to the new guard answering a call: cold (nothing
//!    cached) and warm (compiled cache on disk, fresh registry), with the
//!    watcher's settle delay shown separately; and `Registry::reload()`
//!    alone, cold and warm.
//! 2. Steering-call latency while the guard is replaced (new bytes, so a
//!    real compile) every 100 ms, against the same calls with no reload.
//! 3. Many tenants (`TENANTS` directories, one guard each): start-up (the
//!    global directory serving, then every tenant), the process CPU time of
//!    a no-op `Registry::reload()` and of one tenant's file replaced under
//!    the watcher, and the time from another tenant's write to its new
//!    guard answering while one tenant rewrites a file every 20 ms.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::CompiledCache;
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

/// Tenant directories of part 3.
const TENANTS: usize = 2000;

/// This process's CPU time (user + system) so far, in ms.
fn cpu_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// Whether `tenant`'s own chain steers a DELETE (the sql-guard).
async fn tenant_steers(reg: &Registry, tenant: &str) -> bool {
    let set = reg.plugin_set();
    set.tenants.contains_key(tenant)
        && set
            .chain(Some(tenant))
            .steering(&event(), &json!({}))
            .await
            .result
            .is_some()
}

/// Part 3: `TENANTS` tenants.
async fn many_tenants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let guard = std::fs::read(toolgate_tests::SQL_GUARD).expect("read");
    let other = std::fs::read(toolgate_tests::NO_EMAIL).expect("read");
    for t in 0..TENANTS {
        let d = dir.path().join(format!("tenants/t{t:04}"));
        std::fs::create_dir_all(&d).expect("mkdir");
        install(&d, if t == 1 { &other } else { &guard });
    }
    // Compiled once into the on-disk cache, as a restarted server has it.
    drop(open(dir.path(), CompiledCache::at(cache.path())).await);
    let options = || RegistryOptions {
        cache: CompiledCache::at(cache.path()),
        ..Default::default()
    };
    let (start, cpu) = (Instant::now(), cpu_ms());
    let reg = Arc::new(
        Registry::start_with(engine(), dir.path(), options())
            .await
            .expect("start"),
    );
    let serving = start.elapsed().as_secs_f64() * 1e3;
    reg.load_pending().await.expect("load");
    println!(
        "{TENANTS} tenants: global serving after {serving:.1} ms; every tenant after {:.0} ms \
         ({:.0} ms CPU)",
        start.elapsed().as_secs_f64() * 1e3,
        cpu_ms() - cpu
    );
    // Stamps are kept for files older than the timestamp granularity.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    reg.reload().await.expect("reload");
    let mut noop = Vec::new();
    for _ in 0..ROUNDS {
        let cpu = cpu_ms();
        let r = reg.reload().await.expect("reload");
        noop.push(cpu_ms() - cpu);
        assert!(r.read.is_empty(), "{:?}", r.read);
    }
    stats("no-op Registry::reload(), process CPU", "ms", noop);
    // Idle CPU (the epoch ticker) to compare with.
    let cpu = cpu_ms();
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("idle: {:.1} ms CPU per second", cpu_ms() - cpu);
    let _watch = Arc::clone(&reg).watch(SETTLE).expect("watch");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // One tenant's file replaced by an already compiled guard and back:
    // CPU from the write until the change answers.
    let t1 = dir.path().join("tenants/t0001");
    let mut one = Vec::new();
    let mut live = Vec::new();
    for i in 0..ROUNDS {
        let steers = i % 2 == 0;
        let (start, cpu) = (Instant::now(), cpu_ms());
        install(&t1, if steers { &guard } else { &other });
        while tenant_steers(&reg, "t0001").await != steers {
            tokio::time::sleep(Duration::from_micros(500)).await;
            assert!(start.elapsed() < Duration::from_secs(120), "never live");
        }
        one.push(cpu_ms() - cpu);
        live.push(start.elapsed().as_secs_f64() * 1e3);
    }
    stats(
        "one tenant's file replaced, watched: process CPU",
        "ms",
        one,
    );
    stats(
        "one tenant's file replaced, watched: write -> live",
        "ms",
        live,
    );
    // One tenant churns every 20 ms; another's new guard goes live.
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (stop, d) = (Arc::clone(&stop), dir.path().join("tenants/t0002"));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::fs::write(d.join("notes"), n.to_le_bytes()).expect("write");
                n += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut behind = Vec::new();
    for i in 0..ROUNDS {
        let t = dir.path().join(format!("tenants/new{i}"));
        std::fs::create_dir_all(&t).expect("mkdir");
        let start = Instant::now();
        install(&t, &guard);
        while !tenant_steers(&reg, &format!("new{i}")).await {
            tokio::time::sleep(Duration::from_micros(500)).await;
            assert!(start.elapsed() < Duration::from_secs(120), "never live");
        }
        behind.push(start.elapsed().as_secs_f64() * 1e3);
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("churn");
    stats(
        "another tenant's new guard, write -> live, one tenant churning every 20 ms",
        "ms",
        behind,
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if std::env::args().any(|a| a == "tenants") {
        rt.block_on(many_tenants());
        return;
    }
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
