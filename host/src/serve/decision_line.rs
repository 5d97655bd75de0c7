//! The decision log's line, typed: what [`record`](super::decision_record::record)
//! writes for one decision, and the JSON Schema published as
//! `docs/decision-log.schema.json`, generated from these types (a test
//! fails when the file differs from [`schema`]).

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::call::chain::{GuardTrace, Outcome, Verdict};
use crate::call::plugin::Mode;
use crate::event::Seam;
use crate::fault::Fault;

/// Where the published schema says it lives.
const SCHEMA_ID: &str = "https://github.com/toolgate/toolgate/docs/decision-log.schema.json";

/// One decision, as every face (library, toolgate serve, toolgate check, the
/// embedded Python Host) writes it to the decision log: one JSON object per
/// line. See docs/decision-log.md, "The decision log".
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(title = "toolgate decision log line", deny_unknown_fields)]
pub(crate) struct DecisionLine<'a> {
    /// When the decision was made: RFC 3339, UTC, microseconds.
    #[schemars(regex(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"
    ))]
    pub time: String,
    /// The seam decided.
    pub seam: Seam,
    /// The tenant whose chain ran after the global one; null: the global
    /// chain only.
    pub tenant: Option<&'a str>,
    /// The event's run.
    pub run_id: &'a str,
    /// null at the routing and response seams (their events have none).
    pub call_id: Option<&'a str>,
    /// The call's tool as the event named it; null at the routing and
    /// response seams.
    pub tool_name: Option<&'a str>,
    /// The plugin set that decided (GET /v1/plugins,
    /// toolgate_plugins_generation): which policy was in force.
    pub generation: u64,
    /// The decision in one word, as toolgate_decisions_total counts it.
    #[schemars(schema_with = "verdict_word")]
    pub verdict: &'static str,
    /// The hook's return value. routing: the tools kept; rewrite: null or
    /// {tool_name, args} (args only when include has args); steering: null
    /// or the skip; result: null; response: the final answer when include
    /// has content, else null.
    #[schemars(schema_with = "decision_value")]
    pub decision: Value,
    /// Each guard consulted, in order.
    pub guards: Vec<GuardLine<'a>>,
    /// The shadow guards (mode = "shadow": evaluated, recorded, never
    /// applied) consulted, in order, each with mode "shadow"; present when
    /// one subscribes to the seam and its run was not dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<GuardLine<'a>>")]
    pub shadow: Option<Vec<GuardLine<'a>>>,
    /// What the shadow chain would have answered, in one word (as
    /// verdict); present with shadow.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "verdict_word")]
    pub shadow_verdict: Option<&'static str>,
    /// Whether the shadow chain's would-be answer is the enforced one;
    /// absent when the shadow chain met a guard the host could not run in
    /// time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub agrees: Option<bool>,
    /// The call's args (steering, rewrite): only when include has args;
    /// masked, long strings cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Map<String, Value>")]
    pub args: Option<Value>,
    /// The tool's result (result seam) or the run's original answer
    /// (response seam): only when include has content; masked, long
    /// strings cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// The hook's state: only when include has state; masked, long strings
    /// cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Map<String, Value>")]
    pub state: Option<Value>,
}

/// One guard's part in a decision.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct GuardLine<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// sha256 of its component, hex.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub digest: Option<&'a str>,
    /// What the guard did; unavailable: the host could not run it in time
    /// (a shadow run only: an enforced one is not decided, and writes no
    /// line).
    pub outcome: Outcome,
    /// Why it faulted (docs/failures.md), when outcome is fault; the host's
    /// fault when outcome is unavailable.
    pub fault: Option<Fault>,
    /// Fuel burnt, start-up included.
    pub fuel: u64,
    /// Wall-clock time of the call, microseconds.
    pub micros: u64,
    /// enforce: its answer counted; shadow: recorded only.
    pub mode: Mode,
    /// A fault's or malformed reply's detail; masked, cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub detail: Option<&'a str>,
}

impl<'a> GuardLine<'a> {
    /// `entry`'s line, with its component's `digest`.
    pub(crate) fn of(entry: &'a GuardTrace, digest: Option<&'a str>) -> Self {
        GuardLine {
            plugin: &entry.plugin,
            digest,
            outcome: entry.outcome,
            fault: entry.fault,
            fuel: entry.fuel_used,
            micros: entry.micros,
            mode: entry.mode,
            detail: entry.detail.as_deref(),
        }
    }
}

/// A verdict's one word ([`Verdict::as_str`]).
fn verdict_word(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "enum": Verdict::WORDS })
}

/// The decision as the line carries it: the hook's return value, with a
/// rewrite's args and a response's answer left out unless `include` asks.
fn decision_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "oneOf": [
            {"type": "null"},
            {"type": "array", "items": {"type": "string"}},
            {
                "type": "object",
                "required": ["tool_name"],
                "additionalProperties": false,
                "properties": {"tool_name": {"type": "string"}, "args": {"type": "object"}}
            },
            {
                "type": "object",
                "required": ["action", "content", "is_error"],
                "additionalProperties": false,
                "properties": {
                    "action": {"const": "skip"},
                    "content": {"type": "string"},
                    "is_error": {"type": "boolean"}
                }
            },
            {"type": "string"}
        ]
    })
}

/// The published JSON Schema of a decision log line
/// (`docs/decision-log.schema.json`), generated from the line's types.
pub fn schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut schema = generator.into_root_schema_for::<DecisionLine<'static>>();
    schema.insert("$id".into(), SCHEMA_ID.into());
    schema.to_value()
}
