//! Turns on the CPU for guard calls that run long, and how a call's time
//! is measured.
//!
//! One invariant runs through these files — a turn is taken and given
//! back exactly once, whoever ends the call — and it is kept here, in
//! [`LongLane`] (the lanes, their turns, moving a call onto the lane's
//! threads) and `ticks.rs` (the deadline callback taking and giving back
//! turns tick by tick). The others each hold one concern: `clock.rs` (a
//! call's run time), `progress.rs` (what a call shares with its caller),
//! `cpu.rs` (an account's turn and recent CPU use), `habit.rs` (plugins
//! whose calls lately ran long), `priority.rs` (the lane's threads and
//! their priority); `tests.rs` tests them together.
//!
//! **Run time, not waiting time.** A call's `timeout` bounds its *run
//! time*: the time spent inside its own polls, by its thread's CPU clock
//! (see [`RunClock`]) — its guest code, start-up, page faults, host calls —
//! never the time it waited for a core, queued or preempted. Past it the
//! call traps as `deadline`: the guard's doing. A call also has a
//! wall-clock *bound* ([`Limits::wall_bound`]: four times its timeout, at
//! least its timeout plus a second); a call still unfinished then, having
//! run less than its timeout, was starved by the host and is stopped as
//! `overloaded`: the host's doing, never counted toward quarantine, and
//! its request is answered as not decided (see docs/failures.md).
//!
//! **Long calls.** A running guest is interrupted at every epoch tick
//! (1 ms by default) by its store's deadline callback. A call that has
//! burnt [`LONG_FUEL`], or has run for [`LONG_BUSY`] — far past a
//! well-behaved guard's whole budget — is a *long call*, and from then on
//! it runs only while it holds a turn in the host-wide [`LongLane`]: at
//! most [`EngineConfig::long_lane`] long calls run at once on each of the
//! lane's two sets of threads, whoever they belong to. At every tick a long
//! call gives its turn back and queues for the next one, so long calls take
//! turns slice by slice. Turns are fair between accounts, not between
//! calls: before queueing for the lane a long call takes its account's own
//! turn (one per account), so a tenant with many spinning guards gets no
//! more of the lane than a tenant with one.
//!
//! **Two sets of threads, by account.** Long calls run on threads of their
//! own: a call starts on the thread that asked for it; once it is long it
//! moves (between two polls: its fiber goes with it) to the lane's
//! threads. Which ones depends on its account's recent use of the CPU
//! (see [`CpuMeter`]): an account that has used more than an equal part of
//! the guards' recent run time (among the accounts that ran anything) runs
//! its long calls on the *low* threads, at [`EngineConfig::long_lane_priority`]
//! (Linux's `SCHED_IDLE` by default), which get a core only when nothing
//! else wants it — a tenant flooding spinning guards then costs the
//! others' quick calls next to nothing (measured: another tenant's p99 at a
//! fixed rate 1.6–1.9 ms beside such a flood, from 0.8 ms alone; see
//! BENCHMARKS.md). An account within its part runs them on the *fair*
//! threads, at the normal priority: a guard that legitimately needs a few
//! milliseconds for a big event still gets the CPU while another tenant
//! keeps every core busy with plain calls — at `SCHED_IDLE` it would get
//! none, run into its deadline and, faulting, into quarantine: policy
//! silently off for that tenant by another's ordinary load.
//!
//! A plugin whose calls have lately run long (for one account: see
//! [`Habit`]) has its next calls start on the lane's threads at once,
//! taking turns from their first tick: a guard that spins on every call
//! does not hold a serving thread for the millisecond or more each of its
//! calls takes to turn long.
//!
//! Big teardowns go to the lane's threads too ([`LongLane::drop_later`]),
//! to the set its account's long calls would run on: dropping an instance
//! whose memories grew past [`BIG`] gives them back to the kernel
//! (`madvise`), milliseconds of kernel time a serving thread would
//! otherwise spend. On the low threads a teardown runs only on a core
//! nothing else wants; until then the instance and its memory stay charged
//! to its account, so a tenant whose teardowns lag behind waits on its own
//! share. What the call held of the lane (its turn) is given back when the
//! call ends, not when its store is dropped.
//!
//! Whatever runs on the lane's threads for a caller — a call moved there,
//! a shadow run, a big teardown — logs where the caller logs: the
//! caller's `tracing` subscriber goes with it, so a library user's scoped
//! subscriber (and a test's) sees a guest's log lines wherever its call
//! ended up running.
//!
//! What this buys: calls that finish within a tick (nearly every guard)
//! never wait for a turn, and however many guests spin, they hold at most
//! the lane's threads; the rest serve everyone else. Since a call starved
//! of CPU cannot even notice its bound, its caller stops waiting
//! [`OVERDUE`] after it and answers `overloaded` itself; the call is
//! stopped, and what it holds (its instance, pool slot and share) is given
//! back once the lane's thread gets to drop it.
//!
//! [`EngineConfig::long_lane`]: crate::EngineConfig::long_lane
//! [`EngineConfig::long_lane_priority`]: crate::EngineConfig::long_lane_priority
//! [`Limits::wall_bound`]: crate::Limits::wall_bound

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::instrument::WithSubscriber;
use wasmtime::UpdateDeadline;

mod clock;
mod cpu;
mod habit;
mod priority;
mod progress;
mod ticks;

use clock::*;
pub use cpu::AccountTurn;
use cpu::CpuMeter;
pub(crate) use cpu::CpuUse;
pub(crate) use habit::Habit;
pub use priority::LanePriority;
use priority::*;
use progress::AbortOnDrop;
pub(crate) use progress::Progress;
pub(crate) use ticks::Ticks;
use ticks::*;

/// Fuel after which a call is long: about a millisecond of straight-line
/// guest code, several times what a compiled guard spends per call (see
/// BENCHMARKS.md).
pub const LONG_FUEL: u64 = 2_000_000;

/// Run time after which a call is long whatever its fuel: a guest that
/// spends its time in work fuel does not count (filling or copying memory,
/// page faults, host calls).
pub const LONG_BUSY: Duration = Duration::from_millis(5);

/// Memory an instance's memories must hold for its teardown to go to the
/// lane's thread; smaller ones are dropped in place (a hop to another
/// thread costs more than their decommit).
pub(crate) const BIG: usize = 32 << 20;

/// How long past a long call's wall-clock bound its caller still waits for
/// it on the lane: enough for a call that gets the CPU to trap at its own
/// next tick (and report its fuel), a bound for one that does not.
pub const OVERDUE: Duration = Duration::from_millis(10);

/// The host-wide lane long calls take turns in: two sets of threads, one
/// for the accounts using more than their part of the guards' CPU time
/// (at the configured [`LanePriority`], idle by default) and one for the
/// others (at the normal priority), each with `width` turns.
#[derive(Debug)]
pub struct LongLane {
    width: u32,
    low: Lane,
    fair: Lane,
    /// The threads shadow runs go to (see [`LongLane::after_answer`]).
    shadow: Threads,
    overdue: AtomicU64,
    meter: CpuMeter,
}

/// One set of lane threads and its turns.
#[derive(Debug)]
struct Lane {
    turns: Arc<Semaphore>,
    waiting: AtomicU32,
    threads: Threads,
}

impl Lane {
    fn new(width: u32, priority: LanePriority, name: &'static str) -> Lane {
        Lane {
            turns: Arc::new(Semaphore::new(width as usize)),
            waiting: AtomicU32::new(0),
            threads: Threads::start(width, priority, name),
        }
    }
}

/// What the lane is doing now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LaneUsage {
    /// Long calls holding a turn now.
    pub running: u32,
    /// Long calls queued for a turn now (for their account's or the lane's).
    pub waiting: u32,
    /// The most long calls that may run at once on each of the lane's two
    /// sets of threads.
    pub width: u32,
    /// Long calls stopped at their wall-clock bound, not having got the CPU
    /// to finish or to stop by themselves (`overloaded`), since the lane
    /// was made.
    pub overdue: u64,
}

/// The name of the threads that run long calls of accounts using more
/// than their part of the CPU.
pub(crate) const LOW_THREADS: &str = "toolgate-long";
/// The name of the threads that run long calls of accounts within their
/// part of the CPU, at the normal priority.
pub(crate) const FAIR_THREADS: &str = "toolgate-fair";
/// The name of the threads that run shadow guards after the answer, at
/// the low threads' priority.
pub(crate) const SHADOW_THREADS: &str = "toolgate-shadow";

impl LongLane {
    /// A lane where `width` (at least 1) long calls run at once on threads
    /// at `priority` and as many on threads at the normal priority.
    pub fn new(width: u32, priority: LanePriority) -> Arc<LongLane> {
        let width = width.max(1);
        Arc::new(LongLane {
            width,
            low: Lane::new(width, priority, LOW_THREADS),
            fair: Lane::new(width, LanePriority::Nice(0), FAIR_THREADS),
            shadow: Threads::start(width, priority, SHADOW_THREADS),
            overdue: AtomicU64::new(0),
            meter: CpuMeter::default(),
        })
    }

    /// The lane a long call of `progress` runs in: the fair one while its
    /// account has used no more than its part of the guards' recent CPU
    /// time (see [`CpuMeter`]), the low one otherwise. A call charged to no
    /// account (a library user's plugin outside a registry: there is no one
    /// to be fair to) runs in the fair one.
    fn lane_for(&self, progress: &Progress) -> &Lane {
        match &progress.account {
            Some(account) if !self.meter.within_part(account) => &self.low,
            _ => &self.fair,
        }
    }

    /// Counts the run time of a finished call toward its account's use of
    /// the CPU.
    pub(crate) fn record(&self, progress: &Progress) {
        if let Some(account) = &progress.account {
            self.meter.record(account, progress.run_time());
        }
    }

    /// Runs `call` on this thread until it turns long — by its fuel (as
    /// its [`Ticks`] tell `progress`) or by its run time — then on the
    /// lane's threads (see [`LongLane::lane_for`]), waiting for it there
    /// until [`OVERDUE`] past its wall-clock bound. A call `expected_long`
    /// (its plugin's calls have lately run long: see [`Habit`]) starts on
    /// the lane's threads, taking turns from its first tick. Dropping the
    /// returned future stops the call wherever it runs; so does giving up
    /// on it. Either way `progress` tells afterwards whether it
    /// [ran long](Progress::ran_long) and its [run time](Progress::run_time).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        progress: &Arc<Progress>,
        expected_long: bool,
        mut call: Pin<Box<dyn Future<Output = T> + Send>>,
    ) -> Result<T, Unfinished> {
        let lane = if expected_long {
            progress.long.store(true, Ordering::Relaxed);
            self.lane_for(progress)
        } else {
            // Ready with the lane once the call is long and can move.
            let here =
                std::future::poll_fn(|cx| match progress.clocked(|| call.as_mut().poll(cx)) {
                    Poll::Ready(done) => Poll::Ready(Ok(done)),
                    Poll::Pending if progress.long.load(Ordering::Relaxed) => {
                        Poll::Ready(Err(self.lane_for(progress)))
                    }
                    Poll::Pending => Poll::Pending,
                })
                .await;
            match here {
                Ok(done) => return Ok(done),
                Err(lane) => lane,
            }
        };
        let fair = std::ptr::eq(lane, &self.fair);
        progress.fair.store(fair, Ordering::Relaxed);
        // Spawning polls it once at once there, with a waker of the new
        // task: whatever it waits for wakes it on the lane. Its polls go on
        // being clocked there, and its log lines go where the caller's do.
        let on_lane_progress = Arc::clone(progress);
        let clocked =
            std::future::poll_fn(move |cx| on_lane_progress.clocked(|| call.as_mut().poll(cx)));
        let on_lane = match lane.threads.spawn(clocked) {
            Ok(task) => AbortOnDrop(task),
            // No threads: it goes on here, still taking turns.
            Err(clocked) => return Ok(clocked.await),
        };
        match progress.bound.and_then(|d| d.checked_add(OVERDUE)) {
            Some(due) => tokio::time::timeout_at(due.into(), on_lane)
                .await
                .unwrap_or_else(|_| {
                    self.overdue.fetch_add(1, Ordering::Relaxed);
                    progress.ran_long.store(true, Ordering::Relaxed);
                    Err(Unfinished::Overdue)
                }),
            None => on_lane.await,
        }
    }

    /// Runs `work` (a shadow run, after the answer) on the shadow threads:
    /// `width` threads at the low threads' priority ([`LanePriority::Idle`]
    /// by default: a core nothing else wants), taking no turn in either
    /// lane — so it never holds a turn, a thread or a core an enforced call
    /// could use. On this runtime where those threads could not start.
    /// Its log lines go where the caller's do.
    pub(crate) fn after_answer(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Err(work) = self.shadow.spawn(work) {
            drop(tokio::spawn(work.with_current_subscriber()));
        }
    }

    /// Runs `call` where it is polled, clocked (its run time is its own
    /// polls'), never moving to the lane and taking no turn: a shadow
    /// guard's call, already on the shadow threads.
    pub(crate) async fn run_here<T>(
        progress: &Progress,
        mut call: Pin<Box<dyn Future<Output = T> + Send>>,
    ) -> T {
        std::future::poll_fn(|cx| progress.clocked(|| call.as_mut().poll(cx))).await
    }

    /// Drops `remains` (a big instance's store, with the pool slot and the
    /// share it holds) on the teardown thread of the lane a long call of
    /// `progress` would run in (see [`LongLane::lane_for`]), at its
    /// priority, in the order given; here if the lane has no threads. An
    /// account within its part of the CPU thus gets its memory back while
    /// other work keeps every core busy; one over it, only when a core is
    /// free.
    pub(crate) fn drop_later(&self, progress: &Progress, remains: impl Send + 'static) {
        if let Err(here) = self
            .lane_for(progress)
            .threads
            .spawn_blocking(move || drop(remains))
        {
            here();
        }
    }

    /// What the lane is doing now.
    pub fn usage(&self) -> LaneUsage {
        let running = |lane: &Lane| {
            let free = u32::try_from(lane.turns.available_permits()).unwrap_or(u32::MAX);
            self.width.saturating_sub(free)
        };
        LaneUsage {
            running: running(&self.low) + running(&self.fair),
            waiting: self.low.waiting.load(Ordering::Relaxed)
                + self.fair.waiting.load(Ordering::Relaxed),
            width: self.width,
            overdue: self.overdue.load(Ordering::Relaxed),
        }
    }
}

/// Why [`LongLane::run`] has no result for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unfinished {
    /// It ran on the lane past its wall-clock bound by [`OVERDUE`] without
    /// stopping: the lane's threads did not get the CPU to run it.
    Overdue,
    /// The lane's threads shut down under it (the engine is being dropped).
    ShutDown,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts a call as waiting for as long as it lives.
struct Waiting<'a>(&'a Lane);

impl<'a> Waiting<'a> {
    fn start(lane: &'a Lane) -> Self {
        lane.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(lane)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
