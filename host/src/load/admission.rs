//! The order tenants were admitted in, kept across restarts.
//!
//! When not every tenant's share fits, who was serving keeps serving and a
//! newcomer is the one refused (see `registry/build.rs`). A restart must
//! not undo that: the registry keeps its admitted tenants, in order, in a
//! small file in the compiled cache's directory —
//! `<cache dir>/admitted/<hash of the plugin directory's path>.txt`, one
//! tenant name a line under a comment naming the plugin directory — and
//! reads it back when it opens, so the tenants admitted before the
//! restart hold their places while they load, whatever their names and
//! whichever loads first. Nothing a tenant controls goes into it or
//! decides what is in it (no file times, no file of a tenant's); the cache
//! directory is the operator's and checked private before it is read.
//!
//! Without a cache directory (`--no-cache`, `TOOLGATE_CACHE_DIR=off`)
//! nothing is kept: after a restart tenants are admitted as they finish
//! loading. A file that cannot be read or written is logged, never fatal;
//! deleting it is safe (the order is then that of loading, once).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::load::cache::{CompiledCache, check_private, hex, write_private_with};
use crate::tenant::TenantName;

/// Largest admission file read; a larger one is ignored (logged).
const MAX_BYTES: u64 = 4 << 20;

/// Where one plugin directory's admission order is kept.
#[derive(Debug, Default)]
pub(crate) struct AdmissionFile {
    /// `None`: not kept (no cache directory).
    path: Option<PathBuf>,
    /// The cache directory, checked private before each read and write.
    dir: PathBuf,
    /// The plugin directory, for the file's comment line.
    root: PathBuf,
}

impl AdmissionFile {
    /// The admission file of plugin directory `root` (absolute) in
    /// `cache`'s directory, if it has one.
    pub(crate) fn new(cache: &CompiledCache, root: &Path) -> AdmissionFile {
        let path = cache.dir().map(|dir| {
            let key = hex(&Sha256::digest(root.as_os_str().as_encoded_bytes()));
            dir.join("admitted").join(format!("{}.txt", &key[..32]))
        });
        AdmissionFile {
            path,
            dir: cache.dir().map(Path::to_path_buf).unwrap_or_default(),
            root: root.to_path_buf(),
        }
    }

    /// The tenants admitted when the order was last kept, in order (valid
    /// names, each once); empty when there is no file. Blocking (one small
    /// read).
    pub(crate) fn read(&self) -> Vec<String> {
        let Some(path) = &self.path else {
            return Vec::new();
        };
        if check_private(&self.dir, true).is_err() {
            return Vec::new();
        }
        let text = match std::fs::metadata(path) {
            Err(_) => return Vec::new(),
            Ok(m) if m.len() > MAX_BYTES => {
                tracing::warn!(file = ?path, "admission order not read: larger than {MAX_BYTES} bytes");
                return Vec::new();
            }
            Ok(_) => match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!(file = ?path, "admission order not read: {e}");
                    return Vec::new();
                }
            },
        };
        let mut seen = std::collections::BTreeSet::new();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| TenantName::try_from(l.trim()).ok())
            .map(String::from)
            .filter(|t| seen.insert(t.clone()))
            .collect()
    }

    /// Keeps `admitted` as the order to read back after a restart, now
    /// (one small write, not synced: whole or not at all; only a power
    /// loss may lose it), so a tenant is on disk before its first call is
    /// decided. Called with the registry's publishing lock held: the
    /// latest order is the one written.
    pub(crate) fn keep(&self, admitted: &[String]) {
        let Some(path) = &self.path else {
            return;
        };
        if check_private(&self.dir, true).is_err() {
            return;
        }
        let text = std::iter::once(format!(
            "# toolgate: tenants admitted for {:?}, in the order they were admitted\n",
            self.root
        ))
        .chain(admitted.iter().map(|t| format!("{t}\n")))
        .collect::<String>();
        if let Err(e) = write_private_with(path, text.as_bytes(), false) {
            tracing::warn!(file = ?path, "admission order not kept: {e}");
        }
    }
}
