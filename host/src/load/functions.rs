//! The per-function compile cache: cranelift's result for each function
//! of a component, on disk in the compiled cache's directory
//! (`<cache>/functions/`), so a component that was never compiled but
//! shares most of its functions with one that was — an edited JavaScript,
//! Python or Go guard: the same language runtime, a few functions changed
//! — compiles only the functions that changed.
//!
//! wasmtime asks the store ([`wasmtime::CacheStore`]) for each function by
//! a key cranelift computes over the function's IR with the names of what
//! it calls abstracted away, so the same function hits even when its index
//! in the module moved. An entry's file name is SHA-256 over a format tag,
//! the compiling engine's
//! [`precompile_compatibility_hash`](wasmtime::Engine::precompile_compatibility_hash)
//! (which covers wasmtime's version), and cranelift's key (which covers
//! cranelift's): an entry of another
//! wasmtime version or engine setting is never asked for. It lives in one
//! of 256 shards (`functions/ab/cdef...`, the name's first two hex digits)
//! and holds a header (the format tag and its own name), cranelift's bytes,
//! and a SHA-256 of both; it is written to a temporary file in its shard
//! and renamed into place, so concurrent compiles — threads of one, or
//! other processes — never see half an entry.
//!
//! **A miss never changes what is compiled, only how fast.** An entry that
//! is missing, truncated, fails its checksum, names another key, is not a
//! regular file owned by toolgate's user and writable by no one else, or
//! is larger than [`MAX_FUNCTION_BYTES`], is a miss: the function is
//! compiled, and the unusable entry is deleted (counted as `unusable`).
//!
//! **Entries are native code**, spliced as is into the components compiled
//! from them, exactly like the compiled cache's `.cwasm` entries: the same
//! rules keep writers out. The store is used only when the compiled cache
//! is enabled and its directory passes [`CompiledCache::check_dir`]
//! (owned by toolgate's user, writable by no one else; `functions/` and
//! its shards are created `0700`), and each entry is checked on its opened
//! descriptor before it is read.
//!
//! **Bounded.** Each shard holds at most [`SHARD_MAX_BYTES`] (so the store
//! at most [`FUNCTION_CACHE_MAX_BYTES`], 1 GiB): after a compile stored
//! entries, each shard it wrote to is trimmed to three quarters of its
//! bound, least recently used first (an entry's modification time is
//! refreshed when it is used and is more than a day old), unless a compile
//! trimmed it less than [`TRIM_EVERY`] ago (a shard can grow past its bound
//! by what compiles write in that time). Deleting the directory at any
//! time is safe.
//!
//! [`CompiledCache::check_dir`]: crate::load::cache::CompiledCache::check_dir

use std::borrow::Cow;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::load::cache::{ShaHasher, check_private, create_private_dir, hex, write_private_with};

/// The largest entry read: cranelift's result for one function. A larger
/// file is not a valid entry: it is deleted unread.
pub const MAX_FUNCTION_BYTES: u64 = 64 << 20;

/// The bound of the whole store: 256 shards of [`SHARD_MAX_BYTES`].
pub const FUNCTION_CACHE_MAX_BYTES: u64 = 1 << 30;

/// The bound of one shard (1/256 of [`FUNCTION_CACHE_MAX_BYTES`]).
pub const SHARD_MAX_BYTES: u64 = FUNCTION_CACHE_MAX_BYTES / 256;

/// How stale an entry's modification time may be before a use refreshes
/// it (the trim's "least recently used").
const REFRESH_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

const TAG: &[u8; 16] = b"toolgate-func-1\0";
const HEADER_LEN: usize = TAG.len() + 32;

/// Counters of the per-function store, summed over every compile of a
/// [`CompiledCache`](crate::load::cache::CompiledCache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FunctionStats {
    /// Functions whose compiled code came from the store.
    pub hits: u64,
    /// Functions compiled (and stored): no usable entry.
    pub misses: u64,
    /// Entries found unusable (truncated, corrupt, unsafe) and deleted;
    /// each also counts as a miss.
    pub unusable: u64,
}

impl FunctionStats {
    /// The line a compile child writes on its standard error after the
    /// compiled code, for its parent to count ([`FunctionStats::parse`]).
    pub fn line(&self) -> String {
        format!(
            "toolgate: function cache: {} hits, {} misses, {} unusable",
            self.hits, self.misses, self.unusable
        )
    }

    /// The counts in a compile child's standard error (see
    /// [`FunctionStats::line`]); zero when there is no such line.
    pub fn parse(err: &str) -> FunctionStats {
        let Some(rest) = err
            .lines()
            .find_map(|l| l.strip_prefix("toolgate: function cache: "))
        else {
            return FunctionStats::default();
        };
        let mut n = rest
            .split(", ")
            .map(|part| part.split(' ').next().and_then(|v| v.parse().ok()));
        let mut next = || n.next().flatten().unwrap_or(0);
        FunctionStats {
            hits: next(),
            misses: next(),
            unusable: next(),
        }
    }
}

/// [`FunctionStats`] counted as compiles go.
#[derive(Debug, Default)]
pub struct FunctionCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    unusable: AtomicU64,
}

impl FunctionCounters {
    /// The counts so far.
    pub fn get(&self) -> FunctionStats {
        FunctionStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            unusable: self.unusable.load(Ordering::Relaxed),
        }
    }

    /// Adds `s` (a compile child's counts).
    pub fn add(&self, s: FunctionStats) {
        self.hits.fetch_add(s.hits, Ordering::Relaxed);
        self.misses.fetch_add(s.misses, Ordering::Relaxed);
        self.unusable.fetch_add(s.unusable, Ordering::Relaxed);
    }
}

/// The on-disk per-function store of one compiling engine.
#[derive(Debug)]
pub struct FunctionStore {
    dir: PathBuf,
    /// SHA-256 of the engine's compatibility hash.
    engine: [u8; 32],
    counters: FunctionCounters,
    /// Which shards this store wrote to (a bit each), to trim.
    written: [AtomicU64; 4],
}

impl FunctionStore {
    /// The store in `dir` (the compiled cache's `functions/`, created
    /// `0700` with the cache if missing) for code compiled by `engine`;
    /// `None` when `dir`'s parent (the compiled cache) or `dir` itself is
    /// not private to toolgate's user, or cannot be made.
    pub fn open(dir: &Path, engine: &wasmtime::Engine) -> Option<Arc<FunctionStore>> {
        let cache = dir.parent()?;
        check_private(cache, true).ok()?;
        create_private_dir(cache).ok()?;
        create_private_dir(dir).ok()?;
        check_private(cache, false).ok()?;
        check_private(dir, false).ok()?;
        // The hash covers wasmtime's version too (its `module_version`).
        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        Some(Arc::new(FunctionStore {
            dir: dir.to_path_buf(),
            engine: h.0.finalize().into(),
            counters: FunctionCounters::default(),
            written: Default::default(),
        }))
    }

    /// The counts of this store's lookups so far.
    pub fn stats(&self) -> FunctionStats {
        self.counters.get()
    }

    /// The entry file name of cranelift's `key` (hex SHA-256).
    fn name(&self, key: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(TAG);
        h.update(self.engine);
        h.update(key);
        h.finalize().into()
    }

    fn path(&self, name: &[u8; 32]) -> PathBuf {
        let hex = hex(name);
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Trims each shard this store wrote to and no compile trimmed in the
    /// last [`TRIM_EVERY`]: at most [`SHARD_MAX_BYTES`] (down to three
    /// quarters of it when over), least recently used first; temporary
    /// files more than an hour old (a writer that died) go too. Blocking;
    /// errors are ignored (the next trim tries again).
    pub fn trim(&self) {
        for (word, bits) in self.written.iter().enumerate() {
            let bits = bits.swap(0, Ordering::Relaxed);
            for bit in 0..64 {
                if bits & (1 << bit) != 0 {
                    let shard = self.dir.join(format!("{:02x}", word * 64 + bit));
                    if trim_due(&shard) {
                        trim_shard(&shard);
                    }
                }
            }
        }
    }
}

impl wasmtime::CacheStore for FunctionStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let name = self.name(key);
        let path = self.path(&name);
        match read_entry(&path, &name) {
            Ok(Some(payload)) => {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                Some(Cow::Owned(payload))
            }
            Ok(None) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(why) => {
                tracing::debug!(entry = %path.display(), "function cache entry unusable, deleted: {why}");
                let _ = std::fs::remove_file(&path);
                self.counters.unusable.fetch_add(1, Ordering::Relaxed);
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let name = self.name(key);
        let mut bytes = Vec::with_capacity(HEADER_LEN + value.len() + 32);
        bytes.extend_from_slice(TAG);
        bytes.extend_from_slice(&name);
        bytes.extend_from_slice(&value);
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum);
        let shard = usize::from(name[0]);
        self.written[shard / 64].fetch_or(1 << (shard % 64), Ordering::Relaxed);
        // Not synced: after a power loss an entry may be missing or
        // truncated, which its checksum turns into a miss.
        let path = self.path(&name);
        match write_private_with(&path, &bytes, false) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(entry = %path.display(), "cannot write function cache entry: {e}");
                false
            }
        }
    }
}

/// `Ok(None)`: no entry. `Err`: an entry to delete. `Ok(Some)`: cranelift's
/// bytes of the entry named `name`.
fn read_entry(path: &Path, name: &[u8; 32]) -> Result<Option<Vec<u8>>, String> {
    let (file, stat) = match crate::load::files::open_nonblocking(path) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    if !crate::load::files::is_regular(&stat) {
        return Err("not a regular file".into());
    }
    #[cfg(unix)]
    crate::load::cache::check_owner_and_mode(path, stat.st_uid, stat.st_mode)
        .map_err(|e| e.to_string())?;
    let modified =
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(stat.st_mtime).unwrap_or(0));
    if modified.elapsed().is_ok_and(|age| age > REFRESH_AFTER) {
        let _ = file.set_modified(SystemTime::now());
    }
    let mut data = crate::load::files::read_capped(file, path, MAX_FUNCTION_BYTES)
        .map_err(|e| e.to_string())?;
    let Some(split) = data.len().checked_sub(32).filter(|&n| n >= HEADER_LEN) else {
        return Err("shorter than its header and checksum".into());
    };
    let (signed, sum) = data.split_at(split);
    if Sha256::digest(signed).as_slice() != sum {
        return Err("checksum mismatch".into());
    }
    if signed[..TAG.len()] != TAG[..] || signed[TAG.len()..HEADER_LEN] != name[..] {
        return Err("not this key's entry".into());
    }
    data.truncate(split);
    data.drain(..HEADER_LEN);
    Ok(Some(data))
}

/// How often a shard is trimmed at most. Listing a shard reads every
/// entry's metadata (a store near its bound holds ~250,000), which a
/// compile in an author's edit loop should not pay each time; what the
/// shard can grow past its bound in between is what compiles write in this
/// time, which their own time and memory bounds limit.
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

/// The file whose modification time is a shard's last trim.
const TRIMMED: &str = ".trimmed";

/// Whether `shard` was last trimmed more than [`TRIM_EVERY`] ago (or
/// never); if so, marks it trimmed now (the caller trims it).
fn trim_due(shard: &Path) -> bool {
    let stamp = shard.join(TRIMMED);
    let recent = std::fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < TRIM_EVERY));
    if recent {
        return false;
    }
    // A stamp that cannot be written: the shard is trimmed every time.
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&stamp)
        .and_then(|f| f.set_modified(SystemTime::now()));
    true
}

/// Trims one shard to its bound (see [`FunctionStore::trim`]).
fn trim_shard(shard: &Path) {
    let Ok(entries) = std::fs::read_dir(shard) else {
        return;
    };
    let now = SystemTime::now();
    let mut files = Vec::new();
    let mut total = 0u64;
    for entry in entries.filter_map(Result::ok) {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if !meta.is_file() || entry.file_name() == TRIMMED {
            continue;
        }
        let modified = meta.modified().unwrap_or(now);
        let stale_tmp = entry.file_name().to_string_lossy().starts_with('.')
            && now
                .duration_since(modified)
                .is_ok_and(|age| age > Duration::from_secs(3600));
        if stale_tmp {
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        total += meta.len();
        files.push((modified, meta.len(), entry.path()));
    }
    if total <= SHARD_MAX_BYTES {
        return;
    }
    files.sort();
    for (_, len, path) in files {
        if total <= SHARD_MAX_BYTES / 4 * 3 {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_over_its_bound_loses_its_least_recently_used_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shard = dir.path().join("ab");
        std::fs::create_dir(&shard).expect("mkdir");
        let old = SystemTime::now() - Duration::from_secs(3600);
        // Six entries of 1 MiB, the first the least recently used.
        for i in 0..6u64 {
            let path = shard.join(format!("entry{i}"));
            std::fs::write(&path, vec![0u8; 1 << 20]).expect("write");
            let file = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open");
            file.set_modified(old + Duration::from_secs(i))
                .expect("set time");
        }
        trim_shard(&shard);
        let mut left: Vec<String> = std::fs::read_dir(&shard)
            .expect("read")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // Down to three quarters of 4 MiB: the three most recent stay.
        assert_eq!(left, ["entry3", "entry4", "entry5"]);
        // Within the bound, nothing goes.
        trim_shard(&shard);
        assert_eq!(std::fs::read_dir(&shard).expect("read").count(), 3);
    }

    #[test]
    fn a_shard_is_trimmed_at_most_once_a_minute() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shard = dir.path().join("cd");
        std::fs::create_dir(&shard).expect("mkdir");
        assert!(trim_due(&shard), "never trimmed");
        assert!(!trim_due(&shard), "trimmed just now");
        // The stamp is not an entry, nor a dead writer's temporary file.
        let file = std::fs::File::options()
            .write(true)
            .open(shard.join(TRIMMED))
            .expect("open");
        let long_ago = SystemTime::now() - TRIM_EVERY - Duration::from_secs(7200);
        file.set_modified(long_ago).expect("set time");
        trim_shard(&shard);
        assert!(shard.join(TRIMMED).exists());
        assert!(trim_due(&shard), "last trimmed long ago");
    }

    #[test]
    fn a_childs_counts_survive_its_line() {
        let s = FunctionStats {
            hits: 18548,
            misses: 526,
            unusable: 3,
        };
        let err = format!("some warning\n{}\n", s.line());
        assert_eq!(FunctionStats::parse(&err), s);
        assert_eq!(FunctionStats::parse("nothing"), FunctionStats::default());
    }
}
