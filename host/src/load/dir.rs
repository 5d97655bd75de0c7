//! Loading a plugin directory without a manifest: every `*.wasm` in it, in
//! file-name order, with default limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::chain::Chain;
use crate::engine::Engine;
use crate::error::Error;
use crate::plugin::{Plugin, PluginSpec};

/// The `*.wasm` files directly in `dir`, sorted by file name.
pub fn components(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.into(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Loads every component in `dir` into a chain. A component that fails to
/// load is left out and its error returned beside the chain: one bad file
/// never stops the others.
pub async fn load_dir(engine: &Engine, dir: &Path) -> Result<(Chain, Vec<Error>), Error> {
    let mut plugins = Vec::new();
    let mut errors = Vec::new();
    for path in components(dir)? {
        match Plugin::load(engine, PluginSpec::new(path)).await {
            Ok(p) => plugins.push(Arc::new(p)),
            Err(e) => errors.push(e),
        }
    }
    Ok((Chain::new(plugins), errors))
}
