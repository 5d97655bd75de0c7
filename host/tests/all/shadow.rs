//! Shadow guards (`mode = "shadow"`): run on every call they subscribe to,
//! in a chain of their own, recorded and counted, never applied; their
//! faults never quarantine them nor fail anything closed.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use toolgate::event::Skip;
use toolgate::{Mode, OnError, Outcome, Plugin, PluginSpec, Verdict};
use toolgate_tests::{SCRIPTED, SQL_GUARD};

use crate::server::{Running, series, steering as http_steering};
use crate::*;

async fn shadow(name: &str, config: Value, on_error: OnError) -> Arc<Plugin> {
    let spec = PluginSpec {
        name: name.into(),
        config,
        on_error,
        mode: Mode::Shadow,
        prepared: toolgate::Depth::Fixed(0),
        ..PluginSpec::new(SCRIPTED)
    };
    Arc::new(Plugin::load(&engine(), spec).await.expect("loads"))
}

/// The library's `Chain::decide`: the enforced guards answer, the shadow
/// chain's would-be answer sits beside it with whether they agree; a
/// faulting fail-closed shadow guard never reaches the answer.
#[tokio::test]
async fn decide_puts_the_shadow_chains_answer_beside_the_enforced_one() {
    let e = engine();
    let sql = plugin(&e, "sql-guard", SQL_GUARD, json!({})).await;
    let says_no = json!({"steering": {"action": "skip", "content": "shadow says no"}});
    let no = shadow("says-no", says_no, OnError::Skip).await;
    let breaks = json!({"steering": {"action": "jump"}, "routing": {"keep": 1}});
    let breaks = shadow("breaks", breaks, OnError::Deny).await;
    let shadow_skip = Verdict::Steering(Some(Skip {
        content: "shadow says no".into(),
        is_error: true,
    }));

    // Shadow first in the order: the enforced guard still decides.
    let c = chain(&[&breaks, &no, &sql]);
    let delete = toolgate::Event::Steering(steering("run_query", json!({"sql": "DELETE FROM t"})));
    let d = c.decide(&delete, &no_state()).await;
    assert!(matches!(&d.result, Verdict::Steering(Some(s)) if s.content.contains("WHERE")));
    assert_eq!(d.trace.len(), 1, "{:?}", d.trace);
    assert_eq!(
        (d.trace[0].plugin.as_str(), d.trace[0].mode),
        ("sql-guard", Mode::Enforce)
    );
    let s = d.shadow.expect("shadow ran");
    // The fail-closed fault is what the shadow chain would answer: it
    // steers there, and stops that chain.
    let Verdict::Steering(Some(would)) = &s.result else {
        panic!("{:?}", s.result)
    };
    assert!(would.content.contains("`breaks` failed"), "{would:?}");
    assert_eq!(s.agrees, Some(false));
    assert_eq!(s.trace.len(), 1);
    assert_eq!(
        (s.trace[0].mode, s.trace[0].outcome),
        (Mode::Shadow, Outcome::Fault)
    );

    // Without the breaking guard: a proceed with a shadow skip beside it.
    let c = chain(&[&no, &sql]);
    let search = toolgate::Event::Steering(steering("search", json!({})));
    let d = c.decide(&search, &no_state()).await;
    assert_eq!(d.result, Verdict::Steering(None));
    let s = d.shadow.expect("shadow ran");
    assert_eq!((s.result, s.agrees), (shadow_skip, Some(false)));
    // The seam methods run the enforced guards only.
    let d = c
        .steering(&steering("search", json!({})), &no_state())
        .await;
    let consulted: Vec<&str> = d.trace.iter().map(|t| t.plugin.as_str()).collect();
    assert_eq!(
        (d.result, consulted, d.shadow.is_none()),
        (None, vec!["sql-guard"], true)
    );

    // Routing: the fail-closed shadow fault would hide every tool; the
    // answer hides none.
    let c = chain(&[&breaks]);
    let route = toolgate::Event::Routing(routing(&["a", "b"]));
    for _ in 0..3 {
        let d = c.decide(&route, &no_state()).await;
        assert_eq!(d.result, Verdict::Routing(vec!["a".into(), "b".into()]));
        let s = d.shadow.expect("shadow ran");
        assert_eq!(
            (s.result, s.agrees),
            (Verdict::Routing(vec![]), Some(false))
        );
        assert_eq!(s.trace[0].fault, Some(toolgate::Fault::Unreachable));
    }

    // A shadow guard that says what the enforced chain says agrees.
    let quiet = shadow("quiet", json!({}), OnError::Skip).await;
    let d = chain(&[&quiet, &sql]).decide(&search, &no_state()).await;
    assert_eq!(d.shadow.expect("shadow ran").agrees, Some(true));
    // No shadow guard: no shadow run.
    let d = chain(&[&sql]).decide(&search, &no_state()).await;
    assert!(d.shadow.is_none());
}

/// Over HTTP: a shadow guard that always skips steers no call, and every
/// one of its verdicts is counted in `/metrics` (after the answer); a
/// fail-closed shadow guard that faults on every call blocks nothing and
/// is never quarantined; `/v1/plugins` shows each plugin's mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_guard_never_steers_and_every_verdict_is_counted() {
    const N: usize = 20;
    let manifest = r#"
[quarantine]
faults = 2

[[plugin]]
name = "always-skip"
path = "scripted.wasm"
mode = "shadow"
config = { steering = { action = "skip", content = "shadow says no" } }

[[plugin]]
name = "breaks"
path = "scripted.wasm"
mode = "shadow"
on_error = "deny"
config = { routing = { keep = 1 } }

[[plugin]]
path = "sql-guard.wasm"
"#;
    let s = Running::start_with(
        &[("scripted.wasm", SCRIPTED), ("sql-guard.wasm", SQL_GUARD)],
        &[("toolgate.toml", manifest)],
        toolgate::ServerConfig::default(),
    )
    .await;
    let tools = json!(["search", "run_query"]);
    let route = json!({"event": {"run_id": "r", "mode": "m", "intent_label": "i",
        "total_tools": 2, "narrowed_tool_names": tools}});
    // Shadow runs take only spare CPU (threads at the lane's low
    // priority): on a machine busy with other work they could pile up past
    // the backlog and be dropped. One at a time, each is counted before
    // the next request.
    let runs = |text: &str| {
        ["true", "false", "undecided"]
            .iter()
            .flat_map(|agrees| {
                ["steering", "routing"].map(|seam| {
                    let labels = format!(
                        "toolgate_shadow_decisions_total{{seam=\"{seam}\",agrees=\"{agrees}\"}}"
                    );
                    series(text, &labels).unwrap_or(0.0)
                })
            })
            .sum::<f64>()
            + series(text, "toolgate_shadow_dropped_total").unwrap_or(0.0)
    };
    let settled = |n: usize| {
        let s = &s;
        async move {
            let started = std::time::Instant::now();
            while started.elapsed() < Duration::from_secs(60) {
                if runs(&s.get("/metrics").await.1) >= n as f64 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    for i in 0..N {
        let (status, body) = s
            .post("/v1/steering", http_steering("search", json!({})))
            .await;
        assert_eq!(
            (status, body),
            (StatusCode::OK, Value::Null),
            "0 calls steered"
        );
        settled(2 * i + 1).await;
        let (status, body) = s.post("/v1/routing", route.clone()).await;
        assert_eq!((status, &body), (StatusCode::OK, &tools), "nothing hidden");
        settled(2 * i + 2).await;
    }
    // The enforced guard still decides; its trace holds enforced guards
    // only (the shadow ones run after the answer).
    let (_, body) = s
        .post(
            "/v1/steering?trace=1",
            http_steering("run_query", json!({"sql": "DELETE FROM t"})),
        )
        .await;
    assert!(
        body["result"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("WHERE")),
        "{body}"
    );
    assert_eq!(body["trace"], json!([body["trace"][0]]), "{body}");
    assert_eq!(body["trace"][0]["mode"], "enforce");

    let counted = |text: &str, labels: &str| {
        series(text, &format!("toolgate_shadow_verdicts_total{{{labels}}}")).unwrap_or(0.0)
    };
    let wanted = [
        (r#"plugin="always-skip",outcome="skip""#, N + 1),
        (r#"plugin="always-skip",outcome="proceed""#, N),
        (r#"plugin="breaks",outcome="fault""#, N),
    ];
    let started = std::time::Instant::now();
    let text = loop {
        let (_, text) = s.get("/metrics").await;
        if wanted
            .iter()
            .all(|(labels, n)| counted(&text, labels) >= *n as f64)
            || started.elapsed() > Duration::from_secs(60)
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (labels, n) in wanted {
        assert_eq!(counted(&text, labels), n as f64, "{labels}\n{text}");
    }
    // `breaks` ran after `always-skip` proceeded at routing only: at
    // steering the shadow chain stopped at the skip.
    assert_eq!(counted(&text, r#"plugin="breaks",outcome="proceed""#), 0.0);
    for (seam, n) in [("steering", N + 1), ("routing", N)] {
        let labels = format!("toolgate_shadow_decisions_total{{seam=\"{seam}\",agrees=\"false\"}}");
        assert_eq!(series(&text, &labels), Some(n as f64), "{text}");
    }
    assert_eq!(series(&text, "toolgate_shadow_dropped_total"), Some(0.0));
    // Shadow calls are never counted as the enforced guards' are.
    assert!(
        !text.contains(r#"toolgate_guard_calls_total{plugin="always-skip""#),
        "{text}"
    );
    assert!(
        !text.contains(r#"toolgate_guard_outcomes_total{plugin="breaks""#),
        "{text}"
    );

    let (_, listed) = s.get("/v1/plugins").await;
    let listed: Value = serde_json::from_str(&listed).expect("JSON");
    let modes: Vec<(&str, &str)> = listed["global"]
        .as_array()
        .expect("global")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or(""),
                p["mode"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        modes,
        [
            ("always-skip", "shadow"),
            ("breaks", "shadow"),
            ("sql-guard", "enforce")
        ]
    );
    assert_eq!(listed["global"][1]["health"]["state"], "ok", "{listed}");
    assert_eq!(listed["global"][1]["health"]["quarantines"], 0, "{listed}");
    s.stop().await;
}

/// Shadow runs after the answer are bounded: with a shadow guard that
/// spins to its deadline, the calls without a tenant hold at most a
/// quarter of the engine's room (8 of the tests' 32); the runs past it are
/// dropped, never queued, and every run is either counted or dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_runs_past_the_backlog_are_dropped_and_counted() {
    const N: usize = 16;
    let manifest = r#"
[[plugin]]
name = "spins"
path = "hostile.wasm"
mode = "shadow"
timeout_ms = 500
fuel = 100_000_000_000
config = { attack = "loop" }
"#;
    let s = Running::start_with(
        &[("hostile.wasm", toolgate_tests::HOSTILE)],
        &[("toolgate.toml", manifest)],
        toolgate::ServerConfig::default(),
    )
    .await;
    for _ in 0..N {
        let (status, body) = s
            .post("/v1/steering", http_steering("search", json!({})))
            .await;
        assert_eq!((status, body), (StatusCode::OK, Value::Null));
    }
    let tally = |text: &str| {
        let ran: f64 = ["fault", "unavailable"]
            .iter()
            .filter_map(|o| {
                series(
                    text,
                    &format!("toolgate_shadow_verdicts_total{{plugin=\"spins\",outcome=\"{o}\"}}"),
                )
            })
            .sum();
        let dropped = series(text, "toolgate_shadow_dropped_total").unwrap_or(0.0);
        (ran, dropped)
    };
    let started = std::time::Instant::now();
    let (ran, dropped) = loop {
        let (_, text) = s.get("/metrics").await;
        let (ran, dropped) = tally(&text);
        if ran + dropped >= N as f64 || started.elapsed() > Duration::from_secs(120) {
            break (ran, dropped);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ran + dropped, N as f64, "every run counted or dropped");
    assert!(ran >= 1.0, "the first run had room");
    assert!(
        dropped >= 1.0,
        "{N} answers came back while 8 spinners held the room: {dropped} dropped"
    );
    s.stop().await;
}

/// Shadow work gets only what enforcement leaves: tenant `a` runs a
/// shadow guard that spins to its limits and one that grows its memory to
/// its cap, beside its enforced sql-guard. Every enforced call — 200 at
/// 100 a second from four clients, each sent on time whatever the
/// answers before it — is answered, and answered as the sql-guard alone
/// answers it (none 429, none 503); the shadow runs that found no spare
/// room are dropped and counted; neither shadow guard takes from `a`'s
/// share, nor is quarantined for its faults, and the sql-guard stays
/// healthy. (Before shadow runs took only spare room, they waited in
/// `a`'s share ahead of its enforced calls: 16 to 20 of 200 answered,
/// the rest 429.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_or_memory_hungry_shadow_guard_leaves_its_tenants_answers_alone() {
    const CLIENTS: usize = 4;
    const EACH: usize = 50;
    const PERIOD: Duration = Duration::from_millis(40); // 25/s a client
    let manifest = r#"
[[plugin]]
path = "sql-guard.wasm"

[[plugin]]
name = "spins"
path = "hostile.wasm"
mode = "shadow"
config = { attack = "loop" }

[[plugin]]
name = "hoards"
path = "hostile.wasm"
mode = "shadow"
config = { attack = "alloc" }
"#;
    let s = Arc::new(
        Running::start_with(
            &[
                ("tenants/a/sql-guard.wasm", SQL_GUARD),
                ("tenants/a/hostile.wasm", toolgate_tests::HOSTILE),
            ],
            &[("tenants/a/toolgate.toml", manifest)],
            toolgate::ServerConfig::default(),
        )
        .await,
    );
    let skip = json!({"action": "skip", "content": "Add a WHERE clause before running this query.", "is_error": true});
    let calls = (0..CLIENTS).map(|client| {
        let (s, skip) = (Arc::clone(&s), skip.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            let mut sent = Vec::new();
            for i in 0..EACH {
                tick.tick().await;
                let (sql, want) = match (client + i) % 2 {
                    0 => ("DELETE FROM users", skip.clone()),
                    _ => ("SELECT * FROM users WHERE id = 1", Value::Null),
                };
                let mut body = http_steering("run_query", json!({ "sql": sql }));
                body["tenant"] = json!("a");
                let s = Arc::clone(&s);
                sent.push(tokio::spawn(async move {
                    let (status, got) = s.post("/v1/steering", body).await;
                    (status, got == want, got)
                }));
            }
            let mut answers = Vec::new();
            for call in sent {
                answers.push(call.await.expect("call"));
            }
            answers
        })
    });
    let mut answers = Vec::new();
    for client in calls.collect::<Vec<_>>() {
        answers.extend(client.await.expect("client"));
    }
    let count = |status: StatusCode| answers.iter().filter(|a| a.0 == status).count();
    let right = answers
        .iter()
        .filter(|(status, same, _)| *status == StatusCode::OK && *same)
        .count();
    let (busy, not_decided) = (
        count(StatusCode::TOO_MANY_REQUESTS),
        count(StatusCode::SERVICE_UNAVAILABLE),
    );
    let wrong: Vec<_> = answers
        .iter()
        .filter(|(status, same, _)| *status != StatusCode::OK || !*same)
        .take(3)
        .collect();
    assert_eq!(
        (right, busy, not_decided),
        (CLIENTS * EACH, 0, 0),
        "answered as without the shadow guards, 429, 503; e.g. {wrong:?}"
    );

    let (_, text) = s.get("/metrics").await;
    let dropped = series(&text, "toolgate_shadow_dropped_total").unwrap_or(0.0);
    assert!(
        dropped > 0.0,
        "shadow runs with no spare room are dropped and counted\n{text}"
    );
    let set = s.registry.plugin_set();
    let usage = set.accounts.tenants["a"].usage();
    assert_eq!(
        (usage.refused, usage.busy),
        (0, 0),
        "no call of `a` refused its share or its place: {usage:?}"
    );
    for plugin in set.tenants["a"].plugins() {
        let health = serde_json::to_value(plugin.health()).expect("JSON");
        assert_eq!(
            (&health["state"], &health["quarantines"]),
            (&json!("ok"), &json!(0)),
            "{}: {health}",
            plugin.name()
        );
    }
    drop(set);
    match Arc::try_unwrap(s) {
        Ok(s) => s.stop().await,
        Err(_) => panic!("the server is still shared"),
    }
}
