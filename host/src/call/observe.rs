//! Lifecycle events in a chain: each is queued in its run's lane
//! ([`crate::runtime::runs`]) and delivered, after the caller has moved
//! on, to every guard of the chain that observes its hook, in chain order,
//! each call under the guard's own limits; a fault is logged, counted and
//! skipped. A decision of the run at any seam first waits for the
//! observations queued before it (bounded: [`Chain::observe_bound`]).

use std::sync::Arc;
use std::time::Duration;

use crate::call::chain::Chain;
use crate::call::guard_call::{GuestEvent, ObserveHook};
use crate::call::plugin::Plugin;
use crate::event::lifecycle::{Hooks, LifecycleEvent};
use crate::runtime::runs::Refused;

/// What became of an observation handed to [`Chain::observe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Queued: it will be delivered to the guards that observe its hook.
    Queued,
    /// No guard of the chain observes its hook: nothing to do.
    Unobserved,
    /// Dropped, counted: its run already has 1,024 observations waiting
    /// (or all runs together 65,536), or it was not handed over from within
    /// a tokio runtime.
    Dropped,
}

impl Observed {
    /// `queued`, `unobserved` or `dropped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Observed::Queued => "queued",
            Observed::Unobserved => "unobserved",
            Observed::Dropped => "dropped",
        }
    }
}

impl Chain {
    /// The lifecycle hooks some guard of the chain observes.
    pub fn observed_hooks(&self) -> Hooks {
        self.plugins()
            .iter()
            .fold(Hooks::NONE, |hooks, p| hooks.union(p.observes()))
    }

    /// Queues `event` for every guard of the chain that observes its hook
    /// and returns at once (it never waits for a guard). The run's
    /// observations are delivered in the order they were queued, one after
    /// another, each to its guards in chain order; each guard call runs
    /// under the guard's limits and state scopes (the chain's tenant, the
    /// event's run), and a fault is logged, counted
    /// ([`Engine::observe_faults`](crate::Engine::observe_faults)) and
    /// skipped — `on_error` does not apply, there is nothing to deny.
    pub fn observe(&self, event: &LifecycleEvent) -> Observed {
        let hook = event.hook();
        let observers: Vec<Arc<Plugin>> = self
            .plugins()
            .iter()
            .filter(|p| p.observes_hook(hook))
            .cloned()
            .collect();
        let Some(first) = observers.first() else {
            return Observed::Unobserved;
        };
        let engine = first.engine.clone();
        let tenant = self.lane_tenant().unwrap_or_else(|| Arc::from(""));
        let run = event.run_id().to_string();
        let event = event.clone();
        let runs = Arc::clone(engine.runs());
        let work = Box::pin(async move {
            let guest = GuestEvent::<ObserveHook>::new(&event, "", None);
            for plugin in &observers {
                let Some(called) = plugin.call(&guest).await else {
                    continue;
                };
                if let Err((fault, why)) = called.result {
                    engine.runs().count_fault();
                    tracing::warn!(
                        plugin = %plugin.name(),
                        hook = %hook,
                        run = event.run_id(),
                        %fault,
                        "lifecycle observation faulted; skipped: {why}"
                    );
                }
            }
        });
        match runs.push(&tenant, &run, work) {
            Ok(()) => Observed::Queued,
            Err(Refused::Full) => {
                tracing::warn!(
                    hook = %hook,
                    "lifecycle observation dropped: its run's queue is full"
                );
                Observed::Dropped
            }
            Err(Refused::NoRuntime) => Observed::Dropped,
        }
    }

    /// Waits until the observations of `run` queued before this call have
    /// been delivered, at most [`Chain::observe_bound`]: a decision's
    /// first step, so it sees their state writes. At once when no guard of
    /// the chain both observes and keeps state (nothing it could see).
    pub(crate) async fn after_observations(&self, run: &str) {
        let Some(bound) = self.observe_bound() else {
            return;
        };
        let Some(first) = self.plugins().first() else {
            return;
        };
        let tenant = self.lane_tenant().unwrap_or_else(|| Arc::from(""));
        first.engine.runs().wait(&tenant, run, bound).await;
    }

    /// How long a decision waits at most for its run's observations: the
    /// longest wall-clock bound of one call
    /// ([`Limits::wall_bound`](crate::Limits::wall_bound)) among the
    /// chain's guards that observe and keep state; `None` when there is
    /// none.
    pub fn observe_bound(&self) -> Option<Duration> {
        self.plugins()
            .iter()
            .filter(|p| !p.observes().is_empty() && p.uses_state())
            .map(|p| p.limits.wall_bound())
            .max()
    }

    /// The tenant whose lanes this chain's observations take: that of its
    /// observers' state scopes.
    fn lane_tenant(&self) -> Option<Arc<str>> {
        let observers = || self.plugins().iter().filter(|p| !p.observes().is_empty());
        observers()
            .find(|p| p.uses_state())
            .or_else(|| observers().next())
            .map(|p| Arc::clone(&p.tenant))
    }
}
