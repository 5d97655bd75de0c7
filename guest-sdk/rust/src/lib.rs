//! Write [toolgate] guards in Rust.
//!
//! A guard is a WebAssembly component that toolgate consults on an AI agent's
//! tool calls, at one or more of five seams (the hooks of symfonic's callback
//! contract):
//!
//! | seam | trait | hook | event | a guard may |
//! |---|---|---|---|---|
//! | `routing` | [`RoutingGuard`] | `on_tool_routing_decision` | [`ToolRoutingDecisionEvent`] | hide tools this turn |
//! | `rewrite` | [`RewriteGuard`] | `on_tool_call_dispatch` | [`ToolCallDispatchEvent`] | rewrite a call's tool / args |
//! | `steering` | [`SteeringGuard`] | `on_before_tool_call` | [`BeforeToolCallEvent`] | let a call run, or skip it |
//! | `result` | [`ResultGuard`] | `on_tool_result` | [`ToolResultCallbackEvent`] | observe what a tool returned |
//! | `response` | [`ResponseGuard`] | `on_response_render` | [`ResponseRenderEvent`] | rewrite the run's final answer |
//!
//! Beside the seams, a guard may observe symfonic's thirteen lifecycle
//! hooks (`on_agent_start`, `on_llm_end`, ...) with the [`Observer`] trait
//! (`export!(MyGuard: observe)`): it sees what a run does and spends, keeps
//! it in [`state`], and its seams decide on it.
//!
//! Hooks and events carry symfonic's names, as in every toolgate SDK; the
//! WIT contract's own names (`dispatch`, `dispatch-event`, ...) appear only
//! in the generated bindings behind [`export!`].
//!
//! Implement the trait of each seam you need, then name those seams in one
//! [`export!`] call. The component exports exactly the seams named there, and
//! the host consults it only at those seams:
//!
//! ```rust,ignore
//! use toolgate_guest::{BeforeToolCallEvent, SteeringGuard, Verdict};
//!
//! struct SqlGuard;
//!
//! impl SteeringGuard for SqlGuard {
//!     fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
//!         let sql = event.args["sql"].as_str().unwrap_or_default();
//!         if event.tool_name == "run_query" && !sql.to_uppercase().contains("WHERE") {
//!             return Verdict::steer("Add a WHERE clause before running this query.");
//!         }
//!         Verdict::proceed()
//!     }
//! }
//!
//! toolgate_guest::export!(SqlGuard: steering);
//! ```
//!
//! Build it as a `cdylib` for `wasm32-wasip2`
//! (`cargo build --release --target wasm32-wasip2`); the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component to drop into a plugin
//! directory.
//!
//! Every hook call runs on a brand-new instance: nothing a guard keeps in
//! memory survives from one call to the next. A guard that panics, traps or
//! exceeds its limits is logged by the host and skipped (the call goes on as
//! if it had returned nothing), unless the operator configured it to fail
//! closed.
//!
//! JSON values (`args`, `state`, tool results, configuration) arrive parsed
//! as [`serde_json::Value`]; this crate re-exports [`serde_json`] so a guard
//! needs no dependency besides this one.
//!
//! [toolgate]: https://github.com/toolgate/toolgate

#![deny(missing_docs)]

use std::marker::PhantomData;

pub use serde;
pub use serde_json;
use serde_json::Value;

mod bindings;
pub mod http;
pub mod log;
pub mod observe;
pub mod state;
#[cfg(test)]
mod tests;

use bindings::{host, types};
pub use observe::{
    AgentEndEvent, AgentStartEvent, FabricationDetectedEvent, Hook, LLMEndEvent, LLMPreCallEvent,
    LLMStartEvent, NodeEndEvent, NodeErrorEvent, NodeStartEvent, Observer, ProcedureSelectionEvent,
    ReactLoopEndEvent, TokenCompositionEvent, UserCorrectionEvent,
};

/// A JSON object with no keys, the default for a missing JSON value.
fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Parses a JSON text the host sent. The host guarantees valid JSON; a
/// violation is a host bug, so it traps (the host logs it) rather than
/// letting the guard decide on made-up data.
fn parse_json(what: &str, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|err| {
        panic!("toolgate-guest: the host sent `{what}` that is not valid JSON: {err}")
    })
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// `on_before_tool_call`: a tool call about to run (symfonic's
/// `BeforeToolCallEvent`).
#[derive(Debug, Clone, PartialEq)]
pub struct BeforeToolCallEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// The (post-rewrite) tool about to run.
    pub tool_name: String,
    /// The LangChain `tool_call` id this decision applies to.
    pub call_id: String,
    /// The (post-rewrite) arguments, a JSON object.
    pub args: Value,
    /// The caller's state as a JSON object (`{}` when there is none).
    pub state: Value,
}

impl From<types::BeforeToolCallEvent> for BeforeToolCallEvent {
    fn from(e: types::BeforeToolCallEvent) -> Self {
        Self {
            args: parse_json("args", &e.args),
            state: parse_json("state", &e.state),
            run_id: e.run_id,
            tool_name: e.tool_name,
            call_id: e.call_id,
        }
    }
}

/// `on_tool_call_dispatch`: a tool call about to be dispatched, which a guard
/// may rewrite (symfonic's `ToolCallDispatchEvent`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallDispatchEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// 0-indexed React loop iteration that produced this call.
    pub iteration_index: u32,
    /// The node that emitted the call (always `"react"` in symfonic 9).
    pub node_name: String,
    /// The LangChain `tool_call` id; the host owns it, a rewrite cannot
    /// change it.
    pub call_id: String,
    /// The tool the call names (after any earlier guard's rewrite).
    pub tool_name: String,
    /// The call's arguments, a JSON object (after any earlier rewrite).
    pub args: Value,
    /// The post-routing palette: the only names a rewrite may target.
    pub available_tools: Vec<String>,
    /// The caller's state as a JSON object (`{}` when there is none).
    pub state: Value,
}

impl From<types::DispatchEvent> for ToolCallDispatchEvent {
    fn from(e: types::DispatchEvent) -> Self {
        Self {
            args: parse_json("args", &e.args),
            state: parse_json("state", &e.state),
            run_id: e.run_id,
            iteration_index: e.iteration_index,
            node_name: e.node_name,
            call_id: e.call_id,
            tool_name: e.tool_name,
            available_tools: e.available_tools,
        }
    }
}

/// One tool the model may be offered this turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The LangChain tool `name`.
    pub name: String,
    /// The tool's description, as the model sees it (empty when unknown).
    pub description: String,
}

/// `on_tool_routing_decision`: which tools are visible this turn (symfonic's
/// `ToolRoutingDecisionEvent`, plus the visible tools, the query and the
/// state).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRoutingDecisionEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// The routing mode in effect: `"observe"` or `"enforce"`.
    pub mode: String,
    /// The intent label the framework's router assigned to the query.
    pub intent_label: String,
    /// How many tools the full manifest holds.
    pub total_tools: u32,
    /// The tool names visible so far: the framework's narrowing, further
    /// narrowed by every guard earlier in the chain.
    pub narrowed_tool_names: Vec<String>,
    /// The framework's rough estimate of prompt tokens saved by narrowing.
    pub saved_tokens_estimate: u32,
    /// The visible tools (the same set as `narrowed_tool_names`) with their
    /// descriptions.
    pub tools: Vec<ToolInfo>,
    /// The user's query, when the caller knows it.
    pub query: Option<String>,
    /// The caller's state as a JSON object (`{}` when there is none).
    pub state: Value,
}

impl From<types::RoutingEvent> for ToolRoutingDecisionEvent {
    fn from(e: types::RoutingEvent) -> Self {
        Self {
            state: parse_json("state", &e.state),
            run_id: e.run_id,
            mode: e.mode,
            intent_label: e.intent_label,
            total_tools: e.total_tools,
            narrowed_tool_names: e.narrowed_tool_names,
            saved_tokens_estimate: e.saved_tokens_estimate,
            tools: e
                .tools
                .into_iter()
                .map(|t| ToolInfo {
                    name: t.name,
                    description: t.description,
                })
                .collect(),
            query: e.query,
        }
    }
}

/// `on_tool_result`: what a tool returned (symfonic's
/// `ToolResultCallbackEvent`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultCallbackEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// The tool that produced the result.
    pub tool_name: String,
    /// The `ToolMessage.content` as JSON (`null` on framework cancellation).
    pub result: Value,
    /// `result` exactly as the host sent it, as JSON text.
    pub result_json: String,
    /// The `tool_call` id correlating this result to its dispatch.
    pub call_id: String,
    /// True when the result will be supplied later by a resume cycle.
    pub deferred: bool,
    /// True when the `ToolMessage` carried `status="error"`.
    pub is_error: bool,
    /// The caller's state as a JSON object (`{}` when there is none).
    pub state: Value,
}

impl From<types::ToolResultEvent> for ToolResultCallbackEvent {
    fn from(e: types::ToolResultEvent) -> Self {
        Self {
            result: parse_json("result", &e.result),
            state: parse_json("state", &e.state),
            result_json: e.result,
            run_id: e.run_id,
            tool_name: e.tool_name,
            call_id: e.call_id,
            deferred: e.deferred,
            is_error: e.is_error,
        }
    }
}

/// `on_response_render`: the run's final answer, about to be returned
/// (symfonic's `ResponseRenderEvent`, with the hook's `content` and
/// `state`).
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRenderEvent {
    /// The agent run this turn belongs to.
    pub run_id: String,
    /// 0-indexed React loop iteration that produced the final answer; -1
    /// when the engine, not the React loop, emitted the event.
    pub iteration_index: i32,
    /// The model that produced the final answer.
    pub model: String,
    /// The node that produced the final answer.
    pub node_name: String,
    /// The final answer before any guard rewrote it.
    pub original_content: String,
    /// The answer as it stands: the previous guard's output (the hook's
    /// `content`).
    pub content: String,
    /// The caller's state as a JSON object (`{}` when there is none).
    pub state: Value,
}

impl From<types::ResponseEvent> for ResponseRenderEvent {
    fn from(e: types::ResponseEvent) -> Self {
        Self {
            state: parse_json("state", &e.state),
            run_id: e.run_id,
            iteration_index: e.iteration_index,
            model: e.model,
            node_name: e.node_name,
            original_content: e.original_content,
            content: e.content,
        }
    }
}

// ---------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------

/// What a steering guard decides for one call.
///
/// The host's chain consults steering guards in order; the first skip wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Verdict {
    /// Run the tool normally; later guards are still consulted.
    #[default]
    Proceed,
    /// Do not run the tool; the model sees `content` instead.
    Skip {
        /// What the model sees as the tool's result. Must not be empty: the
        /// host drops an empty skip with a warning and proceeds.
        content: String,
        /// `Some(true)` or `None` (the default) steers: the model sees an
        /// error result and retries. `Some(false)` cancels: a benign result
        /// the model moves past.
        is_error: Option<bool>,
    },
}

impl Verdict {
    /// Run the tool normally.
    pub fn proceed() -> Self {
        Verdict::Proceed
    }

    /// Steer: skip the tool and show the model `content` as an error result,
    /// so it corrects itself and retries (`is_error = true`).
    pub fn steer(content: impl Into<String>) -> Self {
        Verdict::Skip {
            content: content.into(),
            is_error: Some(true),
        }
    }

    /// Cancel: skip the tool and show the model `content` as a benign result
    /// it moves past without retrying (`is_error = false`).
    pub fn cancel(content: impl Into<String>) -> Self {
        Verdict::Skip {
            content: content.into(),
            is_error: Some(false),
        }
    }
}

impl From<Verdict> for types::Verdict {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Proceed => types::Verdict::Proceed,
            Verdict::Skip { content, is_error } => {
                types::Verdict::Skip(types::Skip { content, is_error })
            }
        }
    }
}

/// A rewritten tool call: the tool to call instead and its arguments.
///
/// The host drops (with a warning) a rewrite naming a tool outside the
/// event's `available_tools`, or whose arguments are not a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    tool_name: String,
    args_json: String,
}

impl Rewrite {
    /// Calls `tool_name` with `args` (normally a JSON object) instead.
    pub fn new(tool_name: impl Into<String>, args: &Value) -> Self {
        Self {
            tool_name: tool_name.into(),
            args_json: args.to_string(),
        }
    }

    /// Calls `tool_name` with arguments given as JSON text, passed to the
    /// host verbatim, unchecked. Meant for exercising the host's validation;
    /// prefer [`Rewrite::new`].
    pub fn with_raw_args(tool_name: impl Into<String>, args_json: impl Into<String>) -> Self {
        Self {
            tool_name: tool_name.into(),
            args_json: args_json.into(),
        }
    }

    /// The tool the rewritten call names.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// The rewritten arguments as the JSON text sent to the host.
    pub fn args_json(&self) -> &str {
        &self.args_json
    }
}

impl From<Rewrite> for types::Rewrite {
    fn from(r: Rewrite) -> Self {
        types::Rewrite {
            tool_name: r.tool_name,
            args: r.args_json,
        }
    }
}

// ---------------------------------------------------------------------------
// The seams
// ---------------------------------------------------------------------------

/// The steering seam (`on_before_tool_call`): decide whether one call runs.
///
/// Export it with `toolgate_guest::export!(MyGuard: steering)`.
pub trait SteeringGuard {
    /// Decides whether this one call runs: [`Verdict::proceed`], or skip it
    /// with [`Verdict::steer`] / [`Verdict::cancel`].
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict;
}

/// The rewrite seam (`on_tool_call_dispatch`): rewrite a call's tool / args.
///
/// Export it with `toolgate_guest::export!(MyGuard: rewrite)`.
pub trait RewriteGuard {
    /// Returns a replacement call, or `None` to pass the call through
    /// unchanged. The call id cannot be changed.
    fn on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Option<Rewrite>;
}

/// The routing seam (`on_tool_routing_decision`): narrow the visible tools.
///
/// Export it with `toolgate_guest::export!(MyGuard: routing)`.
pub trait RoutingGuard {
    /// Returns the tool names to keep visible, or `None` to leave the palette
    /// as it is. Names not already visible are ignored: a guard can hide
    /// tools, never add one.
    fn on_tool_routing_decision(event: ToolRoutingDecisionEvent) -> Option<Vec<String>>;
}

/// The optional `config` export: checks the plugin's manifest `config` once,
/// when the host loads it. An `Err` refuses the plugin at load with its
/// message (on a reload, the last good version keeps serving), so a typo in
/// a setting is an error the operator sees at once, not a wrong verdict
/// later.
///
/// Export it beside the seams: `toolgate_guest::export!(MyGuard: steering,
/// config)`. A typed check is one line with serde:
///
/// ```rust,ignore
/// impl ConfigCheck for MyGuard {
///     fn validate_config(config: &Value) -> Result<(), String> {
///         toolgate_guest::config_as::<Settings>(config).map(drop)
///     }
/// }
/// ```
pub trait ConfigCheck {
    /// `Ok(())` if `config` (a JSON object, `{}` when none is set) is one
    /// this guard can work with; otherwise what is wrong with it.
    fn validate_config(config: &Value) -> Result<(), String>;
}

/// `config` read into a typed settings struct, with serde's message when it
/// does not fit (an unknown or missing field is named).
pub fn config_as<T: serde::de::DeserializeOwned>(config: &Value) -> Result<T, String> {
    T::deserialize(config).map_err(|e| format!("config: {e}"))
}

/// The result seam (`on_tool_result`): observe what a tool returned.
///
/// Export it with `toolgate_guest::export!(MyGuard: result)`.
pub trait ResultGuard {
    /// Observes one tool result; nothing to return.
    fn on_tool_result(event: ToolResultCallbackEvent);
}

/// The response seam (`on_response_render`): rewrite the run's final
/// answer.
///
/// Export it with `toolgate_guest::export!(MyGuard: response)`.
pub trait ResponseGuard {
    /// The answer to give instead of `event.content`, or `None` to keep it.
    fn on_response_render(event: ResponseRenderEvent) -> Option<String>;
}

// ---------------------------------------------------------------------------
// Host imports
// ---------------------------------------------------------------------------

/// The plugin's own configuration (the manifest's `config` table for this
/// plugin) as JSON; `{}` when none is set.
///
/// Each call asks the host and parses the answer; call it once per hook.
pub fn config() -> Value {
    parse_config(&config_json())
}

/// The configuration JSON text the host sent, parsed; blank text is `{}`.
fn parse_config(text: &str) -> Value {
    if text.trim().is_empty() {
        return empty_object();
    }
    parse_json("config", text)
}

/// The plugin's configuration exactly as the host sent it, as JSON text.
pub fn config_json() -> String {
    host::config()
}

// ---------------------------------------------------------------------------
// Exporting
// ---------------------------------------------------------------------------

/// Exports a guard type at the named seams, making the crate a toolgate
/// guard component.
///
/// Name the type, a colon, then one or more of `steering`, `rewrite`,
/// `routing`, `result`, `response`, `observe`; the type must implement the matching
/// traits ([`SteeringGuard`], [`RewriteGuard`], [`RoutingGuard`],
/// [`ResultGuard`], [`ResponseGuard`], [`Observer`]).
/// The component exports exactly those seams' interfaces, which is how the
/// host knows where to consult it. Call it once per crate, at module level:
///
/// ```rust,ignore
/// toolgate_guest::export!(SqlGuard: steering);
/// toolgate_guest::export!(MyGuard: steering, rewrite);
/// ```
#[macro_export]
macro_rules! export {
    ($ty:ty : $($seam:ident),+ $(,)?) => {
        $( $crate::__export_seam!($seam, $ty); )+
    };
}

/// One seam of [`export!`]; not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_seam {
    (steering, $ty:ty) => {
        const _: () = {
            type __ToolgateSteering = $crate::__private::Adapter<$ty>;
            $crate::__private::steering::export_steering!(
                __ToolgateSteering with_types_in $crate::__private::steering
            );
        };
    };
    (rewrite, $ty:ty) => {
        const _: () = {
            type __ToolgateRewrite = $crate::__private::Adapter<$ty>;
            $crate::__private::rewrite::export_rewrite!(
                __ToolgateRewrite with_types_in $crate::__private::rewrite
            );
        };
    };
    (routing, $ty:ty) => {
        const _: () = {
            type __ToolgateRouting = $crate::__private::Adapter<$ty>;
            $crate::__private::routing::export_routing!(
                __ToolgateRouting with_types_in $crate::__private::routing
            );
        };
    };
    (config, $ty:ty) => {
        const _: () = {
            type __ToolgateConfig = $crate::__private::Adapter<$ty>;
            $crate::__private::config::export_config!(
                __ToolgateConfig with_types_in $crate::__private::config
            );
        };
    };
    (result, $ty:ty) => {
        const _: () = {
            type __ToolgateResult = $crate::__private::Adapter<$ty>;
            $crate::__private::result::export_result!(
                __ToolgateResult with_types_in $crate::__private::result
            );
        };
    };
    (response, $ty:ty) => {
        const _: () = {
            type __ToolgateResponse = $crate::__private::Adapter<$ty>;
            $crate::__private::response::export_response!(
                __ToolgateResponse with_types_in $crate::__private::response
            );
        };
    };
    (observe, $ty:ty) => {
        const _: () = {
            type __ToolgateObserve = $crate::__private::Adapter<$ty>;
            $crate::__private::observe::export_observe!(
                __ToolgateObserve with_types_in $crate::__private::observe
            );
        };
    };
    ($other:ident, $ty:ty) => {
        ::core::compile_error!(::core::concat!(
            "toolgate_guest::export!: unknown seam `",
            ::core::stringify!($other),
            "`; expected one of: steering, rewrite, routing, result, response, observe, config"
        ));
    };
}

/// Implementation details of [`export!`]; not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::{config, observe, response, result, rewrite, routing, steering};

    use super::*;

    /// Adapts a guard type to the generated per-seam `Guest` traits.
    pub struct Adapter<T: ?Sized>(PhantomData<T>);

    impl<T: SteeringGuard + ?Sized> steering::exports::toolgate::guard::steering::Guest for Adapter<T> {
        fn before_tool_call(event: types::BeforeToolCallEvent) -> types::Verdict {
            T::on_before_tool_call(event.into()).into()
        }
    }

    impl<T: RewriteGuard + ?Sized> rewrite::exports::toolgate::guard::rewrite::Guest for Adapter<T> {
        fn dispatch(event: types::DispatchEvent) -> Option<types::Rewrite> {
            T::on_tool_call_dispatch(event.into()).map(Into::into)
        }
    }

    impl<T: RoutingGuard + ?Sized> routing::exports::toolgate::guard::routing::Guest for Adapter<T> {
        fn narrow(event: types::RoutingEvent) -> Option<Vec<String>> {
            T::on_tool_routing_decision(event.into())
        }
    }

    impl<T: ConfigCheck + ?Sized> config::exports::toolgate::guard::config::Guest for Adapter<T> {
        fn validate_config(config: String) -> Result<(), String> {
            T::validate_config(&parse_config(&config))
        }
    }

    impl<T: ResultGuard + ?Sized> result::exports::toolgate::guard::result::Guest for Adapter<T> {
        fn on_result(event: types::ToolResultEvent) {
            T::on_tool_result(event.into())
        }
    }

    impl<T: Observer + ?Sized> observe::exports::toolgate::guard::observe::Guest for Adapter<T> {
        fn subscriptions() -> observe::exports::toolgate::guard::observe::EventKinds {
            crate::observe::kinds(T::HOOKS)
        }

        fn observe(event: observe::exports::toolgate::guard::observe::LifecycleEvent) {
            crate::observe::dispatch::<T>(event)
        }
    }

    impl<T: ResponseGuard + ?Sized> response::exports::toolgate::guard::response::Guest for Adapter<T> {
        fn render(event: types::ResponseEvent) -> Option<String> {
            T::on_response_render(event.into())
        }
    }
}
