//! An account: one bounded share of requests, instances and memory, and
//! what it lends now.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::MIB;
use super::pace::{LogBudget, Pace, Rate};
use crate::runtime::turns::AccountTurn;

/// One bounded share of instances and memory, charged by every guard call
/// made on its behalf.
#[derive(Debug)]
pub struct Account {
    name: String,
    pub(super) global: bool,
    lends: Lends,
    requests: Arc<Semaphore>,
    pace: Option<Pace>,
    instances: Arc<Semaphore>,
    memory: Arc<Semaphore>,
    wait: Duration,
    refused: AtomicU64,
    busy: AtomicU64,
    over_rate: AtomicU64,
    log: Option<LogBudget>,
    turn: AccountTurn,
}

/// What an [`Account`] lends at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lends {
    /// Requests in progress at once.
    pub requests: u32,
    /// The rate requests may start at (`None`: any).
    pub rate: Option<Rate>,
    /// Guard instances alive at once.
    pub instances: u32,
    /// Memory committed at once, MiB.
    pub memory_mib: u64,
    /// Guest log written a second, KiB (0: any).
    pub log_kib_per_s: u32,
}

/// A request refused because its account had no place for it in time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{account}` {why}; retry later")]
pub struct Busy {
    /// `global`, or the tenant's name.
    pub account: String,
    /// Which of the account's limits refused it.
    pub why: OverLimit,
}

/// The limit a [`Busy`] request ran into.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    /// Its requests in progress: none gave its place back in time.
    #[error(
        "has {max} requests in progress and this one waited {waited_ms} ms for a place \
         ([shares] {key})"
    )]
    Requests {
        /// Its requests in progress at once.
        max: u32,
        /// How long the request waited.
        waited_ms: u128,
        /// The `[shares]` key that sets `max`.
        key: &'static str,
    },
    /// Its rate: the request's turn was further away than it may wait.
    #[error(
        "may start {} requests a second ({} at once): this one's turn was {turn_ms} ms away, \
         more than the {waited_ms} ms it waited ([shares] tenant_rate, or its own in \
         [shares.tenants])",
        rate.per_s,
        rate.burst
    )]
    Rate {
        /// The account's rate.
        rate: Rate,
        /// How far away its turn was when it came.
        turn_ms: u128,
        /// How long the request waited before it was refused.
        waited_ms: u128,
    },
}

/// A request's place in its account; given back when dropped.
#[derive(Debug)]
pub struct Place {
    _permit: OwnedSemaphorePermit,
}

/// What an [`Account`] has lent now, and what it may lend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Instances alive now.
    pub instances: u32,
    /// The most instances it may have alive.
    pub instances_max: u32,
    /// Memory committed now, MiB.
    pub memory_mib: u32,
    /// The most memory it may commit, MiB.
    pub memory_mib_max: u32,
    /// Calls refused (`share-exhausted`) since the account was made.
    pub refused: u64,
    /// Requests in progress now.
    pub requests: u32,
    /// The most requests it may have in progress.
    pub requests_max: u32,
    /// Requests refused since the account was made because none of its
    /// places came free in time.
    pub busy: u64,
    /// Requests it may start a second (0: any).
    pub rate_per_s: u32,
    /// Requests refused since the account was made because their turn at
    /// its rate was too far away.
    pub over_rate: u64,
    /// Guest log its calls may write a second, KiB (0: any).
    pub log_kib_per_s: u32,
    /// Guest log dropped since the account was made, over that budget,
    /// bytes.
    pub log_dropped_bytes: u64,
}

/// Permits held by one admitted call; given back when dropped.
#[derive(Debug)]
pub struct Admission {
    _instance: OwnedSemaphorePermit,
    _memory: OwnedSemaphorePermit,
}

impl Account {
    /// An account named `name` lending at most `lends`, making a call (or
    /// a request) wait at most `wait` for its part.
    pub fn new(name: &str, lends: Lends, wait: Duration) -> Account {
        let Lends {
            requests,
            rate,
            instances,
            memory_mib,
            log_kib_per_s,
        } = lends;
        Account {
            name: name.into(),
            global: false,
            lends,
            requests: Arc::new(Semaphore::new(requests as usize)),
            pace: rate.map(Pace::new),
            instances: Arc::new(Semaphore::new(instances as usize)),
            memory: Arc::new(Semaphore::new(
                usize::try_from(memory_mib.min(u64::from(u32::MAX))).unwrap_or(usize::MAX),
            )),
            wait,
            refused: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            over_rate: AtomicU64::new(0),
            log: (log_kib_per_s > 0).then(|| LogBudget::new(u64::from(log_kib_per_s) << 10)),
            turn: AccountTurn::default(),
        }
    }

    /// The memory it lends, MiB, as its semaphore counts it.
    fn memory_mib(&self) -> u32 {
        u32::try_from(self.lends.memory_mib).unwrap_or(u32::MAX)
    }

    /// `global`, or the tenant's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tenant whose account it is; `None` for the global account (a
    /// tenant may be named `global` too).
    pub fn tenant(&self) -> Option<&str> {
        (!self.global).then_some(self.name.as_str())
    }

    /// Whether this account lends `lends` and waits `wait`.
    pub(crate) fn matches(&self, lends: Lends, wait: Duration) -> bool {
        self.lends == lends && self.wait == wait
    }

    /// A place for one request: its turn at the account's rate, then a
    /// place among its requests in progress, in order of arrival, waiting
    /// at most the account's `wait` for both. `key` names the `[shares]`
    /// key of the requests' limit, for the error.
    pub async fn enter(&self, key: &'static str) -> Result<Place, Busy> {
        let start = Instant::now();
        if let Some(pace) = &self.pace {
            match pace.take(start, self.wait) {
                Ok(turn) if turn > start => tokio::time::sleep_until(turn.into()).await,
                Ok(_) => {}
                Err(away) => {
                    // Refused only after the whole wait: a flooder that
                    // retries at once would otherwise spin on refusals.
                    tokio::time::sleep(self.wait).await;
                    self.over_rate.fetch_add(1, Ordering::Relaxed);
                    return Err(self.refusal(OverLimit::Rate {
                        rate: pace.rate,
                        turn_ms: away.as_millis(),
                        waited_ms: start.elapsed().as_millis(),
                    }));
                }
            }
        }
        let permit = match Arc::clone(&self.requests).try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(_) => {
                let wait = self.wait.saturating_sub(start.elapsed());
                let permit = tokio::time::timeout(wait, Arc::clone(&self.requests).acquire_owned())
                    .await
                    .map_err(drop)
                    .and_then(|r| r.map_err(drop));
                // The request that gave the place back woke this one into
                // its thread's next slot (tokio's LIFO slot): go to the
                // back of the queue instead, or a tenant handing places
                // from one of its requests to the next would run ahead of
                // everyone else's work.
                tokio::task::yield_now().await;
                permit
            }
        };
        match permit {
            Ok(p) => Ok(Place { _permit: p }),
            Err(()) => {
                self.busy.fetch_add(1, Ordering::Relaxed);
                Err(self.refusal(OverLimit::Requests {
                    max: self.lends.requests,
                    waited_ms: start.elapsed().as_millis(),
                    key,
                }))
            }
        }
    }

    fn refusal(&self, why: OverLimit) -> Busy {
        Busy {
            account: self.name.clone(),
            why,
        }
    }

    /// Whether a guest may write `bytes` more of log now, within the
    /// account's log budget; a line that may not is counted as dropped (and
    /// the first in a while logged, naming the account).
    pub(crate) fn may_log(&self, bytes: usize) -> bool {
        self.log
            .as_ref()
            .is_none_or(|budget| budget.spend(&self.name, bytes, Instant::now()))
    }

    /// This account's place in the long-call lane.
    pub fn turn(&self) -> &AccountTurn {
        &self.turn
    }

    /// What is lent now.
    pub fn usage(&self) -> Usage {
        let free = |s: &Semaphore| u32::try_from(s.available_permits()).unwrap_or(u32::MAX);
        Usage {
            instances: self.lends.instances.saturating_sub(free(&self.instances)),
            instances_max: self.lends.instances,
            memory_mib: self.memory_mib().saturating_sub(free(&self.memory)),
            memory_mib_max: self.memory_mib(),
            refused: self.refused.load(Ordering::Relaxed),
            requests: self.lends.requests.saturating_sub(free(&self.requests)),
            requests_max: self.lends.requests,
            busy: self.busy.load(Ordering::Relaxed),
            rate_per_s: self.lends.rate.map_or(0, |r| r.per_s),
            over_rate: self.over_rate.load(Ordering::Relaxed),
            log_kib_per_s: self.lends.log_kib_per_s,
            log_dropped_bytes: self
                .log
                .as_ref()
                .map_or(0, |b| b.dropped.load(Ordering::Relaxed)),
        }
    }

    /// Takes one instance and `memory_bytes` (rounded up to MiB) for one
    /// call, waiting at most the account's `wait`; the error says what ran
    /// out.
    pub async fn admit(&self, memory_bytes: usize) -> Result<Admission, String> {
        let mib = u32::try_from((memory_bytes as u64).div_ceil(MIB).max(1)).unwrap_or(u32::MAX);
        if mib > self.memory_mib() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(format!(
                "the call needs {mib} MiB, more than the whole memory share of `{}` ({} MiB)",
                self.name,
                self.memory_mib()
            ));
        }
        let deadline = Instant::now() + self.wait;
        let instance = match Arc::clone(&self.instances).try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(_) => tokio::time::timeout_at(
                deadline.into(),
                Arc::clone(&self.instances).acquire_owned(),
            )
            .await
            .map_err(drop)
            .and_then(|r| r.map_err(drop)),
        };
        let Ok(instance) = instance else {
            return Err(self.refuse(format!(
                "all {} instances of `{}`'s share are busy",
                self.lends.instances, self.name
            )));
        };
        let memory = match Arc::clone(&self.memory).try_acquire_many_owned(mib) {
            Ok(p) => Ok(p),
            Err(_) => tokio::time::timeout_at(
                deadline.into(),
                Arc::clone(&self.memory).acquire_many_owned(mib),
            )
            .await
            .map_err(drop)
            .and_then(|r| r.map_err(drop)),
        };
        let Ok(memory) = memory else {
            return Err(self.refuse(format!(
                "`{}`'s memory share ({} MiB) cannot commit {mib} MiB more",
                self.name,
                self.memory_mib()
            )));
        };
        Ok(Admission {
            _instance: instance,
            _memory: memory,
        })
    }

    fn refuse(&self, why: String) -> String {
        self.refused.fetch_add(1, Ordering::Relaxed);
        format!("{why} (waited {} ms)", self.wait.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lends(instances: u32, memory_mib: u64) -> Lends {
        Lends {
            requests: 4,
            rate: None,
            instances,
            memory_mib,
            log_kib_per_s: 0,
        }
    }

    #[tokio::test]
    async fn requests_wait_their_turn_then_are_refused_as_busy() {
        let account = Arc::new(Account::new(
            "a",
            Lends {
                requests: 1,
                rate: None,
                instances: 1,
                memory_mib: 1,
                log_kib_per_s: 0,
            },
            Duration::from_millis(300),
        ));
        let first = account.enter("tenant_requests").await.expect("first");
        assert_eq!(account.usage().requests, 1);
        let waiter = tokio::spawn({
            let account = Arc::clone(&account);
            async move { account.enter("tenant_requests").await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        waiter.await.expect("task").expect("entered once freed");
        let _held = account.enter("tenant_requests").await.expect("again");
        let busy = account.enter("tenant_requests").await.expect_err("full");
        assert_eq!(busy.account, "a");
        let OverLimit::Requests { waited_ms, .. } = busy.why else {
            panic!("{busy}")
        };
        assert!(waited_ms >= 300, "{busy}");
        assert!(busy.to_string().contains("tenant_requests"), "{busy}");
        assert_eq!(account.usage().busy, 1);
    }

    #[tokio::test]
    async fn memory_is_bounded_by_the_share() {
        let account = Account::new("a", lends(8, 256), Duration::from_millis(5));
        let a = account.admit(128 << 20).await.expect("first");
        let b = account.admit(100 << 20).await.expect("second");
        assert_eq!(account.usage().memory_mib, 228);
        let err = account.admit(64 << 20).await.expect_err("over the share");
        assert!(err.contains("memory share"), "{err}");
        assert_eq!(account.usage().refused, 1);
        drop((a, b));
        assert_eq!(account.usage().memory_mib, 0);
        assert_eq!(account.usage().instances, 0);
    }

    #[tokio::test]
    async fn instances_are_bounded_and_a_waiter_gets_a_freed_one() {
        let account = Arc::new(Account::new("a", lends(1, 64), Duration::from_millis(500)));
        let held = account.admit(1 << 20).await.expect("first");
        let waiter = tokio::spawn({
            let account = Arc::clone(&account);
            async move { account.admit(1 << 20).await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        waiter.await.expect("task").expect("admitted once freed");
    }
}
