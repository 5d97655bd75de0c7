//! What a call shares with its caller, and its task on the lane's threads.

use super::*;

/// What a call shares with its caller: its limits (run time, wall-clock
/// bound), whether it is long (takes turns) and in which lane, whether it
/// really ran long or was starved, its run time, the fuel it had burnt at
/// its last tick, and the account whose CPU time it is.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The run time it may take (`None`: any).
    pub(super) budget: Option<Duration>,
    /// When the host gives up on it (`None`: never).
    pub(super) bound: Option<Instant>,
    pub(super) long: AtomicBool,
    pub(super) fair: AtomicBool,
    pub(super) ran_long: AtomicBool,
    pub(super) starved: AtomicBool,
    pub(super) burnt: AtomicU64,
    pub(super) clock: Mutex<RunClock>,
    pub(super) account: Option<Arc<CpuUse>>,
    /// The turn a long call holds for its current slice: taken at a tick,
    /// given back at the next one or when the call ends — never kept by a
    /// store that outlives its call (a prepared instance, a teardown
    /// waiting on the lane), which would hold its account's one turn.
    pub(super) turn: Mutex<Option<Held>>,
}

impl Progress {
    /// Runs one `poll` of the call, clocked; a call whose run time passes
    /// [`LONG_BUSY`] is long from then on.
    pub(super) fn clocked<T>(&self, poll: impl FnOnce() -> Poll<T>) -> Poll<T> {
        lock(&self.clock).start_poll();
        let polled = poll();
        if polled.is_ready() {
            self.give_back_turn();
        }
        let mut clock = lock(&self.clock);
        clock.end_poll();
        if clock.ran >= LONG_BUSY {
            self.long.store(true, Ordering::Relaxed);
            self.ran_long.store(true, Ordering::Relaxed);
        }
        polled
    }

    /// Gives back the lane turn the call holds, if any: its slice is over.
    /// A call run through [`LongLane::run`] gives it back when it ends; one
    /// run outside it (an instance made ahead of need) must, before its
    /// store is put aside.
    pub(crate) fn give_back_turn(&self) {
        drop(lock(&self.turn).take());
    }

    /// Whether the call ran long: past [`LONG_FUEL`] at a tick, past
    /// [`LONG_BUSY`] of run time, or given up on the lane. A call that
    /// started on the lane because its plugin's calls were expected to run
    /// long, and then did not, did not run long.
    pub(crate) fn ran_long(&self) -> bool {
        self.ran_long.load(Ordering::Relaxed)
    }

    /// Whether the call was stopped at its wall-clock bound having run
    /// less than its budget: the host did not give it the CPU.
    pub(crate) fn starved(&self) -> bool {
        self.starved.load(Ordering::Relaxed)
    }

    /// The call's run time in its finished polls.
    pub(crate) fn run_time(&self) -> Duration {
        lock(&self.clock).ran
    }

    /// The fuel the call had burnt at its last tick (its store has the
    /// exact count; this is for a call given up on).
    pub(crate) fn fuel_burnt(&self) -> u64 {
        self.burnt.load(Ordering::Relaxed)
    }
}

/// A task on the lane's threads, stopped when its caller stops waiting.
pub(super) struct AbortOnDrop<T>(pub(super) tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, Unfinished>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(done) => Ok(done),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Unfinished::ShutDown),
        })
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
