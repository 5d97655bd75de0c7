//! What to load from one plugin directory, read off the async threads:
//! the tenants listed under `tenants/`, where a scope's files are, and its
//! plan — the manifest's entries (or the directory's components), the
//! policy a global manifest sets, and the files refused on the way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::call::plugin::PluginSpec;
use crate::error::Error;
use crate::load::files::{Opened, PluginDir, Symlinks};
use crate::load::loader::{IssueKind, LoadIssue, ScopeKey, ScopeState};
use crate::load::manifest::{self, Manifest, Scope};
use crate::load::policy::Policy;
use crate::runtime::shares::Shares;
use crate::tenant::TenantName;

/// What a directory's manifest (or listing) says to load.
pub(super) enum Plan {
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
        policy: Option<Box<Policy>>,
        /// Files left out before loading (a file name that is no plugin
        /// name).
        refused: Vec<LoadIssue>,
    },
}
/// Where one scope's files are, and what its manifest may say.
pub(super) struct Location {
    pub(super) dir: PathBuf,
    pub(super) scope: Scope,
    /// The tenant whose directory this is; `None` for the global one.
    pub(super) tenant: Option<String>,
    pub(super) symlinks: Symlinks,
}

impl Location {
    pub(super) fn of(root: &Path, key: &ScopeKey) -> Self {
        match key {
            ScopeKey::Global => Location {
                dir: root.to_path_buf(),
                scope: Scope::Global,
                tenant: None,
                symlinks: Symlinks::Follow,
            },
            ScopeKey::Tenant(t) => Location {
                dir: root.join("tenants").join(t),
                scope: Scope::Tenant,
                tenant: Some(t.to_string()),
                symlinks: Symlinks::Refuse,
            },
        }
    }

    /// The memory (MiB) that must hold one instance of each plugin: the
    /// shares its calls are charged to — a tenant's (a global plugin runs
    /// for tenants too), and the global one.
    pub(super) fn fits_mib(&self, shares: &Shares) -> u64 {
        match self.scope {
            Scope::Global => shares.global_memory_mib.min(shares.tenant_memory_mib),
            Scope::Tenant => shares.tenant_memory_mib,
        }
    }

    /// The entries with their plugins' names: a tenant's are named
    /// `<tenant>/<name>`, so traces, logs and metrics never confuse them
    /// with a global plugin of the same name.
    pub(super) fn named(&self, entries: Vec<manifest::Entry>) -> Vec<manifest::Entry> {
        let Some(tenant) = &self.tenant else {
            return entries;
        };
        entries
            .into_iter()
            .map(|mut e| {
                e.spec.name = format!("{tenant}/{}", e.spec.name);
                e
            })
            .collect()
    }

    /// Why a tenant's plugins do not fit its compiled-code share, if they
    /// do not. Plugins of one component share its code: each image counts
    /// once.
    pub(super) fn over_code_share(&self, state: &ScopeState, shares: &Shares) -> Option<LoadIssue> {
        self.tenant.as_ref()?;
        let images: std::collections::HashSet<(usize, usize)> = state
            .plugins
            .iter()
            .map(|p| p.plugin.code_image())
            .collect();
        let code: usize = images.iter().map(|(_, len)| len).sum();
        let code_mib = (code as u64).div_ceil(1 << 20);
        (code_mib > shares.tenant_code_mib).then(|| {
            LoadIssue::new(
                IssueKind::Share,
                &self.dir,
                format!(
                    "{}: its plugins compile to {code_mib} MiB of code; a tenant's may hold at \
                     most {} MiB ([shares] tenant_code_mib): not loaded, its previous plugins \
                     keep serving",
                    self.dir.display(),
                    shares.tenant_code_mib
                ),
            )
        })
    }
}

/// What a listing of `root/tenants` found.
pub(crate) struct Listing {
    /// The tenant names (valid, real directories), sorted.
    pub(crate) names: Vec<String>,
    /// The entries refused (a bad name, a symlink).
    pub(crate) errors: Vec<LoadIssue>,
    /// Every entry's name, whatever it is; `None` when the directory or
    /// an entry could not be read (so not every name is known).
    pub(crate) entries: Option<BTreeSet<String>>,
}

/// Lists `root/tenants`. Blocking.
pub(super) fn list_tenants(root: &Path) -> Result<Listing, Error> {
    // The root must stay readable; everything below it is per directory.
    std::fs::read_dir(root).map_err(|source| Error::Read {
        path: root.to_path_buf(),
        source,
    })?;
    let mut listing = Listing {
        names: Vec::new(),
        errors: Vec::new(),
        entries: Some(BTreeSet::new()),
    };
    let tenants_dir = root.join("tenants");
    if !tenants_dir.is_dir() {
        return Ok(listing);
    }
    let entries = match std::fs::read_dir(&tenants_dir) {
        Ok(entries) => entries,
        Err(e) => {
            listing.errors.push(LoadIssue::new(
                IssueKind::Directory,
                &tenants_dir,
                format!("cannot read: {e}"),
            ));
            listing.entries = None;
            return Ok(listing);
        }
    };
    let (names, errors) = (&mut listing.names, &mut listing.errors);
    for entry in entries {
        let Ok(entry) = entry else {
            listing.entries = None;
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(all) = &mut listing.entries {
            all.insert(name.clone());
        }
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
    Ok(listing)
}

/// Opens a directory and reads what to load from it: its manifest, else
/// its `*.wasm` entries. Blocking.
pub(super) fn plan_scope(
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
    let mut refused = Vec::new();
    let (entries, set) = match pdir
        .read_optional(Path::new(manifest::FILE_NAME), max_manifest_bytes)
    {
        Err(e) => {
            let e = Error::from(manifest::ManifestError::unreadable(&manifest_path, &e));
            return Plan::Failed(LoadIssue::of(&manifest_path, &e));
        }
        Ok(Some(bytes)) => {
            match Manifest::parse_bytes(&manifest_path, &bytes, scope, max_memory_bytes, policy) {
                Ok(m) => (
                    m.plugins,
                    (scope == Scope::Global).then(|| Box::new(m.policy)),
                ),
                Err(e) => {
                    let path = e.path.clone();
                    return Plan::Failed(LoadIssue::of(&path, &Error::from(e)));
                }
            }
        }
        Ok(None) => {
            let names = match pdir.wasm_names() {
                Ok(names) => names,
                Err(e) => {
                    return Plan::Failed(LoadIssue::new(IssueKind::Directory, dir, e.to_string()));
                }
            };
            let entries = names
                .into_iter()
                .map(|n| dir.join(n))
                .filter(|path| match crate::load::dir::check_stem(path) {
                    Ok(()) => true,
                    Err(e) => {
                        refused.push(LoadIssue::of(path, &e));
                        false
                    }
                })
                .map(|path| {
                    let mut spec = PluginSpec::new(path);
                    if scope == Scope::Tenant {
                        spec.limits = spec.limits.clamped_to(&policy.ceilings);
                    }
                    manifest::Entry {
                        spec,
                        tenants: None,
                        remote: None,
                    }
                })
                .collect();
            (entries, None)
        }
    };
    let most = policy.shares.tenant_plugins;
    if scope == Scope::Tenant && entries.len() > most as usize {
        return Plan::Failed(LoadIssue::new(
            IssueKind::Share,
            dir,
            format!(
                "{}: {} plugins; a tenant may have at most {most} ([shares] tenant_plugins): \
                 not loaded, its previous plugins keep serving",
                dir.display(),
                entries.len()
            ),
        ));
    }
    Plan::Load {
        dir: Arc::new(pdir),
        entries,
        policy: set,
        refused,
    }
}
