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
    let c = scripted(&e, "c", skip("real", Some(true))).await;
    let d = chain(&[&a, &c])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(d.result.clone().map(|s| s.content), Some("real".into()));
    assert_eq!(
        outcomes(&d),
        vec![("a", Outcome::Malformed), ("c", Outcome::Skip)]
    );
    // Alone, an empty skip is treated as proceed.
    let d = chain(&[&a])
        .steering(&steering("t", json!({})), &no_state())
        .await;
    assert_eq!(d.result, None);
}

/// symfonic tests `not content`: only "" is empty. Whitespace of any kind
/// is content, so it skips and short-circuits.
#[tokio::test]
async fn steering_whitespace_skip_is_content_and_wins() {
    let e = engine();
    let second = scripted(&e, "second", skip("second", Some(true))).await;
    for content in [" ", "\t", "\n", "\u{a0}", "\u{3000}", "\u{85}", "\u{2028}"] {
        let ws = scripted(&e, "ws", skip(content, None)).await;
        let d = chain(&[&ws, &second])
            .steering(&steering("t", json!({})), &no_state())
            .await;
        assert_eq!(
            d.result,
            Some(Skip {
                content: content.into(),
                is_error: true
            }),
            "content {content:?}"
        );
        assert_eq!(outcomes(&d), vec![("ws", Outcome::Skip)], "{content:?}");
    }
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

/// Each guard receives the previous rewrite whatever tool it names; only
/// the resulting call is checked against the palette (symfonic's React
/// node), and if it names an unavailable tool the original call runs.
#[tokio::test]
async fn rewrite_through_an_unavailable_tool_is_validated_only_at_the_end() {
    let e = engine();
    let palette = ["run_query", "send_email"];
    let call = || dispatch("run_query", json!({"sql": "SELECT 1"}), &palette);
    let to = |name: &str| json!({"rewrite": {"tool_name": name}});
    let not_there = scripted(&e, "not-there", to("not_there")).await;
    let x1 = scripted(&e, "x1", json!({"rewrite": {"args": {"x": 1}}})).await;
    let both = scripted(
        &e,
        "both",
        json!({"rewrite": {"tool_name": "not_there", "args": {"x": 1}}}),
    )
    .await;
    let email = scripted(&e, "email", to("send_email")).await;

    // [rename to not_there, rewrite args]: the result names not_there, so
    // the original call is dispatched.
    let d = chain(&[&not_there, &x1])
        .rewrite(&call(), &no_state())
        .await;
    assert_eq!(d.result, None);
    assert_eq!(
        outcomes(&d),
        vec![
            ("not-there", Outcome::Malformed),
            ("x1", Outcome::Malformed)
        ]
    );
    assert!(
        d.trace[1]
            .detail
            .as_deref()
            .is_some_and(|m| m.contains("not_there") && m.contains("original")),
        "{:?}",
        d.trace[1].detail
    );

    // [not_there + {"x":1}, rename to send_email]: the second guard sees the
    // first's args and fixes the name.
    let d = chain(&[&both, &email]).rewrite(&call(), &no_state()).await;
    let r = d.result.clone().expect("rewritten");
    assert_eq!(
        (r.tool_name.as_str(), Value::Object(r.args)),
        ("send_email", json!({"x": 1}))
    );
    assert_eq!(
        outcomes(&d),
        vec![("both", Outcome::Rewrite), ("email", Outcome::Rewrite)]
    );

    // A hallucinated tool fixed by the chain: [args {"x":1}, send_email].
    let d = chain(&[&x1, &email])
        .rewrite(
            &dispatch("unknown_tool", json!({"sql": "SELECT 1"}), &palette),
            &no_state(),
        )
        .await;
    let r = d.result.clone().expect("rewritten");
    assert_eq!(
        (r.tool_name.as_str(), Value::Object(r.args)),
        ("send_email", json!({"x": 1}))
    );
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

/// Integers of any size and the key order of args pass through a guard and
/// the chain unchanged (symfonic hands Python ints and dicts on as they are).
#[tokio::test]
async fn rewrite_passes_big_integers_and_key_order_through() {
    let e = engine();
    let a = scripted(&e, "a", json!({"rewrite": {"append_trail": "a"}})).await;
    let text = r#"{"z":18446744073709551616,"id":-170141183460469231731687303715884105729,"a":0.1,"m":{"y":1,"b":2}}"#;
    let args: Value = serde_json::from_str(text).expect("args");
    let d = chain(&[&a])
        .rewrite(&dispatch("t", args, &["t"]), &no_state())
        .await;
    let r = d.result.expect("rewritten");
    let want = r#"{"z":18446744073709551616,"id":-170141183460469231731687303715884105729,"a":0.1,"m":{"y":1,"b":2},"trail":["a"]}"#;
    assert_eq!(serde_json::to_string(&r.args).expect("json"), want);
}
