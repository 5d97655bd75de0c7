//! The compiled-component cache: hit on restart, corrupt entries rebuilt,
//! disabled means nothing on disk.

use std::path::{Path, PathBuf};

use serde_json::json;
use toolgate::cache::{CacheStats, CompiledCache};
use toolgate_tests::{SCRIPTED, SQL_GUARD};

use crate::reload::open;
use crate::*;

fn plugins() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("sql.wasm")).expect("copy");
    dir
}

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

async fn still_guards(reg: &toolgate::Registry) {
    let d = reg
        .snapshot()
        .chain(None)
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM t"})),
            &no_state(),
        )
        .await;
    assert!(d.result.is_some(), "{:?}", d.trace);
}

#[tokio::test]
async fn restart_hits_the_cache_and_compiles_nothing() {
    let dir = plugins();
    let cache = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path(), Some(cache.path())).await;
    assert_eq!(
        first.cache_stats(),
        CacheStats {
            hits: 0,
            misses: 1,
            rebuilt: 0
        }
    );
    let files = entries(cache.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].extension().is_some_and(|x| x == "cwasm"));
    drop(first);

    // A new registry, on a new engine: the "restart".
    let second = open(dir.path(), Some(cache.path())).await;
    assert_eq!(
        second.cache_stats(),
        CacheStats {
            hits: 1,
            misses: 0,
            rebuilt: 0
        }
    );
    still_guards(&second).await;
    // The same component under a second name (a tenant's copy) is one entry.
    std::fs::create_dir_all(dir.path().join("tenants/acme")).expect("mkdir");
    std::fs::copy(SQL_GUARD, dir.path().join("tenants/acme/sql.wasm")).expect("copy");
    let r = second.reload().await.expect("reload");
    assert!(r.compiled.is_empty(), "{r:?}");
    assert_eq!(entries(cache.path()).len(), 1);
}

#[tokio::test]
async fn a_reload_of_new_bytes_stores_them_and_a_revert_hits() {
    let dir = plugins();
    let cache = tempfile::tempdir().expect("tempdir");
    let reg = open(dir.path(), Some(cache.path())).await;
    std::fs::copy(SCRIPTED, dir.path().join("sql.wasm")).expect("copy");
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.compiled.len(), 1);
    assert_eq!(entries(cache.path()).len(), 2);
    // Back to the first version: its compiled code is on disk.
    std::fs::copy(SQL_GUARD, dir.path().join("sql.wasm")).expect("copy");
    let r = reg.reload().await.expect("reload");
    assert!(r.compiled.is_empty(), "{r:?}");
    assert_eq!(r.cache_hits.len(), 1);
    still_guards(&reg).await;
}

#[tokio::test]
async fn corrupted_entries_are_deleted_and_rebuilt() {
    let dir = plugins();
    let cache = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path(), Some(cache.path())).await);
    let entry = entries(cache.path()).remove(0);
    let good = std::fs::read(&entry).expect("read");

    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    let corruptions: [(&str, Vec<u8>); 4] = [
        ("a flipped byte", flipped),
        ("cut short", good[..good.len() / 3].to_vec()),
        ("empty", Vec::new()),
        ("garbage", b"definitely not native code".repeat(10)),
    ];
    for (what, bad) in corruptions {
        std::fs::write(&entry, &bad).expect("write");
        let reg = open(dir.path(), Some(cache.path())).await;
        assert_eq!(
            reg.cache_stats(),
            CacheStats {
                hits: 0,
                misses: 1,
                rebuilt: 1
            },
            "{what}"
        );
        assert!(reg.snapshot().errors.is_empty(), "{what}");
        still_guards(&reg).await;
        // Rewritten whole: the next start hits.
        assert_eq!(
            std::fs::read(&entry).expect("read").len(),
            good.len(),
            "{what}"
        );
        let again = open(dir.path(), Some(cache.path())).await;
        assert_eq!(again.cache_stats().hits, 1, "{what}");
    }
}

#[tokio::test]
async fn disabled_cache_writes_nothing() {
    let dir = plugins();
    let reg = open(dir.path(), None).await;
    assert_eq!(reg.cache().dir(), None);
    assert_eq!(reg.cache_stats().misses, 1);
    still_guards(&reg).await;
}

#[test]
fn key_is_stable_across_engines_and_follows_the_bytes() {
    let e = engine();
    let a = toolgate::cache::key(&e, "aa");
    assert_eq!(a, toolgate::cache::key(&engine(), "aa"));
    assert_ne!(a, toolgate::cache::key(&e, "ab"));
    let c = CompiledCache::at("/nonexistent");
    assert!(
        c.entry_path(&e, "aa")
            .expect("path")
            .ends_with(format!("{a}.cwasm"))
    );
}

#[test]
fn default_location_follows_the_environment() {
    // Read-only check of the documented order (the process environment is
    // shared by every test, so it is not modified here).
    let c = CompiledCache::from_env();
    match std::env::var_os("TOOLGATE_CACHE_DIR") {
        Some(v) if v.is_empty() || v == "off" => assert_eq!(c.dir(), None),
        Some(v) => assert_eq!(c.dir(), Some(Path::new(&v))),
        None => {
            if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
                assert_eq!(c.dir(), Some(Path::new(&x).join("toolgate").as_path()));
            } else if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                assert_eq!(
                    c.dir(),
                    Some(Path::new(&h).join(".cache/toolgate").as_path())
                );
            }
        }
    }
}
