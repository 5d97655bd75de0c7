//! The four seams as `wit/guard.wit` types them: each seam's [`Hook`] —
//! its export, the JSON events of [`crate::event`] lowered into the WIT
//! records the guest receives (`args`, `result` and `state` as JSON
//! text), and the guest's reply lifted back into host types. Nothing
//! outside this module (and the host imports in [`crate::runtime::sandbox`]) sees a
//! generated type.
//!
//! Host types carry symfonic's names ([`ToolCallDispatchEvent`], ...);
//! the generated ones keep the contract's (`types::DispatchEvent`, from the
//! record `dispatch-event`). The mapping is in `docs/design.md`
//! ("Vocabulary").

use serde_json::{Map, Value};
use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use crate::call::guard_call::{
    Hook, ObserveHook, ResponseHook, ResultHook, RewriteHook, RoutingHook, SteeringHook,
};
use crate::event::lifecycle::{Hooks, LifecycleEvent, LifecycleHook};
use crate::event::{
    BeforeToolCallEvent, ResponseRenderEvent, Rewrite, Seam, Skip, ToolCallDispatchEvent,
    ToolResultCallbackEvent, ToolRoutingDecisionEvent,
};
use crate::runtime::bindings::{
    config, observe, response, result, rewrite, routing, steering, types, v0_1, v0_2,
};
use crate::runtime::sandbox::Sandbox;

/// A seam's export as a component has it: under the `0.3.0` contract's
/// name, under `0.2.0`'s or under `0.1.0`'s (the same function and types).
#[derive(Clone)]
pub(crate) enum Versioned<Now, Mid, Then> {
    /// `toolgate:guard/<seam>@0.3.0`.
    Now(Now),
    /// `toolgate:guard/<seam>@0.2.0`.
    Mid(Mid),
    /// `toolgate:guard/<seam>@0.1.0`.
    Then(Then),
}

impl<Now, Mid, Then> Versioned<Now, Mid, Then> {
    /// The export under any version's name, the newest first.
    fn find(
        now: wasmtime::Result<Now>,
        mid: impl FnOnce() -> wasmtime::Result<Mid>,
        then: impl FnOnce() -> wasmtime::Result<Then>,
    ) -> Option<Self> {
        if let Ok(now) = now {
            return Some(Versioned::Now(now));
        }
        if let Ok(mid) = mid() {
            return Some(Versioned::Mid(mid));
        }
        then().ok().map(Versioned::Then)
    }
}

/// Loads a [`Versioned`] export's function on an instance.
macro_rules! load_versioned {
    ($export:expr, $store:expr, $instance:expr) => {
        Ok(match $export {
            Versioned::Now(e) => Versioned::Now(e.load($store, $instance)?),
            Versioned::Mid(e) => Versioned::Mid(e.load($store, $instance)?),
            Versioned::Then(e) => Versioned::Then(e.load($store, $instance)?),
        })
    };
}

/// Calls a [`Versioned`] function: the same method, types and reply in
/// both versions.
macro_rules! call_versioned {
    ($guest:expr, $method:ident, $store:expr, $event:expr) => {
        match $guest {
            Versioned::Now(g) => g.$method($store, $event).await,
            Versioned::Mid(g) => g.$method($store, $event).await,
            Versioned::Then(g) => g.$method($store, $event).await,
        }
    };
}

/// The typed export lookups of each seam a component exports, and of its
/// `config` check (since `0.2.0`) when it has one.
#[derive(Clone, Default)]
pub(crate) struct Exports {
    routing: Option<
        Versioned<routing::GuestIndices, v0_2::routing::GuestIndices, v0_1::routing::GuestIndices>,
    >,
    rewrite: Option<
        Versioned<rewrite::GuestIndices, v0_2::rewrite::GuestIndices, v0_1::rewrite::GuestIndices>,
    >,
    steering: Option<
        Versioned<
            steering::GuestIndices,
            v0_2::steering::GuestIndices,
            v0_1::steering::GuestIndices,
        >,
    >,
    result: Option<
        Versioned<result::GuestIndices, v0_2::result::GuestIndices, v0_1::result::GuestIndices>,
    >,
    response: Option<response::GuestIndices>,
    observe: Option<observe::GuestIndices>,
    config: Option<ConfigExport>,
}

/// The `config` export under `0.3.0`'s name or `0.2.0`'s.
#[derive(Clone)]
enum ConfigExport {
    /// `toolgate:guard/config@0.3.0`.
    Now(config::GuestIndices),
    /// `toolgate:guard/config@0.2.0`.
    Mid(v0_2::config::GuestIndices),
}

impl Exports {
    /// The seams `pre` exports.
    pub(crate) fn new(pre: &InstancePre<Sandbox>) -> Exports {
        Exports {
            routing: Versioned::find(
                routing::GuestIndices::new(pre),
                || v0_2::routing::GuestIndices::new(pre),
                || v0_1::routing::GuestIndices::new(pre),
            ),
            rewrite: Versioned::find(
                rewrite::GuestIndices::new(pre),
                || v0_2::rewrite::GuestIndices::new(pre),
                || v0_1::rewrite::GuestIndices::new(pre),
            ),
            steering: Versioned::find(
                steering::GuestIndices::new(pre),
                || v0_2::steering::GuestIndices::new(pre),
                || v0_1::steering::GuestIndices::new(pre),
            ),
            result: Versioned::find(
                result::GuestIndices::new(pre),
                || v0_2::result::GuestIndices::new(pre),
                || v0_1::result::GuestIndices::new(pre),
            ),
            response: response::GuestIndices::new(pre).ok(),
            observe: observe::GuestIndices::new(pre).ok(),
            config: config::GuestIndices::new(pre)
                .map(ConfigExport::Now)
                .or_else(|_| v0_2::config::GuestIndices::new(pre).map(ConfigExport::Mid))
                .ok(),
        }
    }

    /// Whether the component checks its configuration at load
    /// (`validate-config`).
    pub(crate) fn validates_config(&self) -> bool {
        self.config.is_some()
    }

    /// Calls `validate-config` with `config` (JSON text) on `instance`:
    /// `Ok(None)` if it is not exported, `Ok(Some(Err(why)))` if the guard
    /// refuses the configuration.
    pub(crate) async fn validate_config(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
        config: &str,
    ) -> wasmtime::Result<Option<Result<(), String>>> {
        let Some(export) = &self.config else {
            return Ok(None);
        };
        let config = config.to_string();
        match export {
            ConfigExport::Now(e) => {
                let guest = e.load(&mut *store, instance)?;
                guest.call_validate_config(store, &config).await.map(Some)
            }
            ConfigExport::Mid(e) => {
                let guest = e.load(&mut *store, instance)?;
                guest.call_validate_config(store, &config).await.map(Some)
            }
        }
    }

    /// Whether the `observe` export (lifecycle events) is there.
    pub(crate) fn observes(&self) -> bool {
        self.observe.is_some()
    }

    /// Calls `subscriptions` on `instance`: the lifecycle hooks the guard
    /// observes (none when it does not export `observe`).
    pub(crate) async fn subscriptions(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Hooks> {
        let Some(export) = &self.observe else {
            return Ok(Hooks::NONE);
        };
        let guest = export.load(&mut *store, instance)?;
        guest.call_subscriptions(store).await.map(hooks_of)
    }

    /// Whether `seam` is exported.
    pub(crate) fn has(&self, seam: Seam) -> bool {
        match seam {
            Seam::Routing => self.routing.is_some(),
            Seam::Rewrite => self.rewrite.is_some(),
            Seam::Steering => self.steering.is_some(),
            Seam::Result => self.result.is_some(),
            Seam::Response => self.response.is_some(),
        }
    }

    /// Loads every exported seam's function on `instance`, checking its
    /// type; the error names the seam.
    pub(crate) fn check(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> Result<(), (&'static str, wasmtime::Error)> {
        fn check<H: Hook>(
            exports: &Exports,
            store: &mut Store<Sandbox>,
            instance: &Instance,
        ) -> Result<(), (&'static str, wasmtime::Error)> {
            match H::export(exports) {
                Some(export) => H::load(export, store, instance)
                    .map(drop)
                    .map_err(|e| (H::EXPORT, e)),
                None => Ok(()),
            }
        }
        check::<RoutingHook>(self, store, instance)?;
        check::<RewriteHook>(self, store, instance)?;
        check::<SteeringHook>(self, store, instance)?;
        check::<ResultHook>(self, store, instance)?;
        check::<ResponseHook>(self, store, instance)?;
        match &self.observe {
            Some(export) => export
                .load(store, instance)
                .map(drop)
                .map_err(|e| (ObserveHook::EXPORT, e)),
            None => Ok(()),
        }
    }
}

impl Hook for RoutingHook {
    const EXPORT: &'static str = "routing";
    /// The event and the tools visible so far (the chain's narrowing).
    type Input<'a> = (&'a ToolRoutingDecisionEvent, &'a [String]);
    type Event = types::RoutingEvent;
    type Export =
        Versioned<routing::GuestIndices, v0_2::routing::GuestIndices, v0_1::routing::GuestIndices>;
    type Guest = Versioned<routing::Guest, v0_2::routing::Guest, v0_1::routing::Guest>;
    type Returned = Option<Vec<String>>;
    /// The tools to keep, or `None`: no opinion.
    type Reply = Option<Vec<String>>;

    fn export(exports: &Exports) -> Option<&Self::Export> {
        exports.routing.as_ref()
    }

    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        load_versioned!(export, &mut *store, instance)
    }

    /// Shows the guard the visible tools, each with its description when
    /// the event has one.
    fn lower((event, visible): Self::Input<'_>, state: &str) -> Self::Event {
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

    async fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> wasmtime::Result<Self::Returned> {
        call_versioned!(guest, call_narrow, store, event)
    }

    fn run_id(event: &Self::Event) -> &str {
        &event.run_id
    }

    fn largest_string(returned: &Self::Returned) -> usize {
        returned.iter().flatten().map(String::len).sum()
    }

    fn lift(returned: Self::Returned) -> Self::Reply {
        returned
    }
}

impl Hook for RewriteHook {
    const EXPORT: &'static str = "rewrite";
    /// The event and the call `tool_name(args)` the guard sees (the
    /// chain's rewrite so far, or the event's own call).
    type Input<'a> = (&'a ToolCallDispatchEvent, &'a str, &'a Map<String, Value>);
    type Event = types::DispatchEvent;
    type Export =
        Versioned<rewrite::GuestIndices, v0_2::rewrite::GuestIndices, v0_1::rewrite::GuestIndices>;
    type Guest = Versioned<rewrite::Guest, v0_2::rewrite::Guest, v0_1::rewrite::Guest>;
    type Returned = Option<types::Rewrite>;
    /// `None`: no rewrite; `Some(Err(why))`: a rewrite whose args are not a
    /// JSON object.
    type Reply = Option<Result<Rewrite, String>>;

    fn export(exports: &Exports) -> Option<&Self::Export> {
        exports.rewrite.as_ref()
    }

    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        load_versioned!(export, &mut *store, instance)
    }

    fn lower((event, tool_name, args): Self::Input<'_>, state: &str) -> Self::Event {
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

    async fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> wasmtime::Result<Self::Returned> {
        call_versioned!(guest, call_dispatch, store, event)
    }

    fn run_id(event: &Self::Event) -> &str {
        &event.run_id
    }

    fn largest_string(returned: &Self::Returned) -> usize {
        returned
            .as_ref()
            .map_or(0, |r| r.tool_name.len().max(r.args.len()))
    }

    /// Parses the args: they must be a JSON object.
    fn lift(returned: Self::Returned) -> Self::Reply {
        returned.map(|r| match serde_json::from_str::<Value>(&r.args) {
            Ok(Value::Object(args)) => Ok(Rewrite {
                tool_name: r.tool_name,
                args,
            }),
            Ok(_) => Err("rewrite args are JSON but not an object; dropped".into()),
            Err(e) => Err(format!("rewrite args are not valid JSON ({e}); dropped")),
        })
    }
}

impl Hook for SteeringHook {
    const EXPORT: &'static str = "steering";
    type Input<'a> = &'a BeforeToolCallEvent;
    type Event = types::BeforeToolCallEvent;
    type Export = Versioned<
        steering::GuestIndices,
        v0_2::steering::GuestIndices,
        v0_1::steering::GuestIndices,
    >;
    type Guest = Versioned<steering::Guest, v0_2::steering::Guest, v0_1::steering::Guest>;
    type Returned = types::Verdict;
    /// `None`: proceed; a skip's absent `is_error` is `true`, as in
    /// symfonic's `result.get("is_error", True)`.
    type Reply = Option<Skip>;

    fn export(exports: &Exports) -> Option<&Self::Export> {
        exports.steering.as_ref()
    }

    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        load_versioned!(export, &mut *store, instance)
    }

    fn lower(event: Self::Input<'_>, state: &str) -> Self::Event {
        types::BeforeToolCallEvent {
            run_id: event.run_id.clone(),
            tool_name: event.tool_name.clone(),
            call_id: event.call_id.clone(),
            args: Value::Object(event.args.clone()).to_string(),
            state: state.to_string(),
        }
    }

    async fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> wasmtime::Result<Self::Returned> {
        call_versioned!(guest, call_before_tool_call, store, event)
    }

    fn run_id(event: &Self::Event) -> &str {
        &event.run_id
    }

    fn largest_string(returned: &Self::Returned) -> usize {
        match returned {
            types::Verdict::Proceed => 0,
            types::Verdict::Skip(s) => s.content.len(),
        }
    }

    fn lift(returned: Self::Returned) -> Self::Reply {
        match returned {
            types::Verdict::Proceed => None,
            types::Verdict::Skip(s) => Some(Skip {
                content: s.content,
                is_error: s.is_error.unwrap_or(true),
            }),
        }
    }
}

impl Hook for ResultHook {
    const EXPORT: &'static str = "result";
    type Input<'a> = &'a ToolResultCallbackEvent;
    type Event = types::ToolResultEvent;
    type Export =
        Versioned<result::GuestIndices, v0_2::result::GuestIndices, v0_1::result::GuestIndices>;
    type Guest = Versioned<result::Guest, v0_2::result::Guest, v0_1::result::Guest>;
    type Returned = ();
    type Reply = ();

    fn export(exports: &Exports) -> Option<&Self::Export> {
        exports.result.as_ref()
    }

    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        load_versioned!(export, &mut *store, instance)
    }

    fn lower(event: Self::Input<'_>, state: &str) -> Self::Event {
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

    async fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> wasmtime::Result<Self::Returned> {
        call_versioned!(guest, call_on_result, store, event)
    }

    fn run_id(event: &Self::Event) -> &str {
        &event.run_id
    }

    fn largest_string((): &Self::Returned) -> usize {
        0
    }

    fn lift((): Self::Returned) -> Self::Reply {}
}

impl Hook for ResponseHook {
    const EXPORT: &'static str = "response";
    /// The event and the answer as it stands (the previous guard's output,
    /// or the event's `original_content`).
    type Input<'a> = (&'a ResponseRenderEvent, &'a str);
    type Event = types::ResponseEvent;
    type Export = response::GuestIndices;
    type Guest = response::Guest;
    type Returned = Option<String>;
    /// The answer to show instead, or `None`: keep it.
    type Reply = Option<String>;

    fn export(exports: &Exports) -> Option<&Self::Export> {
        exports.response.as_ref()
    }

    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        export.load(store, instance)
    }

    fn lower((event, content): Self::Input<'_>, state: &str) -> Self::Event {
        types::ResponseEvent {
            run_id: event.run_id.clone(),
            iteration_index: event.iteration_index,
            model: event.model.clone(),
            node_name: event.node_name.clone(),
            original_content: event.original_content.clone(),
            content: content.to_string(),
            state: state.to_string(),
        }
    }

    async fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> wasmtime::Result<Self::Returned> {
        guest.call_render(store, event).await
    }

    fn run_id(event: &Self::Event) -> &str {
        &event.run_id
    }

    fn largest_string(returned: &Self::Returned) -> usize {
        returned.as_ref().map_or(0, String::len)
    }

    fn lift(returned: Self::Returned) -> Self::Reply {
        returned
    }
}

impl Hook for ObserveHook {
    // Not a seam: lifecycle events are observed beside the seams; a
    // fault's log line names the hook instead.
    const EXPORT: &'static str = "observe";
    type Input<'a> = &'a LifecycleEvent;
    type Event = observe::LifecycleEvent;
    type Export = observe::GuestIndices;
    type Guest = observe::Guest;
    type Returned = ();
    type Reply = ();

    fn export(exports: &Exports) -> Option<&Self::Export> {
        exports.observe.as_ref()
    }

    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        export.load(store, instance)
    }

    fn lower(event: Self::Input<'_>, _state: &str) -> Self::Event {
        lower_lifecycle(event)
    }

    async fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> wasmtime::Result<Self::Returned> {
        guest.call_observe(store, event).await
    }

    fn run_id(event: &Self::Event) -> &str {
        lifecycle_run_id(event)
    }

    fn largest_string((): &Self::Returned) -> usize {
        0
    }

    fn lift((): Self::Returned) -> Self::Reply {}
}

/// A lifecycle event lowered into the `observe` interface's variant.
fn lower_lifecycle(event: &LifecycleEvent) -> observe::LifecycleEvent {
    match event {
        LifecycleEvent::AgentStart(e) => {
            observe::LifecycleEvent::AgentStart(observe::AgentStartEvent {
                query: e.query.clone(),
                run_id: e.run_id.clone(),
            })
        }
        LifecycleEvent::AgentEnd(e) => observe::LifecycleEvent::AgentEnd(observe::AgentEndEvent {
            run_id: e.run_id.clone(),
            final_response: e.final_response.clone(),
            duration_ms: e.duration_ms,
            node_count: e.node_count,
        }),
        LifecycleEvent::NodeStart(e) => {
            observe::LifecycleEvent::NodeStart(observe::NodeStartEvent {
                node_name: e.node_name.clone(),
                run_id: e.run_id.clone(),
            })
        }
        LifecycleEvent::NodeEnd(e) => observe::LifecycleEvent::NodeEnd(observe::NodeEndEvent {
            node_name: e.node_name.clone(),
            run_id: e.run_id.clone(),
            duration_ms: e.duration_ms,
        }),
        LifecycleEvent::NodeError(e) => {
            observe::LifecycleEvent::NodeError(observe::NodeErrorEvent {
                node_name: e.node_name.clone(),
                run_id: e.run_id.clone(),
                error: e.error.clone(),
                error_type: e.error_type.clone(),
            })
        }
        LifecycleEvent::LlmStart(e) => observe::LifecycleEvent::LlmStart(observe::LlmStartEvent {
            model: e.model.clone(),
            messages: Value::Array(e.messages.clone()).to_string(),
            run_id: e.run_id.clone(),
            system_prompt: e.system_prompt.clone(),
            node_name: e.node_name.clone(),
            turn_index: e.turn_index,
        }),
        LifecycleEvent::LlmPreCall(e) => {
            observe::LifecycleEvent::LlmPreCall(observe::LlmPreCallEvent {
                model: e.model.clone(),
                messages: Value::Array(e.messages.clone()).to_string(),
                tools: Value::Array(e.tools.clone()).to_string(),
                run_id: e.run_id.clone(),
                invocation_params: Value::Object(e.invocation_params.clone()).to_string(),
                node_name: e.node_name.clone(),
            })
        }
        LifecycleEvent::LlmEnd(e) => observe::LifecycleEvent::LlmEnd(observe::LlmEndEvent {
            model: e.model.clone(),
            output: e.output.clone(),
            usage: Value::Object(e.usage.clone()).to_string(),
            run_id: e.run_id.clone(),
            node_name: e.node_name.clone(),
            pricing_unknown: e.pricing_unknown,
            duration_ms: e.duration_ms,
            started_at_utc: e.started_at_utc.clone(),
            iteration_index: e.iteration_index,
            turn_index: e.turn_index,
        }),
        LifecycleEvent::TokenComposition(e) => {
            observe::LifecycleEvent::TokenComposition(observe::TokenCompositionEvent {
                system_prompt_tokens: e.system_prompt_tokens,
                tool_definitions_tokens: e.tool_definitions_tokens,
                conversation_history_tokens: e.conversation_history_tokens,
                memory_context_tokens: e.memory_context_tokens,
                run_id: e.run_id.clone(),
            })
        }
        LifecycleEvent::UserCorrection(e) => {
            observe::LifecycleEvent::UserCorrection(observe::UserCorrectionEvent {
                turn_id: e.turn_id.clone(),
                original_response: e.original_response.clone(),
                correction_text: e.correction_text.clone(),
                activation_log: Value::Object(e.activation_log.clone()).to_string(),
                tenant_id: e.tenant_id.clone(),
                scope: e.scope.to_string(),
            })
        }
        LifecycleEvent::ProcedureSelection(e) => {
            observe::LifecycleEvent::ProcedureSelection(observe::ProcedureSelectionEvent {
                procedure_id: e.procedure_id.clone(),
                action_tool: e.action_tool.clone(),
                pre_tool: e.pre_tool.clone(),
                force_mode: e.force_mode.clone(),
                candidate_count: e.candidate_count,
            })
        }
        LifecycleEvent::ReactLoopEnd(e) => {
            observe::LifecycleEvent::ReactLoopEnd(observe::ReactLoopEndEvent {
                run_id: e.run_id.clone(),
                iteration_index: e.iteration_index,
                content_type: e.content_type.clone(),
                has_tool_calls: e.has_tool_calls,
                tool_call_count: e.tool_call_count,
                termination_reason: e.termination_reason.clone(),
            })
        }
        LifecycleEvent::FabricationDetected(e) => {
            observe::LifecycleEvent::FabricationDetected(observe::FabricationDetectedEvent {
                run_id: e.run_id.clone(),
                mode: e.mode.clone(),
                action_taken: e.action_taken.clone(),
                findings: Value::Array(e.findings.clone()).to_string(),
                refuse_threshold: e.refuse_threshold,
                max_finding_confidence: e.max_finding_confidence,
                original_draft_preview: e.original_draft_preview.clone(),
                replacement_preview: e.replacement_preview.clone(),
                preview_truncated: e.preview_truncated,
            })
        }
    }
}

/// The run a lowered lifecycle event belongs to (`""` when it has none).
fn lifecycle_run_id(event: &observe::LifecycleEvent) -> &str {
    match event {
        observe::LifecycleEvent::AgentStart(e) => &e.run_id,
        observe::LifecycleEvent::AgentEnd(e) => &e.run_id,
        observe::LifecycleEvent::NodeStart(e) => &e.run_id,
        observe::LifecycleEvent::NodeEnd(e) => &e.run_id,
        observe::LifecycleEvent::NodeError(e) => &e.run_id,
        observe::LifecycleEvent::LlmStart(e) => &e.run_id,
        observe::LifecycleEvent::LlmPreCall(e) => &e.run_id,
        observe::LifecycleEvent::LlmEnd(e) => &e.run_id,
        observe::LifecycleEvent::TokenComposition(e) => &e.run_id,
        observe::LifecycleEvent::UserCorrection(_) => "",
        observe::LifecycleEvent::ProcedureSelection(_) => "",
        observe::LifecycleEvent::ReactLoopEnd(e) => &e.run_id,
        observe::LifecycleEvent::FabricationDetected(e) => &e.run_id,
    }
}

/// The hooks a guard's `subscriptions` answer names.
pub(crate) fn hooks_of(kinds: observe::EventKinds) -> Hooks {
    [
        (observe::EventKinds::AGENT_START, LifecycleHook::AgentStart),
        (observe::EventKinds::AGENT_END, LifecycleHook::AgentEnd),
        (observe::EventKinds::NODE_START, LifecycleHook::NodeStart),
        (observe::EventKinds::NODE_END, LifecycleHook::NodeEnd),
        (observe::EventKinds::NODE_ERROR, LifecycleHook::NodeError),
        (observe::EventKinds::LLM_START, LifecycleHook::LlmStart),
        (observe::EventKinds::LLM_PRE_CALL, LifecycleHook::LlmPreCall),
        (observe::EventKinds::LLM_END, LifecycleHook::LlmEnd),
        (
            observe::EventKinds::TOKEN_COMPOSITION,
            LifecycleHook::TokenComposition,
        ),
        (
            observe::EventKinds::USER_CORRECTION,
            LifecycleHook::UserCorrection,
        ),
        (
            observe::EventKinds::PROCEDURE_SELECTION,
            LifecycleHook::ProcedureSelection,
        ),
        (
            observe::EventKinds::REACT_LOOP_END,
            LifecycleHook::ReactLoopEnd,
        ),
        (
            observe::EventKinds::FABRICATION_DETECTED,
            LifecycleHook::FabricationDetected,
        ),
    ]
    .into_iter()
    .filter(|&(flag, _)| kinds & flag == flag)
    .map(|(_, hook)| hook)
    .collect()
}
