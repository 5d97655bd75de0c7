//! Building a plugin set from the scopes loaded: which tenants are
//! admitted, each chain charged to its caller's account, and the chains
//! that did not change kept as they were.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::call::chain::Chain;
use crate::call::plugin::Plugin;
use crate::call::snapshot::SnapshotStatus;
use crate::runtime::log_writer::DecisionLog;

use super::*;

impl PluginSet {
    /// The plugin set of `scopes` under the policy in force (the global
    /// manifest's, else `fallback`): tenants admitted while their shares
    /// fit in `pool` and the memory budget — those `old` admitted first,
    /// in the order they were, then newcomers by name — every guard given
    /// the quarantine rules, every chain charged to its caller's account
    /// (reused from `old` where its share did not change).
    pub(super) fn build(
        generation: u64,
        scopes: BTreeMap<ScopeKey, ScopeState>,
        listing_errors: Vec<LoadIssue>,
        mut pending: BTreeSet<String>,
        fallback: &Policy,
        old: &PluginSet,
        pool: Option<u32>,
    ) -> PluginSet {
        let global_scope = scopes.get(&ScopeKey::Global);
        let policy = global_scope
            .and_then(|s| s.policy.clone())
            .unwrap_or_else(|| fallback.clone());
        let global_plugins = global_scope.map(|s| s.plugins.clone()).unwrap_or_default();
        let mut errors: Vec<LoadIssue> = global_scope.map(|s| s.errors.clone()).unwrap_or_default();
        errors.extend(listing_errors.iter().cloned());
        let loaded: BTreeMap<&String, &ScopeState> = scopes
            .iter()
            .filter_map(|(key, state)| match key {
                ScopeKey::Tenant(name) => Some((name, state)),
                ScopeKey::Global => None,
            })
            .collect();
        for state in loaded.values() {
            errors.extend(state.errors.iter().cloned());
        }
        pending.retain(|t| !loaded.contains_key(t));
        let (admitted, refused, tenant_plugins) =
            admit(&policy, pool, old, &loaded, &pending, &mut errors);
        let folded = loaded
            .keys()
            .copied()
            .chain(&pending)
            .chain(refused.keys())
            .map(|t| (t.to_ascii_lowercase(), t.clone()))
            .collect();
        drop(loaded);
        for p in global_plugins
            .iter()
            .chain(tenant_plugins.values().flatten())
        {
            p.plugin.set_quarantine(policy.quarantine.clone());
            errors.extend(snapshot_issue(p.plugin.snapshot_status(), p.plugin.path()));
        }
        let accounts = Accounts::plan(&policy, &old.accounts, tenant_plugins.keys());
        let chains = Chains {
            globals_kept: old.generation > 0
                && same_loaded(global_scope, old.scopes.get(&ScopeKey::Global)),
            global_plugins: &global_plugins,
            accounts: &accounts,
            scopes: &scopes,
            old,
        };
        let decision_log =
            DecisionLog::reuse_or_start(&policy.decision_log, old.decision_log.as_ref());
        let starting = old.starting && !global_scope.is_some_and(read_whole);
        let global = chains.global();
        let tenants = chains.tenants(&tenant_plugins);
        let combined = chains.combined(&tenant_plugins, &tenants);
        PluginSet {
            generation,
            global,
            tenants,
            errors,
            global_plugins,
            scopes,
            listing_errors,
            combined,
            policy,
            accounts,
            pending,
            refused,
            admitted,
            tenants_dir: old.tenants_dir.clone(),
            arrivals: old.arrivals.clone(),
            folded,
            decision_log,
            starting,
        }
    }
}

/// Whether a directory's load read it (its manifest accepted): not one
/// refused whole, whose previous plugins (none, at first) keep serving.
fn read_whole(state: &ScopeState) -> bool {
    !state
        .errors
        .iter()
        .any(|e| matches!(e.kind, IssueKind::Manifest | IssueKind::Directory))
}

/// Tenants admitted, tenants refused (and why), and the admitted tenants'
/// plugins.
type Admitted = (
    Vec<String>,
    BTreeMap<String, String>,
    BTreeMap<String, Vec<LoadedPlugin>>,
);

/// Admits the loaded tenants whose shares fit. Shares are reservations: a
/// tenant whose share does not fit in the pool and the memory budget is
/// not admitted (its calls are answered `NotReady`) and is reported in
/// `errors`. Who was serving keeps serving: the tenants admitted before
/// come first, whatever their names — and one of them still loading
/// (after a restart, `old.admitted` is the order kept on disk) holds its
/// place meanwhile — so a newcomer that does not fit is the one refused.
/// A tenant whose directory has not loaded whole yet (a manifest refused,
/// a plugin that did not load) is refused with why, taking no place.
fn admit(
    policy: &Policy,
    pool: Option<u32>,
    old: &PluginSet,
    loaded: &BTreeMap<&String, &ScopeState>,
    pending: &BTreeSet<String>,
    errors: &mut Vec<LoadIssue>,
) -> Admitted {
    let before: BTreeSet<&String> = old.admitted.iter().collect();
    let order = old
        .admitted
        .iter()
        .filter(|t| loaded.contains_key(t) || pending.contains(*t))
        .chain(loaded.keys().copied().filter(|t| !before.contains(t)));
    let mut admitted = Vec::new();
    let mut refused = BTreeMap::new();
    let mut tenant_plugins = BTreeMap::new();
    for name in order {
        let state = loaded.get(name);
        if let Some(state) = state
            && !state.whole
        {
            refused.insert(name.clone(), not_whole(state));
            continue;
        }
        let count = u32::try_from(admitted.len() + 1).unwrap_or(u32::MAX);
        let fits = policy.shares.plan(pool, count, name);
        // Still loading: it holds its place if it fits, and is judged
        // like any other once it has loaded.
        let Some(state) = state else {
            if fits.is_ok() {
                admitted.push(name.clone());
            }
            continue;
        };
        if let Err(e) = fits {
            errors.push(LoadIssue::new(
                IssueKind::Share,
                PathBuf::from("tenants").join(name),
                e.to_string(),
            ));
            refused.insert(name.clone(), e.to_string());
            continue;
        }
        admitted.push(name.clone());
        tenant_plugins.insert(name.clone(), state.plugins.clone());
    }
    (admitted, refused, tenant_plugins)
}

/// Why a tenant whose directory has not loaded whole is not admitted.
fn not_whole(state: &ScopeState) -> String {
    let first = state
        .errors
        .first()
        .map_or("it did not load", |e| e.message.as_str());
    format!(
        "its directory has not loaded whole yet ({} issue(s); the first: {first}); \
         its calls are not decided until every plugin it names loads",
        state.errors.len()
    )
}

/// Whether two loads of a scope hold the very same loaded plugins.
fn same_loaded(a: Option<&ScopeState>, b: Option<&ScopeState>) -> bool {
    let (a, b) = (
        a.map_or(&[][..], |s| &s.plugins),
        b.map_or(&[][..], |s| &s.plugins),
    );
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(&x.plugin, &y.plugin))
}

/// Whether two chains are charged to the very same account.
fn same_account(a: Option<&Arc<Account>>, b: Option<&Arc<Account>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Building a plugin set's chains. A chain whose parts did not change (the
/// same loaded plugins, the same account) is the old one: a reload of one
/// tenant rebuilds that tenant's chains, not every tenant's (nor does it
/// forget every guard's habit, see `Plugin::charged_to`).
struct Chains<'a> {
    /// The global plugins are the old set's: every chain may be kept.
    globals_kept: bool,
    global_plugins: &'a [LoadedPlugin],
    accounts: &'a Accounts,
    scopes: &'a BTreeMap<ScopeKey, ScopeState>,
    old: &'a PluginSet,
}

impl Chains<'_> {
    /// Every plugin of a chain is charged to the chain's caller.
    fn charge(plugins: Vec<Arc<Plugin>>, account: Option<&Arc<Account>>) -> Vec<Arc<Plugin>> {
        match account {
            None => plugins,
            Some(a) => plugins
                .into_iter()
                .map(|p| Arc::new(p.charged_to(Arc::clone(a))))
                .collect(),
        }
    }

    /// `plugins` charged to `account`, serving `tenant`'s calls (their
    /// state is kept in that tenant's scopes).
    fn charge_for(
        plugins: Vec<Arc<Plugin>>,
        account: Option<&Arc<Account>>,
        tenant: &str,
    ) -> Vec<Arc<Plugin>> {
        Self::charge(plugins, account)
            .into_iter()
            .map(|p| Arc::new(p.serving(tenant)))
            .collect()
    }

    /// The global plugins that apply to `tenant` (none: calls without one).
    fn globals_for(&self, tenant: Option<&str>) -> Vec<Arc<Plugin>> {
        self.global_plugins
            .iter()
            .filter(|p| p.applies_to(tenant))
            .map(|p| Arc::clone(&p.plugin))
            .collect()
    }

    /// The account tenant `name`'s calls are charged to.
    fn account(&self, name: &str) -> Option<&Arc<Account>> {
        self.accounts
            .tenants
            .get(name)
            .or(self.accounts.global.as_ref())
    }

    /// Whether tenant `name`'s old chains may be kept.
    fn kept(&self, name: &String) -> bool {
        let key = ScopeKey::Tenant(name.clone());
        let old = self.old.accounts.tenants.get(name);
        self.globals_kept
            && same_loaded(self.scopes.get(&key), self.old.scopes.get(&key))
            && same_account(
                self.account(name),
                old.or(self.old.accounts.global.as_ref()),
            )
    }

    /// The chain of calls without a tenant.
    fn global(&self) -> Chain {
        let account = self.accounts.global.as_ref();
        if self.globals_kept && same_account(account, self.old.accounts.global.as_ref()) {
            return self.old.global.clone();
        }
        Chain::new(Self::charge(self.globals_for(None), account))
    }

    /// Each tenant's own chain, charged to its account: the same plugins
    /// its combined chain runs.
    fn tenants(&self, own: &BTreeMap<String, Vec<LoadedPlugin>>) -> BTreeMap<String, Chain> {
        own.iter()
            .map(|(name, own)| {
                if self.kept(name)
                    && let Some(chain) = self.old.tenants.get(name)
                {
                    return (name.clone(), chain.clone());
                }
                let plugins = own.iter().map(|p| Arc::clone(&p.plugin)).collect();
                (
                    name.clone(),
                    Chain::new(Self::charge_for(plugins, self.account(name), name)),
                )
            })
            .collect()
    }

    /// Each tenant's combined chain (the global plugins that apply to it,
    /// then its own): tenants with a directory, and tenants a global plugin
    /// names.
    fn combined(
        &self,
        own: &BTreeMap<String, Vec<LoadedPlugin>>,
        tenants: &BTreeMap<String, Chain>,
    ) -> BTreeMap<String, Chain> {
        let mut names: BTreeSet<String> = own.keys().cloned().collect();
        names.extend(
            self.global_plugins
                .iter()
                .flat_map(|p| p.tenants.iter().flatten().map(|t| t.to_string())),
        );
        names
            .into_iter()
            .map(|name| {
                let admitted_before =
                    tenants.contains_key(&name) == self.old.tenants.contains_key(&name);
                if admitted_before
                    && self.kept(&name)
                    && let Some(chain) = self.old.combined.get(&name)
                {
                    return (name, chain.clone());
                }
                let mut all =
                    Self::charge_for(self.globals_for(Some(&name)), self.account(&name), &name);
                if let Some(own) = tenants.get(&name) {
                    all.extend(own.plugins().iter().cloned());
                }
                (name, Chain::new(all))
            })
            .collect()
    }
}

/// The load issue a failed snapshot is reported as, for the plugin loaded
/// from `path`.
fn snapshot_issue(status: &SnapshotStatus, path: &Path) -> Option<LoadIssue> {
    match status {
        SnapshotStatus::Failed { reason } => Some(LoadIssue::new(
            IssueKind::Snapshot,
            path,
            format!("{}: loaded without a snapshot: {reason}", path.display()),
        )),
        _ => None,
    }
}
