//! The operator's tables of the global manifest — `[shares]`,
//! `[quarantine]`, `[ceilings]` — and the limit keys they and the plugins
//! share, each checked against its range.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::load::policy::Policy;
use crate::runtime::limits::Limits;
use crate::runtime::limits::unit::Bound;
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
/// may set — each declared once, in `limit_keys!` (`runtime/limits.rs`),
/// with the type it is written as — in a table's struct, between the
/// table's own fields `{ before }` and `{ after }`, and a way from the
/// table to those keys as a [`RawLimits`]. They are spelled into each table
/// rather than flattened: serde's `flatten` loses both
/// `deny_unknown_fields` and toml's spans.
macro_rules! with_limit_keys {
    ($(#[$m:meta])* struct $name:ident { $($before:tt)* } { $($after:tt)* } keys { $( {
        $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
        $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
        flag $_flag:tt
    } )* }) => {
        $(#[$m])*
        pub(super) struct $name {
            $($before)*
            $( pub(super) $key: Option<Spanned<$raw>>, )*
            $($after)*
        }

        /// Its limit keys, as a table of their own.
        impl From<&$name> for RawLimits {
            fn from(table: &$name) -> RawLimits {
                RawLimits { $( $key: table.$key.clone(), )* }
            }
        }
    };
    ($(#[$m:meta])* struct $name:ident $before:tt $after:tt) => {
        crate::limit_keys! { with_limit_keys { $(#[$m])* struct $name $before $after } }
    };
}

pub(super) use with_limit_keys;

/// `RawLimits`: the limit keys alone, each overriding its limit after its
/// range is checked; where each is written.
macro_rules! raw_limits {
    (keys { $( {
        $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
        $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
        flag $_flag:tt
    } )* }) => {
        /// The limit keys of a `[[plugin]]` or `[defaults]`; as itself,
        /// `[ceilings]`: the most any tenant plugin may have, per limit key.
        #[derive(Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RawLimits {
            $( pub(super) $key: Option<Spanned<$raw>>, )*
        }

        impl RawLimits {
            /// Where `key` (one of the limit keys) is written in the
            /// manifest; `None` for a key it does not set.
            fn span_of(&self, key: &str) -> Option<Range<usize>> {
                match key {
                    $( stringify!($key) => self.$key.as_ref().map(Spanned::span), )*
                    _ => None,
                }
            }

            /// Overrides `limits` with every key set here, checking ranges.
            fn apply_ranges(
                &self,
                limits: &mut Limits,
                prefix: &str,
                max_memory_bytes: usize,
            ) -> Result<(), LimitError> {
                $( if let Some(v) = &self.$key {
                    let key = format!(concat!("{}.", stringify!($key)), prefix);
                    let hi: $raw = Bound::bound($hi, max_memory_bytes);
                    limits.$field = $into(range(v, key, $lo, hi, $range_unit)?);
                } )*
                Ok(())
            }
        }
    };
}

crate::limit_keys!(raw_limits);

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
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::RawLimits;
    use crate::load::manifest::{Manifest, Scope};
    use crate::runtime::limits::Limits;
    use crate::runtime::limits::unit::Bound;

    /// The engine's largest memory the tests read manifests with.
    const ENGINE: usize = 1 << 30;

    /// Every limit key as (key, lowest, highest, largest of the type it is
    /// written as), from `limit_keys!`.
    macro_rules! key_bounds {
        (keys { $( {
            $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
            $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
            flag $_flag:tt
        } )* }) => {
            [$( (
                stringify!($key),
                u64::from($lo as $raw),
                u64::from(Bound::<$raw>::bound($hi, ENGINE)),
                u64::from(<$raw>::MAX),
            ) ),*]
        };
    }

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
        for (key, _) in Limits::default().written() {
            let text = format!("# a comment\n{key} = 2\n");
            let raw: RawLimits = toml::from_str(&text).expect("a limits table");
            let (span, named, _) = raw
                .apply(ceiling.clone(), "plugin", ENGINE, Some(&ceiling))
                .expect_err("above the ceiling");
            assert_eq!(named, format!("plugin.{key}"));
            assert_eq!(&text[span], "2", "{key}'s own value");
        }
    }

    /// A bad value for any limit key — of the wrong type, negative, below
    /// its range or above it — in `[defaults]` or `[ceilings]` is refused
    /// naming that key and its line, and a value at either end of its
    /// range is taken in `[defaults]`.
    #[test]
    fn a_bad_value_for_every_limit_key_names_that_key_and_its_line() {
        let path = Path::new("plugins/toolgate.toml");
        let bounds = crate::limit_keys!(key_bounds);
        assert_eq!(bounds.len(), Limits::default().written().count());
        for (key, lo, hi, max) in bounds {
            let mut bad = vec!["\"x\"".to_string(), "-1".into(), "1.5".into()];
            if lo > 0 {
                bad.push((lo - 1).to_string());
            }
            if hi < max {
                bad.push((hi + 1).to_string());
            }
            for table in ["defaults", "ceilings"] {
                for value in &bad {
                    let text = format!("[{table}]\n# a comment\n{key} = {value}\n");
                    let e = Manifest::parse(path, &text, Scope::Global, ENGINE)
                        .expect_err(&format!("{table}.{key} = {value} is refused"));
                    assert_eq!(
                        (e.key.as_deref(), e.line),
                        (Some(format!("{table}.{key}").as_str()), 3),
                        "{table}.{key} = {value}: {}",
                        e.message
                    );
                }
            }
            // (`[ceilings]` is also checked against `[shares]`, across keys.)
            for value in [lo, hi] {
                let text = format!("[defaults]\n{key} = {value}\n");
                Manifest::parse(path, &text, Scope::Global, ENGINE)
                    .unwrap_or_else(|e| panic!("defaults.{key} = {value}: {e}"));
            }
        }
    }
}
