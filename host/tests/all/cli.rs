//! The `toolgate` command, run as a user would.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn plugin_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, src) in files {
        std::fs::copy(src, dir.path().join(name)).expect("copy");
    }
    dir
}

fn run(args: &[&str], stdin: &str) -> Output {
    run_logged(args, stdin, None)
}

/// `run`, with `TOOLGATE_LOG` set to `log` (the log goes to stderr).
fn run_logged(args: &[&str], stdin: &str, log: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    if let Some(log) = log {
        command.env("TOOLGATE_LOG", log);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolgate");
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes());
    // A command refused for its arguments may exit before reading stdin.
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    child.wait_with_output().expect("wait")
}

fn check(dir: &Path, seam: &str, event: Value) -> Output {
    run(
        &[
            "check",
            "--plugins",
            &dir.display().to_string(),
            "--seam",
            seam,
            "--event",
            "-",
        ],
        &event.to_string(),
    )
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_steering_prints_the_hook_value_and_trace() {
    let dir = plugin_dir(&[
        ("10-sql-guard.wasm", toolgate_tests::SQL_GUARD),
        ("20-no-email.wasm", toolgate_tests::NO_EMAIL),
    ]);
    let out = stdout_json(&check(
        dir.path(),
        "steering",
        json!({"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": "DELETE FROM users"}}),
    ));
    assert_eq!(
        out["result"],
        json!({"action": "skip", "content": "Add a WHERE clause before running this query.", "is_error": true})
    );
    let trace = out["trace"].as_array().expect("trace");
    assert_eq!(trace.len(), 1, "the first skip short-circuits: {trace:?}");
    assert_eq!(trace[0]["plugin"], "10-sql-guard");
    assert_eq!(trace[0]["outcome"], "skip");
    assert!(trace[0]["fuel_used"].as_u64().expect("fuel") > 0);
    assert!(trace[0]["micros"].is_u64());

    let out = stdout_json(&check(
        dir.path(),
        "steering",
        json!({"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": "SELECT 1 WHERE 1=1"}}),
    ));
    assert_eq!(out["result"], Value::Null);
    assert_eq!(out["trace"].as_array().expect("trace").len(), 2);
}

#[test]
fn check_rewrite_routing_result() {
    let dir = plugin_dir(&[
        ("a.wasm", toolgate_tests::QUERY_LIMIT),
        ("b.wasm", toolgate_tests::HIDE_ADMIN_TOOLS),
        ("c.wasm", toolgate_tests::RESULT_AUDIT),
    ]);
    let out = stdout_json(&check(
        dir.path(),
        "rewrite",
        json!({"run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "c",
               "tool_name": "run_query", "args": {"sql": "SELECT 1"}, "available_tools": ["run_query"]}),
    ));
    assert_eq!(
        out["result"],
        json!({"tool_name": "run_query", "args": {"sql": "SELECT 1 LIMIT 100"}})
    );
    let out = stdout_json(&check(
        dir.path(),
        "routing",
        json!({"run_id": "r", "mode": "enforce", "intent_label": "x", "total_tools": 2,
               "narrowed_tool_names": ["admin_x", "run_query"]}),
    ));
    assert_eq!(out["result"], json!(["run_query"]));
    let out = stdout_json(&check(
        dir.path(),
        "result",
        json!({"run_id": "r", "tool_name": "run_query", "result": "ok", "call_id": "c"}),
    ));
    assert_eq!(out["result"], Value::Null);
    assert_eq!(out["trace"][0]["outcome"], "observed");
}

#[test]
fn bad_input_is_one_clear_line_and_exit_2() {
    let dir = plugin_dir(&[("sql.wasm", toolgate_tests::SQL_GUARD)]);
    let d = dir.path().display().to_string();
    let event = |event: &'static str| {
        [
            "check",
            "--plugins",
            &d,
            "--seam",
            "steering",
            "--event",
            event,
        ]
    };
    let missing_dir = [
        "check",
        "--plugins",
        "/no/such/dir",
        "--seam",
        "steering",
        "--event",
        "-",
    ];
    // (what, argv, stdin, what the error must say)
    let cases: [(&str, &[&str], &str, &str); 5] = [
        (
            "missing field",
            &event("-"),
            r#"{"run_id": "r", "tool_name": "t", "call_id": "c"}"#,
            "missing field `args`",
        ),
        (
            "args not an object",
            &event("-"),
            r#"{"run_id": "r", "tool_name": "t", "call_id": "c", "args": [1]}"#,
            "`event.args`",
        ),
        (
            "not JSON",
            &event("-"),
            "{nope",
            "standard input is not valid JSON",
        ),
        (
            "missing file",
            &event("/no/such/event.json"),
            "",
            "/no/such/event.json",
        ),
        ("missing directory", &missing_dir, "{}", "/no/such/dir"),
    ];
    for (what, args, stdin, says) in cases {
        let out = run(args, stdin);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(says), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(out.stdout.is_empty(), "{what}");
    }
    // Unknown seam: clap reports it, in its own words.
    let out = run(
        &["check", "--plugins", &d, "--seam", "nope", "--event", "-"],
        "{}",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains("toolgate: error"), "clap reports it");
    assert!(
        stderr(&out).contains("unknown seam `nope`"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_bad_component_in_the_directory_is_reported_and_the_rest_run() {
    let dir = plugin_dir(&[("sql.wasm", toolgate_tests::SQL_GUARD)]);
    std::fs::write(dir.path().join("broken.wasm"), b"garbage").expect("write");
    let out = check(
        dir.path(),
        "steering",
        json!({"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": "DROP TABLE x"}}),
    );
    assert!(stderr(&out).contains("broken.wasm"), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["result"]["action"], "skip");
}

#[test]
fn replay_prints_each_decision_and_a_summary() {
    let dir = plugin_dir(&[
        ("sql-guard.wasm", toolgate_tests::SQL_GUARD),
        ("zz-hostile.wasm", toolgate_tests::HOSTILE),
    ]);
    let trace = [
        json!({"seam": "steering", "event": {"run_id": "r", "tool_name": "run_query", "call_id": "1", "args": {"sql": "DELETE FROM t"}}}),
        json!({"seam": "steering", "event": {"run_id": "r", "tool_name": "run_query", "call_id": "2", "args": {"sql": "DELETE FROM t WHERE id=1"}}}),
        // `"state": null` and `"tenant": null` mean none, as over HTTP.
        json!({"seam": "steering", "event": {"run_id": "r", "tool_name": "trap", "call_id": "3", "args": {}}, "state": null, "tenant": null}),
    ]
    .map(|v| v.to_string())
    .join("\n");
    let file = dir.path().join("trace.jsonl");
    std::fs::write(&file, trace).expect("write");
    let (plugins, path) = (dir.path().display().to_string(), file.display().to_string());
    let replay = || run(&["replay", "--plugins", &plugins, &path], "");
    let out = replay();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("#1 steering run_query -> {\"action\":\"skip\""),
        "{text}"
    );
    assert!(lines[2].contains("zz-hostile: fault unreachable"), "{text}");
    assert!(text.contains("3 decisions"), "{text}");
    assert!(text.contains("fault:unreachable 1"), "{text}");
    assert!(text.contains("sql-guard: 3 calls"), "{text}");

    std::fs::write(&file, "{\"seam\": \"steering\", \"event\": {}}\n").expect("write");
    let out = replay();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("trace.jsonl:1"), "{}", stderr(&out));

    // The same parser as HTTP: errors name the field.
    for (line, needle) in [
        (
            r#"{"seam": "steering", "event": {"run_id": "r", "tool_name": "t", "call_id": "c", "args": []}}"#,
            "event.args",
        ),
        (
            r#"{"seam": "steering", "event": {"run_id": "r", "tool_name": "t", "call_id": "c", "args": {}}, "tenant": "../x"}"#,
            "tenant",
        ),
        (r#"{"seam": 3, "event": {}}"#, "`seam` must be a string"),
    ] {
        std::fs::write(&file, format!("{line}\n")).expect("write");
        let out = replay();
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(stderr(&out).contains(needle), "{line}: {}", stderr(&out));
    }
}

#[test]
fn list_shows_seams_and_limits() {
    let dir = plugin_dir(&[
        ("sql-guard.wasm", toolgate_tests::SQL_GUARD),
        ("hostile.wasm", toolgate_tests::HOSTILE),
    ]);
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").expect("write");
    let out = stdout_json(&run(
        &["list", "--plugins", &dir.path().display().to_string()],
        "",
    ));
    assert_eq!(
        out.get("plugins"),
        None,
        "named `global`, as over HTTP: {out}"
    );
    let plugins = out["global"].as_array().expect("global");
    assert_eq!(plugins.len(), 2);
    assert_eq!(plugins[0]["name"], "hostile");
    assert_eq!(
        plugins[0]["seams"],
        json!(["routing", "rewrite", "steering", "result"])
    );
    assert_eq!(plugins[1]["seams"], json!(["steering"]));
    assert_eq!(plugins[1]["limits"]["timeout_ms"], 200);
    assert_eq!(plugins[1]["digest"].as_str().expect("digest").len(), 64);
    assert!(
        out["errors"][0]
            .as_str()
            .expect("error")
            .contains("core.wasm")
    );
}

/// The CLI takes args as deep as the Python adapter sends (64 levels, its
/// own cut-off) and passes them through unchanged; beyond serde_json's 128
/// levels it refuses the event with one line naming where.
#[test]
fn nested_args_pass_up_to_the_documented_depth() {
    let dir = plugin_dir(&[("sql.wasm", toolgate_tests::SQL_GUARD)]);
    let event = |depth: usize| {
        let deep = (0..depth).fold(json!(1), |inner, _| json!([inner]));
        json!({"run_id": "r", "tool_name": "search", "call_id": "c", "args": {"deep": deep}})
    };
    let v = stdout_json(&check(dir.path(), "steering", event(64)));
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["trace"][0]["outcome"], "proceed");

    let out = check(dir.path(), "steering", event(130));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("recursion limit") && err.contains("column"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// `replay` decides each line as the server does: inside a `decide` span,
/// and only for a tenant that is admitted — a line for one that is not is
/// printed "not decided" and the replay goes on, then exits 3.
#[test]
fn replay_decides_as_the_server_does() {
    let dir = plugin_dir(&[]);
    for tenant in ["t00", "t01"] {
        let own = dir.path().join("tenants").join(tenant);
        std::fs::create_dir_all(&own).expect("tenant dir");
        std::fs::copy(toolgate_tests::SQL_GUARD, own.join("sql-guard.wasm")).expect("copy");
    }
    // Room for the global share and one tenant's: t00 is admitted, t01 not.
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[shares]\nglobal_memory_mib = 512\ntenant_memory_mib = 256\ntenant_code_mib = 64\n\
         memory_budget_mib = 900\n",
    )
    .expect("manifest");
    let line = |tenant: &str| {
        json!({"seam": "steering", "tenant": tenant, "event": {"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": "DELETE FROM t"}}})
            .to_string()
    };
    let trace = [line("t01"), line("t00")].join("\n");
    let plugins = dir.path().display().to_string();
    let out = run_logged(
        &["replay", "--plugins", &plugins, "-"],
        &trace,
        Some("toolgate=debug"),
    );
    let (text, log) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(3), "{text}{log}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("#1 steering run_query -> not decided: tenant `t01` is not admitted"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("#2 steering run_query -> {\"action\":\"skip\""),
        "{text}"
    );
    assert!(text.contains("1 decisions, 1 not decided"), "{text}");
    assert!(
        log.lines()
            .any(|l| l.contains("decide{seam=steering tenant=") && l.contains("t00/sql-guard")),
        "the guard call inside a `decide` span: {log}"
    );

    let out = run(&["replay", "--plugins", &plugins, "--json", "-"], &trace);
    assert_eq!(out.status.code(), Some(3));
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    assert_eq!(first["line"], 1);
    assert!(first.get("result").is_none(), "{first}");
    assert!(
        first["not_decided"]
            .as_str()
            .expect("why")
            .contains("not admitted"),
        "{first}"
    );
}

/// `toolgate bench --json` reports, per seam, every subscribed guard's
/// fresh and reused calls and the chain under load, as one JSON object.
#[test]
fn bench_reports_each_guard_and_the_chain() {
    let dir = plugin_dir(&[
        ("sql-guard.wasm", toolgate_tests::SQL_GUARD),
        ("hide-admin-tools.wasm", toolgate_tests::HIDE_ADMIN_TOOLS),
    ]);
    let d = dir.path().display().to_string();
    let argv = [
        "bench",
        "--plugins",
        &d,
        "--seconds",
        "0.2",
        "--concurrency",
        "3",
        "--json",
    ];
    let report = stdout_json(&run(&argv, ""));
    let seams: Vec<&str> = report["seams"]
        .as_array()
        .expect("seams")
        .iter()
        .map(|s| s["seam"].as_str().expect("seam"))
        .collect();
    assert_eq!(seams, ["routing", "steering"], "{report}");
    let steering = &report["seams"][1];
    assert_eq!(steering["guards"][0]["plugin"], "sql-guard");
    for path in ["fresh", "reused"] {
        let calls = steering["guards"][0][path]["calls"]
            .as_u64()
            .expect("calls");
        assert!(calls > 0, "{path}: {steering}");
    }
    assert_eq!(steering["guards"][0]["faults"], 0);
    // The chain one call at a time after each idle gap, 5 calls at least.
    let spread: Vec<(u64, u64)> = steering["spread"]
        .as_array()
        .expect("spread")
        .iter()
        .map(|s| {
            (
                s["gap_ms"].as_u64().expect("gap"),
                s["latency"]["calls"].as_u64().expect("calls"),
            )
        })
        .collect();
    assert_eq!(
        spread.iter().map(|s| s.0).collect::<Vec<_>>(),
        [1, 5, 20, 100]
    );
    assert!(spread.iter().all(|s| s.1 >= 5), "{spread:?}");
    // Each gap's floor, a plain function after the same gap, as many times.
    for s in steering["spread"].as_array().expect("spread") {
        assert_eq!(s["floor"]["calls"], s["latency"]["calls"], "{s}");
        assert!(s["floor"]["p50_us"].as_f64().expect("floor") > 0.0, "{s}");
    }
    assert_eq!(steering["chain"]["concurrency"], 3);
    assert!(steering["chain"]["decisions"].as_u64().expect("decisions") > 0);
    assert!(
        steering["chain"]["decisions_per_sec"]
            .as_f64()
            .expect("rate")
            > 0.0
    );

    let out = run(&["bench", "--plugins", &d, "--seconds", "0"], "");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--seconds"), "{}", stderr(&out));
}

/// Asks the HTTP service, in process, over the plugin directory `dir`:
/// `GET path` when `body` is `None`, else `POST path` with it. Returns
/// the answer's text.
fn http(dir: &Path, path: &str, body: Option<Value>) -> String {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let registry = toolgate::Registry::open(super::engine(), dir)
            .await
            .expect("registry");
        let router = toolgate::server::router(
            std::sync::Arc::new(registry),
            std::sync::Arc::new(toolgate::Metrics::new()),
            toolgate::server::ServerConfig::default(),
        );
        let request = match body {
            None => Request::get(path).body(Body::empty()),
            Some(body) => Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
        }
        .expect("request");
        let response = router.oneshot(request).await.expect("infallible");
        assert!(response.status().is_success(), "{}", response.status());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    })
}

/// `toolgate list` and `GET /v1/plugins` describe the same plugins with
/// the same fields, under the same names (`global`, `tenants`): a global plugin restricted to some tenants (with its
/// `tenants`) and a tenant's own chain included, and the `plugins_loaded`
/// gauge counts what they list.
#[test]
fn list_and_http_describe_the_same_plugins() {
    let dir = plugin_dir(&[
        ("10-sql-guard.wasm", toolgate_tests::SQL_GUARD),
        ("20-no-email.wasm", toolgate_tests::NO_EMAIL),
    ]);
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"10-sql-guard.wasm\"\n\n\
         [[plugin]]\nname = \"no-email\"\npath = \"20-no-email.wasm\"\ntenants = [\"acme\"]\n",
    )
    .expect("manifest");
    let acme = dir.path().join("tenants").join("acme");
    std::fs::create_dir_all(&acme).expect("tenant dir");
    std::fs::copy(toolgate_tests::NO_EMAIL, acme.join("own.wasm")).expect("copy");

    let listed = stdout_json(&run(
        &["list", "--plugins", &dir.path().display().to_string()],
        "",
    ));
    let served: Value = serde_json::from_str(&http(dir.path(), "/v1/plugins", None)).expect("JSON");

    let global = listed["global"].as_array().expect("global");
    let names: Vec<&str> = global
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["10-sql-guard", "no-email"], "{listed}");
    assert_eq!(global[0].get("tenants"), None, "{listed}");
    assert_eq!(global[1]["tenants"], json!(["acme"]), "{listed}");
    let fields =
        |p: &Value| -> Vec<String> { p.as_object().expect("object").keys().cloned().collect() };
    assert_eq!(
        fields(&global[1]),
        [
            "name", "path", "digest", "seams", "limits", "on_error", "mode", "health", "prepared",
            "snapshot", "tenants"
        ],
        "{listed}"
    );
    assert_eq!(
        listed["global"], served["global"],
        "list: {listed}\nHTTP: {served}"
    );
    assert_eq!(
        listed["tenants"], served["tenants"],
        "list: {listed}\nHTTP: {served}"
    );
    assert_eq!(listed["tenants"]["acme"][0]["name"], "acme/own", "{listed}");
    assert_eq!(listed["policy"], served["policy"]);
    assert_eq!(listed["generation"], served["generation"]);
    assert_eq!(listed["errors"], json!([]));
    assert_eq!(served["errors"], json!([]));

    let metrics = http(dir.path(), "/metrics", None);
    assert!(
        metrics.contains("toolgate_plugins_loaded{chain=\"global\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_plugins_loaded{chain=\"tenant:acme\"} 1"),
        "{metrics}"
    );
}

/// A trace line with `"state": null` is replayed as HTTP answers the same
/// request body: the state is `{}`, and the decision is the same.
#[test]
fn replay_takes_a_null_state_and_answers_as_http() {
    let dir = plugin_dir(&[
        ("10-sql-guard.wasm", toolgate_tests::SQL_GUARD),
        ("20-no-email.wasm", toolgate_tests::NO_EMAIL),
    ]);
    let events = [
        json!({"run_id": "r", "tool_name": "run_query", "call_id": "1", "args": {"sql": "DELETE FROM t"}}),
        json!({"run_id": "r", "tool_name": "send", "call_id": "2", "args": {"to": "a@b.example"}}),
        json!({"run_id": "r", "tool_name": "run_query", "call_id": "3", "args": {"sql": "SELECT 1"}}),
    ];
    let trace = events
        .iter()
        .map(|e| json!({"seam": "steering", "event": e, "state": null}).to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let file = dir.path().join("trace.jsonl");
    std::fs::write(&file, trace).expect("write");
    let out = run(
        &[
            "replay",
            "--json",
            "--plugins",
            &dir.path().display().to_string(),
            &file.display().to_string(),
        ],
        "",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let replayed: Vec<Value> = text
        .lines()
        .take_while(|l| *l != "--")
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(replayed.len(), events.len(), "{text}");
    // Who answered what, without the timings.
    let answers = |trace: &Value| -> Vec<(Value, Value)> {
        trace
            .as_array()
            .expect("trace")
            .iter()
            .map(|t| (t["plugin"].clone(), t["outcome"].clone()))
            .collect()
    };
    for (line, event) in replayed.iter().zip(&events) {
        let served: Value = serde_json::from_str(&http(
            dir.path(),
            "/v1/steering?trace=1",
            Some(json!({"event": event, "state": null})),
        ))
        .expect("JSON");
        assert_eq!(line["result"], served["result"], "{line}\nHTTP: {served}");
        assert_eq!(answers(&line["trace"]), answers(&served["trace"]), "{line}");
    }
    assert_ne!(replayed[0]["result"], json!(null), "{text}");
}

/// A state with integers no `i64`/`f64` holds and keys out of order: what
/// every face must hand a guard exactly as it came.
const ODD_STATE: &str = r#"{"z":18446744073709551616,"a":{"y":-170141183460469231731687303715884105729,"b":0.1},"tenant":"acme"}"#;

/// `check --state` and each line's `state` in `replay` reach the guard as
/// written, at steering and rewrite; a line without one hands it `{}`. The
/// `memo` guest echoes the state it got (and sees no earlier call).
#[test]
fn state_reaches_the_guard_through_check_and_replay() {
    let dir = plugin_dir(&[("memo.wasm", toolgate_tests::MEMO)]);
    let plugins = dir.path().display().to_string();
    let state_file = dir.path().join("state.json");
    std::fs::write(&state_file, ODD_STATE).expect("write");
    let event = r#"{"run_id": "r", "tool_name": "t", "call_id": "c", "args": {}}"#;
    let out = run(
        &[
            "check",
            "--plugins",
            &plugins,
            "--seam",
            "steering",
            "--event",
            "-",
            "--state",
            &state_file.display().to_string(),
        ],
        event,
    );
    let content = stdout_json(&out)["result"]["content"].clone();
    assert_eq!(
        content.as_str(),
        Some(format!(r#"{{"calls":1,"last":null,"state":{ODD_STATE}}}"#).as_str()),
        "{content}"
    );

    let dispatch = r#"{"run_id": "r", "iteration_index": 0, "node_name": "react", "call_id": "d", "tool_name": "t", "args": {}, "available_tools": ["t"]}"#;
    let trace = format!(
        "{{\"seam\": \"steering\", \"event\": {event}, \"state\": {ODD_STATE}}}\n\
         {{\"seam\": \"rewrite\", \"event\": {dispatch}, \"state\": {ODD_STATE}}}\n\
         {{\"seam\": \"steering\", \"event\": {event}}}\n"
    );
    let file = dir.path().join("trace.jsonl");
    std::fs::write(&file, trace).expect("write");
    let out = run(
        &[
            "replay",
            "--json",
            "--plugins",
            &plugins,
            &file.display().to_string(),
        ],
        "",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().take_while(|l| *l != "--").collect();
    assert_eq!(lines.len(), 3, "{text}");
    let steered: Value = serde_json::from_str(lines[0]).expect("JSON line");
    assert_eq!(
        steered["result"]["content"].as_str(),
        content.as_str(),
        "{text}"
    );
    // The rewrite's args are what memo found: the state as written.
    assert!(
        lines[1].contains(&format!(
            r#""args":{{"calls":1,"last":null,"state":{ODD_STATE}}}"#
        )),
        "{text}"
    );
    let bare: Value = serde_json::from_str(lines[2]).expect("JSON line");
    assert_eq!(
        bare["result"]["content"].as_str(),
        Some(r#"{"calls":1,"last":null,"state":{}}"#),
        "{text}"
    );
}

/// A guard's stdout and stderr reach the log (at `info`), one line per
/// stream with the count of bytes dropped, within one `log_kib` (64 KiB)
/// for both streams and `log` together: the hostile guest writes 100 MiB
/// to each. Through the binary, whose log
/// is its own process's (`TOOLGATE_LOG=info`).
#[test]
fn a_guards_output_reaches_the_log_bounded() {
    let dir = plugin_dir(&[("hostile.wasm", toolgate_tests::HOSTILE)]);
    // About 4 s of work alone; generous bounds for a busy machine.
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"hostile.wasm\"\ntimeout_ms = 600000\nfuel = 1000000000000\n",
    )
    .expect("write");
    let plugins = dir.path().display().to_string();
    let out = run_logged(
        &[
            "check",
            "--plugins",
            &plugins,
            "--seam",
            "steering",
            "--event",
            "-",
        ],
        r#"{"run_id": "r", "tool_name": "stdout-flood", "call_id": "c", "args": {}}"#,
        Some("info"),
    );
    let v = stdout_json(&out);
    assert_eq!(v["trace"][0]["outcome"], "proceed", "{v}");
    let log = stderr(&out);
    let flooded: Vec<&str> = log
        .lines()
        // The guard's own output (not the load's progress lines).
        .filter(|l| l.contains("toolgate::sandbox") && l.contains("plugin=hostile"))
        .collect();
    assert_eq!(flooded.len(), 2, "one line per stream: {flooded:?}");
    // One budget for both streams (and `log`): stdout, written first,
    // fills it; all of stderr is dropped, and said so.
    let kept = [64 << 10, 0];
    for ((line, stream), kept) in flooded.iter().zip(["stdout", "stderr"]).zip(kept) {
        let tail = line.get(line.len().saturating_sub(120)..).unwrap_or(line);
        assert!(line.contains(&format!("stream=\"{stream}\"")), "{tail}");
        let dropped = (100 << 20) - kept;
        assert!(line.contains(&format!("dropped={dropped}")), "{tail}");
        let longest_run = line.split(|c| c != 'o').map(str::len).max();
        assert_eq!(
            longest_run.filter(|&n| n >= 64),
            (kept > 0).then_some(kept),
            "{tail}"
        );
    }
    assert!(log.len() < (64 << 10) + 4096, "{} bytes logged", log.len());
}

/// `check` reads its event and state as a request body is read (HTTP,
/// `replay`): a `null` state is `{}`, and a bad event is named by its
/// field's path and its file, not by a column of re-serialised text.
#[test]
fn check_reads_event_and_state_as_http_does() {
    let dir = plugin_dir(&[("memo.wasm", toolgate_tests::MEMO)]);
    let plugins = dir.path().display().to_string();
    let state_file = dir.path().join("state.json");
    std::fs::write(&state_file, "null").expect("write");
    let state = state_file.display().to_string();
    let argv = [
        "check",
        "--plugins",
        &plugins,
        "--seam",
        "steering",
        "--event",
        "-",
        "--state",
        &state,
    ];
    let event = r#"{"run_id": "r", "tool_name": "t", "call_id": "c", "args": {}}"#;
    let out = stdout_json(&run(&argv, event));
    assert_eq!(
        out["result"]["content"].as_str(),
        Some(r#"{"calls":1,"last":null,"state":{}}"#),
        "{out}"
    );

    let out = run(
        &argv,
        r#"{"run_id": "r", "tool_name": 7, "call_id": "c", "args": {}}"#,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`event.tool_name`"), "{err}");
    assert!(
        err.contains("standard input") && err.contains(&state),
        "{err}"
    );
    assert!(!err.contains("column"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    std::fs::write(&state_file, "[]").expect("write");
    let out = run(&argv, event);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("field `state` must be a JSON object"), "{err}");
    assert!(err.contains(&state), "{err}");
}

/// `check` decides as the server does: inside a `decide` span, and only
/// for a tenant that is admitted — a tenant whose share did not fit is
/// answered "not decided" (exit 3), never run on the global chain alone.
#[test]
fn check_decides_as_the_server_does() {
    let dir = plugin_dir(&[]);
    let put = |tenant: &str| {
        let own = dir.path().join("tenants").join(tenant);
        std::fs::create_dir_all(&own).expect("tenant dir");
        std::fs::copy(toolgate_tests::SQL_GUARD, own.join("sql-guard.wasm")).expect("copy");
    };
    put("t00");
    put("t01");
    // Room for the global share and one tenant's (512 + 320 MiB): one
    // tenant is admitted, the other is not. Which one is the one whose
    // load was published first (both are newcomers at start-up), so the
    // test finds out rather than assumes.
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[shares]\nglobal_memory_mib = 512\ntenant_memory_mib = 256\ntenant_code_mib = 64\n\
         memory_budget_mib = 900\n",
    )
    .expect("manifest");
    let plugins = dir.path().display().to_string();
    let delete = r#"{"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": "DELETE FROM t"}}"#;
    let check_as = |tenant: &str| {
        run_logged(
            &["check", "--plugins", &plugins, "--seam", "steering"]
                .into_iter()
                .chain(["--event", "-", "--tenant", tenant])
                .collect::<Vec<_>>(),
            delete,
            Some("toolgate=debug"),
        )
    };
    // Each `check` is a process of its own: a load, then one decision.
    // Every answer is one of the two, and both are seen.
    let (mut decided, mut refused) = (0, 0);
    for round in 0..10 {
        for tenant in ["t00", "t01"] {
            let out = check_as(tenant);
            let log = stderr(&out);
            if out.status.success() {
                assert_eq!(stdout_json(&out)["result"]["action"], "skip", "{log}");
                assert!(
                    log.lines()
                        .any(|l| l.contains("decide{seam=steering tenant=")
                            && l.contains(&format!("{tenant}/sql-guard"))),
                    "the guard call inside a `decide` span: {log}"
                );
                decided += 1;
            } else {
                assert_eq!(out.status.code(), Some(3), "{log}");
                assert!(
                    out.stdout.is_empty(),
                    "{}",
                    String::from_utf8_lossy(&out.stdout)
                );
                assert!(
                    log.contains(&format!("not decided: tenant `{tenant}` is not admitted")),
                    "{log}"
                );
                refused += 1;
            }
        }
        if decided > 0 && refused > 0 {
            break;
        }
        assert!(
            round < 9,
            "decided {decided}, refused {refused}: both must be seen"
        );
    }
}

/// The log is coloured only on a terminal (README, "Every face logs to
/// standard error"): written to a pipe, as a file or a log collector gets
/// it, a warning is plain text, no escape sequences.
#[test]
fn a_log_written_to_a_pipe_is_plain_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = check(
        dir.path(),
        "steering",
        json!({"run_id": "r", "tool_name": "t", "call_id": "c", "args": {}}),
    );
    let text = stderr(&out);
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("no guard loaded"))
        .collect();
    assert_eq!(warned.len(), 1, "{text}");
    assert!(
        !out.stderr.contains(&0x1b),
        "an escape sequence in a piped log: {text:?}"
    );
}
