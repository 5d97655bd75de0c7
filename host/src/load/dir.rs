//! Loading a plugin directory without a manifest: every `*.wasm` in it, in
//! file-name order, with default limits.
//!
//! Files are read by the rules of [`crate::load::files`], as the
//! [`Registry`](crate::Registry) reads its global directory: only names
//! ending in `.wasm` that do not start with a dot; only **regular files**
//! (a FIFO, a device or a directory named `x.wasm` is refused at once,
//! never read or waited on); never more than a size cap
//! ([`DirRules::max_component_bytes`], by default the registry's 64 MiB).
//! Each plugin is named by its file's stem, which must be a valid plugin
//! name ([`crate::tenant::is_valid_name`]); a file whose stem is not is
//! refused ([`Error::Name`]). Symlinks are followed by default ([`Symlinks::Follow`]): the directory
//! is the operator's own choice, not a tenant's, and a directory mounted
//! as a symlink farm (a Kubernetes ConfigMap) must load. To load a
//! directory someone else controls, pass [`Symlinks::Refuse`]: then no
//! symlink is followed and nothing can point a file outside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::call::chain::Chain;
use crate::call::plugin::{self, Plugin, PluginSpec};
use crate::error::Error;
use crate::load::files::{Opened, PluginDir, Symlinks};
use crate::runtime::engine::Engine;

/// How [`load_dir_with`] and [`components_with`] read a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirRules {
    /// Whether symlinks are followed. Default: [`Symlinks::Follow`] (the
    /// operator's directory; see the module docs).
    pub symlinks: Symlinks,
    /// Largest component read, in bytes; a larger file is
    /// [`Error::TooLarge`]. Default: 64 MiB, as the registry's
    /// [`LoadLimits`](crate::load::registry::LoadLimits).
    pub max_component_bytes: u64,
}

impl Default for DirRules {
    fn default() -> Self {
        DirRules {
            symlinks: Symlinks::Follow,
            max_component_bytes: crate::load::registry::LoadLimits::default().max_component_bytes,
        }
    }
}

/// Opens `dir` by `rules`; anything but a directory is an error.
fn open(dir: &Path, rules: &DirRules) -> Result<PluginDir, Error> {
    match PluginDir::open(dir, rules.symlinks) {
        Opened::Dir(d) => Ok(d),
        Opened::Missing => Err(Error::Read {
            path: dir.into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
        }),
        Opened::Refused(e) => Err(e),
    }
}

/// The `*.wasm` files directly in `dir`, sorted by file name, by the
/// default [`DirRules`]. Blocks (a few syscalls per entry, never a read
/// of a file's contents).
pub fn components(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    components_with(dir, &DirRules::default())
}

/// The `*.wasm` entries directly in `dir` that are regular files by
/// `rules` (dotfiles, FIFOs, devices, directories and, under
/// [`Symlinks::Refuse`], symlinks left out), sorted by file name.
pub fn components_with(dir: &Path, rules: &DirRules) -> Result<Vec<PathBuf>, Error> {
    let d = open(dir, rules)?;
    Ok(d.wasm_names()?
        .into_iter()
        .filter(|name| d.check(Path::new(name)).is_ok())
        .map(|name| dir.join(name))
        .collect())
}

/// Whether the stem of the component file at `path` (the name of its
/// plugin in a directory without a manifest) is a valid plugin name; else
/// [`Error::Name`] naming the file.
pub(crate) fn check_stem(path: &Path) -> Result<(), Error> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    crate::load::manifest::validate_name(&stem).map_err(|message| Error::Name {
        path: path.into(),
        message: format!("{message} (the file's stem names the plugin: rename the file)"),
    })
}

/// Loads every component in `dir` into a chain, by the default
/// [`DirRules`]. A component that fails to load is left out and its error
/// returned beside the chain: one bad file never stops the others.
pub async fn load_dir(engine: &Engine, dir: &Path) -> Result<(Chain, Vec<Error>), Error> {
    load_dir_with(engine, dir, DirRules::default()).await
}

/// Like [`load_dir`], reading the directory by `rules`. Every `*.wasm`
/// entry that does not start with a dot is tried: one whose stem is not a
/// valid plugin name is [`Error::Name`], one that is not a regular file by
/// `rules` [`Error::Refused`], one over the cap [`Error::TooLarge`], all
/// returned beside the chain.
pub async fn load_dir_with(
    engine: &Engine,
    dir: &Path,
    rules: DirRules,
) -> Result<(Chain, Vec<Error>), Error> {
    let task = |what| move |source| Error::Task { what, source };
    let path = dir.to_path_buf();
    let (d, names) = tokio::task::spawn_blocking(move || {
        let d = open(&path, &rules)?;
        let names = d.wasm_names()?;
        Ok::<_, Error>((d, names))
    })
    .await
    .map_err(task("read directory"))??;
    let d = Arc::new(d);
    let mut plugins = Vec::new();
    let mut errors = Vec::new();
    for name in names {
        let (e, d) = (engine.clone(), Arc::clone(&d));
        let path = dir.join(&name);
        if let Err(e) = check_stem(&path) {
            errors.push(e);
            continue;
        }
        let at = path.clone();
        // Reading and compiling block: off the async threads.
        let read = tokio::task::spawn_blocking(move || {
            let bytes = d.read(Path::new(&name), rules.max_component_bytes)?;
            Ok::<_, Error>((plugin::compile(&e, &at, &bytes)?, plugin::digest(&bytes)))
        })
        .await
        .map_err(task("compile"))
        .and_then(|r| r);
        let loaded = match read {
            Ok((component, digest)) => {
                Plugin::from_component(engine, PluginSpec::new(path), component, digest).await
            }
            Err(e) => Err(e),
        };
        match loaded {
            Ok(p) => plugins.push(Arc::new(p)),
            Err(e) => errors.push(e),
        }
    }
    Ok((Chain::new(plugins), errors))
}
