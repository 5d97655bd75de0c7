//! Per-plugin resource limits and the store limiter that enforces them.

use crate::fault::MemoryLimitExceeded;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits applied to every hook call of one plugin.
///
/// Built by value from [`Limits::default`]; every field documents its
/// default. Limits bound a single hook call: each call runs on a fresh
/// instance, so nothing accumulates across calls.
///
/// Not covered here: the maximum wasm stack is engine-wide (see
/// [`EngineConfig::max_wasm_stack`](crate::EngineConfig::max_wasm_stack)),
/// because wasmtime sets it per engine, not per store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Fuel (roughly: wasm instructions) one call may burn, including the
    /// guest's own start-up. Default: 500 million. Time spent in host
    /// imports burns no fuel; the deadline covers it.
    pub fuel: u64,
    /// Largest linear memory of an instance — all of its memories
    /// together — (and table-growth bound), in bytes. Growing past it
    /// traps. It is also what a call commits from its account's memory
    /// share (see `crate::runtime::shares`). Default: 128 MiB. Must not exceed the
    /// engine's [`max_memory_bytes`](crate::EngineConfig::max_memory_bytes).
    pub memory_bytes: usize,
    /// Run time one call may take: the CPU time its instance spends
    /// running — start-up, guest code, its host calls — not the time it
    /// waits for a core on a busy host. Past it the call faults with
    /// `deadline` (the guard's doing). Default: 200 ms. Checked at every
    /// epoch tick (1 ms), when a running guest also yields to the executor;
    /// overshoots by about a tick. A call that has not finished within its
    /// [`wall_bound`](Limits::wall_bound) of wall-clock time, having run
    /// less than this, was starved by the host: it is stopped and faults
    /// with `overloaded` (the host's doing). Serialised as `timeout_ms`
    /// (milliseconds), the manifest's key.
    #[serde(rename = "timeout_ms", with = "millis")]
    pub timeout: Duration,
    /// Largest string (content, tool name, args JSON, tool name in a list)
    /// a guard may return, in bytes. Default: 4 MiB. The guest's reply is
    /// copied before it is checked, so the memory cap is what bounds the
    /// copy; this bounds what is passed on.
    pub max_return_bytes: usize,
    /// Calls to host imports (`log`, `config`) allowed per hook call.
    /// Default: 1,000. The call after the last traps.
    pub host_calls: u32,
    /// Bytes of log text a guard may write per call (via `log`, stdout and
    /// stderr together). Default: 64 KiB. Writes past it are dropped for
    /// stdout/stderr and trap for `log`.
    pub log_bytes: usize,
    /// State operations (`get`, `set`, `delete`, `add`) allowed per hook
    /// call. Default: 100. The one after the last traps (`state-budget`).
    pub state_ops: u32,
    /// Keys one of the plugin's state scopes (a run's, or the tenant's) may
    /// hold. Default: 1,000. A write past it traps (`state-budget`).
    pub state_keys: u32,
    /// Bytes (keys and values together) one of the plugin's state scopes
    /// may hold. Default: 1 MiB. A write past it traps (`state-budget`).
    /// Serialised as `state_kib`, the manifest's key.
    #[serde(rename = "state_kib", with = "kib")]
    pub state_bytes: usize,
    /// How long a run's state lives after the run's last call touching it.
    /// Default: 1 hour. Serialised as `state_run_ttl_s` (seconds).
    #[serde(rename = "state_run_ttl_s", with = "secs")]
    pub state_run_ttl: Duration,
    /// The longest expiry a guard may give a key; longer ones are cut to
    /// it. Default: 30 days. Serialised as `state_max_ttl_s` (seconds).
    #[serde(rename = "state_max_ttl_s", with = "secs")]
    pub state_max_ttl: Duration,
    /// Outbound HTTP requests (each redirect followed counts) one call may
    /// make, when its plugin is granted any (see `allowed_hosts`).
    /// Default: 4. The one after the last traps (`http-budget`).
    pub http_requests: u32,
    /// Largest body one outbound request may send, in bytes. Default:
    /// 64 KiB. Serialised as `http_request_kib`, the manifest's key.
    #[serde(rename = "http_request_kib", with = "kib")]
    pub http_request_bytes: usize,
    /// Largest body one outbound response may bring back, in bytes; a
    /// longer one traps the call (`http-budget`) as soon as it is seen.
    /// Default: 1 MiB. Serialised as `http_response_kib`.
    #[serde(rename = "http_response_kib", with = "kib")]
    pub http_response_bytes: usize,
}

impl Limits {
    /// The wall-clock time one call may take in all, waiting for a core
    /// included: four times its `timeout`, and at least `timeout` plus a
    /// second. Past it, a call that has not run its `timeout` is stopped as
    /// `overloaded` — the host did not give it the CPU — and its request is
    /// answered as not decided (backpressure), never as if the guard had
    /// said nothing.
    pub fn wall_bound(&self) -> Duration {
        wall_bound(self.timeout)
    }

    /// Each limit lowered to `ceiling`'s where it is above: what a tenant
    /// plugin gets for a limit it does not set.
    pub fn clamped_to(&self, ceiling: &Limits) -> Limits {
        Limits {
            fuel: self.fuel.min(ceiling.fuel),
            memory_bytes: self.memory_bytes.min(ceiling.memory_bytes),
            timeout: self.timeout.min(ceiling.timeout),
            max_return_bytes: self.max_return_bytes.min(ceiling.max_return_bytes),
            host_calls: self.host_calls.min(ceiling.host_calls),
            log_bytes: self.log_bytes.min(ceiling.log_bytes),
            state_ops: self.state_ops.min(ceiling.state_ops),
            state_keys: self.state_keys.min(ceiling.state_keys),
            state_bytes: self.state_bytes.min(ceiling.state_bytes),
            state_run_ttl: self.state_run_ttl.min(ceiling.state_run_ttl),
            state_max_ttl: self.state_max_ttl.min(ceiling.state_max_ttl),
            http_requests: self.http_requests.min(ceiling.http_requests),
            http_request_bytes: self.http_request_bytes.min(ceiling.http_request_bytes),
            http_response_bytes: self.http_response_bytes.min(ceiling.http_response_bytes),
        }
    }

    /// The first limit above `ceiling`'s, as (manifest key, value, ceiling),
    /// in the manifest's units.
    pub fn above(&self, ceiling: &Limits) -> Option<(&'static str, u64, u64)> {
        let kib = |b: usize| (b as u64).div_ceil(1 << 10);
        let mib = |b: usize| (b as u64).div_ceil(1 << 20);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        [
            ("fuel", self.fuel, ceiling.fuel),
            (
                "memory_mib",
                mib(self.memory_bytes),
                mib(ceiling.memory_bytes),
            ),
            ("timeout_ms", ms(self.timeout), ms(ceiling.timeout)),
            (
                "max_return_kib",
                kib(self.max_return_bytes),
                kib(ceiling.max_return_bytes),
            ),
            (
                "host_calls",
                u64::from(self.host_calls),
                u64::from(ceiling.host_calls),
            ),
            ("log_kib", kib(self.log_bytes), kib(ceiling.log_bytes)),
            (
                "state_ops",
                u64::from(self.state_ops),
                u64::from(ceiling.state_ops),
            ),
            (
                "state_keys",
                u64::from(self.state_keys),
                u64::from(ceiling.state_keys),
            ),
            ("state_kib", kib(self.state_bytes), kib(ceiling.state_bytes)),
            (
                "state_run_ttl_s",
                self.state_run_ttl.as_secs(),
                ceiling.state_run_ttl.as_secs(),
            ),
            (
                "state_max_ttl_s",
                self.state_max_ttl.as_secs(),
                ceiling.state_max_ttl.as_secs(),
            ),
            (
                "http_requests",
                u64::from(self.http_requests),
                u64::from(ceiling.http_requests),
            ),
            (
                "http_request_kib",
                kib(self.http_request_bytes),
                kib(ceiling.http_request_bytes),
            ),
            (
                "http_response_kib",
                kib(self.http_response_bytes),
                kib(ceiling.http_response_bytes),
            ),
        ]
        .into_iter()
        .find(|(_, v, c)| v > c)
    }
}

/// The least room for waiting a call's wall-clock bound leaves beyond its
/// `timeout`.
const WALL_ROOM: Duration = Duration::from_secs(1);

/// The wall-clock bound of a call that may run for `timeout` (see
/// [`Limits::wall_bound`]).
pub(crate) fn wall_bound(timeout: Duration) -> Duration {
    timeout
        .saturating_mul(4)
        .max(timeout.saturating_add(WALL_ROOM))
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 500_000_000,
            memory_bytes: 128 << 20,
            timeout: Duration::from_millis(200),
            max_return_bytes: 4 << 20,
            host_calls: 1_000,
            log_bytes: 64 << 10,
            state_ops: 100,
            state_keys: 1_000,
            state_bytes: 1 << 20,
            state_run_ttl: Duration::from_secs(3_600),
            state_max_ttl: Duration::from_secs(30 * 86_400),
            http_requests: 4,
            http_request_bytes: 64 << 10,
            http_response_bytes: 1 << 20,
        }
    }
}

pub(crate) mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

pub(crate) mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

pub(crate) mod kib {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64((*bytes as u64).div_ceil(1 << 10))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        u64::deserialize(d).map(|kib| usize::try_from(kib << 10).unwrap_or(usize::MAX))
    }
}

/// A `ResourceLimiter` that traps (rather than failing `memory.grow`) when
/// the instance's memories together, or a table, would grow past the
/// plugin's cap. The memory cap covers all of a component's linear
/// memories at once: a component of many memories gets no more than one.
#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    /// Bytes of linear memory the instance's memories hold together.
    memory_used: usize,
}

impl Limiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Limiter {
            memory_bytes: limits.memory_bytes,
            // A function table entry is a pointer; bound tables by the same
            // byte budget.
            table_elements: limits.memory_bytes / 8,
            memory_used: 0,
        }
    }

    /// Bytes of linear memory the instance's memories hold together.
    pub(crate) fn memory_used(&self) -> usize {
        self.memory_used
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self
            .memory_used
            .saturating_sub(current)
            .saturating_add(desired);
        if total > self.memory_bytes {
            return Err(MemoryLimitExceeded {
                wanted: total,
                limit: self.memory_bytes,
            }
            .into());
        }
        self.memory_used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return Err(MemoryLimitExceeded {
                wanted: desired.saturating_mul(8),
                limit: self.memory_bytes,
            }
            .into());
        }
        Ok(true)
    }
}
