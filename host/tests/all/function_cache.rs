//! The per-function compile cache (`<cache>/functions/`): a component never
//! compiled before reuses the functions an earlier compile of another one
//! stored; an unusable entry is a miss that changes nothing compiled; an
//! unsafe directory is not used.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use toolgate::{CompiledCache, Registry};
use toolgate_tests::{NO_EMAIL, SQL_GUARD};

use crate::reload::open;
use crate::*;

/// A plugin directory holding `program` as `name.wasm`.
fn plugins(program: &str, name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(program, dir.path().join(format!("{name}.wasm"))).expect("copy");
    dir
}

/// Every entry (regular file, not hidden) under `dir`, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if !e.file_name().to_string_lossy().starts_with('.') {
                // Hidden files are a shard's trim stamp or a writer's
                // temporary file, never an entry.
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The compiled component's cache entry (the only `.cwasm` in `cache`).
fn cwasm(cache: &Path) -> Vec<u8> {
    let entries: Vec<PathBuf> = std::fs::read_dir(cache)
        .expect("cache dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    std::fs::read(&entries[0]).expect("read entry")
}

/// Deletes the compiled components (not the functions), so the next
/// registry compiles.
fn forget_components(cache: &Path) {
    for e in std::fs::read_dir(cache).expect("cache dir").flatten() {
        if e.path().extension().is_some_and(|x| x == "cwasm") {
            std::fs::remove_file(e.path()).expect("remove");
        }
    }
}

async fn steers_delete(reg: &Registry, expect_steer: bool) {
    let d = reg
        .plugin_set()
        .chain(None)
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM t"})),
            &no_state(),
        )
        .await;
    assert_eq!(d.result.is_some(), expect_steer, "{:?}", d.trace);
    let d = reg
        .plugin_set()
        .chain(None)
        .steering(
            &steering("run_query", json!({"sql": "DELETE FROM t WHERE id = 1"})),
            &no_state(),
        )
        .await;
    assert!(d.result.is_none(), "{:?}", d.trace);
}

#[tokio::test]
async fn a_new_component_reuses_the_functions_another_one_stored() {
    // The control: no-email alone, in an empty store, finds only its own
    // repeated functions.
    let alone = tempfile::tempdir().expect("tempdir");
    let no_email = plugins(NO_EMAIL, "no-email");
    let control = open(no_email.path(), Some(alone.path())).await;
    let baseline = control.cache().function_stats();
    assert!(baseline.misses > 0, "{baseline:?}");
    assert_eq!(baseline.unusable, 0);

    // sql-guard first, then no-email (another component, the same SDK and
    // libraries) in the same store.
    let cache = tempfile::tempdir().expect("tempdir");
    let first = open(plugins(SQL_GUARD, "sql").path(), Some(cache.path())).await;
    let stored = first.cache().function_stats();
    assert!(stored.misses > 0, "{stored:?}");
    assert!(!files_under(&cache.path().join("functions")).is_empty());
    let second = open(no_email.path(), Some(cache.path())).await;
    let reused = second.cache().function_stats();
    assert_eq!(
        reused.hits + reused.misses,
        baseline.hits + baseline.misses,
        "the same functions asked for: {reused:?} vs {baseline:?}"
    );
    assert!(
        reused.hits > baseline.hits && reused.misses < baseline.misses,
        "no-email after sql-guard: {reused:?}; alone: {baseline:?}"
    );
    // And it is the same guard: send_email is cancelled, run_query is not.
    let d = second
        .plugin_set()
        .chain(None)
        .steering(&steering("send_email", json!({})), &no_state())
        .await;
    assert!(d.result.is_some(), "{:?}", d.trace);
}

#[tokio::test]
async fn unusable_entries_are_misses_and_the_code_is_the_same() {
    let dir = plugins(SQL_GUARD, "sql");
    // The code compiled without the store: its `functions/` is writable by
    // others, so it is not used.
    let plain = tempfile::tempdir().expect("tempdir");
    let functions = plain.path().join("functions");
    std::fs::create_dir(&functions).expect("mkdir");
    std::fs::set_permissions(&functions, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let reg = open(dir.path(), Some(plain.path())).await;
    assert_eq!(reg.cache().function_stats(), Default::default());
    assert!(files_under(&functions).is_empty());
    steers_delete(&reg, true).await;
    let without = cwasm(plain.path());

    // With the store, empty: the same code.
    let cache = tempfile::tempdir().expect("tempdir");
    let cold = open(dir.path(), Some(cache.path())).await;
    assert!(cold.cache().function_stats().misses > 0);
    assert_eq!(
        cwasm(cache.path()),
        without,
        "a cold store changed the code"
    );
    drop(cold);

    // Every entry damaged: truncated, a byte of the code flipped, emptied,
    // the checksum flipped.
    let entries = files_under(&cache.path().join("functions"));
    assert!(entries.len() > 10, "{}", entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let mut bytes = std::fs::read(entry).expect("read");
        match i % 4 {
            0 => bytes.truncate(bytes.len() / 2),
            1 => {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x40;
            }
            2 => bytes.clear(),
            _ => {
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
            }
        }
        std::fs::write(entry, &bytes).expect("write");
    }
    forget_components(cache.path());
    let damaged = open(dir.path(), Some(cache.path())).await;
    let stats = damaged.cache().function_stats();
    assert!(stats.unusable > 0, "{stats:?}");
    assert_eq!(
        cwasm(cache.path()),
        without,
        "damaged entries changed the code"
    );
    steers_delete(&damaged, true).await;
    drop(damaged);

    // The damaged entries were replaced: the next compile mostly hits.
    // (Not all: cranelift's key of a few functions differs from one
    // compile of the same component to the next.)
    forget_components(cache.path());
    let again = open(dir.path(), Some(cache.path())).await;
    let stats = again.cache().function_stats();
    assert!(stats.hits > 4 * stats.misses, "{stats:?}");
    assert_eq!(cwasm(cache.path()), without);
}

#[tokio::test]
async fn a_cache_others_can_write_keeps_no_functions() {
    let dir = plugins(SQL_GUARD, "sql");
    let cache = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o770)).expect("chmod");
    let cached = CompiledCache::at(cache.path());
    assert!(cached.check_dir().is_err());
    assert_eq!(cached.function_dir(), None);
    let reg = open(dir.path(), Some(cache.path())).await;
    assert_eq!(reg.cache().function_stats(), Default::default());
    assert!(
        files_under(cache.path()).is_empty(),
        "{:?}",
        files_under(cache.path())
    );
    steers_delete(&reg, true).await;
}

#[test]
fn a_compile_child_reuses_the_store_and_list_counts_it() {
    // `toolgate list` compiles in a child process: the child is given the
    // store and its counts reach the parent.
    let cache = tempfile::tempdir().expect("tempdir");
    let list = |program: &str, name: &str| -> serde_json::Value {
        let dir = plugins(program, name);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args([
                "list",
                "--cache-dir",
                &cache.path().display().to_string(),
                "--plugins",
                &dir.path().display().to_string(),
            ])
            .output()
            .expect("run toolgate");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let first = list(SQL_GUARD, "sql");
    let functions = &first["cache"]["functions"];
    assert!(functions["misses"].as_u64() > Some(0), "{first}");
    let second = list(NO_EMAIL, "no-email");
    let functions = &second["cache"]["functions"];
    assert!(functions["hits"].as_u64() > Some(0), "{second}");
    assert_eq!(functions["unusable"], 0, "{second}");
}
