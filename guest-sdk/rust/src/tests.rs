//! The SDK's glue, natively: the WIT records the host sends become the
//! SDK's events (JSON parsed with every digit and key order kept), the
//! SDK's answers become the WIT records the host reads, and each seam's
//! adapter (what `export!` wires to the component's exports) calls the
//! guard's method with the one and hands back the other.
//!
//! Only the host imports (`log`, `config`) cannot run off wasm; their
//! wrappers are tested up to the import (the level mapping, the parsing of
//! the configuration text).

use serde_json::{Value, json};

use crate::__private::{Adapter, result, rewrite, routing, steering};
use crate::bindings::{host, types};
use crate::{
    BeforeToolCallEvent, ResultGuard, Rewrite, RewriteGuard, RoutingGuard, SteeringGuard,
    ToolCallDispatchEvent, ToolInfo, ToolResultCallbackEvent, ToolRoutingDecisionEvent, Verdict,
};

/// Keys out of alphabetical order at every level; integers past 2^53, past
/// u64::MAX and below i64::MIN.
const ARGS: &str = concat!(
    r#"{"zeta":18446744073709551616,"#,
    r#""alpha":{"min":-9223372036854775809,"n":9007199254740993,"b":0.5},"#,
    r#""mid":[18446744073709551615,-9007199254740993,1,2.5],"sql":"SELECT 1","a":null}"#
);
const STATE: &str = r#"{"run_id":"r-1","z":1,"big":123456789012345678901234567890}"#;

fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn before_tool_call(args: &str) -> types::BeforeToolCallEvent {
    types::BeforeToolCallEvent {
        run_id: "run-1".into(),
        tool_name: "run_query".into(),
        call_id: "call-7".into(),
        args: args.into(),
        state: STATE.into(),
    }
}

fn dispatch() -> types::DispatchEvent {
    types::DispatchEvent {
        run_id: "run-1".into(),
        iteration_index: 3,
        node_name: "react".into(),
        call_id: "call-7".into(),
        tool_name: "run_query".into(),
        args: ARGS.into(),
        available_tools: vec!["run_query".into(), "list_tables".into()],
        state: STATE.into(),
    }
}

fn routing_event(query: Option<&str>) -> types::RoutingEvent {
    types::RoutingEvent {
        run_id: "run-1".into(),
        mode: "enforce".into(),
        intent_label: "sql".into(),
        total_tools: 9,
        narrowed_tool_names: vec!["run_query".into(), "send_email".into()],
        saved_tokens_estimate: 120,
        tools: vec![
            types::ToolInfo {
                name: "run_query".into(),
                description: "Runs SQL.".into(),
            },
            types::ToolInfo {
                name: "send_email".into(),
                description: String::new(),
            },
        ],
        query: query.map(Into::into),
        state: STATE.into(),
    }
}

fn tool_result(result: &str, deferred: bool, is_error: bool) -> types::ToolResultEvent {
    types::ToolResultEvent {
        run_id: "run-1".into(),
        tool_name: "run_query".into(),
        result: result.into(),
        call_id: "call-7".into(),
        deferred,
        is_error,
        state: STATE.into(),
    }
}

// ---------------------------------------------------------------------------
// Events in
// ---------------------------------------------------------------------------

#[test]
fn a_before_tool_call_event_keeps_every_field_digit_and_key() {
    let event = BeforeToolCallEvent::from(before_tool_call(ARGS));
    assert_eq!(event.run_id, "run-1");
    assert_eq!(event.tool_name, "run_query");
    assert_eq!(event.call_id, "call-7");
    // Written back, the args are the host's text byte for byte: no integer
    // became a float, no key moved.
    assert_eq!(event.args.to_string(), ARGS);
    assert_eq!(keys(&event.args), ["zeta", "alpha", "mid", "sql", "a"]);
    assert_eq!(keys(&event.args["alpha"]), ["min", "n", "b"]);
    assert_eq!(event.args["zeta"].to_string(), "18446744073709551616");
    assert!(event.args["zeta"].is_number());
    assert_eq!(
        event.args["alpha"]["n"].as_u64(),
        Some(9_007_199_254_740_993)
    );
    assert_eq!(event.args["sql"], "SELECT 1");
    assert_eq!(event.state.to_string(), STATE);
    assert_eq!(keys(&event.state), ["run_id", "z", "big"]);
}

#[test]
fn a_dispatch_event_keeps_every_field() {
    let event = ToolCallDispatchEvent::from(dispatch());
    assert_eq!(event.run_id, "run-1");
    assert_eq!(event.iteration_index, 3);
    assert_eq!(event.node_name, "react");
    assert_eq!(event.call_id, "call-7");
    assert_eq!(event.tool_name, "run_query");
    assert_eq!(event.args.to_string(), ARGS);
    assert_eq!(event.available_tools, ["run_query", "list_tables"]);
    assert_eq!(event.state.to_string(), STATE);
}

#[test]
fn a_routing_event_keeps_its_tools_and_query() {
    let event = ToolRoutingDecisionEvent::from(routing_event(Some("run the query")));
    assert_eq!(event.run_id, "run-1");
    assert_eq!(event.mode, "enforce");
    assert_eq!(event.intent_label, "sql");
    assert_eq!(event.total_tools, 9);
    assert_eq!(event.saved_tokens_estimate, 120);
    assert_eq!(event.narrowed_tool_names, ["run_query", "send_email"]);
    assert_eq!(
        event.tools,
        [
            ToolInfo {
                name: "run_query".into(),
                description: "Runs SQL.".into()
            },
            ToolInfo {
                name: "send_email".into(),
                description: String::new()
            },
        ]
    );
    assert_eq!(event.query.as_deref(), Some("run the query"));
    assert_eq!(event.state.to_string(), STATE);
    assert_eq!(
        ToolRoutingDecisionEvent::from(routing_event(None)).query,
        None
    );
}

#[test]
fn a_result_event_keeps_the_result_as_value_and_as_text() {
    // Spacing and big integers: `result_json` is the host's text verbatim,
    // `result` its value.
    let text = r#"{ "rows": [18446744073709551616, 2], "b": true, "a": "x" }"#;
    let event = ToolResultCallbackEvent::from(tool_result(text, true, false));
    assert_eq!(event.result_json, text);
    assert_eq!(
        event.result.to_string(),
        r#"{"rows":[18446744073709551616,2],"b":true,"a":"x"}"#
    );
    assert_eq!(keys(&event.result), ["rows", "b", "a"]);
    assert_eq!((event.deferred, event.is_error), (true, false));
    assert_eq!(
        (event.run_id.as_str(), event.tool_name.as_str()),
        ("run-1", "run_query")
    );
    assert_eq!(event.call_id, "call-7");
    assert_eq!(event.state.to_string(), STATE);

    let other = ToolResultCallbackEvent::from(tool_result("null", false, true));
    assert_eq!((other.deferred, other.is_error), (false, true));
    assert_eq!(other.result, Value::Null);
    let text = ToolResultCallbackEvent::from(tool_result(r#""plain text""#, false, false));
    assert_eq!(text.result, json!("plain text"));
}

#[test]
#[should_panic(expected = "the host sent `args` that is not valid JSON")]
fn args_that_are_not_json_trap_rather_than_decide_on_made_up_data() {
    let _ = BeforeToolCallEvent::from(before_tool_call("{\"sql\": "));
}

#[test]
#[should_panic(expected = "the host sent `state` that is not valid JSON")]
fn a_state_that_is_not_json_traps() {
    let mut event = before_tool_call(ARGS);
    event.state = String::new();
    let _ = BeforeToolCallEvent::from(event);
}

// ---------------------------------------------------------------------------
// Answers out
// ---------------------------------------------------------------------------

fn skip_of(verdict: Verdict) -> Option<(String, Option<bool>)> {
    match types::Verdict::from(verdict) {
        types::Verdict::Proceed => None,
        types::Verdict::Skip(skip) => Some((skip.content, skip.is_error)),
    }
}

#[test]
fn verdicts_become_the_contracts_verdicts() {
    assert_eq!(skip_of(Verdict::proceed()), None);
    assert_eq!(skip_of(Verdict::default()), None);
    // steer: the model sees an error and retries; cancel: it moves on.
    assert_eq!(
        skip_of(Verdict::steer("add a WHERE")),
        Some(("add a WHERE".into(), Some(true)))
    );
    assert_eq!(
        skip_of(Verdict::cancel("not today")),
        Some(("not today".into(), Some(false)))
    );
    // A skip left to the host's default stays unset.
    let unset = Verdict::Skip {
        content: "x".into(),
        is_error: None,
    };
    assert_eq!(skip_of(unset), Some(("x".into(), None)));
}

#[test]
fn a_rewrite_carries_its_args_with_every_digit_and_key() {
    let args: Value = serde_json::from_str(ARGS).expect("ARGS is JSON");
    let rewrite = Rewrite::new("list_tables", &args);
    assert_eq!(
        (rewrite.tool_name(), rewrite.args_json()),
        ("list_tables", ARGS)
    );
    let wire = types::Rewrite::from(rewrite);
    assert_eq!(
        (wire.tool_name.as_str(), wire.args.as_str()),
        ("list_tables", ARGS)
    );

    // Raw args go to the host as written, unchecked.
    let raw = types::Rewrite::from(Rewrite::with_raw_args("t", "[1, 2"));
    assert_eq!((raw.tool_name.as_str(), raw.args.as_str()), ("t", "[1, 2"));
}

#[test]
fn log_levels_map_one_to_one() {
    use crate::log::Level;
    let mapped: Vec<host::Level> = [
        Level::Trace,
        Level::Debug,
        Level::Info,
        Level::Warn,
        Level::Error,
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    assert!(
        matches!(
            mapped.as_slice(),
            [
                host::Level::Trace,
                host::Level::Debug,
                host::Level::Info,
                host::Level::Warn,
                host::Level::Error
            ]
        ),
        "{mapped:?}"
    );
}

#[test]
fn configuration_text_is_parsed_whole_and_blank_is_empty() {
    assert_eq!(super::parse_config(""), json!({}));
    assert_eq!(super::parse_config(" \n\t"), json!({}));
    let config = super::parse_config(STATE);
    assert_eq!(config.to_string(), STATE);
    assert_eq!(keys(&config), ["run_id", "z", "big"]);
    assert_eq!(super::parse_config("[1]"), json!([1]));
}

#[test]
#[should_panic(expected = "the host sent `config` that is not valid JSON")]
fn configuration_that_is_not_json_traps() {
    let _ = super::parse_config("{limit = 3}");
}

// ---------------------------------------------------------------------------
// The seams' adapters: what `export!` wires to the exports
// ---------------------------------------------------------------------------

/// A guard at every seam that answers with what it was given, so each
/// adapter's two conversions show in its answer.
struct Echo;

impl SteeringGuard for Echo {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        match event.tool_name.as_str() {
            "proceed" => Verdict::proceed(),
            "cancel" => Verdict::cancel(event.args.to_string()),
            _ => Verdict::steer(format!("{}|{}|{}", event.run_id, event.call_id, event.args)),
        }
    }
}

impl RewriteGuard for Echo {
    fn on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Option<Rewrite> {
        if event.iteration_index == 0 {
            return None;
        }
        let target = event.available_tools.last().cloned().unwrap_or_default();
        Some(Rewrite::new(target, &event.args))
    }
}

impl RoutingGuard for Echo {
    fn on_tool_routing_decision(event: ToolRoutingDecisionEvent) -> Option<Vec<String>> {
        let query = event.query?;
        Some(
            event
                .tools
                .into_iter()
                .filter(|t| !t.description.is_empty())
                .map(|t| format!("{}:{query}", t.name))
                .collect(),
        )
    }
}

thread_local! {
    static SEEN: std::cell::RefCell<Vec<ToolResultCallbackEvent>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl ResultGuard for Echo {
    fn on_tool_result(event: ToolResultCallbackEvent) {
        SEEN.with(|seen| seen.borrow_mut().push(event));
    }
}

#[test]
fn the_steering_adapter_hands_the_event_in_and_the_verdict_out() {
    use steering::exports::toolgate::guard::steering::Guest;

    let steer = <Adapter<Echo> as Guest>::before_tool_call(before_tool_call(ARGS));
    let types::Verdict::Skip(skip) = steer else {
        panic!("expected a skip")
    };
    assert_eq!(skip.content, format!("run-1|call-7|{ARGS}"));
    assert_eq!(skip.is_error, Some(true));

    let mut cancel = before_tool_call(r#"{"b":1,"a":2}"#);
    cancel.tool_name = "cancel".into();
    let types::Verdict::Skip(skip) = <Adapter<Echo> as Guest>::before_tool_call(cancel) else {
        panic!("expected a skip")
    };
    assert_eq!(
        (skip.content.as_str(), skip.is_error),
        (r#"{"b":1,"a":2}"#, Some(false))
    );

    let mut proceed = before_tool_call("{}");
    proceed.tool_name = "proceed".into();
    assert!(matches!(
        <Adapter<Echo> as Guest>::before_tool_call(proceed),
        types::Verdict::Proceed
    ));
}

#[test]
fn the_rewrite_adapter_hands_the_event_in_and_the_rewrite_out() {
    use rewrite::exports::toolgate::guard::rewrite::Guest;

    let wire = <Adapter<Echo> as Guest>::dispatch(dispatch()).expect("a rewrite");
    assert_eq!(wire.tool_name, "list_tables");
    assert_eq!(wire.args, ARGS);

    let mut first = dispatch();
    first.iteration_index = 0;
    assert!(<Adapter<Echo> as Guest>::dispatch(first).is_none());
}

#[test]
fn the_routing_adapter_hands_the_event_in_and_the_names_out() {
    use routing::exports::toolgate::guard::routing::Guest;

    let kept = <Adapter<Echo> as Guest>::narrow(routing_event(Some("q")));
    assert_eq!(kept, Some(vec!["run_query:q".to_string()]));
    assert_eq!(<Adapter<Echo> as Guest>::narrow(routing_event(None)), None);
}

#[test]
fn the_result_adapter_hands_the_event_in() {
    use result::exports::toolgate::guard::result::Guest;

    <Adapter<Echo> as Guest>::on_result(tool_result("[18446744073709551616]", false, true));
    let seen = SEEN.with(|seen| seen.take());
    let [event] = seen.as_slice() else {
        panic!("expected one result, got {seen:?}")
    };
    assert_eq!(event.result.to_string(), "[18446744073709551616]");
    assert!(event.is_error && !event.deferred);
}

#[test]
fn state_works_natively_on_the_tests_own_map() {
    use crate::state::{self, Scope};
    state::reset();
    assert_eq!(state::get(Scope::Run, "k"), None);
    state::set(Scope::Run, "k", "v");
    assert_eq!(state::get(Scope::Run, "k").as_deref(), Some("v"));
    assert_eq!(state::get(Scope::Tenant, "k"), None, "scopes are apart");
    assert_eq!(state::add(Scope::Tenant, "n", 2), 2);
    assert_eq!(state::add(Scope::Tenant, "n", -5), -3);
    state::set_with_ttl(Scope::Run, "k", "v", 0);
    assert_eq!(state::get(Scope::Run, "k"), None, "a ttl of 0 removes");
    state::delete(Scope::Tenant, "n");
    assert_eq!(state::get(Scope::Tenant, "n"), None);
}

#[test]
fn config_as_reads_a_typed_config_and_names_an_unknown_field() {
    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code, reason = "read by serde")]
    struct Settings {
        limit: u32,
    }
    let ok: Settings = crate::config_as(&serde_json::json!({"limit": 3})).expect("fits");
    assert_eq!(ok.limit, 3);
    let err = crate::config_as::<Settings>(&serde_json::json!({"limt": 3})).expect_err("typo");
    assert!(err.contains("unknown field `limt`"), "{err}");
}

mod observer {
    use std::cell::RefCell;

    use crate::bindings::observe::exports::toolgate::guard::observe as wit;
    use crate::observe::{dispatch, kinds};
    use crate::{Hook, LLMEndEvent, Observer};

    thread_local! {
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    struct Spend;

    impl Observer for Spend {
        const HOOKS: &'static [Hook] = &[Hook::LlmEnd, Hook::AgentStart];

        fn on_llm_end(event: LLMEndEvent) {
            SEEN.with(|s| {
                s.borrow_mut()
                    .push(format!("{}", event.usage["total_tokens"]))
            });
        }
    }

    #[test]
    fn subscriptions_are_the_declared_hooks_and_events_reach_their_method() {
        assert_eq!(
            kinds(Spend::HOOKS),
            wit::EventKinds::LLM_END | wit::EventKinds::AGENT_START
        );
        dispatch::<Spend>(wit::LifecycleEvent::LlmEnd(wit::LlmEndEvent {
            model: "m".into(),
            output: "o".into(),
            usage: r#"{"total_tokens":18446744073709551616}"#.into(),
            run_id: "r".into(),
            node_name: "react".into(),
            pricing_unknown: false,
            duration_ms: 1.0,
            started_at_utc: String::new(),
            iteration_index: 0,
            turn_index: 0,
        }));
        // A hook it does not override does nothing.
        dispatch::<Spend>(wit::LifecycleEvent::AgentStart(wit::AgentStartEvent {
            query: "q".into(),
            run_id: "r".into(),
        }));
        SEEN.with(|s| assert_eq!(*s.borrow(), ["18446744073709551616"]));
    }
}
