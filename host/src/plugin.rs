//! One loaded guard: its compiled component, the seams it exports, its
//! limits, and a single hook call on a fresh store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Instance, InstancePre};
use wasmtime::{Store, UpdateDeadline};

use crate::bindings::{result, rewrite, routing, steering, types};
use crate::engine::Engine;
use crate::error::Error;
use crate::event::Seam;
use crate::fault::Fault;
use crate::limits::Limits;
use crate::sandbox::Sandbox;

/// What a fault in this plugin means for the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Fail open (default): log, count, and go on as if the guard returned
    /// nothing — like a Python handler that raised.
    #[default]
    Skip,
    /// Fail closed: at the steering seam the call is refused with a fixed,
    /// labelled message; at the routing seam no tool stays visible. Rewrite
    /// and result faults are logged and skipped either way.
    Deny,
}

/// How to load one plugin.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// The plugin's name in logs, traces and metrics.
    pub name: String,
    /// The component file.
    pub path: PathBuf,
    /// Limits for each call.
    pub limits: Limits,
    /// Configuration handed to the guard (`host.config`), a JSON object.
    pub config: Value,
    /// What a fault means.
    pub on_error: OnError,
}

impl PluginSpec {
    /// A spec for `path` with default limits, no config and fail-open: the
    /// name is the file's stem.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        PluginSpec {
            name,
            path,
            limits: Limits::default(),
            config: Value::Object(Default::default()),
            on_error: OnError::Skip,
        }
    }
}

/// The typed export lookups of each seam the component exports.
#[derive(Default)]
struct SeamIndices {
    routing: Option<routing::GuestIndices>,
    rewrite: Option<rewrite::GuestIndices>,
    steering: Option<steering::GuestIndices>,
    result: Option<result::GuestIndices>,
}

/// A loaded, linked guard, ready to be instantiated once per call.
pub struct Plugin {
    name: Arc<str>,
    path: PathBuf,
    digest: String,
    limits: Limits,
    config: Arc<str>,
    on_error: OnError,
    engine: Engine,
    pre: InstancePre<Sandbox>,
    seams: SeamIndices,
}

/// The result of one guard call: what it returned or why it faulted, and
/// what it cost.
#[derive(Debug)]
pub(crate) struct Called<R> {
    pub(crate) result: Result<R, (Fault, String)>,
    pub(crate) fuel_used: u64,
    pub(crate) micros: u64,
}

impl Plugin {
    /// Reads, compiles, links and probes the component at `spec.path`.
    /// Compilation runs on a blocking thread.
    pub async fn load(engine: &Engine, spec: PluginSpec) -> Result<Plugin, Error> {
        let (e, path) = (engine.clone(), spec.path.clone());
        let (component, digest) = tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(&path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
            Ok::<_, Error>((compile(&e, &path, &bytes)?, digest(&bytes)))
        })
        .await
        .map_err(|e| Error::Engine(format!("compile task failed: {e}")))??;
        Plugin::from_component(engine, spec, component, digest).await
    }

    /// Links an already compiled component (e.g. from the compiled cache)
    /// and probes it: one instantiation and a type check of every exported
    /// seam, so a wrong contract is refused now rather than on every call.
    pub async fn from_component(
        engine: &Engine,
        spec: PluginSpec,
        component: Component,
        digest: String,
    ) -> Result<Plugin, Error> {
        Plugin::from_component_probed(engine, spec, component, digest, None).await
    }

    /// Like [`Plugin::from_component`], with the load probe's deadline
    /// capped at `probe_timeout` (when given): a start function that spins
    /// costs a reload at most that long, whatever the plugin's own
    /// `timeout` says.
    pub async fn from_component_probed(
        engine: &Engine,
        spec: PluginSpec,
        component: Component,
        digest: String,
        probe_timeout: Option<Duration>,
    ) -> Result<Plugin, Error> {
        let path = spec.path;
        if spec.limits.memory_bytes > engine.config().max_memory_bytes {
            return Err(Error::Limits {
                path,
                message: format!(
                    "memory limit {} bytes exceeds the engine's maximum {} bytes",
                    spec.limits.memory_bytes,
                    engine.config().max_memory_bytes
                ),
            });
        }
        let pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| Error::Link {
                path: path.clone(),
                message: format!("{e:#}"),
            })?;
        let seams = SeamIndices {
            routing: routing::GuestIndices::new(&pre).ok(),
            rewrite: rewrite::GuestIndices::new(&pre).ok(),
            steering: steering::GuestIndices::new(&pre).ok(),
            result: result::GuestIndices::new(&pre).ok(),
        };
        let plugin = Plugin {
            name: spec.name.into(),
            path,
            digest,
            limits: spec.limits,
            config: spec.config.to_string().into(),
            on_error: spec.on_error,
            engine: engine.clone(),
            pre,
            seams,
        };
        if plugin.seams().is_empty() {
            let exports = component
                .component_type()
                .exports(engine.wasmtime())
                .map(|(name, _)| name.to_string())
                .collect::<Vec<_>>();
            return Err(Error::NoSeams {
                path: plugin.path,
                exports: if exports.is_empty() {
                    "nothing".into()
                } else {
                    exports.join(", ")
                },
            });
        }
        plugin.probe(probe_timeout).await?;
        Ok(plugin)
    }

    async fn probe(&self, cap: Option<Duration>) -> Result<(), Error> {
        let path = &self.path;
        {
            let mut store = self.store()?;
            if let Some(cap) = cap {
                arm_deadline(&mut store, self.limits.timeout.min(cap));
            }
            let instance =
                self.pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(|e| Error::Start {
                        path: path.clone(),
                        fault: Fault::classify(&e, false),
                        message: root_cause(&e),
                    })?;
            let contract = |seam: Seam| {
                move |e: wasmtime::Error| Error::Contract {
                    path: path.clone(),
                    seam,
                    message: format!("{e:#}"),
                }
            };
            if let Some(i) = &self.seams.routing {
                i.load(&mut store, &instance)
                    .map_err(contract(Seam::Routing))?;
            }
            if let Some(i) = &self.seams.rewrite {
                i.load(&mut store, &instance)
                    .map_err(contract(Seam::Rewrite))?;
            }
            if let Some(i) = &self.seams.steering {
                i.load(&mut store, &instance)
                    .map_err(contract(Seam::Steering))?;
            }
            if let Some(i) = &self.seams.result {
                i.load(&mut store, &instance)
                    .map_err(contract(Seam::Result))?;
            }
            Ok(())
        }
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The component file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the component's bytes, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The limits each call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What a fault in this plugin means.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// The seams this plugin exports, in firing order.
    pub fn seams(&self) -> Vec<Seam> {
        Seam::ALL
            .into_iter()
            .filter(|&s| self.subscribes(s))
            .collect()
    }

    /// Whether the plugin exports `seam`.
    pub fn subscribes(&self, seam: Seam) -> bool {
        match seam {
            Seam::Routing => self.seams.routing.is_some(),
            Seam::Rewrite => self.seams.rewrite.is_some(),
            Seam::Steering => self.seams.steering.is_some(),
            Seam::Result => self.seams.result.is_some(),
        }
    }

    fn store(&self) -> Result<Store<Sandbox>, Error> {
        let sandbox = Sandbox::new(self.name.clone(), self.config.clone(), &self.limits);
        let mut store = Store::new(self.engine.wasmtime(), sandbox);
        store.limiter(|s| &mut s.limiter);
        store
            .set_fuel(self.limits.fuel)
            .map_err(|e| Error::Engine(format!("{e:#}")))?;
        arm_deadline(&mut store, self.limits.timeout);
        Ok(store)
    }

    /// One call on a brand-new store and instance; the store is dropped
    /// afterwards whatever happened, so a trap can never poison a later call.
    async fn invoke<R: ReturnSize>(
        &self,
        f: impl AsyncFnOnce(&mut Store<Sandbox>, Instance) -> wasmtime::Result<R>,
    ) -> Called<R> {
        let start = Instant::now();
        let mut store = match self.store() {
            Ok(store) => store,
            Err(e) => {
                return Called {
                    result: Err((Fault::Instantiate, e.to_string())),
                    fuel_used: 0,
                    micros: 0,
                };
            }
        };
        let result = match self.pre.instantiate_async(&mut store).await {
            Err(e) => Err((Fault::classify(&e, false), root_cause(&e))),
            Ok(instance) => match f(&mut store, instance).await {
                Err(e) => Err((Fault::classify(&e, true), root_cause(&e))),
                Ok(r) => match r.largest_string() {
                    n if n > self.limits.max_return_bytes => Err((
                        Fault::OversizedReturn,
                        format!(
                            "returned a {n}-byte string; the limit is {}",
                            self.limits.max_return_bytes
                        ),
                    )),
                    _ => Ok(r),
                },
            },
        };
        let micros = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let fuel_used = self
            .limits
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        store.data().flush_output();
        Called {
            result,
            fuel_used,
            micros,
        }
    }

    pub(crate) async fn routing(
        &self,
        event: &types::RoutingEvent,
    ) -> Option<Called<Option<Vec<String>>>> {
        let idx = self.seams.routing.as_ref()?;
        Some(
            self.invoke(async |store, instance| {
                let guest = idx.load(&mut *store, &instance)?;
                guest.call_narrow(&mut *store, event).await
            })
            .await,
        )
    }

    pub(crate) async fn rewrite(
        &self,
        event: &types::DispatchEvent,
    ) -> Option<Called<Option<types::Rewrite>>> {
        let idx = self.seams.rewrite.as_ref()?;
        Some(
            self.invoke(async |store, instance| {
                let guest = idx.load(&mut *store, &instance)?;
                guest.call_dispatch(&mut *store, event).await
            })
            .await,
        )
    }

    pub(crate) async fn steering(
        &self,
        event: &types::BeforeToolCallEvent,
    ) -> Option<Called<types::Verdict>> {
        let idx = self.seams.steering.as_ref()?;
        Some(
            self.invoke(async |store, instance| {
                let guest = idx.load(&mut *store, &instance)?;
                guest.call_before_tool_call(&mut *store, event).await
            })
            .await,
        )
    }

    pub(crate) async fn result(&self, event: &types::ToolResultEvent) -> Option<Called<()>> {
        let idx = self.seams.result.as_ref()?;
        Some(
            self.invoke(async |store, instance| {
                let guest = idx.load(&mut *store, &instance)?;
                guest.call_on_result(&mut *store, event).await
            })
            .await,
        )
    }
}

impl Plugin {
    /// One instance, after the `events` (each with the hook's state) were
    /// made on it in order — the state a snapshot captures. Events for a
    /// seam the plugin does not export are skipped. A fault is an error
    /// naming the call, its seam and the fault.
    pub(crate) async fn warm_up(
        &self,
        events: &[(crate::event::Event, Value)],
    ) -> Result<(Store<Sandbox>, Instance), Error> {
        use crate::event::Event;
        let mut store = self.store()?;
        let failed = |what: String, start: bool| {
            let path = self.path.clone();
            move |e: wasmtime::Error| Error::Snapshot {
                path,
                message: format!(
                    "{what}: {} ({})",
                    root_cause(&e),
                    Fault::classify(&e, !start)
                ),
            }
        };
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(failed("start".into(), true))?;
        for (n, (event, state)) in events.iter().enumerate() {
            let what = format!("warm-up call {} ({})", n + 1, event.seam());
            let fail = || failed(what.clone(), false);
            let state = state.to_string();
            match event {
                Event::Routing(e) => {
                    if let Some(i) = &self.seams.routing {
                        let wit = crate::wit::routing(e, &e.narrowed_tool_names, &state);
                        let guest = i.load(&mut store, &instance).map_err(fail())?;
                        guest.call_narrow(&mut store, &wit).await.map_err(fail())?;
                    }
                }
                Event::Rewrite(e) => {
                    if let Some(i) = &self.seams.rewrite {
                        let wit = crate::wit::dispatch(e, &e.tool_name, &e.args, &state);
                        let guest = i.load(&mut store, &instance).map_err(fail())?;
                        guest
                            .call_dispatch(&mut store, &wit)
                            .await
                            .map_err(fail())?;
                    }
                }
                Event::Steering(e) => {
                    if let Some(i) = &self.seams.steering {
                        let wit = crate::wit::before_tool_call(e, &state);
                        let guest = i.load(&mut store, &instance).map_err(fail())?;
                        guest
                            .call_before_tool_call(&mut store, &wit)
                            .await
                            .map_err(fail())?;
                    }
                }
                Event::Result(e) => {
                    if let Some(i) = &self.seams.result {
                        let wit = crate::wit::tool_result(e, &state);
                        let guest = i.load(&mut store, &instance).map_err(fail())?;
                        guest
                            .call_on_result(&mut store, &wit)
                            .await
                            .map_err(fail())?;
                    }
                }
            }
        }
        Ok((store, instance))
    }
}

/// Gives a call `timeout` of wall-clock time from now.
///
/// At every epoch tick the guest is still running, it yields to the async
/// executor (so a busy guest never holds a tokio worker for its whole
/// deadline and other calls on the same thread make progress) and, once
/// the deadline has passed, traps with `Trap::Interrupt` (a `deadline`
/// fault). The deadline is checked on a tick, so it overshoots by at most
/// one tick.
fn arm_deadline(store: &mut Store<Sandbox>, timeout: Duration) {
    // A timeout too large to add to now never expires.
    let deadline = Instant::now().checked_add(timeout);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if deadline.is_some_and(|d| Instant::now() >= d) {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
}

/// One instance of a plugin kept alive across steering calls.
///
/// toolgate never serves with it: a guest's state survives from one call
/// to the next and a trap poisons the instance for good. It exists to
/// measure what per-call isolation costs (see `BENCHMARKS.md`). Fuel and
/// the deadline are reset before every call.
pub struct ReusedSteering {
    store: Store<Sandbox>,
    guest: steering::Guest,
    fuel: u64,
    timeout: Duration,
}

impl ReusedSteering {
    /// Instantiates `plugin` once; `None` if it does not export steering.
    pub async fn new(plugin: &Plugin) -> Result<Option<Self>, Error> {
        let Some(idx) = &plugin.seams.steering else {
            return Ok(None);
        };
        let mut store = plugin.store()?;
        let fail = |e: wasmtime::Error| Error::Start {
            path: plugin.path.clone(),
            fault: Fault::classify(&e, false),
            message: root_cause(&e),
        };
        let instance = plugin
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(fail)?;
        let guest = idx.load(&mut store, &instance).map_err(fail)?;
        Ok(Some(ReusedSteering {
            store,
            guest,
            fuel: plugin.limits.fuel,
            timeout: plugin.limits.timeout,
        }))
    }

    /// Calls `before-tool-call` with a JSON event; returns whether it skipped.
    pub async fn call(&mut self, event: &crate::event::BeforeToolCallEvent) -> Result<bool, Fault> {
        let wit = types::BeforeToolCallEvent {
            run_id: event.run_id.clone(),
            tool_name: event.tool_name.clone(),
            call_id: event.call_id.clone(),
            args: Value::Object(event.args.clone()).to_string(),
            state: "{}".into(),
        };
        self.store
            .set_fuel(self.fuel)
            .map_err(|_| Fault::Instantiate)?;
        arm_deadline(&mut self.store, self.timeout);
        match self
            .guest
            .call_before_tool_call(&mut self.store, &wit)
            .await
        {
            Ok(types::Verdict::Skip(_)) => Ok(true),
            Ok(types::Verdict::Proceed) => Ok(false),
            Err(e) => Err(Fault::classify(&e, true)),
        }
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("seams", &self.seams())
            .finish_non_exhaustive()
    }
}

/// SHA-256 of `bytes`, as lowercase hex.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compiles component bytes, telling a core module or a non-wasm file apart
/// from a component that fails to validate.
pub fn compile(engine: &Engine, path: &Path, bytes: &[u8]) -> Result<Component, Error> {
    crate::compile::check_header(path, bytes)?;
    Component::from_binary(engine.wasmtime(), bytes).map_err(|e| Error::Compile {
        path: path.into(),
        message: format!("{e:#}"),
    })
}

fn root_cause(e: &wasmtime::Error) -> String {
    e.root_cause().to_string()
}

/// The largest string a guard returned, checked against `max_return_bytes`.
pub(crate) trait ReturnSize {
    fn largest_string(&self) -> usize;
}

impl ReturnSize for () {
    fn largest_string(&self) -> usize {
        0
    }
}

impl ReturnSize for Option<Vec<String>> {
    fn largest_string(&self) -> usize {
        self.iter().flatten().map(String::len).sum()
    }
}

impl ReturnSize for Option<types::Rewrite> {
    fn largest_string(&self) -> usize {
        self.as_ref()
            .map_or(0, |r| r.tool_name.len().max(r.args.len()))
    }
}

impl ReturnSize for types::Verdict {
    fn largest_string(&self) -> usize {
        match self {
            types::Verdict::Proceed => 0,
            types::Verdict::Skip(s) => s.content.len(),
        }
    }
}
