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

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use wasmtime::Store;
use wasmtime::component::{Component, Instance, Lift, WasmList};
use wasmtime_wizer::{ComponentContext, ComponentInstanceState, Wizer};

use crate::call::guard_call::arm_deadline;
use crate::call::plugin::{self, Plugin, PluginSpec};
use crate::error::Error;
use crate::event::{
    BeforeToolCallEvent, Event, ToolCallDispatchEvent, ToolInfo, ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
};
use crate::fault::Fault;
use crate::runtime::engine::Engine;
use crate::runtime::limits::Limits;
use crate::runtime::sandbox::Sandbox;

/// Pre-initialises the component `wasm` (read from `path`, which names it
/// in errors): instruments it, makes the `warm_up` calls (each an event and
/// the hook's state; [`default_warm_up`] when in doubt) on one instance, in
/// order, skipping seams it does not export, and returns that instance's
/// state as a new component.
///
/// Each warm-up call runs under the default limits, the instance's whole
/// warm-up under a 10 s deadline, with `config` as the plugin's
/// configuration (checked first if the guard exports `validate-config`;
/// a guard that keeps its parsed config in memory keeps this one, so pass
/// the config it will be loaded with). A component
/// that is no guard, or whose warm-up faults, is an error naming the file
/// (and the call, its seam and the fault).
pub async fn snapshot(
    engine: &Engine,
    path: &Path,
    wasm: &[u8],
    warm_up: &[(Event, Value)],
    config: &Value,
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
        prepared: crate::runtime::prepared::Depth::Fixed(0),
        config: config.clone(),
        ..PluginSpec::new(path)
    };
    let guard = Plugin::from_component(engine, spec, component, plugin::digest(wasm)).await?;
    let (mut store, instance) = run_warm_up(&guard, warm_up, None).await?;
    let snapshot = capture(&wizer, &cx, &mut store, instance)
        .await
        .map_err(fail)?;
    Ok(with_marker(snapshot, &warm_up_id(warm_up)))
}

/// One instance of `guard`, after the `events` (each with the hook's
/// state) were made on it in order — the state a snapshot captures. Events
/// for a seam the guard does not export are skipped. A fault is an error
/// naming the call, its seam and the fault.
///
/// With `deadline`, the whole warm-up (start and every call) must end
/// within it, taking turns with long calls in the engine's long lane, and
/// each call gets the plugin's fuel afresh; without, the store is the one
/// of a single call (the plugin's deadline and fuel for all of it).
async fn run_warm_up(
    guard: &Plugin,
    events: &[(Event, Value)],
    deadline: Option<Duration>,
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
    let (mut store, mut progress) = guard.store()?;
    if let Some(deadline) = deadline {
        progress = arm_deadline(&mut store, deadline, Some((guard.engine.long_lane(), None)));
    }
    let instance = guard
        .pre
        .instantiate_async(&mut store)
        .await
        .map_err(failed("start".into(), true))?;
    for (n, (event, state)) in events.iter().enumerate() {
        let what = format!("warm-up call {} ({})", n + 1, event.seam());
        if deadline.is_some() && n > 0 {
            store
                .set_fuel(guard.limits.fuel)
                .map_err(|e| Error::Engine(format!("{e:#}")))?;
        }
        guard
            .call_kept(&mut store, &instance, event, &state.to_string())
            .await
            .map_err(failed(what, false))?;
    }
    // What follows is the host reading the instance's state (a snapshot
    // copies whole memories): not guest data, so not held to a guest
    // call's hostcall data budget.
    store.set_hostcall_fuel(usize::MAX);
    // The store outlives its calls: the lane turn a long one took goes back.
    progress.give_back_turn();
    Ok((store, instance))
}

/// The warmed-up `instance`'s state (read through the accessors `cx`'s
/// instrumentation exported), written back as a component.
async fn capture(
    wizer: &Wizer,
    cx: &ComponentContext<'_>,
    store: &mut Store<Sandbox>,
    instance: Instance,
) -> Result<Vec<u8>, String> {
    let mut access = Access {
        store,
        instance,
        error: None,
    };
    let snapshot = wizer
        .snapshot_component(cx, &mut access)
        .await
        .map_err(|e| format!("{e:#}"))?;
    match access.error {
        Some(message) => Err(format!("reading the instance's state: {message}")),
        None => Ok(snapshot),
    }
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

// Snapshots at load: the manifest's `snapshot = "auto" | true | false`.

/// The custom section a snapshot carries at its top level (written by
/// [`snapshot`] and by a snapshot made at load), holding its warm-up's
/// identity: a component that has it is never snapshotted again.
pub const MARKER: &str = "toolgate-snapshot";

/// What a plugin's `snapshot` key says: whether the host pre-initialises
/// its component when it loads it (see `docs/loading.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotMode {
    /// `"auto"` (the default): only a component whose runtime gains from
    /// a snapshot ([`Inspection::runtime`]: Go and JS guards).
    #[default]
    Auto,
    /// `true`: any component.
    On,
    /// `false`: never.
    Off,
}

/// How a loaded plugin's component relates to a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum SnapshotStatus {
    /// Loaded as its bytes are: `snapshot = false`, `"auto"` for a
    /// component that gains nothing from a snapshot, or loaded outside a
    /// registry.
    #[default]
    Plain,
    /// Its bytes are already a snapshot (`toolgate snapshot`): loaded as
    /// they are.
    Prebuilt,
    /// Pre-initialised when loaded (or found so in the compiled cache).
    Snapshotted,
    /// The warm-up or the snapshot failed: loaded as its bytes are.
    Failed {
        /// Why, naming the warm-up call, its seam and the fault.
        reason: String,
    },
}

/// What a component's custom sections say about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// The runtime found in it that gains from a snapshot: `"Go"` (a
    /// `producers` section naming the language Go, or Go's `go:buildid`
    /// section) or `"JavaScript"` (the language JavaScript, or processed
    /// by ComponentizeJS). `None` for anything else (Rust, Python via
    /// componentize-py, C, ...).
    pub runtime: Option<&'static str>,
    /// Whether it is already a snapshot (`MARKER` at its top level).
    pub snapshot: bool,
}

/// Reads the custom sections of the component `wasm` and of every module
/// and component nested in it. Never fails: what cannot be parsed is
/// left out (such a component fails to compile anyway).
pub fn inspect(wasm: &[u8]) -> Inspection {
    use wasmparser::{KnownCustom, Parser, Payload};
    let mut found = Inspection::default();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else {
            break;
        };
        match payload {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(section) => {
                if section.name() == MARKER && depth == 1 {
                    found.snapshot = true;
                }
                if section.name() == "go:buildid" {
                    found.runtime.get_or_insert("Go");
                }
                if let KnownCustom::Producers(fields) = section.as_known() {
                    for field in fields.into_iter().flatten() {
                        for value in field.values.into_iter().flatten() {
                            let runtime = match (field.name, value.name) {
                                ("language", "Go") => Some("Go"),
                                ("language", "JavaScript") | ("processed-by", "ComponentizeJS") => {
                                    Some("JavaScript")
                                }
                                _ => None,
                            };
                            if let Some(r) = runtime {
                                found.runtime.get_or_insert(r);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    found
}

/// What loading the component `wasm` with `mode` calls for: `None` to
/// warm it up and snapshot it, else the status it loads with as it is.
pub fn plan(mode: SnapshotMode, wasm: &[u8]) -> Option<SnapshotStatus> {
    if mode == SnapshotMode::Off {
        return Some(SnapshotStatus::Plain);
    }
    let found = inspect(wasm);
    if found.snapshot {
        return Some(SnapshotStatus::Prebuilt);
    }
    match (mode, found.runtime) {
        (SnapshotMode::Auto, None) => Some(SnapshotStatus::Plain),
        _ => None,
    }
}

/// The identity of a warm-up: the host's version and the calls, hashed.
/// A snapshot made at load is cached under it, so a new default warm-up
/// (or a new host) makes new snapshots rather than reusing old ones.
pub fn warm_up_id(warm_up: &[(Event, Value)]) -> String {
    let text = format!("toolgate {}\0{warm_up:?}", env!("CARGO_PKG_VERSION"));
    format!("warm-up:{}", plugin::digest(text.as_bytes()))
}

/// The identity of [`default_warm_up`], computed once.
pub fn default_warm_up_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| warm_up_id(&default_warm_up()))
}

/// The compiled cache's digest of the snapshot made at load of the
/// component with SHA-256 `digest`, warmed up with configuration `config`
/// (JSON text) by the default warm-up: what a restart finds it under.
pub fn cache_digest(digest: &str, config: &str) -> String {
    let text = format!(
        "toolgate-auto-snapshot\0{digest}\0{config}\0{}",
        default_warm_up_id()
    );
    plugin::digest(text.as_bytes())
}

/// `wasm` (a component) with a [`MARKER`] custom section holding `id`
/// appended at its top level.
fn with_marker(mut wasm: Vec<u8>, id: &str) -> Vec<u8> {
    fn leb(out: &mut Vec<u8>, mut n: usize) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut payload = Vec::new();
    leb(&mut payload, MARKER.len());
    payload.extend_from_slice(MARKER.as_bytes());
    payload.extend_from_slice(id.as_bytes());
    wasm.push(0);
    leb(&mut wasm, payload.len());
    wasm.extend_from_slice(&payload);
    wasm
}

/// What a registry remembers of the snapshots it made at load: the
/// warm-ups that failed (not tried again while the bytes, configuration
/// and limits stay the same) and how many warm-ups ran.
#[derive(Debug, Default)]
pub(crate) struct AutoSnapshots {
    /// Why a warm-up failed, by [`AutoSnapshots::memo`].
    failures: Mutex<HashMap<String, String>>,
    warm_ups: AtomicU64,
}

impl AutoSnapshots {
    /// The key a warm-up's failure is remembered under.
    pub(crate) fn memo(spec: &PluginSpec, digest: &str) -> String {
        format!("{digest}\0{}\0{:?}", spec.config, spec.limits)
    }

    /// Why the warm-up `memo` failed before, if it did.
    pub(crate) fn failed(&self, memo: &str) -> Option<String> {
        lock(&self.failures).get(memo).cloned()
    }

    /// Remembers that the warm-up `memo` failed, and why.
    pub(crate) fn remember(&self, memo: String, reason: String) {
        lock(&self.failures).insert(memo, reason);
    }

    /// Forgets every failure: the next load tries again.
    pub(crate) fn forget_failures(&self) {
        lock(&self.failures).clear();
    }

    /// Forgets the failures of components whose digest `used` rejects.
    pub(crate) fn retain(&self, used: impl Fn(&str) -> bool) {
        lock(&self.failures).retain(|memo, _| used(memo.split('\0').next().unwrap_or_default()));
    }

    /// Warm-ups run so far (each one a component snapshotted at load, or
    /// a failure).
    pub(crate) fn warm_ups(&self) -> u64 {
        self.warm_ups.load(Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The component `wasm` instrumented for a snapshot: what
/// [`warm_up_at_load`] needs compiled. On a blocking thread.
pub(crate) async fn instrument(wasm: Arc<[u8]>) -> Result<Vec<u8>, String> {
    tokio::task::spawn_blocking(move || {
        Wizer::new()
            .instrument_component(&wasm)
            .map(|(_, instrumented)| instrumented)
            .map_err(|e| format!("cannot instrument it: {e:#}"))
    })
    .await
    .map_err(|e| format!("the instrumenting task failed: {e}"))?
}

/// The bounds of a warm-up at load.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WarmUpBounds {
    /// The whole warm-up (start, every call, reading the state) must end
    /// within this (the load probe's cap).
    pub(crate) deadline: Duration,
    /// The largest snapshot kept, in bytes (the component size cap).
    pub(crate) max_bytes: u64,
}

/// Warms up `instrumented` (the compiled [`instrument`] of `wasm`) with
/// the default warm-up under `spec`'s configuration, memory and fuel, and
/// returns the snapshot, marked. Runs on a blocking thread (never on the
/// threads serving calls), within `bounds`. `Err`: why not, for the log
/// and `toolgate list`.
pub(crate) async fn warm_up_at_load(
    engine: &Engine,
    spec: &PluginSpec,
    wasm: Arc<[u8]>,
    instrumented: Component,
    bounds: WarmUpBounds,
    counter: &AutoSnapshots,
) -> Result<Vec<u8>, String> {
    counter.warm_ups.fetch_add(1, Ordering::Relaxed);
    let handle = tokio::runtime::Handle::current();
    let engine = engine.clone();
    let spec = PluginSpec {
        prepared: crate::runtime::prepared::Depth::Fixed(0),
        ..spec.clone()
    };
    let reason = |e: Error| match e {
        Error::Snapshot { message, .. } => message,
        other => other.to_string(),
    };
    let task = tokio::task::spawn_blocking(move || {
        handle.block_on(async move {
            let wizer = Wizer::new();
            let (cx, _) = wizer
                .instrument_component(&wasm)
                .map_err(|e| format!("cannot instrument it: {e:#}"))?;
            let digest = plugin::digest(&wasm);
            let guard = Plugin::from_component_probed(
                &engine,
                spec,
                instrumented,
                digest,
                Some(bounds.deadline),
                None,
            )
            .await
            .map_err(reason)?;
            let (mut store, instance) =
                run_warm_up(&guard, &default_warm_up(), Some(bounds.deadline))
                    .await
                    .map_err(reason)?;
            let snapshot = capture(&wizer, &cx, &mut store, instance).await?;
            if snapshot.len() as u64 > bounds.max_bytes {
                return Err(format!(
                    "the snapshot is {} MiB, over the component size limit of {} MiB",
                    snapshot.len() >> 20,
                    bounds.max_bytes >> 20
                ));
            }
            Ok(with_marker(snapshot, default_warm_up_id()))
        })
    });
    task.await
        .map_err(|e| format!("the warm-up task failed: {e}"))?
}
