//! What a loaded plugin set holds, described once for every face:
//! `GET /v1/plugins` and the Python `Host.plugins()` serialize a
//! [`Description`] as is, `toolgate list` prints the same data, and the
//! `plugins_loaded` and quarantine gauges count from it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::call::chain::Chain;
use crate::call::plugin::{Mode, OnError, Plugin};
use crate::call::quarantine::Health;
use crate::call::snapshot::SnapshotStatus;
use crate::event::Seam;
use crate::load::policy::Policy;
use crate::load::registry::{LoadIssue, PluginSet};
use crate::runtime::http::grant::HttpGrant;
use crate::runtime::limits::Limits;
use crate::runtime::shares::Usage;
use crate::tenant::TenantName;

/// One loaded plugin as the faces show it.
#[derive(Clone, Debug, Serialize)]
pub struct PluginInfo<'a> {
    /// Its name (a tenant's plugins are `<tenant>/<name>`).
    pub name: &'a str,
    /// The component file.
    pub path: &'a Path,
    /// The component's digest (SHA-256, hex).
    pub digest: &'a str,
    /// The seams it subscribes to.
    pub seams: Vec<Seam>,
    /// The lifecycle hooks it observes (`on_llm_end`, ...); left out when
    /// it observes none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub observes: Vec<&'static str>,
    /// Its limits.
    pub limits: &'a Limits,
    /// What a fault of it does.
    pub on_error: OnError,
    /// `enforce`, or `shadow`: its verdicts recorded, never applied.
    pub mode: Mode,
    /// Its quarantine state now.
    pub health: Health,
    /// Instances it keeps made ahead of need (its manifest's `prepared`,
    /// or what `"auto"` decided at load).
    pub prepared: u32,
    /// Whether its component is a snapshot (made at load, or before), and
    /// why not when a warm-up failed.
    pub snapshot: &'a SnapshotStatus,
    /// A global plugin restricted to some tenants (`tenants = [...]`):
    /// those tenants. Absent for every other plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenants: Option<&'a [TenantName]>,
    /// Its outbound HTTP: the grant and what its requests did since it was
    /// loaded. Absent for a plugin granted none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpInfo<'a>>,
}

/// A plugin's outbound HTTP grant and its requests' tallies.
#[derive(Clone, Debug, Serialize)]
pub struct HttpInfo<'a> {
    /// What it is granted.
    pub grant: &'a HttpGrant,
    /// Its requests since it was loaded, by granted host (`-`: refused
    /// before one matched) and outcome (`ok`, or the fault).
    pub requests: Vec<HttpRequests>,
}

/// Requests to one granted host with one outcome.
#[derive(Clone, Debug, Serialize)]
pub struct HttpRequests {
    /// The `allowed_hosts` entry they fell under, or `-`.
    pub host: String,
    /// `ok` (answered, whatever the status), `http-denied`, `http-budget`
    /// or `http-failed`.
    pub outcome: &'static str,
    /// How many.
    pub count: u64,
    /// Body bytes they sent.
    pub sent: u64,
    /// Body bytes they received.
    pub received: u64,
}

impl<'a> PluginInfo<'a> {
    /// `plugin`, restricted to `tenants` when it is a global plugin that
    /// names some.
    pub fn of(plugin: &'a Plugin, tenants: Option<&'a [TenantName]>) -> Self {
        PluginInfo {
            name: plugin.name(),
            path: plugin.path(),
            digest: plugin.digest(),
            seams: plugin.seams(),
            observes: plugin.observes().names(),
            limits: plugin.limits(),
            on_error: plugin.on_error(),
            mode: plugin.mode(),
            health: plugin.health(),
            prepared: plugin.prepared_depth(),
            snapshot: plugin.snapshot_status(),
            tenants,
            http: plugin.http.as_ref().map(|out| HttpInfo {
                grant: out.grant(),
                requests: out
                    .tallies()
                    .into_iter()
                    .map(|((host, outcome), t)| HttpRequests {
                        host,
                        outcome,
                        count: t.requests,
                        sent: t.sent,
                        received: t.received,
                    })
                    .collect(),
            }),
        }
    }

    fn chain(chain: &'a Chain) -> Vec<Self> {
        chain.plugins().iter().map(|p| Self::of(p, None)).collect()
    }
}

/// Each account's usage now.
#[derive(Clone, Debug, Serialize)]
pub struct SharesInUse<'a> {
    /// The global account's (calls with no tenant, or for a tenant
    /// without a directory).
    pub global: Option<Usage>,
    /// Each tenant account's, by tenant.
    pub tenants: BTreeMap<&'a str, Usage>,
}

/// A loaded plugin set, described: what `GET /v1/plugins` answers.
#[derive(Clone, Debug, Serialize)]
pub struct Description<'a> {
    /// The plugin set generation.
    pub generation: u64,
    /// Every global plugin in order, those restricted to some tenants
    /// included (with their `tenants`); each one's `health` sums up its
    /// health for every account it runs for.
    pub global: Vec<PluginInfo<'a>>,
    /// Each tenant's own chain (without the global plugins), by tenant.
    pub tenants: BTreeMap<&'a str, Vec<PluginInfo<'a>>>,
    /// What could not be loaded, and why.
    pub errors: &'a [LoadIssue],
    /// Tenants whose directory has not loaded yet (their calls are
    /// answered not ready).
    pub pending: Vec<&'a str>,
    /// Whether the global directory has not loaded yet: every call is
    /// answered not ready ([`PluginSet::starting`]).
    pub starting: bool,
    /// Tenants not admitted (their share did not fit), with why (their
    /// calls are answered not ready).
    pub refused: BTreeMap<&'a str, &'a str>,
    /// The operator's policy in force.
    pub policy: &'a Policy,
    /// Each account's shares in use now.
    pub shares: SharesInUse<'a>,
}

impl Description<'_> {
    /// Every plugin described: the global ones, then each tenant's own.
    pub fn plugins(&self) -> impl Iterator<Item = &PluginInfo<'_>> {
        self.global.iter().chain(self.tenants.values().flatten())
    }
}

impl PluginSet {
    /// This plugin set described, the one way every face shows it.
    pub fn describe(&self) -> Description<'_> {
        Description {
            generation: self.generation,
            global: self
                .global_plugins
                .iter()
                .map(|p| PluginInfo {
                    health: p.plugin.health_of_every_account(),
                    ..PluginInfo::of(&p.plugin, p.tenants.as_deref())
                })
                .collect(),
            tenants: self
                .tenants
                .iter()
                .map(|(name, chain)| (name.as_str(), PluginInfo::chain(chain)))
                .collect(),
            errors: &self.errors,
            pending: self.pending.iter().map(String::as_str).collect(),
            starting: self.starting,
            refused: self
                .refused
                .iter()
                .map(|(t, why)| (t.as_str(), why.as_str()))
                .collect(),
            policy: &self.policy,
            shares: SharesInUse {
                global: self.accounts.global.as_ref().map(|a| a.usage()),
                tenants: self
                    .accounts
                    .tenants
                    .iter()
                    .map(|(name, a)| (name.as_str(), a.usage()))
                    .collect(),
            },
        }
    }
}
