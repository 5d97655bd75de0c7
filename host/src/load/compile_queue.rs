//! The compile queue: which waiting compile runs next, and when a tenant
//! waits even with a slot free.
//!
//! Compiles run [`LoadLimits::compile_jobs`](crate::load::registry::LoadLimits)
//! at a time. Each directory's compiles wait in a queue of their own; when a
//! slot frees, the global directory's (the operator's) go first, then the
//! tenants' in turn, the tenant served least recently first: a tenant that
//! just compiled goes behind every other tenant waiting, however much it
//! asks for. Two tenants replacing compile bombs so can keep a third one's
//! compile waiting at most for one compile already running (bounded by the
//! compile time limit), not for their next ones.
//!
//! Each compile is charged to its tenant: the CPU time it used (the compile
//! child's user and system time; the wall-clock time of an in-process
//! compile). A tenant that used its budget
//! ([`LoadLimits::tenant_compile_cpu`](crate::load::registry::LoadLimits), per
//! minute) waits until its compiles of the last minute are back under it,
//! even with a slot free, so bombs cost the machine at most that much CPU
//! per tenant. A compile is never cut for the budget (the time and memory
//! bounds do that): it is charged when it ends, and the tenant's next one
//! waits. The global directory is not charged. Each time a tenant starts
//! waiting for its budget one line is logged; [`CompileStats`] counts
//! (`toolgate list` prints them).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::oneshot;

use crate::error::Error;
use crate::load::loader::ScopeKey;

/// The window a tenant's compile CPU budget is counted over.
const WINDOW: Duration = Duration::from_secs(60);

/// Compiles waiting and running, by directory.
pub(crate) struct CompileQueue {
    jobs: usize,
    budget: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    /// Numbers the compiles in the order they asked.
    asked: u64,
    /// Numbers the compiles in the order they got a slot.
    served: u64,
    scopes: HashMap<ScopeKey, Scope>,
    /// When a thread waiting to dispatch again (a tenant back under its
    /// budget) wakes up.
    wake_at: Option<Instant>,
}

#[derive(Default)]
struct Scope {
    /// Its compiles waiting, in the order they asked.
    waiting: VecDeque<(u64, oneshot::Sender<CompileSlot>)>,
    /// When it last got a slot (`State::served`; 0: never).
    last_served: u64,
    /// What its compiles of the last [`WINDOW`] cost, when each ended.
    spent: VecDeque<(Instant, Duration)>,
    /// Whether it is waiting for its budget now (and was logged).
    over_budget: bool,
    stats: ScopeCompileStats,
}

impl Scope {
    fn expire(&mut self, now: Instant) {
        while self
            .spent
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= WINDOW)
        {
            self.spent.pop_front();
        }
    }

    fn spent(&self) -> Duration {
        self.spent.iter().map(|(_, d)| *d).sum()
    }

    /// When it is back under `budget`: its oldest charges leave the
    /// window one by one.
    fn under_budget_at(&self, budget: Duration) -> Option<Instant> {
        let mut left = self.spent();
        for (at, d) in &self.spent {
            left = left.saturating_sub(*d);
            if left < budget {
                return Some(*at + WINDOW);
            }
        }
        None
    }
}

/// Compile counts of one directory (the global one, or a tenant's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ScopeCompileStats {
    /// Compiles started.
    pub compiles: u64,
    /// Compiles waiting for a slot now.
    pub waiting: usize,
    /// CPU time its compiles used, in milliseconds.
    pub cpu_ms: u64,
    /// CPU time its compiles that ended in the last minute used, in
    /// milliseconds: what its budget is checked against.
    pub cpu_ms_last_minute: u64,
    /// Whether its compiles wait now because it used its budget.
    pub over_budget: bool,
    /// How many times its compiles started waiting for its budget.
    pub budget_waits: u64,
}

/// What the compile queue is doing, and each directory's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CompileStats {
    /// Compiles that may run at once.
    pub jobs: usize,
    /// Compiles running now.
    pub running: usize,
    /// Compiles waiting now.
    pub waiting: usize,
    /// CPU time a tenant's compiles may use per minute, in milliseconds
    /// (0: no budget).
    pub tenant_cpu_ms_per_minute: u64,
    /// The global directory's counts.
    pub global: ScopeCompileStats,
    /// Each tenant's counts (tenants that ever asked to compile).
    pub tenants: BTreeMap<String, ScopeCompileStats>,
}

/// A slot of the compile queue: held while one compile runs, given back
/// when dropped (charging the compile's cost to its directory).
pub(crate) struct CompileSlot {
    queue: Arc<CompileQueue>,
    key: ScopeKey,
    started: Instant,
    /// The CPU time to charge, once known (else the time held).
    cpu: Option<Duration>,
    /// Whether dropping it gives a slot back (not when it never left the
    /// queue).
    held: bool,
}

impl CompileSlot {
    /// Records what the compile cost: charged when the slot is dropped.
    pub(crate) fn charge(&mut self, cpu: Duration) {
        self.cpu = Some(cpu);
    }
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let cost = self.cpu.unwrap_or_else(|| self.started.elapsed());
        let queue = Arc::clone(&self.queue);
        let mut state = queue.lock();
        state.running = state.running.saturating_sub(1);
        let scope = state.scopes.entry(self.key.clone()).or_default();
        scope.stats.cpu_ms = scope
            .stats
            .cpu_ms
            .saturating_add(u64::try_from(cost.as_millis()).unwrap_or(u64::MAX));
        if matches!(self.key, ScopeKey::Tenant(_)) {
            scope.spent.push_back((Instant::now(), cost));
        }
        queue.dispatch(&mut state);
    }
}

impl CompileQueue {
    /// A queue running `jobs` compiles at once (at least one), each tenant
    /// allowed `budget` of compile CPU per minute (zero: no budget).
    pub(crate) fn new(jobs: usize, budget: Duration) -> Arc<CompileQueue> {
        Arc::new(CompileQueue {
            jobs: jobs.max(1),
            budget,
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot for a compile of directory `key`, in its turn.
    pub(crate) async fn acquire(self: &Arc<Self>, key: &ScopeKey) -> Result<CompileSlot, Error> {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            state.asked += 1;
            let asked = state.asked;
            state
                .scopes
                .entry(key.clone())
                .or_default()
                .waiting
                .push_back((asked, tx));
            self.dispatch(&mut state);
        }
        // Dropped while waiting (the reload gave up): the sender sees it
        // closed and the slot goes to the next.
        rx.await
            .map_err(|_| Error::Engine("the compile queue is closed".into()))
    }

    /// Gives free slots to the compiles whose turn it is.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        let now = Instant::now();
        while state.running < self.jobs {
            let mut next: Option<((bool, u64, u64), ScopeKey)> = None;
            let mut wake: Option<Instant> = None;
            for (key, scope) in &mut state.scopes {
                scope.waiting.retain(|(_, tx)| !tx.is_closed());
                scope.expire(now);
                scope.stats.cpu_ms_last_minute =
                    u64::try_from(scope.spent().as_millis()).unwrap_or(u64::MAX);
                let Some((asked, _)) = scope.waiting.front() else {
                    scope.over_budget = false;
                    continue;
                };
                let tenant = match key {
                    ScopeKey::Global => None,
                    ScopeKey::Tenant(t) => Some(t),
                };
                if let Some(tenant) = tenant
                    && !self.budget.is_zero()
                    && scope.spent() >= self.budget
                {
                    if !scope.over_budget {
                        scope.over_budget = true;
                        scope.stats.budget_waits += 1;
                        tracing::warn!(
                            tenant = %tenant,
                            cpu_ms_last_minute = scope.stats.cpu_ms_last_minute,
                            budget_ms = self.budget.as_millis(),
                            "compile waits: the tenant's compiles used its compile CPU budget \
                             in the last minute"
                        );
                    }
                    if let Some(at) = scope.under_budget_at(self.budget) {
                        wake = Some(wake.map_or(at, |w| w.min(at)));
                    }
                    continue;
                }
                scope.over_budget = false;
                let rank = (tenant.is_some(), scope.last_served, *asked);
                if next.as_ref().is_none_or(|(best, _)| rank < *best) {
                    next = Some((rank, key.clone()));
                }
            }
            let Some((_, key)) = next else {
                if let Some(at) = wake {
                    self.wake_at(state, at);
                }
                return;
            };
            state.served += 1;
            let served = state.served;
            let Some(scope) = state.scopes.get_mut(&key) else {
                return;
            };
            let Some((_, tx)) = scope.waiting.pop_front() else {
                return;
            };
            scope.last_served = served;
            scope.stats.compiles += 1;
            state.running += 1;
            let slot = CompileSlot {
                queue: Arc::clone(self),
                key,
                started: now,
                cpu: None,
                held: true,
            };
            if let Err(mut slot) = tx.send(slot) {
                // The waiter just left: the slot was never taken.
                slot.held = false;
                state.running -= 1;
            }
        }
    }

    /// Dispatches again at `at` (a tenant back under its budget), unless a
    /// wake-up at or before then is already set.
    fn wake_at(self: &Arc<Self>, state: &mut State, at: Instant) {
        if state.wake_at.is_some_and(|w| w <= at && w > Instant::now()) {
            return;
        }
        state.wake_at = Some(at);
        let queue = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("toolgate-compile-budget".into())
            .spawn(move || {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                if let Some(queue) = queue.upgrade() {
                    let mut state = queue.lock();
                    if state.wake_at == Some(at) {
                        state.wake_at = None;
                    }
                    queue.dispatch(&mut state);
                }
            });
        if let Err(e) = spawned {
            // The next compile to end or to ask dispatches instead.
            state.wake_at = None;
            tracing::warn!("cannot start the compile budget's timer: {e}");
        }
    }

    /// Counts so far.
    pub(crate) fn stats(&self) -> CompileStats {
        let now = Instant::now();
        let mut state = self.lock();
        let mut stats = CompileStats {
            jobs: self.jobs,
            running: state.running,
            tenant_cpu_ms_per_minute: u64::try_from(self.budget.as_millis()).unwrap_or(u64::MAX),
            ..CompileStats::default()
        };
        for (key, scope) in &mut state.scopes {
            scope.waiting.retain(|(_, tx)| !tx.is_closed());
            scope.expire(now);
            let mut s = scope.stats.clone();
            s.waiting = scope.waiting.len();
            s.cpu_ms_last_minute = u64::try_from(scope.spent().as_millis()).unwrap_or(u64::MAX);
            s.over_budget = scope.over_budget;
            stats.waiting += s.waiting;
            match key {
                ScopeKey::Global => stats.global = s,
                ScopeKey::Tenant(t) => {
                    stats.tenants.insert(t.clone(), s);
                }
            }
        }
        stats
    }
}
