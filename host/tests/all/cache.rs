//! The compiled-component cache: hit on restart, corrupt entries rebuilt,
//! disabled means nothing on disk.

use std::path::{Path, PathBuf};

use serde_json::json;
use toolgate::{CacheStats, CompiledCache};
use toolgate_tests::{NO_EMAIL, SCRIPTED, SQL_GUARD};

use crate::reload::open;
use crate::*;

fn plugins() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(SQL_GUARD, dir.path().join("sql.wasm")).expect("copy");
    dir
}

/// The cache's entries (without `admitted/`, where the registry keeps
/// the order its tenants were admitted in, and `functions/`, the
/// per-function store).
fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| !p.ends_with("admitted") && !p.ends_with("functions"));
    v.sort();
    v
}

async fn still_guards(reg: &toolgate::Registry) {
    let d = reg
        .plugin_set()
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
        assert!(reg.plugin_set().errors.is_empty(), "{what}");
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
async fn an_entry_copied_under_another_components_key_is_rebuilt() {
    let dir = plugins();
    std::fs::copy(NO_EMAIL, dir.path().join("no-email.wasm")).expect("copy");
    let cache = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path(), Some(cache.path())).await);
    let c = CompiledCache::at(cache.path());
    let entry_of = |file: &str| {
        let digest = toolgate::digest(&std::fs::read(file).expect("read"));
        c.entry_path(&engine(), &digest).expect("path")
    };
    let (sql, no_email) = (entry_of(SQL_GUARD), entry_of(NO_EMAIL));
    assert!(sql.is_file() && no_email.is_file());
    // no-email's compiled code under sql-guard's key: checksum intact.
    std::fs::copy(&no_email, &sql).expect("copy");
    let reg = open(dir.path(), Some(cache.path())).await;
    assert_eq!(
        reg.cache_stats(),
        CacheStats {
            hits: 1,
            misses: 1,
            rebuilt: 1
        }
    );
    // sql-guard's own code runs (no-email would let the DELETE through).
    still_guards(&reg).await;
    // And its entry is its own again.
    drop(reg);
    let again = open(dir.path(), Some(cache.path())).await;
    assert_eq!(again.cache_stats().hits, 2);
    still_guards(&again).await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_cache_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = plugins();
    let cache = tempfile::tempdir().expect("tempdir");
    drop(open(dir.path(), Some(cache.path())).await);
    assert_eq!(entries(cache.path()).len(), 1);
    for mode in [0o777, 0o775, 0o757] {
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
        let c = CompiledCache::at(cache.path());
        let refused = c.check_dir().expect_err("refused").to_string();
        assert!(refused.contains("writable by"), "{refused}");
        assert!(
            refused.contains(&cache.path().display().to_string()),
            "{refused}"
        );
        // The valid entry in it is not loaded: everything is compiled.
        let reg = open(dir.path(), Some(cache.path())).await;
        assert_eq!(
            reg.cache_stats(),
            CacheStats {
                hits: 0,
                misses: 1,
                rebuilt: 0
            },
            "mode {mode:o}"
        );
        still_guards(&reg).await;
    }
    // An entry others may write is refused too, even in a private directory.
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let entry = entries(cache.path()).remove(0);
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let reg = open(dir.path(), Some(cache.path())).await;
    assert_eq!(reg.cache_stats().hits, 0);
    assert_eq!(reg.cache_stats().rebuilt, 1);
    // Rewritten privately: the next start hits.
    let mode = std::fs::metadata(&entry)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    assert_eq!(
        open(dir.path(), Some(cache.path()))
            .await
            .cache_stats()
            .hits,
        1
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_cache_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = plugins();
    let parent = tempfile::tempdir().expect("tempdir");
    let cache = parent.path().join("a/b/toolgate");
    drop(open(dir.path(), Some(&cache)).await);
    let mode = std::fs::metadata(&cache)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    assert_eq!(open(dir.path(), Some(&cache)).await.cache_stats().hits, 1);
}

#[cfg(unix)]
#[test]
fn the_binary_warns_about_an_unsafe_cache() {
    use std::os::unix::fs::PermissionsExt;
    let dir = plugins();
    let cache = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["list", "--plugins", &dir.path().display().to_string()])
        .args(["--cache-dir", &cache.path().display().to_string()])
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("writable by its group and others"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&cache.path().display().to_string()),
        "{stderr}"
    );
    assert!(entries(cache.path()).is_empty(), "nothing written");
}

/// Runs `toolgate list` on `dir` with the cache in `cache`; returns its
/// standard error. Fails — rather than hanging the suite — if it does not
/// end within a generous bound: a read that blocks never ends.
#[cfg(unix)]
fn list_with_cache(dir: &Path, cache: &Path) -> String {
    use std::io::Read;
    let mut child = crate::KillOnDrop::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["list", "--plugins", &dir.display().to_string()])
            .args(["--cache-dir", &cache.display().to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped()),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`toolgate list` did not end: a cache read blocked");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("stderr");
    }
    assert!(status.success(), "{status}: {stderr}");
    stderr
}

/// Whatever is in the cache directory in an entry's place is checked on
/// the opened descriptor before a byte is read: a FIFO (which would block
/// a plain open for ever) is refused at once, a file over the entry cap
/// (sparse: 512 MiB of nothing) is refused by its size, unread; each is
/// replaced by a valid entry that the next start hits.
#[cfg(unix)]
#[test]
fn a_fifo_or_an_oversized_cache_entry_is_refused_unread() {
    let dir = plugins();
    let cache = tempfile::tempdir().expect("tempdir");
    list_with_cache(dir.path(), cache.path());
    let entry = entries(cache.path()).remove(0);

    std::fs::remove_file(&entry).expect("rm");
    crate::tenant_files::mkfifo(&entry);
    let stderr = list_with_cache(dir.path(), cache.path());
    assert!(stderr.contains("not a regular file"), "{stderr}");
    assert!(entry.is_file(), "rebuilt as a regular file");

    std::fs::remove_file(&entry).expect("rm");
    std::fs::File::create(&entry)
        .expect("create")
        .set_len(toolgate::cache::MAX_ENTRY_BYTES + 1)
        .expect("sparse");
    let stderr = list_with_cache(dir.path(), cache.path());
    assert!(stderr.contains("larger than the cap of"), "{stderr}");
    let rebuilt = std::fs::metadata(&entry).expect("entry").len();
    assert!(rebuilt < 1 << 20, "rebuilt: {rebuilt} bytes");

    let stderr = list_with_cache(dir.path(), cache.path());
    assert!(
        !stderr.contains("unusable"),
        "the next start hits: {stderr}"
    );
    assert_eq!(entries(cache.path()), [entry]);
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

/// The documented default location (docs: `$TOOLGATE_CACHE_DIR`, `off`
/// or empty: none; else `$XDG_CACHE_HOME/toolgate`; else
/// `$HOME/.cache/toolgate`; else none), each case run as `toolgate list`
/// in an environment of its own: the entry lands where the docs say and
/// nowhere else.
#[test]
fn default_location_follows_the_environment() {
    let dir = plugins();
    let root = tempfile::tempdir().expect("tempdir");
    let (own, xdg, home) = (
        root.path().join("own"),
        root.path().join("xdg"),
        root.path().join("home"),
    );
    let everywhere = [
        own.clone(),
        xdg.join("toolgate"),
        home.join(".cache/toolgate"),
    ];
    let own_text = own.display().to_string();
    let (xdg_text, home_text) = (xdg.display().to_string(), home.display().to_string());
    // (the environment, where the entry must be: none when disabled)
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a Path>);
    let cases: [Case; 7] = [
        (
            &[
                ("TOOLGATE_CACHE_DIR", &own_text),
                ("XDG_CACHE_HOME", &xdg_text),
                ("HOME", &home_text),
            ],
            Some(&everywhere[0]),
        ),
        (
            &[
                ("TOOLGATE_CACHE_DIR", "off"),
                ("XDG_CACHE_HOME", &xdg_text),
                ("HOME", &home_text),
            ],
            None,
        ),
        (
            &[
                ("TOOLGATE_CACHE_DIR", ""),
                ("XDG_CACHE_HOME", &xdg_text),
                ("HOME", &home_text),
            ],
            None,
        ),
        (
            &[("XDG_CACHE_HOME", &xdg_text), ("HOME", &home_text)],
            Some(&everywhere[1]),
        ),
        (
            &[("XDG_CACHE_HOME", ""), ("HOME", &home_text)],
            Some(&everywhere[2]),
        ),
        (&[("HOME", &home_text)], Some(&everywhere[2])),
        (&[("HOME", "")], None),
    ];
    for (env, expected) in cases {
        for place in &everywhere {
            let _ = std::fs::remove_dir_all(place);
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["list", "--plugins", &dir.path().display().to_string()])
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .expect("run");
        assert!(out.status.success(), "{env:?}: {out:?}");
        for place in &everywhere {
            let written = !entries(place).is_empty();
            assert_eq!(
                written,
                Some(place.as_path()) == expected,
                "{env:?}: entries in {}",
                place.display()
            );
        }
    }
}

/// `toolgate wizer`'s core modules: compiled once, then read back from
/// `modules/` (the same code: the module runs), and an entry that is not
/// what was written is rebuilt, never run.
#[test]
fn core_modules_are_compiled_once_and_a_bad_entry_is_rebuilt() {
    let wasm = wat::parse_str(r#"(module (func (export "answer") (result i32) i32.const 42))"#)
        .expect("wat");
    let engine = wasmtime::Engine::default();
    let dir = tempfile::tempdir().expect("tempdir");
    let answer = |module: &wasmtime::Module| {
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, module, &[]).expect("instance");
        instance
            .get_typed_func::<(), i32>(&mut store, "answer")
            .expect("export")
            .call(&mut store, ())
            .expect("call")
    };
    let cache = CompiledCache::at(dir.path());
    let first = cache
        .load_or_compile_module(&engine, &wasm)
        .expect("compile");
    assert_eq!(answer(&first), 42);
    let stored: Vec<PathBuf> = std::fs::read_dir(dir.path().join("modules"))
        .expect("modules/")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(cache.stats().misses, 1);

    let again = CompiledCache::at(dir.path());
    assert_eq!(
        answer(&again.load_or_compile_module(&engine, &wasm).expect("load")),
        42
    );
    assert_eq!(
        again.stats(),
        CacheStats {
            hits: 1,
            misses: 0,
            rebuilt: 0
        }
    );

    let good = std::fs::read(&stored[0]).expect("read");
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    std::fs::write(&stored[0], flipped).expect("write");
    let rebuilt = CompiledCache::at(dir.path());
    assert_eq!(
        answer(
            &rebuilt
                .load_or_compile_module(&engine, &wasm)
                .expect("rebuild")
        ),
        42
    );
    assert_eq!(
        rebuilt.stats(),
        CacheStats {
            hits: 0,
            misses: 1,
            rebuilt: 1
        }
    );
    assert_eq!(
        std::fs::read(&stored[0]).expect("read"),
        good,
        "written again whole"
    );

    // Another module is another entry.
    let other = wat::parse_str(r#"(module (func (export "answer") (result i32) i32.const 7))"#)
        .expect("wat");
    assert_eq!(
        answer(
            &rebuilt
                .load_or_compile_module(&engine, &other)
                .expect("other")
        ),
        7
    );
}
