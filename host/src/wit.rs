//! Events as the guest receives them: the JSON events of [`crate::event`]
//! turned into the WIT records of `wit/guard.wit` (`args`, `result` and
//! `state` as JSON text).

use serde_json::{Map, Value};

use crate::bindings::types;
use crate::event::{BeforeToolCallEvent, DispatchEvent, RoutingEvent, ToolResultEvent};

/// A routing event showing the guard `visible` (the chain's narrowing so
/// far), each with its description when the event has one.
pub(crate) fn routing(
    event: &RoutingEvent,
    visible: &[String],
    state: &str,
) -> types::RoutingEvent {
    types::RoutingEvent {
        run_id: event.run_id.clone(),
        mode: event.mode.clone(),
        intent_label: event.intent_label.clone(),
        total_tools: event.total_tools,
        narrowed_tool_names: visible.to_vec(),
        saved_tokens_estimate: event.saved_tokens_estimate,
        tools: visible
            .iter()
            .map(|name| types::ToolInfo {
                name: name.clone(),
                description: event
                    .tools
                    .iter()
                    .find(|t| &t.name == name)
                    .map(|t| t.description.clone())
                    .unwrap_or_default(),
            })
            .collect(),
        query: event.query.clone(),
        state: state.to_string(),
    }
}

/// A dispatch event for the call `tool_name(args)` (the chain's rewrite so
/// far, or the event's own call).
pub(crate) fn dispatch(
    event: &DispatchEvent,
    tool_name: &str,
    args: &Map<String, Value>,
    state: &str,
) -> types::DispatchEvent {
    types::DispatchEvent {
        run_id: event.run_id.clone(),
        iteration_index: event.iteration_index,
        node_name: event.node_name.clone(),
        call_id: event.call_id.clone(),
        tool_name: tool_name.to_string(),
        args: Value::Object(args.clone()).to_string(),
        available_tools: event.available_tools.clone(),
        state: state.to_string(),
    }
}

/// A before-tool-call event.
pub(crate) fn before_tool_call(
    event: &BeforeToolCallEvent,
    state: &str,
) -> types::BeforeToolCallEvent {
    types::BeforeToolCallEvent {
        run_id: event.run_id.clone(),
        tool_name: event.tool_name.clone(),
        call_id: event.call_id.clone(),
        args: Value::Object(event.args.clone()).to_string(),
        state: state.to_string(),
    }
}

/// A tool-result event.
pub(crate) fn tool_result(event: &ToolResultEvent, state: &str) -> types::ToolResultEvent {
    types::ToolResultEvent {
        run_id: event.run_id.clone(),
        tool_name: event.tool_name.clone(),
        result: event.result.to_string(),
        call_id: event.call_id.clone(),
        deferred: event.deferred,
        is_error: event.is_error,
        state: state.to_string(),
    }
}
