//! The compiled-component cache: native code of each component, on disk, so
//! a guard whose bytes did not change is never compiled again — not on
//! reload, not on restart.
//!
//! An entry is keyed by SHA-256 over the component's digest and the
//! engine's [`precompile_compatibility_hash`](wasmtime::Engine::precompile_compatibility_hash)
//! (wasmtime version, target, and every setting that changes code such as
//! fuel metering). It is stored as `<key>.cwasm`: the bytes of
//! [`Component::serialize`] followed by their SHA-256, written to a
//! temporary file in the same directory and renamed into place, so a reader
//! never sees half an entry. An entry whose checksum or header does not
//! match is deleted and rebuilt.
//!
//! Location: `$TOOLGATE_CACHE_DIR` if set (`off` or empty disables the
//! cache), else `$XDG_CACHE_HOME/toolgate`, else `$HOME/.cache/toolgate`.
//! Entries are never evicted; deleting the directory is always safe.
//!
//! The cache directory must be writable only by the user toolgate runs as:
//! its entries are native code that is run as is.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use crate::engine::Engine;
use crate::error::Error;
use crate::plugin::compile;

/// Where compiled components are kept, and how often it helped.
#[derive(Debug, Default)]
pub struct CompiledCache {
    dir: Option<PathBuf>,
    hits: AtomicU64,
    misses: AtomicU64,
    rebuilt: AtomicU64,
}

/// Counters of a [`CompiledCache`] since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Components loaded from the cache.
    pub hits: u64,
    /// Components compiled (no entry, or the cache is disabled).
    pub misses: u64,
    /// Entries that failed to load and were deleted and rebuilt (each also
    /// counts as a miss).
    pub rebuilt: u64,
}

/// How a component was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a cache entry.
    Hit,
    /// Compiled (and stored, when the cache is enabled).
    Compiled,
    /// The entry was unusable: deleted, compiled and stored again.
    Rebuilt,
}

impl CompiledCache {
    /// A cache in `dir` (created when first written).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        CompiledCache {
            dir: Some(dir.into()),
            ..CompiledCache::default()
        }
    }

    /// No cache: every load compiles.
    pub fn disabled() -> Self {
        CompiledCache::default()
    }

    /// The documented default: `$TOOLGATE_CACHE_DIR` (`off` or empty:
    /// disabled), else `$XDG_CACHE_HOME/toolgate`, else
    /// `$HOME/.cache/toolgate`, else disabled.
    pub fn from_env() -> Self {
        match default_dir() {
            Some(dir) => CompiledCache::at(dir),
            None => CompiledCache::disabled(),
        }
    }

    /// The directory, or `None` when disabled.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Hits, misses and rebuilds so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            rebuilt: self.rebuilt.load(Ordering::Relaxed),
        }
    }

    /// The entry file for component bytes with SHA-256 `digest` (hex).
    pub fn entry_path(&self, engine: &Engine, digest: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(dir.join(format!("{}.cwasm", key(engine, digest))))
    }

    /// The compiled form of `bytes` (read from `path`, whose SHA-256 is
    /// `digest`): from the cache when a valid entry exists, else compiled
    /// and stored. Blocking: call it off the async executor.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        path: &Path,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Component, CacheOutcome), Error> {
        self.load_or_compile_with(engine, digest, || compile(engine, path, bytes))
    }

    /// Like [`CompiledCache::load_or_compile`], compiling with `compile`
    /// on a miss (a bounded compile, say).
    pub fn load_or_compile_with(
        &self,
        engine: &Engine,
        digest: &str,
        compile: impl FnOnce() -> Result<Component, Error>,
    ) -> Result<(Component, CacheOutcome), Error> {
        let outcome = match self.lookup(engine, digest) {
            Lookup::Hit(component) => return Ok((component, CacheOutcome::Hit)),
            Lookup::Miss => CacheOutcome::Compiled,
            Lookup::Rebuilt => CacheOutcome::Rebuilt,
        };
        let component = compile()?;
        self.store(engine, digest, &component);
        Ok((component, outcome))
    }

    /// The cached compiled form of the component with SHA-256 `digest`, if
    /// a valid entry exists. An unusable entry is deleted
    /// ([`Lookup::Rebuilt`]: compile and [`CompiledCache::store`] again).
    /// Counts a hit or a miss. Blocking.
    pub fn lookup(&self, engine: &Engine, digest: &str) -> Lookup {
        let Some(entry) = self.entry_path(engine, digest) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Miss;
        };
        let found = match read_entry(engine, &entry) {
            Ok(Some(component)) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Lookup::Hit(component);
            }
            Ok(None) => Lookup::Miss,
            Err(why) => {
                tracing::warn!(entry = %entry.display(), "compiled cache entry unusable, rebuilding: {why}");
                if let Err(e) = std::fs::remove_file(&entry) {
                    tracing::warn!(entry = %entry.display(), "cannot delete cache entry: {e}");
                }
                self.rebuilt.fetch_add(1, Ordering::Relaxed);
                Lookup::Rebuilt
            }
        };
        self.misses.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Stores `component` (compiled from the bytes with SHA-256 `digest`);
    /// a failure to write is logged, never fatal. Blocking.
    pub fn store(&self, engine: &Engine, digest: &str, component: &Component) {
        let Some(entry) = self.entry_path(engine, digest) else {
            return;
        };
        if let Err(e) = write_entry(component, &entry) {
            tracing::warn!(entry = %entry.display(), "cannot write compiled cache entry: {e}");
        }
    }
}

/// What [`CompiledCache::lookup`] found.
pub enum Lookup {
    /// A valid entry.
    Hit(Component),
    /// No entry (or the cache is disabled).
    Miss,
    /// An unusable entry, now deleted.
    Rebuilt,
}

fn default_dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("TOOLGATE_CACHE_DIR") {
        return (!v.is_empty() && v != "off").then(|| PathBuf::from(v));
    }
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("toolgate"))
}

/// Feeds `Hash` output into SHA-256, so the engine's compatibility hash
/// becomes a stable digest rather than a process-seeded `u64`.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The cache key of a component with SHA-256 `digest` under `engine`.
pub fn key(engine: &Engine, digest: &str) -> String {
    let mut h = ShaHasher(Sha256::new());
    h.0.update(b"toolgate-cwasm-v1\0");
    h.0.update(digest.as_bytes());
    h.0.update(b"\0");
    engine
        .wasmtime()
        .precompile_compatibility_hash()
        .hash(&mut h);
    hex(&h.0.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `Ok(None)`: no entry. `Err`: an entry that must be deleted.
fn read_entry(engine: &Engine, entry: &Path) -> Result<Option<Component>, String> {
    let data = match std::fs::read(entry) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    let Some(split) = data.len().checked_sub(32) else {
        return Err("shorter than its checksum".into());
    };
    let (payload, sum) = data.split_at(split);
    if Sha256::digest(payload).as_slice() != sum {
        return Err("checksum mismatch".into());
    }
    // SAFETY: `Component::deserialize` runs the native code in `payload`
    // as is, so it must be what `Component::serialize` produced. It is: the
    // entry's trailing SHA-256 matches, entries are only ever written by
    // `write_entry` (serialize, checksum, temp file, rename), and the cache
    // directory is documented as writable only by toolgate's own user.
    // wasmtime itself still refuses an entry from another wasmtime version
    // or engine configuration (header and compatibility checks), which the
    // key already rules out.
    unsafe { Component::deserialize(engine.wasmtime(), payload) }
        .map(Some)
        .map_err(|e| format!("{e:#}"))
}

fn write_entry(component: &Component, entry: &Path) -> std::io::Result<()> {
    let dir = entry.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    let sum = Sha256::digest(&bytes);
    let name = entry
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.write_all(&sum)?;
        f.sync_all()?;
        std::fs::rename(&tmp, entry)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
