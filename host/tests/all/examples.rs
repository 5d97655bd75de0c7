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

#[test]
fn the_bundled_trace_through_the_bundled_manifest_is_what_the_demo_prints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (file, component) in [
        ("hide-admin-tools.wasm", HIDE_ADMIN_TOOLS),
        ("no-email.wasm", NO_EMAIL),
        ("query-limit.wasm", QUERY_LIMIT),
        ("result-audit.wasm", RESULT_AUDIT),
        ("sql-guard.wasm", SQL_GUARD),
        ("tool-call-limit.wasm", toolgate_tests::TOOL_CALL_LIMIT),
    ] {
        std::fs::copy(component, dir.path().join(file)).expect("copy");
    }
    std::fs::copy(
        repo.join("plugins/rust/toolgate.toml"),
        dir.path().join("toolgate.toml"),
    )
    .expect("manifest");
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
    assert_eq!(results.len(), 12);
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
}
