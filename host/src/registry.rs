//! The plugins a host serves: the global chain and each tenant's, swapped
//! atomically on reload so calls in flight finish on the chain they began
//! with.
//!
//! Layout of a plugin directory:
//!
//! ```text
//! plugins/
//!   toolgate.toml             optional manifest (order, limits, config, tenants)
//!   10-sql-guard.wasm         global guards (without a manifest: file-name order)
//!   20-no-email.wasm
//!   tenants/
//!     acme/                   tenant `acme`'s own guards
//!       toolgate.toml         optional manifest of its own
//!       audit.wasm
//! ```
//!
//! A call for tenant T runs the global chain (the global plugins that apply
//! to T), then T's own; it never reaches another tenant's guards. A call
//! with no tenant runs the global plugins that apply to every call.
//!
//! On [`Registry::reload`] a plugin whose bytes and settings did not change
//! is reused as is; one whose settings changed is re-linked from the
//! component already compiled; only new bytes are compiled, and those go
//! through the on-disk [`CompiledCache`] first. A file that fails to load
//! keeps its previous version serving; a manifest that fails to parse keeps
//! the directory's whole previous chain serving.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::Mutex;
use wasmtime::component::Component;

use crate::cache::{CacheOutcome, CacheStats, CompiledCache};
use crate::chain::Chain;
use crate::dir;
use crate::engine::Engine;
use crate::error::Error;
use crate::manifest::{self, Manifest, Scope};
use crate::plugin::{Plugin, PluginSpec};
use crate::policy::Policy;
use crate::shares::Account;

/// One plugin of a loaded directory, with what it was loaded from.
#[derive(Clone, Debug)]
pub struct LoadedPlugin {
    /// The plugin.
    pub plugin: Arc<Plugin>,
    /// Global plugins only: the tenants it applies to (`None`: every call).
    pub tenants: Option<Vec<String>>,
    /// Digest and settings, to tell an unchanged plugin on reload.
    fingerprint: String,
}

impl LoadedPlugin {
    fn applies_to(&self, tenant: Option<&str>) -> bool {
        match (&self.tenants, tenant) {
            (None, _) => true,
            (Some(list), Some(t)) => list.iter().any(|x| x == t),
            (Some(_), None) => false,
        }
    }
}

/// One loaded state of the plugin directory.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Incremented by every reload that changed something.
    pub generation: u64,
    /// The global chain a call with no tenant runs (global plugins without a
    /// `tenants` restriction).
    pub global: Chain,
    /// Each tenant's own chain (without the global guards).
    pub tenants: BTreeMap<String, Chain>,
    /// What could not be loaded, with why; the previous version of each
    /// such file (if any) keeps serving.
    pub errors: Vec<LoadIssue>,
    /// Every global plugin in order, with its tenant restriction.
    pub global_plugins: Vec<LoadedPlugin>,
    /// Each tenant's own plugins (by tenant), for reuse on reload.
    tenant_plugins: BTreeMap<String, Vec<LoadedPlugin>>,
    /// Global chain followed by each tenant's own, precomputed.
    combined: BTreeMap<String, Chain>,
    /// The operator's policy in force (ceilings, shares, quarantine).
    pub policy: Policy,
    /// The shares calls are charged to.
    pub accounts: Accounts,
}

/// The accounts guard calls are charged to (see [`crate::shares`]).
#[derive(Debug, Default)]
pub struct Accounts {
    /// Calls with no tenant, or for a tenant without a directory.
    pub global: Option<Arc<Account>>,
    /// Each tenant with a directory: every call made for it.
    pub tenants: BTreeMap<String, Arc<Account>>,
}

/// A file that could not be loaded.
#[derive(Clone, Debug, Serialize)]
pub struct LoadIssue {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub message: String,
}

impl Snapshot {
    /// The chain a call for `tenant` runs: global, then the tenant's own.
    pub fn chain(&self, tenant: Option<&str>) -> &Chain {
        tenant
            .and_then(|t| self.combined.get(t))
            .unwrap_or(&self.global)
    }
}

/// Checks a tenant name: 1–64 characters of `[A-Za-z0-9_.-]`, not
/// starting with a dot (so no `..`, no hidden directories, no separators).
pub fn validate_tenant(name: &str) -> Result<(), String> {
    if manifest::is_plain_name(name) && !name.starts_with('.') {
        Ok(())
    } else {
        Err(format!(
            "invalid tenant name {name:?}: use 1-64 characters of letters, digits, '_', '-', '.', not starting with '.'"
        ))
    }
}

/// How a [`Registry`] keeps compiled code and watches its directory.
#[derive(Debug)]
pub struct RegistryOptions {
    /// The compiled-component cache. Default: [`CompiledCache::from_env`].
    pub cache: CompiledCache,
    /// How long the directory must be quiet after a change before the
    /// watcher reloads (see [`crate::watch`]). Default: 250 ms.
    pub settle: Duration,
    /// Tenant ceilings, shares and quarantine when the global manifest
    /// does not set them (it overrides them key by key). Default:
    /// [`Policy::default`].
    pub policy: Policy,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            cache: CompiledCache::from_env(),
            settle: Duration::from_millis(250),
            policy: Policy::default(),
        }
    }
}

/// The live plugin set of one directory.
pub struct Registry {
    engine: Engine,
    root: PathBuf,
    current: ArcSwap<Snapshot>,
    reloading: Mutex<()>,
    cache: Arc<CompiledCache>,
    settle: Duration,
    /// The policy of the options; the global manifest may override it.
    policy: Policy,
    /// Components compiled by this registry, by digest: a plugin whose
    /// settings change is re-linked, not recompiled.
    compiled: std::sync::Mutex<HashMap<String, Component>>,
}

/// What a reload did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReloadReport {
    /// The snapshot generation now serving.
    pub generation: u64,
    /// Plugins loaded or replaced (by path).
    pub loaded: Vec<PathBuf>,
    /// Plugins removed.
    pub removed: Vec<PathBuf>,
    /// Files that failed; their previous version, if any, keeps serving.
    pub errors: Vec<LoadIssue>,
    /// Components compiled by this reload (cache misses).
    pub compiled: Vec<PathBuf>,
    /// Components loaded from the on-disk cache.
    pub cache_hits: Vec<PathBuf>,
}

impl Registry {
    /// Loads `root` (global guards and `tenants/*`) with the default
    /// options (the default compiled cache).
    pub async fn open(engine: Engine, root: impl Into<PathBuf>) -> Result<Registry, Error> {
        Registry::open_with(engine, root, RegistryOptions::default()).await
    }

    /// Loads `root` with `options`.
    pub async fn open_with(
        engine: Engine,
        root: impl Into<PathBuf>,
        options: RegistryOptions,
    ) -> Result<Registry, Error> {
        let root = root.into();
        if let Err((key, why)) = options.policy.check() {
            return Err(Error::Limits {
                path: root,
                message: format!("policy: `{key}`: {why}"),
            });
        }
        if !root.is_dir() {
            return Err(Error::Read {
                path: root.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        let registry = Registry {
            engine,
            root,
            current: ArcSwap::from_pointee(Snapshot::default()),
            reloading: Mutex::new(()),
            cache: Arc::new(options.cache),
            settle: options.settle,
            policy: options.policy,
            compiled: Default::default(),
        };
        registry.reload().await?;
        Ok(registry)
    }

    /// The directory this registry serves.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The engine plugins are loaded into.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The compiled-component cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The compiled-component cache.
    pub fn cache(&self) -> &CompiledCache {
        &self.cache
    }

    /// The watcher's settle delay.
    pub fn settle(&self) -> Duration {
        self.settle
    }

    /// Watches the directory and reloads on change (see [`crate::watch`]).
    /// Must be called inside a Tokio runtime; dropping the handle stops it.
    pub fn watch(self: Arc<Self>) -> Result<crate::watch::WatchHandle, Error> {
        let settle = self.settle;
        crate::watch::spawn_with(self, settle)
    }

    /// The snapshot serving now. Hold it for the length of one call: a
    /// reload never changes a snapshot already taken.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Re-reads the directory and swaps in the new chains. A component whose
    /// bytes did not change is reused as is (never recompiled); one that
    /// fails to load keeps its previous version serving and is reported.
    pub async fn reload(&self) -> Result<ReloadReport, Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let old = self.snapshot();
        let mut report = ReloadReport::default();
        let mut errors = Vec::new();
        // The root must stay readable; everything below it is per file.
        std::fs::read_dir(&self.root).map_err(|source| Error::Read {
            path: self.root.clone(),
            source,
        })?;
        // The policy: the global manifest's, else (it failed) the one
        // serving, else the options'.
        let fallback = if old.generation == 0 {
            self.policy.clone()
        } else {
            old.policy.clone()
        };
        let (global_plugins, policy) = self
            .load_scope(
                &self.root,
                Scope::Global,
                None,
                &fallback,
                &old.global_plugins,
                &mut report,
                &mut errors,
            )
            .await;
        let policy = policy.unwrap_or(fallback);
        let pool = self
            .engine
            .config()
            .pooling
            .then_some(self.engine.config().max_instances);
        let mut admitted: u32 = 0;
        let mut tenant_plugins = BTreeMap::new();
        let tenants_dir = self.root.join("tenants");
        if tenants_dir.is_dir() {
            let mut names: Vec<(String, PathBuf)> = match std::fs::read_dir(&tenants_dir) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .collect(),
                Err(e) => {
                    errors.push(LoadIssue {
                        path: tenants_dir.clone(),
                        message: format!("cannot read: {e}"),
                    });
                    Vec::new()
                }
            };
            names.sort();
            for (name, path) in names {
                if let Err(message) = validate_tenant(&name) {
                    // Hidden directories (say an editor's) are not tenants.
                    if !name.starts_with('.') {
                        errors.push(LoadIssue { path, message });
                    }
                    continue;
                }
                // Shares are reservations: a tenant whose share does not
                // fit in the pool and the memory budget is not loaded.
                if let Err(e) = policy.shares.plan(pool, admitted + 1, &name) {
                    errors.push(LoadIssue {
                        path,
                        message: e.to_string(),
                    });
                    continue;
                }
                admitted += 1;
                let previous = old.tenant_plugins.get(&name).map_or(&[][..], Vec::as_slice);
                let (own, _) = self
                    .load_scope(
                        &path,
                        Scope::Tenant,
                        Some(&name),
                        &policy,
                        previous,
                        &mut report,
                        &mut errors,
                    )
                    .await;
                tenant_plugins.insert(name, own);
            }
        }
        for (name, own) in &old.tenant_plugins {
            if !tenant_plugins.contains_key(name) {
                report
                    .removed
                    .extend(own.iter().map(|p| p.plugin.path().to_path_buf()));
            }
        }
        self.forget_unused(&global_plugins, &tenant_plugins);
        let changed = !report.loaded.is_empty() || !report.removed.is_empty();
        let generation = old.generation + u64::from(changed || old.generation == 0);
        for p in global_plugins
            .iter()
            .chain(tenant_plugins.values().flatten())
        {
            p.plugin.set_quarantine(policy.quarantine.clone());
        }
        let accounts = Accounts::plan(&policy, &old.accounts, tenant_plugins.keys());
        let snapshot = Snapshot::build(
            generation,
            global_plugins,
            tenant_plugins,
            errors.clone(),
            policy,
            accounts,
        );
        report.generation = generation;
        report.errors = errors;
        for e in &report.errors {
            tracing::warn!(path = %e.path.display(), "plugin not loaded: {}", e.message);
        }
        if changed {
            tracing::info!(
                generation,
                loaded = ?report.loaded,
                removed = ?report.removed,
                compiled = report.compiled.len(),
                cache_hits = report.cache_hits.len(),
                "plugin set reloaded"
            );
        }
        self.current.store(Arc::new(snapshot));
        Ok(report)
    }

    /// Loads one directory (the root, or `tenant`'s) under `policy`. A
    /// manifest that fails keeps `previous` serving whole. Returns the
    /// plugins and, for a global manifest, the policy it sets.
    #[allow(
        clippy::too_many_arguments,
        reason = "one private helper of reload, called twice"
    )]
    async fn load_scope(
        &self,
        dir: &Path,
        scope: Scope,
        tenant: Option<&str>,
        policy: &Policy,
        previous: &[LoadedPlugin],
        report: &mut ReloadReport,
        errors: &mut Vec<LoadIssue>,
    ) -> (Vec<LoadedPlugin>, Option<Policy>) {
        let max_memory = self.engine.config().max_memory_bytes;
        let mut set_policy = None;
        let entries = match Manifest::load_with(dir, scope, max_memory, policy) {
            Err(e) => {
                errors.push(LoadIssue {
                    path: e.path.clone(),
                    message: e.to_string(),
                });
                return (previous.to_vec(), None);
            }
            Ok(Some(m)) => {
                if scope == Scope::Global {
                    set_policy = Some(m.policy);
                }
                m.plugins
            }
            Ok(None) => match dir::components(dir) {
                Ok(files) => files
                    .into_iter()
                    // Dotfiles are uploads in progress (the atomic-rename
                    // convention), never plugins.
                    .filter(|p| {
                        p.file_name()
                            .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
                    })
                    .map(|path| {
                        let mut spec = PluginSpec::new(path);
                        if scope == Scope::Tenant {
                            spec.limits = spec.limits.clamped_to(&policy.ceilings);
                        }
                        manifest::Entry {
                            spec,
                            tenants: None,
                        }
                    })
                    .collect(),
                Err(e) => {
                    errors.push(LoadIssue {
                        path: dir.to_path_buf(),
                        message: e.to_string(),
                    });
                    return (previous.to_vec(), None);
                }
            },
        };
        // The memory shares a plugin's calls are charged to must hold one
        // instance of it: a tenant's (a global plugin runs for tenants
        // too), and the global one.
        let shares = &set_policy.as_ref().unwrap_or(policy).shares;
        let fits_mib = match scope {
            Scope::Global => shares.global_memory_mib.min(shares.tenant_memory_mib),
            Scope::Tenant => shares.tenant_memory_mib,
        };
        // A tenant's plugins are named `<tenant>/<name>`: traces, logs and
        // metrics never confuse them with a global plugin of the same name.
        let entries: Vec<manifest::Entry> = match tenant {
            None => entries,
            Some(tenant) => entries
                .into_iter()
                .map(|mut e| {
                    e.spec.name = format!("{tenant}/{}", e.spec.name);
                    e
                })
                .collect(),
        };
        let mut loaded = Vec::new();
        for entry in entries {
            // The previous plugin of this name (manifest) or file (no
            // manifest; the name is the file's stem): what keeps serving if
            // the new version fails.
            let old = previous.iter().find(|p| p.plugin.name() == entry.spec.name);
            let mib = (entry.spec.limits.memory_bytes as u64).div_ceil(1 << 20);
            if mib > fits_mib {
                errors.push(LoadIssue {
                    path: entry.spec.path.clone(),
                    message: format!(
                        "{}: memory_mib {mib} does not fit in the memory share its calls are \
                         charged to ({fits_mib} MiB; see [shares])",
                        entry.spec.path.display()
                    ),
                });
                loaded.extend(old.cloned());
                continue;
            }
            let bytes = match std::fs::read(&entry.spec.path) {
                Ok(b) => b,
                Err(e) => {
                    errors.push(LoadIssue {
                        path: entry.spec.path.clone(),
                        message: format!("cannot read: {e}"),
                    });
                    loaded.extend(old.cloned());
                    continue;
                }
            };
            let digest = crate::plugin::digest(&bytes);
            let fingerprint = fingerprint(&entry, &digest);
            if let Some(old) = previous.iter().find(|p| p.fingerprint == fingerprint) {
                loaded.push(old.clone());
                continue;
            }
            match self
                .load_plugin(entry.spec.clone(), bytes, digest, report)
                .await
            {
                Ok(plugin) => {
                    report.loaded.push(entry.spec.path.clone());
                    loaded.push(LoadedPlugin {
                        plugin: Arc::new(plugin),
                        tenants: entry.tenants,
                        fingerprint,
                    });
                }
                Err(e) => {
                    errors.push(LoadIssue {
                        path: entry.spec.path.clone(),
                        message: e.to_string(),
                    });
                    loaded.extend(old.cloned());
                }
            }
        }
        for p in previous {
            if !loaded.iter().any(|q| Arc::ptr_eq(&q.plugin, &p.plugin))
                && !loaded.iter().any(|q| q.plugin.path() == p.plugin.path())
            {
                report.removed.push(p.plugin.path().to_path_buf());
            }
        }
        (loaded, set_policy)
    }

    /// Compiles (or finds compiled) and links one plugin.
    async fn load_plugin(
        &self,
        spec: PluginSpec,
        bytes: Vec<u8>,
        digest: String,
        report: &mut ReloadReport,
    ) -> Result<Plugin, Error> {
        let known = self
            .compiled
            .lock()
            .ok()
            .and_then(|m| m.get(&digest).cloned());
        let component = match known {
            Some(c) => c,
            None => {
                let (engine, path, d) = (self.engine.clone(), spec.path.clone(), digest.clone());
                let cache = Arc::clone(&self.cache);
                let (component, outcome) = tokio::task::spawn_blocking(move || {
                    cache.load_or_compile(&engine, &path, &bytes, &d)
                })
                .await
                .map_err(|e| Error::Engine(format!("compile task failed: {e}")))??;
                match outcome {
                    CacheOutcome::Hit => report.cache_hits.push(spec.path.clone()),
                    CacheOutcome::Compiled | CacheOutcome::Rebuilt => {
                        report.compiled.push(spec.path.clone());
                    }
                }
                if let Ok(mut m) = self.compiled.lock() {
                    m.insert(digest.clone(), component.clone());
                }
                component
            }
        };
        Plugin::from_component(&self.engine, spec, component, digest).await
    }

    /// Drops compiled components no plugin uses any more.
    fn forget_unused(
        &self,
        global: &[LoadedPlugin],
        tenants: &BTreeMap<String, Vec<LoadedPlugin>>,
    ) {
        let used: BTreeSet<&str> = global
            .iter()
            .chain(tenants.values().flatten())
            .map(|p| p.plugin.digest())
            .collect();
        if let Ok(mut m) = self.compiled.lock() {
            m.retain(|d, _| used.contains(d.as_str()));
        }
    }
}

impl Accounts {
    /// The global account and one per tenant in `tenants`, each reused
    /// from `old` when its share did not change (calls in flight keep
    /// their permits on it).
    fn plan<'a>(
        policy: &Policy,
        old: &Accounts,
        tenants: impl Iterator<Item = &'a String>,
    ) -> Accounts {
        let s = &policy.shares;
        let global = match &old.global {
            Some(a) if a.matches(s.global_instances, s.global_memory_mib, s.wait) => Arc::clone(a),
            _ => Arc::new(s.global_account()),
        };
        let tenants = tenants
            .map(|name| {
                let account = match old.tenants.get(name) {
                    Some(a) if a.matches(s.tenant_instances, s.tenant_memory_mib, s.wait) => {
                        Arc::clone(a)
                    }
                    _ => Arc::new(s.tenant_account(name)),
                };
                (name.clone(), account)
            })
            .collect();
        Accounts {
            global: Some(global),
            tenants,
        }
    }
}

impl Snapshot {
    fn build(
        generation: u64,
        global_plugins: Vec<LoadedPlugin>,
        tenant_plugins: BTreeMap<String, Vec<LoadedPlugin>>,
        errors: Vec<LoadIssue>,
        policy: Policy,
        accounts: Accounts,
    ) -> Snapshot {
        // Every plugin of a chain is charged to the chain's caller.
        let charge = |plugins: Vec<Arc<Plugin>>, account: Option<&Arc<Account>>| match account {
            None => plugins,
            Some(a) => plugins
                .into_iter()
                .map(|p| Arc::new(p.charged_to(Arc::clone(a))))
                .collect(),
        };
        let chain_for = |tenant: Option<&str>| -> Vec<Arc<Plugin>> {
            global_plugins
                .iter()
                .filter(|p| p.applies_to(tenant))
                .map(|p| Arc::clone(&p.plugin))
                .collect()
        };
        let global = Chain::new(charge(chain_for(None), accounts.global.as_ref()));
        // Tenants with a directory, and tenants a global plugin names.
        let mut names: BTreeSet<String> = tenant_plugins.keys().cloned().collect();
        names.extend(
            global_plugins
                .iter()
                .flat_map(|p| p.tenants.iter().flatten().cloned()),
        );
        // Each tenant's own chain, charged to its account: the same plugins
        // its combined chain runs.
        let tenants: BTreeMap<String, Chain> = tenant_plugins
            .iter()
            .map(|(name, own)| {
                let plugins = own.iter().map(|p| Arc::clone(&p.plugin)).collect();
                let account = accounts.tenants.get(name).or(accounts.global.as_ref());
                (name.clone(), Chain::new(charge(plugins, account)))
            })
            .collect();
        let combined = names
            .into_iter()
            .map(|name| {
                let account = accounts.tenants.get(&name).or(accounts.global.as_ref());
                let mut all = charge(chain_for(Some(&name)), account);
                if let Some(own) = tenants.get(&name) {
                    all.extend(own.plugins().iter().cloned());
                }
                (name, Chain::new(all))
            })
            .collect();
        Snapshot {
            generation,
            global,
            tenants,
            errors,
            global_plugins,
            tenant_plugins,
            combined,
            policy,
            accounts,
        }
    }
}

/// What identifies a plugin as unchanged: its bytes and every setting.
fn fingerprint(entry: &manifest::Entry, digest: &str) -> String {
    let s = &entry.spec;
    format!(
        "{digest}\0{}\0{}\0{:?}\0{:?}\0{}\0{:?}",
        s.name,
        s.path.display(),
        s.limits,
        s.on_error,
        s.config,
        entry.tenants
    )
}
