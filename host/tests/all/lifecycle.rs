//! Lifecycle events (`observe`): a guard's subscriptions read at load; a
//! run's observations delivered in order, after the caller moved on, and
//! before the run's next decision; hostile observers (spin, trap, state
//! budget, 10,000 events) never hold the caller nor stop decisions.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::{Chain, Hooks, LifecycleEvent, LifecycleHook, Limits, Observed, OnError};
use toolgate_tests::{OBSERVER, TOKEN_BUDGET};

use crate::{chain, engine, no_state, plugin, plugin_with, routing, steering};

/// An event of `hook` from JSON.
fn event(hook: &str, value: Value) -> LifecycleEvent {
    LifecycleEvent::from_value(hook.parse().expect("hook"), value).expect("event")
}

/// `on_llm_end` of run `run` that used `tokens`.
fn llm_end(run: &str, tokens: u64) -> LifecycleEvent {
    event(
        "on_llm_end",
        json!({"model": "m", "output": "o", "usage": {"total_tokens": tokens}, "run_id": run}),
    )
}

/// One event of every hook, for run `run-1`.
fn every_hook() -> Vec<LifecycleEvent> {
    let r = "run-1";
    vec![
        event("on_agent_start", json!({"query": "q", "run_id": r})),
        event("on_node_start", json!({"node_name": "react", "run_id": r})),
        event(
            "on_token_composition",
            json!({"system_prompt_tokens": 3, "run_id": r}),
        ),
        event(
            "on_llm_start",
            json!({"model": "m", "messages": [], "run_id": r}),
        ),
        event(
            "on_llm_pre_call",
            json!({"model": "m", "messages": [{"role": "user"}], "tools": [], "run_id": r}),
        ),
        llm_end(r, 7),
        event(
            "on_procedure_selection",
            json!({"procedure_id": null, "action_tool": "a", "pre_tool": "p", "force_mode": "soft", "candidate_count": 1}),
        ),
        event(
            "on_node_error",
            json!({"node_name": "tools", "run_id": r, "error": "e", "error_type": "ValueError"}),
        ),
        event(
            "on_node_end",
            json!({"node_name": "react", "run_id": r, "duration_ms": 1.5}),
        ),
        event(
            "on_react_loop_end",
            json!({"run_id": r, "iteration_index": 2, "content_type": "str", "has_tool_calls": false, "tool_call_count": 0, "termination_reason": "no_content_no_tool_calls"}),
        ),
        event(
            "on_fabrication_detected",
            json!({"run_id": r, "mode": "observe", "action_taken": "observed", "findings": [{"k": 1}], "refuse_threshold": 0.5, "max_finding_confidence": 0.9, "original_draft_preview": "d", "replacement_preview": null, "preview_truncated": false}),
        ),
        event(
            "on_user_correction",
            json!({"turn_id": "t", "original_response": "a", "correction_text": "b", "activation_log": {}, "tenant_id": "x"}),
        ),
        event(
            "on_agent_end",
            json!({"run_id": r, "final_response": "done", "duration_ms": 9.0, "node_count": 4}),
        ),
    ]
}

/// The content of `chain`'s steering answer for a call of `run-1`.
async fn steered(chain: &Chain) -> String {
    let d = chain
        .steering(&steering("search", json!({})), &no_state())
        .await;
    d.result.map(|s| s.content).unwrap_or_default()
}

#[tokio::test]
async fn subscriptions_are_read_at_load_and_only_subscribers_are_called() {
    let e = engine();
    let budget = plugin(&e, "budget", TOKEN_BUDGET, json!({"max_tokens": 10})).await;
    assert_eq!(budget.observes().names(), ["on_llm_end"]);
    let watcher = plugin(&e, "watcher", OBSERVER, json!({})).await;
    assert_eq!(watcher.observes().iter().count(), LifecycleHook::ALL.len());
    let c = chain(&[&budget]);
    assert_eq!(
        c.observe(&event(
            "on_agent_start",
            json!({"query": "q", "run_id": "r"})
        )),
        Observed::Unobserved,
        "no guard observes on_agent_start"
    );
    assert_eq!(
        c.observed_hooks(),
        Hooks::from_iter([LifecycleHook::LlmEnd])
    );
}

#[tokio::test]
async fn a_run_s_observations_arrive_in_order_before_its_next_decision() {
    let e = engine();
    let watcher = plugin(&e, "watcher", OBSERVER, json!({})).await;
    let c = chain(&[&watcher]);
    for ev in every_hook() {
        assert_eq!(c.observe(&ev), Observed::Queued);
    }
    // At once: the decision waits for the observations queued before it.
    // `on_user_correction` and `on_procedure_selection` carry no run id:
    // another run (the empty one).
    assert_eq!(
        steered(&c).await,
        "seen=11 hooks=on_agent_start,on_node_start,on_token_composition,on_llm_start,\
         on_llm_pre_call,on_llm_end:7,on_node_error,on_node_end,on_react_loop_end,\
         on_fabrication_detected,on_agent_end"
    );
    assert_eq!(e.observe_faults(), 0);
}

#[tokio::test]
async fn a_budget_guard_refuses_the_very_next_tool_call_and_a_new_run_starts_from_zero() {
    let e = engine();
    let budget = plugin(&e, "budget", TOKEN_BUDGET, json!({"max_tokens": 100})).await;
    let c = chain(&[&budget]);
    assert_eq!(c.observe(&llm_end("run-1", 60)), Observed::Queued);
    let d = c
        .steering(&steering("search", json!({})), &no_state())
        .await;
    assert_eq!(d.result, None, "60 of 100: the call proceeds");
    for _ in 0..3 {
        c.observe(&llm_end("run-1", 20));
    }
    // No sleep: the very next decision sees all three.
    let d = c
        .steering(&steering("search", json!({})), &no_state())
        .await;
    assert_eq!(
        serde_json::to_value(&d.result).expect("json"),
        json!({"action": "skip", "content": "Token budget of 100 exceeded. Answer with what you have.", "is_error": false})
    );
    let d = c
        .routing(&routing(&["search", "send_email"]), &no_state())
        .await;
    assert_eq!(d.result, Vec::<String>::new(), "routing hides every tool");
    let mut other = steering("search", json!({}));
    other.run_id = "run-2".into();
    let d = c.steering(&other, &no_state()).await;
    assert_eq!(d.result, None, "a new run starts from zero");
}

/// Limits that make a spinning observer's call end soon.
fn short() -> Limits {
    Limits {
        timeout: Duration::from_millis(100),
        ..Limits::default()
    }
}

#[tokio::test]
async fn hostile_observers_never_hold_the_caller_and_decisions_still_answer() {
    for (attack, fault) in [("spin", "deadline"), ("trap", "trap"), ("blow", "state")] {
        let e = engine();
        let bad = plugin_with(
            &e,
            attack,
            OBSERVER,
            json!({ attack: true }),
            short(),
            OnError::Skip,
        )
        .await;
        let c = chain(&[&bad]);
        let started = Instant::now();
        for _ in 0..5 {
            assert_eq!(c.observe(&llm_end("run-1", 1)), Observed::Queued);
        }
        let handed_over = started.elapsed();
        // The decision answers (its own state untouched by the faults).
        assert!(
            steered(&c).await.starts_with("seen=0"),
            "{attack}: the faulting observations left nothing"
        );
        assert!(
            handed_over < Duration::from_secs(1),
            "{attack}: observe() returned at once, not after a guard call ({handed_over:?})"
        );
        // Every observation faults, is counted and skipped.
        let until = Instant::now() + Duration::from_secs(60);
        while e.observe_faults() < 5 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            e.observe_faults(),
            5,
            "{attack} ({fault}): each observation faulted"
        );
    }
}

#[tokio::test]
async fn ten_thousand_llm_end_events_in_one_run_are_bounded_and_counted() {
    let e = engine();
    let watcher = plugin(&e, "watcher", OBSERVER, json!({})).await;
    let c = chain(&[&watcher]);
    let mut queued = 0u64;
    let started = Instant::now();
    for _ in 0..10_000 {
        match c.observe(&llm_end("run-1", 1)) {
            Observed::Queued => queued += 1,
            Observed::Dropped => {}
            Observed::Unobserved => panic!("the watcher observes on_llm_end"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "handing over never waits"
    );
    assert_eq!(queued + e.observations_dropped(), 10_000);
    assert!(
        e.observations_dropped() > 0,
        "past the run's queue limit: dropped"
    );
    assert!(queued >= 1024, "the run's queue took its limit: {queued}");
    // A decision answers within its bound, whatever is still queued.
    let d = c
        .steering(&steering("search", json!({})), &no_state())
        .await;
    assert!(d.result.is_some());
    let until = Instant::now() + Duration::from_secs(300);
    while e.observations_waiting() > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        steered(&c).await.split(' ').next(),
        Some(format!("seen={queued}").as_str()),
        "every queued observation delivered, none twice"
    );
    assert_eq!(e.observe_faults(), 0);
}

#[test]
fn a_lifecycle_event_with_a_field_missing_or_mistyped_names_it() {
    let err =
        LifecycleEvent::from_value(LifecycleHook::LlmEnd, json!({"model": "m", "output": "o"}))
            .expect_err("usage missing");
    assert!(err.contains("on_llm_end") && err.contains("usage"), "{err}");
    let err = LifecycleEvent::from_value(
        LifecycleHook::LlmEnd,
        json!({"model": "m", "output": "o", "usage": "lots"}),
    )
    .expect_err("usage not a dict");
    assert!(err.contains("`event.usage`"), "{err}");
    let err = "on_nothing".parse::<LifecycleHook>().expect_err("unknown");
    assert!(err.contains("on_llm_end"), "{err}");
}

#[tokio::test]
async fn over_http_post_v1_observe_answers_202_and_the_next_decision_sees_it() {
    use crate::server::Running;
    use reqwest::StatusCode;
    let s = Running::start_with(
        &[("token-budget.wasm", TOKEN_BUDGET)],
        &[(
            "toolgate.toml",
            "[[plugin]]\npath = \"token-budget.wasm\"\n[plugin.config]\nmax_tokens = 100\n",
        )],
        toolgate::server::ServerConfig::default(),
    )
    .await;
    let (status, body) = s.get("/v1/hooks").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json"),
        json!({"hooks": ["on_llm_end"], "response": false, "generation": 1})
    );
    let usage = json!({"hook": "on_llm_end", "event": {
        "model": "m", "output": "o", "usage": {"input_tokens": 80, "output_tokens": 40},
        "run_id": "r1",
    }});
    let (status, body) = s.post("/v1/observe", usage).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"observed": "queued"}));
    let call =
        json!({"event": {"run_id": "r1", "tool_name": "search", "call_id": "c", "args": {}}});
    let (status, body) = s.post("/v1/steering", call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"action": "skip", "content": "Token budget of 100 exceeded. Answer with what you have.", "is_error": false})
    );
    for (bad, field) in [
        (
            json!({"hook": "on_llm_end", "event": {"model": "m", "output": "o"}}),
            "usage",
        ),
        (
            json!({"hook": "on_llm_end", "event": {"model": 3, "output": "o", "usage": {}}}),
            "event.model",
        ),
        (json!({"hook": "on_nothing", "event": {}}), "hook"),
        (json!({"event": {}}), "hook"),
    ] {
        let (status, body) = s.post("/v1/observe", bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let error = body["error"].as_str().expect("error");
        assert!(error.contains(field), "{field}: {error}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_faulting_observer_is_counted_in_the_metrics() {
    use crate::server::Running;
    let s = Running::start_with(
        &[("observer.wasm", OBSERVER)],
        &[(
            "toolgate.toml",
            "[[plugin]]\npath = \"observer.wasm\"\n[plugin.config]\ntrap = true\n",
        )],
        toolgate::server::ServerConfig::default(),
    )
    .await;
    let (status, _) = s
        .post(
            "/v1/observe",
            json!({"hook": "on_agent_start", "event": {"query": "q", "run_id": "r"}}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, text) = s.get("/metrics").await;
        if text.contains("toolgate_observe_faults_total 1") {
            assert!(text.contains("toolgate_observations_total 1"), "{text}");
            break;
        }
        assert!(Instant::now() < until, "{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

#[test]
fn token_budget_case_file_passes_and_fails_without_its_events() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugins/rust/token-budget/token-budget.test.toml"
    ))
    .expect("case file")
    .replace(
        "../../../build/plugins/rust/token-budget.wasm",
        "token-budget.wasm",
    );
    let run = |text: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(TOKEN_BUDGET, dir.path().join("token-budget.wasm")).expect("copy");
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
    assert_eq!(said, "5 passed, 0 failed\n");
    // Without the run's on_llm_end events the budget is not used: the
    // cancel case fails.
    let out = run(&text.replace("events = [\n", "unused = [\n"));
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown key is a bad case file"
    );
    let out = run(&text.replace("run_id = \"r2\" } },", "run_id = \"other\" } },"));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("1 failed"), "{said}");
}

#[test]
fn check_replay_and_compare_deliver_a_traces_lifecycle_events_before_its_decisions() {
    let dir = |max_tokens: u32| {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::copy(TOKEN_BUDGET, d.path().join("token-budget.wasm")).expect("copy");
        std::fs::write(
            d.path().join("toolgate.toml"),
            format!("[[plugin]]\npath = \"token-budget.wasm\"\n[plugin.config]\nmax_tokens = {max_tokens}\n"),
        )
        .expect("manifest");
        d
    };
    let (tight, loose) = (dir(100), dir(1000));
    let files = tempfile::tempdir().expect("tempdir");
    let usage = json!({"hook": "on_llm_end", "event": {
        "model": "m", "output": "o", "usage": {"total_tokens": 120}, "run_id": "r1",
    }});
    let call =
        |run: &str| json!({"run_id": run, "tool_name": "search", "call_id": "c", "args": {}});
    let write = |name: &str, text: String| {
        let path = files.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let events = write("events.jsonl", format!("{usage}\n"));
    let event = write("event.json", call("r1").to_string());
    let toolgate = |args: &[std::ffi::OsString]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .env("TOOLGATE_LOG", "error")
            .output()
            .expect("run toolgate");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let check = |with_events: bool| {
        let mut args = vec![
            os("check"),
            os("--plugins"),
            tight.path().into(),
            os("--seam"),
            os("steering"),
            os("--event"),
            event.clone().into(),
        ];
        if with_events {
            args.extend([os("--events"), events.clone().into()]);
        }
        toolgate(&args)
    };
    // `check --events`: the usage is observed first, the call is cancelled.
    let (code, out, err) = check(true);
    assert_eq!(code, Some(0), "{out}{err}");
    let decision: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(decision["result"]["action"], "skip", "{out}");
    let (code, out, err) = check(false);
    assert_eq!(code, Some(0), "{out}{err}");
    let decision: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        decision["result"],
        Value::Null,
        "without the events it proceeds: {out}"
    );
    // A bad events line names the file, the line and the field.
    let bad = write(
        "bad.jsonl",
        format!(
            "{usage}\n{}\n",
            json!({"hook": "on_llm_end", "event": {"model": 3}})
        ),
    );
    let args = [
        os("check"),
        os("--plugins"),
        tight.path().into(),
        os("--seam"),
        os("steering"),
        os("--event"),
        event.clone().into(),
        os("--events"),
        bad.clone().into(),
    ];
    let (code, _, err) = toolgate(&args);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("bad.jsonl:2") && err.contains("event.model"),
        "{err}"
    );
    // `replay`: a lifecycle line is delivered; the run's next call sees it,
    // another run's does not.
    let trace = write(
        "trace.jsonl",
        format!(
            "{usage}\n{}\n{}\n",
            json!({"seam": "steering", "event": call("r1")}),
            json!({"seam": "steering", "event": call("r2")}),
        ),
    );
    let (code, out, err) = toolgate(&[
        os("replay"),
        os("--json"),
        os("--plugins"),
        tight.path().into(),
        trace.clone().into(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let lines: Vec<Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(
        lines[0],
        json!({"line": 1, "hook": "on_llm_end", "observed": "queued"})
    );
    assert_eq!(lines[1]["result"]["action"], "skip", "{out}");
    assert_eq!(lines[2]["result"], Value::Null, "{out}");
    // `replay --compare`: both sides observe it; 100 cancels, 1000 does not.
    let (code, out, err) = toolgate(&[
        os("replay"),
        os("--json"),
        os("--plugins"),
        tight.path().into(),
        os("--compare"),
        loose.path().into(),
        trace.clone().into(),
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    let report: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["events"], 2, "{out}");
    assert_eq!(report["differ"], 1, "{out}");
    assert_eq!(report["groups"][0]["change"], "skip → proceed", "{out}");
    // `check --cases` observes a case's events as `toolgate test` does.
    let cases = write(
        "budget.test.toml",
        format!(
            "[[plugin]]\npath = \"{}\"\n[plugin.config]\nmax_tokens = 100\n\n[[case]]\nname = \"over\"\nseam = \"steering\"\nevents = [{{ hook = \"on_llm_end\", event = {{ model = \"m\", output = \"o\", usage = {{ total_tokens = 120 }}, run_id = \"r1\" }} }}]\nevent = {{ run_id = \"r1\", tool_name = \"search\", call_id = \"c\", args = {{}} }}\nexpect = {{ action = \"proceed\" }}\n",
            tight.path().join("token-budget.wasm").display()
        ),
    );
    let (code, out, err) = toolgate(&[os("check"), os("--cases"), cases.into()]);
    assert_eq!(code, Some(0), "{out}{err}");
    let decision: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(decision["result"]["action"], "skip", "{out}");
}
