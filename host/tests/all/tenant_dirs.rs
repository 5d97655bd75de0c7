//! Tenant directories as they come and go under a running host: a tenant
//! is never decided without its guards from the moment its directory
//! appears (renamed in, half-copied, refused); a relative `--plugins`
//! reloads per directory as an absolute one does; admission survives a
//! restart; names that differ only by case are never one another's.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::{CompiledCache, DecideRequest, NotDecided, NotReady, Registry, RegistryOptions};
use toolgate_tests::{SQL_GUARD, STEERING_ONLY};

use crate::*;

const WHERE: &str = "Add a WHERE clause before running this query.";

fn put(to: &Path, from: &str) {
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    std::fs::copy(from, to).expect("copy");
}

fn write(to: &Path, text: &str) {
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    let tmp = to.with_file_name(".write.tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, to).expect("rename");
}

fn delete_for(tenant: &str) -> Value {
    json!({
        "event": {"run_id": "r", "call_id": "c", "tool_name": "run_query",
                  "args": {"sql": "DELETE FROM users"}},
        "tenant": tenant,
    })
}

/// `delete_for(tenant)` decided on the registry's plugin set now.
async fn decide(reg: &Registry, tenant: &str) -> Result<toolgate::Verdict, NotDecided> {
    let request = DecideRequest::parse(
        toolgate::Seam::Steering,
        delete_for(tenant).to_string().as_bytes(),
    )
    .expect("request");
    request.decide(&reg.plugin_set()).await.map(|d| d.result)
}

fn steered(v: &toolgate::Verdict) -> bool {
    matches!(v, toolgate::Verdict::Steering(Some(skip)) if skip.content == WHERE)
}

async fn open(dir: &Path, cache: CompiledCache) -> Registry {
    let options = RegistryOptions {
        cache,
        ..RegistryOptions::default()
    };
    Registry::open_with(engine(), dir, options)
        .await
        .expect("registry opens")
}

/// `toolgate serve` in `cwd` with `args`; its standard error is read on
/// into the returned buffer all along.
fn serve_in(cwd: &Path, args: &[&str]) -> (KillOnDrop, String, Arc<Mutex<String>>) {
    let mut child = KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .current_dir(cwd)
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(" on http://")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(line[at + " on http://".len()..].trim().to_string());
                }
                let mut log = log.lock().expect("log");
                log.push_str(&line);
                log.push('\n');
            }
        });
    }
    let addr = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("no address printed: {}", log.lock().expect("log")));
    (child, addr, log)
}

/// What a call for a tenant was answered.
#[derive(Debug, Default)]
struct Answers {
    /// 200 with the guard's steer.
    steered: u64,
    /// 503 not ready / not admitted.
    not_ready: u64,
    /// 200 `null`: decided without the tenant's guard, for calls started
    /// after its directory appeared.
    unguarded_after: u64,
    /// 200 `null` for calls started before.
    unguarded_before: u64,
    /// Anything else.
    other: Vec<String>,
}

/// Calls `tenant`'s steering on `connections` connections until `stop`;
/// `appeared` is the number of the first call started after the
/// directory appeared (0 until then).
async fn hammer(
    url: String,
    tenant: &'static str,
    connections: usize,
    stop: Arc<AtomicBool>,
    started: Arc<AtomicU64>,
    appeared: Arc<AtomicU64>,
) -> Answers {
    let callers: Vec<_> = (0..connections)
        .map(|_| {
            let (url, stop, started, appeared) = (
                url.clone(),
                Arc::clone(&stop),
                Arc::clone(&started),
                Arc::clone(&appeared),
            );
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut a = Answers::default();
                let body = delete_for(tenant);
                while !stop.load(Ordering::SeqCst) {
                    let n = started.fetch_add(1, Ordering::SeqCst) + 1;
                    let after = {
                        let at = appeared.load(Ordering::SeqCst);
                        at != 0 && n >= at
                    };
                    let r = client.post(&url).json(&body).send().await;
                    let Ok(r) = r else {
                        a.other.push(format!("{r:?}"));
                        continue;
                    };
                    let status = r.status().as_u16();
                    let v: Value = r.json().await.unwrap_or(Value::Null);
                    match (status, &v) {
                        (200, Value::Null) if after => a.unguarded_after += 1,
                        (200, Value::Null) => a.unguarded_before += 1,
                        (200, v) if v["content"] == WHERE => a.steered += 1,
                        (503, _) => a.not_ready += 1,
                        _ => a.other.push(format!("{status} {v}")),
                    }
                }
                a
            })
        })
        .collect();
    let mut all = Answers::default();
    for c in callers {
        let a = c.await.expect("caller");
        all.steered += a.steered;
        all.not_ready += a.not_ready;
        all.unguarded_after += a.unguarded_after;
        all.unguarded_before += a.unguarded_before;
        all.other.extend(a.other);
    }
    all
}

/// A tenant directory holding `sql-guard`, renamed into `tenants/` of a
/// running `toolgate serve` while a client hammers that tenant: every
/// call started after the rename is answered 503 (not ready) until the
/// guard steers it — none is decided on the global chain alone (`200
/// null`). The same for a directory whose manifest is refused: after the
/// rename its calls are answered 503 (not admitted), never `null`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_renamed_into_a_running_serve_is_never_decided_without_its_guards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(plugins.join("tenants")).expect("mkdir");
    let staged = dir.path().join("staged");
    put(&staged.join("acme/sql-guard.wasm"), SQL_GUARD);
    put(&staged.join("bad/sql-guard.wasm"), SQL_GUARD);
    write(
        &staged.join("bad/toolgate.toml"),
        "[[plugin]]\nno_such_key = 1\n",
    );
    let (_server, addr, log) = serve_in(
        dir.path(),
        &["--plugins", &plugins.display().to_string(), "--no-cache"],
    );
    let url = format!("http://{addr}/v1/steering");
    for tenant in ["acme", "bad"] {
        let stop = Arc::new(AtomicBool::new(false));
        let (started, appeared) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let calls = tokio::spawn(hammer(
            url.clone(),
            tenant,
            4,
            Arc::clone(&stop),
            Arc::clone(&started),
            Arc::clone(&appeared),
        ));
        // Some calls before the rename: no directory, the global chain.
        let t0 = Instant::now();
        while started.load(Ordering::SeqCst) < 200 && t0.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        std::fs::rename(staged.join(tenant), plugins.join("tenants").join(tenant)).expect("rename");
        appeared.store(started.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
        // Until the directory has loaded and been answered for a while.
        let client = reqwest::Client::new();
        let loaded = tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                let r = client
                    .post(&url)
                    .json(&delete_for(tenant))
                    .send()
                    .await
                    .expect("call");
                let (status, v) = (r.status(), r.json::<Value>().await.expect("json"));
                let done = match tenant {
                    "acme" => v["content"] == WHERE,
                    _ => status == 503 && v.to_string().contains("not admitted"),
                };
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(
            loaded.await.is_ok(),
            "{tenant} never loaded: {}",
            log.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::SeqCst);
        let answers = calls.await.expect("hammer");
        eprintln!("{tenant}: {answers:?}");
        assert_eq!(answers.unguarded_after, 0, "{tenant}: {answers:?}");
        assert!(answers.unguarded_before > 0, "{tenant}: {answers:?}");
        assert!(answers.not_ready > 0, "{tenant}: {answers:?}");
        assert!(answers.other.is_empty(), "{tenant}: {answers:?}");
        if tenant == "acme" {
            assert!(answers.steered > 0, "{answers:?}");
        } else {
            assert_eq!(answers.steered, 0, "{answers:?}");
        }
    }
}

/// A tenant whose directory does not load whole — a manifest refused, a
/// component half-copied (truncated) — is not admitted: its calls are
/// answered not admitted, never decided on the global chain alone; once
/// its files are whole it serves, and from then on a file that fails
/// keeps its previous version serving.
#[tokio::test]
async fn a_tenant_that_has_not_loaded_whole_is_not_admitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A global guard that proceeds on everything: the chain alone answers.
    put(&dir.path().join("steering-only.wasm"), STEERING_ONLY);
    let guard = dir.path().join("tenants/acme/sql-guard.wasm");
    let bytes = std::fs::read(SQL_GUARD).expect("read");
    std::fs::create_dir_all(guard.parent().expect("parent")).expect("mkdir");
    std::fs::write(&guard, &bytes[..bytes.len() / 2]).expect("half a file");
    let manifest = dir.path().join("tenants/zeta/toolgate.toml");
    put(&dir.path().join("tenants/zeta/sql-guard.wasm"), SQL_GUARD);
    write(
        &manifest,
        "[[plugin]]\npath = \"sql-guard.wasm\"\nbogus = 1\n",
    );
    let reg = open(dir.path(), CompiledCache::disabled()).await;
    for (tenant, why) in [("acme", "sql-guard.wasm"), ("zeta", "bogus")] {
        match decide(&reg, tenant).await {
            Err(NotDecided::NotReady(NotReady::Refused { why: w, .. })) => {
                assert!(w.contains("has not loaded whole"), "{tenant}: {w}");
                assert!(w.contains(why), "{tenant}: {w}");
            }
            other => panic!("{tenant}: {other:?}"),
        }
    }
    // Whole now: both serve.
    std::fs::write(&guard, &bytes).expect("whole file");
    write(&manifest, "[[plugin]]\npath = \"sql-guard.wasm\"\n");
    reg.reload().await.expect("reload");
    for tenant in ["acme", "zeta"] {
        let v = decide(&reg, tenant).await.expect("decided");
        assert!(steered(&v), "{tenant}: {v:?}");
    }
    // Once served, a manifest refused keeps the previous chain serving.
    write(
        &manifest,
        "[[plugin]]\npath = \"sql-guard.wasm\"\nbogus = 1\n",
    );
    reg.reload().await.expect("reload");
    let v = decide(&reg, "zeta").await.expect("decided");
    assert!(steered(&v), "{v:?}");
}

/// A tenant directory that is refused by the listing (a symlink) is not
/// the global chain's either: its calls are answered not admitted, saying
/// why.
#[tokio::test]
async fn a_tenant_entry_refused_by_the_listing_is_not_admitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(&dir.path().join("steering-only.wasm"), STEERING_ONLY);
    put(&dir.path().join("elsewhere/sql-guard.wasm"), SQL_GUARD);
    std::fs::create_dir_all(dir.path().join("tenants")).expect("mkdir");
    std::os::unix::fs::symlink(
        dir.path().join("elsewhere"),
        dir.path().join("tenants/linked"),
    )
    .expect("symlink");
    let reg = open(dir.path(), CompiledCache::disabled()).await;
    match decide(&reg, "linked").await {
        Err(NotDecided::NotReady(NotReady::Refused { why, .. })) => {
            assert!(why.contains("not a symlink"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    // A tenant with no entry at all runs the global chain.
    let v = decide(&reg, "nobody").await.expect("decided");
    assert_eq!(v, toolgate::Verdict::Steering(None));
}

/// `Acme` is not `acme`: a request naming a tenant with a directory in
/// another case is refused (never the global chain alone, never the other
/// tenant's guards); a directory added whose name differs only by case
/// from a serving tenant's is refused, and the serving one keeps serving.
#[tokio::test]
async fn names_that_differ_only_by_case_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(&dir.path().join("tenants/acme/sql-guard.wasm"), SQL_GUARD);
    let reg = open(dir.path(), CompiledCache::disabled()).await;
    assert!(steered(&decide(&reg, "acme").await.expect("decided")));
    let refused = async |tenant: &str, says: &str| match decide(&reg, tenant).await {
        Err(NotDecided::NotReady(NotReady::Refused { why, .. })) => {
            assert!(why.contains(says), "{tenant}: {why}")
        }
        other => panic!("{tenant}: {other:?}"),
    };
    refused("Acme", "differs only by case from tenant `acme`").await;
    put(
        &dir.path().join("tenants/ACME/steering-only.wasm"),
        STEERING_ONLY,
    );
    let report = reg.reload().await.expect("reload");
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.path.ends_with("tenants/ACME")
                && e.message
                    .contains("differs only by case from tenant `acme`")),
        "{:?}",
        report.errors
    );
    assert!(steered(&decide(&reg, "acme").await.expect("decided")));
    refused("ACME", "differs only by case from tenant `acme`").await;
    assert!(!reg.plugin_set().tenants.contains_key("ACME"));
}

/// The global directory's refusals name the global directory's rule, not
/// a tenant's.
#[tokio::test]
async fn the_global_directorys_refusals_say_its_own_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("dir.wasm")).expect("mkdir");
    put(&dir.path().join("tenants/acme/sub.wasm/x"), SQL_GUARD);
    let reg = open(dir.path(), CompiledCache::disabled()).await;
    let errors = reg.plugin_set().errors.clone();
    let global = errors
        .iter()
        .find(|e| e.path.ends_with("dir.wasm"))
        .unwrap_or_else(|| panic!("{errors:?}"));
    assert!(!global.message.contains("tenant"), "{}", global.message);
    let tenant = errors
        .iter()
        .find(|e| e.path.ends_with("sub.wasm"))
        .unwrap_or_else(|| panic!("{errors:?}"));
    assert!(
        tenant.message.contains("in a tenant's directory"),
        "{}",
        tenant.message
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"missing.wasm\"\n",
    );
    let report = reg.reload().await.expect("reload");
    let e = report
        .errors
        .iter()
        .find(|e| e.message.contains("missing.wasm"))
        .unwrap_or_else(|| panic!("{:?}", report.errors));
    assert!(!e.message.contains("tenant"), "{}", e.message);
}

/// With room for two tenants, the two serving are admitted again after
/// each of five restarts, before a newcomer whose name sorts first — and
/// which loads as fast — that is the one refused (not admitted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_survives_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    // Room for the global share and two tenants' (512 + 2 × 320 MiB).
    write(
        &dir.path().join("toolgate.toml"),
        "[shares]\nglobal_memory_mib = 512\ntenant_memory_mib = 256\ntenant_code_mib = 64\n\
         memory_budget_mib = 1152\n",
    );
    put(&dir.path().join("tenants/zz1/sql-guard.wasm"), SQL_GUARD);
    let reg = open(dir.path(), CompiledCache::at(cache.path())).await;
    put(&dir.path().join("tenants/zz2/sql-guard.wasm"), SQL_GUARD);
    reg.reload().await.expect("reload");
    let serving = ["zz1", "zz2"];
    assert_eq!(reg.plugin_set().tenants.keys().collect::<Vec<_>>(), serving);
    drop(reg);
    for round in 0..5 {
        let newcomer = format!("a{round}");
        put(
            &dir.path()
                .join(format!("tenants/{newcomer}/sql-guard.wasm")),
            SQL_GUARD,
        );
        let reg = open(dir.path(), CompiledCache::at(cache.path())).await;
        let set = reg.plugin_set();
        assert_eq!(
            set.tenants.keys().collect::<Vec<_>>(),
            serving,
            "round {round}: {:?}",
            set.refused
        );
        for t in serving {
            assert!(steered(&decide(&reg, t).await.expect("decided")), "{t}");
        }
        match decide(&reg, &newcomer).await {
            Err(NotDecided::NotReady(NotReady::Refused { why, .. })) => {
                assert!(why.contains("no capacity left"), "{why}")
            }
            other => panic!("round {round}: {newcomer}: {other:?}"),
        }
        drop(set);
        drop(reg);
        std::fs::remove_dir_all(dir.path().join(format!("tenants/{newcomer}"))).expect("rm");
    }
}

/// `toolgate serve --plugins plugins` (relative, run in the plugin
/// directory's parent) reloads each directory on its own: a tenant
/// rewriting a file every 50 ms delays no other tenant's new guard, and
/// no change is taken for a change to every directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_plugins_path_reloads_per_directory() {
    // No dot in the path: a relative root under a dot-directory was worse
    // still (every event was taken as one in a hidden directory: no
    // reload at all).
    let dir = tempfile::Builder::new()
        .prefix("toolgate-relative")
        .tempdir()
        .expect("tempdir");
    let plugins = dir.path().join("plugins");
    put(&plugins.join("tenants/a/guard.wasm"), STEERING_ONLY);
    put(&plugins.join("tenants/b/keep.wasm"), STEERING_ONLY);
    let (_server, addr, log) = serve_in(dir.path(), &["--plugins", "plugins", "--no-cache"]);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let churn = {
        let (stop, writes) = (Arc::clone(&stop), Arc::clone(&writes));
        let file = plugins.join("tenants/a/guard.wasm");
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let n = writes.fetch_add(1, Ordering::SeqCst);
                let tmp = file.with_file_name(".guard.wasm.tmp");
                std::fs::copy(if n % 2 == 0 { SQL_GUARD } else { STEERING_ONLY }, &tmp)
                    .expect("copy");
                std::fs::rename(&tmp, &file).expect("rename");
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    while writes.load(Ordering::SeqCst) < 10 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let added = Instant::now();
    let tmp = plugins.join("tenants/b/.sql.wasm.tmp");
    std::fs::copy(SQL_GUARD, &tmp).expect("copy");
    std::fs::rename(&tmp, plugins.join("tenants/b/sql.wasm")).expect("rename");
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/steering");
    let live = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let r = client
                .post(&url)
                .json(&delete_for("b"))
                .send()
                .await
                .expect("call");
            if r.json::<Value>().await.expect("json")["content"] == WHERE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(live.await.is_ok(), "b's guard never went live");
    eprintln!(
        "b's guard live {} ms after it was added",
        added.elapsed().as_millis()
    );
    // The log line of the watcher's bound, were it reached, is written
    // before the reload it starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = log.lock().expect("log").clone();
    stop.store(true, Ordering::SeqCst);
    churn.join().expect("churn");
    assert!(
        !before.contains("directory=All"),
        "a change taken for one to every directory:\n{before}"
    );
    assert!(
        !before.contains("kept changing"),
        "b waited for the watcher's bound:\n{before}"
    );
}
