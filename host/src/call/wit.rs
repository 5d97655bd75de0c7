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
    Hook, ResponseHook, ResultHook, RewriteHook, RoutingHook, SteeringHook,
};
use crate::event::{
    BeforeToolCallEvent, ResponseRenderEvent, Rewrite, Seam, Skip, ToolCallDispatchEvent,
    ToolResultCallbackEvent, ToolRoutingDecisionEvent,
};
use crate::runtime::bindings::{
    config, response, result, rewrite, routing, steering, types, v0_1, v0_2,
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
    ) -> Result<(), (Seam, wasmtime::Error)> {
        fn check<H: Hook>(
            exports: &Exports,
            store: &mut Store<Sandbox>,
            instance: &Instance,
        ) -> Result<(), (Seam, wasmtime::Error)> {
            match H::export(exports) {
                Some(export) => H::load(export, store, instance)
                    .map(drop)
                    .map_err(|e| (H::SEAM, e)),
                None => Ok(()),
            }
        }
        check::<RoutingHook>(self, store, instance)?;
        check::<RewriteHook>(self, store, instance)?;
        check::<SteeringHook>(self, store, instance)?;
        check::<ResultHook>(self, store, instance)?;
        check::<ResponseHook>(self, store, instance)
    }
}

impl Hook for RoutingHook {
    const SEAM: Seam = Seam::Routing;
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
    const SEAM: Seam = Seam::Rewrite;
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
    const SEAM: Seam = Seam::Steering;
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
    const SEAM: Seam = Seam::Result;
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
    const SEAM: Seam = Seam::Response;
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
