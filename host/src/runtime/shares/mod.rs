//! Fair shares of the host's capacity: how many guard instances, and how
//! much guard memory, each tenant (and the global chain) may have at once.
//!
//! Every guard call is charged to an [`Account`]: the account of the
//! tenant the call is made for (a tenant with a plugin directory), else the
//! global account (calls with no tenant, or for a tenant that only runs
//! global guards). The global guards a tenant's call runs are charged to
//! that tenant too, so a tenant flooding the host uses up its own share and
//! nobody else's.
//!
//! Before a guard is instantiated its call takes one instance permit and
//! `memory_bytes` worth of memory permits (in MiB, rounded up) from its
//! account; both are given back once the call's store is dropped. A call
//! that cannot get them within [`Shares::wait`] faults with
//! [`Fault::ShareExhausted`](crate::Fault::ShareExhausted) and its plugin's
//! `on_error` applies — to that call only.
//!
//! Shares are reservations, never oversubscribed: the registry checks when
//! it loads that the global share plus every tenant's share fit in the
//! engine's instance pool and in the host-wide memory budget, so the pool
//! can never be what stops a call that is within its share (see
//! [`Shares::plan`]).

use serde::Serialize;

mod account;
mod keys;
mod pace;

pub use account::{Account, Admission, Busy, Lends, Usage};
pub use pace::Rate;

/// One MiB.
const MIB: u64 = 1 << 20;

/// Instance slots the registry keeps out of every share, for the load-time
/// probe of a new plugin.
pub const PROBE_SLOTS: u32 = 1;

/// Generates [`Shares`] and its `Default` from the table in `keys.rs`.
macro_rules! shares_struct {
    (fields { $( { $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr } )* } $($_:tt)*) => {
        /// The operator's capacity settings. Every field documents its default.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize)]
        pub struct Shares {
            $( $(#[$attr])* pub $field: $ty, )*
        }

        impl Default for Shares {
            fn default() -> Self {
                Shares { $( $field: $default, )* }
            }
        }
    };
}

crate::share_keys!(shares_struct);

/// The cores this process may use, at least 1.
fn cores() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .max(1)
}

/// Half the physical memory of this machine in MiB (Linux
/// `/proc/meminfo`), or 4096 where that cannot be read.
pub fn default_memory_budget_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(4096, |kib| (kib / 1024 / 2).max(256))
}

/// Why a share plan does not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The shares need more instance slots than the engine's pool has.
    #[error(
        "no capacity left for tenant `{tenant}`: the global share ({global}) and {tenants} tenant \
         share(s) of {each} instances need {needed} instance slots; the engine has {pool} \
         ({PROBE_SLOTS} kept for load-time probes). Raise the engine's max_instances or lower \
         [shares] tenant_instances"
    )]
    Instances {
        /// The tenant that did not fit.
        tenant: String,
        /// The global share.
        global: u32,
        /// Tenants that would be loaded, this one included.
        tenants: u32,
        /// Instances per tenant.
        each: u32,
        /// Slots needed.
        needed: u64,
        /// Slots in the pool.
        pool: u32,
    },
    /// The shares need more memory than the host-wide budget.
    #[error(
        "no capacity left for tenant `{tenant}`: the global share ({global} MiB) and {tenants} \
         tenant share(s) of {each} MiB (memory and compiled code) need {needed} MiB; the memory \
         budget is {budget} MiB. Raise [shares] memory_budget_mib or lower tenant_memory_mib or \
         tenant_code_mib"
    )]
    Memory {
        /// The tenant that did not fit.
        tenant: String,
        /// The global memory share.
        global: u64,
        /// Tenants that would be loaded, this one included.
        tenants: u32,
        /// MiB per tenant: its memory share and its compiled code.
        each: u64,
        /// MiB needed.
        needed: u64,
        /// The budget.
        budget: u64,
    },
}

impl Shares {
    /// Checks the settings on their own and against the tenant ceiling's
    /// memory cap; the error names the offending key.
    pub fn check(&self, tenant_memory_cap: usize) -> Result<(), (&'static str, String)> {
        if self.global_instances == 0 {
            return Err(("global_instances", "must be at least 1".into()));
        }
        if self.global_requests == 0 {
            return Err(("global_requests", "must be at least 1".into()));
        }
        if self.tenant_requests == 0 {
            return Err(("tenant_requests", "must be at least 1".into()));
        }
        if self.tenant_burst > 0 && self.tenant_rate == 0 {
            return Err(("tenant_burst", "has no effect without tenant_rate".into()));
        }
        if self.tenant_instances == 0 {
            return Err(("tenant_instances", "must be at least 1".into()));
        }
        if self.tenant_plugins == 0 {
            return Err(("tenant_plugins", "must be at least 1".into()));
        }
        if self.tenant_code_mib == 0 {
            return Err(("tenant_code_mib", "must be at least 1".into()));
        }
        let cap_mib = (tenant_memory_cap as u64).div_ceil(MIB);
        if self.tenant_memory_mib < cap_mib {
            return Err((
                "tenant_memory_mib",
                format!(
                    "{} MiB is less than one instance at the tenant ceiling's memory_mib \
                     ({cap_mib} MiB): no tenant guard could ever run",
                    self.tenant_memory_mib
                ),
            ));
        }
        if self.global_memory_mib == 0 {
            return Err(("global_memory_mib", "must be at least 1".into()));
        }
        if self.global_memory_mib > self.memory_budget_mib {
            return Err((
                "global_memory_mib",
                format!(
                    "{} MiB is more than the memory budget ({} MiB)",
                    self.global_memory_mib, self.memory_budget_mib
                ),
            ));
        }
        if u32::try_from(self.global_memory_mib.max(self.tenant_memory_mib)).is_err() {
            return Err(("tenant_memory_mib", "is too large".into()));
        }
        Ok(())
    }

    /// Pool slots a global share and `tenants` tenant shares reserve, the
    /// load-time probe's included.
    pub fn reserved(&self, tenants: u32) -> u64 {
        u64::from(self.global_instances)
            + u64::from(tenants) * u64::from(self.tenant_instances)
            + u64::from(PROBE_SLOTS)
    }

    /// Memory a global share and `tenants` tenant shares reserve (their
    /// memory and compiled code), MiB.
    pub fn reserved_memory_mib(&self, tenants: u32) -> u64 {
        let each = self.tenant_memory_mib.saturating_add(self.tenant_code_mib);
        self.global_memory_mib
            .saturating_add(u64::from(tenants).saturating_mul(each))
    }

    /// Whether a global share and `tenants` tenant shares fit in a pool of
    /// `pool` instance slots (`None`: no pool, no slot limit) and in the
    /// memory budget. `tenant` names the last tenant, for the error.
    pub fn plan(&self, pool: Option<u32>, tenants: u32, tenant: &str) -> Result<(), PlanError> {
        if let Some(pool) = pool {
            let needed = self.reserved(tenants) - u64::from(PROBE_SLOTS);
            if self.reserved(tenants) > u64::from(pool) {
                return Err(PlanError::Instances {
                    tenant: tenant.into(),
                    global: self.global_instances,
                    tenants,
                    each: self.tenant_instances,
                    needed,
                    pool,
                });
            }
        }
        let each = self.tenant_memory_mib.saturating_add(self.tenant_code_mib);
        let needed = self.reserved_memory_mib(tenants);
        if needed > self.memory_budget_mib {
            return Err(PlanError::Memory {
                tenant: tenant.into(),
                global: self.global_memory_mib,
                tenants,
                each,
                needed,
                budget: self.memory_budget_mib,
            });
        }
        Ok(())
    }

    /// What the global account lends.
    pub fn global_lends(&self) -> Lends {
        Lends {
            requests: self.global_requests,
            rate: None,
            instances: self.global_instances,
            memory_mib: self.global_memory_mib,
            log_kib_per_s: 0,
        }
    }

    /// What `tenant`'s account lends: every tenant's share, at its own
    /// rate if it has one.
    pub fn tenant_lends(&self, tenant: &str) -> Lends {
        let rate = match self.tenant_rates.get(tenant) {
            Some(own) => *own,
            None => Rate::new(self.tenant_rate, self.tenant_burst),
        };
        Lends {
            requests: self.tenant_requests,
            rate,
            instances: self.tenant_instances,
            memory_mib: self.tenant_memory_mib,
            log_kib_per_s: self.tenant_log_kib_per_s,
        }
    }

    /// The global account these settings describe.
    pub fn global_account(&self) -> Account {
        let mut account = Account::new("global", self.global_lends(), self.wait);
        account.global = true;
        account
    }

    /// The account of `tenant` these settings describe.
    pub fn tenant_account(&self, tenant: &str) -> Account {
        Account::new(tenant, self.tenant_lends(tenant), self.wait)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_tenant_rate_is_off_by_default_and_its_burst_defaults_to_a_second() {
        let mut shares = Shares::default();
        assert_eq!(shares.tenant_lends("a").rate, None);
        shares.tenant_rate = 50;
        assert_eq!(
            shares.tenant_lends("a").rate,
            Some(Rate {
                per_s: 50,
                burst: 50
            })
        );
        shares.tenant_burst = 5;
        assert_eq!(shares.tenant_lends("a").rate.map(|r| r.burst), Some(5));
        // A tenant's own rate, or none at all, in place of everyone's.
        shares.tenant_rates.insert("b".into(), Rate::new(1000, 0));
        shares.tenant_rates.insert("c".into(), None);
        assert_eq!(shares.tenant_lends("b").rate, Rate::new(1000, 1000));
        assert_eq!(shares.tenant_lends("c").rate, None);
        assert_eq!(shares.tenant_lends("a").rate, Rate::new(50, 5));
        assert_eq!(shares.global_lends().rate, None);
        shares.tenant_rate = 0;
        assert_eq!(shares.check(1 << 20).map_err(|e| e.0), Err("tenant_burst"));
    }

    #[test]
    fn plan_counts_slots_and_memory() {
        let shares = Shares {
            global_instances: 8,
            global_memory_mib: 1024,
            tenant_instances: 4,
            tenant_memory_mib: 512,
            tenant_plugins: 16,
            tenant_code_mib: 256,
            memory_budget_mib: 1024 + 6 * (512 + 256),
            global_requests: 8,
            tenant_requests: 2,
            tenant_rate: 0,
            tenant_burst: 0,
            tenant_rates: Default::default(),
            tenant_log_kib_per_s: 0,
            wait: Duration::ZERO,
        };
        assert!(shares.plan(Some(32), 5, "e").is_ok());
        assert!(matches!(
            shares.plan(Some(32), 6, "f"),
            Err(PlanError::Instances { .. })
        ));
        assert!(shares.plan(None, 6, "f").is_ok());
        assert!(matches!(
            shares.plan(None, 7, "g"),
            Err(PlanError::Memory { .. })
        ));
    }
}
