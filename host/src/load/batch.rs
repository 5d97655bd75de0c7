//! Swapping in many directories' loads at once: a group commit.
//!
//! Every swap builds a whole new plugin set, a cost that grows with the
//! number of tenants. Swapped one by one, a start-up with N tenants (each
//! going live as soon as it is loaded) costs N builds of up to N tenants:
//! quadratic. A [`Batch`] gathers the loads that finish close together and
//! swaps them in with one build: the first load to finish *leads* — it
//! waits a little (no longer than the last build took, times
//! [`PACE`], at most [`MOST_WAIT`], and not at all when no build ran
//! lately), takes every load queued by then, and publishes them in one
//! build; the loads that joined wait until their turn is published. The
//! builds then take at most about a `1 / (PACE + 1)` part of the time,
//! however many tenants finish loading, and a lone change is published
//! at once.
//!
//! A leader whose caller stops waiting (a dropped reload) hands the lead
//! to the next waiter; its load is published with theirs.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How many times its own cost a build waits after the last one.
pub(crate) const PACE: u32 = 4;

/// The longest a load waits for others to join its batch.
pub(crate) const MOST_WAIT: Duration = Duration::from_millis(250);

/// Loads waiting to be swapped in together, of type `T`.
pub(crate) struct Batch<T> {
    state: Mutex<State<T>>,
    /// Bumped whenever a batch is published or a leader gives up.
    changed: watch::Sender<()>,
}

struct State<T> {
    queued: Vec<T>,
    /// Tickets handed out; the queue holds those after `published`.
    issued: u64,
    published: u64,
    leading: bool,
    /// When the last build ended and what it took.
    last: Option<(Instant, Duration)>,
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Batch {
            state: Mutex::new(State {
                queued: Vec::new(),
                issued: 0,
                published: 0,
                leading: false,
                last: None,
            }),
            changed: watch::Sender::new(()),
        }
    }
}

/// Clears the lead when the leader stops (done or dropped), waking the
/// waiters.
struct Lead<'a, T>(&'a Batch<T>);

impl<T> Drop for Lead<'_, T> {
    fn drop(&mut self) {
        self.0.lock().leading = false;
        self.0.changed.send_replace(());
    }
}

impl<T> Batch<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` and returns once it has been published: by this
    /// caller, leading a batch (`publish` gets every item queued by then,
    /// in the order queued), or by another caller's batch.
    pub(crate) async fn publish(&self, item: T, publish: impl Fn(Vec<T>)) {
        let mut changed = self.changed.subscribe();
        let ticket = {
            let mut state = self.lock();
            state.queued.push(item);
            state.issued += 1;
            state.issued
        };
        loop {
            let wait = {
                let mut state = self.lock();
                if state.published >= ticket {
                    return;
                }
                if state.leading {
                    None
                } else {
                    state.leading = true;
                    Some(state.last.map_or(Duration::ZERO, |(at, took)| {
                        (took * PACE).min(MOST_WAIT).saturating_sub(at.elapsed())
                    }))
                }
            };
            let Some(wait) = wait else {
                // Another leads: wait for its batch, or for it to give up.
                let _ = changed.changed().await;
                continue;
            };
            let lead = Lead(self);
            // Loads finishing meanwhile join this batch.
            tokio::time::sleep(wait).await;
            tokio::task::yield_now().await;
            let (items, upto) = {
                let mut state = self.lock();
                (std::mem::take(&mut state.queued), state.issued)
            };
            let start = Instant::now();
            publish(items);
            {
                let mut state = self.lock();
                state.published = upto;
                state.last = Some((Instant::now(), start.elapsed()));
            }
            drop(lead);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Publishes into `log`, one entry per batch, taking `cost`.
    fn into(log: &Arc<Mutex<Vec<Vec<u32>>>>, cost: Duration) -> impl Fn(Vec<u32>) + use<> {
        let log = Arc::clone(log);
        move |items| {
            std::thread::sleep(cost);
            log.lock().expect("log").push(items);
        }
    }

    #[tokio::test]
    async fn a_lone_item_is_published_at_once_by_itself() {
        let batch = Batch::default();
        let log = Arc::default();
        batch.publish(1, into(&log, Duration::ZERO)).await;
        assert_eq!(*log.lock().expect("log"), vec![vec![1]]);
    }

    #[tokio::test]
    async fn items_queued_while_a_batch_waits_are_published_with_it_in_order() {
        let batch = Batch::default();
        let log = Arc::default();
        // A first build that took a while: the next leader waits for more.
        batch
            .publish(0, into(&log, Duration::from_millis(20)))
            .await;
        let all = (1..=50).map(|n| batch.publish(n, into(&log, Duration::ZERO)));
        futures_util::future::join_all(all).await;
        let log = log.lock().expect("log");
        assert_eq!(log[0], vec![0]);
        let published: Vec<u32> = log[1..].iter().flatten().copied().collect();
        assert_eq!(
            published,
            (1..=50).collect::<Vec<_>>(),
            "each once, in order"
        );
        assert!(
            log.len() < 1 + 50,
            "fewer builds than items: {} for 50",
            log.len() - 1
        );
    }

    #[tokio::test]
    async fn a_leader_dropped_while_it_waits_hands_the_lead_on() {
        let batch = Arc::new(Batch::default());
        let log = Arc::default();
        batch
            .publish(0, into(&log, Duration::from_millis(40)))
            .await;
        // The next leader waits (the last build was costly) and is dropped.
        let leader = {
            let (batch, publish) = (Arc::clone(&batch), into(&log, Duration::ZERO));
            tokio::spawn(async move { batch.publish(1, publish).await })
        };
        tokio::task::yield_now().await;
        let follower = {
            let (batch, publish) = (Arc::clone(&batch), into(&log, Duration::ZERO));
            tokio::spawn(async move { batch.publish(2, publish).await })
        };
        tokio::task::yield_now().await;
        leader.abort();
        tokio::time::timeout(Duration::from_secs(30), follower)
            .await
            .expect("the follower is not left waiting")
            .expect("joins");
        let published: Vec<u32> = log.lock().expect("log").iter().flatten().copied().collect();
        assert_eq!(published, vec![0, 1, 2], "the dropped leader's item too");
    }
}
