//! One loaded guard: its compiled component, the seams it exports, its
//! limits, and a single hook call on a fresh store.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use wasmtime::Store;
use wasmtime::component::{Component, Instance, InstancePre};

use crate::bindings::{result, rewrite, routing, steering, types};
use crate::engine::Engine;
use crate::error::Error;
use crate::event::Seam;
use crate::fault::Fault;
use crate::limits::Limits;
use crate::prepared::{Prepared, Ready};
use crate::quarantine::{Health, Quarantine, QuarantinePolicy};
use crate::sandbox::Sandbox;
use crate::shares::Account;
use crate::turns::{AccountTurn, LongLane, Ticks};

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
    /// Instances kept made ahead of need (see [`crate::prepared`]); 0:
    /// none. Default: 0.
    pub prepared: u32,
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
            prepared: DEFAULT_PREPARED,
        }
    }
}

/// Instances a plugin keeps prepared unless its spec says otherwise: none
/// (measured on a 2-core machine: no gain at light load, where a call's
/// cost is a cold cache rather than its instantiation; BENCHMARKS.md).
pub const DEFAULT_PREPARED: u32 = 0;

/// The most instances a manifest may ask to keep prepared.
pub const MAX_PREPARED: u32 = 8;

/// The typed export lookups of each seam the component exports.
#[derive(Clone, Default)]
struct SeamIndices {
    routing: Option<routing::GuestIndices>,
    rewrite: Option<rewrite::GuestIndices>,
    steering: Option<steering::GuestIndices>,
    result: Option<result::GuestIndices>,
}

/// A loaded, linked guard, ready to be instantiated once per call.
///
/// A plugin loaded on its own runs every call it is given (no account, no
/// quarantine); a [`Registry`](crate::Registry) charges each call to the
/// caller's share and quarantines a guard that keeps faulting.
#[derive(Clone)]
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
    /// The share each call is charged to; `None`: only the engine's pool.
    account: Option<Arc<Account>>,
    /// Shared by every copy of this plugin.
    quarantine: Arc<Quarantine>,
    /// Instances made ahead of need; shared by every copy of this plugin.
    prepared: Arc<Prepared>,
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
        .map_err(|source| Error::Task {
            what: "compile",
            source,
        })??;
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
            account: None,
            quarantine: Arc::new(Quarantine::new(QuarantinePolicy::off())),
            prepared: Arc::new(Prepared::new(
                usize::try_from(spec.prepared.min(MAX_PREPARED)).unwrap_or(0),
                Arc::clone(engine.prepared_slots()),
            )),
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
        plugin.refill();
        Ok(plugin)
    }

    async fn probe(&self, cap: Option<Duration>) -> Result<(), Error> {
        let path = &self.path;
        {
            let (mut store, _) = self.store()?;
            if let Some(cap) = cap {
                arm_deadline(
                    &mut store,
                    self.limits.timeout.min(cap),
                    Some((self.engine.long_lane(), None)),
                );
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

    /// Whether it is quarantined, and its recent faults.
    pub fn health(&self) -> Health {
        self.quarantine.health()
    }

    /// Sets when this plugin (and every copy of it) is quarantined. A
    /// plugin loaded on its own has quarantine off.
    pub fn set_quarantine(&self, policy: QuarantinePolicy) {
        self.quarantine.set_policy(policy);
    }

    /// The account its calls are charged to, if any.
    pub fn account(&self) -> Option<&Arc<Account>> {
        self.account.as_ref()
    }

    /// A copy of this plugin whose calls are charged to `account`; it
    /// shares this plugin's quarantine.
    pub fn charged_to(&self, account: Arc<Account>) -> Plugin {
        Plugin {
            account: Some(account),
            ..self.clone()
        }
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

    fn store(&self) -> Result<(Store<Sandbox>, Arc<AtomicBool>), Error> {
        let sandbox = Sandbox::new(self.name.clone(), self.config.clone(), &self.limits);
        let mut store = Store::new(self.engine.wasmtime(), sandbox);
        store.limiter(|s| &mut s.limiter);
        store
            .fuel_async_yield_interval(Some(FUEL_FLUSH_INTERVAL))
            .and_then(|()| store.set_fuel(self.limits.fuel))
            .map_err(|e| Error::Engine(format!("{e:#}")))?;
        store.set_hostcall_fuel(crate::sandbox::hostcall_data_budget(&self.limits));
        let long = self.arm(&mut store);
        Ok((store, long))
    }

    /// Gives a call on `store` its deadline from now, taking turns as its
    /// account; the flag is set once the call is long.
    fn arm(&self, store: &mut Store<Sandbox>) -> Arc<AtomicBool> {
        let turn = self.account.as_ref().map(|a| a.turn());
        arm_deadline(
            store,
            self.limits.timeout,
            Some((self.engine.long_lane(), turn)),
        )
    }

    /// Makes instances ahead of need until `prepared` wait, on a task of
    /// the current runtime (none outside one), one each time no call of
    /// the plugin started for [`crate::prepared::IDLE`]: while calls keep
    /// coming the task only looks again each period. One refill at a time
    /// per plugin; nothing at all for a plugin that keeps none.
    fn refill(&self) {
        if !self.prepared.start_refill() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.prepared.refilled();
            return;
        };
        let plugin = self.clone();
        rt.spawn(async move {
            loop {
                let made_all = plugin.fill_while_idle().await;
                plugin.prepared.refilled();
                // A call that took an instance while this task was ending
                // saw a refill running and started none: go on for it. A
                // plugin whose instance could not be made is not retried.
                if !made_all || !plugin.prepared.start_refill() {
                    break;
                }
            }
        });
    }

    /// Makes instances whenever the plugin has been idle for
    /// [`crate::prepared::IDLE`], until `prepared` wait (or the engine has
    /// no room): `true`. `false` when one could not be made.
    async fn fill_while_idle(&self) -> bool {
        loop {
            let seen = self.prepared.calls();
            tokio::time::sleep(crate::prepared::IDLE).await;
            if self.prepared.calls() != seen {
                continue;
            }
            let Some(slot) = self.prepared.slot() else {
                return true;
            };
            match self.prepare(slot).await {
                Some(ready) => self.prepared.put(ready),
                // The call that needs it instantiates afresh and meets the
                // fault itself.
                None => return false,
            }
        }
    }

    /// One instance made ahead of need in `slot`, if it starts and its
    /// start-up memory fits in what prepared instances may hold.
    async fn prepare(&self, mut slot: crate::prepared::Slot) -> Option<Ready> {
        let (mut store, _) = self.store().ok()?;
        let instance = self.pre.instantiate_async(&mut store).await.ok()?;
        slot.hold(store.data().limiter.memory_used() as u64)
            .then_some(Ready {
                store,
                instance,
                slot,
            })
    }

    /// Drops the instances made ahead of need (they are made again as
    /// calls take them).
    pub fn discard_prepared(&self) {
        self.prepared.discard();
    }

    /// One call on a brand-new store and instance; the store is dropped
    /// afterwards whatever happened, so a trap can never poison a later call.
    ///
    /// A quarantined plugin is not run (`quarantined`); otherwise the call
    /// first takes its instance and memory from its account (or faults with
    /// `share-exhausted`), and gives them back after its store is dropped,
    /// so its pool slot is free before another call can be admitted.
    ///
    /// Each call is a `debug` span `guard` (plugin, digest, seam, account;
    /// then outcome, fault, fuel, micros).
    async fn invoke<R: ReturnSize>(&self, seam: Seam, f: impl GuestCall<R>) -> Called<R> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "guard",
            plugin = %self.name,
            digest = %self.digest.get(..12).unwrap_or(&self.digest),
            %seam,
            account = self.account.as_ref().map_or("-", |a| a.name()),
            fault = tracing::field::Empty,
            fuel = tracing::field::Empty,
            micros = tracing::field::Empty,
        );
        let called = self.invoke_unspanned(f).instrument(span.clone()).await;
        if let Err((fault, _)) = &called.result {
            span.record("fault", tracing::field::display(fault));
        }
        span.record("fuel", called.fuel_used);
        span.record("micros", called.micros);
        called
    }

    async fn invoke_unspanned<R: ReturnSize>(&self, f: impl GuestCall<R>) -> Called<R> {
        let start = Instant::now();
        let elapsed = || u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let ticket = match self.quarantine.admit() {
            Ok(ticket) => ticket,
            Err(probe_in) => {
                return Called {
                    result: Err((
                        Fault::Quarantined,
                        format!(
                            "quarantined after repeated faults; not run (next probe in {} ms)",
                            probe_in.as_millis()
                        ),
                    )),
                    fuel_used: 0,
                    micros: 0,
                };
            }
        };
        let admission = match &self.account {
            None => None,
            Some(account) => match account.admit(self.limits.memory_bytes).await {
                Ok(admission) => Some(admission),
                Err(why) => {
                    return Called {
                        result: Err((Fault::ShareExhausted, why)),
                        fuel_used: 0,
                        micros: elapsed(),
                    };
                }
            },
        };
        let taken = self.prepared.take();
        self.refill();
        let (store, long, instance, slot) = match taken {
            Some(Ready {
                mut store,
                instance,
                slot,
            }) => {
                let long = self.arm(&mut store);
                (store, long, Some(instance), Some(slot))
            }
            None => match self.store() {
                Ok((store, long)) => (store, long, None, None),
                Err(e) => {
                    return Called {
                        result: Err((Fault::Instantiate, e.to_string())),
                        fuel_used: 0,
                        micros: 0,
                    };
                }
            },
        };
        // Instantiating and calling, as one future that owns the store: it
        // moves to the long lane's threads if it runs long (turns.rs),
        // taking the guard call's span with it.
        let pre = self.pre.clone();
        let call = Box::pin(tracing::Instrument::in_current_span(async move {
            let mut store = store;
            let instance = match instance {
                Some(instance) => instance,
                None => match pre.instantiate_async(&mut store).await {
                    Ok(instance) => instance,
                    Err(e) => return (store, Err((e, false))),
                },
            };
            let (store, called) = f(store, instance).await;
            (store, called.map_err(|e| (e, true)))
        }));
        let Some((store, called)) = self.engine.long_lane().run(&long, call).await else {
            return Called {
                result: Err((Fault::Deadline, "the host is shutting down".into())),
                fuel_used: 0,
                micros: elapsed(),
            };
        };
        let result = match called {
            Err((e, false)) => Err((Fault::classify(&e, false), root_cause(&e))),
            Err((e, true)) if crate::fault::is_hostcall_data_exhausted(&e) => {
                let fault = Fault::classify(&e, true);
                let budget = crate::sandbox::hostcall_data_budget(&self.limits);
                let what = if fault == Fault::HostBudget {
                    "passed a host import"
                } else {
                    "returned"
                };
                Err((
                    fault,
                    format!(
                        "{what} more than {budget} bytes in one crossing (refused before \
                         copying; max_return_bytes is {})",
                        self.limits.max_return_bytes
                    ),
                ))
            }
            Err((e, true)) => Err((Fault::classify(&e, true), root_cause(&e))),
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
        };
        let micros = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let fuel_used = self
            .limits
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        store.data().flush_output();
        // The pool slot is free before the share is given back.
        if store.data().limiter.memory_used() > crate::reaper::BIG {
            crate::reaper::drop_later((store, slot, admission));
        } else {
            drop(store);
            drop(slot);
            drop(admission);
        }
        self.quarantine
            .record(&self.name, ticket, result.as_ref().err().map(|(f, _)| *f));
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
        let idx = self.seams.routing.clone()?;
        let event = event.clone();
        Some(
            self.invoke(Seam::Routing, move |mut store, instance| {
                Box::pin(async move {
                    let called = async {
                        let guest = idx.load(&mut store, &instance)?;
                        guest.call_narrow(&mut store, &event).await
                    }
                    .await;
                    (store, called)
                })
            })
            .await,
        )
    }

    pub(crate) async fn rewrite(
        &self,
        event: &types::DispatchEvent,
    ) -> Option<Called<Option<types::Rewrite>>> {
        let idx = self.seams.rewrite.clone()?;
        let event = event.clone();
        Some(
            self.invoke(Seam::Rewrite, move |mut store, instance| {
                Box::pin(async move {
                    let called = async {
                        let guest = idx.load(&mut store, &instance)?;
                        guest.call_dispatch(&mut store, &event).await
                    }
                    .await;
                    (store, called)
                })
            })
            .await,
        )
    }

    pub(crate) async fn steering(
        &self,
        event: &types::BeforeToolCallEvent,
    ) -> Option<Called<types::Verdict>> {
        let idx = self.seams.steering.clone()?;
        let event = event.clone();
        Some(
            self.invoke(Seam::Steering, move |mut store, instance| {
                Box::pin(async move {
                    let called = async {
                        let guest = idx.load(&mut store, &instance)?;
                        guest.call_before_tool_call(&mut store, &event).await
                    }
                    .await;
                    (store, called)
                })
            })
            .await,
        )
    }

    pub(crate) async fn result(&self, event: &types::ToolResultEvent) -> Option<Called<()>> {
        let idx = self.seams.result.clone()?;
        let event = event.clone();
        Some(
            self.invoke(Seam::Result, move |mut store, instance| {
                Box::pin(async move {
                    let called = async {
                        let guest = idx.load(&mut store, &instance)?;
                        guest.call_on_result(&mut store, &event).await
                    }
                    .await;
                    (store, called)
                })
            })
            .await,
        )
    }
}

impl Plugin {
    /// A store and an instance for calls made one after another on the same
    /// instance: a snapshot's warm-up, a reused-instance measurement. Never
    /// used to serve.
    pub(crate) async fn instantiate_for_reuse(&self) -> Result<(Store<Sandbox>, Instance), Error> {
        let (mut store, _) = self.store()?;
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| Error::Start {
                path: self.path.clone(),
                fault: Fault::classify(&e, false),
                message: root_cause(&e),
            })?;
        Ok((store, instance))
    }

    /// Calls the seam of `event` on `instance`, discarding the reply;
    /// `Ok(false)` if the plugin does not export that seam.
    async fn call_on(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
        event: &crate::event::Event,
        state: &str,
    ) -> wasmtime::Result<bool> {
        use crate::event::Event;
        match event {
            Event::Routing(e) => {
                if let Some(i) = &self.seams.routing {
                    let wit = crate::wit::routing(e, &e.narrowed_tool_names, state);
                    let guest = i.load(&mut *store, instance)?;
                    guest.call_narrow(&mut *store, &wit).await?;
                    return Ok(true);
                }
            }
            Event::Rewrite(e) => {
                if let Some(i) = &self.seams.rewrite {
                    let wit = crate::wit::dispatch(e, &e.tool_name, &e.args, state);
                    let guest = i.load(&mut *store, instance)?;
                    guest.call_dispatch(&mut *store, &wit).await?;
                    return Ok(true);
                }
            }
            Event::Steering(e) => {
                if let Some(i) = &self.seams.steering {
                    let wit = crate::wit::before_tool_call(e, state);
                    let guest = i.load(&mut *store, instance)?;
                    guest.call_before_tool_call(&mut *store, &wit).await?;
                    return Ok(true);
                }
            }
            Event::Result(e) => {
                if let Some(i) = &self.seams.result {
                    let wit = crate::wit::tool_result(e, state);
                    let guest = i.load(&mut *store, instance)?;
                    guest.call_on_result(&mut *store, &wit).await?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// One more call on a kept instance, with fuel and the deadline reset.
    pub(crate) async fn call_reused(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
        event: &crate::event::Event,
        state: &Value,
    ) -> Result<bool, Fault> {
        store
            .set_fuel(self.limits.fuel)
            .map_err(|_| Fault::Instantiate)?;
        store.data_mut().refill(&self.limits);
        arm_deadline(store, self.limits.timeout, None);
        self.call_on(store, instance, event, &state.to_string())
            .await
            .map_err(|e| Fault::classify(&e, true))
    }

    /// One instance, after the `events` (each with the hook's state) were
    /// made on it in order — the state a snapshot captures. Events for a
    /// seam the plugin does not export are skipped. A fault is an error
    /// naming the call, its seam and the fault.
    pub(crate) async fn warm_up(
        &self,
        events: &[(crate::event::Event, Value)],
    ) -> Result<(Store<Sandbox>, Instance), Error> {
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
        let (mut store, _) = self.store()?;
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(failed("start".into(), true))?;
        for (n, (event, state)) in events.iter().enumerate() {
            let what = format!("warm-up call {} ({})", n + 1, event.seam());
            self.call_on(&mut store, &instance, event, &state.to_string())
                .await
                .map_err(failed(what, false))?;
        }
        // What follows is the host reading the instance's state (a
        // snapshot copies whole memories): not guest data, so not held to a
        // guest call's hostcall data budget.
        store.set_hostcall_fuel(usize::MAX);
        Ok((store, instance))
    }
}

/// One guest call: given the store and the instance, a future (owning
/// both, so it may move to the long lane's threads) that calls the export
/// and hands the store back with the result.
trait GuestCall<R>:
    FnOnce(
        Store<Sandbox>,
        Instance,
    ) -> Pin<Box<dyn Future<Output = (Store<Sandbox>, wasmtime::Result<R>)> + Send>>
    + Send
    + 'static
{
}

impl<R, F> GuestCall<R> for F where
    F: FnOnce(
            Store<Sandbox>,
            Instance,
        )
            -> Pin<Box<dyn Future<Output = (Store<Sandbox>, wasmtime::Result<R>)> + Send>>
        + Send
        + 'static
{
}

/// How much fuel a running guest may burn before its fuel counter is
/// written back to the store, where the host reads `fuel_used`.
///
/// Compiled code keeps the counter in a register and stores it only at
/// calls, returns and when a slice of fuel runs out; a trap raised in
/// between (the epoch deadline, a failed `memory.grow`) would otherwise
/// leave the store holding the count from the guest's last call — a few
/// hundred units for a loop that spun for its whole deadline. Handing the
/// fuel out in slices of this size (each slice's end is also a yield to
/// the executor) bounds that error to one slice.
const FUEL_FLUSH_INTERVAL: u64 = 1_000_000;

/// Gives a call `timeout` of wall-clock time from now.
///
/// At every epoch tick the guest is still running, it yields to the async
/// executor (so a busy guest never holds a tokio worker for its whole
/// deadline and other calls on the same thread make progress) and, once
/// the deadline has passed, traps with `Trap::Interrupt` (a `deadline`
/// fault). The deadline is checked on a tick, so it overshoots by at most
/// one tick. With a `lane`, a long call takes turns in it (see
/// [`crate::turns`]). Call it after the store's fuel is set.
fn arm_deadline(
    store: &mut Store<Sandbox>,
    timeout: Duration,
    lane: Option<(&Arc<LongLane>, Option<&AccountTurn>)>,
) -> Arc<AtomicBool> {
    // A timeout too large to add to now never expires.
    let fuel = store.get_fuel().unwrap_or(0);
    let mut ticks = Ticks::new(Instant::now().checked_add(timeout), fuel, lane);
    let long = ticks.long();
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |store| Ok(ticks.tick(store.get_fuel().unwrap_or(0))));
    long
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
pub(crate) trait ReturnSize: Send + 'static {
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
