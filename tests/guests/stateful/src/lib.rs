//! `stateful`: a guard whose state operations come from its configuration,
//! for the host's state tests. Steering and result seams.
//!
//! ```json
//! {
//!   "ops": [{"op": "get" | "set" | "delete" | "add",
//!            "scope": "run" | "tenant",
//!            "key": "...",          // "{call_id}" and "{tool}" are replaced
//!            "value"?: "...", "delta"?: 1, "ttl_ms"?: 0}, ...],
//!   "budget"?: {"scope": "run" | "tenant", "key": "...", "limit": 5},
//!   "fill"?: {"scope": "run" | "tenant", "bytes": 100},
//!   "then"?: "trap" | "spin" | "grow"
//! }
//! ```
//!
//! Steering: runs `ops` in order; then `fill` sets keys `fill-0`, `fill-1`,
//! ... with values of `bytes` bytes, forever (until a budget stops it);
//! then `budget` adds 1 to its key and, over `limit`, gives it back and
//! skips with `"over"`; then `then` faults the call (a panic, an endless
//! loop, memory grown without end). Otherwise it skips (`is_error` false)
//! with the ops' results as a JSON array (`get`: the value or null; `add`:
//! the sum; others: null), or proceeds when there are no ops.
//!
//! Result: runs `ops` the same way and returns.

use toolgate_guest::serde_json::{self, Value, json};
use toolgate_guest::state::{self, Scope};
use toolgate_guest::{
    BeforeToolCallEvent, ResultGuard, SteeringGuard, ToolResultCallbackEvent, Verdict,
};

/// The guard.
struct Stateful;

fn scope(v: &Value) -> Scope {
    match v.get("scope").and_then(Value::as_str) {
        Some("tenant") => Scope::Tenant,
        _ => Scope::Run,
    }
}

fn key(v: &Value, call_id: &str, tool: &str) -> String {
    v.get("key")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .replace("{call_id}", call_id)
        .replace("{tool}", tool)
}

fn run_ops(config: &Value, call_id: &str, tool: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for op in config["ops"].as_array().into_iter().flatten() {
        let (s, k) = (scope(op), key(op, call_id, tool));
        let ttl = op.get("ttl_ms").and_then(Value::as_u64);
        out.push(match op["op"].as_str().unwrap_or_default() {
            "get" => json!(state::get(s, &k)),
            "set" => {
                let value = op["value"].as_str().unwrap_or_default();
                match ttl {
                    Some(ttl) => state::set_with_ttl(s, &k, value, ttl),
                    None => state::set(s, &k, value),
                }
                Value::Null
            }
            "delete" => {
                state::delete(s, &k);
                Value::Null
            }
            "add" => {
                let delta = op["delta"].as_i64().unwrap_or(1);
                json!(match ttl {
                    Some(ttl) => state::add_with_ttl(s, &k, delta, ttl),
                    None => state::add(s, &k, delta),
                })
            }
            other => panic!("unknown op {other:?}"),
        });
    }
    out
}

impl SteeringGuard for Stateful {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        let config = toolgate_guest::config();
        let results = run_ops(&config, &event.call_id, &event.tool_name);
        if let Some(fill) = config.get("fill") {
            let bytes = fill["bytes"].as_u64().unwrap_or(1) as usize;
            let value = "x".repeat(bytes);
            for i in 0.. {
                state::set(scope(fill), &format!("fill-{i}"), &value);
            }
        }
        let mut verdict = None;
        if let Some(budget) = config.get("budget") {
            let k = key(budget, &event.call_id, &event.tool_name);
            let limit = budget["limit"].as_i64().unwrap_or(0);
            if state::add(scope(budget), &k, 1) > limit {
                state::add(scope(budget), &k, -1);
                verdict = Some(Verdict::cancel("over"));
            } else {
                verdict = Some(Verdict::proceed());
            }
        }
        match config.get("then").and_then(Value::as_str) {
            Some("trap") => panic!("told to trap"),
            Some("spin") => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some("grow") => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            _ => {}
        }
        if let Some(verdict) = verdict {
            return verdict;
        }
        if results.is_empty() {
            return Verdict::proceed();
        }
        Verdict::cancel(serde_json::to_string(&results).unwrap_or_default())
    }
}

impl ResultGuard for Stateful {
    fn on_tool_result(event: ToolResultCallbackEvent) {
        run_ops(&toolgate_guest::config(), &event.call_id, &event.tool_name);
    }
}

toolgate_guest::export!(Stateful: steering, result);
