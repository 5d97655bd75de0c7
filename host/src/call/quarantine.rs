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

use std::collections::VecDeque;
use std::sync::Mutex;
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
    #[serde(with = "crate::limits::millis")]
    pub window: Duration,
    /// How long a quarantined guard is not run before it is probed again.
    /// Default: 30 s.
    #[serde(with = "crate::limits::millis")]
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

/// Whether a guard is being run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Run on every call.
    Ok,
    /// Not run until its cool-down ends.
    Quarantined,
    /// Cool-down over; one call is (or the next call will be) the probe.
    Probing,
}

/// A guard's quarantine state, as `toolgate list`, `/v1/plugins` and
/// `/metrics` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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
}

#[derive(Debug)]
struct State {
    policy: QuarantinePolicy,
    recent: VecDeque<Instant>,
    until: Option<Instant>,
    probing: bool,
    quarantines: u64,
}

/// One guard's fault history and quarantine; shared by every copy of the
/// plugin (a tenant's view of a global guard included).
#[derive(Debug)]
pub(crate) struct Quarantine {
    state: Mutex<State>,
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

fn counts(fault: Fault) -> bool {
    !matches!(
        fault,
        Fault::Capacity | Fault::ShareExhausted | Fault::Quarantined
    )
}

impl Quarantine {
    pub(crate) fn new(policy: QuarantinePolicy) -> Self {
        Quarantine {
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
                    fault = ?fault,
                    cooldown_ms = cooldown.as_millis() as u64,
                    "quarantined guard faulted again on its probe; quarantined for another cool-down"
                );
            } else {
                s.until = None;
                s.recent.clear();
                tracing::info!(plugin, "quarantined guard passed its probe; running again");
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
            return Health {
                state: HealthState::Ok,
                recent_faults: 0,
                probe_in_ms: None,
                quarantines: 0,
            };
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
        let q = Quarantine::new(policy(30));
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
        let q = Quarantine::new(policy(20));
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
        let q = Quarantine::new(policy(20));
        for _ in 0..10 {
            fault(&q, Fault::ShareExhausted);
            fault(&q, Fault::Capacity);
        }
        assert_eq!(q.health().state, HealthState::Ok);
        let off = Quarantine::new(QuarantinePolicy::off());
        for _ in 0..10 {
            fault(&off, Fault::Trap);
        }
        assert_eq!(off.health().state, HealthState::Ok);
    }
}
