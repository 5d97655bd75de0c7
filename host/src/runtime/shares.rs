//! Fair shares of the host's capacity: how many guard instances, and how
//! much guard memory, each tenant (and the global chain) may have at once.
//!
//! Every guard call is charged to an [`Account`]: the account of the
//! tenant the call is made for (a tenant with a plugin directory), else the
//! global account (calls with no tenant, or for a tenant that only runs
//! global guards). The global guards a tenant's call runs are charged to
//! that tenant too, so a tenant flooding the host uses up its own share and
//! nobody else's.
//!
//! Before a guard is instantiated its call takes one instance permit and
//! `memory_bytes` worth of memory permits (in MiB, rounded up) from its
//! account; both are given back once the call's store is dropped. A call
//! that cannot get them within [`Shares::wait`] faults with
//! [`Fault::ShareExhausted`](crate::Fault::ShareExhausted) and its plugin's
//! `on_error` applies — to that call only.
//!
//! Shares are reservations, never oversubscribed: the registry checks when
//! it loads that the global share plus every tenant's share fit in the
//! engine's instance pool and in the host-wide memory budget, so the pool
//! can never be what stops a call that is within its share (see
//! [`Shares::plan`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::runtime::turns::AccountTurn;

/// One MiB.
const MIB: u64 = 1 << 20;

/// Instance slots the registry keeps out of every share, for the load-time
/// probe of a new plugin.
pub const PROBE_SLOTS: u32 = 1;

/// The operator's capacity settings. Every field documents its default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shares {
    /// Guard instances the global account may have alive at once (calls
    /// with no tenant, or for a tenant without a directory of its own).
    /// Default: 16.
    pub global_instances: u32,
    /// Memory the global account's instances may have committed at once,
    /// in MiB (each call commits its plugin's `memory_mib`). Default: 2048.
    pub global_memory_mib: u64,
    /// Guard instances one tenant's calls may have alive at once (its own
    /// guards and the global guards it runs). Default: 4.
    pub tenant_instances: u32,
    /// Memory one tenant's instances may have committed at once, in MiB.
    /// Must be at least the tenant ceiling's `memory_mib`. Default: 512.
    pub tenant_memory_mib: u64,
    /// Plugins one tenant may have: a tenant directory (or manifest) with
    /// more is not loaded (its previous plugins keep serving), before any
    /// of its components is read. Default: 16.
    pub tenant_plugins: u32,
    /// Compiled code one tenant's plugins may hold in memory together, in
    /// MiB: a tenant whose plugins compile to more is not loaded (its
    /// previous plugins keep serving). Counted in the memory budget.
    /// Default: 256 (a componentize-py guard compiles to ~43 MiB, a Rust
    /// one to ~1).
    pub tenant_code_mib: u64,
    /// Host-wide memory budget, in MiB: the global share plus every
    /// tenant's share and compiled code must fit in it; a tenant that does
    /// not fit is not loaded. Default: half the machine's physical memory
    /// (4096 if it cannot be read).
    pub memory_budget_mib: u64,
    /// Requests the global account may have in progress at once (decided
    /// through [`DecideRequest`](crate::DecideRequest): the HTTP service,
    /// the Python module); more wait their turn. Default: four per core.
    pub global_requests: u32,
    /// Requests one tenant may have in progress at once; more wait their
    /// turn, in order, and one that waited `wait` is refused (HTTP 429).
    /// Default: one per core — a tenant may keep every core busy, never
    /// queue more work than that ahead of other tenants.
    pub tenant_requests: u32,
    /// Requests one tenant may start per second; 0: no limit. A request
    /// over the rate waits for its turn, in order of arrival; one whose
    /// turn is more than `wait` away waits `wait` and is refused (HTTP
    /// 429), so a flooder that retries at once is slowed down too.
    /// Default: 0.
    pub tenant_rate: u32,
    /// Requests a tenant may start at once on top of its rate after a
    /// pause (the depth of its bucket); 0: a second's worth
    /// (`tenant_rate`). Default: 0.
    pub tenant_burst: u32,
    /// Tenants with a rate of their own instead of `tenant_rate` and
    /// `tenant_burst` (`None`: no limit), by name (`[shares.tenants.<name>]`
    /// in the global manifest). Default: none.
    pub tenant_rates: std::collections::BTreeMap<String, Option<Rate>>,
    /// Guest log one tenant's guard calls may write a second, in KiB (its
    /// guards' `log` lines and captured stdout/stderr, the global guards
    /// it runs included), a second's worth at once; lines beyond it are
    /// dropped (the guest is not told) and counted; 0: no limit. The
    /// global account has no limit. Default: 256.
    pub tenant_log_kib_per_s: u32,
    /// How long a call waits for its share (and a request for its place)
    /// before faulting with `share-exhausted` (being refused as busy).
    /// Default: 1 s (a burst above the share queues; a flood waits, which
    /// also slows the flooder down).
    #[serde(with = "crate::runtime::limits::millis")]
    pub wait: Duration,
}

impl Default for Shares {
    fn default() -> Self {
        Shares {
            global_instances: 16,
            global_memory_mib: 2048,
            tenant_instances: 4,
            tenant_memory_mib: 512,
            tenant_plugins: 16,
            tenant_code_mib: 256,
            memory_budget_mib: default_memory_budget_mib(),
            global_requests: cores().saturating_mul(4),
            tenant_requests: cores(),
            tenant_rate: 0,
            tenant_burst: 0,
            tenant_rates: Default::default(),
            tenant_log_kib_per_s: 256,
            wait: Duration::from_secs(1),
        }
    }
}

/// The cores this process may use, at least 1.
fn cores() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .max(1)
}

/// Half the physical memory of this machine in MiB (Linux
/// `/proc/meminfo`), or 4096 where that cannot be read.
pub fn default_memory_budget_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(4096, |kib| (kib / 1024 / 2).max(256))
}

/// Why a share plan does not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The shares need more instance slots than the engine's pool has.
    #[error(
        "no capacity left for tenant `{tenant}`: the global share ({global}) and {tenants} tenant \
         share(s) of {each} instances need {needed} instance slots; the engine has {pool} \
         ({PROBE_SLOTS} kept for load-time probes). Raise the engine's max_instances or lower \
         [shares] tenant_instances"
    )]
    Instances {
        /// The tenant that did not fit.
        tenant: String,
        /// The global share.
        global: u32,
        /// Tenants that would be loaded, this one included.
        tenants: u32,
        /// Instances per tenant.
        each: u32,
        /// Slots needed.
        needed: u64,
        /// Slots in the pool.
        pool: u32,
    },
    /// The shares need more memory than the host-wide budget.
    #[error(
        "no capacity left for tenant `{tenant}`: the global share ({global} MiB) and {tenants} \
         tenant share(s) of {each} MiB (memory and compiled code) need {needed} MiB; the memory \
         budget is {budget} MiB. Raise [shares] memory_budget_mib or lower tenant_memory_mib or \
         tenant_code_mib"
    )]
    Memory {
        /// The tenant that did not fit.
        tenant: String,
        /// The global memory share.
        global: u64,
        /// Tenants that would be loaded, this one included.
        tenants: u32,
        /// MiB per tenant: its memory share and its compiled code.
        each: u64,
        /// MiB needed.
        needed: u64,
        /// The budget.
        budget: u64,
    },
}

impl Shares {
    /// Checks the settings on their own and against the tenant ceiling's
    /// memory cap; the error names the offending key.
    pub fn check(&self, tenant_memory_cap: usize) -> Result<(), (&'static str, String)> {
        if self.global_instances == 0 {
            return Err(("global_instances", "must be at least 1".into()));
        }
        if self.global_requests == 0 {
            return Err(("global_requests", "must be at least 1".into()));
        }
        if self.tenant_requests == 0 {
            return Err(("tenant_requests", "must be at least 1".into()));
        }
        if self.tenant_burst > 0 && self.tenant_rate == 0 {
            return Err(("tenant_burst", "has no effect without tenant_rate".into()));
        }
        if self.tenant_instances == 0 {
            return Err(("tenant_instances", "must be at least 1".into()));
        }
        if self.tenant_plugins == 0 {
            return Err(("tenant_plugins", "must be at least 1".into()));
        }
        if self.tenant_code_mib == 0 {
            return Err(("tenant_code_mib", "must be at least 1".into()));
        }
        let cap_mib = (tenant_memory_cap as u64).div_ceil(MIB);
        if self.tenant_memory_mib < cap_mib {
            return Err((
                "tenant_memory_mib",
                format!(
                    "{} MiB is less than one instance at the tenant ceiling's memory_mib \
                     ({cap_mib} MiB): no tenant guard could ever run",
                    self.tenant_memory_mib
                ),
            ));
        }
        if self.global_memory_mib == 0 {
            return Err(("global_memory_mib", "must be at least 1".into()));
        }
        if self.global_memory_mib > self.memory_budget_mib {
            return Err((
                "global_memory_mib",
                format!(
                    "{} MiB is more than the memory budget ({} MiB)",
                    self.global_memory_mib, self.memory_budget_mib
                ),
            ));
        }
        if u32::try_from(self.global_memory_mib.max(self.tenant_memory_mib)).is_err() {
            return Err(("tenant_memory_mib", "is too large".into()));
        }
        Ok(())
    }

    /// Pool slots a global share and `tenants` tenant shares reserve, the
    /// load-time probe's included.
    pub fn reserved(&self, tenants: u32) -> u64 {
        u64::from(self.global_instances)
            + u64::from(tenants) * u64::from(self.tenant_instances)
            + u64::from(PROBE_SLOTS)
    }

    /// Whether a global share and `tenants` tenant shares fit in a pool of
    /// `pool` instance slots (`None`: no pool, no slot limit) and in the
    /// memory budget. `tenant` names the last tenant, for the error.
    pub fn plan(&self, pool: Option<u32>, tenants: u32, tenant: &str) -> Result<(), PlanError> {
        if let Some(pool) = pool {
            let needed = self.reserved(tenants) - u64::from(PROBE_SLOTS);
            if self.reserved(tenants) > u64::from(pool) {
                return Err(PlanError::Instances {
                    tenant: tenant.into(),
                    global: self.global_instances,
                    tenants,
                    each: self.tenant_instances,
                    needed,
                    pool,
                });
            }
        }
        let each = self.tenant_memory_mib.saturating_add(self.tenant_code_mib);
        let needed = self
            .global_memory_mib
            .saturating_add(u64::from(tenants).saturating_mul(each));
        if needed > self.memory_budget_mib {
            return Err(PlanError::Memory {
                tenant: tenant.into(),
                global: self.global_memory_mib,
                tenants,
                each,
                needed,
                budget: self.memory_budget_mib,
            });
        }
        Ok(())
    }

    /// What the global account lends.
    pub fn global_lends(&self) -> Lends {
        Lends {
            requests: self.global_requests,
            rate: None,
            instances: self.global_instances,
            memory_mib: self.global_memory_mib,
            log_kib_per_s: 0,
        }
    }

    /// What `tenant`'s account lends: every tenant's share, at its own
    /// rate if it has one.
    pub fn tenant_lends(&self, tenant: &str) -> Lends {
        let rate = match self.tenant_rates.get(tenant) {
            Some(own) => *own,
            None => Rate::new(self.tenant_rate, self.tenant_burst),
        };
        Lends {
            requests: self.tenant_requests,
            rate,
            instances: self.tenant_instances,
            memory_mib: self.tenant_memory_mib,
            log_kib_per_s: self.tenant_log_kib_per_s,
        }
    }

    /// The global account these settings describe.
    pub fn global_account(&self) -> Account {
        Account {
            global: true,
            ..Account::new("global", self.global_lends(), self.wait)
        }
    }

    /// The account of `tenant` these settings describe.
    pub fn tenant_account(&self, tenant: &str) -> Account {
        Account::new(tenant, self.tenant_lends(tenant), self.wait)
    }
}

/// One bounded share of instances and memory, charged by every guard call
/// made on its behalf.
#[derive(Debug)]
pub struct Account {
    name: String,
    global: bool,
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

/// A rate requests may start at: `per_s` a second, `burst` at once after
/// a pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Rate {
    /// Requests a second.
    pub per_s: u32,
    /// Requests at once on top of the rate (at least 1).
    pub burst: u32,
}

impl Rate {
    /// `per_s` a second (0: no limit, `None`) with a burst of `burst`
    /// (0: a second's worth).
    pub fn new(per_s: u32, burst: u32) -> Option<Rate> {
        (per_s > 0).then_some(Rate {
            per_s,
            burst: if burst == 0 { per_s } else { burst },
        })
    }
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

/// When an account's requests may start, for its [`Rate`]: the generic
/// cell rate algorithm, as a queue of turns. Each request takes the next
/// turn — `1 / per_s` after the one before, or now if that has passed —
/// and may start up to `burst - 1` turns early.
#[derive(Debug)]
struct Pace {
    /// The rate it keeps.
    rate: Rate,
    /// Between two turns.
    interval: Duration,
    /// How early a turn may be taken.
    tolerance: Duration,
    /// The next turn not yet taken (`None`: never taken, so now).
    next: std::sync::Mutex<Option<Instant>>,
}

impl Pace {
    fn new(rate: Rate) -> Pace {
        let interval = Duration::from_secs(1) / rate.per_s.max(1);
        Pace {
            rate,
            interval,
            tolerance: interval * rate.burst.max(1).saturating_sub(1),
            next: std::sync::Mutex::new(None),
        }
    }

    /// Takes the next turn for a request that came `now`, when it may
    /// start; or, when that is more than `wait` away, takes nothing and
    /// says how far away it was.
    fn take(&self, now: Instant, wait: Duration) -> Result<Instant, Duration> {
        let mut next = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let turn = next.map_or(now, |t| t.max(now));
        let start = turn.checked_sub(self.tolerance).map_or(now, |s| s.max(now));
        let away = start - now;
        if away > wait {
            return Err(away);
        }
        *next = Some(turn + self.interval);
        Ok(start)
    }
}

/// How much guest log an account's calls may write: a bucket of `per_s`
/// bytes, refilled at `per_s` a second. A line that does not fit is
/// dropped whole and counted.
#[derive(Debug)]
struct LogBudget {
    per_s: u64,
    state: std::sync::Mutex<LogState>,
    dropped: AtomicU64,
}

#[derive(Debug)]
struct LogState {
    /// Bytes that may be written as of `at`.
    left: u64,
    at: Instant,
    /// When a dropped line was last logged.
    warned: Option<Instant>,
}

/// How often the log says an account's guest lines are being dropped.
const LOG_DROPS_WARNED_EVERY: Duration = Duration::from_secs(10);

impl LogBudget {
    fn new(per_s: u64) -> LogBudget {
        LogBudget {
            per_s,
            state: std::sync::Mutex::new(LogState {
                left: per_s,
                at: Instant::now(),
                warned: None,
            }),
            dropped: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` from the bucket at `now`, or counts them dropped.
    fn spend(&self, account: &str, bytes: usize, now: Instant) -> bool {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let warn = {
            let mut s = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Times taken on other threads may come in out of order: a
            // moment already counted is not earned twice.
            let earned = now.saturating_duration_since(s.at).as_nanos() * u128::from(self.per_s)
                / 1_000_000_000;
            s.left = u64::try_from(earned)
                .unwrap_or(u64::MAX)
                .saturating_add(s.left)
                .min(self.per_s);
            s.at = s.at.max(now);
            if let Some(left) = s.left.checked_sub(bytes) {
                s.left = left;
                return true;
            }
            let due = s
                .warned
                .is_none_or(|w| now.saturating_duration_since(w) >= LOG_DROPS_WARNED_EVERY);
            if due {
                s.warned = Some(now);
            }
            due
        };
        let dropped = self.dropped.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if warn {
            tracing::warn!(
                account,
                dropped_bytes = dropped,
                "`{account}`'s guards write (or the host writes about their calls) more than \
                 {} KiB of log a second ([shares] tenant_log_kib_per_s): lines beyond it are \
                 dropped ({dropped} bytes so far)",
                self.per_s >> 10
            );
        }
        false
    }
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

    #[test]
    fn turns_come_at_the_rate_after_a_burst_and_too_far_ones_are_not_taken() {
        let pace = Pace::new(Rate {
            per_s: 10,
            burst: 3,
        });
        let (now, ms) = (Instant::now(), Duration::from_millis);
        let wait = ms(150);
        for _ in 0..3 {
            assert_eq!(pace.take(now, wait), Ok(now), "the burst starts at once");
        }
        assert_eq!(pace.take(now, wait), Ok(now + ms(100)));
        assert_eq!(pace.take(now, wait), Err(ms(200)), "past the wait");
        assert_eq!(pace.take(now, wait), Err(ms(200)), "a refusal took no turn");
        assert_eq!(pace.take(now + ms(50), wait), Ok(now + ms(200)));
        // After a pause the whole burst is back, and no more.
        let later = now + ms(2000);
        for _ in 0..3 {
            assert_eq!(pace.take(later, Duration::ZERO), Ok(later));
        }
        assert_eq!(pace.take(later, Duration::ZERO), Err(ms(100)));
    }

    #[test]
    fn a_tenant_rate_is_off_by_default_and_its_burst_defaults_to_a_second() {
        let mut shares = Shares::default();
        assert_eq!(shares.tenant_lends("a").rate, None);
        shares.tenant_rate = 50;
        assert_eq!(
            shares.tenant_lends("a").rate,
            Some(Rate {
                per_s: 50,
                burst: 50
            })
        );
        shares.tenant_burst = 5;
        assert_eq!(shares.tenant_lends("a").rate.map(|r| r.burst), Some(5));
        // A tenant's own rate, or none at all, in place of everyone's.
        shares.tenant_rates.insert("b".into(), Rate::new(1000, 0));
        shares.tenant_rates.insert("c".into(), None);
        assert_eq!(shares.tenant_lends("b").rate, Rate::new(1000, 1000));
        assert_eq!(shares.tenant_lends("c").rate, None);
        assert_eq!(shares.tenant_lends("a").rate, Rate::new(50, 5));
        assert_eq!(shares.global_lends().rate, None);
        shares.tenant_rate = 0;
        assert_eq!(shares.check(1 << 20).map_err(|e| e.0), Err("tenant_burst"));
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

    #[test]
    fn plan_counts_slots_and_memory() {
        let shares = Shares {
            global_instances: 8,
            global_memory_mib: 1024,
            tenant_instances: 4,
            tenant_memory_mib: 512,
            tenant_plugins: 16,
            tenant_code_mib: 256,
            memory_budget_mib: 1024 + 6 * (512 + 256),
            global_requests: 8,
            tenant_requests: 2,
            tenant_rate: 0,
            tenant_burst: 0,
            tenant_rates: Default::default(),
            tenant_log_kib_per_s: 0,
            wait: Duration::ZERO,
        };
        assert!(shares.plan(Some(32), 5, "e").is_ok());
        assert!(matches!(
            shares.plan(Some(32), 6, "f"),
            Err(PlanError::Instances { .. })
        ));
        assert!(shares.plan(None, 6, "f").is_ok());
        assert!(matches!(
            shares.plan(None, 7, "g"),
            Err(PlanError::Memory { .. })
        ));
    }

    #[test]
    fn a_log_budget_lets_a_second_s_worth_through_then_refills_at_its_rate() {
        let budget = LogBudget::new(1000);
        let t0 = Instant::now();
        assert!(budget.spend("a", 600, t0));
        assert!(budget.spend("a", 400, t0), "a second's worth at once");
        assert!(!budget.spend("a", 1, t0), "then nothing");
        assert!(
            !budget.spend("a", 300, t0 + Duration::from_millis(200)),
            "200 bytes earned"
        );
        assert!(budget.spend("a", 200, t0 + Duration::from_millis(200)));
        assert!(
            !budget.spend("a", 1001, t0 + Duration::from_secs(60)),
            "never more than the bucket"
        );
        assert!(
            budget.spend("a", 1000, t0 + Duration::from_secs(60)),
            "a full bucket, not 60 s of it"
        );
        assert_eq!(budget.dropped.load(Ordering::Relaxed), 1 + 300 + 1001);
        let unlimited = Account::new("a", lends(1, 1), Duration::ZERO);
        assert!(unlimited.may_log(usize::MAX), "0: no limit");
        assert_eq!(unlimited.usage().log_dropped_bytes, 0);
    }
}
