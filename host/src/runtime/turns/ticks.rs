//! The deadline callback: a call's turns, tick by tick.

use super::*;

/// The turns one long call holds for its current slice.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) _account: Option<OwnedSemaphorePermit>,
    pub(super) _lane: OwnedSemaphorePermit,
}

/// The deadline callback's state for one call: the fuel it started with,
/// the lane it takes turns in, and what it shares with its caller (its
/// deadline, the turn it holds).
pub(crate) struct Ticks {
    pub(super) fuel: u64,
    pub(super) lane: Option<(Arc<LongLane>, Option<Arc<Semaphore>>)>,
    pub(super) progress: Arc<Progress>,
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
