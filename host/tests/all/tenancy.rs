//! Untrusted tenants: the operator's ceilings on a tenant's limits, fair
//! shares of instances and memory, and quarantine of guards that keep
//! faulting.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::CompiledCache;
use toolgate::event::Skip;
use toolgate::{Decision, Fault, Registry, RegistryOptions};
use toolgate_tests::{HOSTILE, NO_EMAIL, SQL_GUARD};

use crate::*;

fn put(dir: &Path, files: &[(&str, &str)]) {
    for (name, src) in files {
        let dest = dir.join(name);
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::copy(src, dest).expect("copy");
    }
}

fn write(to: &Path, text: &str) {
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    let tmp = to.with_file_name(".toolgate.toml.tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, to).expect("rename");
}

async fn open(dir: &Path) -> Arc<Registry> {
    let options = RegistryOptions {
        cache: CompiledCache::disabled(),
        ..RegistryOptions::default()
    };
    Arc::new(
        Registry::open_with(engine(), dir, options)
            .await
            .expect("registry opens"),
    )
}

async fn steer_as(
    reg: &Registry,
    tenant: Option<&str>,
    tool: &str,
    args: Value,
) -> Decision<Option<Skip>> {
    let set = reg.plugin_set();
    set.chain(tenant)
        .steering(&steering(tool, args), &no_state())
        .await
}

const WHERE: &str = "Add a WHERE clause before running this query.";

#[tokio::test]
async fn a_tenant_manifest_above_a_ceiling_is_refused_and_its_previous_chain_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("hostile.wasm", HOSTILE),
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/hostile.wasm", HOSTILE),
        ],
    );
    // The operator's ceilings; a global plugin is not bound by them.
    write(
        &dir.path().join("toolgate.toml"),
        "[ceilings]\ntimeout_ms = 100\nmemory_mib = 32\n\n[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 1000\n",
    );
    let tenant_manifest = dir.path().join("tenants/a/toolgate.toml");
    write(
        &tenant_manifest,
        "[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 50\n",
    );
    let reg = open(dir.path()).await;
    let set = reg.plugin_set();
    assert_eq!(set.errors.len(), 0, "{:?}", set.errors);
    assert_eq!(set.policy.ceilings.timeout, Duration::from_millis(100));
    assert_eq!(
        set.global_plugins[0].plugin.limits().timeout,
        Duration::from_millis(1000)
    );
    let own = |set: &toolgate::PluginSet, t: &str| set.tenants[t].plugins()[0].limits().clone();
    assert_eq!(own(&set, "a").timeout, Duration::from_millis(50));
    // A tenant without a manifest: the defaults, lowered to the ceilings.
    assert_eq!(own(&set, "b").timeout, Duration::from_millis(100));
    assert_eq!(own(&set, "b").memory_bytes, 32 << 20);

    // Above the ceiling: refused with file, line and key; the previous
    // chain keeps serving.
    write(
        &tenant_manifest,
        "[[plugin]]\npath = \"hostile.wasm\"\n\ntimeout_ms = 600000\n",
    );
    let report = reg.reload().await.expect("reload");
    let message = &report.errors[0].message;
    assert!(
        message.contains("tenants/a/toolgate.toml:4: key `plugin[1].timeout_ms`: 600000 is above the operator's ceiling"),
        "{message}"
    );
    assert_eq!(
        own(&reg.plugin_set(), "a").timeout,
        Duration::from_millis(50)
    );
    let d = steer_as(&reg, Some("a"), "ok", json!({})).await;
    assert_eq!(d.trace.len(), 2, "{:?}", d.trace);
    assert_eq!(d.trace[1].plugin, "a/hostile");

    // Every limit key is held to its ceiling, in [defaults] too.
    for (text, key) in [
        ("[defaults]\nmemory_mib = 64\n", "defaults.memory_mib"),
        (
            "[[plugin]]\npath = \"hostile.wasm\"\nfuel = 9223372036854775807\n",
            "plugin[1].fuel",
        ),
        (
            "[[plugin]]\npath = \"hostile.wasm\"\nmax_return_kib = 8192\n",
            "plugin[1].max_return_kib",
        ),
        (
            "[[plugin]]\npath = \"hostile.wasm\"\nhost_calls = 4294967295\n",
            "plugin[1].host_calls",
        ),
        (
            "[[plugin]]\npath = \"hostile.wasm\"\nlog_kib = 1048576\n",
            "plugin[1].log_kib",
        ),
    ] {
        write(&tenant_manifest, text);
        let report = reg.reload().await.expect("reload");
        assert!(
            report.errors[0].message.contains(&format!("key `{key}`")),
            "{text}: {:?}",
            report.errors
        );
    }
    // A tenant may not set the operator's tables.
    write(&tenant_manifest, "[ceilings]\ntimeout_ms = 600000\n");
    let report = reg.reload().await.expect("reload");
    assert!(
        report.errors[0].message.contains("key `ceilings`"),
        "{:?}",
        report.errors
    );
    assert_eq!(
        own(&reg.plugin_set(), "a").timeout,
        Duration::from_millis(50)
    );
}

/// Tenant `a` runs a guard that spins for 2 s and floods it at 64
/// concurrent calls — twice the engine's 32 pool slots. Every call of
/// tenant `b` and of the global chain still runs every guard, with the
/// right verdict and no fault; `a`'s own calls fault only with
/// `deadline` (its on_error) or are not decided (`share-exhausted`,
/// `overloaded`), never `capacity`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_exhausts_only_its_own_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("sql-guard.wasm", SQL_GUARD),
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[ceilings]\ntimeout_ms = 2000\nfuel = 9223372036854775807\n\n\
         [shares]\nglobal_instances = 4\ntenant_instances = 2\nwait_ms = 20\n\n\
         [quarantine]\nfaults = 0\n\n\
         [[plugin]]\npath = \"sql-guard.wasm\"\non_error = \"deny\"\n",
    );
    write(
        &dir.path().join("tenants/a/toolgate.toml"),
        "[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 2000\nfuel = 9223372036854775807\nconfig = { attack = \"loop\" }\n",
    );
    let reg = open(dir.path()).await;
    assert_eq!(
        reg.plugin_set().errors.len(),
        0,
        "{:?}",
        reg.plugin_set().errors
    );

    let flood: Vec<_> = (0..64)
        .map(|_| {
            let reg = Arc::clone(&reg);
            tokio::spawn(async move {
                steer_as(
                    &reg,
                    Some("a"),
                    "run_query",
                    json!({"sql": "SELECT 1 WHERE 1=1"}),
                )
                .await
            })
        })
        .collect();
    // Until the flood holds all of a's share (an event, not a time).
    let full = tokio::time::timeout(Duration::from_secs(60), async {
        while reg.plugin_set().accounts.tenants["a"].usage().instances < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert!(full.await.is_ok(), "a's flood never filled its share");
    let mut most = 0;
    for i in 0..40 {
        let (tenant, tool, sql) = match i % 4 {
            0 => (Some("b"), "run_query", "DELETE FROM users"),
            1 => (Some("b"), "send_email", ""),
            2 => (None, "run_query", "DELETE FROM users"),
            _ => (Some("b"), "run_query", "SELECT 1 WHERE id = 1"),
        };
        let d = steer_as(&reg, tenant, tool, json!({ "sql": sql })).await;
        for entry in &d.trace {
            assert_eq!(entry.fault, None, "call {i} ({tenant:?}): {entry:?}");
        }
        match i % 4 {
            0 | 2 => assert_eq!(d.result.expect("steers").content, WHERE, "call {i}"),
            1 => assert!(!d.result.expect("cancels").is_error, "call {i}"),
            _ => assert_eq!(d.result, None, "call {i}"),
        }
        let usage = reg.plugin_set().accounts.tenants["a"].usage();
        most = most.max(usage.instances);
    }
    assert!(most <= 2, "tenant a had {most} instances at once");
    let mut deadlines = 0;
    for task in flood {
        let d = task.await.expect("task");
        for entry in &d.trace {
            match entry.fault {
                None => {}
                Some(Fault::Deadline) => deadlines += 1,
                // Its own flood kept it waiting: not decided.
                Some(Fault::ShareExhausted) => {}
                // Its spinner, stopped at its wall-clock bound before it had
                // run its 2 s (a busy machine): it ran.
                Some(Fault::Overloaded) => deadlines += 1,
                Some(other) => panic!("tenant a's own call faulted with {other}: {entry:?}"),
            }
        }
    }
    assert!(deadlines >= 1, "a's guard ran: {deadlines}");
    assert!(reg.plugin_set().accounts.tenants["a"].usage().refused > 0);
}

/// A memory-bomb guard at 16 concurrent calls: the tenant's instances
/// never commit more than its memory share at once (two 64 MiB bombs in
/// 128 MiB; the others wait their turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_at_concurrency_commits_no_more_than_its_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(dir.path(), &[("tenants/m/hostile.wasm", HOSTILE)]);
    write(
        &dir.path().join("toolgate.toml"),
        "[ceilings]\nmemory_mib = 64\nfuel = 9223372036854775807\ntimeout_ms = 5000\n\n\
         [shares]\ntenant_instances = 8\ntenant_memory_mib = 128\nwait_ms = 30000\n\n\
         [quarantine]\nfaults = 0\n",
    );
    write(
        &dir.path().join("tenants/m/toolgate.toml"),
        "[[plugin]]\npath = \"hostile.wasm\"\nmemory_mib = 64\nfuel = 9223372036854775807\ntimeout_ms = 5000\nconfig = { attack = \"alloc\" }\n",
    );
    let reg = open(dir.path()).await;
    assert_eq!(
        reg.plugin_set().errors.len(),
        0,
        "{:?}",
        reg.plugin_set().errors
    );
    let account = Arc::clone(&reg.plugin_set().accounts.tenants["m"]);
    let bombs: Vec<_> = (0..16)
        .map(|_| {
            let reg = Arc::clone(&reg);
            tokio::spawn(async move { steer_as(&reg, Some("m"), "x", json!({})).await })
        })
        .collect();
    let mut most_mib = 0;
    while bombs.iter().any(|b| !b.is_finished()) {
        most_mib = most_mib.max(account.usage().memory_mib);
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    for bomb in bombs {
        let d = bomb.await.expect("task");
        assert_eq!(d.trace[0].fault, Some(Fault::Memory), "{:?}", d.trace);
    }
    assert!(most_mib <= 128, "committed {most_mib} MiB at once");
    assert!(most_mib > 0, "the sampling saw the bombs run");
    // Big instances are torn down off the serving threads (reaper.rs);
    // their share comes back once they are.
    let given_back = tokio::time::timeout(Duration::from_secs(10), async {
        while account.usage().memory_mib > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert!(
        given_back.await.is_ok(),
        "all given back: {:?}",
        account.usage()
    );
}

#[tokio::test]
async fn tenants_beyond_the_pool_or_the_memory_budget_are_refused_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tenants/a/no-email.wasm", NO_EMAIL),
            ("tenants/b/no-email.wasm", NO_EMAIL),
            ("tenants/c/no-email.wasm", NO_EMAIL),
        ],
    );
    let manifest = dir.path().join("toolgate.toml");
    write(
        &manifest,
        "[shares]\nglobal_memory_mib = 512\ntenant_memory_mib = 256\ntenant_code_mib = 64\n\
         memory_budget_mib = 1152\n",
    );
    let reg = open(dir.path()).await;
    let set = reg.plugin_set();
    // Two fit; which two is the order they finished loading in (the
    // directories load at once), never their names.
    assert_eq!(set.tenants.len(), 2, "{:?}", set.errors);
    let (refused, why) = set.refused.iter().next().expect("one refused");
    assert!(!set.tenants.contains_key(refused));
    assert!(
        set.errors[0]
            .message
            .contains(&format!("no capacity left for tenant `{refused}`")),
        "{:?}",
        set.errors
    );
    assert!(
        why.contains("tenant share(s) of 320 MiB (memory and compiled code) need 1472 MiB; the memory budget is 1152 MiB"),
        "{why}"
    );
    let serving: Vec<String> = set.tenants.keys().cloned().collect();
    drop(set);
    // The engine has 32 slots: 16 global + 2 × 8 + 1 probe slot do not fit;
    // one of the two serving keeps serving.
    write(
        &manifest,
        "[shares]\nglobal_instances = 16\ntenant_instances = 8\n",
    );
    let report = reg.reload().await.expect("reload");
    let kept: Vec<String> = reg.plugin_set().tenants.keys().cloned().collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(serving.contains(&kept[0]), "{kept:?} {serving:?}");

    assert!(
        report.errors.iter().any(|e| e.message.contains("32")),
        "{:?}",
        report.errors
    );
    // A share that cannot hold one instance at the ceiling is refused.
    write(&manifest, "[shares]\ntenant_memory_mib = 64\n");
    let report = reg.reload().await.expect("reload");
    assert!(
        report.errors[0]
            .message
            .contains("key `shares.tenant_memory_mib`"),
        "{:?}",
        report.errors
    );
}

/// A tenant with more plugins than `[shares] tenant_plugins` is not
/// loaded, and none of its files is read; one whose plugins compile to
/// more than `tenant_code_mib` is not loaded either. Either way its
/// previous plugins keep serving and the other tenants load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_plugins_or_its_code_keeps_its_previous_plugins() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tenants/a/no-email.wasm", NO_EMAIL),
            ("tenants/a/sql-guard.wasm", SQL_GUARD),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
    );
    let manifest = dir.path().join("toolgate.toml");
    write(&manifest, "[shares]\ntenant_plugins = 2\n");
    let reg = open(dir.path()).await;
    let names = |reg: &Registry| -> Vec<String> {
        reg.plugin_set().tenants["a"]
            .plugins()
            .iter()
            .map(|p| p.name().to_string())
            .collect()
    };
    let before = ["a/no-email", "a/sql-guard"];
    assert_eq!(names(&reg), before, "{:?}", reg.plugin_set().errors);

    // A third file, not even a component: not read, so not reported.
    let junk = dir.path().join("tenants/a/junk.wasm");
    std::fs::write(&junk, b"not a component").expect("write");
    let report = reg.reload().await.expect("reload");
    let over = share_issue(
        &report.errors,
        "3 plugins; a tenant may have at most 2 ([shares] tenant_plugins)",
    );
    assert_eq!(over.path, dir.path().join("tenants/a"));
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert_eq!(names(&reg), before);
    assert!(reg.plugin_set().tenants.contains_key("b"));
    assert_eq!(
        steer_as(
            &reg,
            Some("a"),
            "run_query",
            json!({"sql": "DELETE FROM t"})
        )
        .await
        .result
        .map(|s| s.content),
        Some(WHERE.to_string()),
        "a's previous plugins serve"
    );

    // In place of the junk, a guard with 1 MiB of code or more: over a
    // code share of a's previous code rounded up, a's load is refused.
    std::fs::write(&junk, crate::tenant_files::compile_bomb(CODE_LINES)).expect("write");
    let code = |reg: &Registry| -> usize {
        let set = reg.plugin_set();
        set.tenants["a"]
            .plugins()
            .iter()
            .map(|p| p.code_bytes())
            .sum()
    };
    let previous_mib = code(&reg).div_ceil(1 << 20);
    write(
        &manifest,
        &format!("[shares]\ntenant_plugins = 3\ntenant_code_mib = {previous_mib}\n"),
    );
    let report = reg.reload().await.expect("reload");
    let over = share_issue(
        &report.errors,
        &format!("a tenant's may hold at most {previous_mib} MiB ([shares] tenant_code_mib)"),
    );
    assert_eq!(over.path, dir.path().join("tenants/a"));
    assert_eq!(names(&reg), before);
    assert!(report.loaded.is_empty(), "{:?}", report.loaded);

    // With the key gone from the global manifest the default is back (not
    // the value it last set), and there is room for it: it loads.
    write(&manifest, "[shares]\ntenant_plugins = 3\n");
    let report = reg.reload().await.expect("reload");
    assert_eq!(
        names(&reg),
        ["a/junk", "a/no-email", "a/sql-guard"],
        "{:?}",
        report.errors
    );
    assert!(code(&reg) >= 1 << 20, "{} bytes of code", code(&reg));
}

/// The one `share` issue whose message says `what`.
fn share_issue<'a>(errors: &'a [toolgate::LoadIssue], what: &str) -> &'a toolgate::LoadIssue {
    let issue = errors
        .iter()
        .find(|e| e.message.contains(what))
        .unwrap_or_else(|| panic!("`{what}` reported: {errors:?}"));
    assert_eq!(issue.kind, toolgate::IssueKind::Share, "{issue:?}");
    issue
}

/// Lines of [`crate::tenant_files::compile_bomb`] that compile to more
/// than 1 MiB of code.
const CODE_LINES: usize = 8_000;

/// A guard that faults 3 times in the window is quarantined: its on_error
/// (deny) applies without running it, visibly in /v1/plugins and
/// /metrics; after the cool-down a probe that passes restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_that_keeps_faulting_is_quarantined_then_probed() {
    use toolgate::Metrics;
    use toolgate::server::{self, ServerConfig};

    let dir = tempfile::tempdir().expect("tempdir");
    put(dir.path(), &[("hostile.wasm", HOSTILE)]);
    write(
        &dir.path().join("toolgate.toml"),
        "[quarantine]\nfaults = 3\nwindow_ms = 60000\ncooldown_ms = 2000\n\n\
         [[plugin]]\npath = \"hostile.wasm\"\non_error = \"deny\"\n",
    );
    let reg = open(dir.path()).await;
    let router = server::router(
        Arc::clone(&reg),
        Arc::new(Metrics::new()),
        ServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let call = async |tool: &str| -> Value {
        client
            .post(format!("{base}/v1/steering?trace=1"))
            .json(&json!({"event": {"run_id": "r", "tool_name": tool, "call_id": "c", "args": {}}}))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("JSON")
    };
    let get = async |path: &str| -> String {
        client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("request")
            .text()
            .await
            .expect("text")
    };
    let health = async || -> Value {
        let listed: Value = serde_json::from_str(&get("/v1/plugins").await).expect("JSON");
        listed["global"][0]["health"].clone()
    };
    assert_eq!(health().await["state"], "ok");
    for _ in 0..3 {
        let body = call("trap").await;
        assert_eq!(body["trace"][0]["fault"], "unreachable", "{body}");
    }
    let h = health().await;
    assert_eq!(h["state"], "quarantined", "{h}");
    assert_eq!(h["quarantines"], 1);
    // Not run: on_error = "deny" applies to a call that would proceed.
    let body = call("ok").await;
    assert_eq!(body["trace"][0]["outcome"], "fault", "{body}");
    assert_eq!(body["trace"][0]["fault"], "quarantined", "{body}");
    assert_eq!(body["trace"][0]["fuel_used"], 0, "{body}");
    assert_eq!(body["result"]["action"], "skip", "{body}");
    let metrics = get("/metrics").await;
    assert!(
        metrics.contains("toolgate_plugin_quarantined{plugin=\"hostile\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("cause=\"quarantined\"} 1"), "{metrics}");
    // After the cool-down the next call is the probe; it passes.
    let probing = async || {
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while health().await["state"] != "probing" {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        assert!(waited.await.is_ok(), "never probing: {}", health().await);
    };
    probing().await;
    let body = call("ok").await;
    assert_eq!(body["trace"][0]["outcome"], "proceed", "{body}");
    assert_eq!(body["result"], Value::Null);
    let h = health().await;
    assert_eq!(h["state"], "ok", "{h}");
    assert_eq!(h["quarantines"], 1);
    let metrics = get("/metrics").await;
    assert!(
        metrics.contains("toolgate_plugin_quarantined{plugin=\"hostile\"} 0"),
        "{metrics}"
    );
    // A probe that faults quarantines it again.
    for _ in 0..3 {
        call("trap").await;
    }
    probing().await;
    let body = call("trap").await;
    assert_eq!(
        body["trace"][0]["fault"], "unreachable",
        "the probe ran: {body}"
    );
    let h = health().await;
    assert_eq!(h["state"], "quarantined", "{h}");
    assert_eq!(h["quarantines"], 3);
    let _ = stop.send(());
    task.await.expect("task").expect("served");
}

#[test]
fn list_shows_health_policy_and_shares() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("hostile.wasm", HOSTILE),
            ("tenants/a/no-email.wasm", NO_EMAIL),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[ceilings]\ntimeout_ms = 150\n\n[quarantine]\nfaults = 7\n\n[[plugin]]\npath = \"hostile.wasm\"\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["list", "--no-cache", "--plugins"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed["global"][0]["health"]["state"], "ok", "{listed}");
    assert_eq!(listed["tenants"]["a"][0]["health"]["quarantines"], 0);
    assert_eq!(listed["tenants"]["a"][0]["limits"]["timeout_ms"], 150);
    assert_eq!(listed["policy"]["ceilings"]["timeout_ms"], 150);
    assert_eq!(listed["policy"]["quarantine"]["faults"], 7);
    assert_eq!(listed["shares"]["tenants"]["a"]["instances_max"], 4);
    assert_eq!(listed["shares"]["global"]["instances_max"], 16);
}

/// Spinning guards take turns in the long-call lane, account by account:
/// with a lane one call wide, tenant `a`'s three spinners and tenant `c`'s
/// one never run more than one at a time, `c` gets about as much of the
/// lane as all of `a`'s together — so its one spinner reaches its run-time
/// deadline before any of `a`'s, which share the rest three ways (by call,
/// all four would get a quarter and end together) — and a quick call of
/// tenant `b` never waits for a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_guards_take_turns_tenant_by_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No guard runs for `a` or `c` before their spinners: neither has used
    // any CPU, so both are within their part and their long calls share
    // one set of the lane's threads (see `turns`).
    put(
        dir.path(),
        &[
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/sql-guard.wasm", SQL_GUARD),
            ("tenants/c/hostile.wasm", HOSTILE),
        ],
    );
    let spinner =
        "[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 400\nfuel = 9223372036854775807\n";
    write(
        &dir.path().join("toolgate.toml"),
        "[ceilings]\ntimeout_ms = 400\nfuel = 9223372036854775807\n\n[quarantine]\nfaults = 0\n",
    );
    write(&dir.path().join("tenants/a/toolgate.toml"), spinner);
    write(&dir.path().join("tenants/c/toolgate.toml"), spinner);
    let engine = toolgate::Engine::new(toolgate::EngineConfig {
        max_instances: 32,
        long_lane: 1,
        long_lane_priority: crate::TEST_LANE,
        ..toolgate::EngineConfig::default()
    })
    .expect("engine");
    let options = RegistryOptions {
        cache: CompiledCache::disabled(),
        ..RegistryOptions::default()
    };
    let reg = Arc::new(
        Registry::open_with(engine.clone(), dir.path(), options)
            .await
            .expect("registry opens"),
    );
    assert_eq!(
        reg.plugin_set().errors.len(),
        0,
        "{:?}",
        reg.plugin_set().errors
    );

    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spin = |tenant: &'static str| {
        let (reg, order) = (Arc::clone(&reg), Arc::clone(&order));
        tokio::spawn(async move {
            let d = steer_as(&reg, Some(tenant), "loop", json!({})).await;
            order
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(tenant);
            d
        })
    };
    let spinners: Vec<_> = ["a", "a", "a", "c"].into_iter().map(spin).collect();
    let mut most_running = 0;
    let mut most_waiting = 0;
    // Until one spinner runs and another waits for its turn (60 s: a hang
    // guard); then quick calls beside them.
    let queued = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let usage = engine.long_lane().usage();
            most_running = most_running.max(usage.running);
            most_waiting = most_waiting.max(usage.waiting);
            if usage.running >= 1 && usage.waiting >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    assert!(queued.await.is_ok(), "{:?}", engine.long_lane().usage());
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let usage = engine.long_lane().usage();
        most_running = most_running.max(usage.running);
        most_waiting = most_waiting.max(usage.waiting);
        // A quick call is never held up by a turn.
        let d = steer_as(
            &reg,
            Some("b"),
            "run_query",
            json!({"sql": "DELETE FROM users"}),
        )
        .await;
        assert_eq!(d.result.expect("steers").content, WHERE);
    }
    assert_eq!(most_running, 1, "one long call at a time");
    assert!(most_waiting >= 1, "the others waited for their turn");

    let mut fuel = Vec::new();
    for task in spinners {
        let d = task.await.expect("task");
        let entry = d.trace.last().expect("the spinner ran");
        // Its run-time deadline; or, on a machine too busy to give the lane
        // the CPU, its wall-clock bound first.
        assert!(
            matches!(entry.fault, Some(Fault::Deadline | Fault::Overloaded)),
            "{entry:?}"
        );
        fuel.push(entry.fuel_used);
    }
    let order = order
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let (a, c) = (&fuel[..3], fuel[3]);
    let a_most = a.iter().copied().max().unwrap_or(0);
    // By account, `c`'s one spinner runs its deadline out first; where none
    // could (all stopped at the same bound) it burnt about three times as
    // much as each of `a`'s. By call, neither.
    assert!(
        order.first() == Some(&"c") || c > a_most.saturating_mul(2),
        "turns are not fair between tenants: spinners ended in the order {order:?}, \
         c burnt {c} fuel, a {a:?}"
    );
    // Every turn comes back; a call given up on past its bound (on a busy
    // machine) gives its turn back once the lane has dropped it.
    let turns_back = tokio::time::timeout(Duration::from_secs(60), async {
        while engine.long_lane().usage().running > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert!(turns_back.await.is_ok(), "{:?}", engine.long_lane().usage());
}

/// A tenant whose calls make a global guard fault quarantines that guard
/// for its own calls only: another tenant's calls, and calls with no
/// tenant, still run it. `/v1/plugins` names the account it is
/// quarantined for.
#[tokio::test]
async fn a_tenant_that_trips_a_global_guard_quarantines_it_for_itself_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("hostile.wasm", HOSTILE),
            ("tenants/a/no-email.wasm", NO_EMAIL),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[quarantine]\nfaults = 3\nwindow_ms = 60000\ncooldown_ms = 60000\n\n\
         [[plugin]]\npath = \"hostile.wasm\"\non_error = \"deny\"\n",
    );
    let reg = open(dir.path()).await;
    for _ in 0..3 {
        let d = steer_as(&reg, Some("a"), "trap", json!({})).await;
        assert_eq!(d.trace[0].fault, Some(Fault::Unreachable), "{:?}", d.trace);
    }
    let d = steer_as(&reg, Some("a"), "ok", json!({})).await;
    assert_eq!(d.trace[0].fault, Some(Fault::Quarantined), "{:?}", d.trace);
    assert!(d.result.is_some(), "a's own calls are denied");
    for tenant in [Some("b"), None] {
        let d = steer_as(&reg, tenant, "ok", json!({})).await;
        assert_eq!(d.trace[0].fault, None, "{tenant:?}: {:?}", d.trace);
        assert_eq!(d.result, None, "{tenant:?} proceeds");
    }
    let set = reg.plugin_set();
    let listed = serde_json::to_value(set.describe()).expect("JSON");
    let health = &listed["global"][0]["health"];
    assert_eq!(health["state"], "quarantined", "{health}");
    assert_eq!(health["accounts"]["a"]["state"], "quarantined", "{health}");
    assert!(health["accounts"].get("b").is_none(), "{health}");
    // Reloading keeps a's quarantine.
    reg.reload().await.expect("reloads");
    let d = steer_as(&reg, Some("a"), "ok", json!({})).await;
    assert_eq!(d.trace[0].fault, Some(Fault::Quarantined), "{:?}", d.trace);
}

/// A tenant's guards write at most its log budget a second: lines beyond
/// it are dropped and counted while its calls go on, the log says so, and
/// another tenant's lines are not touched.
#[tokio::test]
async fn a_tenant_s_guard_log_is_held_to_its_budget_and_no_one_else_s() {
    let (kept, _log) = capture(tracing::Level::WARN);
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/hostile.wasm", HOSTILE),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[shares]\ntenant_log_kib_per_s = 100\n",
    );
    let reg = open(dir.path()).await;
    // 10 calls of 60 lines of 1000 bytes: 600,000 bytes against a bucket
    // of 102,400 refilled at 102,400 a second.
    let started = Instant::now();
    for _ in 0..10 {
        let d = steer_as(&reg, Some("a"), "log-warn", json!({})).await;
        assert_eq!(d.trace[0].fault, None, "the calls go on: {:?}", d.trace);
    }
    let earned = 102_400 + started.elapsed().as_millis() * 103;
    let d = steer_as(&reg, Some("b"), "log-warn", json!({})).await;
    assert_eq!(d.trace[0].fault, None, "{:?}", d.trace);
    let text = kept.text();
    let lines_of = |plugin: &str| {
        text.lines()
            .filter(|l| l.contains(&format!("plugin=\"{plugin}\"")))
            .filter(|l| l.contains(&"w".repeat(1000)))
            .count()
    };
    let (a, b) = (lines_of("a/hostile"), lines_of("b/hostile"));
    assert!(a >= 102, "a's first second's worth is written: {a} lines");
    assert!(
        (a as u128) * 1000 <= earned,
        "{a} lines of a's written, more than the {earned} bytes it earned"
    );
    assert_eq!(b, 60, "b's lines are all written");
    let set = reg.plugin_set();
    let shares = set.describe().shares;
    assert_eq!(
        shares.tenants["a"].log_dropped_bytes,
        (600 - a as u64) * 1000
    );
    assert_eq!(shares.tenants["b"].log_dropped_bytes, 0);
    assert_eq!(shares.tenants["a"].log_kib_per_s, 100);
    let warned = text
        .lines()
        .filter(|l| l.contains("tenant_log_kib_per_s") && l.contains("`a`"))
        .count();
    assert_eq!(warned, 1, "said once, naming the tenant:\n{text}");
}

/// The host's own lines about a tenant's calls — a fault on every call,
/// with quarantine off — are held to the tenant's log budget too: a
/// tenant whose guard traps on every call cannot flood the log, the log
/// says lines are dropped, naming the tenant, and another tenant's fault
/// lines are all written.
#[tokio::test]
async fn the_host_s_lines_about_a_tenant_s_faults_are_held_to_its_log_budget() {
    let (kept, _log) = capture(tracing::Level::WARN);
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tenants/a/hostile.wasm", HOSTILE),
            ("tenants/b/hostile.wasm", HOSTILE),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[shares]\ntenant_log_kib_per_s = 1\n\n[quarantine]\nfaults = 0\n",
    );
    let reg = open(dir.path()).await;
    for _ in 0..200 {
        let d = steer_as(&reg, Some("a"), "trap", json!({})).await;
        assert_eq!(d.trace[0].fault, Some(Fault::Unreachable), "{:?}", d.trace);
    }
    for _ in 0..3 {
        let d = steer_as(&reg, Some("b"), "trap", json!({})).await;
        assert_eq!(d.trace[0].fault, Some(Fault::Unreachable), "{:?}", d.trace);
    }
    let text = kept.text();
    let faults_of = |plugin: &str| {
        text.lines()
            .filter(|l| l.contains("guard faulted") && l.contains(&format!("plugin=\"{plugin}\"")))
            .count()
    };
    let (a, b) = (faults_of("a/hostile"), faults_of("b/hostile"));
    // 1 KiB a second, each line counted at 160 bytes and its detail: a
    // handful of the 200, however fast they came.
    assert!((1..200).contains(&a), "{a} of a's 200 fault lines written");
    assert_eq!(b, 3, "b's fault lines are all written");
    assert!(
        text.lines()
            .any(|l| l.contains("tenant_log_kib_per_s") && l.contains("`a`")),
        "the log says a's lines are dropped:\n{text}"
    );
    let set = reg.plugin_set();
    assert!(set.describe().shares.tenants["a"].log_dropped_bytes > 0);
}

/// Tenant `a` keeps both cores busy with plain, quick calls — nothing
/// hostile anywhere — while tenant `b`'s own sql-guard gets DELETEs whose
/// SQL is 512 KiB long (a long generated query), so each of its calls runs
/// for milliseconds: long calls, on an engine with the default (idle) lane.
/// Not one of `b`'s DELETEs is approved as if its guard had said nothing,
/// its guard is never quarantined, and it is consulted: another tenant's
/// ordinary load never turns `b`'s policy off. (At `SCHED_IDLE`, `b`'s long
/// calls got no CPU beside the flood, ran into their deadlines, and five of
/// those quarantined `b`'s guard: its DELETEs were approved.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_plain_load_never_turns_a_guard_off() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use toolgate::NotDecided;
    use toolgate::{DecideRequest, Event, Verdict};

    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tenants/a/sql-guard.wasm", SQL_GUARD),
            ("tenants/b/sql-guard.wasm", SQL_GUARD),
        ],
    );
    write(
        &dir.path().join("tenants/b/toolgate.toml"),
        "[[plugin]]\npath = \"sql-guard.wasm\"\ntimeout_ms = 100\n",
    );
    let options = RegistryOptions {
        cache: CompiledCache::disabled(),
        ..RegistryOptions::default()
    };
    let engine = toolgate::Engine::new(toolgate::EngineConfig {
        max_instances: 32,
        ..toolgate::EngineConfig::default()
    })
    .expect("engine");
    let reg = Arc::new(
        Registry::open_with(engine, dir.path(), options)
            .await
            .expect("registry opens"),
    );
    let request = |tenant: &str, sql: &str| DecideRequest {
        event: Event::Steering(steering("run_query", json!({ "sql": sql }))),
        state: no_state(),
        tenant: Some(tenant.try_into().expect("tenant name")),
    };

    let stop = Arc::new(AtomicBool::new(false));
    let plain = Arc::new(AtomicU64::new(0));
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let (reg, stop, plain) = (Arc::clone(&reg), Arc::clone(&stop), Arc::clone(&plain));
            let select = request("a", "SELECT * FROM users WHERE id = 1");
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if select.decide(&reg.plugin_set()).await.is_ok() {
                        plain.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    while plain.load(Ordering::Relaxed) < 1000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let delete = request(
        "b",
        &format!("DELETE FROM users /* {} */", "x".repeat(512 << 10)),
    );
    let (mut steered, mut not_decided) = (0, 0);
    for i in 0..12 {
        match delete.decide(&reg.plugin_set()).await {
            Ok(d) => match d.result {
                Verdict::Steering(Some(skip)) => {
                    assert_eq!(skip.content, WHERE, "call {i}");
                    steered += 1;
                }
                other => panic!(
                    "b's DELETE {i} was approved unguarded: {other:?} {:?}",
                    d.trace
                ),
            },
            Err(NotDecided::Unavailable { fault, .. }) => {
                assert_eq!(fault, Fault::Overloaded, "call {i}");
                not_decided += 1;
            }
            Err(busy) => panic!("b's call {i} refused: {busy}"),
        }
    }
    let flooded = plain.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.await.expect("flood task");
    }
    let set = reg.plugin_set();
    let guard = &set.tenants["b"].plugins()[0];
    assert_eq!(
        guard.health().quarantines,
        0,
        "b's guard was quarantined: {:?}",
        guard.health()
    );
    assert!(
        steered > not_decided,
        "b's guard was consulted on {steered} of 12 calls ({not_decided} not decided)"
    );
    assert!(flooded > 1000, "a's flood ran: {flooded} calls");
}

/// With the memory budget full, a tenant added whose name sorts first is
/// refused — its calls answered not ready, never decided without its
/// guards — and the tenants serving keep serving; a tenant removed frees
/// its share for the newcomer at the next reload.
#[tokio::test]
async fn a_newcomer_that_does_not_fit_never_evicts_a_serving_tenant() {
    use toolgate::NotReady;
    use toolgate::{DecideRequest, NotDecided};
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tenants/t01/sql-guard.wasm", SQL_GUARD),
            ("tenants/t02/sql-guard.wasm", SQL_GUARD),
        ],
    );
    // Room for the global share and two tenants' (512 + 2 × 320 MiB).
    write(
        &dir.path().join("toolgate.toml"),
        "[shares]\nglobal_memory_mib = 512\ntenant_memory_mib = 256\ntenant_code_mib = 64\n\
         memory_budget_mib = 1152\n",
    );
    let reg = open(dir.path()).await;
    assert_eq!(
        reg.plugin_set().tenants.keys().collect::<Vec<_>>(),
        ["t01", "t02"]
    );
    let delete = |tenant: &str| {
        let body = json!({
            "event": {"run_id": "r", "call_id": "c", "tool_name": "run_query", "args": {"sql": "DELETE FROM users"}},
            "tenant": tenant,
        });
        DecideRequest::parse(toolgate::Seam::Steering, body.to_string().as_bytes())
            .expect("request")
    };
    let steered = |d: &Decision<toolgate::Verdict>| matches!(&d.result, toolgate::Verdict::Steering(Some(skip)) if skip.content == WHERE);
    // A newcomer that sorts first.
    put(dir.path(), &[("tenants/t00/sql-guard.wasm", SQL_GUARD)]);
    let report = reg.reload().await.expect("reload");
    let set = reg.plugin_set();
    assert_eq!(
        set.tenants.keys().collect::<Vec<_>>(),
        ["t01", "t02"],
        "{:?}",
        report.errors
    );
    let why = &set.refused["t00"];
    assert!(why.contains("no capacity left for tenant `t00`"), "{why}");
    assert!(why.contains("memory_budget_mib"), "{why}");
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.message.contains("tenant `t00`")),
        "{:?}",
        report.errors
    );
    // Those serving still steer; the newcomer is answered not ready.
    for t in ["t01", "t02"] {
        let d = delete(t).decide(&set).await.expect("decided");
        assert!(steered(&d), "{t}: {:?}", d.result);
    }
    match delete("t00").decide(&set).await {
        Err(NotDecided::NotReady(NotReady::Refused { tenant, why })) => {
            assert_eq!(tenant, "t00");
            assert!(why.contains("memory_budget_mib"), "{why}");
        }
        other => panic!("t00's call was not refused: {other:?}"),
    }
    // Reloading again changes nothing: who serves keeps serving.
    reg.reload().await.expect("reload");
    assert_eq!(
        reg.plugin_set().tenants.keys().collect::<Vec<_>>(),
        ["t01", "t02"]
    );
    // A tenant removed frees its share.
    std::fs::remove_dir_all(dir.path().join("tenants/t02")).expect("rm");
    reg.reload().await.expect("reload");
    let set = reg.plugin_set();
    assert_eq!(set.tenants.keys().collect::<Vec<_>>(), ["t00", "t01"]);
    assert!(set.refused.is_empty(), "{:?}", set.refused);
    let d = delete("t00").decide(&set).await.expect("decided");
    assert!(steered(&d), "{:?}", d.result);
}

#[tokio::test]
async fn a_global_guards_state_follows_the_tenant_the_call_is_for_with_or_without_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT),
            ("tenants/dir/sql-guard.wasm", SQL_GUARD),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"tool-call-limit.wasm\"\n[plugin.config]\nthread_limit = 1\n",
    );
    let engine = engine();
    let options = RegistryOptions {
        cache: CompiledCache::disabled(),
        ..RegistryOptions::default()
    };
    let reg = Arc::new(
        Registry::open_with(engine.clone(), dir.path(), options)
            .await
            .expect("registry opens"),
    );
    let search = |tenant: Option<&'static str>, run: &'static str| {
        let reg = Arc::clone(&reg);
        async move {
            let mut event = steering("search", json!({}));
            event.run_id = run.into();
            reg.plugin_set()
                .chain(tenant)
                .steering(&event, &json!({"thread_id": "T"}))
                .await
                .result
                .is_none()
        }
    };
    // Each tenant's first search of conversation T proceeds — with a
    // directory (`dir`), without one (`acme`, `zeta`), and without a
    // tenant — and its second is refused: nobody's count is another's.
    for tenant in [Some("acme"), Some("zeta"), Some("dir"), None] {
        assert!(search(tenant, "r1").await, "{tenant:?}: first proceeds");
    }
    for tenant in [Some("acme"), Some("zeta"), Some("dir"), None] {
        assert!(!search(tenant, "r2").await, "{tenant:?}: second refused");
    }
    // `Some("")` names no tenant: it is the call without one.
    assert!(!search(Some(""), "r3").await, "the tenant-less count");
    let state = engine.state();
    for tenant in ["acme", "zeta", "dir", ""] {
        let filter = toolgate::state::StateFilter {
            tenant: tenant.into(),
            ..Default::default()
        };
        let entries = state.entries(&filter).await.expect("entries");
        assert_eq!(
            entries
                .iter()
                .map(|e| (&*e.id.tenant, &*e.value))
                .collect::<Vec<_>>(),
            [(tenant, "1")],
            "{tenant:?}: its own count, kept at 1 (the refused calls gave theirs back)"
        );
    }
}

/// An observer's faults are the guard's own: they count toward its
/// quarantine like a fault at any seam, for the tenant whose events made
/// it fault. Tenant `a`'s events trap a global observer three times: its
/// steering is then quarantined for `a` (its `on_error = "deny"` answers),
/// and still runs for `b`.
#[tokio::test]
async fn observe_faults_count_toward_the_guard_s_quarantine_for_that_tenant_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        dir.path(),
        &[
            ("observer.wasm", toolgate_tests::OBSERVER),
            ("tenants/a/no-email.wasm", NO_EMAIL),
            ("tenants/b/no-email.wasm", NO_EMAIL),
        ],
    );
    write(
        &dir.path().join("toolgate.toml"),
        "[quarantine]\nfaults = 3\nwindow_ms = 60000\ncooldown_ms = 60000\n\n\
         [[plugin]]\npath = \"observer.wasm\"\non_error = \"deny\"\n\
         [plugin.config]\ntrap = true\n",
    );
    let reg = open(dir.path()).await;
    let set = reg.plugin_set();
    let event = toolgate::LifecycleEvent::from_value(
        toolgate::LifecycleHook::AgentStart,
        json!({"query": "q", "run_id": "run-1"}),
    )
    .expect("event");
    for _ in 0..3 {
        assert_eq!(
            set.chain(Some("a")).observe(&event),
            toolgate::Observed::Queued
        );
    }
    let until = Instant::now() + Duration::from_secs(60);
    while reg.engine().observe_faults() < 3 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(reg.engine().observe_faults(), 3);
    let d = steer_as(&reg, Some("a"), "search", json!({})).await;
    assert_eq!(d.trace[0].fault, Some(Fault::Quarantined), "{:?}", d.trace);
    assert!(d.result.is_some(), "a's calls are denied");
    let d = steer_as(&reg, Some("b"), "search", json!({})).await;
    assert_eq!(d.trace[0].fault, None, "{:?}", d.trace);
    assert_eq!(
        d.result.map(|s| s.content).as_deref(),
        Some("seen=0 hooks="),
        "b's calls still run the observer's steering"
    );
}
