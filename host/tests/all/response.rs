//! The response seam (`on_response_render`): the chain rule — registration
//! order, each guard seeing the previous content; a faulting guard skipped
//! and the chain going on; a fail-closed fault withholding the answer; an
//! oversized answer is a fault — and the verdict's JSON.

use serde_json::json;
use toolgate::event::ResponseRenderEvent;
use toolgate::{Event, Fault, Limits, OnError, Outcome, Verdict};
use toolgate_tests::RENDER;

use crate::{chain, engine, no_state, plugin, plugin_with};

/// The final answer `content` of run `r1`.
fn answer(content: &str) -> ResponseRenderEvent {
    serde_json::from_value(json!({
        "run_id": "r1", "iteration_index": 2, "model": "m-1", "node_name": "react",
        "original_content": content,
    }))
    .expect("event")
}

#[tokio::test]
async fn the_guard_sees_every_field_of_the_event() {
    let e = engine();
    let p = plugin(&e, "render", RENDER, json!({})).await;
    let d = chain(&[&p]).response(&answer("hello"), &no_state()).await;
    assert_eq!(d.result, "hello|m-1|react|2|r1");
    assert_eq!(d.trace[0].outcome, Outcome::Rewrite);
}

#[tokio::test]
async fn an_answer_the_engine_emitted_reaches_the_guard_with_iteration_minus_one() {
    // symfonic's `run()` sends `iteration_index=-1`: "emitted by the engine,
    // not the React loop". The contract's `s32` carries it unchanged.
    let e = engine();
    let p = plugin(&e, "render", RENDER, json!({})).await;
    let mut event = answer("hello");
    event.iteration_index = -1;
    let d = chain(&[&p]).response(&event, &no_state()).await;
    assert_eq!(d.result, "hello|m-1|react|-1|r1");
}

#[tokio::test]
async fn guards_run_in_order_each_seeing_the_previous_content() {
    let e = engine();
    let a = plugin(&e, "a", RENDER, json!({"append": "+a"})).await;
    let keep = plugin(&e, "keep", RENDER, json!({"keep": true})).await;
    let b = plugin(&e, "b", RENDER, json!({"append": "+b"})).await;
    let d = chain(&[&a, &keep, &b])
        .response(&answer("x"), &no_state())
        .await;
    assert_eq!(d.result, "x+a+b");
    let outcomes: Vec<_> = d.trace.iter().map(|t| t.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Rewrite, Outcome::Proceed, Outcome::Rewrite]
    );
    let d = chain(&[&b, &a]).response(&answer("x"), &no_state()).await;
    assert_eq!(d.result, "x+b+a", "the order is the chain's");
    let d = chain(&[&keep]).response(&answer("x"), &no_state()).await;
    assert_eq!(d.result, "x", "none keeps the content");
    let d = chain(&[]).response(&answer("x"), &no_state()).await;
    assert_eq!(d.result, "x", "no guard: the answer as it is");
}

#[tokio::test]
async fn the_first_guard_sees_the_hooks_content_when_a_handler_rewrote_it() {
    let e = engine();
    let a = plugin(&e, "a", RENDER, json!({"append": "+a"})).await;
    let keep = plugin(&e, "keep", RENDER, json!({"keep": true})).await;
    let mut event = answer("x");
    event.content = Some("x+py".into());
    let d = chain(&[&a]).response(&event, &no_state()).await;
    assert_eq!(
        d.result, "x+py+a",
        "the chain starts from the hook's content"
    );
    let d = chain(&[&keep]).response(&event, &no_state()).await;
    assert_eq!(d.result, "x+py", "none keeps the content it was given");
    let d = chain(&[]).response(&event, &no_state()).await;
    assert_eq!(d.result, "x+py", "no guard: the content as it came");
    let p = plugin(&e, "fields", RENDER, json!({})).await;
    let d = chain(&[&p]).response(&event, &no_state()).await;
    assert_eq!(
        d.result, "x|m-1|react|2|r1",
        "original_content stays the original"
    );
}

#[tokio::test]
async fn a_faulting_guard_is_skipped_and_the_chain_goes_on() {
    let e = engine();
    let a = plugin(&e, "a", RENDER, json!({"append": "+a"})).await;
    let bad = plugin(&e, "bad", RENDER, json!({"trap": true})).await;
    let b = plugin(&e, "b", RENDER, json!({"append": "+b"})).await;
    let d = chain(&[&a, &bad, &b])
        .response(&answer("x"), &no_state())
        .await;
    assert_eq!(d.result, "x+a+b");
    assert_eq!(d.trace[1].outcome, Outcome::Fault);
    assert_eq!(d.trace[1].fault, Some(Fault::Unreachable));
}

#[tokio::test]
async fn a_fail_closed_fault_withholds_the_answer() {
    let e = engine();
    let a = plugin(&e, "a", RENDER, json!({"append": "+a"})).await;
    let bad = plugin_with(
        &e,
        "bad",
        RENDER,
        json!({"trap": true}),
        Limits::default(),
        OnError::Deny,
    )
    .await;
    let b = plugin(&e, "b", RENDER, json!({"append": "+b"})).await;
    let d = chain(&[&a, &bad, &b])
        .response(&answer("secret"), &no_state())
        .await;
    assert_eq!(
        d.result,
        toolgate::withheld_message("bad", Fault::Unreachable)
    );
    assert!(!d.result.contains("secret"));
    assert_eq!(d.trace.len(), 2, "the chain ends at the fail-closed fault");
}

#[tokio::test]
async fn an_answer_over_the_return_limit_is_a_fault() {
    let e = engine();
    let limits = Limits {
        max_return_bytes: 1024,
        ..Limits::default()
    };
    let big = plugin_with(
        &e,
        "big",
        RENDER,
        json!({"grow": 4096}),
        limits.clone(),
        OnError::Skip,
    )
    .await;
    let fits = plugin_with(
        &e,
        "fits",
        RENDER,
        json!({"grow": 1000}),
        limits,
        OnError::Skip,
    )
    .await;
    let d = chain(&[&big]).response(&answer("x"), &no_state()).await;
    assert_eq!(d.result, "x", "the oversized answer is dropped");
    assert_eq!(d.trace[0].fault, Some(Fault::OversizedReturn));
    let d = chain(&[&fits]).response(&answer("x"), &no_state()).await;
    assert_eq!(d.result.len(), 1000);
}

#[tokio::test]
async fn the_verdict_is_the_answer_string() {
    let e = engine();
    let a = plugin(&e, "a", RENDER, json!({"append": "!"})).await;
    let d = chain(&[&a])
        .enforce(&Event::Response(answer("hi")), &no_state())
        .await;
    assert_eq!(d.result, Verdict::Response("hi!".into()));
    assert_eq!(serde_json::to_value(&d.result).expect("json"), json!("hi!"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_post_v1_response_answers_the_final_string() {
    use crate::server::Running;
    use reqwest::StatusCode;
    let s = Running::start_with(
        &[("render.wasm", RENDER)],
        &[(
            "toolgate.toml",
            "[[plugin]]\nname = \"a\"\npath = \"render.wasm\"\n[plugin.config]\nappend = \"+a\"\n\n\
             [[plugin]]\nname = \"b\"\npath = \"render.wasm\"\n[plugin.config]\nappend = \"+b\"\n",
        )],
        toolgate::server::ServerConfig::default(),
    )
    .await;
    let event = json!({"event": {
        "run_id": "r1", "iteration_index": 0, "model": "m", "node_name": "react",
        "original_content": "x",
    }});
    let (status, body) = s.post("/v1/response", event.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!("x+a+b"));
    let (status, body) = s.post("/v1/response?trace=1", event.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"], json!("x+a+b"));
    let outcomes: Vec<&str> = body["trace"]
        .as_array()
        .expect("trace")
        .iter()
        .map(|t| t["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["rewrite", "rewrite"]);
    let mut rewritten = event.clone();
    rewritten["event"]["content"] = json!("y");
    let (status, body) = s.post("/v1/response", rewritten).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!("y+a+b"), "the first guard is given `content`");
    let (status, body) = s
        .post(
            "/v1/response",
            json!({"event": {"run_id": "r1", "model": "m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("iteration_index"),
        "{body}"
    );
    s.stop().await;
}

#[test]
fn pii_redacts_case_file_passes_and_a_wrong_expectation_fails() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugins/rust/pii-redact/pii-redact.test.toml"
    ))
    .expect("case file")
    .replace(
        "../../../build/plugins/rust/pii-redact.wasm",
        "pii-redact.wasm",
    );
    let run = |text: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(
            toolgate_tests::PII_REDACT,
            dir.path().join("pii-redact.wasm"),
        )
        .expect("copy");
        std::fs::write(dir.path().join("guard.test.toml"), text).expect("write");
        std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("test")
            .arg(dir.path())
            .env("TOOLGATE_LOG", "error")
            .output()
            .expect("run toolgate test")
    };
    let out = run(&text);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(said, "6 passed, 0 failed\n");
    // The content key is checked: a wrong one fails, saying what it got.
    let out = run(&text.replace("call [redacted].", "call me."));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("call [redacted]."), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_log_writes_no_answer_by_default_and_check_reads_the_seam() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, out) = (tmp.path().join("plugins"), tmp.path().join("d.jsonl"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(RENDER, dir.join("render.wasm")).expect("copy");
    std::fs::write(
        dir.join("toolgate.toml"),
        format!(
            "[decision_log]\npath = {:?}\n\n[[plugin]]\npath = \"render.wasm\"\n[plugin.config]\nappend = \" ok\"\n",
            out.display().to_string()
        ),
    )
    .expect("manifest");
    let event = tmp.path().join("event.json");
    std::fs::write(
        &event,
        r#"{"run_id": "r", "iteration_index": 0, "model": "m", "node_name": "react", "original_content": "ada@example.org"}"#,
    )
    .expect("event");
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "--plugins", &dir.display().to_string()])
        .args([
            "--seam",
            "response",
            "--event",
            &event.display().to_string(),
        ])
        .arg("--no-cache")
        .output()
        .expect("toolgate check");
    let said = String::from_utf8_lossy(&checked.stdout).into_owned();
    assert!(checked.status.success(), "{checked:?}");
    assert!(said.contains("ada@example.org ok"), "{said}");
    let log = std::fs::read_to_string(&out).expect("log");
    assert!(
        !log.contains("ada@example.org"),
        "the answer is content: {log}"
    );
    let line: serde_json::Value = serde_json::from_str(log.trim()).expect("one line");
    assert_eq!(line["seam"], "response");
    assert_eq!(line["verdict"], "render");
    assert_eq!(line["decision"], serde_json::Value::Null);
    assert_eq!(line["guards"][0]["outcome"], "rewrite");
}
