//! Snapshots: a pre-initialised guard answers exactly as the original,
//! from a warmer start, with each call's own configuration; a guard whose
//! warm-up faults is refused with the file and the seam.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::{Error, Limits, OnError, Outcome, Plugin};

use toolgate::Event;
use toolgate::snapshot::default_warm_up;

use crate::contract::{WIT, componentize, steering_core};
use crate::*;

/// Snapshots the component at `path` into `dir`; returns the new file.
async fn snapshot_into(dir: &Path, path: &str) -> String {
    let bytes = std::fs::read(path).expect("read the component");
    let snap = toolgate::snapshot::snapshot(
        &engine(),
        Path::new(path),
        &bytes,
        &default_warm_up(),
        &serde_json::json!({}),
    )
    .await
    .expect("the guard snapshots");
    assert_ne!(snap, bytes, "a snapshot is a new component");
    let out = dir.join("snap.wasm");
    std::fs::write(&out, snap).expect("write");
    out.display().to_string()
}

async fn load(engine: &toolgate::Engine, path: &str, config: Value) -> Arc<Plugin> {
    plugin_with(engine, "g", path, config, Limits::default(), OnError::Skip).await
}

#[tokio::test]
async fn a_snapshot_answers_as_the_original_for_less_fuel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine();
    let plain = load(&engine, toolgate_tests::SQL_GUARD, json!({})).await;
    let snap = load(
        &engine,
        &snapshot_into(dir.path(), toolgate_tests::SQL_GUARD).await,
        json!({}),
    )
    .await;
    let events = sql_guard_events();
    for event in &events {
        let a = chain(&[&plain]).steering(event, &no_state()).await;
        let b = chain(&[&snap]).steering(event, &no_state()).await;
        same_answer_less_fuel(&a, &b, event);
    }
}

#[tokio::test]
async fn a_snapshot_reads_each_calls_configuration_not_the_warm_ups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = engine();
    let path = snapshot_into(dir.path(), toolgate_tests::HOSTILE).await;
    // Warmed up with `{}`; loaded with a configuration it must now see.
    let configured = load(&engine, &path, json!({"attack": "config", "n": 7})).await;
    let d = chain(&[&configured])
        .steering(&steering("x", json!({})), &no_state())
        .await;
    let content = d.result.expect("the config attack steers").content;
    assert_eq!(
        serde_json::from_str::<Value>(&content).expect("json"),
        json!({"attack": "config", "n": 7})
    );
    // Every call is still a fresh instance: a fault does not carry over.
    let trapping = load(&engine, &path, json!({"attack": "trap"})).await;
    for _ in 0..2 {
        let d = chain(&[&trapping])
            .steering(&steering("x", json!({})), &no_state())
            .await;
        assert_eq!(d.trace[0].outcome, Outcome::Fault);
    }
    let fine = load(&engine, &path, json!({})).await;
    let d = chain(&[&fine])
        .steering(&steering("ok", json!({})), &no_state())
        .await;
    assert_eq!(d.trace[0].outcome, Outcome::Proceed);
}

#[tokio::test]
async fn a_guard_whose_warm_up_faults_is_refused_naming_the_seam() {
    // A valid component whose steering reply points outside its memory.
    let bytes = componentize(WIT, "steering-guard", steering_core("0.1.0", -16, ""));
    let e = toolgate::snapshot::snapshot(
        &engine(),
        Path::new("bad-reply.wasm"),
        &bytes,
        &default_warm_up(),
        &serde_json::json!({}),
    )
    .await
    .expect_err("the warm-up faults");
    let msg = e.to_string();
    assert!(matches!(e, Error::Snapshot { .. }), "{e:?}");
    // The default warm-up: routing and rewrite (not exported: skipped), then steering.
    assert!(
        msg.starts_with("bad-reply.wasm: cannot snapshot: warm-up call 3 (steering):"),
        "{msg}"
    );
    assert!(msg.contains("invalid-result"), "{msg}");
}

#[tokio::test]
async fn what_is_no_guard_cannot_be_snapshotted() {
    let e = toolgate::snapshot::snapshot(
        &engine(),
        Path::new("junk.wasm"),
        b"junk",
        &[],
        &serde_json::json!({}),
    )
    .await
    .expect_err("junk");
    assert!(
        e.to_string().starts_with("junk.wasm: cannot snapshot:"),
        "{e}"
    );
}

#[tokio::test]
async fn a_hostile_warm_up_is_refused_and_the_calls_are_the_callers() {
    let bytes = std::fs::read(toolgate_tests::HOSTILE).expect("read");
    let warm = |tool: &str| {
        vec![
            (Event::Steering(steering("ok", json!({}))), json!({})),
            (Event::Steering(steering(tool, json!({}))), json!({})),
        ]
    };
    // The second call spins: out of fuel, named with its number and seam.
    let e = toolgate::snapshot::snapshot(
        &engine(),
        Path::new("h.wasm"),
        &bytes,
        &warm("loop"),
        &serde_json::json!({}),
    )
    .await
    .expect_err("the warm-up spins");
    let msg = e.to_string();
    assert!(
        msg.starts_with("h.wasm: cannot snapshot: warm-up call 2 (steering):"),
        "{msg}"
    );
    assert!(msg.contains("out-of-fuel"), "{msg}");
    // A panic in a warm-up call is refused the same way.
    let e = toolgate::snapshot::snapshot(
        &engine(),
        Path::new("h.wasm"),
        &bytes,
        &warm("panic"),
        &serde_json::json!({}),
    )
    .await
    .expect_err("the warm-up panics");
    assert!(e.to_string().contains("unreachable"), "{e}");
    // No warm-up at all: the start-up alone is captured, and it still answers.
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = toolgate::snapshot::snapshot(
        &engine(),
        Path::new("h.wasm"),
        &bytes,
        &[],
        &serde_json::json!({}),
    )
    .await
    .expect("start-up only");
    let path = dir.path().join("h.wasm");
    std::fs::write(&path, snap).expect("write");
    let p = load(
        &engine(),
        &path.display().to_string(),
        json!({"attack": "config"}),
    )
    .await;
    let d = chain(&[&p])
        .steering(&steering("x", json!({})), &no_state())
        .await;
    assert_eq!(d.trace[0].outcome, Outcome::Skip);
}

#[tokio::test]
async fn a_guard_that_needs_its_config_is_snapshotted_with_the_one_it_will_load_with() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tool-call-limit.wasm");
    std::fs::copy(toolgate_tests::TOOL_CALL_LIMIT, &path).expect("copy");
    let snapshot = |config: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
        c.arg("snapshot").arg(&path);
        if let Some(config) = config {
            c.args(["--config", config]);
        }
        c.output().expect("run")
    };
    let refused = snapshot(None);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("refuses its config: config: set run_limit, thread_limit or both"),
        "{said}"
    );
    let bad = snapshot(Some("[1]"));
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--config: must be a JSON object"));
    let done = snapshot(Some(r#"{"tool": "send_email", "run_limit": 1}"#));
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let original = std::fs::read(toolgate_tests::TOOL_CALL_LIMIT).expect("read");
    assert_ne!(
        std::fs::read(&path).expect("read"),
        original,
        "replaced by its snapshot"
    );
    // The snapshot loads with that config and counts as the original.
    let engine = engine();
    let p = load(
        &engine,
        path.to_str().expect("utf-8"),
        json!({"tool": "send_email", "run_limit": 1}),
    )
    .await;
    let c = chain(&[&p]);
    let email = steering("send_email", json!({}));
    assert_eq!(c.steering(&email, &no_state()).await.result, None);
    assert_eq!(
        c.steering(&email, &no_state())
            .await
            .result
            .map(|s| s.content),
        Some("Tool call limit exceeded. Do not call 'send_email' again.".into())
    );
}
