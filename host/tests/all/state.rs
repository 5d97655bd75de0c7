//! Guard state: scopes the host chooses, exact under concurrency, nothing
//! of a faulted call left behind, budgets that fault by class, and the
//! `0.1.0` and `0.2.0` contracts loading beside `0.3.0`.
//!
//! The guest is `stateful` (tests/guests/stateful), whose state operations
//! come from its config; two plugins of the same name share a scope, so a
//! writer and a reader are two configs of one name.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::state::StateFilter;
use toolgate::{Engine, EngineConfig, Fault, Limits, OnError, Outcome, Plugin, StateBackend};
use toolgate_tests::{SQL_GUARD, STATEFUL, TOOL_CALL_LIMIT};

use crate::redis_server::RedisServer;
use crate::{TEST_LANE, chain, no_state, plugin_with, steering};

/// An engine with room for many calls at once, its state in memory.
fn roomy() -> Engine {
    with_state(StateBackend::default())
}

/// The same, its state in a database of its own of the shared Redis.
fn on_redis() -> Engine {
    with_state(StateBackend::Redis {
        url: RedisServer::shared().fresh_url(),
    })
}

pub(crate) fn with_state(state: StateBackend) -> Engine {
    Engine::new(EngineConfig {
        max_instances: 128,
        long_lane_priority: TEST_LANE,
        state,
        ..EngineConfig::default()
    })
    .expect("engine")
}

/// Each of these tests, once with each store: what a guard sees of its
/// state does not depend on where the state lives.
macro_rules! on_every_store {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test(super::roomy()).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test(super::on_redis()).await
                }
            )*
        }
    };
}

on_every_store!(
    a_budget_guard_lets_exactly_n_of_1000_concurrent_calls_through,
    a_faulting_call_leaves_no_write_of_its_own_and_gives_back_its_adds,
    a_call_reads_its_own_writes_and_others_see_them_only_once_it_returns,
    scopes_are_kept_apart_by_tenant_plugin_and_run_whatever_the_key,
    budgets_fault_by_class_and_commit_nothing,
    expiries_of_zero_short_and_huge_do_what_the_contract_says,
    tool_call_limit_cancels_over_the_run_limit_and_a_new_run_starts_from_zero,
);

pub(crate) async fn stateful(
    engine: &Engine,
    name: &str,
    config: Value,
    limits: Limits,
) -> Arc<Plugin> {
    plugin_with(engine, name, STATEFUL, config, limits, OnError::Skip).await
}

/// A steering event in run `run` with call id `call`.
pub(crate) fn call_in(run: &str, call: &str, tool: &str) -> toolgate::event::BeforeToolCallEvent {
    let mut e = steering(tool, json!({}));
    e.run_id = run.into();
    e.call_id = call.into();
    e
}

/// What `plugin` answers at the steering seam: the skip's content (the
/// ops' results, for `stateful`), or `None` for proceed; with the trace's
/// outcome and fault.
pub(crate) async fn ask(
    plugin: &Arc<Plugin>,
    event: &toolgate::event::BeforeToolCallEvent,
) -> (Option<String>, Outcome, Option<Fault>) {
    let d = chain(&[plugin]).steering(event, &no_state()).await;
    let t = &d.trace[0];
    (d.result.map(|s| s.content), t.outcome, t.fault)
}

/// The reader of keys `keys` (scope, key) as JSON results.
pub(crate) async fn read(engine: &Engine, name: &str, keys: &[(&str, &str)], run: &str) -> Value {
    let ops: Vec<Value> = keys
        .iter()
        .map(|(scope, key)| json!({"op": "get", "scope": scope, "key": key}))
        .collect();
    let reader = stateful(engine, name, json!({ "ops": ops }), Limits::default()).await;
    let (content, outcome, fault) = ask(&reader, &call_in(run, "read", "t")).await;
    assert_eq!((outcome, fault), (Outcome::Skip, None), "the reader reads");
    serde_json::from_str(&content.expect("results")).expect("json")
}

async fn a_budget_guard_lets_exactly_n_of_1000_concurrent_calls_through(engine: Engine) {
    let limit = 37;
    let guard = stateful(
        &engine,
        "budget",
        json!({"budget": {"scope": "tenant", "key": "sent", "limit": limit}}),
        Limits::default(),
    )
    .await;
    // 1,000 calls at once, at most 64 in the pool at a time (the pool has
    // 128 slots: none is refused for capacity).
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let calls = (0..1000).map(|i| {
        let (guard, gate) = (Arc::clone(&guard), Arc::clone(&gate));
        tokio::spawn(async move {
            let _permit = gate.acquire().await.expect("gate");
            ask(
                &guard,
                &call_in(&format!("run-{}", i % 7), &format!("c{i}"), "send"),
            )
            .await
        })
    });
    assert_eq!(tally(futures_join(calls).await), (limit, 1000 - limit));
    let left = read(&engine, "budget", &[("tenant", "sent")], "any").await;
    assert_eq!(
        left,
        json!([limit.to_string()]),
        "refused calls were given back"
    );
}

/// A budget guard's answers counted: (proceeded, refused as "over"); any
/// other answer fails the test.
pub(crate) fn tally(answers: Vec<(Option<String>, Outcome, Option<Fault>)>) -> (usize, usize) {
    let (mut proceeded, mut over) = (0, 0);
    for answer in answers {
        match answer {
            (None, Outcome::Proceed, None) => proceeded += 1,
            (Some(c), Outcome::Skip, None) if c == "over" => over += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    (proceeded, over)
}

/// Awaits every task, in order.
pub(crate) async fn futures_join<T>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks.collect::<Vec<_>>() {
        out.push(t.await.expect("task"));
    }
    out
}

async fn a_faulting_call_leaves_no_write_of_its_own_and_gives_back_its_adds(engine: Engine) {
    let writes = json!([
        {"op": "set", "scope": "run", "key": "seen", "value": "yes"},
        {"op": "add", "scope": "tenant", "key": "count", "delta": 5},
        {"op": "set", "scope": "tenant", "key": "note", "value": "kept?"},
    ]);
    // Every way a call can fault after writing, with the limits that make
    // it fault that way.
    let spin_fuel = Limits {
        fuel: 20_000_000,
        timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let spin_time = Limits {
        fuel: u64::MAX,
        timeout: Duration::from_millis(50),
        ..Limits::default()
    };
    let grow = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let cases = [
        ("trap", Limits::default(), Fault::Unreachable),
        ("spin", spin_fuel, Fault::OutOfFuel),
        ("spin", spin_time, Fault::Deadline),
        ("grow", grow, Fault::Memory),
    ];
    for (then, limits, fault) in cases {
        let writer = stateful(&engine, "w", json!({"ops": writes, "then": then}), limits).await;
        let (_, outcome, got) = ask(&writer, &call_in("r1", "c1", "t")).await;
        assert_eq!((outcome, got), (Outcome::Fault, Some(fault)), "{then}");
        let seen = read(
            &engine,
            "w",
            &[("run", "seen"), ("tenant", "count"), ("tenant", "note")],
            "r1",
        )
        .await;
        assert_eq!(
            seen,
            json!([null, null, null]),
            "nothing of a {fault} call is left"
        );
    }
    let everything = StateFilter::default();
    assert!(
        engine
            .state()
            .entries(&everything)
            .await
            .expect("entries")
            .is_empty()
    );
    // The same writes, without the fault, are committed.
    let writer = stateful(&engine, "w", json!({ "ops": writes }), Limits::default()).await;
    assert_eq!(
        ask(&writer, &call_in("r1", "c1", "t")).await.1,
        Outcome::Skip
    );
    let seen = read(
        &engine,
        "w",
        &[("run", "seen"), ("tenant", "count"), ("tenant", "note")],
        "r1",
    )
    .await;
    assert_eq!(seen, json!(["yes", "5", "kept?"]));
}

async fn a_call_reads_its_own_writes_and_others_see_them_only_once_it_returns(engine: Engine) {
    let own = stateful(
        &engine,
        "rw",
        json!({"ops": [
            {"op": "set", "scope": "run", "key": "k", "value": "7"},
            {"op": "get", "scope": "run", "key": "k"},
            {"op": "add", "scope": "run", "key": "k", "delta": 3},
            {"op": "get", "scope": "run", "key": "k"},
            {"op": "delete", "scope": "run", "key": "k"},
            {"op": "get", "scope": "run", "key": "k"},
            {"op": "add", "scope": "run", "key": "k", "delta": 2},
        ]}),
        Limits::default(),
    )
    .await;
    let (content, ..) = ask(&own, &call_in("r", "c", "t")).await;
    let results: Value = serde_json::from_str(&content.expect("results")).expect("json");
    assert_eq!(results, json!([null, "7", 10, "10", null, null, 2]));
    assert_eq!(
        read(&engine, "rw", &[("run", "k")], "r").await,
        json!(["2"])
    );
}

async fn scopes_are_kept_apart_by_tenant_plugin_and_run_whatever_the_key(engine: Engine) {
    // Keys that mean something to a key-value store's syntax, the empty
    // key, and a long one.
    let long = "k".repeat(10_000);
    let keys = [
        "",
        ":",
        "*",
        "{a}",
        "a:b:c",
        "t2:p",
        "\u{1F600}",
        long.as_str(),
    ];
    for key in keys {
        let writer = stateful(
            &engine,
            "p",
            json!({"ops": [
                {"op": "set", "scope": "run", "key": key, "value": "run-value"},
                {"op": "set", "scope": "tenant", "key": key, "value": "tenant-value"},
            ]}),
            Limits::default(),
        )
        .await;
        let writer = Arc::new(writer.serving("t1"));
        assert_eq!(
            ask(&writer, &call_in("r1", "c", "t")).await.1,
            Outcome::Skip,
            "reports"
        );
        let reader = |name: &str, tenant: &str| {
            let (name, tenant) = (name.to_string(), tenant.to_string());
            let engine = engine.clone();
            async move {
                let ops = json!([
                    {"op": "get", "scope": "run", "key": key},
                    {"op": "get", "scope": "tenant", "key": key},
                ]);
                let p = stateful(&engine, &name, json!({ "ops": ops }), Limits::default()).await;
                Arc::new(p.serving(&tenant))
            }
        };
        let answer = |p: Arc<Plugin>, run: &'static str| async move {
            let (content, ..) = ask(&p, &call_in(run, "c", "t")).await;
            serde_json::from_str::<Value>(&content.expect("results")).expect("json")
        };
        let same = reader("p", "t1").await;
        assert_eq!(
            answer(same.clone(), "r1").await,
            json!(["run-value", "tenant-value"])
        );
        assert_eq!(
            answer(same, "r2").await,
            json!([null, "tenant-value"]),
            "another run"
        );
        let other_tenant = reader("p", "t2").await;
        assert_eq!(
            answer(other_tenant, "r1").await,
            json!([null, null]),
            "another tenant"
        );
        let other_plugin = reader("q", "t1").await;
        assert_eq!(
            answer(other_plugin, "r1").await,
            json!([null, null]),
            "another plugin"
        );
        engine
            .state()
            .clear(&StateFilter {
                tenant: "t1".into(),
                ..Default::default()
            })
            .await
            .expect("clear");
    }
}

async fn budgets_fault_by_class_and_commit_nothing(engine: Engine) {
    let small = Limits {
        state_keys: 3,
        state_bytes: 4 << 10,
        state_ops: 10,
        ..Limits::default()
    };
    let set = |key: &str, value: &str| json!({"op": "set", "scope": "tenant", "key": key, "value": value});
    let cases = [
        (
            "fills its scope's bytes",
            json!({"fill": {"scope": "tenant", "bytes": 1000}}),
            Fault::StateBudget,
        ),
        (
            "writes too many keys",
            json!({"ops": [set("a", "1"), set("b", "1"), set("c", "1"), set("d", "1")]}),
            Fault::StateBudget,
        ),
        (
            "makes too many operations",
            json!({"ops": vec![json!({"op": "get", "scope": "run", "key": "x"}); 11]}),
            Fault::StateBudget,
        ),
        (
            "sets a value bigger than its scope",
            json!({"ops": [set("big", &"v".repeat(5 << 10))]}),
            Fault::StateBudget,
        ),
        (
            "adds to a value that is not an integer",
            json!({"ops": [set("s", "abc"), {"op": "add", "scope": "tenant", "key": "s", "delta": 1}]}),
            Fault::StateInvalid,
        ),
        (
            "adds past s64",
            json!({"ops": [{"op": "add", "scope": "tenant", "key": "n", "delta": i64::MAX}, {"op": "add", "scope": "tenant", "key": "n", "delta": 1}]}),
            Fault::StateInvalid,
        ),
    ];
    for (what, config, fault) in cases {
        let p = stateful(&engine, "b", config, small.clone()).await;
        let (_, outcome, got) = ask(&p, &call_in("r", "c", "t")).await;
        assert_eq!(
            (outcome, got),
            (Outcome::Fault, Some(fault)),
            "a guard that {what}"
        );
        let left = engine
            .state()
            .entries(&StateFilter::default())
            .await
            .expect("entries");
        assert!(left.is_empty(), "a guard that {what} left {left:?}");
    }
    // Within the budget, the same keys are kept.
    let p = stateful(
        &engine,
        "b",
        json!({"ops": [set("a", "1"), set("b", "1"), set("c", "1")]}),
        small,
    )
    .await;
    assert_eq!(
        ask(&p, &call_in("r", "c", "t")).await.1,
        Outcome::Skip,
        "reports"
    );
    assert_eq!(
        engine
            .state()
            .entries(&StateFilter::default())
            .await
            .expect("entries")
            .len(),
        3
    );
}

async fn expiries_of_zero_short_and_huge_do_what_the_contract_says(engine: Engine) {
    let limits = Limits {
        state_max_ttl: Duration::from_secs(60),
        ..Limits::default()
    };
    let p = stateful(
        &engine,
        "ttl",
        json!({"ops": [
            {"op": "set", "scope": "tenant", "key": "zero", "value": "v", "ttl_ms": 0},
            {"op": "set", "scope": "tenant", "key": "short", "value": "v", "ttl_ms": 30},
            {"op": "set", "scope": "tenant", "key": "huge", "value": "v", "ttl_ms": u64::MAX},
            {"op": "add", "scope": "tenant", "key": "window", "delta": 1, "ttl_ms": 30},
        ]}),
        limits,
    )
    .await;
    assert_eq!(
        ask(&p, &call_in("r", "c", "t")).await.1,
        Outcome::Skip,
        "reports"
    );
    let entries = engine
        .state()
        .entries(&StateFilter::default())
        .await
        .expect("entries");
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        ["huge", "short", "window"],
        "a ttl of 0 keeps nothing"
    );
    let huge = &entries[0];
    assert!(
        huge.ttl_ms.is_some_and(|ms| ms <= 60_000),
        "cut to state_max_ttl: {huge:?}"
    );
    // Past their expiry (slept for longer, however slow the machine).
    tokio::time::sleep(Duration::from_millis(60)).await;
    let seen = read(
        &engine,
        "ttl",
        &[
            ("tenant", "short"),
            ("tenant", "window"),
            ("tenant", "huge"),
        ],
        "r",
    )
    .await;
    assert_eq!(seen, json!([null, null, "v"]));
}

async fn tool_call_limit_cancels_over_the_run_limit_and_a_new_run_starts_from_zero(engine: Engine) {
    let config = json!({"tool": "send_email", "run_limit": 2, "thread_limit": 3});
    let guard = plugin_with(
        &engine,
        "tool-call-limit",
        TOOL_CALL_LIMIT,
        config,
        Limits::default(),
        OnError::Skip,
    )
    .await;
    assert!(guard.uses_state() && guard.validates_config());
    let email = |run: &str, call: &str| call_in(run, call, "send_email");
    let thread = json!({"thread_id": "conversation-1"});
    let decide = |e: toolgate::event::BeforeToolCallEvent, state: Value| {
        let guard = Arc::clone(&guard);
        async move { chain(&[&guard]).steering(&e, &state).await.result }
    };
    let cancel = Some(toolgate::event::Skip {
        content: "Tool call limit exceeded. Do not call 'send_email' again.".into(),
        is_error: false,
    });
    assert_eq!(decide(email("r1", "1"), thread.clone()).await, None);
    assert_eq!(
        decide(call_in("r1", "x", "search"), thread.clone()).await,
        None,
        "another tool"
    );
    assert_eq!(decide(email("r1", "2"), thread.clone()).await, None);
    assert_eq!(
        decide(email("r1", "3"), thread.clone()).await,
        cancel,
        "the third in a run"
    );
    assert_eq!(
        decide(email("r1", "4"), thread.clone()).await,
        cancel,
        "not counted, still over"
    );
    assert_eq!(
        decide(email("r2", "5"), thread.clone()).await,
        None,
        "a new run: thread's third"
    );
    assert_eq!(
        decide(email("r2", "6"), thread.clone()).await,
        cancel,
        "the thread's fourth"
    );
    assert_eq!(
        decide(email("r2", "7"), json!({})).await,
        None,
        "no thread id: no thread limit"
    );
}

#[tokio::test]
async fn a_bad_config_is_refused_at_load_with_the_guards_message() {
    let engine = roomy();
    for (config, says) in [
        (
            json!({"tool": "send_email"}),
            "set run_limit, thread_limit or both",
        ),
        (json!({"run_limit": "two"}), "invalid type: string \"two\""),
        (
            json!({"run_limit": 1, "runlimit": 2}),
            "unknown field `runlimit`",
        ),
        (json!({"run_limit": -1}), "run_limit must be 0 or more"),
    ] {
        let spec = toolgate::PluginSpec {
            config: config.clone(),
            name: "limit".into(),
            ..toolgate::PluginSpec::new(TOOL_CALL_LIMIT)
        };
        match Plugin::load(&engine, spec).await {
            Err(toolgate::Error::ConfigRefused {
                plugin, message, ..
            }) => {
                assert_eq!(plugin, "limit");
                assert!(message.contains(says), "{config}: {message}");
            }
            Err(other) => panic!("{config}: refused for another reason: {other}"),
            Ok(_) => panic!("{config}: loaded"),
        }
    }
}

#[tokio::test]
async fn a_guard_built_against_0_1_0_loads_and_decides_as_before() {
    // Built from the last 0.1.0 SDK (host/tests/fixtures/v0.1.0/README.md).
    let then = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/v0.1.0/sql-guard.wasm"
    );
    let engine = roomy();
    let old = plugin_with(
        &engine,
        "old",
        then,
        json!({}),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let new = plugin_with(
        &engine,
        "new",
        SQL_GUARD,
        json!({}),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    assert!(!old.uses_state() && !old.validates_config());
    for event in crate::sql_guard_events() {
        let a = chain(&[&old]).steering(&event, &no_state()).await;
        let b = chain(&[&new]).steering(&event, &no_state()).await;
        assert_eq!(a.result, b.result, "{event:?}");
        assert_eq!(a.trace[0].outcome, b.trace[0].outcome);
    }
}

#[tokio::test]
async fn a_guard_built_against_0_2_0_loads_and_decides_as_before() {
    // Built from the last 0.2.0 SDK (host/tests/fixtures/v0.2.0/README.md):
    // it imports `state@0.2.0` and exports `steering@0.2.0` and
    // `config@0.2.0`.
    let then = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/v0.2.0/tool-call-limit.wasm"
    );
    let engine = roomy();
    let config = json!({"tool": "send_email", "run_limit": 2});
    let old = plugin_with(
        &engine,
        "old",
        then,
        config.clone(),
        Limits::default(),
        OnError::Skip,
    )
    .await;
    let new = plugin_with(
        &engine,
        "new",
        TOOL_CALL_LIMIT,
        config,
        Limits::default(),
        OnError::Skip,
    )
    .await;
    assert!(old.uses_state() && old.validates_config());
    let mut skips = 0;
    for call in 0..4 {
        let event = steering("send_email", json!({"n": call}));
        let a = chain(&[&old]).steering(&event, &no_state()).await;
        let b = chain(&[&new]).steering(&event, &no_state()).await;
        assert_eq!(a.result, b.result, "call {call}");
        assert_eq!(a.trace[0].fault, None, "call {call}: {:?}", a.trace[0]);
        skips += usize::from(a.result.is_some());
    }
    assert_eq!(skips, 2, "the run's third and fourth calls are refused");
    // Its `config@0.2.0` check still runs at load.
    let spec = toolgate::PluginSpec {
        config: json!({"tool": "send_email"}),
        name: "old".into(),
        ..toolgate::PluginSpec::new(then)
    };
    match Plugin::load(&engine, spec).await {
        Err(toolgate::Error::ConfigRefused { message, .. }) => {
            assert!(
                message.contains("set run_limit, thread_limit or both"),
                "{message}"
            );
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("loaded"),
    }
}

#[tokio::test]
async fn a_config_refused_on_reload_keeps_the_last_good_version_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(TOOL_CALL_LIMIT, dir.path().join("limit.wasm")).expect("copy");
    let manifest = |config: &str| {
        format!("[[plugin]]\nname = \"limit\"\npath = \"limit.wasm\"\n[plugin.config]\n{config}\n")
    };
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, manifest("tool = \"send_email\"\nrun_limit = 0")).expect("write");
    let registry = toolgate::Registry::open(crate::engine(), dir.path())
        .await
        .expect("registry");
    assert!(registry.plugin_set().errors.is_empty());
    std::fs::write(&path, manifest("tool = \"send_email\"\nrun_limt = 1")).expect("write");
    registry.reload().await.expect("reload");
    let set = registry.plugin_set();
    assert_eq!(set.errors.len(), 1, "{:?}", set.errors);
    let issue = &set.errors[0];
    assert_eq!(issue.kind, toolgate::IssueKind::Config);
    assert!(
        issue.message.contains("plugin `limit` refuses its config"),
        "{}",
        issue.message
    );
    let at = format!("{}:4 (", path.display());
    assert!(
        issue.message.starts_with(&at),
        "names the manifest's line of the config: {}",
        issue.message
    );
    assert!(
        issue.message.contains("unknown field `run_limt`"),
        "{}",
        issue.message
    );
    // The last good version (run_limit 0: every email cancelled) serves.
    let d = set
        .global
        .steering(&call_in("r", "c", "send_email"), &no_state())
        .await;
    assert!(
        d.result
            .is_some_and(|s| s.content.contains("Tool call limit exceeded"))
    );
}

#[tokio::test]
async fn no_tenant_fills_the_memory_store_for_the_others() {
    // 400 KiB in all: a tenant may hold a quarter, 100 KiB.
    let engine = with_state(StateBackend::Memory {
        capacity: 400 << 10,
    });
    let value = "v".repeat(30 << 10);
    let writer = |tenant: &str| {
        let (engine, tenant, value) = (engine.clone(), tenant.to_string(), value.clone());
        async move {
            let ops = json!([{"op": "set", "scope": "run", "key": "k", "value": value}]);
            let p = stateful(&engine, "w", json!({ "ops": ops }), Limits::default()).await;
            Arc::new(p.serving(&tenant))
        }
    };
    let hog = writer("hog").await;
    for run in ["r1", "r2", "r3"] {
        assert_eq!(
            ask(&hog, &call_in(run, "c", "t")).await.1,
            Outcome::Skip,
            "{run}"
        );
    }
    let (_, outcome, fault) = ask(&hog, &call_in("r4", "c", "t")).await;
    assert_eq!(
        (outcome, fault),
        (Outcome::Fault, Some(Fault::StateBudget)),
        "over its quarter"
    );
    let other = writer("other").await;
    for run in ["r1", "r2", "r3"] {
        assert_eq!(
            ask(&other, &call_in(run, "c", "t")).await.1,
            Outcome::Skip,
            "another tenant's {run}"
        );
    }
    // What the hog frees is its own again.
    engine
        .state()
        .clear(&StateFilter {
            tenant: "hog".into(),
            run: Some("r1".into()),
            ..Default::default()
        })
        .await
        .expect("clear");
    assert_eq!(
        ask(&hog, &call_in("r4", "c", "t")).await.1,
        Outcome::Skip,
        "room again"
    );
}

#[tokio::test]
async fn a_full_memory_store_is_the_hosts_fault_not_decided_never_the_guards() {
    // 400 KiB in all, a quarter each: four tenants near their quarters
    // fill it, and a fifth, within its own, is refused by the host.
    let engine = with_state(StateBackend::Memory {
        capacity: 400 << 10,
    });
    let ops = json!([{"op": "set", "scope": "run", "key": "k", "value": "v".repeat(30 << 10)}]);
    let p = stateful(&engine, "w", json!({ "ops": ops }), Limits::default()).await;
    for tenant in ["a", "b", "c", "d"] {
        let writer = Arc::new(p.serving(tenant));
        for run in ["r1", "r2", "r3"] {
            assert_eq!(ask(&writer, &call_in(run, "c", "t")).await.1, Outcome::Skip);
        }
    }
    let fifth = Arc::new(p.serving("e"));
    assert_eq!(ask(&fifth, &call_in("r1", "c", "t")).await.1, Outcome::Skip);
    let (_, outcome, fault) = ask(&fifth, &call_in("r2", "c", "t")).await;
    assert_eq!(
        (outcome, fault),
        (Outcome::Unavailable, Some(Fault::StateFull))
    );
}
