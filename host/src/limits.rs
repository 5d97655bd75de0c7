//! Per-plugin resource limits and the store limiter that enforces them.

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
    /// Largest linear memory (and table-growth bound) of any instance, in
    /// bytes. Growing past it traps. Default: 128 MiB. Must not exceed the
    /// engine's [`max_memory_bytes`](crate::EngineConfig::max_memory_bytes).
    pub memory_bytes: usize,
    /// Wall-clock deadline for one call, enforced by epoch interruption.
    /// Default: 200 ms. Checked at every epoch tick
    /// (1 ms), when a running guest also yields to the executor; overshoots
    /// by at most one tick. Serialised as `timeout_ms` (milliseconds), the
    /// manifest's key.
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
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// The error a store's limiter raises when a guest grows past its cap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded: wanted {wanted} bytes, the limit is {limit}")]
pub struct MemoryLimitExceeded {
    /// The size the guest asked for.
    pub wanted: usize,
    /// The configured cap.
    pub limit: usize,
}

/// A `ResourceLimiter` that traps (rather than failing `memory.grow`) when
/// a memory or table would grow past the plugin's cap.
#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
}

impl Limiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Limiter {
            memory_bytes: limits.memory_bytes,
            // A function table entry is a pointer; bound tables by the same
            // byte budget.
            table_elements: limits.memory_bytes / 8,
        }
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return Err(MemoryLimitExceeded {
                wanted: desired,
                limit: self.memory_bytes,
            }
            .into());
        }
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
