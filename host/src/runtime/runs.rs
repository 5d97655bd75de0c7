//! Per-run lanes of background work: what lifecycle observations ride on.
//!
//! Work for one run (a tenant's run id) is done in the order it was
//! queued, one item at a time, on a task of its own that lives while the
//! run has work queued; different runs' lanes run side by side. A caller
//! queues and returns at once. [`RunLanes::wait`] lets a decision of the
//! run wait until everything queued for it before it has finished — up to
//! a bound, so a slow lane costs a decision at most that bound.
//!
//! Bounded: at most [`RUN_QUEUE_LIMIT`] items wait per run and
//! [`TOTAL_QUEUE_LIMIT`] in all; an item past either is dropped and
//! counted.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

/// Items that may wait in one run's lane; the next is dropped (counted).
pub const RUN_QUEUE_LIMIT: usize = 1024;

/// Items that may wait in all lanes together; the next is dropped
/// (counted).
pub const TOTAL_QUEUE_LIMIT: usize = 65_536;

/// One item of work.
pub(crate) type Work = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A lane's key: the tenant (`""`: none) and the run id.
type Key = (Arc<str>, String);

/// One run's lane.
struct Lane {
    queue: VecDeque<Work>,
    /// Items queued since the lane opened.
    queued: u64,
    /// Items finished since the lane opened, published.
    done: watch::Sender<u64>,
}

/// Why an item was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its run already has [`RUN_QUEUE_LIMIT`] items waiting, or all lanes
    /// [`TOTAL_QUEUE_LIMIT`].
    Full,
    /// Not called from within a tokio runtime: nothing could run it.
    NoRuntime,
}

/// What the lanes have done since the engine started.
#[derive(Debug, Default)]
struct Counts {
    finished: AtomicU64,
    faults: AtomicU64,
    dropped: AtomicU64,
    waits_expired: AtomicU64,
}

/// Every run's lane.
#[derive(Default)]
pub(crate) struct RunLanes {
    lanes: Mutex<HashMap<Key, Lane>>,
    /// Items waiting in all lanes.
    waiting: AtomicU64,
    counts: Counts,
}

impl std::fmt::Debug for RunLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLanes")
            .field("waiting", &self.waiting.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RunLanes {
    fn lanes(&self) -> MutexGuard<'_, HashMap<Key, Lane>> {
        // A panic while holding the lock leaves the map consistent (every
        // update is one insert, push or remove).
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `work` in the lane of `tenant`'s run `run`, behind what is
    /// queued there; a lane with nothing running gets a task. Returns at
    /// once.
    pub(crate) fn push(
        self: &Arc<Self>,
        tenant: &Arc<str>,
        run: &str,
        work: Work,
    ) -> Result<(), Refused> {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return Err(Refused::NoRuntime);
        };
        let key: Key = (Arc::clone(tenant), run.to_string());
        let mut lanes = self.lanes();
        let waiting = usize::try_from(self.waiting.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let start = match lanes.get_mut(&key) {
            Some(lane) if lane.queue.len() >= RUN_QUEUE_LIMIT || waiting >= TOTAL_QUEUE_LIMIT => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(Refused::Full);
            }
            Some(lane) => {
                lane.queue.push_back(work);
                lane.queued += 1;
                false
            }
            None if waiting >= TOTAL_QUEUE_LIMIT => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(Refused::Full);
            }
            None => {
                lanes.insert(
                    key.clone(),
                    Lane {
                        queue: VecDeque::from([work]),
                        queued: 1,
                        done: watch::Sender::new(0),
                    },
                );
                true
            }
        };
        self.waiting.fetch_add(1, Ordering::Relaxed);
        drop(lanes);
        if start {
            let lanes = Arc::clone(self);
            rt.spawn(async move { lanes.drain(key).await });
        }
        Ok(())
    }

    /// Runs a lane's items in order until it is empty, then closes it.
    async fn drain(&self, key: Key) {
        loop {
            let next = {
                let mut lanes = self.lanes();
                let Some(lane) = lanes.get_mut(&key) else {
                    return;
                };
                match lane.queue.pop_front() {
                    Some(work) => work,
                    None => {
                        lanes.remove(&key);
                        return;
                    }
                }
            };
            // Each item on a task of its own: one that panics (a host bug,
            // not a guest fault: those are values) is counted and logged,
            // and the lane goes on with the next.
            if let Err(e) = tokio::spawn(next).await {
                self.count_fault();
                tracing::error!(
                    tenant = %key.0,
                    run = %key.1,
                    "a lifecycle observation panicked; skipped, the run's lane goes on: {e}"
                );
            }
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            self.counts.finished.fetch_add(1, Ordering::Relaxed);
            if let Some(lane) = self.lanes().get(&key) {
                lane.done.send_modify(|done| *done += 1);
            }
        }
    }

    /// Waits until every item queued for `tenant`'s run `run` before this
    /// call has finished, or `bound` has passed (counted as an expired
    /// wait); at once when nothing is queued for it. `true` if it did not
    /// have to give up.
    pub(crate) async fn wait(&self, tenant: &str, run: &str, bound: Duration) -> bool {
        let (target, mut done) = {
            let lanes = self.lanes();
            let Some(lane) = lanes.get(&(Arc::from(tenant), run.to_string())) else {
                return true;
            };
            (lane.queued, lane.done.subscribe())
        };
        // A lane that closes has finished everything (a closed channel).
        let finished = tokio::time::timeout(bound, done.wait_for(|&d| d >= target)).await;
        if finished.is_err() {
            self.counts.waits_expired.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                tenant,
                run,
                bound_ms = bound.as_millis() as u64,
                "a decision waited its bound for the run's lifecycle observations and went on \
                 without the rest"
            );
            return false;
        }
        true
    }

    /// Items finished since the engine started.
    pub(crate) fn finished(&self) -> u64 {
        self.counts.finished.load(Ordering::Relaxed)
    }

    /// Counts one fault of the work (a guard call that faulted).
    pub(crate) fn count_fault(&self) {
        self.counts.faults.fetch_add(1, Ordering::Relaxed);
    }

    /// Faults counted since the engine started.
    pub(crate) fn faults(&self) -> u64 {
        self.counts.faults.load(Ordering::Relaxed)
    }

    /// Items dropped since the engine started (a lane full).
    pub(crate) fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Decisions that gave up waiting for their run's lane.
    pub(crate) fn waits_expired(&self) -> u64 {
        self.counts.waits_expired.load(Ordering::Relaxed)
    }

    /// Items waiting now, in all lanes.
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[tokio::test]
    async fn an_item_that_panics_is_counted_and_the_lane_goes_on() {
        let lanes = Arc::new(RunLanes::default());
        let tenant: Arc<str> = Arc::from("t");
        let ran = Arc::new(AtomicBool::new(false));
        let after = Arc::clone(&ran);
        lanes
            .push(&tenant, "r", Box::pin(async { panic!("a host bug") }))
            .expect("queued");
        lanes
            .push(
                &tenant,
                "r",
                Box::pin(async move { after.store(true, Ordering::SeqCst) }),
            )
            .expect("queued");
        assert!(lanes.wait("t", "r", Duration::from_secs(30)).await);
        assert!(ran.load(Ordering::SeqCst), "the item after the panic ran");
        assert_eq!(lanes.faults(), 1);
        assert_eq!(lanes.finished(), 2);
        assert_eq!(lanes.waiting(), 0);
        // The lane closed: a new item opens a new one and runs.
        let again = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&again);
        lanes
            .push(
                &tenant,
                "r",
                Box::pin(async move { flag.store(true, Ordering::SeqCst) }),
            )
            .expect("queued");
        assert!(lanes.wait("t", "r", Duration::from_secs(30)).await);
        assert!(again.load(Ordering::SeqCst));
    }
}
