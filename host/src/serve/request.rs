//! One seam request, `{"event": {...}, "state"?: {...}, "tenant"?: "t"}`,
//! parsed and answered the same way by every face that takes JSON: the
//! HTTP service ([`crate::serve::server`]) and the Python module
//! (`adapters/python/native`).
//!
//! Parsing checks field by field, so every error names its field
//! (`event.args`, `event.narrowed_tool_names[2]`, `tenant`); an error is a
//! bad request (HTTP 400, Python `toolgate.RequestError`).

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use crate::call::chain::{Decision, GuardTrace, Verdict};
use crate::event::{Event, Seam};
use crate::fault::Fault;
use crate::load::registry::{NotReady, PluginSet};
use crate::runtime::shares::Busy;
use crate::tenant::TenantName;

/// A seam request, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct DecideRequest {
    /// The event, typed for its seam.
    pub event: Event,
    /// The hook's state: a JSON object (`{}` when absent or `null`).
    pub state: Value,
    /// The tenant whose chain runs after the global one (`None`: only the
    /// global chain).
    pub tenant: Option<TenantName>,
}

impl DecideRequest {
    /// Parses `body` (JSON text) as a request for `seam`. The error is one
    /// line naming the field at fault.
    ///
    /// A well-formed request is read in one pass, its event straight into
    /// the seam's typed event. Anything that pass does not accept (an
    /// error, a duplicate event field, an unknown field) is read again the
    /// checking way ([`DecideRequest::from_value`]), which names the field
    /// at fault; both ways give the same request for every body the first
    /// one accepts.
    pub fn parse(seam: Seam, body: &[u8]) -> Result<DecideRequest, String> {
        if let Some(request) = parse_fast(seam, body) {
            return Ok(request);
        }
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
                Some(TenantName::try_from(t).map_err(|e| format!("field `tenant`: {e}"))?)
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

    /// Runs the request through `set`'s chain for its tenant, once
    /// its account has a place for it (see
    /// [`Shares::tenant_requests`](crate::runtime::shares::Shares::tenant_requests)):
    /// a request that waited the share's `wait` in vain is refused as
    /// [`NotDecided::Busy`], one for a tenant whose guards are not serving
    /// (still loading, or not admitted) as [`NotDecided::NotReady`], and one
    /// whose chain met a guard the host could not run in time as
    /// [`NotDecided::Unavailable`] — never decided as if that guard had said
    /// nothing.
    ///
    /// The decision is a `debug` span `decide` (seam, tenant); each guard
    /// call a span inside it (see `crate::serve::logging`).
    pub async fn decide(&self, set: &PluginSet) -> Result<Decision<Verdict>, NotDecided> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "decide",
            seam = %self.event.seam(),
            tenant = self.tenant.as_deref().unwrap_or("-"),
        );
        self.decide_unspanned(set).instrument(span).await
    }

    async fn decide_unspanned(&self, set: &PluginSet) -> Result<Decision<Verdict>, NotDecided> {
        let tenant = self.tenant.as_deref();
        set.ready(tenant)?;
        let _place = match set.account(tenant) {
            None => None,
            Some(account) => {
                let key = match tenant {
                    Some(t) if set.accounts.tenants.contains_key(t) => "tenant_requests",
                    _ => "global_requests",
                };
                Some(account.enter(key).await?)
            }
        };
        let decision = set.chain(tenant).decide(&self.event, &self.state).await;
        match decision.unavailable() {
            None => Ok(decision),
            Some(entry) => Err(NotDecided::Unavailable {
                plugin: entry.plugin.clone(),
                fault: entry.fault.unwrap_or(Fault::Overloaded),
                detail: entry.detail.clone().unwrap_or_default(),
                trace: decision.trace,
            }),
        }
    }
}

/// Why a request was answered without a decision: the host's doing, never
/// a guard's. The caller should retry later (HTTP: 429 or 503 with
/// `Retry-After`; Python: `toolgate.BusyError`).
#[derive(Clone, Debug, thiserror::Error)]
pub enum NotDecided {
    /// Its account had no place for it in time (HTTP 429).
    #[error(transparent)]
    Busy(#[from] Busy),
    /// Its tenant's guards are not serving yet (or were not admitted)
    /// (HTTP 503).
    #[error(transparent)]
    NotReady(#[from] NotReady),
    /// A guard of its chain could not be run in time — no instance slot,
    /// its account's share taken, or starved of CPU on a busy host (HTTP
    /// 503). The chain stopped there.
    #[error(
        "guard `{plugin}` could not be run in time ({fault}): {detail}; not decided, retry later"
    )]
    Unavailable {
        /// The guard's name.
        plugin: String,
        /// `capacity`, `share-exhausted` or `overloaded`.
        fault: Fault,
        /// What happened.
        detail: String,
        /// The guards consulted up to it, it last.
        trace: Vec<GuardTrace>,
    },
}

/// The fields of a request body as read in one pass.
#[derive(Default)]
struct Fields {
    event: Option<Event>,
    state: Option<Value>,
    tenant: Option<Value>,
}

/// The keys of a request body.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Event,
    State,
    Tenant,
    #[serde(other)]
    Unknown,
}

/// Reads a request body's object, the event typed for its seam.
struct FieldsVisitor(Seam);

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request body object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Event => fields.event = Some(map.next_value_seed(EventSeed(self.0))?),
                Key::State => fields.state = Some(map.next_value()?),
                Key::Tenant => fields.tenant = Some(map.next_value()?),
                Key::Unknown => {
                    map.next_value::<IgnoredAny>()?;
                    return Err(de::Error::custom("unknown field"));
                }
            }
        }
        Ok(fields)
    }
}

/// Deserializes a seam's event straight from the body.
struct EventSeed(Seam);

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = Event;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Event, D::Error> {
        Ok(match self.0 {
            Seam::Routing => Event::Routing(Deserialize::deserialize(d)?),
            Seam::Rewrite => Event::Rewrite(Deserialize::deserialize(d)?),
            Seam::Steering => Event::Steering(Deserialize::deserialize(d)?),
            Seam::Result => Event::Result(Deserialize::deserialize(d)?),
        })
    }
}

/// The one-pass read of a request body: `None` for anything it does not
/// accept as is, which [`DecideRequest::parse`] then reads the checking
/// way. The event is deserialized from the body's text (never through a
/// `Value`), so integers of any size and the key order of its maps are
/// kept exactly as the checking way keeps them.
fn parse_fast(seam: Seam, body: &[u8]) -> Option<DecideRequest> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let fields = de.deserialize_map(FieldsVisitor(seam)).ok()?;
    de.end().ok()?;
    let state = match fields.state {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(state @ Value::Object(_)) => state,
        Some(_) => return None,
    };
    let tenant = match fields.tenant {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(TenantName::try_from(t).ok()?),
        Some(_) => return None,
    };
    Some(DecideRequest {
        event: fields.event?,
        state,
        tenant,
    })
}

impl Decision<Verdict> {
    /// The answer's body every face sends: exactly the hook's return
    /// value, or, with `trace`, `{"result": ..., "trace": [...]}`.
    pub fn answer(self, trace: bool) -> Value {
        // A verdict holds strings and JSON objects only: it always serialises.
        let result = serde_json::to_value(self.result).unwrap_or(Value::Null);
        if trace {
            json!({"result": result, "trace": self.trace})
        } else {
            result
        }
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
            // The position is in the re-serialised text, not the
            // caller's: the path says where.
            let inner = e.into_inner();
            let message = inner.to_string();
            let at_position = format!(" at line {} column {}", inner.line(), inner.column());
            let message = message.strip_suffix(&at_position).unwrap_or(&message);
            format!("invalid {seam} event: `{at}`: {message}")
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
        assert!(
            !err.contains("column"),
            "no position in re-serialised text: {err}"
        );
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

    /// The one-pass read gives exactly what the checking read gives, for
    /// every body it accepts, and accepts the ordinary ones.
    #[test]
    fn one_pass_read_agrees_with_the_checking_read() {
        // How `parse` read every body before it had a one-pass read.
        fn checking(seam: Seam, body: &str) -> Result<DecideRequest, String> {
            let value: Value = serde_json::from_str(body)
                .map_err(|e| format!("request body is not valid JSON: {e}"))?;
            DecideRequest::from_value(seam, value)
        }
        let steering = r#"{"run_id":"r","tool_name":"t","call_id":"c","args":{"z":1000000000000000000000000000000000000000,"a":-18446744073709551616,"f":1.50,"e":1e+16,"s":"\u00e9\"\n"}}"#;
        let routing = r#"{"run_id":"r","mode":"enforce","intent_label":"i","total_tools":4,"narrowed_tool_names":["a","b"]}"#;
        let accepted = [
            (Seam::Steering, format!(r#"{{"event":{steering}}}"#)),
            (
                Seam::Steering,
                format!(r#" {{ "tenant" : "acme", "event" : {steering}, "state" : {{"b":[1,{{"y":2,"x":3}}],"a":null}} }} "#),
            ),
            (Seam::Steering, format!(r#"{{"event":{steering},"state":null,"tenant":null}}"#)),
            (Seam::Steering, format!(r#"{{"\u0065vent":{steering},"state":{{"s":1}},"state":{{"t":2}}}}"#)),
            (Seam::Routing, format!(r#"{{"event":{routing},"state":{{}}}}"#)),
            (
                Seam::Rewrite,
                r#"{"event":{"run_id":"r","iteration_index":0,"node_name":"react","call_id":"c","tool_name":"t","args":{"b":1,"a":2,"b":3},"available_tools":["t"],"extra":[1]}}"#.to_string(),
            ),
            (
                Seam::Result,
                r#"{"event":{"run_id":"r","tool_name":"t","result":{"z":1000000000000000000000000000000000000000},"call_id":"c"}}"#.to_string(),
            ),
        ];
        for (seam, body) in &accepted {
            let fast = parse_fast(*seam, body.as_bytes())
                .unwrap_or_else(|| panic!("not read in one pass: {body}"));
            assert_eq!(Ok(&fast), checking(*seam, body).as_ref(), "{body}");
            assert_eq!(
                DecideRequest::parse(*seam, body.as_bytes()).as_ref(),
                Ok(&fast)
            );
        }
        let others = [
            format!(r#"{{"event":{steering},"x":1}}"#),
            format!(r#"{{"event":{{"run_id":"x"}},"event":{steering}}}"#),
            format!(r#"{{"event":{steering},"tenant":"../x"}}"#),
            format!(r#"{{"event":{steering},"tenant":7}}"#),
            format!(r#"{{"event":{steering},"state":[]}}"#),
            format!(r#"{{"event":{steering}}} x"#),
            r#"{"event":{"run_id":"r","tool_name":"t","tool_name":"u","call_id":"c","args":{}}}"#
                .to_string(),
            r#"{"event":{"run_id":"r","tool_name":"t","call_id":"c","args":"x"}}"#.to_string(),
            r#"{"event":null}"#.to_string(),
            r#"{"state":{}}"#.to_string(),
            "[]".to_string(),
            "{".to_string(),
        ];
        for body in &others {
            if let Some(fast) = parse_fast(Seam::Steering, body.as_bytes()) {
                panic!("read in one pass: {body}: {fast:?}");
            }
            // The checking read answers, as it always did.
            assert_eq!(
                DecideRequest::parse(Seam::Steering, body.as_bytes()),
                checking(Seam::Steering, body),
                "{body}"
            );
        }
        // A duplicate field of the event itself: the checking read keeps
        // the last one, and so does `parse`.
        let dup =
            r#"{"event":{"run_id":"r","tool_name":"t","tool_name":"u","call_id":"c","args":{}}}"#;
        let request = DecideRequest::parse(Seam::Steering, dup.as_bytes()).expect("valid");
        let Event::Steering(event) = request.event else {
            panic!("a steering event");
        };
        assert_eq!(event.tool_name, "u");
    }
}
