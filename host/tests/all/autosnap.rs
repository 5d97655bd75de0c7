//! Snapshots at load (`snapshot = "auto" | true | false`): a guard whose
//! runtime gains is pre-initialised when loaded and answers exactly as the
//! plain one; `false` and a Rust guard stay plain; a warm-up that faults
//! loads the plain component and says why, once; a restart finds the
//! snapshot in the compiled cache and runs no warm-up; a component that
//! already is a snapshot is not snapshotted again.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toolgate::CompiledCache;
use toolgate::{IssueKind, LoadLimits};
use toolgate::{Registry, RegistryOptions};
use toolgate::{SnapshotMode, SnapshotStatus, snapshot::default_warm_up, snapshot::inspect};
use toolgate_tests::{HOSTILE, SQL_GUARD};

use crate::*;

/// `wasm` with a top-level custom section `name` holding `data` appended.
fn with_section(mut wasm: Vec<u8>, name: &str, data: &[u8]) -> Vec<u8> {
    let mut payload = vec![u8::try_from(name.len()).expect("short name")];
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data);
    wasm.push(0);
    let mut n = payload.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            wasm.push(byte);
            break;
        }
        wasm.push(byte | 0x80);
    }
    wasm.extend_from_slice(&payload);
    wasm
}

/// The Rust SQL guard marked as built by Go (Go's `go:buildid` section):
/// what `"auto"` snapshots, at the cost of a Rust guard.
fn go_marked_sql_guard() -> Vec<u8> {
    let bytes = std::fs::read(SQL_GUARD).expect("read the guard");
    with_section(bytes, "go:buildid", b"test")
}

/// A plugin directory holding `guard.wasm` (`bytes`) and, when given, a
/// manifest for it ending with `extra` lines.
fn dir_with(bytes: &[u8], extra: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("guard.wasm"), bytes).expect("write");
    if let Some(extra) = extra {
        let manifest = format!("[[plugin]]\nname = \"guard\"\npath = \"guard.wasm\"\n{extra}\n");
        std::fs::write(dir.path().join("toolgate.toml"), manifest).expect("write");
    }
    dir
}

async fn open(dir: &Path, cache: Option<&Path>) -> Registry {
    let options = RegistryOptions {
        cache: cache.map_or_else(CompiledCache::disabled, CompiledCache::at),
        load: LoadLimits {
            probe_timeout: Duration::from_millis(500),
            ..LoadLimits::default()
        },
        ..Default::default()
    };
    Registry::open_with(engine(), dir, options)
        .await
        .expect("registry opens")
}

fn status(reg: &Registry) -> SnapshotStatus {
    let set = reg.plugin_set();
    let plugin = &set
        .global_plugins
        .first()
        .expect("one plugin loaded")
        .plugin;
    plugin.snapshot_status().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_snapshots_a_go_guard_at_load_and_it_answers_as_plain() {
    let bytes = go_marked_sql_guard();
    assert_eq!(inspect(&bytes).runtime, Some("Go"));
    let (auto, plain) = (
        dir_with(&bytes, None),
        dir_with(&bytes, Some("snapshot = false")),
    );
    let cache = tempfile::tempdir().expect("tempdir");
    let auto = open(auto.path(), Some(cache.path())).await;
    let plain = open(plain.path(), Some(cache.path())).await;
    assert_eq!(status(&auto), SnapshotStatus::Snapshotted);
    assert_eq!(status(&plain), SnapshotStatus::Plain, "snapshot = false");
    assert_eq!(auto.snapshot_warm_ups(), 1);
    assert_eq!(plain.snapshot_warm_ups(), 0);
    assert!(
        auto.plugin_set().errors.is_empty(),
        "{:?}",
        auto.plugin_set().errors
    );
    let described = serde_json::to_value(auto.plugin_set().describe()).expect("json");
    assert_eq!(
        described["global"][0]["snapshot"],
        json!({"state": "snapshotted"})
    );
    let events = sql_guard_events();
    for event in &events {
        let a = plain
            .plugin_set()
            .chain(None)
            .steering(event, &no_state())
            .await;
        let b = auto
            .plugin_set()
            .chain(None)
            .steering(event, &no_state())
            .await;
        same_answer_less_fuel(&a, &b, event);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_finds_the_snapshot_in_the_cache_and_runs_no_warm_up() {
    let dir = dir_with(&go_marked_sql_guard(), None);
    let cache = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path(), Some(cache.path())).await;
    assert_eq!(first.snapshot_warm_ups(), 1);
    assert_eq!(status(&first), SnapshotStatus::Snapshotted);
    drop(first);
    let again = open(dir.path(), Some(cache.path())).await;
    assert_eq!(status(&again), SnapshotStatus::Snapshotted);
    assert_eq!(
        again.snapshot_warm_ups(),
        0,
        "the restart reused the snapshot"
    );
    let stats = again.cache_stats();
    assert_eq!((stats.hits, stats.misses), (1, 0), "{stats:?}");
    // A settings change re-links the snapshot already made.
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\nname = \"guard\"\npath = \"guard.wasm\"\ntimeout_ms = 300\n",
    )
    .expect("write");
    let report = again.reload().await.expect("reload");
    assert_eq!(report.loaded.len(), 1, "{report:?}");
    assert_eq!(again.snapshot_warm_ups(), 0);
    assert_eq!(status(&again), SnapshotStatus::Snapshotted);
    // Without a cache (`--no-cache`) every load warms up.
    let uncached = open(dir.path(), None).await;
    assert_eq!(uncached.snapshot_warm_ups(), 1);
    assert_eq!(uncached.cache_stats().hits, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_leaves_a_rust_guard_plain_and_true_forces_it() {
    let bytes = std::fs::read(SQL_GUARD).expect("read");
    assert_eq!(inspect(&bytes).runtime, None);
    let auto = dir_with(&bytes, None);
    let reg = open(auto.path(), None).await;
    assert_eq!(status(&reg), SnapshotStatus::Plain);
    assert_eq!(reg.snapshot_warm_ups(), 0);
    let forced = dir_with(&bytes, Some("snapshot = true"));
    let reg = open(forced.path(), None).await;
    assert_eq!(status(&reg), SnapshotStatus::Snapshotted);
    assert_eq!(reg.snapshot_warm_ups(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_that_faults_loads_plain_and_says_why_once() {
    let bytes = std::fs::read(HOSTILE).expect("read");
    for (attack, extra, why) in [
        ("trap", "", "unreachable"),
        // Fuel enough for minutes: the warm-up's deadline (the probe's
        // cap) stops it.
        ("loop", "fuel = 1_000_000_000_000\n", "deadline"),
        ("alloc", "memory_mib = 16\n", "memory"),
    ] {
        let dir = dir_with(
            &bytes,
            Some(&format!(
                "snapshot = true\n{extra}[plugin.config]\nattack = \"{attack}\""
            )),
        );
        let reg = open(dir.path(), None).await;
        let SnapshotStatus::Failed { reason } = status(&reg) else {
            panic!("{attack}: {:?}", status(&reg));
        };
        assert!(reason.contains("warm-up call"), "{attack}: {reason}");
        assert!(reason.contains(why), "{attack}: {why:?} not in {reason}");
        let set = reg.plugin_set();
        let issue = set.errors.first().expect("the failure is reported");
        assert_eq!(issue.kind, IssueKind::Snapshot, "{attack}");
        assert!(
            issue.message.contains("loaded without a snapshot"),
            "{}",
            issue.message
        );
        let described = serde_json::to_value(set.describe()).expect("json");
        assert_eq!(
            described["global"][0]["snapshot"]["state"], "failed",
            "{attack}"
        );
        // The plain component serves (and the attack runs per call).
        assert_eq!(set.global.plugins().len(), 1, "{attack}");
        // Not tried again while bytes and settings stay the same, nor after
        // a change of a setting the warm-up does not see (the plugin is
        // loaded again, its warm-up's failure remembered).
        assert_eq!(reg.snapshot_warm_ups(), 1, "{attack}");
        reg.reload().await.expect("reload");
        let manifest = dir.path().join("toolgate.toml");
        let text = std::fs::read_to_string(&manifest).expect("read");
        let text = text.replace(
            "snapshot = true\n",
            "snapshot = true\non_error = \"deny\"\n",
        );
        std::fs::write(&manifest, text).expect("write");
        let report = reg.reload().await.expect("reload");
        assert_eq!(report.loaded.len(), 1, "{attack}: {report:?}");
        assert_eq!(reg.snapshot_warm_ups(), 1, "{attack}");
        assert_eq!(reg.plugin_set().errors.len(), 1, "{attack}: still reported");
        assert!(
            matches!(status(&reg), SnapshotStatus::Failed { .. }),
            "{attack}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_not_snapshotted_again() {
    let bytes = std::fs::read(SQL_GUARD).expect("read");
    let snap = toolgate::snapshot::snapshot(
        &engine(),
        Path::new(SQL_GUARD),
        &bytes,
        &default_warm_up(),
        &serde_json::json!({}),
    )
    .await
    .expect("snapshots");
    assert!(inspect(&snap).snapshot, "a snapshot is marked");
    assert!(!inspect(&bytes).snapshot);
    // Even marked as Go, and with `snapshot = true`.
    let snap = with_section(snap, "go:buildid", b"test");
    for extra in [None, Some("snapshot = true")] {
        let dir = dir_with(&snap, extra);
        let reg = open(dir.path(), None).await;
        assert_eq!(status(&reg), SnapshotStatus::Prebuilt, "{extra:?}");
        assert_eq!(reg.snapshot_warm_ups(), 0);
    }
    assert_eq!(
        toolgate::snapshot::plan(SnapshotMode::Off, &snap),
        Some(SnapshotStatus::Plain)
    );
}
