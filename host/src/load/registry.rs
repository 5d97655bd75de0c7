//! The plugins a host serves: the global chain and each tenant's, swapped
//! atomically on reload so calls in flight finish on the chain they began
//! with.
//!
//! Long on purpose (about 870 lines): the live set, its accounts and
//! every way it is swapped (reload, forget, batch) share one lock order;
//! building a set is in `registry/build.rs`.
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
//! Tenants are not trusted. Files are read by the rules of [`crate::load::files`]
//! (regular files inside their own directory, no symlinks in a tenant's,
//! size-capped, on blocking threads); compiles wait in a bounded queue and
//! are bounded in time and memory ([`crate::load::compile`]); a plugin that
//! failed is not compiled or probed again while its bytes and settings are
//! unchanged; the load probe's deadline is capped. Each directory loads
//! under its own lock and is swapped in when done, so one tenant's slow
//! load holds up no other's. The caps are [`LoadLimits`]. A reload reads
//! only the directories that changed ([`Registry::reload_dirs`]; a full
//! reload skips those whose entries did not change), so its cost is that
//! of the change, not of the number of tenants.
//!
//! Admission is stable: a tenant admitted keeps its share while it has a
//! directory, and across restarts (the order is kept in the compiled
//! cache's directory, `load/admission.rs`); a newcomer that does not fit is
//! refused ([`PluginSet::refused`]), as is a tenant whose directory has not
//! loaded whole, and their calls, like those of a tenant whose directory
//! has not loaded yet ([`PluginSet::pending`]) or has just appeared
//! ([`PluginSet::ready`]), are answered [`NotReady`], never decided without
//! its guards.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::call::chain::Chain;
use crate::error::Error;
mod build;

use crate::load::admission::AdmissionFile;
use crate::load::arrivals::Arrivals;
use crate::load::batch::Batch;
use crate::load::cache::{CacheStats, CompiledCache};
pub use crate::load::loader::{IssueKind, LoadIssue, LoadLimits, LoadedPlugin};
use crate::load::loader::{Loader, ScopeKey, ScopeReport, ScopeState};
use crate::load::plan::Listing;
use crate::load::policy::Policy;
use crate::runtime::engine::Engine;
use crate::runtime::http::transport::HttpAnswers;
use crate::runtime::log_writer::DecisionLog;
use crate::runtime::shares::Account;

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
    /// Tenants with a directory that has not loaded yet (at start-up, or
    /// a directory just added): their calls are answered
    /// [`NotReady`], never decided without their guards.
    pub pending: BTreeSet<String>,
    /// Tenants whose directory loaded but whose share did not fit (the
    /// pool or the memory budget), or whose directory has not loaded whole
    /// (a manifest refused, a plugin not loaded), with why: their calls
    /// are answered [`NotReady`]. A tenant admitted once stays admitted
    /// while it has a directory; a newcomer that does not fit is the one
    /// refused.
    pub refused: BTreeMap<String, String>,
    /// Admitted tenants in the order they were admitted (and, after a
    /// restart, those admitted before it that are still loading, holding
    /// their place): who keeps its share when the budget shrinks. Kept on
    /// disk across restarts (see `load/admission.rs`).
    admitted: Vec<String>,
    /// `<root>/tenants`, where a request for a tenant this set does not
    /// know looks for a directory just added (see [`PluginSet::ready`]).
    tenants_dir: Option<PathBuf>,
    /// The watch on `tenants/` that spares that look when nothing arrived
    /// since the last listing.
    arrivals: Option<Arc<Arrivals>>,
    /// Every tenant with a directory this set knows of (loaded, loading or
    /// refused), by its name in lower case: a request naming one of them
    /// in another case is refused.
    folded: BTreeMap<String, String>,
    /// Where every decision on this set is logged (`policy.decision_log`);
    /// `None`: off.
    pub decision_log: Option<Arc<DecisionLog>>,
    /// Whether the global directory has not loaded yet (a server that
    /// listens before its global guards are in, see
    /// [`Registry::start_with`]), or its first load was refused whole (its
    /// manifest, its directory): every call, with a tenant or not, is
    /// answered [`NotReady::Starting`], never decided without the global
    /// guards.
    pub starting: bool,
}

/// Why a call for a tenant cannot be decided now: its guards are not
/// serving (still loading, or its share did not fit). Never decided as if
/// the guards had said nothing; the faces answer it as backpressure (HTTP
/// 503 with `Retry-After`, `toolgate.BusyError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The global directory has not loaded yet: no call is decided.
    #[error(
        "not ready: the global plugins are still loading (GET /readyz says which); retry later"
    )]
    Starting,
    /// The tenant's directory has not loaded yet.
    #[error("tenant `{tenant}` is not ready: its plugins are still loading; retry later")]
    Loading {
        /// The tenant.
        tenant: String,
    },
    /// The tenant's share did not fit when its directory loaded, its
    /// directory has not loaded whole, the tenant listing refused its
    /// entry, or its name differs only by case from a tenant's.
    #[error("tenant `{tenant}` is not admitted: {why}")]
    Refused {
        /// The tenant.
        tenant: String,
        /// Why (names the `[shares]` key at fault).
        why: String,
    },
}

/// The accounts guard calls are charged to (see [`crate::runtime::shares`]).
#[derive(Debug, Default)]
pub struct Accounts {
    /// Calls with no tenant, or for a tenant without a directory.
    pub global: Option<Arc<Account>>,
    /// Each tenant with a directory: every call made for it.
    pub tenants: BTreeMap<String, Arc<Account>>,
}

impl PluginSet {
    /// The account a request for `tenant` is charged to: the tenant's own
    /// when it has a directory, else the global account.
    pub fn account(&self, tenant: Option<&str>) -> Option<&Arc<Account>> {
        tenant
            .and_then(|t| self.accounts.tenants.get(t))
            .or(self.accounts.global.as_ref())
    }

    /// Whether calls for `tenant` can be decided now: `Err` for every
    /// call while the global directory has not loaded ([`PluginSet::starting`]);
    /// for `tenant`, while its directory is loading, when it was refused (its share did not fit,
    /// it has not loaded whole) or when its name differs only by case from
    /// a tenant with a directory.
    ///
    /// A tenant this set does not know of may have a directory just added,
    /// not yet seen by the watcher: its calls are answered
    /// [`NotReady::Loading`] from the moment an entry of its name is under
    /// `tenants/` (one `lstat`, made after this set was taken, so a call
    /// that arrives after the directory's rename is never decided on the
    /// global chain alone), and run the global chain only when there is
    /// none. The `lstat` is spared when the last listing of `tenants/` did
    /// not see the name and its inotify watch shows nothing arrived since
    /// (`load/arrivals.rs`): a path walk per call, 15–25 µs after an idle
    /// gap.
    pub fn ready(&self, tenant: Option<&str>) -> Result<(), NotReady> {
        if self.starting {
            return Err(NotReady::Starting);
        }
        let Some(t) = tenant else {
            return Ok(());
        };
        if self.pending.contains(t) {
            return Err(NotReady::Loading { tenant: t.into() });
        }
        if let Some(why) = self.refused.get(t) {
            return Err(NotReady::Refused {
                tenant: t.into(),
                why: why.clone(),
            });
        }
        if self.accounts.tenants.contains_key(t) {
            return Ok(());
        }
        if let Some(other) = self.folded.get(&t.to_ascii_lowercase()) {
            return Err(NotReady::Refused {
                tenant: t.into(),
                why: format!(
                    "its name differs only by case from tenant `{other}`'s; tenant names are \
                     case-sensitive: send `{other}` to be decided by its guards"
                ),
            });
        }
        self.arriving(t)
    }

    /// `Err` when `tenants/<t>` exists though this set does not know `t`:
    /// a directory added since (or an entry the tenant listing refused).
    fn arriving(&self, t: &str) -> Result<(), NotReady> {
        let Some(dir) = &self.tenants_dir else {
            return Ok(());
        };
        // A name that is not a tenant's has no directory (and is never
        // joined to a path).
        if !crate::tenant::is_valid_name(t) {
            return Ok(());
        }
        // Not listed, and nothing arrived since the listing: no look.
        if self
            .arrivals
            .as_ref()
            .is_some_and(|a| a.certainly_absent(t))
        {
            return Ok(());
        }
        let path = dir.join(t);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(());
        }
        match self.listing_errors.iter().find(|e| e.path == path) {
            Some(e) => Err(NotReady::Refused {
                tenant: t.into(),
                why: e.message.clone(),
            }),
            None => Err(NotReady::Loading { tenant: t.into() }),
        }
    }

    /// Hands a lifecycle event to the chain a call for `tenant` runs
    /// ([`Chain::observe`]): queued for the guards that observe its hook,
    /// returning at once. A tenant whose guards are not serving is
    /// [`NotReady`], as for a decision.
    pub fn observe(
        &self,
        tenant: Option<&str>,
        event: &crate::event::LifecycleEvent,
    ) -> Result<crate::call::observe::Observed, NotReady> {
        self.ready(tenant)?;
        Ok(self.chain(tenant).observe(event))
    }

    /// The lifecycle hooks some loaded guard observes, for any tenant: the
    /// hooks worth sending (an adapter offers only these to its agent).
    pub fn observed_hooks(&self) -> crate::event::Hooks {
        self.tenants
            .values()
            .chain(self.combined.values())
            .fold(self.global.observed_hooks(), |hooks, chain| {
                hooks.union(chain.observed_hooks())
            })
    }

    /// The chain a call for `tenant` runs: global, then the tenant's own.
    /// Its guards keep state in `tenant`'s scopes, whether or not the
    /// tenant has a directory: a tenant without one runs the global chain
    /// serving it, so no two tenants share a scope. A call without a
    /// tenant (`None`, or `Some("")`, which is no tenant's name) has
    /// scopes of its own that no tenant shares.
    pub fn chain(&self, tenant: Option<&str>) -> Cow<'_, Chain> {
        match tenant.filter(|t| !t.is_empty()) {
            None => Cow::Borrowed(&self.global),
            Some(t) => match self.combined.get(t) {
                Some(chain) => Cow::Borrowed(chain),
                None => Cow::Owned(self.global.serving(t)),
            },
        }
    }
}

/// How a [`Registry`] keeps compiled code and loads its directories.
#[derive(Debug)]
pub struct RegistryOptions {
    /// The compiled-component cache. Default: [`CompiledCache::from_env`].
    pub cache: CompiledCache,
    /// Tenant ceilings, shares and quarantine when the global manifest
    /// does not set them (it overrides them key by key). Default:
    /// [`Policy::default`].
    pub policy: Policy,
    /// Caps on files, compiles and the load probe. Default:
    /// [`LoadLimits::default`].
    pub load: LoadLimits,
    /// Answers every granted request of every plugin it loads gets in
    /// place of the network's (`toolgate test`'s; see [`HttpAnswers`]).
    /// Default: `None`, the network.
    pub http_answers: Option<Arc<dyn HttpAnswers>>,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            cache: CompiledCache::from_env(),
            policy: Policy::default(),
            load: LoadLimits::default(),
            http_answers: None,
        }
    }
}

/// Serialises the loads of one directory; at most one more waits.
#[derive(Default)]
struct ScopeLock {
    running: Mutex<()>,
    queued: AtomicBool,
    /// Set while a load of the directory holds `running`.
    loading: AtomicBool,
}

/// Clears one of a [`ScopeLock`]'s flags when dropped: `queued` when the
/// waiter gets the lock or gives up (its future dropped), `loading` when
/// the load is done or dropped.
struct Flag<'a>(&'a AtomicBool);

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// What [`Registry::publish`] may change in the plugin set serving.
struct Edit<'a> {
    scopes: &'a mut BTreeMap<ScopeKey, ScopeState>,
    listing: &'a mut Vec<LoadIssue>,
    pending: &'a mut BTreeSet<String>,
}

/// One directory's load, to be swapped in.
struct Loaded {
    key: ScopeKey,
    /// What it loaded; `None`: the directory is gone.
    state: Option<ScopeState>,
    /// The tenant listing's errors, with the global directory's load.
    listing: Option<Vec<LoadIssue>>,
    /// Whether a plugin was loaded, replaced or removed.
    changed: bool,
}

impl Loaded {
    /// Applies this load to `edit`; whether the plugin set changed.
    fn apply(self, edit: &mut Edit<'_>) -> bool {
        if let Some(l) = self.listing {
            *edit.listing = l;
        }
        if let ScopeKey::Tenant(t) = &self.key {
            edit.pending.remove(t);
        }
        match self.state {
            Some(s) => {
                edit.scopes.insert(self.key, s);
            }
            None => {
                edit.scopes.remove(&self.key);
            }
        }
        self.changed
    }
}

/// The directories being loaded at one moment (see [`Registry::loading`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Loading {
    /// Whether the global directory (the root) is being loaded.
    pub global: bool,
    /// The tenants whose directory is being loaded, in name order.
    pub tenants: Vec<String>,
}

impl Loading {
    /// Whether no directory is being loaded.
    pub fn is_empty(&self) -> bool {
        !self.global && self.tenants.is_empty()
    }
}

/// The live plugin set of one directory.
pub struct Registry {
    /// Loads each directory; the registry swaps in what it loaded.
    loader: Loader,
    current: ArcSwap<PluginSet>,
    /// Serialises swapping in a new plugin set (never held across I/O).
    publishing: std::sync::Mutex<()>,
    /// Directories' loads waiting to be swapped in together.
    batch: Batch<Loaded>,
    /// One lock per directory: a directory's load never waits for
    /// another's (a slow compile in one tenant stalls no other).
    scopes: std::sync::Mutex<HashMap<ScopeKey, Arc<ScopeLock>>>,
    /// The policy of the options; the global manifest may override it.
    policy: Policy,
    /// Where the admission order is kept across restarts.
    admission: AdmissionFile,
    /// The watch on `tenants/` each listing resets.
    arrivals: Arc<Arrivals>,
}

/// What a reload did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReloadReport {
    /// The plugin set generation now serving.
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
    /// The directories this reload read; one whose entries did not change
    /// since its last load is skipped unread.
    pub read: Vec<PathBuf>,
}

impl ReloadReport {
    fn absorb(&mut self, other: ScopeReport) {
        self.loaded.extend(other.loaded);
        self.removed.extend(other.removed);
        self.compiled.extend(other.compiled);
        self.cache_hits.extend(other.cache_hits);
        self.read.extend(other.read);
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
        let registry = Registry::open_global(engine, root, options).await?;
        registry.load_pending().await?;
        Ok(registry)
    }

    /// The registry with its global directory loaded, every tenant pending.
    async fn open_global(
        engine: Engine,
        root: impl Into<PathBuf>,
        options: RegistryOptions,
    ) -> Result<Registry, Error> {
        let registry = Registry::starting(engine, root, options).await?;
        registry.load_global().await?;
        Ok(registry)
    }

    /// The registry with nothing loaded: every call answered
    /// [`NotReady::Starting`] until [`Registry::load_global`] is done,
    /// every tenant pending.
    async fn starting(
        engine: Engine,
        root: impl Into<PathBuf>,
        options: RegistryOptions,
    ) -> Result<Registry, Error> {
        // Absolute once, here: every face gets it, and the watcher's
        // events (absolute paths) are matched to the directory they are in.
        let root = crate::load::files::absolute(&root.into());
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
        let admission = AdmissionFile::new(&options.cache, &root);
        // One small read.
        let remembered = admission.read();
        let registry = Registry {
            loader: Loader::new(
                engine,
                root.clone(),
                options.cache,
                options.load,
                options.http_answers,
            ),
            current: ArcSwap::from_pointee(PluginSet::default()),
            publishing: Default::default(),
            batch: Batch::default(),
            scopes: Default::default(),
            policy: options.policy,
            admission,
            arrivals: Arrivals::new(),
        };
        // Generation 0: the global directory's load publishes the first.
        // The tenants admitted before a restart hold their places while
        // they load.
        registry.current.store(Arc::new(PluginSet {
            admitted: remembered,
            tenants_dir: Some(root.join("tenants")),
            arrivals: Some(Arc::clone(&registry.arrivals)),
            ..PluginSet::default()
        }));
        let (listed, _) = registry.list_tenants().await?;
        registry.current.store(Arc::new(PluginSet {
            pending: listed,
            admitted: registry.plugin_set().admitted.clone(),
            tenants_dir: Some(root.join("tenants")),
            arrivals: Some(Arc::clone(&registry.arrivals)),
            starting: true,
            ..PluginSet::default()
        }));
        Ok(registry)
    }

    /// Loads the global directory (read even if it looks unchanged) and
    /// swaps it in: the first load of a registry made by
    /// [`Registry::start_with`] ends [`PluginSet::starting`] — unless it
    /// was refused whole (its manifest, its directory; see
    /// [`PluginSet::errors`]), when every call stays not ready. Its
    /// guards' progress is [`Registry::loading_plugins`].
    pub async fn load_global(&self) -> Result<ReloadReport, Error> {
        let (_, listing_errors) = self.list_tenants().await?;
        let mut report = ReloadReport::default();
        report.absorb(
            self.reload_scope(&ScopeKey::Global, Some(listing_errors), true)
                .await,
        );
        let set = self.plugin_set();
        report.generation = set.generation;
        report.errors = set.errors.clone();
        Ok(report)
    }

    /// The global directory's guards being loaded now (compiled or
    /// snapshotted), each with how long it has taken so far.
    pub fn loading_plugins(&self) -> Vec<crate::load::progress::PluginLoading> {
        self.loader.progress().now()
    }

    /// A registry of `root` with `options` that has loaded nothing yet:
    /// every call is answered [`NotReady::Starting`] until
    /// [`Registry::load_global`] loads the global directory, and every
    /// tenant with a directory is [pending](PluginSet::pending) (its calls
    /// answered [`NotReady`]) until [`Registry::load_pending`] loads it.
    /// A server starts with this to listen, and answer, from its first
    /// second: only the policy and the directory are checked, and the
    /// tenants listed.
    pub async fn start_with(
        engine: Engine,
        root: impl Into<PathBuf>,
        options: RegistryOptions,
    ) -> Result<Registry, Error> {
        Registry::starting(engine, root, options).await
    }

    /// Loads every tenant not loaded yet (and removes those gone), each
    /// swapped in, and so serving, as soon as it is loaded (with whatever
    /// other tenants finished loading meanwhile: see `load/batch.rs`).
    pub async fn load_pending(&self) -> Result<ReloadReport, Error> {
        self.reload_dirs(&[]).await
    }

    /// The directory this registry serves.
    pub fn root(&self) -> &Path {
        self.loader.root()
    }

    /// The engine plugins are loaded into.
    pub fn engine(&self) -> &Engine {
        self.loader.engine()
    }

    /// The compiled-component cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.loader.cache().stats()
    }

    /// The compiled-component cache.
    pub fn cache(&self) -> &CompiledCache {
        self.loader.cache()
    }

    /// Fetches of remote sources (`url`, `oci`) that failed since the
    /// registry was made — not fetched, or refused for their digest — by
    /// plugin (`toolgate_plugin_fetch_failures_total`).
    pub fn fetch_failures(&self) -> BTreeMap<String, u64> {
        self.loader.fetch_failures()
    }

    /// Warm-ups run by this registry to snapshot components at load (a
    /// snapshot found in the compiled cache runs none).
    pub fn snapshot_warm_ups(&self) -> u64 {
        self.loader.snapshots().warm_ups()
    }

    /// The compile queue's counts: compiles running and waiting, and each
    /// directory's compiles, CPU time and budget waits.
    pub fn compile_stats(&self) -> crate::load::compile_queue::CompileStats {
        self.loader.compile_stats()
    }

    /// The caps on files, compiles and the load probe.
    pub fn load_limits(&self) -> &LoadLimits {
        self.loader.limits()
    }

    /// Watches the directory and reloads each directory that changed once
    /// it has been quiet for `settle` (see `crate::load::watch`): one tenant's
    /// churn delays no other's reload. Must be called inside a Tokio
    /// runtime; dropping the handle stops it. Where the kernel has no
    /// inotify instance left for the watcher, the registry's own watch for
    /// arriving tenants (`load/arrivals.rs`) gives up its instance to it.
    pub fn watch(
        self: Arc<Self>,
        settle: Duration,
    ) -> Result<crate::load::watch::WatchHandle, Error> {
        let root = self.root().to_path_buf();
        let reload = self
            .clone()
            .reload_fn("after a change in the plugin directory");
        self.arrivals
            .yielding(|| crate::load::watch::spawn(&root, settle, Arc::clone(&reload)))
    }

    /// Reloads on every `SIGHUP` until the task is aborted. Must be called
    /// inside a Tokio runtime.
    #[cfg(unix)]
    pub fn on_sighup(self: Arc<Self>) -> Result<tokio::task::JoinHandle<()>, Error> {
        crate::load::watch::on_sighup(self.reload_fn("on SIGHUP"))
    }

    /// A reload that logs its outcome; `why` says what asked for it.
    fn reload_fn(self: Arc<Self>, why: &'static str) -> crate::load::watch::Reload {
        Arc::new(move |dirs| {
            let registry = Arc::clone(&self);
            Box::pin(async move {
                let _ = registry.reload_dirs_logged(&dirs, why).await;
            })
        })
    }

    /// [`Registry::reload`], its outcome logged (`info` with the report's
    /// counts, `error` when it failed); `why` says what asked for it, e.g.
    /// `on SIGHUP`.
    pub async fn reload_logged(&self, why: &str) -> Result<ReloadReport, Error> {
        self.reload_dirs_logged(&[crate::load::watch::Dir::All], why)
            .await
    }

    /// [`Registry::reload_dirs`], its outcome logged as by
    /// [`Registry::reload_logged`].
    pub async fn reload_dirs_logged(
        &self,
        dirs: &[crate::load::watch::Dir],
        why: &str,
    ) -> Result<ReloadReport, Error> {
        let outcome = self.reload_dirs(dirs).await;
        match &outcome {
            Ok(report) => tracing::info!(
                generation = report.generation,
                loaded = report.loaded.len(),
                removed = report.removed.len(),
                errors = report.errors.len(),
                "reloaded {why}"
            ),
            Err(e) => tracing::error!("reload {why} failed: {e}"),
        }
        outcome
    }

    /// The plugin set serving now, as taken at this moment. Hold it for the
    /// length of one call: a reload swaps in a new set and never changes
    /// one already taken.
    pub fn plugin_set(&self) -> Arc<PluginSet> {
        self.current.load_full()
    }

    /// Re-reads the directory and swaps in the new chains. A component whose
    /// bytes did not change is reused as is (never recompiled); one that
    /// fails to load keeps its previous version serving and is reported,
    /// and is not tried again while its bytes and settings stay the same.
    /// A directory whose entries (names, inodes, sizes, times) and policy
    /// did not change since its last load is skipped unread.
    ///
    /// The global directory and each tenant's load concurrently, each
    /// swapped in as soon as it is done: a slow compile in one tenant holds
    /// up no other. A directory another reload is loading is waited for
    /// (and then re-read); when a reload is already waiting for it, this one
    /// leaves it to that one.
    pub async fn reload(&self) -> Result<ReloadReport, Error> {
        self.reload_dirs(&[crate::load::watch::Dir::All]).await
    }

    /// Reloads the directories in `dirs` (read even if they look
    /// unchanged), plus tenants that appeared or disappeared since the
    /// last load; [`Dir::All`](crate::load::watch::Dir::All) is [`Registry::reload`].
    /// The cost is that of the directories loaded, not of the tenant count.
    /// A global directory whose policy changed reloads every tenant (their
    /// manifests are read under its ceilings).
    pub async fn reload_dirs(
        &self,
        dirs: &[crate::load::watch::Dir],
    ) -> Result<ReloadReport, Error> {
        use crate::load::watch::Dir;
        let all = dirs.contains(&Dir::All);
        let (listed, listing_errors) = self.list_tenants().await?;
        self.mark_pending(&listed);
        let named: BTreeSet<&String> = dirs
            .iter()
            .filter_map(|d| match d {
                Dir::Tenant(t) => Some(t),
                _ => None,
            })
            .collect();
        let tenants = self.tenants_to_load(all, &named, &listed);
        // The global directory first: its manifest sets the policy (the
        // ceilings) every tenant's manifest is read under. The tenant
        // listing's errors are published with it.
        let mut report = ReloadReport::default();
        let before = self.policy_in_force();
        if all || dirs.contains(&Dir::Global) {
            let force = !all;
            report.absorb(
                self.reload_scope(&ScopeKey::Global, Some(listing_errors), force)
                    .await,
            );
        } else {
            self.publish_listing(listing_errors);
        }
        let tenants: Vec<ScopeKey> = if self.policy_in_force() != before {
            listed
                .iter()
                .chain(&tenants)
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(ScopeKey::Tenant)
                .collect()
        } else {
            tenants.into_iter().map(ScopeKey::Tenant).collect()
        };
        let force = |k: &ScopeKey| match k {
            ScopeKey::Tenant(t) => !all && named.contains(t),
            ScopeKey::Global => false,
        };
        for r in join_all(tenants.iter().map(|k| self.reload_scope(k, None, force(k)))).await {
            report.absorb(r);
        }
        let set = self.plugin_set();
        report.generation = set.generation;
        report.errors = set.errors.clone();
        self.log_reload(&report, &set);
        Ok(report)
    }

    /// The tenant directories under `tenants/` now, and the entries
    /// refused: those the loader refuses (a bad name, a symlink), and
    /// directories whose names differ only by case from another's — all
    /// but the one this registry knows already (loaded, or admitted before
    /// a restart), all of them when it knows none: a name never reaches
    /// another tenant's guards or state by its case, on any file system.
    async fn list_tenants(&self) -> Result<(BTreeSet<String>, Vec<LoadIssue>), Error> {
        // The watch's queue is emptied first: whatever arrives from here
        // on is in the listing or queued.
        let drained = self.arrivals.before_listing(self.root());
        let Listing {
            names: listed,
            mut errors,
            entries,
        } = self.loader.tenants().await?;
        self.arrivals.listed(drained, entries);
        let set = self.plugin_set();
        let known = |t: &String| {
            set.scopes.contains_key(&ScopeKey::Tenant(t.clone())) || set.admitted.contains(t)
        };
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in listed {
            groups.entry(t.to_ascii_lowercase()).or_default().push(t);
        }
        let mut kept = BTreeSet::new();
        for (_, mut names) in groups {
            if names.len() == 1 {
                kept.extend(names);
                continue;
            }
            let keeper = names.iter().position(known).map(|i| names.remove(i));
            for t in names {
                let path = self.root().join("tenants").join(&t);
                let other = keeper.as_deref().map_or_else(
                    || "another's".to_string(),
                    |k| format!("tenant `{k}`'s, which is served"),
                );
                let message = format!(
                    "{}: not loaded: the name differs only by case from {other}; tenant names \
                     are case-sensitive, and on a case-insensitive file system the two are one \
                     directory: rename one",
                    path.display()
                );
                errors.push(LoadIssue::new(IssueKind::Directory, path, message));
            }
            kept.extend(keeper);
        }
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((kept, errors))
    }

    /// Publishes the tenants listed now and not loaded yet as pending
    /// (until loaded).
    fn mark_pending(&self, listed: &BTreeSet<String>) {
        let set = self.plugin_set();
        let unloaded = |t: &String| !set.scopes.contains_key(&ScopeKey::Tenant(t.clone()));
        let pending: BTreeSet<String> = listed.iter().filter(|t| unloaded(t)).cloned().collect();
        if pending != set.pending {
            self.publish(|edit| {
                *edit.pending = pending;
                false
            });
        }
    }

    /// The tenants a reload loads: those `named`, those that appeared or
    /// are gone (a gone one is removed by its own load, under its lock);
    /// every tenant on a full reload (`all`).
    fn tenants_to_load(
        &self,
        all: bool,
        named: &BTreeSet<&String>,
        listed: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let set = self.plugin_set();
        let loaded: BTreeSet<&String> = set
            .scopes
            .keys()
            .filter_map(|k| match k {
                ScopeKey::Tenant(t) => Some(t),
                ScopeKey::Global => None,
            })
            .collect();
        listed
            .iter()
            .filter(|t| all || named.contains(t) || !loaded.contains(t))
            .chain(
                loaded
                    .iter()
                    .copied()
                    .filter(|t| all || named.contains(t) || !listed.contains(*t)),
            )
            .cloned()
            .collect()
    }

    /// Logs what a reload left: each plugin not loaded, a set with no
    /// guard at all, and what changed.
    fn log_reload(&self, report: &ReloadReport, set: &PluginSet) {
        for e in &report.errors {
            match e.kind {
                IssueKind::Snapshot => tracing::warn!(path = ?e.path, "{}", e.message),
                _ => tracing::warn!(path = ?e.path, "plugin not loaded: {}", e.message),
            }
        }
        if set.describe().plugins().next().is_none() {
            tracing::warn!(
                root = %self.root().display(),
                "no guard loaded: the plugin directory has no component that loads, \
                 so every call proceeds as if no guard had answered"
            );
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
    }

    /// Forgets every remembered load failure (and the compile failures the
    /// compiled cache keeps on disk): the next reload tries each failed
    /// plugin again (say, after a compile ran out of time on a busy
    /// machine). Without this, a failed plugin is tried again only when its
    /// bytes or settings change.
    pub fn forget_failures(&self) {
        self.publish(|edit| {
            for s in edit.scopes.values_mut() {
                s.failed.clear();
                s.stamp = None;
            }
            false
        });
        self.loader.snapshots().forget_failures();
        self.loader.cache().forget_failures();
    }

    /// The policy the global manifest sets, else the options'.
    fn policy_in_force(&self) -> Policy {
        self.plugin_set()
            .scopes
            .get(&ScopeKey::Global)
            .and_then(|s| s.policy.clone())
            .unwrap_or_else(|| self.policy.clone())
    }

    /// The directories some reload (an HTTP request's, the watcher's, a
    /// `SIGHUP`'s, a caller's) is loading now: taken from the per-directory
    /// locks, without waiting for any of them.
    pub fn loading(&self) -> Loading {
        let scopes = self
            .scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut loading = Loading::default();
        for (key, lock) in scopes.iter() {
            if !lock.loading.load(Ordering::SeqCst) {
                continue;
            }
            match key {
                ScopeKey::Global => loading.global = true,
                ScopeKey::Tenant(name) => loading.tenants.push(name.clone()),
            }
        }
        loading.tenants.sort();
        loading
    }

    fn scope_lock(&self, key: &ScopeKey) -> Arc<ScopeLock> {
        let mut scopes = self
            .scopes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(scopes.entry(key.clone()).or_default())
    }

    /// Loads one directory under its lock and swaps the result in; unless
    /// `force`, a directory that did not change since its last load is
    /// left as it is.
    async fn reload_scope(
        &self,
        key: &ScopeKey,
        listing: Option<Vec<LoadIssue>>,
        force: bool,
    ) -> ScopeReport {
        let lock = self.scope_lock(key);
        if lock.queued.swap(true, Ordering::SeqCst) {
            // A reload is already waiting to load this directory; it reads
            // the files after the one running now, so it sees our change.
            return ScopeReport::default();
        }
        let waiting = Flag(&lock.queued);
        let _running = lock.running.lock().await;
        drop(waiting);
        lock.loading.store(true, Ordering::SeqCst);
        let _loading = Flag(&lock.loading);
        let previous = self.plugin_set().scopes.get(key).cloned();
        // The global manifest overrides the options' policy key by key (a
        // key it no longer sets is back to the options'); a tenant loads
        // under the policy in force: the global manifest's (the global
        // directory has loaded first), else the options'.
        let policy = match key {
            ScopeKey::Global => self.policy.clone(),
            ScopeKey::Tenant(_) => self.policy_in_force(),
        };
        let Some((state, report)) = self
            .loader
            .load(key, previous.as_ref(), &policy, force)
            .await
        else {
            // Unchanged: nothing to swap in.
            if let Some(l) = listing {
                self.publish_listing(l);
            }
            return ScopeReport::default();
        };
        let loaded = Loaded {
            key: key.clone(),
            state,
            listing,
            changed: !report.loaded.is_empty() || !report.removed.is_empty(),
        };
        // Swapped in with the other directories' loads finishing now, in
        // one build (see batch.rs), still under this directory's lock.
        self.batch
            .publish(loaded, |batch| {
                self.publish(|mut edit| {
                    batch
                        .into_iter()
                        .fold(false, |changed, loaded| loaded.apply(&mut edit) | changed)
                });
            })
            .await;
        report
    }

    /// Swaps in the tenant listing's errors, when they changed.
    fn publish_listing(&self, listing: Vec<LoadIssue>) {
        let same = |a: &[LoadIssue], b: &[LoadIssue]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.path == y.path && x.message == y.message)
        };
        if !same(&self.plugin_set().listing_errors, &listing) {
            self.publish(|edit| {
                *edit.listing = listing;
                false
            });
        }
    }

    /// Swaps in a plugin set with `edit` applied to the current one's
    /// directories, listing errors and pending tenants; `edit` says
    /// whether the plugin set changed (a new generation).
    fn publish(&self, edit: impl FnOnce(Edit<'_>) -> bool) {
        let _one = self
            .publishing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.plugin_set();
        let mut scopes = old.scopes.clone();
        let mut listing = old.listing_errors.clone();
        let mut pending = old.pending.clone();
        let changed = edit(Edit {
            scopes: &mut scopes,
            listing: &mut listing,
            pending: &mut pending,
        });
        let generation = old.generation + u64::from(changed || old.generation == 0);
        let config = self.engine().config();
        let pool = config.pooling.then_some(config.max_instances);
        let set = PluginSet::build(
            generation,
            scopes,
            listing,
            pending,
            &self.policy,
            &old,
            pool,
        );
        let tenants = u32::try_from(set.accounts.tenants.len()).unwrap_or(u32::MAX);
        // Shadow guards' calls may hold the memory no share reserves ...
        let shares = &set.policy.shares;
        self.engine().shadow_backlog().set_spare_mib(
            shares
                .memory_budget_mib
                .saturating_sub(shares.reserved_memory_mib(tenants)),
        );
        // ... and, with prepared instances, the pool slots no share reserves.
        if let Some(pool) = pool {
            let reserved = set.policy.shares.reserved(tenants);
            let room = u64::from(pool).saturating_sub(reserved);
            // Split evenly between the global directory and each tenant's.
            let parts = u32::try_from(set.accounts.tenants.len() + 1).unwrap_or(u32::MAX);
            if self
                .engine()
                .prepared_slots()
                .set_room(u32::try_from(room).unwrap_or(u32::MAX), parts)
            {
                let global = set.global_plugins.iter().map(|p| &p.plugin);
                for p in global.chain(set.tenants.values().flat_map(|c| c.plugins())) {
                    p.discard_prepared();
                }
            }
        }
        if set.admitted != old.admitted {
            self.admission.keep(&set.admitted);
        }
        self.loader.forget_unused(set.scopes.values());
        self.current.store(Arc::new(set));
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
                    Some(a) if a.matches(s.tenant_lends(name), s.wait) => Arc::clone(a),
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
