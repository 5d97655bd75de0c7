//! What the host logs about a guard's call (docs/failures.md, "What
//! happens, case by case"): a fault is one `guard faulted; skipped` line
//! naming the plugin, the seam and the cause, a malformed reply one
//! `malformed reply dropped` line naming the plugin and the seam, at every
//! seam and whatever the guard's `on_error`; `on_error = "deny"` at every
//! seam does what the table says. Captured with an in-process subscriber
//! on this test's thread (a current-thread runtime).

use serde_json::json;
use toolgate::{Fault, Outcome};
use toolgate_tests::{HOSTILE, MEMO, SCRIPTED, SQL_GUARD};

use crate::*;

/// The lines of `text` holding every one of `needles`.
fn lines_with<'a>(text: &'a str, needles: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|line| needles.iter().all(|n| line.contains(n)))
        .collect()
}

/// Calls every seam of `chain` once (the tool `trap`, so the hostile guest
/// traps wherever it takes its attack from the tool name).
async fn every_seam(chain: &Chain) {
    chain
        .steering(&steering("trap", json!({})), &no_state())
        .await;
    chain
        .rewrite(&dispatch("trap", json!({}), &["trap"]), &no_state())
        .await;
    chain.routing(&routing(&["trap"]), &no_state()).await;
    chain
        .result(&result("trap", json!("done")), &no_state())
        .await;
}

#[tokio::test]
async fn a_fault_is_logged_once_with_plugin_seam_and_cause_at_every_seam() {
    let engine = engine();
    for (name, on_error) in [("lenient", OnError::Skip), ("strict", OnError::Deny)] {
        let hostile = plugin_with(
            &engine,
            name,
            HOSTILE,
            json!({"attack": "trap"}),
            tight(),
            on_error,
        )
        .await;
        let (kept, _log) = capture(tracing::Level::WARN);
        every_seam(&chain(&[&hostile])).await;
        let text = kept.text();
        let faulted = lines_with(&text, &["guard faulted; skipped"]);
        assert_eq!(faulted.len(), 4, "one line per seam:\n{text}");
        for seam in ["steering", "rewrite", "routing", "result"] {
            let lines = lines_with(
                &text,
                &[
                    "WARN",
                    "guard faulted; skipped",
                    &format!("plugin=\"{name}\""),
                    &format!("seam={seam}"),
                    "fault=unreachable",
                    &format!("on_error={on_error:?}"),
                ],
            );
            assert_eq!(lines.len(), 1, "{seam}:\n{text}");
        }
    }
}

#[tokio::test]
async fn a_malformed_reply_is_logged_once_with_plugin_and_seam() {
    let engine = engine();
    let script = json!({
        "steering": {"action": "skip", "content": ""},
        "rewrite": {"raw_args": "[1, 2]"},
    });
    let scripted = plugin(&engine, "odd", SCRIPTED, script).await;
    let chain = chain(&[&scripted]);
    let (kept, _log) = capture(tracing::Level::WARN);
    let d = chain.steering(&steering("t", json!({})), &no_state()).await;
    assert_eq!(d.result, None);
    assert_eq!(d.trace[0].outcome, Outcome::Malformed);
    let d = chain
        .rewrite(&dispatch("t", json!({}), &["t"]), &no_state())
        .await;
    assert_eq!(d.result, None);
    assert_eq!(d.trace[0].outcome, Outcome::Malformed);
    let text = kept.text();
    assert_eq!(
        lines_with(&text, &["malformed reply dropped"]).len(),
        2,
        "{text}"
    );
    for (seam, why) in [("steering", "empty content"), ("rewrite", "")] {
        let lines = lines_with(
            &text,
            &[
                "WARN",
                "malformed reply dropped",
                "plugin=\"odd\"",
                &format!("seam={seam}"),
                why,
            ],
        );
        assert_eq!(lines.len(), 1, "{seam}:\n{text}");
    }
}

/// `on_error = "deny"`: at steering a fault refuses the call with the
/// labelled message and at routing it hides every tool; at rewrite and
/// result the faulting guard is skipped and the chain goes on (there is
/// nothing safer to dispatch): the other guards' rewrites stand and they
/// still observe the result.
#[tokio::test]
async fn deny_holds_at_every_seam() {
    let engine = engine();
    let strict = plugin_with(
        &engine,
        "strict",
        HOSTILE,
        json!({"attack": "trap"}),
        tight(),
        OnError::Deny,
    )
    .await;
    let before = plugin(
        &engine,
        "before",
        SCRIPTED,
        json!({"rewrite": {"append_trail": "before"}}),
    )
    .await;
    let after = plugin(
        &engine,
        "after",
        SCRIPTED,
        json!({"rewrite": {"append_trail": "after"}}),
    )
    .await;
    let memo = plugin(&engine, "memo", MEMO, json!({})).await;

    let d = chain(&[&strict, &after])
        .steering(&steering("run_query", json!({})), &no_state())
        .await;
    let skip = d.result.expect("a fail-closed fault refuses the call");
    assert!(skip.is_error);
    assert_eq!(
        skip.content,
        toolgate::fail_closed_message("strict", Fault::Unreachable)
    );

    let d = chain(&[&strict])
        .routing(&routing(&["a", "b"]), &no_state())
        .await;
    assert!(d.result.is_empty(), "{:?}", d.result);
    assert_eq!(d.trace[0].fault, Some(Fault::Unreachable));

    let d = chain(&[&before, &strict, &after])
        .rewrite(&dispatch("t", json!({"x": 1}), &["t"]), &no_state())
        .await;
    let rewritten = d.result.expect("the other guards' rewrites stand");
    assert_eq!(
        Value::Object(rewritten.args),
        json!({"x": 1, "trail": ["before", "after"]})
    );
    let outcomes: Vec<Outcome> = d.trace.iter().map(|t| t.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Rewrite, Outcome::Fault, Outcome::Rewrite]
    );

    let (kept, _log) = capture(tracing::Level::INFO);
    let d = chain(&[&strict, &memo])
        .result(&result("t", json!("done")), &json!({"turn": 9}))
        .await;
    let outcomes: Vec<Outcome> = d.trace.iter().map(|t| t.outcome).collect();
    assert_eq!(outcomes, [Outcome::Fault, Outcome::Observed]);
    // The guard after the fault saw the result, with its state.
    let text = kept.text();
    assert_eq!(
        lines_with(
            &text,
            &[r#"memo {"calls":1,"last":null,"state":{"turn":9}}"#]
        )
        .len(),
        1,
        "{text}"
    );
}

/// A guard the host could not run (here the engine's one instance slot is
/// held by a spinning call: `capacity`, or `overloaded` had it waited) is
/// the host's doing: the call is not decided, and it is logged at DEBUG,
/// never as a WARNING (docs/failures.md: a flood of them must not flood
/// the log). The DEBUG line shows the capture sees that path.
#[tokio::test]
async fn a_guard_the_host_could_not_run_is_logged_at_debug_never_warn() {
    let engine = Engine::new(EngineConfig {
        max_instances: 1,
        long_lane_priority: TEST_LANE,
        ..EngineConfig::default()
    })
    .expect("engine");
    let spin = Limits {
        fuel: i64::MAX as u64,
        timeout: Duration::from_secs(3),
        ..Limits::default()
    };
    let spinner = plugin_with(&engine, "spinner", HOSTILE, json!({}), spin, OnError::Skip).await;
    let guard = plugin(&engine, "sql-guard", SQL_GUARD, json!({})).await;
    let spinning = tokio::spawn({
        let chain = chain(&[&spinner]);
        async move {
            chain
                .steering(&steering("loop", json!({})), &no_state())
                .await
        }
    });
    // Until the spinner holds the slot, on the long lane.
    let held = tokio::time::timeout(Duration::from_secs(60), async {
        while engine.long_lane().usage().running == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    assert!(held.await.is_ok(), "the spinner never ran long");

    let (kept, log) = capture(tracing::Level::DEBUG);
    let d = chain(&[&guard])
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM users"})),
            &no_state(),
        )
        .await;
    drop(log);
    let text = kept.text();
    let entry = &d.trace[0];
    assert_eq!(entry.outcome, Outcome::Unavailable, "{:?}\n{text}", d.trace);
    let fault = entry.fault.expect("a fault");
    assert!(!fault.is_guards(), "{fault:?}");
    let lines = lines_with(
        &text,
        &[
            "DEBUG",
            "guard not run in time; not decided",
            "plugin=\"sql-guard\"",
            &format!("fault={fault}"),
        ],
    );
    assert_eq!(lines.len(), 1, "{text}");
    let warned = lines_with(&text, &["WARN"]);
    assert!(warned.is_empty(), "{warned:?}");
    spinning.abort();
}
