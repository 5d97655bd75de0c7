//! The operator's tables of the global manifest — `[shares]`,
//! `[quarantine]`, `[ceilings]` — and the limit keys they and the plugins
//! share, each checked against its range.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::MAX_TIMEOUT_MS;
use crate::load::policy::Policy;
use crate::runtime::limits::Limits;
use crate::runtime::shares::{Rate, Shares};
use crate::tenant::TenantName;

/// Generates `[shares]`'s table, [`RawShares`], and [`apply_shares`] from
/// `share_keys!` (`runtime/shares/keys.rs`).
macro_rules! raw_shares {
    (fields $_fields:tt keys { $( {
        $( scalar $field:ident, $key:ident: $raw:ty => $into:path, $lo:expr, $hi:expr, $unit:literal )?
        $( table $table:ident )?
    } )* } flags $_flags:tt) => {
        /// `[shares]`: see [`Shares`].
        #[derive(Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RawShares {
            $(
                $( $key: Option<Spanned<$raw>>, )?
                $( $table: Option<BTreeMap<String, Spanned<RawTenantShares>>>, )?
            )*
        }

        /// Overrides `policy.shares` with every key of `[shares]`, checking
        /// ranges.
        pub(super) fn apply_shares(policy: &mut Policy, raw: &RawShares) -> Result<(), LimitError> {
            let s = &mut policy.shares;
            $(
                $( if let Some(v) = &raw.$key {
                    let key = concat!("shares.", stringify!($key)).to_string();
                    s.$field = $into(range(v, key, $lo, $hi, $unit)?);
                } )?
                $( apply_tenant_rates(s, raw.$table.as_ref())?; )?
            )*
            Ok(())
        }
    };
}

crate::share_keys!(raw_shares);

/// `[shares.tenants.<name>]`: one tenant's own rate.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTenantShares {
    rate: Option<Spanned<u32>>,
    burst: Option<Spanned<u32>>,
}

/// Sets every tenant's own rate of `[shares.tenants]`.
fn apply_tenant_rates(
    s: &mut Shares,
    tenants: Option<&BTreeMap<String, Spanned<RawTenantShares>>>,
) -> Result<(), LimitError> {
    for (name, own) in tenants.into_iter().flatten() {
        let table = format!("shares.tenants.{name}");
        TenantName::try_from(name.clone())
            .map_err(|e| (own.span(), table.clone(), e.to_string()))?;
        let key = |k: &str| format!("{table}.{k}");
        let RawTenantShares { rate, burst } = own.get_ref();
        let Some(rate) = rate else {
            return Err((
                own.span(),
                key("rate"),
                "missing: the tenant's requests a second (0: no limit)".into(),
            ));
        };
        let rate = range(rate, key("rate"), 0, 1_000_000, " requests/s")?;
        let burst = match burst {
            Some(v) if rate == 0 => {
                return Err((
                    v.span(),
                    key("burst"),
                    "has no effect without a rate".into(),
                ));
            }
            Some(v) => range(v, key("burst"), 0, 1_000_000, "")?,
            None => 0,
        };
        s.tenant_rates.insert(name.clone(), Rate::new(rate, burst));
    }
    Ok(())
}

/// `[quarantine]`: see [`crate::call::quarantine::QuarantinePolicy`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuarantine {
    faults: Option<Spanned<u32>>,
    window_ms: Option<Spanned<u64>>,
    cooldown_ms: Option<Spanned<u64>>,
}

/// Overrides `policy.quarantine` with every key of `[quarantine]`.
pub(super) fn apply_quarantine(policy: &mut Policy, raw: &RawQuarantine) -> Result<(), LimitError> {
    let q = &mut policy.quarantine;
    let key = |k: &str| format!("quarantine.{k}");
    if let Some(v) = &raw.faults {
        q.faults = range(v, key("faults"), 0, 1_000_000, "")?;
    }
    if let Some(v) = &raw.window_ms {
        q.window = Duration::from_millis(range(v, key("window_ms"), 1, 86_400_000, " ms")?);
    }
    if let Some(v) = &raw.cooldown_ms {
        q.cooldown = Duration::from_millis(range(v, key("cooldown_ms"), 1, 86_400_000, " ms")?);
    }
    Ok(())
}

/// `v` if it is within `lo..=hi`, else an error naming `key`.
pub(super) fn range<T: Copy + PartialOrd + fmt::Display>(
    v: &Spanned<T>,
    key: String,
    lo: T,
    hi: T,
    unit: &str,
) -> Result<T, LimitError> {
    let x = *v.get_ref();
    if x < lo || x > hi {
        return Err((
            v.span(),
            key,
            format!("{x} is out of range: must be {lo}..={hi}{unit}"),
        ));
    }
    Ok(x)
}

pub(super) type LimitError = (Range<usize>, String, String);

/// Puts the limit keys every `[[plugin]]`, `[defaults]` and `[ceilings]`
/// may set — each declared here once, with the type it is written as — in
/// a table's struct, between the table's own fields `{ before }` and
/// `{ after }`, and a way from the table to those keys as a [`RawLimits`].
/// They are spelled into each table rather than flattened:
/// serde's `flatten` loses both `deny_unknown_fields` and toml's spans.
macro_rules! with_limit_keys {
    (@keys [$($key:ident: $ty:ty),*] $(#[$m:meta])* struct $name:ident
        { $($before:tt)* } { $($after:tt)* }) => {
        $(#[$m])*
        pub(super) struct $name {
            $($before)*
            $( pub(super) $key: Option<Spanned<$ty>>, )*
            $($after)*
        }

        impl $name {
            /// Where `key` (one of the limit keys) is written in the
            /// manifest; `None` for a key it does not set or does not know.
            #[allow(dead_code, reason = "read on RawLimits; the other tables become one first")]
            pub(super) fn span_of(&self, key: &str) -> Option<Range<usize>> {
                match key {
                    $( stringify!($key) => self.$key.as_ref().map(Spanned::span), )*
                    _ => None,
                }
            }
        }

        /// Its limit keys, as a table of their own.
        impl From<&$name> for RawLimits {
            fn from(table: &$name) -> RawLimits {
                RawLimits { $( $key: table.$key.clone(), )* }
            }
        }
    };
    ($(#[$m:meta])* struct $name:ident $before:tt $after:tt) => {
        with_limit_keys! {
            @keys [
                fuel: u64,
                memory_mib: u64,
                timeout_ms: u64,
                max_return_kib: u64,
                host_calls: u32,
                log_kib: u64,
                state_ops: u32,
                state_keys: u32,
                state_kib: u64,
                state_run_ttl_s: u64,
                state_max_ttl_s: u64,
                http_requests: u32,
                http_request_kib: u64,
                http_response_kib: u64
            ]
            $(#[$m])* struct $name $before $after
        }
    };
}

pub(super) use with_limit_keys;

with_limit_keys! {
    /// The limit keys of a `[[plugin]]` or `[defaults]`; as itself, `[ceilings]`:
    /// the most any tenant plugin may have, per limit key.
    #[derive(Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct RawLimits {} {}
}

impl RawLimits {
    /// Overrides `limits` with every key set here, checking ranges and,
    /// for a tenant's manifest, the operator's `ceiling`.
    pub(super) fn apply(
        &self,
        mut limits: Limits,
        prefix: &str,
        max_memory_bytes: usize,
        ceiling: Option<&Limits>,
    ) -> Result<Limits, LimitError> {
        self.apply_ranges(&mut limits, prefix, max_memory_bytes)?;
        let Some(ceiling) = ceiling else {
            return Ok(limits);
        };
        // Only what this table sets can be above the ceiling: the base it
        // starts from is already within it.
        match limits.above(ceiling) {
            None => Ok(limits),
            Some((k, value, max)) => {
                let span = self.span_of(k).unwrap_or(0..0);
                Err((
                    span,
                    format!("{prefix}.{k}"),
                    format!(
                        "{value} is above the operator's ceiling for tenant plugins ({max}; \
                         `[ceilings]` in the global manifest)"
                    ),
                ))
            }
        }
    }

    /// Overrides `limits` with every key set here, checking ranges.
    fn apply_ranges(
        &self,
        limits: &mut Limits,
        prefix: &str,
        max_memory_bytes: usize,
    ) -> Result<(), LimitError> {
        let key = |k: &str| format!("{prefix}.{k}");
        const KIB: u64 = 1 << 10;
        const MIB: u64 = 1 << 20;
        if let Some(v) = &self.fuel {
            limits.fuel = range(v, key("fuel"), 1, u64::MAX, "")?;
        }
        if let Some(v) = &self.memory_mib {
            let max = (max_memory_bytes as u64 / MIB).max(1);
            let mib = range(v, key("memory_mib"), 1, max, " MiB (the engine's maximum)")?;
            limits.memory_bytes = usize::try_from(mib * MIB).unwrap_or(usize::MAX);
        }
        if let Some(v) = &self.timeout_ms {
            let ms = range(v, key("timeout_ms"), 1, MAX_TIMEOUT_MS, " ms")?;
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(v) = &self.max_return_kib {
            let kib = range(v, key("max_return_kib"), 1, 1 << 20, " KiB")?;
            limits.max_return_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        if let Some(v) = &self.host_calls {
            limits.host_calls = *v.get_ref();
        }
        if let Some(v) = &self.log_kib {
            let kib = range(v, key("log_kib"), 0, 1 << 20, " KiB")?;
            limits.log_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        if let Some(v) = &self.state_ops {
            limits.state_ops = *v.get_ref();
        }
        if let Some(v) = &self.state_keys {
            limits.state_keys = *v.get_ref();
        }
        if let Some(v) = &self.state_kib {
            let kib = range(v, key("state_kib"), 0, 1 << 20, " KiB")?;
            limits.state_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        const DAY: u64 = 86_400;
        if let Some(v) = &self.state_run_ttl_s {
            let s = range(v, key("state_run_ttl_s"), 1, 365 * DAY, " s")?;
            limits.state_run_ttl = Duration::from_secs(s);
        }
        if let Some(v) = &self.state_max_ttl_s {
            let s = range(v, key("state_max_ttl_s"), 1, 3_650 * DAY, " s")?;
            limits.state_max_ttl = Duration::from_secs(s);
        }
        if let Some(v) = &self.http_requests {
            limits.http_requests = range(v, key("http_requests"), 0, 1_000, "")?;
        }
        if let Some(v) = &self.http_request_kib {
            let kib = range(v, key("http_request_kib"), 0, 64 << 10, " KiB")?;
            limits.http_request_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        if let Some(v) = &self.http_response_kib {
            let kib = range(v, key("http_response_kib"), 0, 64 << 10, " KiB")?;
            limits.http_response_bytes = usize::try_from(kib * KIB).unwrap_or(usize::MAX);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::RawLimits;
    use crate::runtime::limits::Limits;

    /// A tenant's key above the operator's ceiling is named, and pointed
    /// at, as itself: every limit key, each alone.
    #[test]
    fn every_limit_key_above_its_ceiling_is_pointed_at_where_it_is_written() {
        let ceiling = Limits {
            fuel: 1,
            memory_bytes: 1 << 20,
            timeout: Duration::from_millis(1),
            max_return_bytes: 1 << 10,
            host_calls: 1,
            log_bytes: 1 << 10,
            state_ops: 1,
            state_keys: 1,
            state_bytes: 1 << 10,
            state_run_ttl: Duration::from_secs(1),
            state_max_ttl: Duration::from_secs(1),
            http_requests: 1,
            http_request_bytes: 1 << 10,
            http_response_bytes: 1 << 10,
        };
        let keys = [
            "fuel",
            "memory_mib",
            "timeout_ms",
            "max_return_kib",
            "host_calls",
            "log_kib",
            "state_ops",
            "state_keys",
            "state_kib",
            "state_run_ttl_s",
            "state_max_ttl_s",
            "http_requests",
            "http_request_kib",
            "http_response_kib",
        ];
        for key in keys {
            let text = format!("# a comment\n{key} = 2\n");
            let raw: RawLimits = toml::from_str(&text).expect("a limits table");
            let (span, named, _) = raw
                .apply(ceiling.clone(), "plugin", 1 << 30, Some(&ceiling))
                .expect_err("above the ceiling");
            assert_eq!(named, format!("plugin.{key}"));
            assert_eq!(&text[span], "2", "{key}'s own value");
        }
    }
}
