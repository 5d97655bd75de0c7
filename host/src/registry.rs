//! The plugins a host serves: the global chain and each tenant's, swapped
//! atomically on reload so calls in flight finish on the chain they began
//! with.
//!
//! Layout of a plugin directory:
//!
//! ```text
//! plugins/
//!   10-sql-guard.wasm         global guards, in file-name order
//!   20-no-email.wasm
//!   tenants/
//!     acme/                   tenant `acme`'s own guards
//!       audit.wasm
//! ```
//!
//! A call for tenant T runs the global chain, then T's own; it never
//! reaches another tenant's guards. A call with no tenant, or for a tenant
//! with no directory, runs the global chain only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::chain::Chain;
use crate::dir;
use crate::engine::Engine;
use crate::error::Error;
use crate::plugin::{Plugin, PluginSpec};

/// One loaded state of the plugin directory.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Incremented by every reload that changed something.
    pub generation: u64,
    /// The global chain.
    pub global: Chain,
    /// Each tenant's own chain (without the global guards).
    pub tenants: BTreeMap<String, Chain>,
    /// What could not be loaded, with why; the previous version of each
    /// such file (if any) keeps serving.
    pub errors: Vec<LoadIssue>,
    /// Global chain followed by each tenant's own, precomputed.
    combined: BTreeMap<String, Chain>,
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
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid tenant name {name:?}: use 1-64 characters of letters, digits, '_', '-', '.', not starting with '.'"
        ))
    }
}

/// The live plugin set of one directory.
pub struct Registry {
    engine: Engine,
    root: PathBuf,
    current: ArcSwap<Snapshot>,
    reloading: Mutex<()>,
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
}

impl Registry {
    /// Loads `root` (global guards and `tenants/*`).
    pub async fn open(engine: Engine, root: impl Into<PathBuf>) -> Result<Registry, Error> {
        let root = root.into();
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
        };
        registry.reload().await?;
        Ok(registry)
    }

    /// The directory this registry serves.
    pub fn root(&self) -> &Path {
        &self.root
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
        let global = self
            .load_chain(&self.root, &old.global, &mut report, &mut errors)
            .await?;
        let mut tenants = BTreeMap::new();
        let tenants_dir = self.root.join("tenants");
        if tenants_dir.is_dir() {
            let entries = std::fs::read_dir(&tenants_dir).map_err(|source| Error::Read {
                path: tenants_dir.clone(),
                source,
            })?;
            let mut names: Vec<(String, PathBuf)> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .collect();
            names.sort();
            for (name, path) in names {
                if let Err(message) = validate_tenant(&name) {
                    errors.push(LoadIssue { path, message });
                    continue;
                }
                let previous = old.tenants.get(&name).cloned().unwrap_or_default();
                let chain = self
                    .load_chain(&path, &previous, &mut report, &mut errors)
                    .await?;
                tenants.insert(name, chain);
            }
        }
        for (name, chain) in &old.tenants {
            if !tenants.contains_key(name) {
                report
                    .removed
                    .extend(chain.plugins().iter().map(|p| p.path().to_path_buf()));
            }
        }
        let changed = !report.loaded.is_empty() || !report.removed.is_empty();
        let generation = old.generation + u64::from(changed || old.generation == 0);
        let combined = tenants
            .iter()
            .map(|(name, own)| {
                let mut all = global.plugins().to_vec();
                all.extend(own.plugins().iter().cloned());
                (name.clone(), Chain::new(all))
            })
            .collect();
        report.generation = generation;
        report.errors = errors.clone();
        for e in &errors {
            tracing::warn!(path = %e.path.display(), "plugin not loaded: {}", e.message);
        }
        if changed {
            tracing::info!(
                generation,
                loaded = ?report.loaded,
                removed = ?report.removed,
                "plugin set reloaded"
            );
        }
        self.current.store(Arc::new(Snapshot {
            generation,
            global,
            tenants,
            errors,
            combined,
        }));
        Ok(report)
    }

    async fn load_chain(
        &self,
        dir: &Path,
        previous: &Chain,
        report: &mut ReloadReport,
        errors: &mut Vec<LoadIssue>,
    ) -> Result<Chain, Error> {
        let mut plugins = Vec::new();
        for path in dir::components(dir)? {
            let old = previous.plugins().iter().find(|p| p.path() == path);
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    errors.push(LoadIssue {
                        path: path.clone(),
                        message: format!("cannot read: {e}"),
                    });
                    plugins.extend(old.cloned());
                    continue;
                }
            };
            if let Some(old) = old.filter(|p| p.digest() == crate::plugin::digest(&bytes)) {
                plugins.push(Arc::clone(old));
                continue;
            }
            match Plugin::load(&self.engine, PluginSpec::new(&path)).await {
                Ok(p) => {
                    report.loaded.push(path);
                    plugins.push(Arc::new(p));
                }
                Err(e) => {
                    errors.push(LoadIssue {
                        path,
                        message: e.to_string(),
                    });
                    plugins.extend(old.cloned());
                }
            }
        }
        for p in previous.plugins() {
            if !plugins.iter().any(|q| q.path() == p.path()) {
                report.removed.push(p.path().to_path_buf());
            }
        }
        Ok(Chain::new(plugins))
    }
}
