//! Turns on the CPU for guard calls that run long.
//!
//! A running guest is interrupted at every epoch tick (1 ms by default) by
//! its store's deadline callback. A call that has burnt [`LONG_FUEL`] or
//! is still running at its [`LONG_TICKS`]th tick — far past a well-behaved
//! guard's whole budget — is a *long call*, and from then on it runs only
//! while it holds a turn in the host-wide [`LongLane`]: at most [`EngineConfig::long_lane`] long calls
//! run at once, whoever they belong to. At every tick a long call gives its
//! turn back and queues for the next one, so long calls take turns slice by
//! slice.
//!
//! Turns are fair between accounts, not between calls: before queueing for
//! the lane a long call takes its account's own turn (one per account), so
//! each account has at most one call in the lane's queue and a tenant with
//! many spinning guards gets no more of the lane than a tenant with one.
//!
//! What this buys: calls that finish within a tick (nearly every guard)
//! never wait for a turn, and however many guests spin, they hold at most
//! `long_lane` of the executor's threads; the rest serve everyone else.
//! A long call waiting for its turn is still on its wall-clock deadline —
//! under contention it gets less CPU before it, which is the point.
//!
//! [`EngineConfig::long_lane`]: crate::EngineConfig::long_lane

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::UpdateDeadline;

/// Fuel after which a call is long: about a millisecond of straight-line
/// guest code, several times what a compiled guard spends per call (see
/// BENCHMARKS.md). Counted in fuel rather than ticks so that a quick call
/// that was merely kept waiting by a busy host never waits for a turn too.
pub const LONG_FUEL: u64 = 2_000_000;

/// Ticks after which a call is long whatever its fuel: a guest that spends
/// its time in work fuel does not count (filling memory, page faults, host
/// calls).
pub const LONG_TICKS: u32 = 5;

/// The host-wide lane long calls take turns in.
#[derive(Debug)]
pub struct LongLane {
    width: u32,
    turns: Arc<Semaphore>,
    waiting: AtomicU32,
}

/// What the lane is doing now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LaneUsage {
    /// Long calls holding a turn now.
    pub running: u32,
    /// Long calls queued for a turn now (for their account's or the lane's).
    pub waiting: u32,
    /// The most long calls that may run at once.
    pub width: u32,
}

impl LongLane {
    /// A lane where `width` (at least 1) long calls run at once.
    pub fn new(width: u32) -> Arc<LongLane> {
        let width = width.max(1);
        Arc::new(LongLane {
            width,
            turns: Arc::new(Semaphore::new(width as usize)),
            waiting: AtomicU32::new(0),
        })
    }

    /// What the lane is doing now.
    pub fn usage(&self) -> LaneUsage {
        let free = u32::try_from(self.turns.available_permits()).unwrap_or(u32::MAX);
        LaneUsage {
            running: self.width.saturating_sub(free),
            waiting: self.waiting.load(Ordering::Relaxed),
            width: self.width,
        }
    }
}

/// One account's place in the lane: at most one of its long calls queues
/// for (or holds) a lane turn at a time.
#[derive(Debug)]
pub struct AccountTurn(Arc<Semaphore>);

impl Default for AccountTurn {
    fn default() -> Self {
        AccountTurn(Arc::new(Semaphore::new(1)))
    }
}

/// The turns one long call holds for its current slice.
struct Held {
    _account: Option<OwnedSemaphorePermit>,
    _lane: OwnedSemaphorePermit,
}

/// The deadline callback's state for one call: its wall-clock deadline,
/// its fuel and ticks so far, and the turn it holds.
pub(crate) struct Ticks {
    deadline: Option<Instant>,
    fuel: u64,
    ticks: u32,
    lane: Option<(Arc<LongLane>, Option<Arc<Semaphore>>)>,
    held: Arc<Mutex<Option<Held>>>,
}

impl Ticks {
    /// A call due by `deadline` (`None`: never) that starts with `fuel`,
    /// taking turns in `lane` as `account` (no lane: it only yields at each
    /// tick).
    pub(crate) fn new(
        deadline: Option<Instant>,
        fuel: u64,
        lane: Option<(&Arc<LongLane>, Option<&AccountTurn>)>,
    ) -> Ticks {
        Ticks {
            deadline,
            fuel,
            ticks: 0,
            lane: lane.map(|(lane, account)| (Arc::clone(lane), account.map(|a| Arc::clone(&a.0)))),
            held: Arc::default(),
        }
    }

    /// What the call does at this tick, with `fuel_left`: trap once past
    /// its deadline; else yield to the executor and, once it is a long
    /// call, give back its turn and queue for the next one (waiting no
    /// later than its deadline: the tick after that traps it).
    pub(crate) fn tick(&mut self, fuel_left: u64) -> UpdateDeadline {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return UpdateDeadline::Interrupt;
        }
        self.ticks = self.ticks.saturating_add(1);
        let Some((lane, account)) = &self.lane else {
            return UpdateDeadline::Yield(1);
        };
        if self.fuel.saturating_sub(fuel_left) < LONG_FUEL && self.ticks < LONG_TICKS {
            return UpdateDeadline::Yield(1);
        }
        drop(lock(&self.held).take());
        let (lane, account, held, deadline) = (
            Arc::clone(lane),
            account.clone(),
            Arc::clone(&self.held),
            self.deadline,
        );
        UpdateDeadline::YieldCustom(
            1,
            Box::pin(async move {
                let _waiting = Waiting::start(&lane);
                let turn = async {
                    let account = match account {
                        Some(a) => Some(a.acquire_owned().await.ok()?),
                        None => None,
                    };
                    let lane = Arc::clone(&lane.turns).acquire_owned().await.ok()?;
                    Some(Held {
                        _account: account,
                        _lane: lane,
                    })
                };
                let turn = match deadline {
                    Some(d) => tokio::time::timeout_at(d.into(), turn).await.ok().flatten(),
                    None => turn.await,
                };
                *lock(&held) = turn;
                // Whoever gave the turn back woke this call into its
                // thread's next slot (tokio's LIFO slot); yielding puts it
                // behind the work already queued, as the slice boundary
                // it is.
                tokio::task::yield_now().await;
            }),
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts a call as waiting for as long as it lives.
struct Waiting<'a>(&'a LongLane);

impl<'a> Waiting<'a> {
    fn start(lane: &'a LongLane) -> Self {
        lane.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(lane)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
