//! The example guards in `plugins/rust` do what their READMEs say.

use serde_json::{Value, json};
use toolgate::event::Skip;
use toolgate::{Outcome, Seam};
use toolgate_tests::{HIDE_ADMIN_TOOLS, NO_EMAIL, QUERY_LIMIT, RESULT_AUDIT, SQL_GUARD};

use crate::*;

#[tokio::test]
async fn sql_guard_is_the_seeds_sql_guard() {
    let e = engine();
    let p = plugin(&e, "sql-guard", SQL_GUARD, json!({})).await;
    assert_eq!(p.seams(), vec![Seam::Steering]);
    let c = chain(&[&p]);
    let steer = Some(Skip {
        content: "Add a WHERE clause before running this query.".into(),
        is_error: true,
    });
    for sql in ["DELETE FROM users", "update t set a = 1", "select * from t"] {
        let d = c
            .steering(&steering("run_query", json!({ "sql": sql })), &no_state())
            .await;
        assert_eq!(d.result, steer, "{sql}");
        assert!(d.trace[0].fuel_used > 0);
    }
    for sql in [
        "DELETE FROM users WHERE id = 7",
        "select * from t where a = 1",
    ] {
        let d = c
            .steering(&steering("run_query", json!({ "sql": sql })), &no_state())
            .await;
        assert_eq!(d.result, None, "{sql}");
    }
    let d = c
        .steering(&steering("search", json!({"q": "x"})), &no_state())
        .await;
    assert_eq!(d.result, None);
    // A 1 MiB argument is fine.
    let big = format!("SELECT * FROM t WHERE a = '{}'", "x".repeat(1 << 20));
    let d = c
        .steering(&steering("run_query", json!({ "sql": big })), &no_state())
        .await;
    assert_eq!(d.trace[0].outcome, Outcome::Proceed, "{:?}", d.trace[0]);
}

#[tokio::test]
async fn query_limit_appends_a_limit() {
    let e = engine();
    let p = plugin(&e, "query-limit", QUERY_LIMIT, json!({})).await;
    assert_eq!(p.seams(), vec![Seam::Rewrite]);
    let c = chain(&[&p]);
    let d = c
        .rewrite(
            &dispatch(
                "run_query",
                json!({"sql": "SELECT * FROM t;  ", "db": "main"}),
                &["run_query"],
            ),
            &no_state(),
        )
        .await;
    let r = d.result.expect("rewritten");
    assert_eq!(
        Value::Object(r.args),
        json!({"sql": "SELECT * FROM t LIMIT 100", "db": "main"})
    );
    let d = c
        .rewrite(
            &dispatch(
                "run_query",
                json!({"sql": "SELECT 1 limit 5"}),
                &["run_query"],
            ),
            &no_state(),
        )
        .await;
    assert_eq!(d.result, None);
}

#[tokio::test]
async fn hide_admin_tools_narrows() {
    let e = engine();
    let p = plugin(&e, "hide-admin-tools", HIDE_ADMIN_TOOLS, json!({})).await;
    let c = chain(&[&p]);
    let d = c
        .routing(
            &routing(&["search", "admin_drop", "run_query", "admin_users"]),
            &no_state(),
        )
        .await;
    assert_eq!(d.result, vec!["search", "run_query"]);
    assert_eq!(d.trace[0].outcome, Outcome::Narrow);
    let d = c.routing(&routing(&["search"]), &no_state()).await;
    assert_eq!(d.result, vec!["search"]);
    assert_eq!(d.trace[0].outcome, Outcome::Proceed);
}

#[tokio::test]
async fn no_email_cancels() {
    let e = engine();
    let p = plugin(&e, "no-email", NO_EMAIL, json!({})).await;
    let d = chain(&[&p])
        .steering(&steering("send_email", json!({"to": "a@b.c"})), &no_state())
        .await;
    let skip = d.result.expect("cancelled");
    assert!(!skip.is_error, "a cancel is a benign result");
    assert!(!skip.content.is_empty());
}

#[tokio::test]
async fn result_audit_observes() {
    let e = engine();
    let p = plugin(&e, "result-audit", RESULT_AUDIT, json!({})).await;
    assert_eq!(p.seams(), vec![Seam::Result]);
    let d = chain(&[&p])
        .result(&result("run_query", json!([{"id": 1}])), &no_state())
        .await;
    assert_eq!(d.trace[0].outcome, Outcome::Observed);
    assert!(d.trace[0].fuel_used > 0);
}

/// The repository's root.
fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The example guards and their bundled manifest in a directory, as
/// `scripts/build-plugins` installs them.
fn bundled() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, component) in [
        ("hide-admin-tools.wasm", HIDE_ADMIN_TOOLS),
        ("no-email.wasm", NO_EMAIL),
        ("query-limit.wasm", QUERY_LIMIT),
        ("result-audit.wasm", RESULT_AUDIT),
        ("sql-guard.wasm", SQL_GUARD),
        ("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT),
        ("pii-redact.wasm", toolgate_tests::PII_REDACT),
        ("token-budget.wasm", toolgate_tests::TOKEN_BUDGET),
    ] {
        std::fs::copy(component, dir.path().join(file)).expect("copy");
    }
    std::fs::copy(
        repo().join("plugins/rust/toolgate.toml"),
        dir.path().join("toolgate.toml"),
    )
    .expect("manifest");
    dir
}

#[test]
fn the_bundled_trace_through_the_bundled_manifest_is_what_the_demo_prints() {
    let dir = bundled();
    let repo = repo();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["replay", "--json", "--no-cache", "--plugins"])
        .arg(dir.path())
        .arg(repo.join("examples/trace.jsonl"))
        .output()
        .expect("replay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "every example loads: {stderr}");
    let results: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .take_while(|l| *l != "--")
        .map(|l| serde_json::from_str::<Value>(l).expect("json")["result"].clone())
        .collect();
    let search_limit = json!({"action": "skip", "is_error": false,
        "content": "Tool call limit exceeded. Do not call 'search' again."});
    assert_eq!(results.len(), 17);
    assert_eq!(
        results[0],
        json!(["run_query", "send_email", "search"]),
        "admin tools hidden"
    );
    assert_eq!(
        results[2]["content"],
        "Add a WHERE clause before running this query."
    );
    assert_eq!(results[6]["action"], "skip", "no email");
    assert_eq!(
        [&results[7], &results[9], &results[10], &results[11]],
        [&Value::Null, &Value::Null, &search_limit, &Value::Null],
        "two searches a run: the run's third is cancelled, a new run starts afresh"
    );
    // Lines 13-14 are run-3's lifecycle events (no result): its LLM call
    // used 52,000 tokens of the 50,000 budget, so its tools are hidden and
    // its call is cancelled.
    assert_eq!([&results[12], &results[13]], [&Value::Null, &Value::Null]);
    assert_eq!(results[14], json!([]), "token budget: no tool offered");
    assert_eq!(
        results[15]["content"],
        "Token budget of 50000 exceeded. Answer with what you have."
    );
    assert_eq!(
        results[16],
        json!("Deleted 1 row. Questions: [redacted] or [redacted]."),
        "the final answer's e-mail and phone number masked"
    );
}

/// `replay --compare`: the bundled trace through the bundled manifest and
/// through a changed one (no admin tools hidden; one search a run, not
/// two; a shadow guard that skips everything, which changes nothing):
/// the differences grouped by seam and change, exit 1; the same set twice
/// is exit 0; a decision log's lines replay as the trace's do.
#[test]
fn replay_compare_groups_what_a_changed_policy_set_changes() {
    let (a, b) = (bundled(), bundled());
    let manifest = std::fs::read_to_string(a.path().join("toolgate.toml")).expect("manifest");
    let changed = manifest
        .replace("[[plugin]]\npath = \"hide-admin-tools.wasm\"\n", "")
        .replace("run_limit = 2", "run_limit = 1")
        + "\n[[plugin]]\nname = \"says-no\"\npath = \"scripted.wasm\"\nmode = \"shadow\"\n\
           config = { steering = { action = \"skip\", content = \"no\" } }\n";
    assert_ne!(changed.len(), manifest.len());
    std::fs::write(b.path().join("toolgate.toml"), changed).expect("write");
    std::fs::copy(toolgate_tests::SCRIPTED, b.path().join("scripted.wasm")).expect("copy");
    let trace = repo().join("examples/trace.jsonl");
    let compare =
        |x: &tempfile::TempDir, y: &tempfile::TempDir, file: &std::path::Path, more: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args(["replay", "--no-cache", "--plugins"])
                .arg(x.path())
                .arg("--compare")
                .arg(y.path())
                .arg(file)
                .args(more)
                .output()
                .expect("replay --compare")
        };
    let expected = json!([
        {"seam": "routing", "change": "narrowing changed", "count": 1, "first": [{
            "line": 1, "event": "routing 4 tools (run-1)",
            "a": ["run_query", "send_email", "search"],
            "b": ["run_query", "send_email", "admin_drop_table", "search"]}]},
        {"seam": "steering", "change": "proceed → skip", "count": 1, "first": [{
            "line": 10, "event": "steering search (run-1/call-5)", "a": null,
            "b": {"action": "skip", "is_error": false,
                  "content": "Tool call limit exceeded. Do not call 'search' again."}}]},
    ]);
    // They differ (exit 1): the report, as JSON.
    let differing = |file: &std::path::Path| {
        let out = compare(&a, &b, file, &["--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let report = differing(&trace);
    assert_eq!(
        (&report["events"], &report["differ"]),
        (&json!(15), &json!(2))
    );
    assert_eq!(report["groups"], expected, "{report:#}");

    let out = compare(&a, &b, &trace, &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("15 events, 2 differ"), "{text}");
    assert!(
        text.contains("\nsteering proceed → skip: 1\n  #10 steering search"),
        "{text}"
    );

    let out = compare(&a, &a, &trace, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("15 events, 0 differ"));

    // A decision log: each line's seam and event (and state, tenant) with
    // fields of its own; a line without an event is passed over.
    let log_dir = tempfile::tempdir().expect("tempdir");
    let log = log_dir.path().join("decisions.jsonl");
    let mut lines = vec![json!({"time": "2026-01-01T00:00:00Z", "dropped": 3}).to_string()];
    for line in std::fs::read_to_string(&trace).expect("trace").lines() {
        let mut entry: Value = serde_json::from_str(line).expect("trace line");
        if entry.get("hook").is_some() {
            continue; // a decision log records decisions, not observations
        }
        entry["time"] = json!("2026-01-01T00:00:00Z");
        entry["decision"] = json!(null);
        entry["guards"] = json!([{"plugin": "x", "outcome": "proceed"}]);
        lines.push(entry.to_string());
    }
    std::fs::write(&log, lines.join("\n")).expect("write");
    let report = differing(&log);
    assert_eq!(
        (&report["events"], &report["passed_over"]),
        (&json!(15), &json!(1))
    );
    let mut shifted = expected.clone();
    for group in shifted.as_array_mut().expect("groups") {
        let line = group["first"][0]["line"].as_u64().expect("line");
        group["first"][0]["line"] = json!(line + 1);
    }
    assert_eq!(report["groups"], shifted, "{report:#}");

    // A shared state would let one set's calls count against the other's.
    let out = compare(&a, &b, &trace, &["--state", "redis://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--compare keeps"));
}
