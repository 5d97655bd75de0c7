//! One hook call's state: the operations a guest makes through the
//! `state` import, checked against the call's budgets, with the call's
//! `set` / `delete` kept aside until it ends and its `add`s remembered so a
//! fault can give them back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::fault::{Fault, ImportRefused};
use crate::runtime::state::{
    Added, Adds, Scope, ScopeId, StateLimits, StateStore, Write, Writes, refused, sum,
};

/// One call's view of its guard's state (see the module docs). Shared by
/// the call's store (its imports) and the call itself (which ends it).
pub(crate) struct CallState {
    store: Arc<StateStore>,
    run: ScopeId,
    tenant: ScopeId,
    limits: StateLimits,
    txn: Mutex<Txn>,
}

#[derive(Default)]
struct Txn {
    /// Ended (committed or rolled back): later operations trap.
    ended: bool,
    ops: u32,
    /// Time spent waiting on the store so far.
    waited: Duration,
    pending: BTreeMap<(Scope, String), Write>,
    added: Vec<(Scope, String, i64, bool)>,
    /// Store writes sent whose outcome is not known yet.
    in_flight: u32,
    /// A store write (an `add`, the commit) whose outcome is unknown: sent,
    /// and then no answer within the call's time, or a broken connection.
    /// It may have been applied; the call's adds are then kept.
    uncertain: bool,
}

impl CallState {
    /// The state of a call by `plugin` for `tenant` (`""`: the operator's)
    /// in run `run`.
    pub(crate) fn new(
        store: Arc<StateStore>,
        tenant: Arc<str>,
        plugin: Arc<str>,
        run: &str,
        limits: StateLimits,
    ) -> CallState {
        let tenant_scope = ScopeId {
            tenant,
            plugin,
            run: None,
        };
        CallState {
            store,
            run: ScopeId {
                run: Some(run.into()),
                ..tenant_scope.clone()
            },
            tenant: tenant_scope,
            limits,
            txn: Mutex::default(),
        }
    }

    /// The state of code running outside a hook call (a start function, a
    /// snapshot's warm-up): an empty store of its own, thrown away with it.
    pub(crate) fn scratch(limits: StateLimits) -> CallState {
        let store = Arc::new(StateStore::memory(limits.bytes.saturating_mul(8)));
        CallState::new(store, "".into(), "".into(), "", limits)
    }

    fn id(&self, scope: Scope) -> &ScopeId {
        match scope {
            Scope::Run => &self.run,
            Scope::Tenant => &self.tenant,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Txn> {
        self.txn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one operation against `state_ops`.
    fn spend(&self, txn: &mut Txn) -> Result<(), ImportRefused> {
        if txn.ended {
            return Err(refused(
                Fault::StateBudget,
                "state used after its call ended",
            ));
        }
        if txn.ops >= self.limits.ops {
            return Err(refused(
                Fault::StateBudget,
                format!(
                    "more than state_ops = {} state operations in one call",
                    self.limits.ops
                ),
            ));
        }
        txn.ops += 1;
        Ok(())
    }

    /// A key and value too big for their scope by themselves.
    fn check_size(&self, key: &str, value: &str) -> Result<(), ImportRefused> {
        if key.len() + value.len() > self.limits.bytes {
            return Err(refused(
                Fault::StateBudget,
                format!(
                    "a {}-byte key and value is more than its scope may hold (state_kib = {})",
                    key.len() + value.len(),
                    self.limits.bytes >> 10
                ),
            ));
        }
        Ok(())
    }

    /// Runs a store operation within what is left of the call's waiting
    /// time (its `timeout`); past it the call faults `state-unavailable`.
    async fn wait<T>(
        &self,
        op: impl Future<Output = Result<T, ImportRefused>>,
    ) -> Result<T, ImportRefused> {
        let left = {
            let txn = self.lock();
            self.limits.wait.saturating_sub(txn.waited)
        };
        let started = Instant::now();
        let out = tokio::time::timeout(left, op).await;
        self.lock().waited += started.elapsed();
        out.unwrap_or_else(|_| {
            Err(refused(
                Fault::StateUnavailable,
                format!(
                    "the state store did not answer within the call's {} ms",
                    self.limits.wait.as_millis()
                ),
            ))
        })
    }

    /// `get`: the call's own pending write if it made one, else the store's.
    pub(crate) async fn get(
        &self,
        scope: Scope,
        key: String,
    ) -> Result<Option<String>, ImportRefused> {
        {
            let mut txn = self.lock();
            self.spend(&mut txn)?;
            if let Some(write) = txn.pending.get(&(scope, key.clone())) {
                return Ok(match write {
                    Write::Set(v, ttl) if ttl.is_none_or(|t| !t.is_zero()) => Some(v.clone()),
                    _ => None,
                });
            }
        }
        self.wait(self.store.get(self.id(scope), &key, &self.limits))
            .await
    }

    /// `set`: kept aside until the call commits.
    pub(crate) fn set(
        &self,
        scope: Scope,
        key: String,
        value: String,
        ttl_ms: Option<u64>,
    ) -> Result<(), ImportRefused> {
        let mut txn = self.lock();
        self.spend(&mut txn)?;
        self.check_size(&key, &value)?;
        let ttl = self.limits.ttl(ttl_ms);
        txn.pending.insert((scope, key), Write::Set(value, ttl));
        Ok(())
    }

    /// `delete`: kept aside until the call commits.
    pub(crate) fn delete(&self, scope: Scope, key: String) -> Result<(), ImportRefused> {
        let mut txn = self.lock();
        self.spend(&mut txn)?;
        txn.pending.insert((scope, key), Write::Delete);
        Ok(())
    }

    /// `add`: applied to the store at once — or, on a key this call has a
    /// pending `set` / `delete` of, to that pending write.
    pub(crate) async fn add(
        &self,
        scope: Scope,
        key: String,
        delta: i64,
        ttl_ms: Option<u64>,
    ) -> Result<i64, ImportRefused> {
        let ttl = self.limits.ttl(ttl_ms);
        {
            let mut txn = self.lock();
            self.spend(&mut txn)?;
            if let Some(write) = txn.pending.get_mut(&(scope, key.clone())) {
                let current = match write {
                    Write::Set(v, t) if t.is_none_or(|t| !t.is_zero()) => Some(v.as_str()),
                    _ => None,
                };
                let sum = sum(&key, current, delta)?;
                let keep = match write {
                    Write::Set(_, t) if t.is_none_or(|t| !t.is_zero()) => *t,
                    _ => ttl,
                };
                *write = Write::Set(sum.to_string(), keep);
                return Ok(sum);
            }
        }
        self.lock().in_flight += 1;
        let added = self
            .wait(
                self.store
                    .add(self.id(scope), &key, delta, ttl, &self.limits),
            )
            .await;
        let mut txn = self.lock();
        txn.in_flight -= 1;
        match added {
            Ok((sum, created)) => {
                txn.added.push((scope, key, delta, created));
                Ok(sum)
            }
            Err(refusal) => {
                txn.uncertain |= may_have_applied(&refusal);
                Err(refusal)
            }
        }
    }

    /// Ends the call's state: commits its pending writes if the call
    /// `succeeded`, else (or if the commit is refused) gives back its adds.
    /// The refusal, if any, is the call's fault.
    ///
    /// A faulted call's adds are given back only when every write it sent
    /// is known to have been applied or not. If one is not (an `add`
    /// abandoned at the call's deadline or on a broken connection, or one
    /// still on its way when the call was given up on), none is: that
    /// write may land after any give-back — a guard's own give-back of an
    /// add that went over a limit, most often — and a give-back on top of
    /// it would take a budget below what it let through. Kept, a
    /// counter errs toward counting: a budget refuses early, never late.
    pub(crate) async fn end(&self, succeeded: bool) -> Result<(), ImportRefused> {
        let (pending, added, uncertain) = {
            let mut txn = self.lock();
            if txn.ended {
                return Ok(());
            }
            txn.ended = true;
            (
                std::mem::take(&mut txn.pending),
                std::mem::take(&mut txn.added),
                txn.uncertain || txn.in_flight > 0,
            )
        };
        let adds: Adds = added
            .into_iter()
            .map(|(scope, key, delta, created)| Added {
                id: self.id(scope).clone(),
                key,
                delta,
                created,
            })
            .collect();
        if succeeded && !pending.is_empty() {
            let mut writes: Writes = Vec::new();
            for ((scope, key), write) in pending {
                let id = self.id(scope);
                match writes.iter_mut().find(|(i, _)| i == id) {
                    Some((_, w)) => w.push((key, write)),
                    None => writes.push((id.clone(), vec![(key, write)])),
                }
            }
            if let Err(refusal) = self.wait(self.store.commit(&writes, &self.limits)).await {
                if !uncertain && !may_have_applied(&refusal) {
                    self.store.undo(&adds).await;
                }
                return Err(refusal);
            }
            return Ok(());
        }
        if !succeeded && !adds.is_empty() {
            if uncertain {
                tracing::debug!(
                    adds = adds.len(),
                    "a faulted call's adds were kept: one of its writes may have landed"
                );
            } else {
                self.store.undo(&adds).await;
            }
        }
        Ok(())
    }
}

/// Whether a store write refused with `refusal` may have been applied all
/// the same: one that got no answer (`state-unavailable`: a timeout, a
/// broken connection — or the breaker, which sent nothing, counted here
/// too, erring toward keeping). A budget, a misuse or a full store is
/// refused before anything is written.
fn may_have_applied(refusal: &ImportRefused) -> bool {
    refusal.fault == Fault::StateUnavailable
}
