//! The turn invariant and the lane, tested.

use super::*;
use crate::runtime::turns::habit::REMEMBERED;
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

/// Whether this thread logs to a [`tracing_subscriber::Registry`] now.
fn logs_to_registry() -> bool {
    tracing::dispatcher::get_default(|d| d.is::<tracing_subscriber::Registry>())
}

#[tokio::test]
async fn a_call_s_log_goes_where_its_caller_s_does_on_every_thread_it_moves_to() {
    let _scoped = tracing::subscriber::set_default(tracing_subscriber::registry());
    let lane = LongLane::new(1, LanePriority::default());
    let progress = Arc::new(Progress {
        account: Some(over_its_part(&lane)),
        ..Progress::default()
    });
    let flag = Arc::clone(&progress);
    let call = Box::pin(async move {
        let before = (thread_name(), logs_to_registry());
        flag.long.store(true, Ordering::Relaxed);
        tokio::task::yield_now().await;
        (before, (thread_name(), logs_to_registry()))
    });
    let (before, after) = lane.run(&progress, false, call).await.expect("ends");
    assert!(before.1, "on the caller's thread");
    assert_eq!(after.0.as_deref(), Some(LOW_THREADS), "it moved");
    assert!(after.1, "on the lane's thread too");

    let (tx, rx) = tokio::sync::oneshot::channel();
    lane.after_answer(async move {
        drop(tx.send((thread_name(), logs_to_registry())));
    });
    let shadow = rx.await.expect("the shadow run runs");
    assert_eq!(shadow, (Some(SHADOW_THREADS.to_owned()), true));

    struct OnDrop(Option<tokio::sync::oneshot::Sender<bool>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(logs_to_registry());
            }
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    lane.drop_later(&progress, OnDrop(Some(tx)));
    assert!(rx.await.expect("dropped"), "a teardown's too");
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
async fn a_long_call_of_an_account_within_its_part_runs_on_the_fair_threads_at_normal_priority() {
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
