//! Turns on the CPU for guard calls that run long.
//!
//! A running guest is interrupted at every epoch tick (1 ms by default) by
//! its store's deadline callback. A call that has burnt [`LONG_FUEL`], or
//! has spent [`LONG_BUSY`] inside its own polls — far past a well-behaved
//! guard's whole budget — is a *long call*, and from then on it runs only
//! while it holds a turn in the host-wide [`LongLane`]: at most
//! [`EngineConfig::long_lane`] long calls run at once, whoever they belong
//! to. At every tick a long call gives its turn back and queues for the
//! next one, so long calls take turns slice by slice.
//!
//! Both measures count only what the call itself did: fuel is its guest
//! code, and poll time is the time its guest (with its page faults, bulk
//! memory copies and host calls) held a thread, not the time it waited in
//! a queue. A quick call merely kept waiting by a busy host never turns
//! long.
//!
//! Turns are fair between accounts, not between calls: before queueing for
//! the lane a long call takes its account's own turn (one per account), so
//! each account has at most one call in the lane's queue and a tenant with
//! many spinning guards gets no more of the lane than a tenant with one.
//!
//! Long calls also run on threads of their own. A call starts on the
//! thread that asked for it; once it is long it moves (between two polls:
//! its fiber goes with it) to the lane's threads, which run at a lower
//! CPU priority (`nice` [`LONG_NICE`]). The operating system then gives
//! any serving thread, and the clients and proxies beside the host, the
//! core first: a spinning guest takes the CPU only when it is free, and
//! no one's request waits out a spinner's scheduler slice. (Measured:
//! a tenant's spinners lengthened another tenant's p99 at a fixed rate
//! 4–5× while they ran on the serving threads, 1.2× on these.)
//!
//! What this buys: calls that finish within a tick (nearly every guard)
//! never wait for a turn, and however many guests spin, they hold at most
//! `long_lane` of the executor's threads; the rest serve everyone else.
//! A long call waiting for its turn is still on its wall-clock deadline —
//! under contention it gets less CPU before it, which is the point.
//!
//! [`EngineConfig::long_lane`]: crate::EngineConfig::long_lane

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::UpdateDeadline;

/// Fuel after which a call is long: about a millisecond of straight-line
/// guest code, several times what a compiled guard spends per call (see
/// BENCHMARKS.md).
pub const LONG_FUEL: u64 = 2_000_000;

/// Time inside its own polls after which a call is long whatever its fuel:
/// a guest that spends its time in work fuel does not count (filling or
/// copying memory, page faults, host calls).
pub const LONG_BUSY: std::time::Duration = std::time::Duration::from_millis(5);

/// The `nice` value of the threads long calls run on: against a serving
/// thread at the default priority they get about a tenth of a busy core.
pub const LONG_NICE: i32 = 10;

/// The host-wide lane long calls take turns in.
#[derive(Debug)]
pub struct LongLane {
    width: u32,
    turns: Arc<Semaphore>,
    waiting: AtomicU32,
    threads: Threads,
}

/// The threads long calls run on: a runtime of `width` threads at
/// [`LONG_NICE`]. `None` where it could not be started; long calls then
/// stay on the thread they started on (still taking turns).
#[derive(Debug)]
struct Threads(Option<tokio::runtime::Runtime>);

impl Threads {
    fn start(width: u32) -> Threads {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(width as usize)
            .max_blocking_threads(1)
            .thread_name("toolgate-long")
            .on_thread_start(|| {
                // Linux gives each thread its own nice value. Where this
                // fails long calls still take turns, at the default priority.
                if let Err(e) = rustix::process::setpriority_process(None, LONG_NICE) {
                    tracing::debug!("long-call thread keeps the default priority: {e}");
                }
            })
            .enable_time()
            .build();
        match runtime {
            Ok(runtime) => Threads(Some(runtime)),
            Err(e) => {
                tracing::warn!(
                    "cannot start the long-call threads; long calls stay where they start: {e}"
                );
                Threads(None)
            }
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        // The engine may be dropped inside an async context, where a
        // runtime must not block on its threads.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
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
            threads: Threads::start(width),
        })
    }

    /// Runs `call` on this thread until it turns long — by its fuel (`long`
    /// set by its [`Ticks`]) or by the time spent in its polls (set here) —
    /// then on the lane's threads. `None` only if the lane's
    /// threads shut down under it (the engine is being dropped). Dropping
    /// the returned future stops the call wherever it runs.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        long: &AtomicBool,
        mut call: Pin<Box<dyn Future<Output = T> + Send>>,
    ) -> Option<T> {
        let mut busy = std::time::Duration::ZERO;
        // Ready with the lane's runtime once the call is long and can move.
        let here = std::future::poll_fn(|cx| {
            let start = Instant::now();
            let polled = call.as_mut().poll(cx);
            busy += start.elapsed();
            if busy >= LONG_BUSY {
                long.store(true, Ordering::Relaxed);
            }
            match (polled, &self.threads.0) {
                (Poll::Ready(done), _) => Poll::Ready(Ok(done)),
                (Poll::Pending, Some(lane)) if long.load(Ordering::Relaxed) => {
                    Poll::Ready(Err(lane))
                }
                (Poll::Pending, _) => Poll::Pending,
            }
        })
        .await;
        match here {
            Ok(done) => Some(done),
            // Spawning polls it once at once there, with a waker of the
            // new task: whatever it waits for wakes it on the lane.
            Err(lane) => AbortOnDrop(lane.spawn(call)).await,
        }
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

/// A task on the lane's threads, stopped when its caller stops waiting.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(done) => Some(done),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        })
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
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
/// the fuel it started with, and the turn it holds.
pub(crate) struct Ticks {
    deadline: Option<Instant>,
    fuel: u64,
    lane: Option<(Arc<LongLane>, Option<Arc<Semaphore>>)>,
    held: Arc<Mutex<Option<Held>>>,
    long: Arc<AtomicBool>,
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
            lane: lane.map(|(lane, account)| (Arc::clone(lane), account.map(|a| Arc::clone(&a.0)))),
            held: Arc::default(),
            long: Arc::default(),
        }
    }

    /// Set once the call is long: [`LongLane::run`] moves it to the lane's
    /// threads at its next pause.
    pub(crate) fn long(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.long)
    }

    /// What the call does at this tick, with `fuel_left`: trap once past
    /// its deadline; else yield to the executor and, once it is a long
    /// call, give back its turn and queue for the next one (waiting no
    /// later than its deadline: the tick after that traps it).
    pub(crate) fn tick(&mut self, fuel_left: u64) -> UpdateDeadline {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return UpdateDeadline::Interrupt;
        }
        let Some((lane, account)) = &self.lane else {
            return UpdateDeadline::Yield(1);
        };
        if self.fuel.saturating_sub(fuel_left) < LONG_FUEL && !self.long.load(Ordering::Relaxed) {
            return UpdateDeadline::Yield(1);
        }
        self.long.store(true, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn thread_name() -> Option<String> {
        std::thread::current().name().map(str::to_owned)
    }

    #[tokio::test]
    async fn a_call_moves_to_the_lane_threads_once_it_is_long_and_runs_at_their_priority() {
        let lane = LongLane::new(1);
        let long = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&long);
        let call = Box::pin(async move {
            tokio::task::yield_now().await;
            let quick = thread_name();
            flag.store(true, Ordering::Relaxed);
            tokio::task::yield_now().await;
            let priority = rustix::process::getpriority_process(None).ok();
            (quick, thread_name(), priority)
        });
        let (quick, long_on, priority) = lane.run(&long, call).await.expect("the call ends");
        assert_ne!(
            quick.as_deref(),
            Some("toolgate-long"),
            "a quick call stays where it is"
        );
        assert_eq!(long_on.as_deref(), Some("toolgate-long"));
        if cfg!(target_os = "linux") {
            // At least this low: a process already below it stays there.
            assert!(
                priority.is_some_and(|p| p >= LONG_NICE),
                "lane thread priority {priority:?}"
            );
        }
    }

    #[tokio::test]
    async fn dropping_the_caller_stops_a_long_call_on_the_lane() {
        let lane = LongLane::new(1);
        let long = Arc::new(AtomicBool::new(true));
        let spins = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&spins);
        let on_lane = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&on_lane);
        let call = Box::pin(async move {
            loop {
                counted.fetch_add(1, Ordering::Relaxed);
                if thread_name().as_deref() == Some("toolgate-long") {
                    seen.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        let running =
            tokio::time::timeout(std::time::Duration::from_millis(50), lane.run(&long, call));
        assert!(running.await.is_err(), "the spinner never ends by itself");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let after_drop = spins.load(Ordering::Relaxed);
        assert!(after_drop > 0, "it ran");
        assert!(
            on_lane.load(Ordering::Relaxed),
            "it ran on the lane's threads"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            spins.load(Ordering::Relaxed),
            after_drop,
            "it stopped when dropped"
        );
    }
}
