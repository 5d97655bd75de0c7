//! `fetcher`: a guard that makes the outbound HTTP requests its
//! configuration lists, for the host's outbound HTTP tests. Steering only.
//!
//! ```json
//! {"spin"?: N, "requests": [{"method"?: "GET", "url": "...", "headers"?: [["k", "v"]],
//!                "body"?: "...", "body_bytes"?: 1000}, ...]}
//! ```
//!
//! `spin` runs a loop of N steps before the first request (a call long
//! enough to have moved onto the host's long lane). `url` may hold
//! `{call_id}`, replaced by the call's id, and `{args.NAME}`, replaced by
//! the call's string argument `NAME`. `body_bytes`
//! sends that many `x`s instead of `body`. It skips (`is_error` false) with
//! a JSON array, one entry per request: `{"status": N, "body": "<text>",
//! "headers": {...}}`. A request the host refuses traps the call, so the
//! test sees the host's fault instead.

use toolgate_guest::http::{self, Request};
use toolgate_guest::serde_json::{Map, Value, json};
use toolgate_guest::{BeforeToolCallEvent, SteeringGuard, Verdict};

/// The guard.
struct Fetcher;

impl SteeringGuard for Fetcher {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        let config = toolgate_guest::config();
        let mut spun = 0u64;
        for i in 0..config["spin"].as_u64().unwrap_or(0) {
            spun = std::hint::black_box(spun.wrapping_add(i));
        }
        let mut answers = Vec::new();
        for r in config["requests"].as_array().into_iter().flatten() {
            let url = r["url"]
                .as_str()
                .unwrap_or_default()
                .replace("{call_id}", &event.call_id);
            let url = event
                .args
                .as_object()
                .into_iter()
                .flatten()
                .fold(url, |url, (k, v)| match v.as_str() {
                    Some(v) => url.replace(&format!("{{args.{k}}}"), v),
                    None => url,
                });
            let mut request = Request::new(r["method"].as_str().unwrap_or("GET"), &url);
            for h in r["headers"].as_array().into_iter().flatten() {
                request = request.header(
                    h[0].as_str().unwrap_or_default(),
                    h[1].as_str().unwrap_or_default(),
                );
            }
            request = match r["body_bytes"].as_u64() {
                Some(n) => request.body(vec![b'x'; usize::try_from(n).unwrap_or(0)]),
                None => request.body(r["body"].as_str().unwrap_or_default()),
            };
            let response = http::send(&request);
            let headers: Map<String, Value> = response
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            answers.push(
                json!({"status": response.status, "body": response.text(), "headers": headers}),
            );
        }
        Verdict::Skip {
            content: Value::Array(answers).to_string(),
            is_error: Some(false),
        }
    }
}

toolgate_guest::export!(Fetcher: steering);
