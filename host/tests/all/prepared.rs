//! Prepared instances: made while a plugin is idle, each serving exactly
//! one call, none made under sustained load, all dropped with their plugin.

use std::time::Duration;

use serde_json::json;
use toolgate::Depth;
use toolgate::{Fault, Limits, OnError, Plugin, PluginSpec};
use toolgate_tests::{HOSTILE, SQL_GUARD, STATEFUL};

use crate::*;

/// Waits until the engine holds `n` prepared instances (60 s: a hang
/// guard, not a measure).
async fn live_becomes(engine: &Engine, n: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if engine.prepared_slots().live() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "the engine holds {} prepared instances, not {n}",
        engine.prepared_slots().live()
    );
}

async fn load(engine: &Engine, path: &str, prepared: u32) -> Arc<Plugin> {
    let spec = PluginSpec {
        limits: Limits::default(),
        on_error: OnError::Skip,
        prepared: Depth::Fixed(prepared),
        ..PluginSpec::new(path)
    };
    Arc::new(Plugin::load(engine, spec).await.expect("loads"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_made_while_idle_and_each_serves_one_call() {
    let engine = engine();
    let hostile = load(&engine, HOSTILE, 2).await;
    live_becomes(&engine, 2).await;
    let chain = chain(&[&hostile]);

    // A call that traps on a prepared instance leaves the next one clean:
    // that one is another instance, never the trapped one reused.
    let d = chain
        .steering(&steering("trap", json!({})), &no_state())
        .await;
    assert_eq!(d.trace[0].fault, Some(Fault::Unreachable), "{:?}", d.trace);
    let d = chain
        .steering(&steering("ok", json!({})), &no_state())
        .await;
    assert_eq!(d.trace[0].fault, None, "{:?}", d.trace);
    assert_eq!(d.result, None);
    // Both were taken; two are made again once the plugin is idle.
    live_becomes(&engine, 2).await;

    // Dropping the plugin drops what it prepared.
    drop(chain);
    drop(hostile);
    live_becomes(&engine, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_are_made_under_sustained_load_or_with_depth_zero() {
    let engine = engine();
    let guard = load(&engine, SQL_GUARD, 1).await;
    let none = load(&engine, SQL_GUARD, 0).await;
    live_becomes(&engine, 1).await;
    let chain = chain(&[&guard, &none]);
    // Back to back: the first call takes the prepared instance, and while
    // calls keep coming next to none is made (every call instantiates its
    // own, as without prepared instances; only a pause of a millisecond —
    // this thread descheduled on a busy machine — lets one be made).
    // Counted in calls, not time: the same on a fast or a slow machine.
    let made = engine.prepared_slots().made();
    let calls = 400;
    for _ in 0..calls {
        let d = chain
            .steering(
                &steering("run_query", json!({"sql": "DELETE FROM t"})),
                &no_state(),
            )
            .await;
        assert!(d.result.is_some());
    }
    let made = engine.prepared_slots().made() - made;
    assert!(
        made * 10 <= calls,
        "{made} instances prepared during {calls} back-to-back calls"
    );
    live_becomes(&engine, 1).await;
    // ... and stays there: the depth-0 plugin never makes one.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(engine.prepared_slots().live(), 1);
}

/// A registry splits the room for prepared instances evenly between its
/// directories: a tenant whose plugins want far more than the engine has
/// room for holds its part and no more, and another tenant's plugin still
/// gets all it keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_directory_holds_its_part_of_the_prepared_instances() {
    use toolgate::CompiledCache;
    use toolgate::{Registry, RegistryOptions};
    // 40 slots: 16 global + 2 tenants × 4 + 1 probe slot leave 15 for
    // prepared instances, 5 for each of the 3 directories.
    let engine = Engine::new(EngineConfig {
        max_instances: 40,
        long_lane_priority: TEST_LANE,
        ..EngineConfig::default()
    })
    .expect("engine");
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("tenants/a");
    let b = dir.path().join("tenants/b");
    std::fs::create_dir_all(&a).expect("mkdir");
    std::fs::create_dir_all(&b).expect("mkdir");
    let mut manifest = String::new();
    for n in 1..=3 {
        std::fs::copy(SQL_GUARD, a.join(format!("g{n}.wasm"))).expect("copy");
        manifest.push_str(&format!(
            "[[plugin]]\npath = \"g{n}.wasm\"\nprepared = 8\nsnapshot = false\n\n"
        ));
    }
    std::fs::write(a.join("toolgate.toml"), manifest).expect("write");
    std::fs::copy(SQL_GUARD, b.join("g.wasm")).expect("copy");
    std::fs::write(
        b.join("toolgate.toml"),
        "[[plugin]]\npath = \"g.wasm\"\nprepared = 2\nsnapshot = false\n",
    )
    .expect("write");
    let options = RegistryOptions {
        cache: CompiledCache::disabled(),
        ..RegistryOptions::default()
    };
    let reg = Registry::open_with(engine.clone(), dir.path(), options)
        .await
        .expect("registry opens");
    assert!(
        reg.plugin_set().errors.is_empty(),
        "{:?}",
        reg.plugin_set().errors
    );
    // a's 5 of the 24 it wants, b's 2; and it stays there.
    live_becomes(&engine, 7).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(engine.prepared_slots().live(), 7);
    assert_eq!(engine.prepared_slots().room(), 15);
}

/// A global guard's copies serving two tenants share its prepared
/// instances (one pool per plugin), so an instance made while it served
/// one tenant serves the other's next call: nothing tenant-bound may be in
/// it. Instantiation binds only what every copy shares (the plugin's name,
/// config and limits); the call's state, account and outbound HTTP are
/// attached when the call takes the instance. `stateful` adds 1 to a
/// tenant-scoped counter and answers the sum: each tenant counts 1, 2, 3
/// on instances the other tenant's calls had prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_instance_serves_whichever_tenant_calls_with_that_tenants_state() {
    let engine = engine();
    let spec = PluginSpec {
        name: "counter".into(),
        config: json!({"ops": [{"op": "add", "scope": "tenant", "key": "n", "delta": 1}]}),
        prepared: Depth::Fixed(1),
        ..PluginSpec::new(STATEFUL)
    };
    let global = Arc::new(Plugin::load(&engine, spec).await.expect("loads"));
    let tenants = [
        ("a", chain(&[&global]).serving("a")),
        ("b", chain(&[&global]).serving("b")),
    ];
    let mut made = engine.prepared_slots().made();
    made_becomes(&engine, made + 1).await;
    made += 1;
    for round in 1..=3 {
        for (tenant, chain) in &tenants {
            let d = chain
                .steering(&steering("run_query", json!({})), &no_state())
                .await;
            assert_eq!(d.trace[0].fault, None, "{:?}", d.trace);
            let content = d.result.map(|s| s.content);
            assert_eq!(
                content.as_deref(),
                Some(format!("[{round}]").as_str()),
                "tenant {tenant}'s call {round} counted its own tenant's calls"
            );
            // It took the instance prepared before it (after the other
            // tenant's call); the next is made once the plugin is idle.
            made_becomes(&engine, made + 1).await;
            made += 1;
        }
    }
}

/// Waits (generously) until the engine has made `n` prepared instances
/// since it started.
async fn made_becomes(engine: &Engine, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if engine.prepared_slots().made() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "the engine made {} prepared instances, not {n}",
        engine.prepared_slots().made()
    );
}
