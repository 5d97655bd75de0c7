//! The chain rules of every seam, as symfonic's seed states them.

use serde_json::{Value, json};
use toolgate::event::Skip;
use toolgate::{Outcome, Seam};
use toolgate_tests::{REWRITE_ONLY, SCRIPTED, STEERING_ONLY};

use crate::*;

async fn scripted(
    engine: &toolgate::Engine,
    name: &str,
    config: Value,
) -> std::sync::Arc<toolgate::Plugin> {
    plugin(engine, name, SCRIPTED, config).await
}

fn skip(content: &str, is_error: Option<bool>) -> Value {
    match is_error {
        Some(b) => json!({"steering": {"action": "skip", "content": content, "is_error": b}}),
        None => json!({"steering": {"action": "skip", "content": content}}),
    }
}

fn outcomes<T>(d: &toolgate::Decision<T>) -> Vec<(&str, Outcome)> {
    d.trace
        .iter()
        .map(|t| (t.plugin.as_str(), t.outcome))
        .collect()
}

#[tokio::test]
async fn steering_first_skip_wins_and_short_circuits() {
    let e = engine();
    let a = scripted(&e, "a", json!({"steering": {"action": "proceed"}})).await;
    let b = scripted(&e, "b", skip("from b", Some(false))).await;
    let c = scripted(&e, "c", skip("from c", Some(true))).await;
    let d = chain(&[&a, &b, &c])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(
        d.result,
        Some(Skip {
            content: "from b".into(),
            is_error: false
        })
    );
    assert_eq!(
        outcomes(&d),
        vec![("a", Outcome::Proceed), ("b", Outcome::Skip)]
    );
}

#[tokio::test]
async fn steering_is_error_defaults_to_true() {
    let e = engine();
    let a = scripted(&e, "a", skip("fix it", None)).await;
    let d = chain(&[&a])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(
        d.result,
        Some(Skip {
            content: "fix it".into(),
            is_error: true
        })
    );
}

#[tokio::test]
async fn steering_empty_skip_is_dropped_and_the_chain_goes_on() {
    let e = engine();
    let a = scripted(&e, "a", skip("", Some(true))).await;
    let b = scripted(&e, "b", skip("   ", Some(true))).await;
    let c = scripted(&e, "c", skip("real", Some(true))).await;
    let d = chain(&[&a, &b, &c])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(d.result.clone().map(|s| s.content), Some("real".into()));
    assert_eq!(
        outcomes(&d),
        vec![
            ("a", Outcome::Malformed),
            ("b", Outcome::Malformed),
            ("c", Outcome::Skip)
        ]
    );
    // Alone, an empty skip is treated as proceed.
    let d = chain(&[&a])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(d.result, None);
}

#[tokio::test]
async fn steering_all_proceed_is_null() {
    let e = engine();
    let a = scripted(&e, "a", json!({})).await;
    let b = plugin(&e, "b", STEERING_ONLY, json!({})).await;
    let d = chain(&[&a, &b])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(d.result, None);
    assert_eq!(serde_json::to_value(&d.result).expect("json"), Value::Null);
    assert_eq!(
        outcomes(&d),
        vec![("a", Outcome::Proceed), ("b", Outcome::Proceed)]
    );
}

#[tokio::test]
async fn steering_each_call_is_judged_independently() {
    let e = engine();
    let sql = plugin(&e, "sql-guard", toolgate_tests::SQL_GUARD, json!({})).await;
    let c = chain(&[&sql]);
    let bad = c
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM t"})),
            &no_state(),
        )
        .await;
    let good = c
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM t WHERE id = 1"})),
            &no_state(),
        )
        .await;
    let other = c
        .steering(&steering("search", json!({"q": "DELETE"})), &no_state())
        .await;
    assert!(bad.result.is_some());
    assert!(good.result.is_none());
    assert!(other.result.is_none());
}

#[tokio::test]
async fn skip_serialises_exactly_as_the_python_hook_returns_it() {
    let v = serde_json::to_value(Skip {
        content: "x".into(),
        is_error: false,
    })
    .expect("json");
    assert_eq!(
        v,
        json!({"action": "skip", "content": "x", "is_error": false})
    );
}

#[tokio::test]
async fn rewrite_chains_in_registration_order() {
    let e = engine();
    let a = scripted(&e, "a", json!({"rewrite": {"append_trail": "a"}})).await;
    let b = scripted(&e, "b", json!({"rewrite": {"append_trail": "b"}})).await;
    let d = chain(&[&a, &b])
        .rewrite(&dispatch("t", json!({"k": 1}), &["t"]), &no_state())
        .await;
    let r = d.result.clone().expect("rewritten");
    assert_eq!(r.tool_name, "t");
    assert_eq!(Value::Object(r.args), json!({"k": 1, "trail": ["a", "b"]}));
    assert_eq!(
        outcomes(&d),
        vec![("a", Outcome::Rewrite), ("b", Outcome::Rewrite)]
    );
}

#[tokio::test]
async fn rewrite_to_unavailable_tool_is_dropped_and_chain_goes_on() {
    let e = engine();
    let a = scripted(&e, "a", json!({"rewrite": {"append_trail": "a"}})).await;
    let bad = scripted(
        &e,
        "bad",
        json!({"rewrite": {"tool_name": "rm_rf", "args": {}}}),
    )
    .await;
    let c = scripted(&e, "c", json!({"rewrite": {"append_trail": "c"}})).await;
    let d = chain(&[&a, &bad, &c])
        .rewrite(&dispatch("t", json!({}), &["t", "u"]), &no_state())
        .await;
    let r = d.result.clone().expect("rewritten");
    assert_eq!(Value::Object(r.args), json!({"trail": ["a", "c"]}));
    assert_eq!(d.trace[1].outcome, Outcome::Malformed);
    assert!(d.trace[1].detail.as_deref().unwrap_or("").contains("rm_rf"));
}

#[tokio::test]
async fn rewrite_with_non_object_args_is_dropped() {
    let e = engine();
    let not_obj = scripted(&e, "list", json!({"rewrite": {"raw_args": "[1, 2]"}})).await;
    let not_json = scripted(&e, "garbage", json!({"rewrite": {"raw_args": "{nope"}})).await;
    let d = chain(&[&not_obj, &not_json])
        .rewrite(&dispatch("t", json!({"k": 1}), &["t"]), &no_state())
        .await;
    assert_eq!(d.result, None, "nothing valid was rewritten");
    assert_eq!(
        outcomes(&d),
        vec![
            ("list", Outcome::Malformed),
            ("garbage", Outcome::Malformed)
        ]
    );
}

#[tokio::test]
async fn rewrite_may_rename_to_an_available_tool() {
    let e = engine();
    let a = scripted(
        &e,
        "a",
        json!({"rewrite": {"tool_name": "u", "args": {"z": true}}}),
    )
    .await;
    let none = plugin(&e, "none", REWRITE_ONLY, json!({})).await;
    let d = chain(&[&none, &a])
        .rewrite(&dispatch("t", json!({}), &["t", "u"]), &no_state())
        .await;
    let r = d.result.clone().expect("rewritten");
    assert_eq!(
        (r.tool_name.as_str(), Value::Object(r.args)),
        ("u", json!({"z": true}))
    );
    assert_eq!(
        outcomes(&d),
        vec![("none", Outcome::Proceed), ("a", Outcome::Rewrite)]
    );
    assert_eq!(
        serde_json::to_value(
            chain(&[&none])
                .rewrite(&dispatch("t", json!({}), &["t"]), &no_state())
                .await
                .result
        )
        .expect("json"),
        Value::Null
    );
}

#[tokio::test]
async fn routing_is_an_intersection_and_never_adds() {
    let e = engine();
    let a = scripted(
        &e,
        "a",
        json!({"routing": {"keep": ["x", "y", "z", "invented"]}}),
    )
    .await;
    let b = scripted(&e, "b", json!({"routing": {"keep": ["w", "y", "z"]}})).await;
    let pass = scripted(&e, "pass", json!({})).await;
    let d = chain(&[&a, &pass, &b])
        .routing(&routing(&["w", "x", "y", "z"]), &no_state())
        .await;
    assert_eq!(d.result, vec!["y", "z"]);
    assert_eq!(
        outcomes(&d),
        vec![
            ("a", Outcome::Narrow),
            ("pass", Outcome::Proceed),
            ("b", Outcome::Narrow)
        ]
    );
}

#[tokio::test]
async fn result_is_observed_by_every_guard() {
    let e = engine();
    let a = scripted(&e, "a", json!({"result": {"log": true}})).await;
    let b = scripted(
        &e,
        "b",
        json!({"steering": {"action": "skip", "content": "no"}}),
    )
    .await;
    let d = chain(&[&a, &b])
        .result(&result("t", json!({"rows": 3})), &no_state())
        .await;
    assert_eq!(
        outcomes(&d),
        vec![("a", Outcome::Observed), ("b", Outcome::Observed)]
    );
}

#[tokio::test]
async fn a_seam_no_guard_exports_is_never_instantiated() {
    let e = engine();
    let only = plugin(&e, "steer", STEERING_ONLY, json!({})).await;
    assert_eq!(only.seams(), vec![Seam::Steering]);
    let c = chain(&[&only]);
    assert!(
        c.rewrite(&dispatch("t", json!({}), &["t"]), &no_state())
            .await
            .trace
            .is_empty()
    );
    assert!(
        c.routing(&routing(&["t"]), &no_state())
            .await
            .trace
            .is_empty()
    );
    assert!(
        c.result(&result("t", json!(null)), &no_state())
            .await
            .trace
            .is_empty()
    );
    assert_eq!(
        plugin(&e, "rw", REWRITE_ONLY, json!({})).await.seams(),
        vec![Seam::Rewrite]
    );
}

#[tokio::test]
async fn guards_see_state_and_config() {
    let e = engine();
    let cfg = json!({"attack": "config", "threshold": 3});
    let p = plugin(&e, "cfg", toolgate_tests::HOSTILE, cfg.clone()).await;
    let d = chain(&[&p])
        .steering(&steering("t", json!({})), &json!({"tenant_id": "acme"}))
        .await;
    let said: Value = serde_json::from_str(&d.result.expect("steers").content).expect("json");
    assert_eq!(said, cfg);
}
