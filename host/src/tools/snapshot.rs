//! Pre-initialising a guard: run it once, save the warmed-up instance as a
//! new component.
//!
//! Interpreted guests pay their runtime's start-up on every call, because
//! every call gets a fresh instance: Go runs its runtime initialisation,
//! JS faults in its engine's heap. A snapshot ([`wasmtime_wizer`]) is the
//! component's memories and globals after one call of each exported seam
//! with a representative event, written back as data segments: each fresh
//! instance then starts from there. Isolation is unchanged (every call
//! still gets its own instance); what changes is the starting state.
//!
//! What a snapshot does not keep: tables, resource handles (a Go guard
//! cannot write to stdout/stderr afterwards: the runtime's WASI handles
//! were opened during the warm-up) and any host state. Random state is
//! frozen in it, so every call sees the same "random" numbers. Whatever
//! the guard did during the warm-up calls (counters, caches) is in every
//! later call's starting state.

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};
use wasmtime::Store;
use wasmtime::component::{Instance, Lift, WasmList};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

use crate::engine::Engine;
use crate::error::Error;
use crate::event::{
    BeforeToolCallEvent, Event, ToolCallDispatchEvent, ToolInfo, ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
};
use crate::fault::Fault;
use crate::limits::Limits;
use crate::plugin::{self, Plugin, PluginSpec};
use crate::sandbox::Sandbox;

/// Pre-initialises the component `wasm` (read from `path`, which names it
/// in errors): instruments it, makes the `warm_up` calls (each an event and
/// the hook's state; [`default_warm_up`] when in doubt) on one instance, in
/// order, skipping seams it does not export, and returns that instance's
/// state as a new component.
///
/// Each warm-up call runs under the default limits, the instance's whole
/// warm-up under a 10 s deadline, with an empty configuration. A component
/// that is no guard, or whose warm-up faults, is an error naming the file
/// (and the call, its seam and the fault).
pub async fn snapshot(
    engine: &Engine,
    path: &Path,
    wasm: &[u8],
    warm_up: &[(Event, Value)],
) -> Result<Vec<u8>, Error> {
    let fail = |message: String| Error::Snapshot {
        path: path.to_path_buf(),
        message,
    };
    let wizer = Wizer::new();
    let (cx, instrumented) = wizer
        .instrument_component(wasm)
        .map_err(|e| fail(format!("{e:#}")))?;
    // Compiling is CPU-bound: off the async threads, as `Plugin::load` does.
    let component = {
        let (engine, path) = (engine.clone(), path.to_path_buf());
        tokio::task::spawn_blocking(move || plugin::compile(&engine, &path, &instrumented))
            .await
            .map_err(|source| Error::Task {
                what: "compile",
                source,
            })??
    };
    let spec = PluginSpec {
        limits: Limits {
            timeout: Duration::from_secs(10),
            ..Limits::default()
        },
        // A warm-up makes its own instance.
        prepared: crate::prepared::Depth::Fixed(0),
        ..PluginSpec::new(path)
    };
    let guard = Plugin::from_component(engine, spec, component, plugin::digest(wasm)).await?;
    let (mut store, instance) = run_warm_up(&guard, warm_up).await?;
    let mut access = Access {
        store: &mut store,
        instance,
        error: None,
    };
    let snapshot = wizer
        .snapshot_component(&cx, &mut access)
        .await
        .map_err(|e| fail(format!("{e:#}")))?;
    match access.error {
        Some(message) => Err(fail(format!("reading the instance's state: {message}"))),
        None => Ok(snapshot),
    }
}

/// One instance of `guard`, after the `events` (each with the hook's
/// state) were made on it in order — the state a snapshot captures. Events
/// for a seam the guard does not export are skipped. A fault is an error
/// naming the call, its seam and the fault.
async fn run_warm_up(
    guard: &Plugin,
    events: &[(Event, Value)],
) -> Result<(Store<Sandbox>, Instance), Error> {
    let failed = |what: String, start: bool| {
        let path = guard.path().to_path_buf();
        move |e: wasmtime::Error| Error::Snapshot {
            path,
            message: format!(
                "{what}: {} ({})",
                plugin::root_cause(&e),
                Fault::classify(&e, !start)
            ),
        }
    };
    let (mut store, _) = guard.store()?;
    let instance = guard
        .pre
        .instantiate_async(&mut store)
        .await
        .map_err(failed("start".into(), true))?;
    for (n, (event, state)) in events.iter().enumerate() {
        let what = format!("warm-up call {} ({})", n + 1, event.seam());
        guard
            .call_kept(&mut store, &instance, event, &state.to_string())
            .await
            .map_err(failed(what, false))?;
    }
    // What follows is the host reading the instance's state (a snapshot
    // copies whole memories): not guest data, so not held to a guest
    // call's hostcall data budget.
    store.set_hostcall_fuel(usize::MAX);
    Ok((store, instance))
}

/// Reads an instance's state through the accessor functions wizer's
/// instrumentation exported. The trait cannot fail, so the first error is
/// kept and the snapshot refused afterwards.
struct Access<'a> {
    store: &'a mut Store<Sandbox>,
    instance: Instance,
    error: Option<String>,
}

impl Access<'_> {
    async fn call<R>(&mut self, instance: &str, func: &str) -> Option<R>
    where
        R: Lift + Send + Sync + 'static,
    {
        let result = async {
            let (_, outer) = self
                .instance
                .get_export(&mut *self.store, None, instance)
                .ok_or_else(|| format!("no export {instance}"))?;
            let (_, inner) = self
                .instance
                .get_export(&mut *self.store, Some(&outer), func)
                .ok_or_else(|| format!("no export {instance}#{func}"))?;
            let f = self
                .instance
                .get_typed_func::<(), (R,)>(&mut *self.store, inner)
                .map_err(|e| format!("{instance}#{func}: {e:#}"))?;
            let (r,) = f
                .call_async(&mut *self.store, ())
                .await
                .map_err(|e| format!("{instance}#{func}: {e:#}"))?;
            Ok::<_, String>(r)
        }
        .await;
        match result {
            Ok(r) => Some(r),
            Err(e) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }
}

impl ComponentInstanceState for Access<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        match self.call::<WasmList<u8>>(instance, func).await {
            Some(list) => contents(list.as_le_slice(&*self.store)),
            None => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call::<f32>(instance, func)
            .await
            .map(f32::to_bits)
            .unwrap_or_default()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call::<f64>(instance, func)
            .await
            .map(f64::to_bits)
            .unwrap_or_default()
    }
}

/// The warm-up calls used when none are given: one per seam, the SQL
/// example's shapes (`run_query` with a harmless query), empty state, so
/// the paths a typical guard takes are warm. A seam the guard does not
/// export is skipped.
pub fn default_warm_up() -> Vec<(Event, Value)> {
    let run_id = || "toolgate-snapshot".to_string();
    let call_id = || "warm-up".to_string();
    let args = || {
        let mut m = Map::new();
        m.insert(
            "sql".into(),
            Value::String("SELECT count(*) FROM users WHERE day = 1".into()),
        );
        m
    };
    let tools = ["run_query", "search"].map(String::from).to_vec();
    let events = [
        Event::Routing(ToolRoutingDecisionEvent {
            run_id: run_id(),
            mode: "enforce".into(),
            intent_label: "warm-up".into(),
            total_tools: 2,
            narrowed_tool_names: tools.clone(),
            saved_tokens_estimate: 0,
            tools: tools
                .iter()
                .map(|name| ToolInfo {
                    name: name.clone(),
                    description: format!("the {name} tool"),
                })
                .collect(),
            query: Some("how many users signed up today?".into()),
        }),
        Event::Rewrite(ToolCallDispatchEvent {
            run_id: run_id(),
            iteration_index: 0,
            node_name: "react".into(),
            call_id: call_id(),
            tool_name: "run_query".into(),
            args: args(),
            available_tools: tools,
        }),
        Event::Steering(BeforeToolCallEvent {
            run_id: run_id(),
            tool_name: "run_query".into(),
            call_id: call_id(),
            args: args(),
        }),
        Event::Result(ToolResultCallbackEvent {
            run_id: run_id(),
            tool_name: "run_query".into(),
            result: serde_json::json!({"count": 1}),
            call_id: call_id(),
            deferred: false,
            is_error: false,
        }),
    ];
    events
        .into_iter()
        .map(|e| (e, Value::Object(Map::new())))
        .collect()
}
