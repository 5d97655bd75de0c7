//! A fresh instance for every hook call: the `memo` guest counts its calls
//! in a static and keeps the previous call's id in memory it wrote, and
//! says what it found. Called many times through the host — on plain
//! instances, prepared ones and snapshots (made by `toolgate snapshot` and
//! at load) — it never sees a call before its own; every call also sees
//! its own `state`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::CompiledCache;
use toolgate::Depth;
use toolgate::event::Skip;
use toolgate::{Limits, Plugin, PluginSpec, Registry, RegistryOptions};
use toolgate::{SnapshotStatus, snapshot::default_warm_up};
use toolgate_tests::MEMO;

use crate::*;

/// Calls made of each kind of instance.
const CALLS: usize = 40;

/// What `memo` said it found, from a steering decision.
fn seen(d: &toolgate::Decision<Option<Skip>>) -> Value {
    assert_eq!(d.trace.len(), 1, "{:?}", d.trace);
    assert_eq!(d.trace[0].fault, None, "{:?}", d.trace);
    let skip = d.result.as_ref().expect("memo always skips");
    serde_json::from_str(&skip.content).expect("memo answers JSON")
}

/// Steering call `i` of a run: its own call id and state.
fn call(i: usize) -> (BeforeToolCallEvent, Value) {
    let mut event = steering("run_query", json!({"sql": "SELECT 1"}));
    event.call_id = format!("call-{i}");
    (event, json!({"turn": i, "user": {"id": i}}))
}

async fn load(engine: &Engine, path: &str, prepared: u32) -> Arc<Plugin> {
    let spec = PluginSpec {
        limits: Limits::default(),
        prepared: Depth::Fixed(prepared),
        ..PluginSpec::new(path)
    };
    Arc::new(Plugin::load(engine, spec).await.expect("memo loads"))
}

#[tokio::test]
async fn a_plain_instance_sees_no_earlier_call_at_any_seam() {
    let engine = engine();
    let memo = load(&engine, MEMO, 0).await;
    let chain = chain(&[&memo]);
    for i in 0..CALLS {
        let (event, state) = call(i);
        let d = chain.steering(&event, &state).await;
        assert_eq!(
            seen(&d),
            json!({"calls": 1, "last": null, "state": state}),
            "steering call {i}"
        );
        let mut event = dispatch("run_query", json!({}), &["run_query"]);
        event.call_id = format!("dispatch-{i}");
        let d = chain.rewrite(&event, &state).await;
        let rewritten = d.result.expect("memo rewrites");
        assert_eq!(
            Value::Object(rewritten.args),
            json!({"calls": 1, "last": null, "state": state}),
            "rewrite call {i}"
        );
    }
}

/// Waits (generously) until the engine has made `n` prepared instances
/// since it started.
async fn made_becomes(engine: &Engine, n: u64) {
    for _ in 0..6000 {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_instance_serves_one_call_and_keeps_nothing() {
    let engine = engine();
    let memo = load(&engine, MEMO, 2).await;
    let chain = chain(&[&memo]);
    made_becomes(&engine, 2).await;
    for (i, made) in (0..CALLS).zip(3..) {
        let (event, state) = call(i);
        let d = chain.steering(&event, &state).await;
        assert_eq!(
            seen(&d),
            json!({"calls": 1, "last": null, "state": state}),
            "call {i}"
        );
        // The call took a prepared instance (the plugin, idle, makes one
        // in its place: it never makes more than its depth), which no
        // other call gets.
        made_becomes(&engine, made).await;
    }
}

/// Every call of `chain` starts from the same state, the one its snapshot
/// froze: what the warm-up left, never an earlier call of this test's.
async fn each_call_starts_from_the_snapshot(chain: &Chain) {
    let mut first: Option<(Value, Value)> = None;
    for i in 0..CALLS {
        let (event, state) = call(i);
        let said = seen(&chain.steering(&event, &state).await);
        assert_eq!(said["state"], state, "call {i}");
        let found = (said["calls"].clone(), said["last"].clone());
        let last = found.1.as_str().unwrap_or_default();
        assert!(
            !last.starts_with("call-"),
            "call {i} saw call {last} before it: {said}"
        );
        match &first {
            None => {
                // The warm-up called it: a snapshot, not a plain instance.
                assert!(found.0.as_u64().is_some_and(|n| n > 1), "{said}");
                first = Some(found);
            }
            Some(first) => assert_eq!(&found, first, "call {i}"),
        }
    }
}

#[tokio::test]
async fn a_snapshot_starts_every_call_from_its_warm_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(MEMO).expect("read memo");
    let snap = toolgate::snapshot::snapshot(
        &engine(),
        Path::new(MEMO),
        &bytes,
        &default_warm_up(),
        &serde_json::json!({}),
    )
    .await
    .expect("memo snapshots");
    let path = dir.path().join("memo.wasm");
    std::fs::write(&path, snap).expect("write");
    let engine = engine();
    for prepared in [0, 2] {
        let memo = load(&engine, &path.display().to_string(), prepared).await;
        each_call_starts_from_the_snapshot(&chain(&[&memo])).await;
    }
}

#[tokio::test]
async fn a_snapshot_made_at_load_starts_every_call_from_its_warm_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(MEMO, dir.path().join("memo.wasm")).expect("copy");
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"memo.wasm\"\nsnapshot = true\n",
    )
    .expect("write");
    let options = RegistryOptions {
        cache: CompiledCache::disabled(),
        ..RegistryOptions::default()
    };
    let reg = Registry::open_with(engine(), dir.path(), options)
        .await
        .expect("registry opens");
    let set = reg.plugin_set();
    assert!(set.errors.is_empty(), "{:?}", set.errors);
    let memo = &set.global_plugins.first().expect("memo loads").plugin;
    assert_eq!(memo.snapshot_status(), &SnapshotStatus::Snapshotted);
    each_call_starts_from_the_snapshot(&set.chain(None)).await;
}
