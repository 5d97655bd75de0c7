//! One seam request, `{"event": {...}, "state"?: {...}, "tenant"?: "t"}`,
//! parsed and answered the same way by every face that takes JSON: the
//! HTTP service ([`crate::server`]) and the Python module
//! (`adapters/python/native`).
//!
//! Parsing checks field by field, so every error names its field
//! (`event.args`, `event.narrowed_tool_names[2]`, `tenant`); an error is a
//! bad request (HTTP 400, Python `toolgate.RequestError`).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::chain::Decision;
use crate::event::{Event, Seam};
use crate::registry::{Snapshot, validate_tenant};
use crate::shares::Busy;

/// A seam request, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct DecideRequest {
    /// The event, typed for its seam.
    pub event: Event,
    /// The hook's state: a JSON object (`{}` when absent or `null`).
    pub state: Value,
    /// The tenant whose chain runs after the global one (`None`: only the
    /// global chain). Always a valid tenant name
    /// ([`validate_tenant`]).
    pub tenant: Option<String>,
}

impl DecideRequest {
    /// Parses `body` (JSON text) as a request for `seam`. The error is one
    /// line naming the field at fault.
    pub fn parse(seam: Seam, body: &[u8]) -> Result<DecideRequest, String> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| format!("request body is not valid JSON: {e}"))?;
        DecideRequest::from_value(seam, value)
    }

    /// Checks an already parsed request body for `seam`.
    pub fn from_value(seam: Seam, value: Value) -> Result<DecideRequest, String> {
        let Value::Object(mut fields) = value else {
            return Err(
                "request body must be a JSON object {\"event\": {...}, \"state\"?: {...}, \"tenant\"?: \"...\"}"
                    .to_string(),
            );
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "event" | "state" | "tenant"))
        {
            return Err(format!(
                "unknown field `{unknown}` in request body (expected event, state, tenant)"
            ));
        }
        let event = fields
            .remove("event")
            .ok_or_else(|| "missing field `event` in request body".to_string())?;
        let event = parse_event(seam, event)?;
        let state = match fields.remove("state") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(state @ Value::Object(_)) => state,
            Some(other) => {
                return Err(format!(
                    "field `state` must be a JSON object, not {}",
                    kind(&other)
                ));
            }
        };
        let tenant = match fields.remove("tenant") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => {
                validate_tenant(&t).map_err(|e| format!("field `tenant`: {e}"))?;
                Some(t)
            }
            Some(other) => {
                return Err(format!(
                    "field `tenant` must be a string, not {}",
                    kind(&other)
                ));
            }
        };
        Ok(DecideRequest {
            event,
            state,
            tenant,
        })
    }

    /// Runs the request through `snapshot`'s chain for its tenant, once
    /// its account has a place for it (see
    /// [`Shares::tenant_requests`](crate::shares::Shares::tenant_requests)):
    /// a request that waited the share's `wait` in vain is refused as
    /// [`Busy`], never decided.
    ///
    /// The decision is a `debug` span `decide` (seam, tenant); each guard
    /// call a span inside it (see [`crate::logging`]).
    pub async fn decide(&self, snapshot: &Snapshot) -> Result<Decision<Value>, Busy> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "decide",
            seam = %self.event.seam(),
            tenant = self.tenant.as_deref().unwrap_or("-"),
        );
        self.decide_unspanned(snapshot).instrument(span).await
    }

    async fn decide_unspanned(&self, snapshot: &Snapshot) -> Result<Decision<Value>, Busy> {
        let tenant = self.tenant.as_deref();
        let _place = match snapshot.account(tenant) {
            None => None,
            Some(account) => {
                let key = match tenant {
                    Some(t) if snapshot.accounts.tenants.contains_key(t) => "tenant_requests",
                    _ => "global_requests",
                };
                Some(account.enter(key).await?)
            }
        };
        Ok(snapshot
            .chain(tenant)
            .decide(&self.event, &self.state)
            .await)
    }
}

/// The answer's body: exactly the hook's return value, or, with `trace`,
/// `{"result": ..., "trace": [...]}`.
pub fn answer(decision: Decision<Value>, trace: bool) -> Value {
    if trace {
        json!({"result": decision.result, "trace": decision.trace})
    } else {
        decision.result
    }
}

/// Parses `value` as `seam`'s event; the error names the field by its path
/// (`event.args`, `event.narrowed_tool_names[2]`).
pub fn parse_event(seam: Seam, value: Value) -> Result<Event, String> {
    fn typed<T: DeserializeOwned>(seam: Seam, value: Value) -> Result<T, String> {
        if !value.is_object() {
            return Err(format!(
                "field `event` must be a JSON object (a {seam} event), not {}",
                kind(&value)
            ));
        }
        // Through the text, not the `Value`: serde_json's `Value`
        // deserializer turns an integer whose digits are also a float's
        // shortest form (10^39) into that float; its text parser keeps it.
        let text = value.to_string();
        let mut de = serde_json::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                "event".to_string()
            } else {
                format!("event.{path}")
            };
            format!("invalid {seam} event: `{at}`: {}", e.into_inner())
        })
    }
    Ok(match seam {
        Seam::Routing => Event::Routing(typed(seam, value)?),
        Seam::Rewrite => Event::Rewrite(typed(seam, value)?),
        Seam::Steering => Event::Steering(typed(seam, value)?),
        Seam::Result => Event::Result(typed(seam, value)?),
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_errors_name_the_field() {
        let err = parse_event(
            Seam::Steering,
            json!({"run_id": "r", "tool_name": "t", "call_id": "c"}),
        )
        .expect_err("missing args");
        assert!(err.contains("args"), "{err}");
        let err = parse_event(
            Seam::Steering,
            json!({"run_id": "r", "tool_name": "t", "call_id": "c", "args": "x"}),
        )
        .expect_err("args not an object");
        assert!(err.contains("event.args"), "{err}");
        let err = parse_event(
            Seam::Routing,
            json!({"run_id": "r", "mode": "m", "intent_label": "i", "total_tools": 1, "narrowed_tool_names": ["a", 3]}),
        )
        .expect_err("name not a string");
        assert!(err.contains("narrowed_tool_names[1]"), "{err}");
    }

    #[test]
    fn request_fields_are_checked() {
        let event = r#"{"run_id":"r","tool_name":"t","call_id":"c","args":{}}"#;
        let ok = DecideRequest::parse(
            Seam::Steering,
            format!(r#"{{"event":{event},"tenant":"acme"}}"#).as_bytes(),
        )
        .expect("valid");
        assert_eq!(ok.tenant.as_deref(), Some("acme"));
        assert_eq!(ok.state, json!({}));
        for (body, needle) in [
            (format!(r#"{{"event":{event},"tenant":"../x"}}"#), "tenant"),
            (format!(r#"{{"event":{event},"state":[]}}"#), "state"),
            (format!(r#"{{"event":{event},"x":1}}"#), "unknown field `x`"),
            ("[]".to_string(), "JSON object"),
            ("{".to_string(), "not valid JSON"),
        ] {
            let err = DecideRequest::parse(Seam::Steering, body.as_bytes()).expect_err(&body);
            assert!(err.contains(needle), "{body}: {err}");
        }
    }
}
