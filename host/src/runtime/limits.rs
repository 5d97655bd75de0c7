//! Per-plugin resource limits and the store limiter that enforces them.

use crate::fault::MemoryLimitExceeded;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Largest `timeout_ms` a manifest may set (10 minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// The limit keys, each declared once: its field of [`Limits`] (type,
/// default, doc), its manifest key (the type it is written as, its unit,
/// range and the unit its range is said in) and, for some, the `toolgate
/// serve` flag that sets the operator's ceiling for it (name and help).
/// Everything that spells a limit key is generated from this table:
/// [`Limits`], its `Default`, [`Limits::clamped_to`] and
/// [`Limits::above`] (here), the limit keys of `[[plugin]]`, `[defaults]`
/// and `[ceilings]` with their checks and spans
/// (`load/manifest/tables.rs`), and the CLI's `--tenant-max-*` flags
/// (`bin/toolgate/args.rs`).
///
/// An entry is
///
/// ```text
/// { $(#[attr])* field: Type = default;
///   key manifest_key: Written => unit, lo, hi, " range unit";
///   $( flag cli_field $(#[doc])*; )? }
/// ```
///
/// where `unit` is one of [`unit`]'s modules (how a written value becomes
/// the field, and back) and `hi` is a number or [`EngineMaxMib`]. The
/// order is the order of the struct's fields (and so of its JSON), of the
/// manifest's checks and of the flags in `toolgate serve --help`.
///
/// `limit_keys!(then)` (or `limit_keys!(then { args })`) calls the macro
/// `then` with `args` followed by
///
/// ```text
/// keys { $( {
///     $(#[attr])* field: Type = default;
///     key: Written, into, written, lo, hi, " range unit";
///     flag { $( cli_field $(#[doc])* )? }
/// } )* }
/// ```
///
/// where `into` and `written` are paths to the unit's conversions.
#[doc(hidden)]
#[macro_export]
macro_rules! limit_keys {
    (@entries $then:ident { $($args:tt)* } $( {
        $(#[$attr:meta])*
        $field:ident: $ty:ty = $default:expr;
        key $key:ident: $raw:ty => $unit:ident, $lo:expr, $hi:expr, $range_unit:literal;
        $( flag $flag:ident $(#[$help:meta])*; )?
    } )*) => {
        $then! { $($args)* keys { $( {
            $(#[$attr])* $field: $ty = $default;
            $key: $raw, $crate::limit_unit::$unit::field, $crate::limit_unit::$unit::written,
                $lo, $hi, $range_unit;
            flag { $( $flag $(#[$help])* )? }
        } )* } }
    };
    ($then:ident $({ $($args:tt)* })?) => {
        $crate::limit_keys! { @entries $then { $($($args)*)? }
            {
                /// Fuel (roughly: wasm instructions) one call may burn, including the
                /// guest's own start-up. Default: 500 million. Time spent in host
                /// imports burns no fuel; the deadline covers it.
                fuel: u64 = 500_000_000;
                key fuel: u64 => count, 1, u64::MAX, "";
                flag tenant_max_fuel
                    /// Ceiling on a tenant plugin's fuel per call.
                    ;
            }
            {
                /// Largest linear memory of an instance — all of its memories
                /// together — (and table-growth bound), in bytes. Growing past it
                /// traps. It is also what a call commits from its account's memory
                /// share (see `crate::runtime::shares`). Default: 128 MiB. Must not exceed the
                /// engine's [`max_memory_bytes`](crate::EngineConfig::max_memory_bytes).
                memory_bytes: usize = 128 << 20;
                key memory_mib: u64 => mib, 1, $crate::limit_unit::EngineMaxMib,
                    " MiB (the engine's maximum)";
                flag tenant_max_memory_mib
                    /// Ceiling on a tenant plugin's memory, MiB.
                    ;
            }
            {
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
                #[serde(rename = "timeout_ms", with = "crate::runtime::limits::unit::millis")]
                timeout: std::time::Duration = std::time::Duration::from_millis(200);
                key timeout_ms: u64 => millis, 1, $crate::limit_unit::MAX_TIMEOUT_MS, " ms";
                flag tenant_max_timeout_ms
                    /// Ceiling on a tenant plugin's timeout, ms.
                    ;
            }
            {
                /// Largest string (content, tool name, args JSON, tool name in a list)
                /// a guard may return, in bytes. Default: 4 MiB. The guest's reply is
                /// copied before it is checked, so the memory cap is what bounds the
                /// copy; this bounds what is passed on.
                max_return_bytes: usize = 4 << 20;
                key max_return_kib: u64 => kib, 1, 1 << 20, " KiB";
                flag tenant_max_return_kib
                    /// Ceiling on a tenant plugin's largest returned string, KiB.
                    ;
            }
            {
                /// Calls to host imports (`log`, `config`) allowed per hook call.
                /// Default: 1,000. The call after the last traps.
                host_calls: u32 = 1_000;
                key host_calls: u32 => count, 0, u32::MAX, "";
                flag tenant_max_host_calls
                    /// Ceiling on a tenant plugin's host calls per call.
                    ;
            }
            {
                /// Bytes of log text a guard may write per call (via `log`, stdout and
                /// stderr together). Default: 64 KiB. Writes past it are dropped for
                /// stdout/stderr and trap for `log`.
                log_bytes: usize = 64 << 10;
                key log_kib: u64 => kib, 0, 1 << 20, " KiB";
                flag tenant_max_log_kib
                    /// Ceiling on a tenant plugin's log text per call, KiB.
                    ;
            }
            {
                /// State operations (`get`, `set`, `delete`, `add`) allowed per hook
                /// call. Default: 100. The one after the last traps (`state-budget`).
                state_ops: u32 = 100;
                key state_ops: u32 => count, 0, u32::MAX, "";
            }
            {
                /// Keys one of the plugin's state scopes (a run's, or the tenant's) may
                /// hold. Default: 1,000. A write past it traps (`state-budget`).
                state_keys: u32 = 1_000;
                key state_keys: u32 => count, 0, u32::MAX, "";
            }
            {
                /// Bytes (keys and values together) one of the plugin's state scopes
                /// may hold. Default: 1 MiB. A write past it traps (`state-budget`).
                /// Serialised as `state_kib`, the manifest's key.
                #[serde(rename = "state_kib", with = "crate::runtime::limits::unit::kib")]
                state_bytes: usize = 1 << 20;
                key state_kib: u64 => kib, 0, 1 << 20, " KiB";
            }
            {
                /// How long a run's state lives after the run's last call touching it.
                /// Default: 1 hour. Serialised as `state_run_ttl_s` (seconds).
                #[serde(rename = "state_run_ttl_s", with = "crate::runtime::limits::unit::secs")]
                state_run_ttl: std::time::Duration = std::time::Duration::from_secs(3_600);
                key state_run_ttl_s: u64 => secs, 1, 365 * 86_400, " s";
            }
            {
                /// The longest expiry a guard may give a key; longer ones are cut to
                /// it. Default: 30 days. Serialised as `state_max_ttl_s` (seconds).
                #[serde(rename = "state_max_ttl_s", with = "crate::runtime::limits::unit::secs")]
                state_max_ttl: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
                key state_max_ttl_s: u64 => secs, 1, 3_650 * 86_400, " s";
            }
            {
                /// Outbound HTTP requests (each redirect followed counts) one call may
                /// make, when its plugin is granted any (see `allowed_hosts`).
                /// Default: 4. The one after the last traps (`http-budget`).
                http_requests: u32 = 4;
                key http_requests: u32 => count, 0, 1_000, "";
            }
            {
                /// Largest body one outbound request may send, in bytes. Default:
                /// 64 KiB. Serialised as `http_request_kib`, the manifest's key.
                #[serde(rename = "http_request_kib", with = "crate::runtime::limits::unit::kib")]
                http_request_bytes: usize = 64 << 10;
                key http_request_kib: u64 => kib, 0, 64 << 10, " KiB";
            }
            {
                /// Largest body one outbound response may bring back, in bytes; a
                /// longer one traps the call (`http-budget`) as soon as it is seen.
                /// Default: 1 MiB. Serialised as `http_response_kib`.
                #[serde(rename = "http_response_kib", with = "crate::runtime::limits::unit::kib")]
                http_response_bytes: usize = 1 << 20;
                key http_response_kib: u64 => kib, 0, 64 << 10, " KiB";
            }
        }
    };
}

/// Generates [`Limits`], its `Default`, [`Limits::clamped_to`] and
/// [`Limits::above`] from [`limit_keys!`](crate::limit_keys).
macro_rules! limits_struct {
    (keys { $( {
        $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
        $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
        flag $_flag:tt
    } )* }) => {
        /// Limits applied to every hook call of one plugin.
        ///
        /// Built by value from [`Limits::default`]; every field documents its
        /// default. Limits bound a single hook call: each call runs on a fresh
        /// instance, so nothing accumulates across calls. Each field is a
        /// manifest key (`limit_keys!` declares them).
        ///
        /// Not covered here: the maximum wasm stack is engine-wide (see
        /// [`EngineConfig::max_wasm_stack`](crate::EngineConfig::max_wasm_stack)),
        /// because wasmtime sets it per engine, not per store.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Limits {
            $( $(#[$attr])* pub $field: $ty, )*
        }

        impl Default for Limits {
            fn default() -> Self {
                Limits { $( $field: $default, )* }
            }
        }

        impl Limits {
            /// Each limit lowered to `ceiling`'s where it is above: what a tenant
            /// plugin gets for a limit it does not set.
            pub fn clamped_to(&self, ceiling: &Limits) -> Limits {
                Limits { $( $field: self.$field.min(ceiling.$field), )* }
            }

            /// Each limit in the manifest's units, as (manifest key, value), in
            /// the manifest's order.
            pub fn written(&self) -> impl Iterator<Item = (&'static str, u64)> + use<> {
                [$( (stringify!($key), $written(&self.$field)) ),*].into_iter()
            }
        }
    };
}

crate::limit_keys!(limits_struct);

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

    /// The first limit above `ceiling`'s, as (manifest key, value, ceiling),
    /// in the manifest's units.
    pub fn above(&self, ceiling: &Limits) -> Option<(&'static str, u64, u64)> {
        self.written()
            .zip(ceiling.written())
            .map(|((key, v), (_, c))| (key, v, c))
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

/// How a limit key's value as written in a manifest becomes its field of
/// [`Limits`] (`field`), and back (`written`, rounded up); the serde
/// modules of the fields serialised in the manifest's units.
pub mod unit {
    pub use super::MAX_TIMEOUT_MS;

    /// The engine's largest memory, in MiB (at least 1): `memory_mib`'s
    /// upper bound, known only when a manifest is read.
    #[derive(Clone, Copy, Debug)]
    pub struct EngineMaxMib;

    /// A key's upper bound, given the engine's largest memory in bytes.
    pub trait Bound<T> {
        /// The bound.
        fn bound(self, max_memory_bytes: usize) -> T;
    }

    impl<T> Bound<T> for T {
        fn bound(self, _: usize) -> T {
            self
        }
    }

    impl Bound<u64> for EngineMaxMib {
        fn bound(self, max_memory_bytes: usize) -> u64 {
            (max_memory_bytes as u64 >> 20).max(1)
        }
    }

    /// A count: written as it is.
    pub mod count {
        /// The field of written `v`.
        pub fn field<T>(v: T) -> T {
            v
        }

        /// The field as written.
        pub fn written<T: Copy + Into<u64>>(v: &T) -> u64 {
            (*v).into()
        }
    }

    /// Bytes, written in KiB.
    pub mod kib {
        use serde::{Deserialize, Deserializer, Serializer};

        /// The bytes of `kib` KiB (saturating).
        pub fn field(kib: u64) -> usize {
            usize::try_from(kib.saturating_mul(1 << 10)).unwrap_or(usize::MAX)
        }

        /// `bytes` in KiB, rounded up.
        pub fn written(bytes: &usize) -> u64 {
            (*bytes as u64).div_ceil(1 << 10)
        }

        /// Serialises bytes as KiB.
        pub fn serialize<S: Serializer>(bytes: &usize, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_u64(written(bytes))
        }

        /// Deserialises KiB as bytes.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
            u64::deserialize(d).map(field)
        }
    }

    /// Bytes, written in MiB.
    pub mod mib {
        /// The bytes of `mib` MiB (saturating).
        pub fn field(mib: u64) -> usize {
            usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
        }

        /// `bytes` in MiB, rounded up.
        pub fn written(bytes: &usize) -> u64 {
            (*bytes as u64).div_ceil(1 << 20)
        }
    }

    /// A duration, written in milliseconds.
    pub mod millis {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        /// The duration of `ms` milliseconds.
        pub fn field(ms: u64) -> Duration {
            Duration::from_millis(ms)
        }

        /// `d` in whole milliseconds.
        pub fn written(d: &Duration) -> u64 {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        }

        /// Serialises a duration as milliseconds.
        pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_u64(written(d))
        }

        /// Deserialises milliseconds as a duration.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            u64::deserialize(d).map(field)
        }
    }

    /// A duration, written in seconds.
    pub mod secs {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        /// The duration of `s` seconds.
        pub fn field(s: u64) -> Duration {
            Duration::from_secs(s)
        }

        /// `d` in whole seconds.
        pub fn written(d: &Duration) -> u64 {
            d.as_secs()
        }

        /// Serialises a duration as seconds.
        pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_u64(written(d))
        }

        /// Deserialises seconds as a duration.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            u64::deserialize(d).map(field)
        }
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

#[cfg(test)]
mod tests {
    use super::Limits;

    /// Every limit key as (key, its ceiling's flag or ""), from `limit_keys!`.
    macro_rules! keys_and_flags {
        (keys { $( {
            $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
            $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
            flag { $( $flag:ident $(#[$help:meta])* )? }
        } )* }) => {
            [$( (stringify!($key), concat!("" $(, stringify!($flag))?)) ),*]
        };
    }

    /// The cells of the docs' table rows for `key`, backticks dropped.
    fn rows(docs: &str, key: &str) -> Vec<Vec<String>> {
        let row = format!("| `{key}` |");
        docs.lines()
            .filter(|l| l.starts_with(&row))
            .map(|l| l.split('|').map(|c| c.trim().replace('`', "")).collect())
            .collect()
    }

    /// docs/plugins.md gives every limit key a row in the `[[plugin]]`
    /// keys' table and docs/tenants.md in `[ceilings]`'s, each with the key's default in
    /// the manifest's units, and the latter with its flag (or `—`).
    #[test]
    fn docs_list_every_limit_key_with_its_default_and_flag() {
        let docs = [
            include_str!("../../../docs/plugins.md"),
            include_str!("../../../docs/tenants.md"),
        ]
        .concat();
        let docs = docs.as_str();
        let defaults: Vec<_> = Limits::default().written().collect();
        let flags = crate::limit_keys!(keys_and_flags);
        assert_eq!(defaults.len(), flags.len());
        for ((key, default), (_, flag)) in defaults.into_iter().zip(flags) {
            let default = default.to_string();
            let flag = match flag {
                "" => "—".to_string(),
                f => format!("--{}", f.replace('_', "-")),
            };
            let rows = rows(docs, key);
            let with_default = |r: &&Vec<String>| {
                r.iter().any(|c| {
                    c.split(' ').next().map(|w| w.replace('_', "")) == Some(default.clone())
                })
            };
            assert!(
                rows.iter()
                    .filter(with_default)
                    .any(|r| r.iter().any(|c| c.starts_with("integer"))),
                "docs/plugins.md's [[plugin]] table has no row `{key}` with default {default}"
            );
            assert!(
                rows.iter().filter(with_default).any(|r| r.contains(&flag)),
                "docs/tenants.md's [ceilings] table has no row `{key}` with default {default} and flag {flag}"
            );
        }
    }
}
