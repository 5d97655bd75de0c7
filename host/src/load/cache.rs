//! The compiled-component cache: native code of each component, on disk, so
//! a guard whose bytes did not change is never compiled again — not on
//! reload, not on restart.
//!
//! An entry is keyed by SHA-256 over the component's digest and the
//! engine's [`precompile_compatibility_hash`](wasmtime::Engine::precompile_compatibility_hash)
//! (wasmtime version, target, and every setting that changes code such as
//! fuel metering). It is stored as `<key>.cwasm`: a header (a format tag,
//! the SHA-256 of the component it was compiled from, and the engine's
//! hash), the bytes of [`Component::serialize`], and a SHA-256 of all that,
//! written to a temporary file in the same directory and renamed into
//! place, so a reader never sees half an entry. On load the header must
//! name the very component being loaded and this engine: an entry copied
//! or renamed under another component's key is refused like a corrupt one
//! — deleted and rebuilt from the component's own bytes.
//!
//! Compiles that failed are recorded beside the entries, `<key>.failed`
//! ([`CompileFailure`]), so a restart does not compile them again; a record
//! expires after [`FAILURE_TTL`].
//!
//! Location: `$TOOLGATE_CACHE_DIR` if set (`off` or empty disables the
//! cache), else `$XDG_CACHE_HOME/toolgate`, else `$HOME/.cache/toolgate`.
//! Entries are never evicted; deleting the directory is always safe.
//!
//! Beside the entries, `functions/` holds the per-function store
//! ([`crate::load::functions`]): a component not in the cache compiles only
//! the functions no earlier compile made (`CompiledCache::function_dir`).
//!
//! Entries are native code that is run as is, so whoever can write the
//! cache can run code in toolgate. The checks above catch accidents, not a
//! writer (who can forge a header); what keeps writers out is the directory
//! itself: it is created `0700`, and a directory (or entry) that is not
//! owned by the user toolgate runs as, or that group or others may write,
//! is not used — every component is compiled instead, with one warning
//! naming the directory and the fix ([`CompiledCache::check_dir`]).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use crate::call::plugin::compile;
use crate::error::Error;
use crate::load::functions::{FunctionCounters, FunctionStats};
use crate::runtime::engine::Engine;

/// Where compiled components are kept, and how often it helped.
#[derive(Debug, Default)]
pub struct CompiledCache {
    dir: Option<PathBuf>,
    hits: AtomicU64,
    misses: AtomicU64,
    rebuilt: AtomicU64,
    /// The per-function store's counts, over every compile.
    functions: FunctionCounters,
    /// Whether an unsafe directory was already reported.
    warned: AtomicBool,
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
    /// A cache in `dir` (created when first written); a relative `dir` is
    /// made absolute now, against the current directory.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        CompiledCache {
            dir: Some(crate::load::files::absolute(&dir.into())),
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

    /// The per-function store's counts: functions whose compiled code a
    /// compile reused, and functions it compiled.
    pub fn function_stats(&self) -> FunctionStats {
        self.functions.get()
    }

    /// Counts a compile's use of the per-function store.
    pub(crate) fn count_functions(&self, stats: FunctionStats) {
        self.functions.add(stats);
    }

    /// The per-function store's directory (`<dir>/functions`), or `None`
    /// when the cache is disabled or its directory is not safe to use
    /// (see [`CompiledCache::check_dir`]).
    pub fn function_dir(&self) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        self.check_dir().ok()?;
        Some(dir.join("functions"))
    }

    /// Whether the cache directory may be used: it must be owned by the
    /// user toolgate runs as and writable by no one else (Unix). A
    /// directory that does not exist yet is fine (it is created `0700`).
    /// `Ok` when the cache is disabled.
    pub fn check_dir(&self) -> Result<(), Error> {
        match &self.dir {
            Some(dir) => check_private(dir, true),
            None => Ok(()),
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
    /// (`Lookup::Rebuilt`: compile and [`CompiledCache::store`] again).
    /// Counts a hit or a miss. Blocking.
    pub fn lookup(&self, engine: &Engine, digest: &str) -> Lookup {
        let entry = self.entry_path(engine, digest);
        let wasmtime = engine.wasmtime();
        self.lookup_entry(entry, &Header::new(wasmtime, digest), |code| {
            // SAFETY: see `read_entry`: `code` is what `Component::serialize`
            // wrote, for this component and this engine.
            unsafe { Component::deserialize(wasmtime, code) }
        })
    }

    /// The entry at `entry` checked against `header` and deserialized,
    /// under the rules of [`CompiledCache::lookup`].
    fn lookup_entry<T>(
        &self,
        entry: Option<PathBuf>,
        header: &Header,
        deserialize: impl FnOnce(&[u8]) -> wasmtime::Result<T>,
    ) -> Lookup<T> {
        let Some(entry) = entry else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Miss;
        };
        if let Err(unsafe_dir) = self.check_dir() {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!("compiled cache not used: {unsafe_dir}");
            }
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Miss;
        }
        let found = match read_entry(&entry, header, deserialize) {
            Ok(Some(compiled)) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Lookup::Hit(compiled);
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
    /// a failure to write is logged, never fatal; a directory others can
    /// write is never written to. Blocking.
    pub fn store(&self, engine: &Engine, digest: &str, component: &Component) {
        let header = Header::new(engine.wasmtime(), digest);
        self.store_entry(self.entry_path(engine, digest), &header, || {
            component.serialize()
        });
    }

    fn store_entry(
        &self,
        entry: Option<PathBuf>,
        header: &Header,
        serialize: impl FnOnce() -> wasmtime::Result<Vec<u8>>,
    ) {
        let Some(entry) = entry else {
            return;
        };
        if self.check_dir().is_err() {
            return;
        }
        let written = serialize()
            .map_err(std::io::Error::other)
            .and_then(|code| write_entry(&code, &entry, header));
        if let Err(e) = written {
            tracing::warn!(entry = %entry.display(), "cannot write compiled cache entry: {e}");
        }
    }

    /// The compiled form of the core module `bytes` under `engine` (a plain
    /// wasmtime engine: `toolgate wizer` compiles a JS guard's engine
    /// module with one), from `<dir>/modules/` when a valid entry exists,
    /// else compiled and stored there; entries are checked as components'
    /// are. Blocking.
    pub fn load_or_compile_module(
        &self,
        engine: &wasmtime::Engine,
        bytes: &[u8],
    ) -> wasmtime::Result<wasmtime::Module> {
        let digest = crate::call::plugin::digest(bytes);
        let header = Header::new(engine, &digest);
        let entry = self.dir.as_ref().map(|dir| {
            dir.join("modules")
                .join(format!("{}.cwasm", key_with(engine, &digest)))
        });
        let found = self.lookup_entry(entry.clone(), &header, |code| {
            // SAFETY: see `read_entry`: `code` is what `Module::serialize`
            // wrote, for these module bytes and this engine.
            unsafe { wasmtime::Module::deserialize(engine, code) }
        });
        if let Lookup::Hit(module) = found {
            return Ok(module);
        }
        let module = wasmtime::Module::new(engine, bytes)?;
        self.store_entry(entry, &header, || module.serialize());
        Ok(module)
    }
}

impl CompiledCache {
    /// Where the blob (a fetched component, an OCI manifest) with SHA-256
    /// `hex` is kept: `<dir>/blobs/sha256/<hex>`; `None` when the cache is
    /// off or `hex` is not 64 hex digits.
    pub fn blob_path(&self, hex: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let valid = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| dir.join("blobs").join("sha256").join(hex))
    }

    /// The kept blob with SHA-256 `hex`, at most `max_bytes`, read by the
    /// entries' rules (a regular file, opened without blocking, owned by
    /// toolgate's user and writable by no one else, in a cache directory
    /// that is too) and verified: one whose bytes are not `hex`'s is
    /// deleted. `None`: not kept (or unusable). Blocking.
    pub(crate) fn blob(&self, hex: &str, max_bytes: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(hex)?;
        self.check_dir().ok()?;
        let (file, stat) = crate::load::files::open_nonblocking(&path).ok()??;
        let usable = crate::load::files::is_regular(&stat);
        #[cfg(unix)]
        let usable = usable && check_owner_and_mode(&path, stat.st_uid, stat.st_mode).is_ok();
        let bytes = usable
            .then(|| crate::load::files::read_capped(file, &path, max_bytes).ok())
            .flatten();
        match bytes {
            Some(b) if hex.eq_ignore_ascii_case(&crate::call::plugin::digest(&b)) => Some(b),
            _ => {
                tracing::warn!(blob = %path.display(), "kept blob unusable (not its digest's bytes, or not a private regular file): deleted, fetched again");
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(blob = %path.display(), "cannot delete kept blob: {e}");
                }
                None
            }
        }
    }

    /// Keeps `bytes` (whose SHA-256 is `hex`, checked by the caller) as a
    /// blob, written whole or not at all; `false` when not kept on disk
    /// (the cache off or unsafe, or the write failed: logged). Blocking.
    pub(crate) fn store_blob(&self, hex: &str, bytes: &[u8]) -> bool {
        let Some(path) = self.blob_path(hex) else {
            return false;
        };
        if self.check_dir().is_err() {
            return false;
        }
        // Each level made `0700`, the cache directory first.
        let made = path
            .parent()
            .and_then(Path::parent)
            .map(|blobs| {
                self.dir
                    .as_deref()
                    .map_or(Ok(()), create_private_dir)
                    .and_then(|()| create_private_dir(blobs))
            })
            .unwrap_or(Ok(()));
        match made.and_then(|()| write_private(&path, bytes)) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(blob = %path.display(), "cannot keep fetched blob: {e}");
                false
            }
        }
    }
}

/// What [`CompiledCache::lookup`] found.
pub enum Lookup<T = Component> {
    /// A valid entry.
    Hit(T),
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
pub(crate) struct ShaHasher(pub(crate) Sha256);

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
    key_with(engine.wasmtime(), digest)
}

fn key_with(engine: &wasmtime::Engine, digest: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"toolgate-cwasm-v2\0");
    h.update(digest.as_bytes());
    h.update(b"\0");
    h.update(engine_hash(engine));
    hex(&h.finalize())
}

/// SHA-256 of the engine's compatibility hash: equal for engines whose
/// compiled code is interchangeable.
fn engine_hash(engine: &wasmtime::Engine) -> [u8; 32] {
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    h.0.finalize().into()
}

/// The first bytes of every entry: a format tag, the SHA-256 of the
/// component the entry was compiled from, and the engine's hash.
struct Header([u8; HEADER_LEN]);

const TAG: &[u8; 16] = b"toolgate-cwasm2\0";
const HEADER_LEN: usize = TAG.len() + 32 + 32;

impl Header {
    fn new(engine: &wasmtime::Engine, digest: &str) -> Header {
        let mut bytes = [0u8; HEADER_LEN];
        bytes[..TAG.len()].copy_from_slice(TAG);
        // The digest is hex; hash it again so the header is fixed-size
        // whatever form it came in.
        bytes[TAG.len()..TAG.len() + 32].copy_from_slice(&Sha256::digest(digest.as_bytes()));
        bytes[TAG.len() + 32..].copy_from_slice(&engine_hash(engine));
        Header(bytes)
    }

    /// Why `found` is not this header, if it is not.
    fn mismatch(&self, found: &[u8]) -> Option<&'static str> {
        if found.get(..TAG.len()) != Some(&self.0[..TAG.len()]) {
            Some("not a toolgate cache entry of this format")
        } else if found.get(TAG.len()..TAG.len() + 32) != Some(&self.0[TAG.len()..TAG.len() + 32]) {
            Some("compiled from another component (an entry copied under the wrong key)")
        } else if found.get(TAG.len() + 32..HEADER_LEN) != Some(&self.0[TAG.len() + 32..]) {
            Some("compiled by an engine with other settings")
        } else {
            None
        }
    }
}

/// Refuses `path` unless it is owned by this process's user and writable
/// by no one else. A missing path is fine when `missing_ok`.
#[cfg(unix)]
pub(crate) fn check_private(path: &Path, missing_ok: bool) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Read {
                path: path.into(),
                source,
            });
        }
    };
    check_owner_and_mode(path, meta.uid(), meta.mode())
}

#[cfg(unix)]
pub(crate) fn check_owner_and_mode(path: &Path, uid: u32, mode: u32) -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let problem = if uid != me {
        format!("is owned by user {uid}, not by user {me} that toolgate runs as")
    } else if mode & 0o022 != 0 {
        format!(
            "is writable by {} (mode {:o})",
            match (mode & 0o020 != 0, mode & 0o002 != 0) {
                (true, true) => "its group and others",
                (true, false) => "its group",
                _ => "others",
            },
            mode & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(Error::UnsafeCache {
        path: path.into(),
        message: format!(
            "{problem}; its entries are native code toolgate runs as is, so it must be \
             writable only by toolgate's user (chmod go-w, or choose another \
             TOOLGATE_CACHE_DIR / --cache-dir)"
        ),
    })
}

#[cfg(not(unix))]
pub(crate) fn check_private(_: &Path, _: bool) -> Result<(), Error> {
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The largest entry read: 8× the largest component the registry reads
/// (64 MiB). A larger file in the cache directory is not a valid entry; it
/// is deleted unread, never read whole.
pub const MAX_ENTRY_BYTES: u64 = 512 << 20;

/// `Ok(None)`: no entry. `Err`: an entry that must be deleted (anything
/// but a regular file, over [`MAX_ENTRY_BYTES`], unsafe, or invalid).
fn read_entry<T>(
    entry: &Path,
    header: &Header,
    deserialize: impl FnOnce(&[u8]) -> wasmtime::Result<T>,
) -> Result<Option<T>, String> {
    // Opened without blocking (a FIFO put here cannot stall a load), its
    // type, owner, mode and size read on the opened descriptor.
    let (file, stat) = match crate::load::files::open_nonblocking(entry) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    if !crate::load::files::is_regular(&stat) {
        return Err("not a regular file".into());
    }
    #[cfg(unix)]
    check_owner_and_mode(entry, stat.st_uid, stat.st_mode).map_err(|e| e.to_string())?;
    let data = match crate::load::files::read_capped(file, entry, MAX_ENTRY_BYTES) {
        Ok(data) => data,
        Err(Error::TooLarge { limit, .. }) => {
            return Err(format!("larger than the cap of {limit} bytes"));
        }
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    let Some(split) = data.len().checked_sub(32) else {
        return Err("shorter than its checksum".into());
    };
    let (signed, sum) = data.split_at(split);
    if Sha256::digest(signed).as_slice() != sum {
        return Err("checksum mismatch".into());
    }
    if let Some(why) = header.mismatch(signed) {
        return Err(why.into());
    }
    let payload = &signed[HEADER_LEN..];
    // `deserialize` (`Component::deserialize`, `Module::deserialize`) runs
    // the native code in `payload` as is, so it must be what `serialize`
    // produced. It is: the entry's trailing SHA-256 matches, its header
    // names these very bytes and this engine, entries are only ever written
    // by `write_entry` (serialize, checksum, temp file, rename), and the
    // cache directory and the entry were just checked to be writable only
    // by toolgate's user. wasmtime itself still refuses an entry from
    // another wasmtime version or engine configuration (header and
    // compatibility checks), which the key already rules out.
    deserialize(payload).map(Some).map_err(|e| format!("{e:#}"))
}

fn write_entry(code: &[u8], entry: &Path, header: &Header) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + code.len() + 32);
    bytes.extend_from_slice(&header.0);
    bytes.extend_from_slice(code);
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    write_private(entry, &bytes)
}

/// Writes `bytes` to `path` whole or not at all (a temporary file, `0600`,
/// synced, renamed into place), creating its directory `0700`.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_private_with(path, bytes, true)
}

/// [`write_private`], the temporary file synced to disk before the rename
/// only when `sync` (without, the file is still whole or absent after the
/// process dies; only a power loss may lose the latest write).
pub(crate) fn write_private_with(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Creates `dir` (and missing parents); the directory itself `0700`.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// How long a compile failure is remembered on disk: after that the
/// component is compiled again (say, a compile that ran out of time on a
/// machine busy then).
pub const FAILURE_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// A compile that failed, remembered on disk by [`CompiledCache`] so a
/// restart does not compile the same bytes again: not a component that
/// compiles, or one past the compile's time or memory bound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CompileFailure {
    /// SHA-256 (hex) of the component.
    pub digest: String,
    /// Whether it went past a bound ([`Error::CompileBound`]) rather than
    /// not compiling ([`Error::Compile`]).
    pub bound: bool,
    /// What the compile said.
    pub message: String,
    /// When it failed, in seconds since the Unix epoch.
    pub at: u64,
}

impl CompileFailure {
    /// The failure `e` of the component with SHA-256 `digest`, if it is
    /// one worth remembering (the component's doing, not the host's).
    pub fn of(digest: &str, e: &Error) -> Option<CompileFailure> {
        let (bound, message) = match e {
            Error::Compile { message, .. } => (false, message),
            Error::CompileBound { message, .. } => (true, message),
            _ => return None,
        };
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Some(CompileFailure {
            digest: digest.to_string(),
            bound,
            message: message.clone(),
            at,
        })
    }

    /// The error of loading `path` again, saying it is remembered.
    pub fn error(&self, path: &Path) -> Error {
        let message = format!(
            "{} (remembered from an earlier compile: compiled again when the file, the \
             compile limits or toolgate change, after 24 h, or when failures are forgotten)",
            self.message
        );
        let path = path.to_path_buf();
        if self.bound {
            Error::CompileBound { path, message }
        } else {
            Error::Compile { path, message }
        }
    }
}

/// Largest failure file read: a message is at most a few KiB.
const MAX_FAILURE_BYTES: u64 = 64 << 10;

impl CompiledCache {
    /// The failure file of the component with SHA-256 `digest` compiled
    /// under `engine` with `settings` (the compiler and its bounds, in any
    /// stable form): a change to any of them, or to toolgate's version,
    /// is another file.
    fn failure_path(&self, engine: &Engine, digest: &str, settings: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut h = Sha256::new();
        h.update(b"toolgate-failed-v1\0");
        h.update(env!("CARGO_PKG_VERSION").as_bytes());
        h.update(b"\0");
        h.update(key(engine, digest).as_bytes());
        h.update(b"\0");
        h.update(settings.as_bytes());
        Some(dir.join(format!("{}.failed", hex(&h.finalize()))))
    }

    /// The compile failure remembered for the component with SHA-256
    /// `digest` under `engine` and `settings`, if any within
    /// `FAILURE_TTL`; an expired or unusable record is deleted.
    /// Blocking.
    pub fn remembered_failure(
        &self,
        engine: &Engine,
        digest: &str,
        settings: &str,
    ) -> Option<CompileFailure> {
        let path = self.failure_path(engine, digest, settings)?;
        self.check_dir().ok()?;
        match read_failure(&path) {
            Ok(None) => None,
            Ok(Some(f)) if f.digest == digest && !expired(f.at) => Some(f),
            Ok(Some(_)) => {
                let _ = std::fs::remove_file(&path);
                None
            }
            Err(why) => {
                tracing::warn!(entry = %path.display(), "compile failure record unusable, deleted: {why}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Remembers `failure` of the component compiled under `engine` and
    /// `settings` (see [`CompiledCache::remembered_failure`]); a failure
    /// to write is logged, never fatal. Blocking.
    pub fn remember_failure(&self, engine: &Engine, settings: &str, failure: &CompileFailure) {
        let Some(path) = self.failure_path(engine, &failure.digest, settings) else {
            return;
        };
        if self.check_dir().is_err() {
            return;
        }
        let written = serde_json::to_vec(failure)
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_private(&path, &bytes));
        if let Err(e) = written {
            tracing::warn!(entry = %path.display(), "cannot write compile failure record: {e}");
        }
    }

    /// Forgets every compile failure remembered on disk: each is compiled
    /// again when next loaded. Blocking.
    pub fn forget_failures(&self) {
        let Some(dir) = &self.dir else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "failed")
                && let Err(e) = std::fs::remove_file(&path)
            {
                tracing::warn!(entry = %path.display(), "cannot delete compile failure record: {e}");
            }
        }
    }
}

fn expired(at: u64) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // A record from the future (a clock set back) is not trusted either.
    at > now || now - at >= FAILURE_TTL.as_secs()
}

/// `Ok(None)`: no record. `Err`: a record that must be deleted. Opened
/// without following a symlink or blocking on a FIFO; only a small regular
/// file owned by toolgate's user is read.
fn read_failure(path: &Path) -> Result<Option<CompileFailure>, String> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK,
    );
    let file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_FAILURE_BYTES {
        return Err(format!("larger than {MAX_FAILURE_BYTES} bytes"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        check_owner_and_mode(path, meta.uid(), meta.mode()).map_err(|e| e.to_string())?;
    }
    use std::io::Read;
    let mut data = Vec::new();
    file.take(MAX_FAILURE_BYTES)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|e| format!("not a compile failure record: {e}"))
}
