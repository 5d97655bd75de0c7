//! The `[shares]` keys, each declared once: its field of [`Shares`] (type,
//! default, doc), its manifest key (the type it is written as, how it
//! becomes the field, its range and unit) and its `toolgate serve` flag
//! (name and help). Everything that spells a share key is generated from
//! this table: [`Shares`] and its `Default` (`shares/mod.rs`), the
//! manifest's `[shares]` table and its checks (`load/manifest/tables.rs`),
//! and the CLI's flags (`bin/toolgate/args.rs`).
//!
//! An entry is
//!
//! ```text
//! { $(#[doc])* field: Type = default;
//!   key manifest_key: Written => into, lo, hi, " unit";   // a scalar key
//!   flag cli_field $(#[doc])*; }                         //   and its flag
//! { $(#[doc])* field: Type = default; table manifest_key; } // a sub-table
//! ```
//!
//! and `share_keys!(then)` calls the macro `then` with them as three lists:
//!
//! ```text
//! fields { $( { $(#[attr])* field: Type = default } )* }
//! keys { $( { scalar field, key: Written => into, lo, hi, unit } | { table key } )* }
//! flags { $( { $(#[doc])* cli_field: Written => field, into; manifest_key } )* }
//! ```
//!
//! The order is the order of the struct's fields (and so of its JSON), of
//! the manifest's checks and of the flags in `toolgate serve --help`.
//!
//! [`Shares`]: super::Shares

/// The `[shares]` table; see the module's doc. Hidden: the `toolgate`
/// binary's flags are generated from it too.
#[doc(hidden)]
#[macro_export]
macro_rules! share_keys {
    ($then:ident) => {
        $crate::share_keys! { @lists $then
            {
                /// Guard instances the global account may have alive at once (calls
                /// with no tenant, or for a tenant without a directory of its own).
                /// Default: 16.
                global_instances: u32 = 16;
                key global_instances: u32 => std::convert::identity, 1, 1 << 16, "";
                flag global_instances
                    /// Instances the global account may have alive at once (default 16).
                    ;
            }
            {
                /// Memory the global account's instances may have committed at once,
                /// in MiB (each call commits its plugin's `memory_mib`). Default: 2048.
                global_memory_mib: u64 = 2048;
                key global_memory_mib: u64 => std::convert::identity, 1, 1 << 30, " MiB";
                flag global_memory_mib
                    /// Memory the global account may commit at once, MiB (default 2048).
                    ;
            }
            {
                /// Guard instances one tenant's calls may have alive at once (its own
                /// guards and the global guards it runs). Default: 4.
                tenant_instances: u32 = 4;
                key tenant_instances: u32 => std::convert::identity, 1, 1 << 16, "";
                flag tenant_instances
                    /// Instances each tenant may have alive at once (default 4).
                    ;
            }
            {
                /// Memory one tenant's instances may have committed at once, in MiB.
                /// Must be at least the tenant ceiling's `memory_mib`. Default: 512.
                tenant_memory_mib: u64 = 512;
                key tenant_memory_mib: u64 => std::convert::identity, 1, 1 << 30, " MiB";
                flag tenant_memory_mib
                    /// Memory each tenant may commit at once, MiB (default 512).
                    ;
            }
            {
                /// Plugins one tenant may have: a tenant directory (or manifest) with
                /// more is not loaded (its previous plugins keep serving), before any
                /// of its components is read. Default: 16.
                tenant_plugins: u32 = 16;
                key tenant_plugins: u32 => std::convert::identity, 1, 1 << 10, "";
                flag tenant_plugins
                    /// Plugins each tenant may have; a tenant with more is not loaded
                    /// (default 16).
                    ;
            }
            {
                /// Compiled code one tenant's plugins may hold in memory together, in
                /// MiB: a tenant whose plugins compile to more is not loaded (its
                /// previous plugins keep serving). Counted in the memory budget.
                /// Default: 256 (a componentize-py guard compiles to ~43 MiB, a Rust
                /// one to ~1).
                tenant_code_mib: u64 = 256;
                key tenant_code_mib: u64 => std::convert::identity, 1, 1 << 30, " MiB";
                flag tenant_code_mib
                    /// Compiled code each tenant's plugins may hold together, MiB; counted
                    /// in the memory budget (default 256).
                    ;
            }
            {
                /// Host-wide memory budget, in MiB: the global share plus every
                /// tenant's share and compiled code must fit in it; a tenant that does
                /// not fit is not loaded. Default: half the machine's physical memory
                /// (4096 if it cannot be read).
                memory_budget_mib: u64 = $crate::runtime::shares::default_memory_budget_mib();
                key memory_budget_mib: u64 => std::convert::identity, 1, 1 << 40, " MiB";
                flag memory_budget_mib
                    /// Host-wide memory budget for all shares, MiB (default: half the RAM).
                    ;
            }
            {
                /// Requests the global account may have in progress at once (decided
                /// through [`DecideRequest`](crate::DecideRequest): the HTTP service,
                /// the Python module); more wait their turn. Default: four per core.
                global_requests: u32 = $crate::runtime::shares::cores().saturating_mul(4);
                key global_requests: u32 => std::convert::identity, 1, 1 << 16, "";
                flag global_requests
                    /// Requests the global account may have in progress at once (default:
                    /// four per core).
                    ;
            }
            {
                /// Requests one tenant may have in progress at once; more wait their
                /// turn, in order, and one that waited `wait` is refused (HTTP 429).
                /// Default: one per core — a tenant may keep every core busy, never
                /// queue more work than that ahead of other tenants.
                tenant_requests: u32 = $crate::runtime::shares::cores();
                key tenant_requests: u32 => std::convert::identity, 1, 1 << 16, "";
                flag tenant_requests
                    /// Requests each tenant may have in progress at once; more wait, then
                    /// are refused with 429 (default: one per core).
                    ;
            }
            {
                /// Requests one tenant may start per second; 0: no limit. A request
                /// over the rate waits for its turn, in order of arrival; one whose
                /// turn is more than `wait` away waits `wait` and is refused (HTTP
                /// 429), so a flooder that retries at once is slowed down too.
                /// Default: 0.
                tenant_rate: u32 = 0;
                key tenant_rate: u32 => std::convert::identity, 0, 1_000_000, " requests/s";
                flag tenant_rate
                    /// Requests each tenant may start per second; more wait their turn,
                    /// then are refused with 429; 0: no limit (default 0).
                    ;
            }
            {
                /// Requests a tenant may start at once on top of its rate after a
                /// pause (the depth of its bucket); 0: a second's worth
                /// (`tenant_rate`). Default: 0.
                tenant_burst: u32 = 0;
                key tenant_burst: u32 => std::convert::identity, 0, 1_000_000, "";
                flag tenant_burst
                    /// Requests each tenant may start at once on top of its rate after a
                    /// pause; 0: a second's worth (default 0).
                    ;
            }
            {
                /// Tenants with a rate of their own instead of `tenant_rate` and
                /// `tenant_burst` (`None`: no limit), by name (`[shares.tenants.<name>]`
                /// in the global manifest). Default: none.
                tenant_rates: std::collections::BTreeMap<
                    String,
                    Option<$crate::runtime::shares::Rate>,
                > = Default::default();
                table tenants;
            }
            {
                /// Guest log one tenant's guard calls may write a second, in KiB (its
                /// guards' `log` lines and captured stdout/stderr, the global guards
                /// it runs included), a second's worth at once; lines beyond it are
                /// dropped (the guest is not told) and counted; 0: no limit. The
                /// global account has no limit. Default: 256.
                tenant_log_kib_per_s: u32 = 256;
                key tenant_log_kib_per_s: u32 => std::convert::identity, 0, 1 << 22, " KiB/s";
                flag tenant_log_kib_per_s
                    /// Guest log each tenant's guard calls may write a second, KiB; lines
                    /// beyond it are dropped and counted; 0: no limit (default 256).
                    ;
            }
            {
                /// How long a call waits for its share (and a request for its place)
                /// before faulting with `share-exhausted` (being refused as busy).
                /// Default: 1 s (a burst above the share queues; a flood waits, which
                /// also slows the flooder down).
                #[serde(with = "crate::runtime::limits::unit::millis")]
                wait: std::time::Duration = std::time::Duration::from_secs(1);
                key wait_ms: u64 => std::time::Duration::from_millis, 0, 60_000, " ms";
                flag share_wait_ms
                    /// How long a call waits for its share before faulting, ms (default 1000).
                    ;
            }
        }
    };
    // The entries as three lists, each consumer reading the one it needs:
    // `fields` (every field of `Shares`), `keys` (the manifest's keys, a
    // scalar or a sub-table, in order) and `flags` (the scalars' flags).
    (@lists $then:ident $( {
        $(#[$attr:meta])*
        $field:ident: $ty:ty = $default:expr;
        $( key $key:ident: $raw:ty => $into:path, $lo:expr, $hi:expr, $unit:literal;
           flag $flag:ident $(#[$help:meta])*; )?
        $( table $table:ident; )?
    } )*) => {
        $then! {
            fields { $( { $(#[$attr])* $field: $ty = $default } )* }
            keys { $( {
                $( scalar $field, $key: $raw => $into, $lo, $hi, $unit )?
                $( table $table )?
            } )* }
            flags { $( $( { $(#[$help])* $flag: $raw => $field, $into; $key } )? )* }
        }
    };
}

#[cfg(test)]
mod tests {
    /// Every key with a flag, as `(manifest key, flag)`.
    macro_rules! keys_and_flags {
        (fields $_fields:tt keys $_keys:tt flags { $(
            { $(#[$help:meta])* $flag:ident: $raw:ty => $field:ident, $into:path; $key:ident }
        )* }) => {
            [$( (stringify!($key), stringify!($flag)) ),*]
        };
    }

    #[test]
    fn docs_list_every_share_key_with_its_flag() {
        let docs = include_str!("../../../../docs/tenants.md");
        for (key, flag) in crate::share_keys!(keys_and_flags) {
            let row = format!("| `{key}` |");
            let flag = format!("`--{}`", flag.replace('_', "-"));
            assert!(
                docs.lines()
                    .any(|l| l.starts_with(&row) && l.contains(&flag)),
                "docs/tenants.md's [shares] table has no row {row} naming {flag}"
            );
        }
    }
}
