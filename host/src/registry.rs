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
//!
//! Tenants are not trusted. Files are read by the rules of [`crate::files`]
//! (regular files inside their own directory, no symlinks in a tenant's,
//! size-capped, on blocking threads); compiles wait in a bounded queue and
//! are bounded in time and memory ([`crate::compile`]); a plugin that
//! failed is not compiled or probed again while its bytes and settings are
//! unchanged; the load probe's deadline is capped. Each directory loads
//! under its own lock and is swapped in when done, so one tenant's slow
//! load holds up no other's. The caps are [`LoadLimits`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use serde::Serialize;
use tokio::sync::{Mutex, Semaphore};
use wasmtime::component::Component;

use crate::cache::{CacheOutcome, CacheStats, CompiledCache, Lookup};
use crate::chain::Chain;
use crate::compile::{CompileBounds, Compiler};
use crate::engine::Engine;
use crate::error::Error;
use crate::files::{Opened, PluginDir, Symlinks};
use crate::manifest::{self, Manifest, Scope};
use crate::plugin::{Plugin, PluginSpec};
use crate::policy::Policy;
use crate::shares::Account;
use crate::snapshot::{AutoSnapshots, SnapshotStatus};
use crate::tenant::TenantName;

/// One plugin of a loaded directory, with what it was loaded from.
#[derive(Clone, Debug)]
pub struct LoadedPlugin {
    /// The plugin.
    pub plugin: Arc<Plugin>,
    /// Global plugins only: the tenants it applies to (`None`: every call).
    pub tenants: Option<Vec<TenantName>>,
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

/// The former name of [`PluginSet`], kept for code that uses it
/// ("snapshot" now means only a pre-initialised component, see
/// [`crate::snapshot`]).
pub type Snapshot = PluginSet;

/// One loaded state of the plugin directory: every chain and the accounts
/// they are charged to, swapped in whole by a reload.
#[derive(Debug, Default)]
pub struct PluginSet {
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
    /// What each directory loaded, for reuse on reload.
    scopes: BTreeMap<ScopeKey, ScopeState>,
    /// Entries of `tenants/` that are not tenants (bad names, symlinks).
    listing_errors: Vec<LoadIssue>,
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
    /// What kind of failure it is.
    pub kind: IssueKind,
}

/// What kind of failure a [`LoadIssue`] is, by where it arose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum IssueKind {
    /// A manifest (`toolgate.toml`) that cannot be read or is rejected:
    /// the directory's previous plugins keep serving.
    Manifest,
    /// A directory that cannot be used: gone, unreadable, a symlink where
    /// a tenant's directory must be a directory, a bad tenant name.
    Directory,
    /// A component file refused or unread: missing, not a regular file
    /// inside its directory, too large, an I/O error.
    File,
    /// A component that does not compile (not a component, invalid, over
    /// the compile bounds, the compiler process lost).
    Compile,
    /// A component that does not link or does not match the contract:
    /// an import the host lacks, no seam, a seam of the wrong shape.
    Contract,
    /// A component that fails to start (the load probe).
    Probe,
    /// A plugin or tenant that does not fit its share or the pool.
    Share,
    /// Limits outside what the engine allows.
    Limits,
    /// The host itself failed (the engine, a task, a thread).
    Host,
    /// Not a failure to load: a plugin whose snapshot at load failed (see
    /// [`crate::snapshot`]) serves as its bytes are.
    Snapshot,
}

impl IssueKind {
    /// The kind of a load that failed with `e`.
    pub fn of(e: &Error) -> IssueKind {
        match e {
            Error::Manifest(_) => IssueKind::Manifest,
            Error::Read { .. } | Error::Refused { .. } | Error::TooLarge { .. } => IssueKind::File,
            Error::CoreModule { .. }
            | Error::NotWasm { .. }
            | Error::Compile { .. }
            | Error::CompileBound { .. }
            | Error::Compiler { .. } => IssueKind::Compile,
            Error::Link { .. } | Error::NoSeams { .. } | Error::Contract { .. } => {
                IssueKind::Contract
            }
            Error::Start { .. } => IssueKind::Probe,
            Error::Limits { .. } => IssueKind::Limits,
            _ => IssueKind::Host,
        }
    }
}

impl LoadIssue {
    /// An issue of `kind` with `path` and `message`.
    pub fn new(kind: IssueKind, path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        LoadIssue {
            path: path.into(),
            message: message.into(),
            kind,
        }
    }

    /// The issue of a load of `path` that failed with `e`, its kind by
    /// `e`'s type.
    pub fn of(path: &Path, e: &Error) -> Self {
        LoadIssue::new(IssueKind::of(e), path, e.to_string())
    }
}

impl PluginSet {
    /// The account a request for `tenant` is charged to: the tenant's own
    /// when it has a directory, else the global account.
    pub fn account(&self, tenant: Option<&str>) -> Option<&Arc<Account>> {
        tenant
            .and_then(|t| self.accounts.tenants.get(t))
            .or(self.accounts.global.as_ref())
    }

    /// The chain a call for `tenant` runs: global, then the tenant's own.
    pub fn chain(&self, tenant: Option<&str>) -> &Chain {
        tenant
            .and_then(|t| self.combined.get(t))
            .unwrap_or(&self.global)
    }
}

/// What loading a directory may cost: the caps on files, compiles and the
/// load probe. Operator settings; every default is safe for untrusted
/// tenants.
#[derive(Clone, Debug)]
pub struct LoadLimits {
    /// Largest manifest read, in bytes; larger is refused unread.
    /// Default: 1 MiB ([`manifest::MAX_MANIFEST_BYTES`]).
    pub max_manifest_bytes: u64,
    /// Largest component read (and so compiled), in bytes; larger is
    /// refused unread. Default: 64 MiB.
    pub max_component_bytes: u64,
    /// How components are compiled. Default: [`Compiler::InProcess`];
    /// `toolgate` uses [`Compiler::Subprocess`], which also bounds memory.
    pub compiler: Compiler,
    /// The time and memory bound of one compile. Default: 120 s, 2 GiB.
    pub compile: CompileBounds,
    /// Compiles that may run at once, all directories together (a
    /// directory never runs more than one). Default: 2.
    pub compile_jobs: usize,
    /// The most the load probe (one instantiation of a new plugin) may
    /// take, whatever the plugin's own `timeout`. Default: 1 s.
    pub probe_timeout: Duration,
}

impl Default for LoadLimits {
    fn default() -> Self {
        LoadLimits {
            max_manifest_bytes: manifest::MAX_MANIFEST_BYTES,
            max_component_bytes: 64 << 20,
            compiler: Compiler::default(),
            compile: CompileBounds::default(),
            compile_jobs: 2,
            probe_timeout: Duration::from_secs(1),
        }
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
    /// Caps on files, compiles and the load probe. Default:
    /// [`LoadLimits::default`].
    pub load: LoadLimits,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            cache: CompiledCache::from_env(),
            settle: Duration::from_millis(250),
            policy: Policy::default(),
            load: LoadLimits::default(),
        }
    }
}

/// One directory of plugins: the global one or a tenant's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum ScopeKey {
    Global,
    Tenant(String),
}

/// What one directory has loaded.
#[derive(Clone, Debug, Default)]
struct ScopeState {
    plugins: Vec<LoadedPlugin>,
    errors: Vec<LoadIssue>,
    /// Plugins that failed to load, by fingerprint (bytes and settings):
    /// not compiled or probed again until one of them changes.
    failed: Vec<(String, LoadIssue)>,
    /// The global directory's manifest's policy (ceilings, shares,
    /// quarantine), when it sets one.
    policy: Option<Policy>,
}

/// Serialises the loads of one directory; at most one more waits.
#[derive(Default)]
struct ScopeLock {
    running: Mutex<()>,
    queued: AtomicBool,
}

/// Clears a [`ScopeLock`]'s `queued` flag when the waiter gets the lock or
/// gives up (its future dropped).
struct Queued<'a>(&'a AtomicBool);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The live plugin set of one directory.
pub struct Registry {
    engine: Engine,
    root: PathBuf,
    current: ArcSwap<PluginSet>,
    /// Serialises swapping in a new snapshot (never held across I/O).
    publishing: std::sync::Mutex<()>,
    /// One lock per directory: a directory's load never waits for
    /// another's (a slow compile in one tenant stalls no other).
    scopes: std::sync::Mutex<HashMap<ScopeKey, Arc<ScopeLock>>>,
    cache: Arc<CompiledCache>,
    settle: Duration,
    /// The policy of the options; the global manifest may override it.
    policy: Policy,
    load: LoadLimits,
    /// The compile queue: FIFO, `compile_jobs` at a time.
    compile_slots: Arc<Semaphore>,
    /// Components compiled by this registry, by digest: a plugin whose
    /// settings change is re-linked, not recompiled.
    compiled: std::sync::Mutex<HashMap<String, Component>>,
    /// Snapshots made at load: failed warm-ups, and a count.
    snapshots: AutoSnapshots,
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

impl ReloadReport {
    fn absorb(&mut self, other: ReloadReport) {
        self.loaded.extend(other.loaded);
        self.removed.extend(other.removed);
        self.compiled.extend(other.compiled);
        self.cache_hits.extend(other.cache_hits);
    }
}

/// What a directory's manifest (or listing) says to load.
enum Plan {
    /// The directory is gone.
    Gone,
    /// The directory is not a directory, or (a tenant's) is a symlink.
    Refused(LoadIssue),
    /// The directory (or its manifest) cannot be used: keep the previous
    /// plugins, report why.
    Failed(LoadIssue),
    /// Load these, reading files through `dir`.
    Load {
        dir: Arc<PluginDir>,
        entries: Vec<manifest::Entry>,
        /// The policy the global manifest sets (`None` for a tenant, or
        /// without a manifest).
        policy: Option<Policy>,
    },
}

fn join_error(source: tokio::task::JoinError) -> Error {
    Error::Task {
        what: "load",
        source,
    }
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
            current: ArcSwap::from_pointee(PluginSet::default()),
            publishing: Default::default(),
            scopes: Default::default(),
            cache: Arc::new(options.cache),
            settle: options.settle,
            policy: options.policy,
            compile_slots: Arc::new(Semaphore::new(options.load.compile_jobs.max(1))),
            load: options.load,
            compiled: Default::default(),
            snapshots: AutoSnapshots::default(),
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

    /// Warm-ups run by this registry to snapshot components at load (a
    /// snapshot found in the compiled cache runs none).
    pub fn snapshot_warm_ups(&self) -> u64 {
        self.snapshots.warm_ups()
    }

    /// The watcher's settle delay.
    pub fn settle(&self) -> Duration {
        self.settle
    }

    /// The caps on files, compiles and the load probe.
    pub fn load_limits(&self) -> &LoadLimits {
        &self.load
    }

    /// Watches the directory and reloads on change (see [`crate::watch`]).
    /// Must be called inside a Tokio runtime; dropping the handle stops it.
    pub fn watch(self: Arc<Self>) -> Result<crate::watch::WatchHandle, Error> {
        let (root, settle) = (self.root().to_path_buf(), self.settle);
        crate::watch::spawn(
            &root,
            settle,
            self.reload_fn("after a change in the plugin directory"),
        )
    }

    /// Reloads on every `SIGHUP` until the task is aborted. Must be called
    /// inside a Tokio runtime.
    #[cfg(unix)]
    pub fn on_sighup(self: Arc<Self>) -> Result<tokio::task::JoinHandle<()>, Error> {
        crate::watch::on_sighup(self.reload_fn("on SIGHUP"))
    }

    /// A reload that logs its outcome; `why` says what asked for it.
    fn reload_fn(self: Arc<Self>, why: &'static str) -> crate::watch::Reload {
        Arc::new(move || {
            let registry = Arc::clone(&self);
            Box::pin(async move {
                match registry.reload().await {
                    Ok(report) => tracing::info!(
                        generation = report.generation,
                        loaded = report.loaded.len(),
                        removed = report.removed.len(),
                        errors = report.errors.len(),
                        "reloaded {why}"
                    ),
                    Err(e) => tracing::error!("reload {why} failed: {e}"),
                }
            })
        })
    }

    /// The plugin set serving now, as taken at this moment. Hold it for the
    /// length of one call: a reload swaps in a new set and never changes
    /// one already taken.
    pub fn snapshot(&self) -> Arc<PluginSet> {
        self.current.load_full()
    }

    /// Re-reads the directory and swaps in the new chains. A component whose
    /// bytes did not change is reused as is (never recompiled); one that
    /// fails to load keeps its previous version serving and is reported,
    /// and is not tried again while its bytes and settings stay the same.
    ///
    /// The global directory and each tenant's load concurrently, each
    /// swapped in as soon as it is done: a slow compile in one tenant holds
    /// up no other. A directory another reload is loading is waited for
    /// (and then re-read); when a reload is already waiting for it, this one
    /// leaves it to that one.
    pub async fn reload(&self) -> Result<ReloadReport, Error> {
        let root = self.root.clone();
        let (listed, listing_errors) = tokio::task::spawn_blocking(move || list_tenants(&root))
            .await
            .map_err(join_error)??;
        // Tenants listed now, and tenants loaded before (gone ones are
        // removed by their own load, under their lock).
        let mut names: BTreeSet<String> = listed.into_iter().collect();
        names.extend(self.snapshot().scopes.keys().filter_map(|k| match k {
            ScopeKey::Tenant(t) => Some(t.clone()),
            ScopeKey::Global => None,
        }));
        let tenants: Vec<ScopeKey> = names.into_iter().map(ScopeKey::Tenant).collect();
        // The global directory first: its manifest sets the policy (the
        // ceilings) every tenant's manifest is read under. The tenant
        // listing's errors are published with it.
        let mut report = self
            .reload_scope(&ScopeKey::Global, Some(listing_errors))
            .await;
        for r in join_all(tenants.iter().map(|k| self.reload_scope(k, None))).await {
            report.absorb(r);
        }
        let snapshot = self.snapshot();
        report.generation = snapshot.generation;
        report.errors = snapshot.errors.clone();
        for e in &report.errors {
            match e.kind {
                IssueKind::Snapshot => tracing::warn!(path = %e.path.display(), "{}", e.message),
                _ => tracing::warn!(path = %e.path.display(), "plugin not loaded: {}", e.message),
            }
        }
        if !report.loaded.is_empty() || !report.removed.is_empty() {
            tracing::info!(
                generation = report.generation,
                loaded = ?report.loaded,
                removed = ?report.removed,
                compiled = report.compiled.len(),
                cache_hits = report.cache_hits.len(),
                "plugin set reloaded"
            );
        }
        Ok(report)
    }

    /// Forgets every remembered load failure: the next reload tries each
    /// failed plugin again (say, after a compile ran out of time on a busy
    /// machine). Without this, a failed plugin is tried again only when its
    /// bytes or settings change.
    pub fn forget_failures(&self) {
        self.publish(|scopes, _| {
            for s in scopes.values_mut() {
                s.failed.clear();
            }
            false
        });
        self.snapshots.forget_failures();
    }

    /// The policy the global manifest sets, else the options'.
    fn policy_in_force(&self) -> Policy {
        self.snapshot()
            .scopes
            .get(&ScopeKey::Global)
            .and_then(|s| s.policy.clone())
            .unwrap_or_else(|| self.policy.clone())
    }

    fn scope_lock(&self, key: &ScopeKey) -> Arc<ScopeLock> {
        let mut scopes = self
            .scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(scopes.entry(key.clone()).or_default())
    }

    /// Loads one directory under its lock and swaps the result in.
    async fn reload_scope(&self, key: &ScopeKey, listing: Option<Vec<LoadIssue>>) -> ReloadReport {
        let lock = self.scope_lock(key);
        if lock.queued.swap(true, Ordering::SeqCst) {
            // A reload is already waiting to load this directory; it reads
            // the files after the one running now, so it sees our change.
            return ReloadReport::default();
        }
        let waiting = Queued(&lock.queued);
        let _running = lock.running.lock().await;
        drop(waiting);
        let previous = self.snapshot().scopes.get(key).cloned();
        let mut report = ReloadReport::default();
        let state = self.load_scope(key, previous.as_ref(), &mut report).await;
        if let (None, Some(p)) = (&state, &previous) {
            report
                .removed
                .extend(p.plugins.iter().map(|p| p.plugin.path().to_path_buf()));
        }
        let changed = !report.loaded.is_empty() || !report.removed.is_empty();
        self.publish(|scopes, listed| {
            if let Some(l) = listing {
                *listed = l;
            }
            match state {
                Some(s) => {
                    scopes.insert(key.clone(), s);
                }
                None => {
                    scopes.remove(key);
                }
            }
            changed
        });
        report
    }

    /// Swaps in a snapshot with `edit` applied to the current one's
    /// directories and listing errors; `edit` says whether the plugin set
    /// changed (a new generation).
    fn publish(
        &self,
        edit: impl FnOnce(&mut BTreeMap<ScopeKey, ScopeState>, &mut Vec<LoadIssue>) -> bool,
    ) {
        let _one = self
            .publishing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.snapshot();
        let mut scopes = old.scopes.clone();
        let mut listing = old.listing_errors.clone();
        let changed = edit(&mut scopes, &mut listing);
        let generation = old.generation + u64::from(changed || old.generation == 0);
        let pool = self
            .engine
            .config()
            .pooling
            .then_some(self.engine.config().max_instances);
        let snapshot = PluginSet::build(
            generation,
            scopes,
            listing,
            &self.policy,
            &old.accounts,
            pool,
        );
        // Prepared instances may hold the pool slots no share reserves.
        if let Some(pool) = pool {
            let reserved = snapshot
                .policy
                .shares
                .reserved(u32::try_from(snapshot.accounts.tenants.len()).unwrap_or(u32::MAX));
            let room = u64::from(pool).saturating_sub(reserved);
            if self
                .engine
                .prepared_slots()
                .set_room(u32::try_from(room).unwrap_or(u32::MAX))
            {
                let global = snapshot.global_plugins.iter().map(|p| &p.plugin);
                for p in global.chain(snapshot.tenants.values().flat_map(|c| c.plugins())) {
                    p.discard_prepared();
                }
            }
        }
        self.forget_unused(&snapshot);
        self.current.store(Arc::new(snapshot));
    }

    /// Loads one directory (the root, or a tenant's). `None`: the tenant's
    /// directory is gone (or is no longer a directory). A manifest that
    /// fails keeps `previous` serving whole.
    async fn load_scope(
        &self,
        key: &ScopeKey,
        previous: Option<&ScopeState>,
        report: &mut ReloadReport,
    ) -> Option<ScopeState> {
        let empty = ScopeState::default();
        let previous = previous.unwrap_or(&empty);
        let (dir, scope, tenant, symlinks) = match key {
            ScopeKey::Global => (self.root.clone(), Scope::Global, None, Symlinks::Follow),
            ScopeKey::Tenant(t) => (
                self.root.join("tenants").join(t),
                Scope::Tenant,
                Some(t.as_str()),
                Symlinks::Refuse,
            ),
        };
        let (max_manifest, max_memory) = (
            self.load.max_manifest_bytes,
            self.engine.config().max_memory_bytes,
        );
        // The policy in force: the global manifest's (when a tenant loads,
        // the global directory has loaded first), else the options'.
        let policy = self.policy_in_force();
        let plan = {
            let (dir, policy) = (dir.clone(), policy.clone());
            tokio::task::spawn_blocking(move || {
                plan_scope(&dir, scope, symlinks, max_manifest, max_memory, &policy)
            })
            .await
        };
        let keep_previous = |why: LoadIssue| ScopeState {
            plugins: previous.plugins.clone(),
            errors: vec![why],
            failed: previous.failed.clone(),
            policy: previous.policy.clone(),
        };
        let (pdir, entries, set_policy) = match plan {
            Err(e) => return Some(keep_previous(LoadIssue::of(&dir, &join_error(e)))),
            // The tenant listing reports a tenant directory turned symlink.
            Ok(Plan::Gone | Plan::Refused(_)) if tenant.is_some() => return None,
            Ok(Plan::Gone) => {
                let gone = Error::Refused { path: dir.clone() };
                let why = LoadIssue::new(IssueKind::Directory, &dir, gone.to_string());
                return Some(keep_previous(why));
            }
            Ok(Plan::Failed(why) | Plan::Refused(why)) => return Some(keep_previous(why)),
            Ok(Plan::Load {
                dir,
                entries,
                policy: set,
            }) => (dir, entries, set),
        };
        // The memory shares a plugin's calls are charged to must hold one
        // instance of it: a tenant's (a global plugin runs for tenants
        // too), and the global one.
        let shares = &set_policy.as_ref().unwrap_or(&policy).shares;
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
        let mut state = ScopeState {
            policy: set_policy.clone(),
            ..ScopeState::default()
        };
        for entry in entries {
            // The previous plugin of this name (manifest) or file (no
            // manifest; the name is the file's stem): what keeps serving if
            // the new version fails.
            let old = previous
                .plugins
                .iter()
                .find(|p| p.plugin.name() == entry.spec.name);
            let path = entry.spec.path.clone();
            let mib = (entry.spec.limits.memory_bytes as u64).div_ceil(1 << 20);
            if mib > fits_mib {
                state.errors.push(LoadIssue::new(
                    IssueKind::Share,
                    &path,
                    format!(
                        "{}: memory_mib {mib} does not fit in the memory share its calls are \
                         charged to ({fits_mib} MiB; see [shares])",
                        path.display()
                    ),
                ));
                state.plugins.extend(old.cloned());
                continue;
            }
            let rel = path.strip_prefix(&dir).unwrap_or(&path).to_path_buf();
            let (reader, cap) = (Arc::clone(&pdir), self.load.max_component_bytes);
            let read = tokio::task::spawn_blocking(move || reader.read(&rel, cap))
                .await
                .map_err(join_error)
                .and_then(|r| r);
            let bytes = match read {
                Ok(b) => b,
                Err(e) => {
                    state.errors.push(LoadIssue::of(&path, &e));
                    state.plugins.extend(old.cloned());
                    continue;
                }
            };
            let digest = crate::plugin::digest(&bytes);
            let fingerprint = fingerprint(&entry, &digest);
            if let Some(same) = previous
                .plugins
                .iter()
                .find(|p| p.fingerprint == fingerprint)
            {
                state.plugins.push(same.clone());
                continue;
            }
            if let Some((_, why)) = previous.failed.iter().find(|(f, _)| *f == fingerprint) {
                // Failed before with these very bytes and settings: report
                // it again, without compiling or probing again.
                state.errors.push(why.clone());
                state.failed.push((fingerprint, why.clone()));
                state.plugins.extend(old.cloned());
                continue;
            }
            match self
                .load_plugin(entry.spec.clone(), bytes, digest, report)
                .await
            {
                Ok(plugin) => {
                    report.loaded.push(path);
                    state.plugins.push(LoadedPlugin {
                        plugin: Arc::new(plugin),
                        tenants: entry.tenants,
                        fingerprint,
                    });
                }
                Err(e) => {
                    let why = LoadIssue::of(&path, &e);
                    // An engine or I/O error may pass: try again next time.
                    if !e.is_transient() {
                        state.failed.push((fingerprint, why.clone()));
                    }
                    state.errors.push(why);
                    state.plugins.extend(old.cloned());
                }
            }
        }
        for p in &previous.plugins {
            if !state
                .plugins
                .iter()
                .any(|q| Arc::ptr_eq(&q.plugin, &p.plugin))
                && !state
                    .plugins
                    .iter()
                    .any(|q| q.plugin.path() == p.plugin.path())
            {
                report.removed.push(p.plugin.path().to_path_buf());
            }
        }
        Some(state)
    }

    /// Compiles (or finds compiled) and links one plugin: the compile waits
    /// for a slot of the compile queue and is bounded in time (and, in a
    /// child process, memory); the probe has its own deadline.
    async fn load_plugin(
        &self,
        spec: PluginSpec,
        bytes: Vec<u8>,
        digest: String,
        report: &mut ReloadReport,
    ) -> Result<Plugin, Error> {
        let status = match crate::snapshot::plan(spec.snapshot, &bytes) {
            Some(status) => status,
            None => match self.load_snapshot(&spec, &bytes, &digest, report).await {
                Ok(plugin) => return Ok(plugin),
                Err(reason) => SnapshotStatus::Failed { reason },
            },
        };
        let known = self
            .compiled
            .lock()
            .ok()
            .and_then(|m| m.get(&digest).cloned());
        let component = match known {
            Some(c) => c,
            None => {
                let (component, outcome) = self.compile(&spec.path, bytes, Some(&digest)).await?;
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
        let mut plugin = Plugin::from_component_probed(
            &self.engine,
            spec,
            component,
            digest,
            Some(self.load.probe_timeout),
        )
        .await?;
        plugin.snapshot = status;
        Ok(plugin)
    }

    /// The cache first (no queue; none without `digest`), else a bounded
    /// compile in the queue, stored in the cache under `digest`.
    async fn compile(
        &self,
        path: &Path,
        bytes: Vec<u8>,
        digest: Option<&str>,
    ) -> Result<(Component, CacheOutcome), Error> {
        let found = match digest {
            None => Lookup::Miss,
            Some(d) => {
                let (engine, cache, d) =
                    (self.engine.clone(), Arc::clone(&self.cache), d.to_string());
                tokio::task::spawn_blocking(move || cache.lookup(&engine, &d))
                    .await
                    .map_err(join_error)?
            }
        };
        let outcome = match found {
            Lookup::Hit(c) => return Ok((c, CacheOutcome::Hit)),
            Lookup::Miss => CacheOutcome::Compiled,
            Lookup::Rebuilt => CacheOutcome::Rebuilt,
        };
        let slot = Arc::clone(&self.compile_slots)
            .acquire_owned()
            .await
            .map_err(|_| Error::Engine("the compile queue is closed".into()))?;
        let (engine, cache, d) = (
            self.engine.clone(),
            Arc::clone(&self.cache),
            digest.map(str::to_string),
        );
        let (compiler, bounds, p) = (
            self.load.compiler.clone(),
            self.load.compile.clone(),
            path.to_path_buf(),
        );
        let task = tokio::task::spawn_blocking(move || {
            // The slot is held until the compile really ends, even when
            // the reload stopped waiting for it.
            let _slot = slot;
            let component = compiler.compile(&engine, &p, &bytes, &bounds)?;
            if let Some(d) = d {
                cache.store(&engine, &d, &component);
            }
            Ok::<_, Error>(component)
        });
        // A child process is killed at the bound itself; give it time to
        // report. An in-process compile cannot be stopped: stop waiting.
        let wait = match self.load.compiler {
            Compiler::InProcess => self.load.compile.timeout,
            Compiler::Subprocess { .. } => self.load.compile.timeout + Duration::from_secs(10),
        };
        match tokio::time::timeout(wait, task).await {
            Err(_) => Err(Error::CompileBound {
                path: path.to_path_buf(),
                message: format!(
                    "took longer than the compile time limit of {} ms",
                    self.load.compile.timeout.as_millis()
                ),
            }),
            Ok(joined) => Ok((joined.map_err(join_error)??, outcome)),
        }
    }

    /// Drops compiled components (and remembered warm-up failures) no
    /// plugin uses any more.
    fn forget_unused(&self, snapshot: &PluginSet) {
        let plugins = || snapshot.scopes.values().flat_map(|s| &s.plugins);
        let mut used: BTreeSet<String> = plugins().map(|p| p.plugin.digest().to_string()).collect();
        self.snapshots.retain(|d| used.contains(d));
        used.extend(
            plugins()
                .filter(|p| p.plugin.snapshot == SnapshotStatus::Snapshotted)
                .map(|p| crate::snapshot::cache_digest(p.plugin.digest(), &p.plugin.config)),
        );
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
            Some(a) if a.matches(s.global_lends(), s.wait) => Arc::clone(a),
            _ => Arc::new(s.global_account()),
        };
        let tenants = tenants
            .map(|name| {
                let account = match old.tenants.get(name) {
                    Some(a) if a.matches(s.tenant_lends(), s.wait) => Arc::clone(a),
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

/// The tenant names under `root/tenants` (valid, real directories), and
/// the entries refused (a bad name, a symlink). Blocking.
fn list_tenants(root: &Path) -> Result<(Vec<String>, Vec<LoadIssue>), Error> {
    // The root must stay readable; everything below it is per directory.
    std::fs::read_dir(root).map_err(|source| Error::Read {
        path: root.to_path_buf(),
        source,
    })?;
    let (mut names, mut errors) = (Vec::new(), Vec::new());
    let tenants_dir = root.join("tenants");
    if !tenants_dir.is_dir() {
        return Ok((names, errors));
    }
    let entries = match std::fs::read_dir(&tenants_dir) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(LoadIssue::new(
                IssueKind::Directory,
                &tenants_dir,
                format!("cannot read: {e}"),
            ));
            return Ok((names, errors));
        }
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Hidden entries (say an editor's) are not tenants.
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_symlink() {
            // Where it points is never looked at, nor told.
            let message = format!(
                "{}: not loaded: a tenant directory must be a directory, not a symlink",
                path.display()
            );
            errors.push(LoadIssue::new(IssueKind::Directory, path, message));
        } else if kind.is_dir() {
            match TenantName::try_from(name) {
                Ok(name) => names.push(name.into()),
                Err(e) => errors.push(LoadIssue::new(IssueKind::Directory, path, e.to_string())),
            }
        }
    }
    names.sort();
    errors.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((names, errors))
}

/// Opens a directory and reads what to load from it: its manifest, else
/// its `*.wasm` entries. Blocking.
fn plan_scope(
    dir: &Path,
    scope: Scope,
    symlinks: Symlinks,
    max_manifest_bytes: u64,
    max_memory_bytes: usize,
    policy: &Policy,
) -> Plan {
    let pdir = match PluginDir::open(dir, symlinks) {
        Opened::Dir(d) => d,
        Opened::Missing => return Plan::Gone,
        Opened::Refused(e) => {
            return Plan::Refused(LoadIssue::new(IssueKind::Directory, dir, e.to_string()));
        }
    };
    let manifest_path = dir.join(manifest::FILE_NAME);
    let entries = match pdir.read_optional(Path::new(manifest::FILE_NAME), max_manifest_bytes) {
        Err(e) => {
            let e = Error::from(manifest::ManifestError::unreadable(&manifest_path, &e));
            return Plan::Failed(LoadIssue::of(&manifest_path, &e));
        }
        Ok(Some(bytes)) => {
            match Manifest::parse_bytes(&manifest_path, &bytes, scope, max_memory_bytes, policy) {
                Ok(m) => {
                    let set = (scope == Scope::Global).then_some(m.policy);
                    return Plan::Load {
                        dir: Arc::new(pdir),
                        entries: m.plugins,
                        policy: set,
                    };
                }
                Err(e) => {
                    let path = e.path.clone();
                    return Plan::Failed(LoadIssue::of(&path, &Error::from(e)));
                }
            }
        }
        Ok(None) => match pdir.wasm_names() {
            Ok(names) => names
                .into_iter()
                .map(|n| {
                    let mut spec = PluginSpec::new(dir.join(n));
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
                return Plan::Failed(LoadIssue::new(IssueKind::Directory, dir, e.to_string()));
            }
        },
    };
    Plan::Load {
        dir: Arc::new(pdir),
        entries,
        policy: None,
    }
}

impl PluginSet {
    /// The snapshot of `scopes` under the policy in force (the global
    /// manifest's, else `fallback`): tenants admitted in name order while
    /// their shares fit in `pool` and the memory budget, every guard given
    /// the quarantine rules, every chain charged to its caller's account
    /// (reused from `old` where its share did not change).
    fn build(
        generation: u64,
        scopes: BTreeMap<ScopeKey, ScopeState>,
        listing_errors: Vec<LoadIssue>,
        fallback: &Policy,
        old: &Accounts,
        pool: Option<u32>,
    ) -> PluginSet {
        let policy = scopes
            .get(&ScopeKey::Global)
            .and_then(|s| s.policy.clone())
            .unwrap_or_else(|| fallback.clone());
        let global_plugins = scopes
            .get(&ScopeKey::Global)
            .map(|s| s.plugins.clone())
            .unwrap_or_default();
        let mut errors: Vec<LoadIssue> = scopes
            .get(&ScopeKey::Global)
            .map(|s| s.errors.clone())
            .unwrap_or_default();
        errors.extend(listing_errors.iter().cloned());
        // Shares are reservations: a tenant whose share does not fit in the
        // pool and the memory budget is not admitted (its calls run the
        // global chain only) and is reported.
        let mut tenant_plugins: BTreeMap<String, Vec<LoadedPlugin>> = BTreeMap::new();
        for (key, state) in &scopes {
            let ScopeKey::Tenant(name) = key else {
                continue;
            };
            errors.extend(state.errors.iter().cloned());
            let admitted = u32::try_from(tenant_plugins.len() + 1).unwrap_or(u32::MAX);
            if let Err(e) = policy.shares.plan(pool, admitted, name) {
                errors.push(LoadIssue::new(
                    IssueKind::Share,
                    PathBuf::from("tenants").join(name),
                    e.to_string(),
                ));
                continue;
            }
            tenant_plugins.insert(name.clone(), state.plugins.clone());
        }
        for p in global_plugins
            .iter()
            .chain(tenant_plugins.values().flatten())
        {
            p.plugin.set_quarantine(policy.quarantine.clone());
            errors.extend(p.plugin.snapshot_status().issue(p.plugin.path()));
        }
        let accounts = Accounts::plan(&policy, old, tenant_plugins.keys());
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
                .flat_map(|p| p.tenants.iter().flatten().map(|t| t.to_string())),
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
    ) + &format!("\0{}\0{:?}", s.prepared, s.snapshot)
}

impl Registry {
    /// The plugin `spec` with its component snapshotted at load: from this
    /// registry's memory or the compiled cache when made before (no
    /// warm-up), else instrumented, compiled, warmed up within the load
    /// probe's cap ([`crate::snapshot::warm_up_at_load`]), compiled again
    /// and cached. `Err`: why not (reported; the caller loads the plain
    /// component); a warm-up that failed is not tried again while the
    /// bytes, configuration and limits stay the same.
    async fn load_snapshot(
        &self,
        spec: &PluginSpec,
        bytes: &[u8],
        digest: &str,
        report: &mut ReloadReport,
    ) -> Result<Plugin, String> {
        let memo = AutoSnapshots::memo(spec, digest);
        if let Some(why) = self.snapshots.failed(&memo) {
            return Err(why);
        }
        let key = crate::snapshot::cache_digest(digest, &spec.config.to_string());
        let result: Result<Plugin, String> = async {
            let known = self.compiled.lock().ok().and_then(|m| m.get(&key).cloned());
            let component = match known {
                Some(c) => c,
                None => {
                    let c = self.make_snapshot(spec, bytes, &key, report).await?;
                    if let Ok(mut m) = self.compiled.lock() {
                        m.insert(key.clone(), c.clone());
                    }
                    c
                }
            };
            let mut plugin = Plugin::from_component_probed(
                &self.engine,
                spec.clone(),
                component,
                digest.to_string(),
                Some(self.load.probe_timeout),
            )
            .await
            .map_err(|e| e.to_string())?;
            plugin.snapshot = SnapshotStatus::Snapshotted;
            Ok(plugin)
        }
        .await;
        if let Err(why) = &result {
            tracing::warn!(path = %spec.path.display(), "loading without a snapshot: {why}");
            self.snapshots.remember(memo, why.clone());
        }
        result
    }

    /// The compiled snapshot of `bytes` under cache digest `key`: from the
    /// cache, else made (warm-up included) and stored.
    async fn make_snapshot(
        &self,
        spec: &PluginSpec,
        bytes: &[u8],
        key: &str,
        report: &mut ReloadReport,
    ) -> Result<Component, String> {
        let (engine, cache, k) = (
            self.engine.clone(),
            Arc::clone(&self.cache),
            key.to_string(),
        );
        let found = tokio::task::spawn_blocking(move || cache.lookup(&engine, &k))
            .await
            .map_err(|e| e.to_string())?;
        if let Lookup::Hit(c) = found {
            report.cache_hits.push(spec.path.clone());
            return Ok(c);
        }
        let start = std::time::Instant::now();
        let wasm: Arc<[u8]> = bytes.into();
        let instrumented = crate::snapshot::instrument(Arc::clone(&wasm)).await?;
        let instrumenting = start.elapsed();
        let (instrumented, _) = self
            .compile(&spec.path, instrumented, None)
            .await
            .map_err(|e| format!("compiling it instrumented: {e}"))?;
        let compiling = start.elapsed();
        let bounds = crate::snapshot::WarmUpBounds {
            deadline: self.load.probe_timeout,
            max_bytes: self.load.max_component_bytes,
        };
        let snapshot = crate::snapshot::warm_up_at_load(
            &self.engine,
            spec,
            wasm,
            instrumented,
            bounds,
            &self.snapshots,
        )
        .await?;
        let (warming, size) = (start.elapsed(), snapshot.len());
        let (component, _) = self
            .compile(&spec.path, snapshot, None)
            .await
            .map_err(|e| format!("compiling the snapshot: {e}"))?;
        tracing::info!(
            path = %spec.path.display(),
            instrument_ms = instrumenting.as_millis(),
            compile_instrumented_ms = (compiling - instrumenting).as_millis(),
            warm_up_ms = (warming - compiling).as_millis(),
            compile_snapshot_ms = (start.elapsed() - warming).as_millis(),
            snapshot_bytes = size,
            "snapshotted at load"
        );
        let (engine, cache, k, c) = (
            self.engine.clone(),
            Arc::clone(&self.cache),
            key.to_string(),
            component.clone(),
        );
        tokio::task::spawn_blocking(move || cache.store(&engine, &k, &c))
            .await
            .map_err(|e| e.to_string())?;
        report.compiled.push(spec.path.clone());
        Ok(component)
    }
}
