//! Guard state: what a guard keeps between calls through the `state`
//! import, in a scope the host chooses, in a store shared by every call.
//!
//! - [`ScopeId`]: whose state — (tenant, plugin) for the tenant scope,
//!   (tenant, plugin, run) for a run's. A guard names only the scope and a
//!   key inside it; the host fills in the owner, so no key string reaches
//!   another owner's state.
//! - [`StateStore`]: where it lives — in this process ([`memory`]) or in
//!   Redis ([`redis`]), shared by replicas.
//! - [`CallState`] (in [`call`]): one hook call's view — reads see the
//!   call's own pending writes; `set` / `delete` are committed when the
//!   call returns normally and dropped when it faults; `add` is applied at
//!   once (so concurrent calls count exactly) and given back on a fault —
//!   unless one of the call's writes may have landed unseen (no answer in
//!   time), when nothing is given back and a counter errs toward counting.

pub(crate) mod call;
pub(crate) mod memory;
pub(crate) mod redis;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::fault::{Fault, ImportRefused};
use crate::runtime::limits::Limits;

/// Which of a guard's scopes (the WIT `state.scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// The run's: (tenant, plugin, run id).
    Run,
    /// The tenant's: (tenant, plugin).
    Tenant,
}

/// The owner of one scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ScopeId {
    /// The tenant whose call wrote it (`""`: the operator's own plugins).
    pub tenant: Arc<str>,
    /// The plugin's name.
    pub plugin: Arc<str>,
    /// The run, for a run's scope; `None` for the tenant scope.
    pub run: Option<Arc<str>>,
}

impl ScopeId {
    /// Which scope this is.
    pub fn scope(&self) -> Scope {
        if self.run.is_some() {
            Scope::Run
        } else {
            Scope::Tenant
        }
    }
}

/// What the operator's `state get` / `state clear` select: one tenant's
/// state, optionally one plugin's, optionally one run's.
#[derive(Clone, Debug, Default)]
pub struct StateFilter {
    /// The tenant (`""`: the operator's own plugins).
    pub tenant: String,
    /// Only this plugin's scopes.
    pub plugin: Option<String>,
    /// Only this run's scopes (and no tenant scope).
    pub run: Option<String>,
}

impl StateFilter {
    /// Whether `id` is selected.
    pub fn matches(&self, id: &ScopeId) -> bool {
        *id.tenant == *self.tenant
            && self.plugin.as_deref().is_none_or(|p| *id.plugin == *p)
            && self
                .run
                .as_deref()
                .is_none_or(|r| id.run.as_deref() == Some(r))
    }
}

/// One stored key, as the operator sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StateEntry {
    /// Whose it is.
    #[serde(flatten)]
    pub id: ScopeId,
    /// The guard's key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Milliseconds until it expires; `None`: it lives as long as its scope.
    pub ttl_ms: Option<u64>,
}

/// Keys and bytes one tenant's guards hold in the store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StateUsage {
    /// Keys held.
    pub keys: u64,
    /// Bytes held (keys and values).
    pub bytes: u64,
}

/// The per-plugin state budgets (from its [`Limits`]) an operation is
/// checked against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StateLimits {
    pub(crate) ops: u32,
    pub(crate) keys: u32,
    pub(crate) bytes: usize,
    pub(crate) run_ttl: Duration,
    pub(crate) max_ttl: Duration,
    /// How long one call may wait on the store in all: its `timeout`.
    pub(crate) wait: Duration,
}

impl From<&Limits> for StateLimits {
    fn from(l: &Limits) -> Self {
        StateLimits {
            ops: l.state_ops,
            keys: l.state_keys,
            bytes: l.state_bytes,
            run_ttl: l.state_run_ttl,
            max_ttl: l.state_max_ttl,
            wait: l.timeout,
        }
    }
}

impl StateLimits {
    /// A guard's expiry in milliseconds as the store keeps it: cut to
    /// `max_ttl`, `None` for "as long as the scope".
    pub(crate) fn ttl(&self, ttl_ms: Option<u64>) -> Option<Duration> {
        ttl_ms.map(|ms| Duration::from_millis(ms).min(self.max_ttl))
    }
}

/// A write kept aside until its call commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// `set`: the value and its expiry.
    Set(String, Option<Duration>),
    /// `delete`.
    Delete,
}

/// The writes of one call, by scope and key.
pub(crate) type Writes = Vec<(ScopeId, Vec<(String, Write)>)>;

/// One `add` a call made, to give back if it faults.
#[derive(Clone, Debug)]
pub(crate) struct Added {
    pub(crate) id: ScopeId,
    pub(crate) key: String,
    pub(crate) delta: i64,
    /// Whether the add created the key: given back to 0, it is removed.
    pub(crate) created: bool,
}

/// The adds of one call, to give back if it faults.
pub(crate) type Adds = Vec<Added>;

/// A state operation's failure: it traps the guest's call with the fault
/// it names.
pub(crate) fn refused(fault: Fault, message: impl Into<String>) -> ImportRefused {
    ImportRefused::new(fault, message)
}

/// The refusal of a scope that would hold `keys` keys and `bytes` bytes,
/// if that is over its budgets; the same words from every store.
pub(crate) fn over_budget(
    id: &ScopeId,
    keys: usize,
    bytes: usize,
    limits: &StateLimits,
) -> Result<(), ImportRefused> {
    let scope = if id.run.is_some() { "run" } else { "tenant" };
    if keys > limits.keys as usize {
        return Err(refused(
            Fault::StateBudget,
            format!(
                "the {scope} scope would hold {keys} keys; state_keys is {}",
                limits.keys
            ),
        ));
    }
    if bytes > limits.bytes {
        return Err(refused(
            Fault::StateBudget,
            format!(
                "the {scope} scope would hold {bytes} bytes; state_kib is {}",
                limits.bytes >> 10
            ),
        ));
    }
    Ok(())
}

/// `add`'s arithmetic, the same in every store and in a call's pending
/// writes: `delta` added to the integer `current` holds at `key` (absent:
/// 0); a value that is not a decimal integer, or a sum outside s64, is a
/// misuse (`state-invalid`). A decimal integer is written as `add` writes
/// it (`-`, digits, no leading zero or `+`): what Redis's `HINCRBY` takes,
/// so every store agrees.
pub(crate) fn sum(key: &str, current: Option<&str>, delta: i64) -> Result<i64, ImportRefused> {
    let current = match current {
        None => 0,
        Some(text) => canonical(text).ok_or_else(|| {
            refused(
                Fault::StateInvalid,
                format!("state add on {key:?}: its value is not a decimal integer"),
            )
        })?,
    };
    current.checked_add(delta).ok_or_else(|| {
        refused(
            Fault::StateInvalid,
            format!("state add on {key:?}: {current} + {delta} is outside s64"),
        )
    })
}

/// `text` as an integer if it is one written as `add` writes it.
fn canonical(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|n| n.to_string() == text)
}

/// A store's answer, to be awaited.
pub(crate) type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A place guards' state is kept. Each store is a file of its own
/// ([`memory`], [`redis`]); [`StateBackend`](crate::StateBackend)
/// (`runtime/engine.rs`) is the one place they are registered — parsed
/// from `--state` and opened. Every store gives the same answers in the
/// same words: its budgets through [`over_budget`], `add`'s arithmetic
/// through [`sum`].
pub(crate) trait Store: Send + Sync {
    /// `"memory"`, `"redis"`: which store this is.
    fn kind(&self) -> &'static str;

    /// Where the state is, for people (no password).
    fn shown(&self) -> String;

    /// The value of `key` in scope `id`, if it is live.
    fn get<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<Option<String>, ImportRefused>>;

    /// Adds `delta` to the integer at `key` at once; the sum, and whether
    /// the key was created.
    fn add<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        delta: i64,
        ttl: Option<Duration>,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(i64, bool), ImportRefused>>;

    /// Applies a call's writes, all or none, within its budgets.
    fn commit<'a>(
        &'a self,
        writes: &'a Writes,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(), ImportRefused>>;

    /// Gives back a faulted call's adds (see [`StateStore::undo`]).
    fn undo<'a>(&'a self, adds: &'a Adds) -> Pending<'a, Result<(), ImportRefused>>;

    /// Every live key `filter` selects, sorted by owner and key.
    fn entries<'a>(
        &'a self,
        filter: &'a StateFilter,
    ) -> Pending<'a, Result<Vec<StateEntry>, crate::Error>>;

    /// Removes every key `filter` selects; returns how many.
    fn clear<'a>(&'a self, filter: &'a StateFilter) -> Pending<'a, Result<u64, crate::Error>>;

    /// Keys and bytes held per tenant, for the gauges; none when the
    /// store's own server reports them.
    fn usage(&self) -> Vec<(Arc<str>, StateUsage)> {
        Vec::new()
    }
}

/// Where guards' state lives: in this process (the default) or in Redis,
/// each a store of its own behind one trait (`runtime/state`).
pub struct StateStore(Box<dyn Store>);

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

impl StateStore {
    /// An in-memory store holding at most `capacity` bytes in all: the
    /// default. Lost on restart; not shared by replicas.
    pub fn memory(capacity: usize) -> StateStore {
        StateStore(Box::new(memory::MemoryStore::new(capacity)))
    }

    /// A Redis store at `url`, shared by every replica that names the
    /// same server; the connection is made on first use.
    pub fn redis(url: &str) -> Result<StateStore, crate::Error> {
        Ok(StateStore(Box::new(self::redis::RedisStore::open(url)?)))
    }

    /// Where the state is, for people: `memory`, or the Redis URL without
    /// its password.
    pub fn shown(&self) -> String {
        self.0.shown()
    }

    /// `"memory"` or `"redis"`.
    pub fn describe(&self) -> &'static str {
        self.0.kind()
    }

    pub(crate) fn get<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<Option<String>, ImportRefused>> {
        self.0.get(id, key, limits)
    }

    pub(crate) fn add<'a>(
        &'a self,
        id: &'a ScopeId,
        key: &'a str,
        delta: i64,
        ttl: Option<Duration>,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(i64, bool), ImportRefused>> {
        self.0.add(id, key, delta, ttl, limits)
    }

    pub(crate) fn commit<'a>(
        &'a self,
        writes: &'a Writes,
        limits: &'a StateLimits,
    ) -> Pending<'a, Result<(), ImportRefused>> {
        self.0.commit(writes, limits)
    }

    /// Gives back what a faulted call added (a key gone since is left
    /// gone; a key the call created, back at 0, is removed). A store that
    /// cannot be reached keeps them: logged, and a counter errs toward
    /// counting. Called only when every write of the call is known to
    /// have been applied or not.
    pub(crate) async fn undo(&self, adds: &Adds) {
        if let Err(e) = self.0.undo(adds).await {
            tracing::warn!(
                adds = adds.len(),
                "a faulted call's adds were kept: {}",
                e.message
            );
        }
    }

    /// Every live key `filter` selects, sorted by owner and key.
    pub async fn entries(&self, filter: &StateFilter) -> Result<Vec<StateEntry>, crate::Error> {
        self.0.entries(filter).await
    }

    /// Removes every key `filter` selects; returns how many.
    pub async fn clear(&self, filter: &StateFilter) -> Result<u64, crate::Error> {
        self.0.clear(filter).await
    }

    /// Keys and bytes held per tenant (`""`: the operator's plugins), for
    /// the gauges. The Redis store reports none (its server's own
    /// `INFO` does).
    pub fn usage(&self) -> Vec<(Arc<str>, StateUsage)> {
        self.0.usage()
    }
}
