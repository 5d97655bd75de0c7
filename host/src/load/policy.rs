//! The operator's policy for untrusted tenants: ceilings on every limit a
//! tenant plugin may ask for, fair shares of the host's capacity, and
//! quarantine of guards that keep faulting.
//!
//! It comes from [`RegistryOptions::policy`](crate::RegistryOptions)
//! (the `serve` flags), overridden key by key by the global manifest's
//! `[ceilings]`, `[shares]`, `[quarantine]` and `[decision_log]` tables.
//! A tenant's manifest may set none of them.

use serde::Serialize;

use crate::call::quarantine::QuarantinePolicy;
use crate::load::remote::signature::Trust;
use crate::runtime::http::grant::HttpGrant;
use crate::runtime::limits::Limits;
use crate::runtime::log_writer::DecisionLogConfig;
use crate::runtime::shares::Shares;

/// Ceilings, shares and quarantine, as the registry applies them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// The most a tenant plugin may have for each limit. A tenant manifest
    /// asking for more is refused (its previous chain keeps serving); a
    /// limit a tenant does not set is the default lowered to the ceiling.
    /// Global plugins are not bound by it. Default: the default limits
    /// (fuel 500 M, 128 MiB, 200 ms, 4 MiB returned, 1,000 host calls,
    /// 64 KiB of log).
    pub ceilings: Limits,
    /// The most outbound HTTP a tenant plugin may be granted (`[ceilings]`
    /// `allowed_hosts`, `http_methods`, `allowed_networks`): a tenant's
    /// grant may only narrow it. Default: nothing — tenant plugins have no
    /// network.
    pub http_ceiling: HttpGrant,
    /// Instances and memory each tenant and the global chain may use at
    /// once.
    pub shares: Shares,
    /// When a guard that keeps faulting is taken out of its chain for a
    /// while.
    pub quarantine: QuarantinePolicy,
    /// The remote sources (`url`, `oci`) a tenant's plugins may be fetched
    /// from (`[ceilings] plugin_sources`): `host[:port]` (a registry, or
    /// URLs on that host and port) or an `http(s)://host[:port][/path]`
    /// prefix. Default: none (a tenant's plugins are its own files).
    pub plugin_sources: Vec<String>,
    /// Where every decision is logged, and what of its input (`[decision_log]`,
    /// `serve --decision-log`). Default: off.
    pub decision_log: DecisionLogConfig,
    /// The keys components must be signed with, and whether a signature is
    /// required (`[ceilings] trusted_keys`, `require_signatures`); held to
    /// by the global directory and every tenant alike. Default: no key,
    /// nothing required.
    pub signatures: Trust,
}

impl Policy {
    /// Checks the policy as a whole; the error names the key (as the
    /// manifest spells it, e.g. `shares.tenant_memory_mib`).
    pub fn check(&self) -> Result<(), (String, String)> {
        self.shares
            .check(self.ceilings.memory_bytes)
            .map_err(|(k, why)| (format!("shares.{k}"), why))?;
        if self.quarantine.faults > 0 && self.quarantine.cooldown.is_zero() {
            return Err((
                "quarantine.cooldown_ms".into(),
                "must be at least 1 while quarantine is on".into(),
            ));
        }
        self.decision_log
            .check()
            .map_err(|(k, why)| (format!("decision_log.{k}"), why))
    }
}
