//! Loading one plugin directory: list the tenants, read the files safely,
//! parse the manifest, plan what to load, find each component compiled (or
//! compile it), link and probe it, and remember what failed. A load takes
//! a directory and its previous state and returns its new state; it never
//! sees the plugin set serving, which [`crate::load::registry`] swaps.
//!
//! Long on purpose (about 1,000 lines): what one scope's load is (its key,
//! state, stamp, report and issues) beside the loader that makes it, so
//! the rule of what keeps serving after which failure is in one place;
//! planning is in `plan.rs`.
//!
//! What is reused, what is compiled and the caps on untrusted files are
//! told in [`crate::load::registry`].

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use wasmtime::component::Component;

use crate::call::plugin::{Plugin, PluginSpec};
use crate::call::snapshot::{AutoSnapshots, SnapshotStatus};
use crate::error::Error;
use crate::load::cache::{CacheOutcome, CompileFailure, CompiledCache, Lookup};
use crate::load::compile::{CompileBounds, Compiler};
use crate::load::compile_queue::{CompileQueue, CompileStats};
use crate::load::files::PluginDir;
use crate::load::manifest::{self};
use crate::load::plan::{Location, Plan, list_tenants, plan_scope};
use crate::load::policy::Policy;
use crate::load::progress::{LoadStep, Progress, Tracked};
use crate::load::remote::signature::Trust;
use crate::load::remote::{FetchLimits, Fetcher};
use crate::runtime::engine::Engine;
use crate::runtime::http::transport::HttpAnswers;
use crate::runtime::prepared::PreparedShare;
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
    /// The id of the trusted key that signed it, if one did: whether it
    /// may keep serving when the keys change.
    signer: Option<String>,
}

impl LoadedPlugin {
    /// Whether a call for `tenant` runs this (global) plugin.
    pub(crate) fn applies_to(&self, tenant: Option<&str>) -> bool {
        match (&self.tenants, tenant) {
            (None, _) => true,
            (Some(list), Some(t)) => list.iter().any(|x| x == t),
            (Some(_), None) => false,
        }
    }
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
    /// A guard that refuses its manifest `config` (its `validate-config`).
    Config,
    /// A plugin or tenant that does not fit its share or the pool.
    Share,
    /// Limits outside what the engine allows.
    Limits,
    /// The host itself failed (the engine, a task, a thread).
    Host,
    /// A remote source (`url`, `oci`) not fetched, or whose bytes are not
    /// the ones its digest pins.
    Fetch,
    /// A component without the signature the operator requires, or signed
    /// by no trusted key.
    Signature,
    /// Not a failure to load: a plugin whose snapshot at load failed (see
    /// `crate::call::snapshot`) serves as its bytes are.
    Snapshot,
}

impl IssueKind {
    /// The kind of a load that failed with `e`.
    pub fn of(e: &Error) -> IssueKind {
        match e {
            Error::Manifest(_) => IssueKind::Manifest,
            Error::Read { .. }
            | Error::Refused { .. }
            | Error::HardLink { .. }
            | Error::TooLarge { .. }
            | Error::Name { .. } => IssueKind::File,
            Error::CoreModule { .. }
            | Error::NotWasm { .. }
            | Error::Compile { .. }
            | Error::CompileBound { .. }
            | Error::Compiler { .. } => IssueKind::Compile,
            Error::Link { .. } | Error::NoSeams { .. } | Error::Contract { .. } => {
                IssueKind::Contract
            }
            Error::Start { .. } => IssueKind::Probe,
            Error::ConfigRefused { .. } => IssueKind::Config,
            Error::Limits { .. } => IssueKind::Limits,
            Error::Fetch { .. } | Error::Digest { .. } => IssueKind::Fetch,
            Error::Signature { .. } => IssueKind::Signature,
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

/// What loading a directory may cost: the caps on files, compiles and the
/// load probe. Operator settings; every default is safe for untrusted
/// tenants.
#[derive(Clone, Debug)]
pub struct LoadLimits {
    /// Largest manifest read, in bytes; larger is refused unread.
    /// Default: 1 MiB (`manifest::MAX_MANIFEST_BYTES`).
    pub max_manifest_bytes: u64,
    /// Largest component read (and so compiled), in bytes; larger is
    /// refused unread. Default: 64 MiB.
    pub max_component_bytes: u64,
    /// How components are compiled. Default: [`Compiler::InProcess`];
    /// `toolgate` and the Python package's `Host` use
    /// [`Compiler::Subprocess`], which also bounds memory.
    pub compiler: Compiler,
    /// The time and memory bound of one compile. Default: 120 s, 2 GiB.
    pub compile: CompileBounds,
    /// Compiles that may run at once, all directories together (a
    /// directory never runs more than one); waiting ones are served
    /// the global directory's first, then tenant by tenant in turn (see
    /// `crate::load::compile_queue`). Default: 2.
    pub compile_jobs: usize,
    /// CPU time a tenant's compiles may use per minute: a tenant that used
    /// more in the last minute waits to compile until it is back under.
    /// The global directory's compiles are not counted. Zero: no budget.
    /// Default: 10 s.
    pub tenant_compile_cpu: Duration,
    /// The most the load probe (one instantiation of a new plugin) may
    /// take, whatever the plugin's own `timeout`. Default: 1 s.
    pub probe_timeout: Duration,
    /// How a plugin's remote source (`url`, `oci`) is fetched: each try's
    /// time, the tries and their backoff; the size cap is
    /// `max_component_bytes`. Default: [`FetchLimits::default`].
    pub fetch: FetchLimits,
}

impl Default for LoadLimits {
    fn default() -> Self {
        LoadLimits {
            max_manifest_bytes: manifest::MAX_MANIFEST_BYTES,
            max_component_bytes: 64 << 20,
            compiler: Compiler::default(),
            compile: CompileBounds::default(),
            compile_jobs: 2,
            tenant_compile_cpu: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(1),
            fetch: FetchLimits::default(),
        }
    }
}

/// One directory of plugins: the global one or a tenant's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ScopeKey {
    /// The root.
    Global,
    /// `tenants/<name>`.
    Tenant(String),
}

/// What one directory has loaded.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScopeState {
    /// What loaded (or, where a new version failed, the previous one).
    pub(crate) plugins: Vec<LoadedPlugin>,
    /// Why what did not load did not.
    pub(crate) errors: Vec<LoadIssue>,
    /// Plugins that failed to load, by fingerprint (bytes and settings):
    /// not compiled or probed again until one of them changes.
    pub(crate) failed: Vec<(String, LoadIssue)>,
    /// The global directory's manifest's policy (ceilings, shares,
    /// quarantine), when it sets one.
    pub(crate) policy: Option<Policy>,
    /// What the directory looked like when this was loaded from it, when
    /// that can tell it unchanged (see [`Stamp`]).
    pub(crate) stamp: Option<Stamp>,
    /// Whether the directory has loaded whole at least once: its manifest
    /// accepted and every plugin it names loaded. Until then a tenant's
    /// calls are not decided (its guards are not all there); once it has,
    /// a later file that fails keeps the previous version serving.
    pub(crate) whole: bool,
}

/// What a directory looked like when it was loaded: every entry under it
/// (the global directory without `tenants/`), by path, with its type,
/// inode, size and modification and change times, and the policy it was
/// loaded under. Two equal stamps mean the same files, so a load of it
/// would load the same: [`Loader::load`] skips it.
///
/// Like git's index, a stamp taken while a file may still be changing
/// within the file system's timestamp granularity is not kept: an entry
/// changed in the last [`Stamp::SETTLED`] is read again next time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    entries: Vec<(PathBuf, [i64; 7])>,
    policy: Policy,
}

impl Stamp {
    /// How long ago an entry must have changed for a stamp to be kept.
    const SETTLED: Duration = Duration::from_secs(2);
    /// Most entries a stamp holds; a larger directory is always read.
    const MAX_ENTRIES: usize = 4096;
    /// Deepest a stamp looks.
    const MAX_DEPTH: usize = 8;

    /// The stamp of `dir` (without `skip`) under `policy`, following
    /// symlinks when `follow`; `None` when it cannot tell (an entry
    /// changed too recently, too many entries, an error). Blocking.
    fn take(dir: &Path, skip: Option<&Path>, follow: bool, policy: &Policy) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        let recent = i64::try_from(now.saturating_sub(Stamp::SETTLED).as_secs()).ok()?;
        let mut entries = Vec::new();
        let mut todo = vec![(dir.to_path_buf(), 0usize)];
        while let Some((at, depth)) = todo.pop() {
            for entry in std::fs::read_dir(&at).ok()? {
                let path = entry.ok()?.path();
                if skip == Some(path.as_path()) {
                    continue;
                }
                let lstat = std::fs::symlink_metadata(&path).ok()?;
                let meta = if follow && lstat.file_type().is_symlink() {
                    std::fs::metadata(&path).unwrap_or_else(|_| lstat.clone())
                } else {
                    lstat.clone()
                };
                if meta.mtime() >= recent || meta.ctime() >= recent || lstat.ctime() >= recent {
                    return None;
                }
                let size = i64::try_from(meta.size()).unwrap_or(i64::MAX);
                let ino = |m: &std::fs::Metadata| i64::try_from(m.ino()).unwrap_or(i64::MAX);
                entries.push((
                    path.strip_prefix(dir).unwrap_or(&path).to_path_buf(),
                    [
                        i64::from(meta.mode()),
                        ino(&lstat),
                        ino(&meta),
                        size,
                        meta.mtime().saturating_mul(1_000_000_000) + meta.mtime_nsec(),
                        meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec(),
                        lstat.ctime().saturating_mul(1_000_000_000) + lstat.ctime_nsec(),
                    ],
                ));
                if entries.len() > Stamp::MAX_ENTRIES {
                    return None;
                }
                if meta.is_dir() {
                    if depth >= Stamp::MAX_DEPTH {
                        return None;
                    }
                    todo.push((path, depth + 1));
                }
            }
        }
        entries.sort();
        Some(Stamp {
            entries,
            policy: policy.clone(),
        })
    }
}

/// What loading one directory did, by path.
#[derive(Debug, Default)]
pub(crate) struct ScopeReport {
    /// Plugins loaded or replaced.
    pub(crate) loaded: Vec<PathBuf>,
    /// Plugins removed.
    pub(crate) removed: Vec<PathBuf>,
    /// Components compiled (cache misses).
    pub(crate) compiled: Vec<PathBuf>,
    /// Components found in the on-disk cache.
    pub(crate) cache_hits: Vec<PathBuf>,
    /// The directory, when it was read (not skipped as unchanged).
    pub(crate) read: Option<PathBuf>,
}

/// Loads the directories under one root: what every load shares (the
/// engine, the compiled cache, the compile queue, the caps) and the
/// components compiled so far.
pub(crate) struct Loader {
    engine: Engine,
    root: PathBuf,
    cache: Arc<CompiledCache>,
    limits: LoadLimits,
    /// The compile queue: `compile_jobs` at a time, tenants in turn.
    compile_queue: Arc<CompileQueue>,
    /// Components compiled by this loader, by digest: a plugin whose
    /// settings change is re-linked, not recompiled.
    compiled: Arc<std::sync::Mutex<HashMap<String, Component>>>,
    /// Snapshots made at load: failed warm-ups, and a count.
    snapshots: AutoSnapshots,
    /// Each directory's share of the prepared instances.
    prepared: std::sync::Mutex<HashMap<ScopeKey, Arc<PreparedShare>>>,
    /// Fetches remote sources, and keeps what it fetched.
    fetcher: Fetcher,
    /// What every plugin's requests get instead of the network, if set.
    http_answers: Option<Arc<dyn HttpAnswers>>,
    /// The global directory's guards being loaded now.
    progress: Progress,
}

/// What every entry of one scope's load needs.
struct ScopeLoad<'a> {
    key: &'a ScopeKey,
    at: &'a Location,
    files: &'a Arc<PluginDir>,
    fits_mib: u64,
    previous: &'a ScopeState,
    share: Arc<PreparedShare>,
    /// The keys its components must be signed with.
    trust: &'a Trust,
}

impl ScopeState {
    /// The previous plugins, kept serving because of `why`.
    fn kept_with(&self, why: LoadIssue) -> ScopeState {
        ScopeState {
            plugins: self.plugins.clone(),
            errors: vec![why],
            failed: self.failed.clone(),
            policy: self.policy.clone(),
            stamp: None,
            whole: self.whole,
        }
    }

    /// The paths of this state's plugins that `next` no longer holds.
    fn removed_by<'a>(&'a self, next: &'a ScopeState) -> impl Iterator<Item = PathBuf> + 'a {
        self.plugins
            .iter()
            .filter(|p| {
                !next.plugins.iter().any(|q| {
                    Arc::ptr_eq(&q.plugin, &p.plugin) || q.plugin.path() == p.plugin.path()
                })
            })
            .map(|p| p.plugin.path().to_path_buf())
    }
}

fn join_error(source: tokio::task::JoinError) -> Error {
    Error::Task {
        what: "load",
        source,
    }
}

impl Loader {
    /// A loader of `root` into `engine`, with `cache` and `limits`; its
    /// plugins' requests get `http_answers`, when set.
    pub(crate) fn new(
        engine: Engine,
        root: PathBuf,
        cache: CompiledCache,
        limits: LoadLimits,
        http_answers: Option<Arc<dyn HttpAnswers>>,
    ) -> Loader {
        Loader {
            engine,
            root,
            cache: Arc::new(cache),
            compile_queue: CompileQueue::new(limits.compile_jobs, limits.tenant_compile_cpu),
            fetcher: Fetcher::new(limits.fetch.clone(), limits.max_component_bytes),
            limits,
            compiled: Default::default(),
            snapshots: AutoSnapshots::default(),
            prepared: std::sync::Mutex::default(),
            http_answers,
            progress: Progress::default(),
        }
    }

    /// The global directory's guards being loaded now.
    pub(crate) fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Failed fetches of remote sources so far, by plugin.
    pub(crate) fn fetch_failures(&self) -> std::collections::BTreeMap<String, u64> {
        self.fetcher.failures()
    }

    /// Snapshots made at load: failed warm-ups, and a count.
    pub(crate) fn snapshots(&self) -> &AutoSnapshots {
        &self.snapshots
    }

    /// The engine plugins are loaded into.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The root directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The compiled-component cache.
    pub(crate) fn cache(&self) -> &CompiledCache {
        &self.cache
    }

    /// The caps on files, compiles and the load probe.
    pub(crate) fn limits(&self) -> &LoadLimits {
        &self.limits
    }

    /// The compile queue's counts, by directory.
    pub(crate) fn compile_stats(&self) -> CompileStats {
        self.compile_queue.stats()
    }

    /// Lists `root/tenants`: its tenant names, the entries refused (a bad
    /// name, a symlink) and every entry's name.
    pub(crate) async fn tenants(&self) -> Result<crate::load::plan::Listing, Error> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || list_tenants(&root))
            .await
            .map_err(join_error)?
    }

    /// Loads one directory (the root, or a tenant's) under `policy` (the
    /// one in force), reusing what `previous` loaded. `Some(None, _)`: the
    /// tenant's directory is gone (or is no longer a directory), and its
    /// plugins are reported removed. A manifest that fails keeps
    /// `previous` serving whole. `None`: unless `force`, a directory
    /// loaded without errors whose [`Stamp`] did not change is not read
    /// again.
    pub(crate) async fn load(
        &self,
        key: &ScopeKey,
        previous: Option<&ScopeState>,
        policy: &Policy,
        force: bool,
    ) -> Option<(Option<ScopeState>, ScopeReport)> {
        let (dir, skip, follow) = match key {
            ScopeKey::Global => (self.root.clone(), Some(self.root.join("tenants")), true),
            ScopeKey::Tenant(t) => (self.root.join("tenants").join(t), None, false),
        };
        let stamp = {
            let (dir, policy) = (dir.clone(), policy.clone());
            tokio::task::spawn_blocking(move || Stamp::take(&dir, skip.as_deref(), follow, &policy))
                .await
                .ok()
                .flatten()
        };
        let same = |p: &ScopeState| p.stamp.is_some() && p.stamp == stamp;
        if !force && previous.is_some_and(same) {
            return None;
        }
        let mut report = ScopeReport {
            read: Some(dir),
            ..ScopeReport::default()
        };
        let mut state = self.load_scope(key, previous, policy, &mut report).await;
        match (&mut state, previous) {
            (None, Some(p)) => report
                .removed
                .extend(p.plugins.iter().map(|p| p.plugin.path().to_path_buf())),
            // Only a load without errors is known to be what the files
            // give: one with errors (some may pass) is read again.
            (Some(s), _) if s.errors.is_empty() => s.stamp = stamp,
            _ => {}
        }
        Some((state, report))
    }

    async fn load_scope(
        &self,
        key: &ScopeKey,
        previous: Option<&ScopeState>,
        policy: &Policy,
        report: &mut ScopeReport,
    ) -> Option<ScopeState> {
        let empty = ScopeState::default();
        let previous = previous.unwrap_or(&empty);
        let at = Location::of(&self.root, key);
        let (pdir, entries, set_policy, refused) = match self.plan(&at, policy).await {
            Err(e) => return Some(previous.kept_with(LoadIssue::of(&at.dir, &e))),
            // The tenant listing reports a tenant directory turned symlink.
            Ok(Plan::Gone | Plan::Refused(_)) if at.tenant.is_some() => return None,
            Ok(Plan::Gone) => {
                let gone = Error::Refused {
                    path: at.dir.clone(),
                    tenant: false,
                };
                let why = LoadIssue::new(IssueKind::Directory, &at.dir, gone.to_string());
                return Some(previous.kept_with(why));
            }
            Ok(Plan::Failed(why) | Plan::Refused(why)) => return Some(previous.kept_with(why)),
            Ok(Plan::Load {
                dir,
                entries,
                policy: set,
                refused,
            }) => (dir, entries, set, refused),
        };
        let effective = set_policy.as_deref().unwrap_or(policy);
        let shares = &effective.shares;
        let mut state = ScopeState {
            policy: set_policy.as_deref().cloned(),
            errors: refused,
            ..ScopeState::default()
        };
        let loaded_before = report.loaded.len();
        let scope = ScopeLoad {
            key,
            at: &at,
            files: &pdir,
            fits_mib: at.fits_mib(shares),
            previous,
            share: self.prepared_share(key),
            trust: &effective.signatures,
        };
        for entry in at.named(entries) {
            self.load_entry(&scope, entry, &mut state, report).await;
        }
        if let Some(why) = at.over_code_share(&state, shares) {
            report.loaded.truncate(loaded_before);
            return Some(previous.kept_with(why));
        }
        report.removed.extend(previous.removed_by(&state));
        state.whole = previous.whole || state.errors.is_empty();
        Some(state)
    }

    /// Reads the scope's directory and manifest off the async threads.
    async fn plan(&self, at: &Location, policy: &Policy) -> Result<Plan, Error> {
        let (dir, scope, symlinks, policy) =
            (at.dir.clone(), at.scope, at.symlinks, policy.clone());
        let (max_manifest, max_memory) = (
            self.limits.max_manifest_bytes,
            self.engine.config().max_memory_bytes,
        );
        tokio::task::spawn_blocking(move || {
            plan_scope(&dir, scope, symlinks, max_manifest, max_memory, &policy)
        })
        .await
        .map_err(join_error)
    }

    /// The prepared-instance share of the scope's plugins.
    fn prepared_share(&self, key: &ScopeKey) -> Arc<PreparedShare> {
        Arc::clone(
            self.prepared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(key.clone())
                .or_default(),
        )
    }

    /// Loads one manifest entry into `state`: the plugin as it was when
    /// nothing of it changed, its remembered failure when that is what
    /// changed nothing, else a new load — and where that fails, the
    /// previous version of the same name keeps serving.
    async fn load_entry(
        &self,
        scope: &ScopeLoad<'_>,
        entry: manifest::Entry,
        state: &mut ScopeState,
        report: &mut ScopeReport,
    ) {
        // The previous plugin of this name (manifest) or file (no
        // manifest; the name is the file's stem): what keeps serving if
        // the new version fails.
        let old = scope
            .previous
            .plugins
            .iter()
            .find(|p| p.plugin.name() == entry.spec.name);
        let path = entry.spec.path.clone();
        // ... unless the keys trusted now would refuse it.
        let old = old.filter(|o| scope.trust.admits(o.signer.as_deref()));
        let failed = |state: &mut ScopeState, why: LoadIssue| {
            state.errors.push(why);
            state.plugins.extend(old.cloned());
        };
        let mib = (entry.spec.limits.memory_bytes as u64).div_ceil(1 << 20);
        if mib > scope.fits_mib {
            let why = format!(
                "{}: memory_mib {mib} does not fit in the memory share its calls are \
                 charged to ({} MiB; see [shares])",
                path.display(),
                scope.fits_mib
            );
            return failed(state, LoadIssue::new(IssueKind::Share, &path, why));
        }
        // A remote source: from the blobs kept, else fetched and verified.
        // Either way signed as the operator requires, checked before the
        // bytes are compared with what serves (a key no longer trusted
        // takes out what it signed).
        // A remote source's fetch is the global guard's first step (it is
        // logged once it is compiled or snapshotted).
        let fetching = (*scope.key == ScopeKey::Global && entry.remote.is_some())
            .then(|| self.progress.begin(&entry.spec.name, LoadStep::Fetching));
        let bytes = match &entry.remote {
            None => match self.read_component(scope, &path).await {
                Ok(bytes) => self.signed_file(scope, &path, bytes).await,
                Err(e) => Err(e),
            },
            Some(remote) => {
                self.fetcher
                    .component(&self.cache, &entry.spec.name, remote, scope.trust)
                    .await
            }
        };
        let (bytes, signer) = match bytes {
            Ok(b) => b,
            Err(e) => return failed(state, LoadIssue::of(&path, &e)),
        };
        let digest = crate::call::plugin::digest(&bytes);
        let fingerprint = fingerprint(&entry, &digest);
        let previous = scope.previous;
        if let Some(same) = previous
            .plugins
            .iter()
            .find(|p| p.fingerprint == fingerprint)
        {
            return state.plugins.push(LoadedPlugin {
                signer,
                ..same.clone()
            });
        }
        if let Some((_, why)) = previous.failed.iter().find(|(f, _)| *f == fingerprint) {
            // Failed before with these very bytes and settings: report
            // it again, without compiling or probing again.
            state.failed.push((fingerprint, why.clone()));
            return failed(state, why.clone());
        }
        let loaded = self
            .load_plugin(
                scope,
                PluginSpec {
                    http_answers: self.http_answers.clone(),
                    ..entry.spec.clone()
                },
                bytes,
                digest,
                report,
                fetching,
            )
            .await;
        match loaded {
            Ok(plugin) => {
                report.loaded.push(path);
                state.plugins.push(LoadedPlugin {
                    plugin: Arc::new(plugin),
                    tenants: entry.tenants,
                    fingerprint,
                    signer,
                });
            }
            Err(e) => {
                let why = LoadIssue::of(&path, &e);
                // An engine or I/O error may pass: try again next time.
                if !e.is_transient() {
                    state.failed.push((fingerprint, why.clone()));
                }
                failed(state, why);
            }
        }
    }

    /// Reads one component file of the scope, safely and size-capped, off
    /// the async threads.
    async fn read_component(&self, scope: &ScopeLoad<'_>, path: &Path) -> Result<Vec<u8>, Error> {
        let rel = path
            .strip_prefix(&scope.at.dir)
            .unwrap_or(path)
            .to_path_buf();
        let (reader, cap) = (Arc::clone(scope.files), self.limits.max_component_bytes);
        tokio::task::spawn_blocking(move || reader.read(&rel, cap))
            .await
            .map_err(join_error)
            .and_then(|r| r)
    }

    /// `bytes`, the component file at `path`, when it is signed as the
    /// scope's trust requires: by its `<file>.sig` (base64 of an ECDSA
    /// P-256 signature of the bytes, as `cosign sign-blob` writes it),
    /// read under the same file rules as the component; with the id of the
    /// key that signed it, if one did.
    async fn signed_file(
        &self,
        scope: &ScopeLoad<'_>,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<(Vec<u8>, Option<String>), Error> {
        if !scope.trust.active() {
            return Ok((bytes, None));
        }
        let mut sig = path.as_os_str().to_owned();
        sig.push(".sig");
        let sig = PathBuf::from(sig);
        let refused = |message: String| Error::Signature {
            location: path.display().to_string(),
            message,
        };
        let signature = match self.read_component(scope, &sig).await {
            Ok(text) => String::from_utf8(text)
                .map_err(|_| refused(format!("{} is not a base64 signature", sig.display())))?,
            Err(_) if !scope.trust.required => return Ok((bytes, None)),
            Err(e) => {
                return Err(refused(format!(
                    "signatures are required (`[ceilings] require_signatures`) and its \
                     signature file {} cannot be read: {e}",
                    sig.display()
                )));
            }
        };
        match scope.trust.signer(&bytes, [signature.as_str()]) {
            Ok(key) => {
                tracing::debug!(path = %path.display(), key = key.id(), "signature verified");
                Ok((bytes, Some(key.id().to_string())))
            }
            Err(why) => Err(refused(format!("{}: {why}", sig.display()))),
        }
    }

    /// Compiles (or finds compiled) and links one plugin: the compile waits
    /// for a slot of the compile queue and is bounded in time (and, in a
    /// child process, memory); the probe has its own deadline.
    ///
    /// A plugin of the global directory is tracked ([`Progress`]) and its
    /// load logged: `tracked` when its tracking began before (a fetch).
    async fn load_plugin(
        &self,
        scope: &ScopeLoad<'_>,
        spec: PluginSpec,
        bytes: Vec<u8>,
        digest: String,
        report: &mut ScopeReport,
        tracked: Option<Tracked<'_>>,
    ) -> Result<Plugin, Error> {
        let key = scope.key;
        let planned = crate::call::snapshot::plan(spec.snapshot, &bytes);
        // The global directory's guards are tracked (and logged), each
        // from its first step (or the fetch of a remote source) to its end.
        let step = match planned {
            Some(_) => LoadStep::Compiling,
            None => LoadStep::Snapshotting,
        };
        let tracked = match tracked {
            Some(t) => {
                t.step(step);
                Some(t)
            }
            None => (*key == ScopeKey::Global).then(|| self.progress.begin(&spec.name, step)),
        };
        let counts = (report.compiled.len(), report.cache_hits.len());
        let loaded = self
            .load_plugin_tracked(scope, spec, bytes, digest, report, tracked.as_ref())
            .await;
        if let Some(tracked) = tracked {
            let outcome = match &loaded {
                Err(e) => format!("not loaded: {e}"),
                Ok(p) if p.snapshot == SnapshotStatus::Snapshotted => "snapshotted".into(),
                Ok(_) if report.compiled.len() > counts.0 => "compiled".into(),
                Ok(_) if report.cache_hits.len() > counts.1 => "from the compiled cache".into(),
                Ok(_) => "compiled before".into(),
            };
            tracked.done(&outcome);
        }
        loaded
    }

    /// [`Loader::load_plugin`]'s work; `tracked`: its progress, when
    /// tracked.
    async fn load_plugin_tracked(
        &self,
        scope: &ScopeLoad<'_>,
        spec: PluginSpec,
        bytes: Vec<u8>,
        digest: String,
        report: &mut ScopeReport,
        tracked: Option<&Tracked<'_>>,
    ) -> Result<Plugin, Error> {
        let (key, share) = (scope.key, &scope.share);
        let status = match crate::call::snapshot::plan(spec.snapshot, &bytes) {
            Some(status) => status,
            None => match self
                .load_snapshot(key, &spec, &bytes, &digest, share, report)
                .await
            {
                Ok(plugin) => return Ok(plugin),
                Err(reason) => {
                    if let Some(t) = tracked {
                        t.step(LoadStep::Compiling);
                    }
                    SnapshotStatus::Failed { reason }
                }
            },
        };
        let component = match self.known(&digest) {
            Some(c) => c,
            None => {
                let (component, outcome) =
                    self.compile(key, &spec.path, bytes, Some(&digest)).await?;
                match outcome {
                    CacheOutcome::Hit => {
                        report.cache_hits.push(spec.path.clone());
                        if let Ok(mut m) = self.compiled.lock() {
                            m.insert(digest.clone(), component.clone());
                        }
                    }
                    // The compile put it in `compiled` itself.
                    CacheOutcome::Compiled | CacheOutcome::Rebuilt => {
                        report.compiled.push(spec.path.clone());
                    }
                }
                component
            }
        };
        let mut plugin = Plugin::from_component_probed(
            &self.engine,
            spec,
            component,
            digest,
            Some(self.limits.probe_timeout),
            Some(Arc::clone(share)),
        )
        .await?;
        plugin.snapshot = status;
        Ok(plugin)
    }

    /// The component compiled from the bytes with SHA-256 `digest`, if a
    /// plugin of this loader already has it.
    fn known(&self, digest: &str) -> Option<Component> {
        self.compiled.lock().ok()?.get(digest).cloned()
    }

    /// The cache first (no queue; none without `digest`), then the
    /// failures remembered in the cache, else a bounded compile in
    /// directory `key`'s turn of the queue, stored in the cache under
    /// `digest` (its failure too, if the component's doing).
    async fn compile(
        &self,
        key: &ScopeKey,
        path: &Path,
        bytes: Vec<u8>,
        digest: Option<&str>,
    ) -> Result<(Component, CacheOutcome), Error> {
        // What a remembered failure is told apart by, beside the bytes and
        // the engine: a failure under other bounds may not recur.
        let settings = format!("{:?}\0{:?}", self.limits.compiler, self.limits.compile);
        let found = self.look_up(digest, &settings).await?;
        let outcome = match found {
            (Lookup::Hit(c), _) => return Ok((c, CacheOutcome::Hit)),
            (_, Some(failed)) => return Err(failed.error(path)),
            (Lookup::Miss, None) => CacheOutcome::Compiled,
            (Lookup::Rebuilt, None) => CacheOutcome::Rebuilt,
        };
        let mut slot = self.compile_queue.acquire(key).await?;
        // The same bytes may have been compiled while this waited for its
        // turn — by another tenant holding the same file, say: a thousand
        // tenants with one guard compile it once, not once each. (A
        // compile puts what it made in `compiled` before it gives its slot
        // back.)
        if let Some(c) = digest.and_then(|d| self.known(d)) {
            return Ok((c, CacheOutcome::Hit));
        }
        let (engine, cache, known, d) = (
            self.engine.clone(),
            Arc::clone(&self.cache),
            Arc::clone(&self.compiled),
            digest.map(str::to_string),
        );
        let (compiler, bounds, p, s) = (
            self.limits.compiler.clone(),
            self.limits.compile.clone(),
            path.to_path_buf(),
            settings.clone(),
        );
        let task = tokio::task::spawn_blocking(move || {
            // The slot is held until the compile really ends, even when
            // the reload stopped waiting for it, and charged its cost.
            let (compiled, cpu) = compiler.compile_measured(&engine, &p, &bytes, &bounds, &cache);
            slot.charge(cpu);
            // Stored before the slot is given back: the next compile of the
            // same bytes, waiting for it, finds them.
            match (&compiled, d) {
                (Ok(component), Some(d)) => {
                    cache.store(&engine, &d, component);
                    if let Ok(mut m) = known.lock() {
                        m.insert(d, component.clone());
                    }
                }
                (Err(e), Some(d)) => {
                    if let Some(failed) = CompileFailure::of(&d, e) {
                        cache.remember_failure(&engine, &s, &failed);
                    }
                }
                (_, None) => {}
            }
            drop(slot);
            compiled
        });
        // A child process is killed at the bound itself; give it time to
        // report. An in-process compile cannot be stopped: stop waiting.
        let wait = match self.limits.compiler {
            Compiler::InProcess => self.limits.compile.timeout,
            Compiler::Subprocess { .. } => self.limits.compile.timeout + Duration::from_secs(10),
        };
        match tokio::time::timeout(wait, task).await {
            Err(_) => Err(self.past_the_bound(path, digest, settings)),
            Ok(joined) => Ok((joined.map_err(join_error)??, outcome)),
        }
    }

    /// The compiled cache's answer for `digest`, and the failure it
    /// remembers for it under these `settings` (when it holds no component).
    async fn look_up(
        &self,
        digest: Option<&str>,
        settings: &str,
    ) -> Result<(Lookup, Option<CompileFailure>), Error> {
        let Some(d) = digest else {
            return Ok((Lookup::Miss, None));
        };
        let (engine, cache, d, settings) = (
            self.engine.clone(),
            Arc::clone(&self.cache),
            d.to_string(),
            settings.to_string(),
        );
        tokio::task::spawn_blocking(move || match cache.lookup(&engine, &d) {
            hit @ Lookup::Hit(_) => (hit, None),
            other => (other, cache.remembered_failure(&engine, &d, &settings)),
        })
        .await
        .map_err(join_error)
    }

    /// The error of a compile that ran past its time bound, remembered in
    /// the cache (in the background) as the component's failure.
    fn past_the_bound(&self, path: &Path, digest: Option<&str>, settings: String) -> Error {
        let e = Error::CompileBound {
            path: path.to_path_buf(),
            message: format!(
                "took longer than the compile time limit of {} ms",
                self.limits.compile.timeout.as_millis()
            ),
        };
        if let Some(failed) = digest.and_then(|d| CompileFailure::of(d, &e)) {
            let (engine, cache) = (self.engine.clone(), Arc::clone(&self.cache));
            tokio::task::spawn_blocking(move || {
                cache.remember_failure(&engine, &settings, &failed);
            });
        }
        e
    }

    /// Drops compiled components (and remembered warm-up failures) no
    /// plugin of `scopes` uses any more.
    pub(crate) fn forget_unused<'a>(
        &self,
        scopes: impl IntoIterator<Item = &'a ScopeState> + Clone,
    ) {
        let plugins = || scopes.clone().into_iter().flat_map(|s| &s.plugins);
        let mut used: BTreeSet<String> = plugins().map(|p| p.plugin.digest().to_string()).collect();
        self.snapshots.retain(|d| used.contains(d));
        used.extend(
            plugins()
                .filter(|p| p.plugin.snapshot == SnapshotStatus::Snapshotted)
                .map(|p| crate::call::snapshot::cache_digest(p.plugin.digest(), &p.plugin.config)),
        );
        if let Ok(mut m) = self.compiled.lock() {
            m.retain(|d, _| used.contains(d.as_str()));
        }
    }
}

/// What identifies a plugin as unchanged: its bytes and every setting.
fn fingerprint(entry: &manifest::Entry, digest: &str) -> String {
    let s = &entry.spec;
    format!(
        "{digest}\0{}\0{}\0{:?}\0{:?}\0{:?}\0{}\0{:?}",
        s.name,
        s.path.display(),
        s.limits,
        s.on_error,
        s.mode,
        s.config,
        entry.tenants
    ) + &format!("\0{}\0{:?}\0{:?}", s.prepared, s.snapshot, s.http)
}

impl Loader {
    /// The plugin `spec` with its component snapshotted at load: from this
    /// registry's memory or the compiled cache when made before (no
    /// warm-up), else instrumented, compiled, warmed up within the load
    /// probe's cap ([`crate::call::snapshot::warm_up_at_load`]), compiled again
    /// and cached. `Err`: why not (reported; the caller loads the plain
    /// component); a warm-up that failed is not tried again while the
    /// bytes, configuration and limits stay the same.
    async fn load_snapshot(
        &self,
        scope: &ScopeKey,
        spec: &PluginSpec,
        bytes: &[u8],
        digest: &str,
        share: &Arc<PreparedShare>,
        report: &mut ScopeReport,
    ) -> Result<Plugin, String> {
        let memo = AutoSnapshots::memo(spec, digest);
        if let Some(why) = self.snapshots.failed(&memo) {
            return Err(why);
        }
        let key = crate::call::snapshot::cache_digest(digest, &spec.config.to_string());
        let result: Result<Plugin, String> = async {
            let component = match self.known(&key) {
                Some(c) => c,
                None => {
                    let c = self.make_snapshot(scope, spec, bytes, &key, report).await?;
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
                Some(self.limits.probe_timeout),
                Some(Arc::clone(share)),
            )
            .await
            .map_err(|e| e.to_string())?;
            plugin.snapshot = SnapshotStatus::Snapshotted;
            Ok(plugin)
        }
        .await;
        if let Err(why) = &result {
            tracing::warn!(path = ?spec.path, "loading without a snapshot: {why}");
            self.snapshots.remember(memo, why.clone());
        }
        result
    }

    /// The compiled snapshot of `bytes` under cache digest `key`: from the
    /// cache, else made (warm-up included) and stored.
    async fn make_snapshot(
        &self,
        scope: &ScopeKey,
        spec: &PluginSpec,
        bytes: &[u8],
        key: &str,
        report: &mut ScopeReport,
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
        let instrumented = crate::call::snapshot::instrument(Arc::clone(&wasm)).await?;
        let instrumenting = start.elapsed();
        let (instrumented, _) = self
            .compile(scope, &spec.path, instrumented, None)
            .await
            .map_err(|e| format!("compiling it instrumented: {e}"))?;
        let compiling = start.elapsed();
        let bounds = crate::call::snapshot::WarmUpBounds {
            deadline: self.limits.probe_timeout,
            max_bytes: self.limits.max_component_bytes,
        };
        let snapshot = crate::call::snapshot::warm_up_at_load(
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
            .compile(scope, &spec.path, snapshot, None)
            .await
            .map_err(|e| format!("compiling the snapshot: {e}"))?;
        tracing::info!(
            path = ?spec.path,
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
