//! One guard call, the same way at every seam: quarantine admits it, its
//! account gives it an instance and memory, it gets a prepared instance or
//! a fresh store, the seam's export is called, a fault is classified by
//! type, fuel and time are measured, and the store is torn down.
//!
//! What differs between seams — the event and reply types and the export
//! to look up — is a [`Hook`], one per seam; the implementations, the only
//! code here that knows the generated WIT types, are in [`crate::call::wit`]. A
//! reply leaves this module lifted into host types.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::Instance;

use crate::call::plugin::{Mode, Plugin, root_cause};
use crate::call::wit::Exports;
use crate::error::Error;
use crate::event::Event;
use crate::fault::Fault;
use crate::runtime::backlog::Spare;
use crate::runtime::http::CallHttp;
use crate::runtime::log_writer::redact::Secrets;
use crate::runtime::prepared::{Ready, Slot};
use crate::runtime::sandbox::Sandbox;
use crate::runtime::state::StateLimits;
use crate::runtime::state::call::CallState;
use crate::runtime::turns::{AccountTurn, LongLane, Progress, Ticks, Unfinished};

/// One seam as a guest exports it: what the chain hands each guard, the
/// guest's event and reply, and the export that takes one to the other.
pub(crate) trait Hook: 'static {
    /// The export's name, the WIT interface's: the seam's (`routing`,
    /// ..., `response`) or `observe`. Logs and contract errors name it.
    const EXPORT: &'static str;
    /// What the chain hands each guard, in host types (the hook's state
    /// goes beside it, as JSON text).
    type Input<'a>;
    /// The event as the guest receives it.
    type Event: Send + Sync;
    /// The seam's typed export lookup, found once at load.
    type Export: Clone + Send + Sync + 'static;
    /// The seam's exported function, loaded on one instance.
    type Guest: Send + Sync;
    /// The reply as the guest returns it.
    type Returned: Send + 'static;
    /// The reply in host types.
    type Reply;

    /// This seam's lookup among a plugin's exports, if it exports the seam.
    fn export(exports: &Exports) -> Option<&Self::Export>;

    /// The seam's function on `instance`, its type checked.
    fn load(
        export: &Self::Export,
        store: &mut Store<Sandbox>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest>;

    /// The guest's event for `input`, with `state` (JSON text).
    fn lower(input: Self::Input<'_>, state: &str) -> Self::Event;

    /// Calls the export.
    fn call(
        guest: &Self::Guest,
        store: &mut Store<Sandbox>,
        event: &Self::Event,
    ) -> impl Future<Output = wasmtime::Result<Self::Returned>> + Send;

    /// The run the event belongs to (its state's run scope).
    fn run_id(event: &Self::Event) -> &str;

    /// The size of the reply that `max_return_bytes` bounds, bytes.
    fn largest_string(returned: &Self::Returned) -> usize;

    /// The reply in host types.
    fn lift(returned: Self::Returned) -> Self::Reply;
}

/// `on_tool_routing_decision`: the tools that stay visible, or nothing.
pub(crate) enum RoutingHook {}
/// `on_tool_call_dispatch`: a replacement call, or nothing.
pub(crate) enum RewriteHook {}
/// `on_before_tool_call`: proceed, or a refusal.
pub(crate) enum SteeringHook {}
/// `on_tool_result`: observes; returns nothing.
pub(crate) enum ResultHook {}
/// `on_response_render`: the answer to show instead, or nothing.
pub(crate) enum ResponseHook {}
/// A lifecycle event (`on_agent_start`, ...): observes; returns nothing.
pub(crate) enum ObserveHook {}

/// An event lowered for the guests of one seam, once, and handed to each
/// guard in turn (shared: a call may move to the long lane's threads),
/// with the call's masked values, cut out of what the guard logs.
pub(crate) struct GuestEvent<H: Hook>(Arc<H::Event>, Option<Arc<Secrets>>);

impl<H: Hook> GuestEvent<H> {
    /// The guest's event for `input`, with `state` (JSON text); the
    /// guard's log lines, stdout and stderr are masked with `secrets`.
    pub(crate) fn new(input: H::Input<'_>, state: &str, secrets: Option<Arc<Secrets>>) -> Self {
        GuestEvent(Arc::new(H::lower(input, state)), secrets)
    }
}

/// A call's store, its progress, and — for a prepared instance — the
/// instance and its pool slot.
type CallStore = (
    Store<Sandbox>,
    Arc<Progress>,
    Option<Instance>,
    Option<Slot>,
);

/// What a call's future holds until it ends: its pool slot and its share.
type Held = (Option<Slot>, Share);

/// What a call holds besides its pool slot: its account's instance and
/// memory, or — a shadow guard's call — spare room no share reserves.
#[derive(Debug)]
enum Share {
    None,
    Account {
        _held: crate::runtime::shares::Admission,
    },
    Spare {
        _held: Spare,
    },
}

/// The result of one guard call: what it returned or why it faulted, and
/// what it cost.
#[derive(Debug)]
pub(crate) struct Called<R> {
    pub(crate) result: Result<R, (Fault, String)>,
    pub(crate) fuel_used: u64,
    pub(crate) micros: u64,
}

impl<R> Called<R> {
    /// A call that did not run (or not to its end) because of `fault`.
    fn not_run(fault: Fault, why: String, micros: u64) -> Self {
        Called {
            result: Err((fault, why)),
            fuel_used: 0,
            micros,
        }
    }

    fn map<S>(self, f: impl FnOnce(R) -> S) -> Called<S> {
        Called {
            result: self.result.map(f),
            fuel_used: self.fuel_used,
            micros: self.micros,
        }
    }
}

impl Plugin {
    /// Calls the seam of `event` (`None` if the plugin does not export
    /// it) on a brand-new store and instance; the store is dropped
    /// afterwards whatever happened, so a trap can never poison a later
    /// call. The reply comes back in host types.
    ///
    /// A quarantined plugin is not run (`quarantined`); otherwise the call
    /// first takes its instance and memory from its account (or faults with
    /// `share-exhausted`), and gives them back after its store is dropped,
    /// so its pool slot is free before another call can be admitted. A
    /// shadow guard's call takes spare room instead — a pool slot and
    /// memory no share reserves — or, finding none, is not run (`capacity`,
    /// its run counted as dropped), never waiting; it takes no lane turn and
    /// runs where it is polled (the shadow threads, after the answer).
    ///
    /// Each call is a `debug` span `guard` (plugin, digest, seam, account;
    /// then outcome, fault, fuel, micros).
    pub(crate) async fn call<H: Hook>(&self, event: &GuestEvent<H>) -> Option<Called<H::Reply>> {
        use tracing::Instrument;
        let export = H::export(&self.exports)?;
        let span = tracing::debug_span!(
            "guard",
            plugin = %self.name,
            digest = %self.digest.get(..12).unwrap_or(&self.digest),
            seam = H::EXPORT,
            account = self.account.as_ref().map_or("-", |a| a.name()),
            fault = tracing::field::Empty,
            fuel = tracing::field::Empty,
            micros = tracing::field::Empty,
        );
        let called = self
            .invoke::<H>(export, &event.0, event.1.clone())
            .instrument(span.clone())
            .await;
        if let Err((fault, _)) = &called.result {
            span.record("fault", tracing::field::display(fault));
        }
        span.record("fuel", called.fuel_used);
        span.record("micros", called.micros);
        Some(called.map(H::lift))
    }

    async fn invoke<H: Hook>(
        &self,
        export: &H::Export,
        event: &Arc<H::Event>,
        secrets: Option<Arc<Secrets>>,
    ) -> Called<H::Returned> {
        let start = Instant::now();
        let elapsed = || u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let ticket = match self.quarantine.admit() {
            Ok(ticket) => ticket,
            Err(probe_in) => {
                let why = format!(
                    "quarantined after repeated faults; not run (next probe in {} ms)",
                    probe_in.as_millis()
                );
                return Called::not_run(Fault::Quarantined, why, 0);
            }
        };
        let shadow = self.mode() == Mode::Shadow;
        let admission = match &self.account {
            _ if shadow => match self.spare_room() {
                Some(spare) => Share::Spare { _held: spare },
                None => {
                    let why = "no spare room (a pool slot and memory no share reserves): \
                               shadow run dropped"
                        .to_string();
                    return Called::not_run(Fault::Capacity, why, elapsed());
                }
            },
            None => Share::None,
            Some(account) => match account.admit(self.limits.memory_bytes).await {
                Ok(admission) => Share::Account { _held: admission },
                Err(why) => return Called::not_run(Fault::ShareExhausted, why, elapsed()),
            },
        };
        let (mut store, progress, instance, slot) = match self.call_store() {
            Ok(taken) => taken,
            Err(e) => return Called::not_run(Fault::Instantiate, e.to_string(), 0),
        };
        store.data_mut().charge_log_to(self.account.clone());
        store.data_mut().mask_log_with(secrets);
        let state = self.uses_state.then(|| {
            Arc::new(CallState::new(
                Arc::clone(self.engine.state()),
                Arc::clone(&self.tenant),
                Arc::clone(&self.name),
                H::run_id(event),
                StateLimits::from(&self.limits),
            ))
        });
        if let Some(state) = &state {
            store.data_mut().attach_state(Arc::clone(state));
        }
        if let Some(outbound) = &self.http {
            store.data_mut().attach_http(CallHttp::new(
                Arc::clone(outbound),
                Arc::clone(&self.name),
                Arc::clone(&self.tenant),
                &self.limits,
            ));
        }
        // Instantiating and calling, as one future that owns the store and
        // what it holds (its pool slot, its share): it moves to the long
        // lane's threads if it runs long (turns/), taking the guard
        // call's span with it, and if given up on there it gives them back
        // only once it is dropped.
        let (pre, export, event) = (self.pre.clone(), export.clone(), Arc::clone(event));
        let held = (slot, admission);
        let call = Box::pin(tracing::Instrument::in_current_span(async move {
            let mut store = store;
            let instance = match instance {
                Some(instance) => instance,
                None => match pre.instantiate_async(&mut store).await {
                    Ok(instance) => instance,
                    Err(e) => return (store, held, Err((e, false))),
                },
            };
            let called = match H::load(&export, &mut store, &instance) {
                Ok(guest) => H::call(&guest, &mut store, &event).await,
                Err(e) => Err(e),
            };
            (store, held, called.map_err(|e| (e, true)))
        }));
        let ran = if shadow {
            Ok(LongLane::run_here(&progress, call).await)
        } else {
            let ran = self
                .engine
                .long_lane()
                .run(&progress, self.habit.expects_long(), call)
                .await;
            self.habit.record(progress.ran_long());
            self.engine.long_lane().record(&progress);
            ran
        };
        let (mut result, fuel_used) = match ran {
            Ok((store, held, called)) => self.settle::<H>(store, held, called, &progress),
            Err(Unfinished::Overdue) => {
                // Its store is still on the lane, to be dropped there.
                progress.give_back_turn();
                (Err(self.starved(&progress)), progress.fuel_burnt())
            }
            Err(Unfinished::ShutDown) => {
                if let Some(state) = &state {
                    let _ = state.end(false).await;
                }
                let why = "the host is shutting down".to_string();
                let mut called = Called::not_run(Fault::Overloaded, why, elapsed());
                called.fuel_used = progress.fuel_burnt();
                return called;
            }
        };
        // The call's state: committed if it returned, given back if not
        // (a commit the store refuses is the call's fault).
        if let Some(state) = &state
            && let Err(refusal) = state.end(result.is_ok()).await
        {
            result = Err((refusal.fault, refusal.message));
        }
        let micros = elapsed();
        self.quarantine
            .record(&self.name, ticket, result.as_ref().err().map(|(f, _)| *f));
        Called {
            result,
            fuel_used,
            micros,
        }
    }

    /// The store a call runs in: a prepared instance's (armed for this
    /// call), or a fresh one to instantiate in.
    fn call_store(&self) -> Result<CallStore, Error> {
        let taken = self.prepared.take();
        self.refill();
        match taken {
            Some(Ready {
                mut store,
                instance,
                slot,
            }) => {
                let progress = self.arm(&mut store);
                Ok((store, progress, Some(instance), Some(slot)))
            }
            None => self
                .store()
                .map(|(store, progress)| (store, progress, None, None)),
        }
    }

    /// What a call that ran to its end gave (its reply, or why it failed:
    /// instantiating, or the call itself), and the fuel it used; its store
    /// and what it held are dropped — a big one on the long lane's
    /// teardown thread.
    fn settle<H: Hook>(
        &self,
        store: Store<Sandbox>,
        (slot, admission): Held,
        called: Result<H::Returned, (wasmtime::Error, bool)>,
        progress: &Arc<Progress>,
    ) -> (Result<H::Returned, (Fault, String)>, u64) {
        let result = match called {
            Err(_) if progress.starved() => Err(self.starved(progress)),
            Err((e, false)) => Err((Fault::classify(&e, false), root_cause(&e))),
            Err((e, true)) => Err(self.classify_call(&e)),
            Ok(returned) => self.check_size::<H>(returned),
        };
        let fuel_used = self
            .limits
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        store.data().flush_output();
        // Dropped in this order: the pool slot is free before the share is
        // given back.
        // A shadow call is on the shadow threads already: its teardown
        // stays there, at their priority.
        let big = store.data().limiter.memory_used() > crate::runtime::turns::BIG
            && self.mode() != Mode::Shadow;
        let remains = (store, slot, admission);
        if big {
            self.engine.long_lane().drop_later(progress, remains);
        } else {
            drop(remains);
        }
        (result, fuel_used)
    }

    /// The fault of a call the host stopped at its wall-clock bound having
    /// run less than its `timeout`: the host's doing.
    fn starved(&self, progress: &Progress) -> (Fault, String) {
        (
            Fault::Overloaded,
            format!(
                "not finished within its wall-clock bound of {} ms, having run {} ms of its \
                 {} ms timeout: the host's cores were busy with other work; stopped",
                self.limits.wall_bound().as_millis(),
                progress.run_time().as_millis(),
                self.limits.timeout.as_millis()
            ),
        )
    }

    /// A guest call's fault, classified by type, with its detail.
    fn classify_call(&self, e: &wasmtime::Error) -> (Fault, String) {
        let fault = Fault::classify(e, true);
        if !crate::fault::is_hostcall_data_exhausted(e) {
            return (fault, root_cause(e));
        }
        let budget = crate::runtime::sandbox::hostcall_data_budget(&self.limits);
        let what = if fault == Fault::HostBudget {
            "passed a host import"
        } else {
            "returned"
        };
        (
            fault,
            format!(
                "{what} more than {budget} bytes in one crossing (refused before \
                 copying; max_return_bytes is {})",
                self.limits.max_return_bytes
            ),
        )
    }

    /// A guest's reply, if no string in it is longer than
    /// `max_return_bytes`.
    fn check_size<H: Hook>(&self, returned: H::Returned) -> Result<H::Returned, (Fault, String)> {
        match H::largest_string(&returned) {
            n if n > self.limits.max_return_bytes => Err((
                Fault::OversizedReturn,
                format!(
                    "returned a {n}-byte string; the limit is {}",
                    self.limits.max_return_bytes
                ),
            )),
            _ => Ok(returned),
        }
    }

    /// Calls the seam of `event` on a kept `instance`, outside the serving
    /// path (a snapshot's warm-up, a reused-instance measurement): no
    /// quarantine, no share, no fresh store; the reply is discarded.
    /// `Ok(false)` if the plugin does not export that seam.
    pub(crate) async fn call_kept(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
        event: &Event,
        state: &str,
    ) -> wasmtime::Result<bool> {
        match event {
            Event::Routing(e) => {
                self.call_kept_at::<RoutingHook>(
                    store,
                    instance,
                    (e, &e.narrowed_tool_names),
                    state,
                )
                .await
            }
            Event::Rewrite(e) => {
                self.call_kept_at::<RewriteHook>(store, instance, (e, &e.tool_name, &e.args), state)
                    .await
            }
            Event::Steering(e) => {
                self.call_kept_at::<SteeringHook>(store, instance, e, state)
                    .await
            }
            Event::Result(e) => {
                self.call_kept_at::<ResultHook>(store, instance, e, state)
                    .await
            }
            Event::Response(e) => {
                self.call_kept_at::<ResponseHook>(store, instance, (e, &e.original_content), state)
                    .await
            }
        }
    }

    async fn call_kept_at<H: Hook>(
        &self,
        store: &mut Store<Sandbox>,
        instance: &Instance,
        input: H::Input<'_>,
        state: &str,
    ) -> wasmtime::Result<bool> {
        let Some(export) = H::export(&self.exports) else {
            return Ok(false);
        };
        let event = H::lower(input, state);
        let guest = H::load(export, store, instance)?;
        H::call(&guest, store, &event).await?;
        Ok(true)
    }

    /// A new store for one call of this plugin: its sandbox, memory
    /// limiter, fuel, host-call budget and deadline, and the call's
    /// [`Progress`].
    pub(crate) fn store(&self) -> Result<(Store<Sandbox>, Arc<Progress>), Error> {
        let sandbox = Sandbox::new(self.name.clone(), self.config.clone(), &self.limits);
        let mut store = Store::new(self.engine.wasmtime(), sandbox);
        store.limiter(|s| &mut s.limiter);
        store
            .fuel_async_yield_interval(Some(FUEL_FLUSH_INTERVAL))
            .and_then(|()| store.set_fuel(self.limits.fuel))
            .map_err(|e| Error::Engine(format!("{e:#}")))?;
        store.set_hostcall_fuel(crate::runtime::sandbox::hostcall_data_budget(&self.limits));
        let long = self.arm(&mut store);
        Ok((store, long))
    }

    /// A new instance of the plugin in `store`; a start-up fault is an
    /// error naming the file.
    pub(crate) async fn start(&self, store: &mut Store<Sandbox>) -> Result<Instance, Error> {
        self.pre
            .instantiate_async(store)
            .await
            .map_err(|e| Error::Start {
                path: self.path.clone(),
                fault: Fault::classify(&e, false),
                message: root_cause(&e),
            })
    }

    /// Gives a call on `store` its deadline from now, taking turns as its
    /// account.
    ///
    /// A shadow guard's call takes no turn (it runs on the shadow threads,
    /// see [`LongLane::after_answer`]), and its run time is not counted
    /// toward its account's use of the CPU.
    fn arm(&self, store: &mut Store<Sandbox>) -> Arc<Progress> {
        let turn = self.account.as_ref().map(|a| a.turn());
        let lane = (self.mode() != Mode::Shadow).then(|| (self.engine.long_lane(), turn));
        arm_deadline(store, self.limits.timeout, lane)
    }

    /// Spare room for one call of this (shadow) plugin, or `None`,
    /// counted as a dropped shadow run.
    fn spare_room(&self) -> Option<Spare> {
        self.engine
            .shadow_backlog()
            .spare(self.engine.prepared_slots(), self.limits.memory_bytes)
    }

    /// Makes instances ahead of need until `prepared` wait, on a task of
    /// the current runtime (none outside one), one each time no call of
    /// the plugin started for [`crate::runtime::prepared::IDLE`]: while calls keep
    /// coming the task only looks again each period. One refill at a time
    /// per plugin; nothing at all for a plugin that keeps none.
    pub(crate) fn refill(&self) {
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
    /// [`crate::runtime::prepared::IDLE`], until `prepared` wait (or the engine has
    /// no room): `true`. `false` when one could not be made.
    async fn fill_while_idle(&self) -> bool {
        loop {
            let seen = self.prepared.calls();
            tokio::time::sleep(crate::runtime::prepared::IDLE).await;
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
    async fn prepare(&self, mut slot: Slot) -> Option<Ready> {
        let (mut store, progress) = self.store().ok()?;
        let instance = self.pre.instantiate_async(&mut store).await.ok();
        // Put aside, it must not keep the lane turn a long start-up took.
        progress.give_back_turn();
        let instance = instance?;
        slot.hold(store.data().limiter.memory_used() as u64)
            .then_some(Ready {
                store,
                instance,
                slot,
            })
    }
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

/// Gives a call `timeout` of run time, and its wall-clock bound from now
/// (see [`crate::runtime::limits::Limits::wall_bound`]).
///
/// At every epoch tick the guest is still running, it yields to the async
/// executor (so a busy guest never holds a tokio worker for its whole
/// deadline and other calls on the same thread make progress) and, once
/// its run time has passed `timeout` — or its wall-clock bound has passed
/// first — traps with `Trap::Interrupt` (a `deadline` fault, or
/// `overloaded`). Both are checked on a tick, so they overshoot by about
/// one tick. With a `lane`, a long call takes turns in it (see
/// [`crate::runtime::turns`]). Call it after the store's fuel is set.
pub(crate) fn arm_deadline(
    store: &mut Store<Sandbox>,
    timeout: Duration,
    lane: Option<(&Arc<LongLane>, Option<&AccountTurn>)>,
) -> Arc<Progress> {
    // A timeout too large to add to now never expires.
    let fuel = store.get_fuel().unwrap_or(0);
    let bound = Instant::now().checked_add(crate::runtime::limits::wall_bound(timeout));
    let mut ticks = Ticks::new(timeout, bound, fuel, lane);
    let progress = ticks.progress();
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |store| Ok(ticks.tick(store.get_fuel().unwrap_or(0))));
    progress
}
