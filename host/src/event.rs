//! The JSON face of the five seams: events as symfonic sends them (the
//! seed's class names and snake_case field names) and verdicts exactly as
//! its Python hooks return them.
//!
//! Each seam's event type is named after symfonic's event class
//! ([`ToolRoutingDecisionEvent`], [`ToolCallDispatchEvent`],
//! [`BeforeToolCallEvent`], [`ToolResultCallbackEvent`],
//! [`ResponseRenderEvent`]); the WIT records the host lowers them into keep
//! the contract's names (`routing-event`, `dispatch-event`,
//! `before-tool-call-event`, `tool-result-event`, `response-event`). The
//! table is in `docs/design.md` ("Vocabulary"). The lifecycle events are in
//! [`lifecycle`].

use std::fmt;
use std::str::FromStr;

pub mod lifecycle;

pub use lifecycle::{Hooks, LifecycleEvent, LifecycleHook};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One of the four seams a guard can subscribe to.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Seam {
    /// `on_tool_routing_decision`: narrow the visible tools.
    Routing,
    /// `on_tool_call_dispatch`: rewrite a call.
    Rewrite,
    /// `on_before_tool_call`: proceed or skip a call.
    Steering,
    /// `on_tool_result`: observe a result.
    Result,
    /// `on_response_render`: rewrite the run's final answer.
    Response,
}

impl Seam {
    /// Every seam, in the order symfonic fires them.
    pub const ALL: [Seam; 5] = [
        Seam::Routing,
        Seam::Rewrite,
        Seam::Steering,
        Seam::Result,
        Seam::Response,
    ];

    /// The seam's name as used on the command line, in URLs and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Seam::Routing => "routing",
            Seam::Rewrite => "rewrite",
            Seam::Steering => "steering",
            Seam::Result => "result",
            Seam::Response => "response",
        }
    }
}

impl fmt::Display for Seam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Seam {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Seam::ALL
            .into_iter()
            .find(|seam| seam.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown seam `{s}` (expected routing, rewrite, steering, result or response)"
                )
            })
    }
}

/// A tool the model may be offered, for routing events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// The tool's name.
    pub name: String,
    /// The tool's description (empty when unknown).
    #[serde(default)]
    pub description: String,
}

/// The routing seam's event (`on_tool_routing_decision`): symfonic's
/// `ToolRoutingDecisionEvent`, plus the visible tools' descriptions and the
/// query when the caller knows them. WIT: `types.routing-event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolRoutingDecisionEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// "observe" or "enforce".
    pub mode: String,
    /// The intent label the router assigned.
    pub intent_label: String,
    /// How many tools the full manifest holds.
    pub total_tools: u32,
    /// The tools visible this turn.
    pub narrowed_tool_names: Vec<String>,
    /// Rough estimate of prompt tokens saved by narrowing (default 0).
    #[serde(default)]
    pub saved_tokens_estimate: u32,
    /// Descriptions of visible tools, when known (an extension of the seed).
    #[serde(default)]
    pub tools: Vec<ToolInfo>,
    /// The user's query, when known (an extension of the seed).
    #[serde(default)]
    pub query: Option<String>,
}

/// The rewrite seam's event (`on_tool_call_dispatch`): symfonic's
/// `ToolCallDispatchEvent`. WIT: `types.dispatch-event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDispatchEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// 0-indexed React loop iteration.
    pub iteration_index: u32,
    /// The emitting node (always "react" in symfonic 9).
    pub node_name: String,
    /// The LangChain `tool_call` id; a rewrite cannot change it.
    pub call_id: String,
    /// The tool the call names.
    pub tool_name: String,
    /// The call's arguments.
    pub args: Map<String, Value>,
    /// The post-routing palette: the only names a rewrite may target.
    pub available_tools: Vec<String>,
}

/// The steering seam's event (`on_before_tool_call`): symfonic's
/// `BeforeToolCallEvent`. WIT: `types.before-tool-call-event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BeforeToolCallEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// The (post-rewrite) tool about to run.
    pub tool_name: String,
    /// The `tool_call` id this decision applies to.
    pub call_id: String,
    /// The (post-rewrite) arguments.
    pub args: Map<String, Value>,
}

/// The result seam's event (`on_tool_result`): symfonic's
/// `ToolResultCallbackEvent`. WIT: `types.tool-result-event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResultCallbackEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// The tool that produced the result.
    pub tool_name: String,
    /// `ToolMessage.content` (`null` on framework cancellation).
    pub result: Value,
    /// The `tool_call` id correlating this result to its dispatch.
    pub call_id: String,
    /// True when the result is supplied later by a resume cycle (default false).
    #[serde(default)]
    pub deferred: bool,
    /// True when the `ToolMessage` carried `status="error"` (default false).
    #[serde(default)]
    pub is_error: bool,
}

/// The response seam's event (`on_response_render`): symfonic's
/// `ResponseRenderEvent`. WIT: `types.response-event` (which adds the
/// chain's current `content` and the `state`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResponseRenderEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// 0-indexed React loop iteration that produced the final answer; -1
    /// when the engine, not the React loop, emitted the event (symfonic's
    /// `run()` sends -1).
    pub iteration_index: i32,
    /// The model that produced the final answer.
    pub model: String,
    /// The node that produced the final answer.
    pub node_name: String,
    /// The final answer, before any handler rewrote it.
    pub original_content: String,
    /// The answer as it stands when the guards are consulted: the hook's
    /// `content`, which differs from `original_content` when a handler
    /// registered before toolgate rewrote it. The first guard's `content`;
    /// absent: `original_content`. Not a field of symfonic's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

impl ResponseRenderEvent {
    /// The answer the first guard is given as `content`: the event's
    /// `content`, else `original_content`.
    pub fn content(&self) -> &str {
        self.content.as_deref().unwrap_or(&self.original_content)
    }
}

/// A steering refusal, serialised exactly as the Python hook returns it:
/// `{"action": "skip", "content": ..., "is_error": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename = "skip")]
pub struct Skip {
    /// What the model sees instead of the tool's result.
    pub content: String,
    /// `true` steers (the model retries), `false` cancels.
    pub is_error: bool,
}

/// A rewritten call as `on_tool_call_dispatch` returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rewrite {
    /// The tool to call instead.
    pub tool_name: String,
    /// The replacement arguments.
    pub args: Map<String, Value>,
}

/// An event for any seam, as read from a request, a trace line or a file
/// (all by [`DecideRequest`](crate::DecideRequest)'s reader).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A routing event (`on_tool_routing_decision`).
    Routing(ToolRoutingDecisionEvent),
    /// A rewrite event (`on_tool_call_dispatch`).
    Rewrite(ToolCallDispatchEvent),
    /// A steering event (`on_before_tool_call`).
    Steering(BeforeToolCallEvent),
    /// A result event (`on_tool_result`).
    Result(ToolResultCallbackEvent),
    /// A response event (`on_response_render`).
    Response(ResponseRenderEvent),
}

impl Event {
    /// The seam this event belongs to.
    pub fn seam(&self) -> Seam {
        match self {
            Event::Routing(_) => Seam::Routing,
            Event::Rewrite(_) => Seam::Rewrite,
            Event::Steering(_) => Seam::Steering,
            Event::Result(_) => Seam::Result,
            Event::Response(_) => Seam::Response,
        }
    }
}
