//! The in-memory state store: one map per scope behind one lock, bounded
//! per scope (keys, bytes) and in all (`capacity`), with expired keys and
//! idle runs reclaimed from a timer heap a few at a time on each
//! operation — never by scanning.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::fault::{Fault, ImportRefused};
use crate::runtime::state::{
    Adds, Pending, ScopeId, StateEntry, StateFilter, StateLimits, StateUsage, Store, Write, Writes,
    over_budget, refused, sum,
};
use std::future::ready;

/// What one key costs the store beyond its key and value bytes (the map's
/// entry, its strings' headers): counted against `capacity`, not against a
/// guard's `state_kib`.
const ENTRY_OVERHEAD: usize = 96;

/// Expired keys and idle runs reclaimed per operation, at most.
const REAP_PER_OP: usize = 32;

/// The in-memory store (see the module docs).
pub struct MemoryStore {
    inner: Mutex<Inner>,
    caps: Caps,
}

/// What the store may hold: in all, and of one tenant's guards (a quarter
/// of it, so no tenant can fill the store for the others).
#[derive(Clone, Copy)]
struct Caps {
    all: usize,
    tenant: usize,
}

impl Caps {
    /// No cap: for writes already checked.
    const NONE: Caps = Caps {
        all: usize::MAX,
        tenant: usize::MAX,
    };
}

#[derive(Default)]
struct Inner {
    scopes: HashMap<ScopeId, ScopeData>,
    /// When a key may expire or a run may go idle; one live timer per key
    /// and per run scope (the `scheduled` it matches), stale ones skipped.
    timers: BinaryHeap<Reverse<Timer>>,
    /// Bytes held in all, overhead included.
    total: usize,
    /// The same, per tenant (absent: none).
    by_tenant: HashMap<Arc<str>, usize>,
}

#[derive(Default)]
struct ScopeData {
    entries: HashMap<String, Entry>,
    /// Key and value bytes held.
    bytes: usize,
    /// When a run's scope was last touched, and how long it may then idle
    /// (`None`: the tenant scope, which does not idle out).
    idle: Option<(Instant, Duration)>,
    /// The run-idle timer in the heap, if any.
    scheduled: Option<Instant>,
}

struct Entry {
    value: String,
    expires: Option<Instant>,
    /// The expiry timer in the heap, if any.
    scheduled: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|at| at > now)
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    id: ScopeId,
    /// The key, or `None` for the run scope's idle timer.
    key: Option<String>,
}

fn cost(key: &str, value: &str) -> usize {
    key.len() + value.len()
}

impl MemoryStore {
    /// A store holding at most `capacity` bytes in all, and a quarter of
    /// that for any one tenant.
    pub fn new(capacity: usize) -> MemoryStore {
        MemoryStore {
            inner: Mutex::default(),
            caps: Caps {
                all: capacity,
                tenant: capacity / 4,
            },
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing here panics while holding the lock; should something,
        // the maps are still consistent enough to keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live value at `key`.
    pub(crate) fn get(&self, id: &ScopeId, key: &str, limits: &StateLimits) -> Option<String> {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.reap(now);
        let scope = inner.scopes.get_mut(id)?;
        touch(scope, id, now, limits);
        let value = scope
            .entries
            .get(key)
            .filter(|e| e.live(now))
            .map(|e| e.value.clone());
        inner.schedule_idle(id);
        value
    }

    /// Adds `delta` to the integer at `key`, at once; the sum, and whether
    /// the key was created.
    pub(crate) fn add(
        &self,
        id: &ScopeId,
        key: &str,
        delta: i64,
        ttl: Option<Duration>,
        limits: &StateLimits,
    ) -> Result<(i64, bool), ImportRefused> {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.reap(now);
        let old = inner
            .scopes
            .get(id)
            .and_then(|s| s.entries.get(key))
            .filter(|e| e.live(now))
            .map(|e| (e.value.clone(), e.expires));
        let expires = match &old {
            Some((_, expires)) => *expires,
            None => ttl.map(|ttl| now + ttl),
        };
        let sum = sum(key, old.as_ref().map(|(v, _)| v.as_str()), delta)?;
        if old.is_none() && expires.is_some_and(|at| at <= now) {
            // Created already expired (a ttl of 0): nothing to keep.
            return Ok((sum, false));
        }
        let write = Write::Set(sum.to_string(), None);
        inner.apply(
            id,
            vec![(key.to_string(), write, expires)],
            now,
            limits,
            self.caps,
        )?;
        Ok((sum, old.is_none()))
    }

    /// Applies one call's writes, all or none.
    pub(crate) fn commit(
        &self,
        writes: &Writes,
        limits: &StateLimits,
    ) -> Result<(), ImportRefused> {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.reap(now);
        // Check every scope first, so a refusal leaves nothing applied.
        let mut total = inner.total;
        for (id, writes) in writes {
            total = inner.check(
                id,
                writes.iter().map(|(k, w)| (k.as_str(), w)),
                limits,
                self.caps,
                total,
            )?;
        }
        for (id, writes) in writes {
            let writes = writes
                .iter()
                .map(|(k, w)| {
                    let expires = match w {
                        Write::Set(_, ttl) => ttl.map(|ttl| now + ttl),
                        Write::Delete => None,
                    };
                    (k.clone(), w.clone(), expires)
                })
                .collect();
            inner.apply(id, writes, now, limits, Caps::NONE)?;
        }
        Ok(())
    }

    /// Gives back a faulted call's adds, newest first; a key gone (deleted,
    /// expired) or no longer an integer is left as it is, and a key the
    /// call created that is back at 0 is removed.
    pub(crate) fn undo(&self, adds: &Adds) {
        let now = Instant::now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        for added in adds.iter().rev() {
            let total = inner.total;
            let Some(scope) = inner.scopes.get_mut(&added.id) else {
                continue;
            };
            let Some(entry) = scope.entries.get_mut(&added.key).filter(|e| e.live(now)) else {
                continue;
            };
            let Some(back) = entry
                .value
                .parse::<i64>()
                .ok()
                .and_then(|v| v.checked_sub(added.delta))
            else {
                continue;
            };
            let (old, value) = (entry.value.len(), back.to_string());
            let freed = if added.created && back == 0 {
                scope.entries.remove(&added.key);
                cost(&added.key, "") + old + ENTRY_OVERHEAD
            } else {
                scope.bytes = scope.bytes + value.len() - old;
                let grown = total + value.len() - old;
                entry.value = value;
                inner.account(&added.id.tenant, grown);
                continue;
            };
            scope.bytes -= freed - ENTRY_OVERHEAD;
            if scope.entries.is_empty() {
                inner.scopes.remove(&added.id);
            }
            inner.account(&added.id.tenant, total - freed);
        }
    }

    /// Every live key `filter` selects.
    pub(crate) fn entries(&self, filter: &StateFilter) -> Vec<StateEntry> {
        let now = Instant::now();
        let inner = self.lock();
        let mut out: Vec<StateEntry> = inner
            .scopes
            .iter()
            .filter(|(id, _)| filter.matches(id))
            .flat_map(|(id, scope)| {
                scope
                    .entries
                    .iter()
                    .filter(|(_, e)| e.live(now))
                    .map(|(key, e)| StateEntry {
                        id: id.clone(),
                        key: key.clone(),
                        value: e.value.clone(),
                        ttl_ms: e.expires.map(|at| {
                            u64::try_from(at.saturating_duration_since(now).as_millis())
                                .unwrap_or(u64::MAX)
                        }),
                    })
            })
            .collect();
        out.sort_by(|a, b| (&a.id, &a.key).cmp(&(&b.id, &b.key)));
        out
    }

    /// Removes every key `filter` selects.
    pub(crate) fn clear(&self, filter: &StateFilter) -> u64 {
        let mut inner = self.lock();
        let ids: Vec<ScopeId> = inner
            .scopes
            .keys()
            .filter(|id| filter.matches(id))
            .cloned()
            .collect();
        let mut removed = 0;
        for id in ids {
            if let Some(scope) = inner.scopes.remove(&id) {
                removed += scope.entries.len() as u64;
                let total = inner.total - scope.bytes - scope.entries.len() * ENTRY_OVERHEAD;
                inner.account(&id.tenant, total);
            }
        }
        removed
    }

    /// Keys and bytes per tenant.
    pub(crate) fn usage(&self) -> Vec<(Arc<str>, StateUsage)> {
        let inner = self.lock();
        let mut by: HashMap<Arc<str>, StateUsage> = HashMap::new();
        for (id, scope) in &inner.scopes {
            let u = by.entry(Arc::clone(&id.tenant)).or_default();
            u.keys += scope.entries.len() as u64;
            u.bytes += scope.bytes as u64;
        }
        let mut out: Vec<_> = by.into_iter().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// Marks a run's scope used now.
fn touch(scope: &mut ScopeData, id: &ScopeId, now: Instant, limits: &StateLimits) {
    if id.run.is_some() {
        scope.idle = Some((now, limits.run_ttl));
    }
}

impl Inner {
    /// The bytes held in all once `writes` are applied to `id`'s scope
    /// (starting from `total`), or the budget they break.
    fn check<'a>(
        &self,
        id: &ScopeId,
        writes: impl Iterator<Item = (&'a str, &'a Write)>,
        limits: &StateLimits,
        caps: Caps,
        mut total: usize,
    ) -> Result<usize, ImportRefused> {
        let scope = self.scopes.get(id);
        let (mut keys, mut bytes) = scope.map_or((0, 0), |s| (s.entries.len(), s.bytes));
        for (key, write) in writes {
            let old = scope
                .and_then(|s| s.entries.get(key))
                .map(|e| cost(key, &e.value));
            let new = match write {
                Write::Set(value, ttl) if ttl.is_none_or(|t| !t.is_zero()) => {
                    Some(cost(key, value))
                }
                _ => None,
            };
            match (old, new) {
                (Some(o), Some(n)) => {
                    bytes = bytes + n - o;
                    total = total + n - o;
                }
                (Some(o), None) => {
                    keys -= 1;
                    bytes -= o;
                    total -= o + ENTRY_OVERHEAD;
                }
                (None, Some(n)) => {
                    keys += 1;
                    bytes += n;
                    total += n + ENTRY_OVERHEAD;
                }
                (None, None) => {}
            }
        }
        over_budget(id, keys, bytes, limits)?;
        // One call writes one tenant's scopes: what the store grows by is
        // that tenant's.
        if (self.held(&id.tenant) + total).saturating_sub(self.total) > caps.tenant {
            return Err(refused(
                Fault::StateBudget,
                format!(
                    "this tenant's part of the memory state store is full ({} bytes, a quarter \
                     of it)",
                    caps.tenant
                ),
            ));
        }
        if total > caps.all {
            return Err(refused(
                Fault::StateFull,
                format!(
                    "the memory state store is full ({} bytes, every tenant's); nothing was \
                     written",
                    caps.all
                ),
            ));
        }
        Ok(total)
    }

    /// Bytes `tenant`'s guards hold.
    fn held(&self, tenant: &Arc<str>) -> usize {
        self.by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// Sets the store's total to `total` after a change to `tenant`'s
    /// scopes alone, and that tenant's part with it.
    fn account(&mut self, tenant: &Arc<str>, total: usize) {
        let held = (self.held(tenant) + total).saturating_sub(self.total);
        self.total = total;
        if held == 0 {
            self.by_tenant.remove(tenant);
        } else {
            self.by_tenant.insert(Arc::clone(tenant), held);
        }
    }

    /// Applies `writes` (key, write, expiry) to `id`'s scope after checking
    /// its budgets against `caps`.
    fn apply(
        &mut self,
        id: &ScopeId,
        writes: Vec<(String, Write, Option<Instant>)>,
        now: Instant,
        limits: &StateLimits,
        caps: Caps,
    ) -> Result<(), ImportRefused> {
        let total = self.check(
            id,
            writes.iter().map(|(k, w, _)| (k.as_str(), w)),
            limits,
            caps,
            self.total,
        )?;
        self.account(&id.tenant, total);
        let scope = self.scopes.entry(id.clone()).or_default();
        touch(scope, id, now, limits);
        let mut timers = Vec::new();
        for (key, write, expires) in writes {
            match write {
                Write::Set(value, _) if expires.is_none_or(|at| at > now) => {
                    let new = cost(&key, &value);
                    let entry = match scope.entries.get_mut(&key) {
                        Some(entry) => {
                            scope.bytes = scope.bytes + new - cost(&key, &entry.value);
                            entry.value = value;
                            entry.expires = expires;
                            entry
                        }
                        None => {
                            scope.bytes += new;
                            scope.entries.entry(key.clone()).or_insert(Entry {
                                value,
                                expires,
                                scheduled: None,
                            })
                        }
                    };
                    if let Some(at) = expires
                        && entry.scheduled.is_none_or(|s| at < s)
                    {
                        entry.scheduled = Some(at);
                        timers.push(Timer {
                            at,
                            id: id.clone(),
                            key: Some(key),
                        });
                    }
                }
                _ => {
                    if let Some(old) = scope.entries.remove(&key) {
                        scope.bytes -= cost(&key, &old.value);
                    }
                }
            }
        }
        let empty = scope.entries.is_empty();
        self.timers.extend(timers.into_iter().map(Reverse));
        if empty {
            self.scopes.remove(id);
        } else {
            self.schedule_idle(id);
        }
        Ok(())
    }

    /// Puts a run scope's idle timer in the heap if it has none.
    fn schedule_idle(&mut self, id: &ScopeId) {
        let Some(scope) = self.scopes.get_mut(id) else {
            return;
        };
        if let (Some((used, ttl)), None) = (scope.idle, scope.scheduled) {
            let at = used + ttl;
            scope.scheduled = Some(at);
            self.timers.push(Reverse(Timer {
                at,
                id: id.clone(),
                key: None,
            }));
        }
    }

    /// Reclaims up to [`REAP_PER_OP`] keys and runs whose time has come.
    fn reap(&mut self, now: Instant) {
        for _ in 0..REAP_PER_OP {
            match self.timers.peek() {
                Some(Reverse(t)) if t.at <= now => {}
                _ => return,
            }
            let Some(Reverse(timer)) = self.timers.pop() else {
                return;
            };
            let Some(scope) = self.scopes.get_mut(&timer.id) else {
                continue;
            };
            match timer.key {
                None => {
                    if scope.scheduled != Some(timer.at) {
                        continue;
                    }
                    scope.scheduled = None;
                    match scope.idle {
                        Some((used, ttl)) if used + ttl > now => self.schedule_idle(&timer.id),
                        _ => {
                            if let Some(gone) = self.scopes.remove(&timer.id) {
                                let total =
                                    self.total - gone.bytes - gone.entries.len() * ENTRY_OVERHEAD;
                                self.account(&timer.id.tenant, total);
                            }
                        }
                    }
                }
                Some(key) => {
                    let Some(entry) = scope.entries.get_mut(&key) else {
                        continue;
                    };
                    if entry.scheduled != Some(timer.at) {
                        continue;
                    }
                    entry.scheduled = None;
                    match entry.expires {
                        Some(at) if at <= now => {
                            let c = cost(&key, &entry.value);
                            scope.entries.remove(&key);
                            scope.bytes -= c;
                            if scope.entries.is_empty() {
                                self.scopes.remove(&timer.id);
                            }
                            let total = self.total - c - ENTRY_OVERHEAD;
                            self.account(&timer.id.tenant, total);
                        }
                        Some(at) => {
                            entry.scheduled = Some(at);
                            self.timers.push(Reverse(Timer {
                                at,
                                id: timer.id,
                                key: Some(key),
                            }));
                        }
                        None => {}
                    }
                }
            }
        }
    }
}

/// The memory store answers at once: each answer is ready when asked.
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn shown(&self) -> String {
        "memory".into()
    }

    fn get<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<Option<String>, ImportRefused>> {
        Box::pin(ready(Ok(MemoryStore::get(self, id, key, limits))))
    }

    fn add<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        delta: i64,
        ttl: Option<Duration>,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(i64, bool), ImportRefused>> {
        Box::pin(ready(MemoryStore::add(self, id, key, delta, ttl, limits)))
    }

    fn commit<'a>(
        &'a self,
        writes: &'a Writes,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(), ImportRefused>> {
        Box::pin(ready(MemoryStore::commit(self, writes, limits)))
    }

    fn undo<'a>(&'a self, adds: &'a Adds) -> Pending<'a, Result<(), ImportRefused>> {
        MemoryStore::undo(self, adds);
        Box::pin(ready(Ok(())))
    }

    fn entries<'a>(
        &'a self,
        filter: &'a StateFilter,
    ) -> Pending<'a, Result<Vec<StateEntry>, crate::Error>> {
        Box::pin(ready(Ok(MemoryStore::entries(self, filter))))
    }

    fn clear<'a>(&'a self, filter: &'a StateFilter) -> Pending<'a, Result<u64, crate::Error>> {
        Box::pin(ready(Ok(MemoryStore::clear(self, filter))))
    }

    fn usage(&self) -> Vec<(Arc<str>, StateUsage)> {
        MemoryStore::usage(self)
    }
}
