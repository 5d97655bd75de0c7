//! Turns on the CPU for guard calls that run long, and how a call's time
//! is measured.
//!
//! Long on purpose (about 870 lines of code, 460 of tests): the lanes, the
//! turns they hand out and the teardown threads keep one invariant — a
//! turn is taken and given back exactly once, whoever ends the call — and
//! it is read whole here.
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
use wasmtime::UpdateDeadline;

/// Fuel after which a call is long: about a millisecond of straight-line
/// guest code, several times what a compiled guard spends per call (see
/// BENCHMARKS.md).
pub const LONG_FUEL: u64 = 2_000_000;

/// Run time after which a call is long whatever its fuel: a guest that
/// spends its time in work fuel does not count (filling or copying memory,
/// page faults, host calls).
pub const LONG_BUSY: Duration = Duration::from_millis(5);

/// Poll time measured by the wall clock, at most this much per poll, until
/// a call has this much; from then on by its thread's CPU clock. The wall
/// clock costs nothing but counts time the thread was preempted; the CPU
/// clock is a system call per poll, paid only by calls already this slow.
/// A quick call preempted for long thus counts at most this much of it.
const WALL_CLOCKED: Duration = Duration::from_millis(1);

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Memory an instance's memories must hold for its teardown to go to the
/// lane's thread; smaller ones are dropped in place (a hop to another
/// thread costs more than their decommit).
pub(crate) const BIG: usize = 32 << 20;

/// How long past a long call's wall-clock bound its caller still waits for
/// it on the lane: enough for a call that gets the CPU to trap at its own
/// next tick (and report its fuel), a bound for one that does not.
pub const OVERDUE: Duration = Duration::from_millis(10);

/// The CPU priority of the threads long calls run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LanePriority {
    /// Linux's `SCHED_IDLE` class: the thread runs only when no thread of a
    /// normal class wants the core, and gives it up as soon as one does.
    /// Elsewhere, or where the class cannot be set, `nice` 19.
    #[default]
    Idle,
    /// The normal class at this `nice` value (0..=19): the thread gets a
    /// share of a busy core (at 10, about a tenth against a thread at 0).
    Nice(i32),
}

/// The `nice` value [`LanePriority::Idle`] falls back to.
const IDLE_NICE: i32 = 19;

impl LanePriority {
    /// Applies this priority to the calling thread (Linux applies it to the
    /// thread alone). A thread can always lower its own priority; an error
    /// means the system refused it.
    pub(crate) fn apply_to_this_thread(self) -> std::io::Result<()> {
        let nice = match self {
            LanePriority::Idle => {
                #[cfg(target_os = "linux")]
                {
                    let param = libc::sched_param { sched_priority: 0 };
                    // SAFETY: `param` is a valid `sched_param` for the call's
                    // duration; pid 0 is the calling thread.
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
                        return Ok(());
                    }
                }
                IDLE_NICE
            }
            LanePriority::Nice(n) => n,
        };
        rustix::process::setpriority_process(None, nice).map_err(Into::into)
    }
}

impl std::str::FromStr for LanePriority {
    type Err = String;

    /// `idle`, or a `nice` value from 0 to 19.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "idle" {
            return Ok(LanePriority::Idle);
        }
        match s.parse::<i32>() {
            Ok(n) if (0..=19).contains(&n) => Ok(LanePriority::Nice(n)),
            _ => Err(format!(
                "`{s}` is not a lane priority: `idle`, or a nice value from 0 to 19"
            )),
        }
    }
}

impl std::fmt::Display for LanePriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LanePriority::Idle => f.write_str("idle"),
            LanePriority::Nice(n) => write!(f, "{n}"),
        }
    }
}

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

/// The threads long calls run on: a runtime of `width` threads at a
/// [`LanePriority`]. `None` where it could not be started; long calls then
/// stay on the thread they started on (still taking turns).
#[derive(Debug)]
struct Threads(Option<tokio::runtime::Runtime>);

impl Threads {
    fn start(width: u32, priority: LanePriority, name: &'static str) -> Threads {
        // The one blocking thread is the teardown thread (`drop_later`).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(width as usize)
            .max_blocking_threads(1)
            .thread_name(name)
            .on_thread_start(move || {
                // Where this fails long calls still take turns, at the
                // default priority.
                if let Err(e) = priority.apply_to_this_thread() {
                    tracing::debug!("long-call thread keeps the default priority: {e}");
                }
            })
            // IO too: a long call's outbound HTTP (`http.send`) connects
            // from these threads.
            .enable_all()
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
        let Some(threads) = &lane.threads.0 else {
            // No threads: it goes on here, still taking turns.
            return Ok(
                std::future::poll_fn(|cx| progress.clocked(|| call.as_mut().poll(cx))).await,
            );
        };
        // Spawning polls it once at once there, with a waker of the new
        // task: whatever it waits for wakes it on the lane. Its polls go on
        // being clocked there.
        let on_lane_progress = Arc::clone(progress);
        let clocked =
            std::future::poll_fn(move |cx| on_lane_progress.clocked(|| call.as_mut().poll(cx)));
        let on_lane = AbortOnDrop(threads.spawn(clocked));
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
    pub(crate) fn after_answer(&self, work: impl Future<Output = ()> + Send + 'static) {
        match &self.shadow.0 {
            Some(threads) => drop(threads.spawn(work)),
            None => drop(tokio::spawn(work)),
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
        match &self.lane_for(progress).threads.0 {
            Some(lane) => drop(lane.spawn_blocking(move || drop(remains))),
            None => drop(remains),
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

/// A call's run time: the time spent inside its own polls, wherever it
/// runs — by the wall clock for a poll's first [`WALL_CLOCKED`] (at most)
/// until the call has that much, then by its thread's CPU clock. A poll
/// that ticks (runs past an epoch tick) reads the CPU clock from its
/// first tick on, so a long poll is measured by the CPU clock whatever
/// came before. Time the call waited for a core, preempted or queued, is
/// not run time.
///
/// A call whose polls are not clocked (one run outside [`LongLane::run`]:
/// a load-time probe, a benchmark) has the wall-clock time since its
/// [`Ticks`] were made as its run time.
#[derive(Debug, Default)]
struct RunClock {
    /// When its ticks were made, until its first clocked poll.
    unclocked_since: Option<Instant>,
    /// The run time of its finished polls.
    ran: Duration,
    /// The poll under way: when it started, and (once read) its thread's
    /// CPU clock with the run time counted before that reading.
    poll: Option<(Instant, Option<(Duration, Duration)>)>,
}

impl RunClock {
    fn start_poll(&mut self) {
        self.unclocked_since = None;
        let cpu = (self.ran >= WALL_CLOCKED).then(|| (thread_cpu_time(), Duration::ZERO));
        self.poll = Some((Instant::now(), cpu));
    }

    /// The run time so far, inside a poll on the polling thread; reads the
    /// CPU clock.
    fn now(&mut self) -> Duration {
        let Some((start, cpu)) = &mut self.poll else {
            return match self.unclocked_since {
                Some(since) => since.elapsed(),
                None => self.ran,
            };
        };
        let now = thread_cpu_time();
        let (at, before) = *cpu.get_or_insert_with(|| (now, start.elapsed().min(WALL_CLOCKED)));
        self.ran + before + now.saturating_sub(at)
    }

    fn end_poll(&mut self) {
        self.ran += match self.poll.take() {
            Some((_, Some((at, before)))) => before + thread_cpu_time().saturating_sub(at),
            Some((start, None)) => start.elapsed().min(WALL_CLOCKED),
            None => Duration::ZERO,
        };
    }
}

/// What a call shares with its caller: its limits (run time, wall-clock
/// bound), whether it is long (takes turns) and in which lane, whether it
/// really ran long or was starved, its run time, the fuel it had burnt at
/// its last tick, and the account whose CPU time it is.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The run time it may take (`None`: any).
    budget: Option<Duration>,
    /// When the host gives up on it (`None`: never).
    bound: Option<Instant>,
    long: AtomicBool,
    fair: AtomicBool,
    ran_long: AtomicBool,
    starved: AtomicBool,
    burnt: AtomicU64,
    clock: Mutex<RunClock>,
    account: Option<Arc<CpuUse>>,
    /// The turn a long call holds for its current slice: taken at a tick,
    /// given back at the next one or when the call ends — never kept by a
    /// store that outlives its call (a prepared instance, a teardown
    /// waiting on the lane), which would hold its account's one turn.
    turn: Mutex<Option<Held>>,
}

impl Progress {
    /// Runs one `poll` of the call, clocked; a call whose run time passes
    /// [`LONG_BUSY`] is long from then on.
    fn clocked<T>(&self, poll: impl FnOnce() -> Poll<T>) -> Poll<T> {
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
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

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

/// One account's place in the lane: at most one of its long calls queues
/// for (or holds) a lane turn at a time; and its recent use of the CPU,
/// which decides the lane its long calls run in.
#[derive(Debug)]
pub struct AccountTurn {
    turn: Arc<Semaphore>,
    cpu: Arc<CpuUse>,
}

impl Default for AccountTurn {
    fn default() -> Self {
        AccountTurn {
            turn: Arc::new(Semaphore::new(1)),
            cpu: Arc::default(),
        }
    }
}

/// How long one window of CPU accounting lasts. An account's recent use
/// is its use in the current window and the one before.
const CPU_WINDOW: Duration = Duration::from_millis(500);

/// Run time in one window and the one before.
#[derive(Debug, Default, Clone, Copy)]
struct Windowed {
    window: u64,
    this: Duration,
    before: Duration,
}

impl Windowed {
    /// Moves to `window`; whether it had been in another.
    fn roll(&mut self, window: u64) -> bool {
        if self.window == window {
            return false;
        }
        self.before = if self.window + 1 == window {
            self.this
        } else {
            Duration::ZERO
        };
        self.this = Duration::ZERO;
        self.window = window;
        true
    }

    fn recent(&self) -> Duration {
        self.this + self.before
    }
}

/// One account's recent run time of guard calls.
#[derive(Debug, Default)]
pub(crate) struct CpuUse(Mutex<Windowed>);

/// The guards' recent run time host-wide, and how many accounts it came
/// from: an account's *part* of it is an equal share of what the accounts
/// that ran anything lately used.
///
/// This is what keeps the lane fair between accounts whatever the OS
/// priority of its threads: a tenant whose spinning guards take more than
/// their part runs its long calls at the low priority (behind everyone's
/// quick calls), while a tenant within its part — a guard that needs a few
/// milliseconds for a big event, beside another tenant's flood of quick
/// calls — runs them at the normal priority, and gets the CPU.
#[derive(Debug)]
struct CpuMeter {
    start: Instant,
    state: Mutex<MeterState>,
}

#[derive(Debug, Default)]
struct MeterState {
    total: Windowed,
    /// Accounts that ran a call in this window and in the one before.
    active: u32,
    active_before: u32,
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter {
            start: Instant::now(),
            state: Mutex::default(),
        }
    }
}

impl CpuMeter {
    fn window(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis() / CPU_WINDOW.as_millis()).unwrap_or(u64::MAX)
    }

    fn rolled(&self) -> std::sync::MutexGuard<'_, MeterState> {
        let window = self.window();
        let mut state = lock(&self.state);
        let consecutive = state.total.window + 1 == window;
        if state.total.roll(window) {
            state.active_before = if consecutive { state.active } else { 0 };
            state.active = 0;
        }
        state
    }

    /// Counts `run` of an account's call.
    fn record(&self, account: &CpuUse, run: Duration) {
        let mut state = self.rolled();
        let window = state.total.window;
        state.total.this += run;
        let mut own = lock(&account.0);
        own.roll(window);
        let first = own.this.is_zero();
        own.this += run;
        if first && !own.this.is_zero() {
            state.active += 1;
        }
    }

    /// Whether the account has used no more than its part of the recent
    /// run time.
    fn within_part(&self, account: &CpuUse) -> bool {
        let state = self.rolled();
        let mut own = lock(&account.0);
        own.roll(state.total.window);
        let accounts = state.active.max(state.active_before).max(1);
        own.recent().saturating_mul(accounts) <= state.total.recent()
    }
}

/// Whether one plugin's calls, for one account, have lately run long.
/// After a call that ran long, its plugin's next [`REMEMBERED`] calls start
/// on the lane's threads instead of a serving thread — a guard that spins
/// on every call then never holds a serving thread for the millisecond or
/// so each call took to turn long — and each call that does not run long
/// counts one off. A guard that ran long once pays for it with a few calls
/// at the lane's priority; a guard that keeps running long is not run on
/// a serving thread at all.
#[derive(Debug, Default)]
pub(crate) struct Habit(AtomicU32);

/// How many calls start on the lane after one that ran long.
pub(crate) const REMEMBERED: u32 = 8;

impl Habit {
    /// Whether the next call is expected to run long.
    pub(crate) fn expects_long(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }

    /// Records whether a call ran long.
    pub(crate) fn record(&self, ran_long: bool) {
        if ran_long {
            self.0.store(REMEMBERED, Ordering::Relaxed);
        } else if self.expects_long() {
            let _ = self
                .0
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}

/// The turns one long call holds for its current slice.
#[derive(Debug)]
struct Held {
    _account: Option<OwnedSemaphorePermit>,
    _lane: OwnedSemaphorePermit,
}

/// The deadline callback's state for one call: the fuel it started with,
/// the lane it takes turns in, and what it shares with its caller (its
/// deadline, the turn it holds).
pub(crate) struct Ticks {
    fuel: u64,
    lane: Option<(Arc<LongLane>, Option<Arc<Semaphore>>)>,
    progress: Arc<Progress>,
}

impl Ticks {
    /// A call that may run for `budget` (see [`Progress`]'s run time) and
    /// is given up on at `bound` of wall-clock time (`None`: never), that
    /// starts with `fuel`, taking turns in `lane` as `account` (no lane: it
    /// only yields at each tick).
    pub(crate) fn new(
        budget: Duration,
        bound: Option<Instant>,
        fuel: u64,
        lane: Option<(&Arc<LongLane>, Option<&AccountTurn>)>,
    ) -> Ticks {
        let account = lane.and_then(|(_, a)| a);
        Ticks {
            fuel,
            lane: lane
                .map(|(lane, account)| (Arc::clone(lane), account.map(|a| Arc::clone(&a.turn)))),
            progress: Arc::new(Progress {
                budget: Some(budget),
                bound,
                clock: Mutex::new(RunClock {
                    unclocked_since: Some(Instant::now()),
                    ..RunClock::default()
                }),
                account: account.map(|a| Arc::clone(&a.cpu)),
                ..Progress::default()
            }),
        }
    }

    /// What [`LongLane::run`] needs to know of the call: once it is long,
    /// it moves to the lane's threads at its next pause.
    pub(crate) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    /// What the call does at this tick, with `fuel_left`: trap once its
    /// run time is past its budget (`deadline`, the guest's doing) or,
    /// having run less, once its wall-clock bound has passed (marked
    /// [starved](Progress::starved): the host's doing); else yield to the
    /// executor and, once it is a long call, give back its turn and queue
    /// for the next one (waiting no later than its bound: the tick after
    /// that traps it).
    pub(crate) fn tick(&mut self, fuel_left: u64) -> UpdateDeadline {
        let (progress, burnt) = (&self.progress, self.fuel.saturating_sub(fuel_left));
        progress.burnt.store(burnt, Ordering::Relaxed);
        let ran = lock(&progress.clock).now();
        if progress.budget.is_some_and(|b| ran >= b) {
            return UpdateDeadline::Interrupt;
        }
        if progress.bound.is_some_and(|d| Instant::now() >= d) {
            progress.starved.store(true, Ordering::Relaxed);
            return UpdateDeadline::Interrupt;
        }
        let Some((lane, account)) = &self.lane else {
            return UpdateDeadline::Yield(1);
        };
        if burnt >= LONG_FUEL || ran >= LONG_BUSY {
            progress.ran_long.store(true, Ordering::Relaxed);
        } else if !progress.long.load(Ordering::Relaxed) {
            return UpdateDeadline::Yield(1);
        }
        progress.long.store(true, Ordering::Relaxed);
        progress.give_back_turn();
        let (lane, account, bound, progress) = (
            Arc::clone(lane),
            account.clone(),
            progress.bound,
            Arc::clone(progress),
        );
        UpdateDeadline::YieldCustom(
            1,
            Box::pin(async move {
                // Before it moves it takes turns in the lane it will move
                // to; on the lane, in the one it runs in.
                let lane = match progress.fair.load(Ordering::Relaxed) {
                    true => &lane.fair,
                    false => lane.lane_for(&progress),
                };
                let _waiting = Waiting::start(lane);
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
                let turn = match bound {
                    Some(d) => tokio::time::timeout_at(d.into(), turn).await.ok().flatten(),
                    None => turn.await,
                };
                *lock(&progress.turn) = turn;
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
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn thread_name() -> Option<String> {
        std::thread::current().name().map(str::to_owned)
    }

    /// Where a call that turns long runs: the thread it started on, the
    /// thread it ended on, and the latter's scheduling class and nice value.
    /// An account that has used more than its part of the CPU on `lane`.
    fn over_its_part(lane: &LongLane) -> Arc<CpuUse> {
        let (flooder, other) = (AccountTurn::default(), AccountTurn::default());
        lane.meter.record(&flooder.cpu, Duration::from_millis(100));
        lane.meter.record(&other.cpu, Duration::from_millis(1));
        flooder.cpu
    }

    /// Where a call of an account over its part that turns long runs.
    async fn run_turning_long(
        priority: LanePriority,
    ) -> (Option<String>, Option<String>, i32, Option<i32>) {
        let lane = LongLane::new(1, priority);
        let progress = Arc::new(Progress {
            account: Some(over_its_part(&lane)),
            ..Progress::default()
        });
        let flag = Arc::clone(&progress);
        let call = Box::pin(async move {
            tokio::task::yield_now().await;
            let quick = thread_name();
            flag.long.store(true, Ordering::Relaxed);
            tokio::task::yield_now().await;
            // SAFETY: no arguments but the calling thread's pid 0.
            let class = unsafe { libc::sched_getscheduler(0) };
            let nice = rustix::process::getpriority_process(None).ok();
            (quick, thread_name(), class, nice)
        });
        lane.run(&progress, false, call)
            .await
            .expect("the call ends")
    }

    #[tokio::test]
    async fn a_call_moves_to_the_lane_threads_once_it_is_long_and_runs_at_idle_priority() {
        let (quick, long_on, class, _) = run_turning_long(LanePriority::default()).await;
        assert_ne!(
            quick.as_deref(),
            Some("toolgate-long"),
            "a quick call stays where it is"
        );
        assert_eq!(long_on.as_deref(), Some("toolgate-long"));
        if cfg!(target_os = "linux") {
            assert_eq!(class, libc::SCHED_IDLE, "lane thread's scheduling class");
        }
    }

    /// The lane a long call of `account` would run in now.
    fn lane_name(lane: &LongLane, account: Option<&AccountTurn>) -> &'static str {
        let progress = Progress {
            account: account.map(|a| Arc::clone(&a.cpu)),
            ..Progress::default()
        };
        if std::ptr::eq(lane.lane_for(&progress), &lane.fair) {
            "fair"
        } else {
            "low"
        }
    }

    #[test]
    fn an_account_over_its_part_of_the_cpu_runs_long_calls_low_and_one_within_it_fair() {
        let lane = LongLane::new(1, LanePriority::default());
        let (flooder, bystander) = (AccountTurn::default(), AccountTurn::default());
        assert_eq!(lane_name(&lane, Some(&flooder)), "fair", "nothing run yet");
        assert_eq!(lane_name(&lane, None), "fair", "a call of no account");
        for _ in 0..100 {
            lane.meter.record(&flooder.cpu, Duration::from_millis(5));
        }
        assert_eq!(
            lane_name(&lane, Some(&flooder)),
            "fair",
            "alone, an account's part is all of it"
        );
        lane.meter.record(&bystander.cpu, Duration::from_millis(3));
        assert_eq!(lane_name(&lane, Some(&flooder)), "low", "500 ms of 503");
        assert_eq!(lane_name(&lane, Some(&bystander)), "fair", "3 ms of 503");
        assert_eq!(
            lane_name(&lane, Some(&AccountTurn::default())),
            "fair",
            "an account that ran nothing lately"
        );
    }

    #[tokio::test]
    async fn a_long_call_of_an_account_within_its_part_runs_on_the_fair_threads_at_normal_priority()
    {
        let lane = LongLane::new(1, LanePriority::default());
        let account = AccountTurn::default();
        let progress = Arc::new(Progress {
            account: Some(Arc::clone(&account.cpu)),
            ..Progress::default()
        });
        let call = Box::pin(async move {
            // SAFETY: no arguments but the calling thread's pid 0.
            let class = unsafe { libc::sched_getscheduler(0) };
            (thread_name(), class)
        });
        let (on, class) = lane
            .run(&progress, true, call)
            .await
            .expect("the call ends");
        assert_eq!(on.as_deref(), Some(FAIR_THREADS));
        if cfg!(target_os = "linux") {
            assert_eq!(class, libc::SCHED_OTHER, "fair thread's scheduling class");
        }
    }

    #[tokio::test]
    async fn a_lane_at_a_nice_value_runs_long_calls_in_the_normal_class_at_that_value() {
        let (_, long_on, class, nice) = run_turning_long(LanePriority::Nice(10)).await;
        assert_eq!(long_on.as_deref(), Some("toolgate-long"));
        if cfg!(target_os = "linux") {
            assert_eq!(class, libc::SCHED_OTHER, "lane thread's scheduling class");
            // At least this low: a process already below it stays there.
            assert!(
                nice.is_some_and(|p| p >= 10),
                "lane thread priority {nice:?}"
            );
        }
    }

    #[test]
    fn a_lane_priority_is_idle_or_a_nice_value_from_0_to_19() {
        assert_eq!("idle".parse(), Ok(LanePriority::Idle));
        assert_eq!("0".parse(), Ok(LanePriority::Nice(0)));
        assert_eq!("19".parse(), Ok(LanePriority::Nice(19)));
        for bad in ["20", "-1", "low", ""] {
            let e = bad.parse::<LanePriority>().expect_err(bad);
            assert!(e.contains("idle") && e.contains("0 to 19"), "{e}");
        }
        assert_eq!(LanePriority::Nice(7).to_string(), "7");
        assert_eq!(LanePriority::Idle.to_string(), "idle");
    }

    #[tokio::test]
    async fn dropping_the_caller_stops_a_long_call_on_the_lane() {
        let lane = LongLane::new(1, LanePriority::default());
        let long = Arc::new(Progress {
            long: AtomicBool::new(true),
            ..Progress::default()
        });
        let spins = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&spins);
        let on_lane = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&on_lane);
        let dropped = Arc::new(AtomicBool::new(false));
        let holds = Dropped(Arc::clone(&dropped));
        let call = Box::pin(async move {
            let _holds = holds;
            loop {
                counted.fetch_add(1, Ordering::Relaxed);
                if thread_name().as_deref() == Some(FAIR_THREADS) {
                    seen.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        // Until it has spun on the lane's threads (60 s: a hang guard), then
        // the caller drops it.
        let ran = async {
            while !on_lane.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        let raced = tokio::time::timeout(Duration::from_secs(60), async {
            tokio::select! {
                _ = lane.run(&long, false, call) => false,
                () = ran => true,
            }
        });
        assert_eq!(
            raced.await,
            Ok(true),
            "it ran on the lane, and never ended by itself"
        );
        assert!(spins.load(Ordering::Relaxed) > 0, "it ran");
        // The lane drops the call: what it holds is let go, and it spins no
        // more.
        let released = tokio::time::timeout(Duration::from_secs(60), async {
            while !dropped.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        assert!(released.await.is_ok(), "it was never dropped");
        let after_drop = spins.load(Ordering::Relaxed);
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(
            spins.load(Ordering::Relaxed),
            after_drop,
            "it stopped when dropped"
        );
    }

    /// Sets its flag when dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn a_long_call_that_gets_no_cpu_on_the_lane_is_given_up_just_past_its_deadline() {
        let lane = LongLane::new(1, LanePriority::Nice(0));
        // The lane's one thread is busy (as with every core taken by
        // threads of a higher class): a call moved there cannot run, not
        // even to notice its deadline.
        let (free, busy_until_freed) = std::sync::mpsc::channel::<()>();
        let Some(threads) = &lane.fair.threads.0 else {
            panic!("the lane's threads start")
        };
        threads.spawn(async move {
            let _ = busy_until_freed.recv_timeout(Duration::from_secs(60));
        });
        let deadline = Instant::now() + Duration::from_millis(50);
        let progress = Arc::new(Progress {
            bound: Some(deadline),
            long: AtomicBool::new(true),
            ..Progress::default()
        });
        let dropped = Arc::new(AtomicBool::new(false));
        let holds = Dropped(Arc::clone(&dropped));
        let call = Box::pin(async move {
            let _holds = holds;
            std::future::pending::<()>().await;
        });
        let answer =
            tokio::time::timeout(Duration::from_secs(60), lane.run(&progress, false, call)).await;
        assert_eq!(answer, Ok(Err(Unfinished::Overdue)));
        assert_eq!(lane.usage().overdue, 1, "counted");
        assert!(
            Instant::now() >= deadline + OVERDUE,
            "given up only once overdue"
        );
        assert!(
            !dropped.load(Ordering::Relaxed),
            "what the call holds stays held until the lane drops it"
        );
        free.send(()).expect("the busy task waits");
        let released = tokio::time::timeout(Duration::from_secs(60), async {
            while !dropped.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        assert!(
            released.await.is_ok(),
            "the lane dropped the call once free"
        );
    }

    /// A call of `polls` polls, each doing `work`, then answering where it
    /// ended.
    fn polled_call(polls: u32, work: fn()) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> {
        let mut left = polls;
        Box::pin(std::future::poll_fn(move |cx| {
            work();
            left = left.saturating_sub(1);
            if left == 0 {
                return Poll::Ready(thread_name());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }))
    }

    #[tokio::test]
    async fn a_call_kept_off_the_cpu_in_its_polls_does_not_turn_long() {
        let lane = LongLane::new(1, LanePriority::Nice(0));
        let progress = Arc::new(Progress::default());
        // 24 ms inside its polls by the wall clock, as a call preempted on
        // a busy host spends them; next to no CPU time.
        let call = polled_call(8, || std::thread::sleep(Duration::from_millis(3)));
        let started = Instant::now();
        let ended_on = lane
            .run(&progress, false, call)
            .await
            .expect("the call ends");
        let wall = started.elapsed();
        assert_ne!(ended_on.as_deref(), Some(FAIR_THREADS));
        assert!(!progress.long.load(Ordering::Relaxed));
        // Its run time is what it spent on the CPU (1 ms by the wall clock
        // at most, then the CPU clock), not the 24 ms (or more, on a busy
        // machine) it was kept off it: compared with its wall time.
        assert!(
            progress.run_time() * 2 < wall,
            "run time {:?} of {wall:?}",
            progress.run_time()
        );
    }

    #[tokio::test]
    async fn a_call_busy_on_the_cpu_in_its_polls_turns_long() {
        let lane = LongLane::new(1, LanePriority::Nice(0));
        let progress = Arc::new(Progress::default());
        let spin = || {
            let start = thread_cpu_time();
            while thread_cpu_time().saturating_sub(start) < Duration::from_millis(2) {}
        };
        let ended_on = lane
            .run(&progress, false, polled_call(8, spin))
            .await
            .expect("the call ends");
        assert_eq!(ended_on.as_deref(), Some(FAIR_THREADS));
    }

    #[tokio::test]
    async fn a_call_expected_long_starts_on_the_lane_and_a_quick_one_did_not_run_long() {
        let lane = LongLane::new(1, LanePriority::Nice(0));
        let progress = Arc::new(Progress::default());
        let ended_on = lane
            .run(&progress, true, polled_call(1, || {}))
            .await
            .expect("the call ends");
        assert_eq!(ended_on.as_deref(), Some(FAIR_THREADS), "its only poll");
        assert!(progress.long.load(Ordering::Relaxed), "it takes turns");
        assert!(!progress.ran_long(), "it did not run long");
        // Its polls are clocked on the lane too.
        let progress = Arc::new(Progress::default());
        let spin = || {
            let start = thread_cpu_time();
            while thread_cpu_time().saturating_sub(start) < Duration::from_millis(2) {}
        };
        lane.run(&progress, true, polled_call(8, spin))
            .await
            .expect("the call ends");
        assert!(progress.ran_long(), "16 ms of CPU in its polls");
    }

    #[test]
    fn a_habit_expects_long_calls_for_a_while_after_one() {
        let habit = Habit::default();
        assert!(!habit.expects_long());
        habit.record(false);
        assert!(!habit.expects_long(), "quick calls alone: never");
        habit.record(true);
        for _ in 0..REMEMBERED {
            assert!(habit.expects_long());
            habit.record(false);
        }
        assert!(!habit.expects_long(), "{REMEMBERED} quick calls later");
        habit.record(true);
        for _ in 1..REMEMBERED {
            habit.record(false);
        }
        habit.record(true);
        for _ in 1..REMEMBERED {
            habit.record(false);
        }
        assert!(
            habit.expects_long(),
            "every long call starts the count again"
        );
    }

    /// Tells where it was dropped: the thread's name and scheduling class.
    struct TellsWhere(std::sync::mpsc::Sender<(Option<String>, i32)>);

    impl Drop for TellsWhere {
        fn drop(&mut self) {
            // SAFETY: no arguments but the calling thread's pid 0.
            let class = unsafe { libc::sched_getscheduler(0) };
            let _ = self.0.send((thread_name(), class));
        }
    }

    /// Where `lane` drops a big teardown of a call of `account`.
    async fn teardown_on(lane: &LongLane, account: Option<Arc<CpuUse>>) -> (Option<String>, i32) {
        let (tx, rx) = std::sync::mpsc::channel();
        let progress = Progress {
            account,
            ..Progress::default()
        };
        lane.drop_later(&progress, TellsWhere(tx));
        tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(20)))
            .await
            .expect("joins")
            .expect("dropped")
    }

    #[tokio::test]
    async fn a_big_teardown_is_dropped_on_the_lane_thread_its_account_runs_long_calls_on() {
        let lane = LongLane::new(1, LanePriority::default());
        let (name, class) = teardown_on(&lane, Some(over_its_part(&lane))).await;
        assert_eq!(name.as_deref(), Some(LOW_THREADS));
        if cfg!(target_os = "linux") {
            assert_eq!(class, libc::SCHED_IDLE, "low teardown thread's class");
        }
        let (name, class) = teardown_on(&lane, Some(Arc::default())).await;
        assert_eq!(
            name.as_deref(),
            Some(FAIR_THREADS),
            "an account within its part"
        );
        if cfg!(target_os = "linux") {
            assert_eq!(class, libc::SCHED_OTHER, "fair teardown thread's class");
        }
    }

    /// Runs the tick of `ticks` at which its call turns long: takes a turn.
    async fn tick_long(ticks: &mut Ticks) {
        match ticks.tick(0) {
            UpdateDeadline::YieldCustom(_, take_turn) => take_turn.await,
            _ => panic!("a call past LONG_FUEL takes turns"),
        }
    }

    #[tokio::test]
    async fn a_long_call_gives_its_turn_back_when_it_ends_though_its_store_lives_on() {
        let lane = LongLane::new(1, LanePriority::Nice(0));
        let account = AccountTurn::default();
        let bound = Some(Instant::now() + Duration::from_secs(60));
        let turns = |lane: &Arc<LongLane>| {
            Ticks::new(
                Duration::from_secs(60),
                bound,
                LONG_FUEL,
                Some((lane, Some(&account))),
            )
        };
        // A call that ran long and ended, its store (and ticks) kept: an
        // instance made ahead of need, or a big teardown not yet run.
        let mut kept = turns(&lane);
        tick_long(&mut kept).await;
        assert_eq!(
            account.turn.available_permits(),
            0,
            "a long call holds its account's turn"
        );
        let progress = kept.progress();
        lane.run(&progress, false, Box::pin(async {}))
            .await
            .expect("ends");
        assert_eq!(
            account.turn.available_permits(),
            1,
            "given back when the call ended"
        );
        // Put aside without running through the lane: given back by hand.
        let mut aside = turns(&lane);
        tick_long(&mut aside).await;
        aside.progress().give_back_turn();
        // The account's next long call gets its turn at once.
        let mut next = turns(&lane);
        tokio::time::timeout(Duration::from_secs(10), tick_long(&mut next))
            .await
            .expect("the next long call of the account gets a turn");
        drop((kept, aside));
    }
}
