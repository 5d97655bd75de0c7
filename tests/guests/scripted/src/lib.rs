//! `scripted`: a guard whose answers at all five seams come entirely from
//! its configuration, for the host's chain tests. A seam whose key is absent
//! (or `null`) returns none / proceed.
//!
//! ```json
//! {
//!   "steering": null | {"action": "proceed"}
//!                    | {"action": "skip", "content": "...", "is_error"?: bool},
//!   "rewrite":  null | {"tool_name"?: "...", "args"?: {...}}
//!                    | {"append_trail": "<name>"}
//!                    | {"raw_args": "<JSON text, sent verbatim>", "tool_name"?: "..."},
//!   "routing":  null | {"keep": ["name", ...]},
//!   "result":   null | {"log": true},
//!   "response": null | {"pass": true} | {"set": "..."} | {"append": "..."}
//!                    | {"raise": true} | {"nothing": <any>}
//! }
//! ```
//!
//! - `rewrite.tool_name` / `rewrite.args` default to the event's.
//! - `append_trail` rewrites to the same tool with `args.trail` = the
//!   previous `args.trail` (an array, `[]` when absent) plus `[name]`, so a
//!   chain of scripted guards records the order it ran in.
//! - `result.log` logs `saw <tool_name> <result JSON>` at info level.
//! - `response`: `pass` returns the `content` it was given, `set` the given
//!   text, `append` the content followed by the text (so a chain shows what
//!   each guard saw); `raise` panics; `nothing` returns none (a Python
//!   handler returning that non-string value, which symfonic drops).
//!
//! A script it cannot read (say `"action": "jump"`) panics, so a mistake in
//! a test shows up as a fault rather than as a silent proceed.

use toolgate_guest::serde_json::Value;
use toolgate_guest::{
    BeforeToolCallEvent, ResponseGuard, ResponseRenderEvent, ResultGuard, Rewrite, RewriteGuard,
    RoutingGuard, SteeringGuard, ToolCallDispatchEvent, ToolResultCallbackEvent,
    ToolRoutingDecisionEvent, Verdict, log,
};

/// The guard.
struct Scripted;

/// The script for one seam, `None` when absent or `null`.
fn script(seam: &str) -> Option<Value> {
    match toolgate_guest::config().get(seam) {
        None | Some(Value::Null) => None,
        Some(script) => Some(script.clone()),
    }
}

impl SteeringGuard for Scripted {
    fn on_before_tool_call(_event: BeforeToolCallEvent) -> Verdict {
        let Some(script) = script("steering") else {
            return Verdict::proceed();
        };
        match script.get("action").and_then(Value::as_str) {
            Some("proceed") => Verdict::proceed(),
            Some("skip") => Verdict::Skip {
                content: script
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                is_error: script.get("is_error").and_then(Value::as_bool),
            },
            _ => panic!("scripted: unreadable steering script {script}"),
        }
    }
}

impl RewriteGuard for Scripted {
    fn on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Option<Rewrite> {
        let script = script("rewrite")?;
        let tool_name = match script.get("tool_name") {
            Some(Value::String(name)) => name.clone(),
            None | Some(Value::Null) => event.tool_name.clone(),
            Some(other) => panic!("scripted: rewrite.tool_name is not a string: {other}"),
        };
        if let Some(name) = script.get("append_trail") {
            let mut args = event.args;
            let mut trail = match args.get("trail") {
                Some(Value::Array(trail)) => trail.clone(),
                _ => Vec::new(),
            };
            trail.push(name.clone());
            args["trail"] = Value::Array(trail);
            return Some(Rewrite::new(event.tool_name, &args));
        }
        if let Some(raw) = script.get("raw_args") {
            let raw = raw
                .as_str()
                .unwrap_or_else(|| panic!("scripted: rewrite.raw_args is not a string: {raw}"));
            return Some(Rewrite::with_raw_args(tool_name, raw));
        }
        let args = script.get("args").cloned().unwrap_or(event.args);
        Some(Rewrite::new(tool_name, &args))
    }
}

impl RoutingGuard for Scripted {
    fn on_tool_routing_decision(_event: ToolRoutingDecisionEvent) -> Option<Vec<String>> {
        let script = script("routing")?;
        let keep = script
            .get("keep")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("scripted: routing.keep is not an array: {script}"));
        Some(
            keep.iter()
                .map(|name| match name {
                    Value::String(name) => name.clone(),
                    other => panic!("scripted: routing.keep holds a non-string: {other}"),
                })
                .collect(),
        )
    }
}

impl ResultGuard for Scripted {
    fn on_tool_result(event: ToolResultCallbackEvent) {
        let Some(script) = script("result") else {
            return;
        };
        if script.get("log").and_then(Value::as_bool) == Some(true) {
            log::info!("saw {} {}", event.tool_name, event.result_json);
        }
    }
}

impl ResponseGuard for Scripted {
    fn on_response_render(event: ResponseRenderEvent) -> Option<String> {
        let script = script("response")?;
        let text = |key: &str| match script.get(key) {
            Some(Value::String(text)) => text.clone(),
            other => panic!("scripted: response.{key} is not a string: {other:?}"),
        };
        if script.get("pass") == Some(&Value::Bool(true)) {
            Some(event.content)
        } else if script.get("set").is_some() {
            Some(text("set"))
        } else if script.get("append").is_some() {
            Some(event.content + &text("append"))
        } else if script.get("raise") == Some(&Value::Bool(true)) {
            panic!("scripted: response raises");
        } else if script.get("nothing").is_some() {
            None
        } else {
            panic!("scripted: unreadable response script {script}")
        }
    }
}

toolgate_guest::export!(Scripted: steering, rewrite, routing, result, response);
