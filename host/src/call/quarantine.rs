//! Quarantine: a guard that keeps faulting is not run for a while.
//!
//! When a plugin faults [`QuarantinePolicy::faults`] times within
//! [`QuarantinePolicy::window`], it is quarantined for
//! [`QuarantinePolicy::cooldown`]: its calls fault with
//! [`Fault::Quarantined`] without an instance being made, so its `on_error`
//! applies exactly as if it had run and faulted. After the cool-down the
//! next call runs it as a probe (half-open; calls meanwhile are still
//! quarantined): a probe that does not fault closes the quarantine, one
//! that faults starts another cool-down.
//!
//! Faults the guard is not to blame for do not count: `capacity`,
//! `share-exhausted` and `quarantined` itself.
//!
//! A guard is quarantined for one account at a time ([`Quarantines`]): a
//! tenant whose calls make a global guard fault quarantines that guard for
//! its own calls, while every other tenant's calls (and calls with no
//! tenant) still run it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::fault::Fault;

/// When a guard is quarantined and for how long. Every field documents its
/// default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QuarantinePolicy {
    /// Faults within `window` that quarantine a guard; 0 turns quarantine
    /// off. Default: 5.
    pub faults: u32,
    /// The sliding window the faults are counted in. Default: 30 s.
    #[serde(with = "crate::runtime::limits::unit::millis")]
    pub window: Duration,
    /// How long a quarantined guard is not run before it is probed again.
    /// Default: 30 s.
    #[serde(with = "crate::runtime::limits::unit::millis")]
    pub cooldown: Duration,
}

impl Default for QuarantinePolicy {
    fn default() -> Self {
        QuarantinePolicy {
            faults: 5,
            window: Duration::from_secs(30),
            cooldown: Duration::from_secs(30),
        }
    }
}

impl QuarantinePolicy {
    /// Quarantine turned off.
    pub fn off() -> Self {
        QuarantinePolicy {
            faults: 0,
            ..QuarantinePolicy::default()
        }
    }
}

/// Whether a guard is being run (ordered from best to worst).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Run on every call.
    #[default]
    Ok,
    /// Not run until its cool-down ends.
    Quarantined,
    /// Cool-down over; one call is (or the next call will be) the probe.
    Probing,
}

/// A guard's quarantine state, as `toolgate list`, `/v1/plugins` and
/// `/metrics` show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Health {
    /// Run, quarantined or probing.
    pub state: HealthState,
    /// Faults counted in the current window.
    pub recent_faults: u32,
    /// While quarantined: milliseconds until the next probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_in_ms: Option<u64>,
    /// Times it was quarantined since it was loaded.
    pub quarantines: u64,
    /// A guard that runs for several accounts (a global guard, for each
    /// tenant), the health it has for each account, by tenant (`global`:
    /// calls with no tenant) — only those with recent faults, or not
    /// running; the fields above then sum them up (the worst state, every
    /// fault and quarantine, the next probe).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub accounts: BTreeMap<String, Health>,
}

impl Health {
    fn is_clear(&self) -> bool {
        self.state == HealthState::Ok && self.recent_faults == 0
    }
}

#[derive(Debug)]
struct State {
    policy: QuarantinePolicy,
    recent: VecDeque<Instant>,
    until: Option<Instant>,
    probing: bool,
    quarantines: u64,
}

/// One guard's fault history and quarantine for one account; shared by
/// every copy of the plugin charged to that account.
#[derive(Debug)]
pub(crate) struct Quarantine {
    /// The tenant, for the log; `None`: calls with no tenant.
    tenant: Option<Arc<str>>,
    state: Mutex<State>,
}

/// One guard's quarantines, one per account its calls are charged to
/// (keyed by tenant; `None`: the global account, or no account); shared by
/// every copy of the plugin.
#[derive(Debug)]
pub(crate) struct Quarantines {
    policy: Mutex<QuarantinePolicy>,
    by_tenant: Mutex<BTreeMap<Option<Arc<str>>, Arc<Quarantine>>>,
}

impl Quarantines {
    pub(crate) fn new(policy: QuarantinePolicy) -> Self {
        Quarantines {
            policy: Mutex::new(policy),
            by_tenant: Mutex::default(),
        }
    }

    /// The quarantine of calls made for `tenant` (`None`: no tenant), made
    /// under the policy in force when first asked for.
    pub(crate) fn of(&self, tenant: Option<&str>) -> Arc<Quarantine> {
        let mut by_tenant = lock(&self.by_tenant);
        if let Some(q) = by_tenant.get(&tenant.map(Arc::from)) {
            return Arc::clone(q);
        }
        let tenant: Option<Arc<str>> = tenant.map(Arc::from);
        let policy = lock(&self.policy).clone();
        let q = Arc::new(Quarantine::new(tenant.clone(), policy));
        by_tenant.insert(tenant, Arc::clone(&q));
        q
    }

    /// Replaces the policy of every account's quarantine (see
    /// [`Quarantine::set_policy`]).
    pub(crate) fn set_policy(&self, policy: QuarantinePolicy) {
        for q in lock(&self.by_tenant).values() {
            q.set_policy(policy.clone());
        }
        *lock(&self.policy) = policy;
    }

    /// The guard's health: one account's as is, several summed up with the
    /// accounts that are not clear listed.
    pub(crate) fn health(&self) -> Health {
        let each: Vec<(String, Health)> = lock(&self.by_tenant)
            .iter()
            .map(|(t, q)| (t.as_deref().unwrap_or("global").to_owned(), q.health()))
            .collect();
        if each.len() == 1 {
            return each.into_iter().map(|(_, h)| h).next().unwrap_or_default();
        }
        let mut sum = Health::default();
        for (name, h) in each {
            sum.state = sum.state.max(h.state);
            sum.recent_faults = sum.recent_faults.saturating_add(h.recent_faults);
            sum.quarantines = sum.quarantines.saturating_add(h.quarantines);
            sum.probe_in_ms = match (sum.probe_in_ms, h.probe_in_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if !h.is_clear() {
                sum.accounts.insert(name, h);
            }
        }
        sum
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Permission to run one call. A probe's ticket dropped without
/// [`Quarantine::record`] (the call was cancelled, or refused before it
/// ran) lets the next call probe instead.
pub(crate) struct Ticket<'a> {
    quarantine: &'a Quarantine,
    probe: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.probe
            && let Ok(mut s) = self.quarantine.state.lock()
        {
            s.probing = false;
        }
    }
}

/// Whether a fault counts toward quarantine: the guard's own doing, and
/// not a call refused because it is quarantined already.
fn counts(fault: Fault) -> bool {
    fault.counts_toward_quarantine()
}

impl Quarantine {
    fn new(tenant: Option<Arc<str>>, policy: QuarantinePolicy) -> Self {
        Quarantine {
            tenant,
            state: Mutex::new(State {
                policy,
                recent: VecDeque::new(),
                until: None,
                probing: false,
                quarantines: 0,
            }),
        }
    }

    /// Replaces the policy; the history is kept, a quarantine under way
    /// ends if the policy turns quarantine off.
    pub(crate) fn set_policy(&self, policy: QuarantinePolicy) {
        if let Ok(mut s) = self.state.lock() {
            if policy.faults == 0 {
                s.until = None;
                s.recent.clear();
            }
            s.policy = policy;
        }
    }

    /// May this call run? `Err` carries how long until the next probe.
    pub(crate) fn admit(&self) -> Result<Ticket<'_>, Duration> {
        let Ok(mut s) = self.state.lock() else {
            return Ok(Ticket {
                quarantine: self,
                probe: false,
            });
        };
        let Some(until) = s.until else {
            return Ok(Ticket {
                quarantine: self,
                probe: false,
            });
        };
        let now = Instant::now();
        if now < until {
            return Err(until - now);
        }
        if s.probing {
            return Err(Duration::ZERO);
        }
        s.probing = true;
        Ok(Ticket {
            quarantine: self,
            probe: true,
        })
    }

    /// Records how the call of `ticket` ended, logging any change of state.
    pub(crate) fn record(&self, plugin: &str, mut ticket: Ticket<'_>, fault: Option<Fault>) {
        let probe = std::mem::replace(&mut ticket.probe, false);
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let counted = fault.is_some_and(counts);
        let now = Instant::now();
        let cooldown = s.policy.cooldown;
        if probe {
            s.probing = false;
            if counted {
                s.until = Some(now + cooldown);
                s.quarantines += 1;
                tracing::warn!(
                    plugin,
                    tenant = self.tenant.as_deref(),
                    fault = ?fault,
                    cooldown_ms = cooldown.as_millis() as u64,
                    "quarantined guard faulted again on its probe; quarantined for another cool-down"
                );
            } else {
                s.until = None;
                s.recent.clear();
                tracing::info!(
                    plugin,
                    tenant = self.tenant.as_deref(),
                    "quarantined guard passed its probe; running again"
                );
            }
            return;
        }
        if s.policy.faults == 0 || s.until.is_some() || !counted {
            return;
        }
        let window = s.policy.window;
        while s
            .recent
            .front()
            .is_some_and(|&t| now.duration_since(t) > window)
        {
            s.recent.pop_front();
        }
        s.recent.push_back(now);
        if s.recent.len() >= s.policy.faults as usize {
            let faults = s.recent.len();
            s.recent.clear();
            s.until = Some(now + cooldown);
            s.quarantines += 1;
            tracing::warn!(
                plugin,
                tenant = self.tenant.as_deref(),
                faults,
                window_ms = window.as_millis() as u64,
                cooldown_ms = cooldown.as_millis() as u64,
                "guard quarantined: it faulted {faults} times within the window; its on_error \
                 applies without running it until the cool-down ends, then it is probed"
            );
        }
    }

    /// The state now.
    pub(crate) fn health(&self) -> Health {
        let Ok(s) = self.state.lock() else {
            return Health::default();
        };
        let now = Instant::now();
        let window = s.policy.window;
        let recent = s
            .recent
            .iter()
            .filter(|&&t| now.duration_since(t) <= window)
            .count();
        let (state, probe_in_ms) = match s.until {
            None => (HealthState::Ok, None),
            Some(until) if now < until => (
                HealthState::Quarantined,
                Some(u64::try_from((until - now).as_millis()).unwrap_or(u64::MAX)),
            ),
            Some(_) => (HealthState::Probing, None),
        };
        Health {
            state,
            recent_faults: u32::try_from(recent).unwrap_or(u32::MAX),
            probe_in_ms,
            quarantines: s.quarantines,
            accounts: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(cooldown_ms: u64) -> QuarantinePolicy {
        QuarantinePolicy {
            faults: 3,
            window: Duration::from_secs(10),
            cooldown: Duration::from_millis(cooldown_ms),
        }
    }

    fn fault(q: &Quarantine, f: Fault) {
        let t = q.admit().expect("admitted");
        q.record("p", t, Some(f));
    }

    #[test]
    fn n_faults_quarantine_then_a_probe_restores() {
        let q = Quarantine::new(None, policy(30));
        fault(&q, Fault::Deadline);
        fault(&q, Fault::Trap);
        assert_eq!(q.health().recent_faults, 2);
        fault(&q, Fault::Memory);
        assert_eq!(q.health().state, HealthState::Quarantined);
        assert!(q.admit().is_err());
        std::thread::sleep(Duration::from_millis(40));
        let probe = q.admit().expect("probe");
        assert!(q.admit().is_err(), "one probe at a time");
        q.record("p", probe, None);
        assert_eq!(q.health().state, HealthState::Ok);
        assert_eq!(q.health().quarantines, 1);
    }

    #[test]
    fn a_faulting_probe_quarantines_again_and_a_dropped_one_frees_the_probe() {
        let q = Quarantine::new(None, policy(20));
        for _ in 0..3 {
            fault(&q, Fault::Trap);
        }
        std::thread::sleep(Duration::from_millis(30));
        drop(q.admit().expect("probe"));
        let probe = q.admit().expect("probe again after a dropped one");
        q.record("p", probe, Some(Fault::Trap));
        assert_eq!(q.health().state, HealthState::Quarantined);
        assert_eq!(q.health().quarantines, 2);
    }

    #[test]
    fn share_and_capacity_faults_do_not_count() {
        let q = Quarantine::new(None, policy(20));
        for _ in 0..10 {
            fault(&q, Fault::ShareExhausted);
            fault(&q, Fault::Capacity);
            fault(&q, Fault::Overloaded);
        }
        assert_eq!(q.health().state, HealthState::Ok);
        let off = Quarantine::new(None, QuarantinePolicy::off());
        for _ in 0..10 {
            fault(&off, Fault::Trap);
        }
        assert_eq!(off.health().state, HealthState::Ok);
    }

    #[test]
    fn each_account_has_its_own_quarantine_and_the_sum_names_the_tripped_one() {
        let all = Quarantines::new(policy(60_000));
        let (none, a, b) = (all.of(None), all.of(Some("a")), all.of(Some("b")));
        assert!(Arc::ptr_eq(&a, &all.of(Some("a"))), "one per account");
        for _ in 0..3 {
            fault(&a, Fault::Trap);
        }
        fault(&b, Fault::Trap);
        assert!(a.admit().is_err(), "a's calls are not run");
        assert!(
            b.admit().is_ok() && none.admit().is_ok(),
            "others still are"
        );
        let h = all.health();
        assert_eq!(h.state, HealthState::Quarantined);
        assert_eq!((h.quarantines, h.recent_faults), (1, 1));
        assert!(h.probe_in_ms.is_some());
        let listed: Vec<_> = h.accounts.keys().map(String::as_str).collect();
        assert_eq!(listed, ["a", "b"], "the clear global account is not listed");
        assert_eq!(h.accounts["a"].state, HealthState::Quarantined);
        all.set_policy(QuarantinePolicy::off());
        assert!(
            a.admit().is_ok(),
            "turning quarantine off ends it everywhere"
        );
        assert_eq!(all.of(Some("c")).health(), Health::default());
    }
}
