//! Tenants and hot reload: chains per tenant and their isolation; reload on
//! add, replace, remove and manifest edit; a broken replacement keeps the
//! old guard; no call lost or failed across many reloads; the watcher and
//! SIGHUP.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::CompiledCache;
use toolgate::event::Skip;
use toolgate::{Registry, RegistryOptions};
use toolgate_tests::{SCRIPTED, SQL_GUARD, STEERING_ONLY};

use crate::*;

/// Opens `dir` with a small engine and the cache in `cache` (or none).
pub async fn open(dir: &Path, cache: Option<&Path>) -> Registry {
    let options = RegistryOptions {
        cache: cache.map_or_else(CompiledCache::disabled, CompiledCache::at),
        ..Default::default()
    };
    Registry::open_with(engine(), dir, options)
        .await
        .expect("registry opens")
}

fn copy(from: &str, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    // The atomic-rename convention: write a dotfile, rename into place.
    let tmp = to.with_file_name(format!(
        ".{}.tmp",
        to.file_name().expect("name").to_string_lossy()
    ));
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

fn write(to: &Path, text: &str) {
    let tmp = to.with_file_name(format!(
        ".{}.tmp",
        to.file_name().expect("name").to_string_lossy()
    ));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, to).expect("rename");
}

const DELETE: &str = "DELETE FROM users";

async fn steer(
    reg: &Registry,
    tenant: Option<&str>,
    sql: &str,
) -> toolgate::Decision<Option<Skip>> {
    let set = reg.plugin_set();
    set.chain(tenant)
        .steering(&steering("run_query", json!({"sql": sql})), &no_state())
        .await
}

fn content(d: &toolgate::Decision<Option<Skip>>) -> Option<&str> {
    d.result.as_ref().map(|s| s.content.as_str())
}

fn names(d: &toolgate::Decision<Option<Skip>>) -> Vec<&str> {
    d.trace.iter().map(|t| t.plugin.as_str()).collect()
}

fn says(content: &str) -> String {
    format!(
        "[[plugin]]\nname = \"says\"\npath = \"says.wasm\"\nconfig = {{ steering = {{ action = \"skip\", content = \"{content}\" }} }}\n"
    )
}

/// Root: nothing global but a `tenants` restriction; acme and globex each
/// with a guard that refuses everything with its own name.
fn tenant_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for tenant in ["acme", "globex"] {
        let t = dir.path().join("tenants").join(tenant);
        copy(SCRIPTED, &t.join("says.wasm"));
        write(
            &t.join("toolgate.toml"),
            &says(&format!("{tenant} says no")),
        );
    }
    dir
}

#[tokio::test]
async fn tenant_calls_run_global_then_own_and_never_another_tenants() {
    let dir = tenant_tree();
    // A global guard that proceeds, so the order shows in the trace.
    copy(STEERING_ONLY, &dir.path().join("global.wasm"));
    let reg = open(dir.path(), None).await;
    let set = reg.plugin_set();
    assert!(set.errors.is_empty(), "{:?}", set.errors);

    let acme = steer(&reg, Some("acme"), "SELECT 1").await;
    assert_eq!(content(&acme), Some("acme says no"));
    assert_eq!(names(&acme), ["global", "acme/says"]);
    assert!(Arc::ptr_eq(
        &set.chain(Some("acme")).plugins()[1],
        &set.tenants["acme"].plugins()[0]
    ));

    let globex = steer(&reg, Some("globex"), "SELECT 1").await;
    assert_eq!(content(&globex), Some("globex says no"));

    // No tenant, or a tenant without a directory: the global chain only.
    for tenant in [None, Some("initech")] {
        let d = steer(&reg, tenant, "SELECT 1").await;
        assert_eq!(d.result, None);
        assert_eq!(names(&d), ["global"]);
    }
    // Every plugin of acme's chain is global or acme's own, never globex's.
    let globex_own = &set.tenants["globex"].plugins()[0];
    assert!(
        set.chain(Some("acme"))
            .plugins()
            .iter()
            .all(|p| !Arc::ptr_eq(p, globex_own))
    );
}

#[tokio::test]
async fn global_plugin_with_tenants_applies_only_to_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy(SQL_GUARD, &dir.path().join("sql.wasm"));
    write(
        &dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"sql.wasm\"\ntenants = [\"acme\"]\n",
    );
    let reg = open(dir.path(), None).await;
    assert!(content(&steer(&reg, Some("acme"), DELETE).await).is_some());
    assert_eq!(steer(&reg, Some("globex"), DELETE).await.result, None);
    assert_eq!(steer(&reg, None, DELETE).await.result, None);
    assert_eq!(reg.plugin_set().global_plugins.len(), 1);
}

#[tokio::test]
async fn invalid_tenant_directory_is_reported_and_skipped() {
    let dir = tenant_tree();
    copy(
        SQL_GUARD,
        &dir.path().join("tenants").join("bad name").join("x.wasm"),
    );
    let reg = open(dir.path(), None).await;
    let set = reg.plugin_set();
    assert_eq!(set.tenants.len(), 2);
    assert!(
        set.errors
            .iter()
            .any(|e| e.message.contains("invalid tenant name")),
        "{:?}",
        set.errors
    );
    assert!(toolgate::TenantName::try_from("../acme").is_err());
    assert!(toolgate::TenantName::try_from("a/b").is_err());
    assert!(toolgate::TenantName::try_from("acme-1.prod").is_ok());
}

#[tokio::test]
async fn reload_picks_up_add_replace_and_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = open(dir.path(), None).await;
    assert_eq!(steer(&reg, None, DELETE).await.result, None);
    let g0 = reg.plugin_set().generation;

    // Add.
    let file = dir.path().join("guard.wasm");
    copy(STEERING_ONLY, &file);
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.loaded, std::slice::from_ref(&file));
    assert!(r.generation > g0);
    let d = steer(&reg, None, DELETE).await;
    assert_eq!((d.result.clone(), names(&d)), (None, vec!["guard"]));

    // Replace: same path, new bytes.
    let before = reg.plugin_set();
    copy(SQL_GUARD, &file);
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.loaded, std::slice::from_ref(&file));
    assert!(content(&steer(&reg, None, DELETE).await).is_some());
    assert_ne!(
        before.global.plugins()[0].digest(),
        reg.plugin_set().global.plugins()[0].digest()
    );
    // The plugin set taken before still runs the old guard.
    let old = before
        .chain(None)
        .steering(&steering("run_query", json!({"sql": DELETE})), &no_state())
        .await;
    assert_eq!(old.result, None);

    // Nothing changed: nothing loaded, same generation, same plugin.
    let g = reg.plugin_set().generation;
    let r = reg.reload().await.expect("reload");
    assert!(r.loaded.is_empty() && r.removed.is_empty() && r.compiled.is_empty());
    assert_eq!(r.generation, g);

    // Remove.
    std::fs::remove_file(&file).expect("rm");
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.removed, [file]);
    assert!(reg.plugin_set().global.plugins().is_empty());
    assert_eq!(steer(&reg, None, DELETE).await.result, None);
}

#[tokio::test]
async fn reload_on_manifest_edit_relinks_without_compiling() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy(SCRIPTED, &dir.path().join("says.wasm"));
    write(&dir.path().join("toolgate.toml"), &says("first"));
    let reg = open(dir.path(), None).await;
    assert_eq!(content(&steer(&reg, None, "x").await), Some("first"));

    write(&dir.path().join("toolgate.toml"), &says("second"));
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.loaded.len(), 1);
    assert!(r.compiled.is_empty(), "config edit recompiled: {r:?}");
    assert_eq!(content(&steer(&reg, None, "x").await), Some("second"));

    // A manifest that stops listing the plugin removes it.
    write(&dir.path().join("toolgate.toml"), "");
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.removed.len(), 1);
    assert_eq!(steer(&reg, None, "x").await.result, None);

    // Deleting the manifest runs every *.wasm again.
    std::fs::remove_file(dir.path().join("toolgate.toml")).expect("rm");
    reg.reload().await.expect("reload");
    // (No config now: the scripted guard proceeds.)
    assert_eq!(names(&steer(&reg, None, "x").await), ["says"]);
}

#[tokio::test]
async fn tenant_added_and_removed_on_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = open(dir.path(), None).await;
    let t = dir.path().join("tenants").join("acme");
    copy(SQL_GUARD, &t.join("sql.wasm"));
    reg.reload().await.expect("reload");
    assert!(content(&steer(&reg, Some("acme"), DELETE).await).is_some());
    assert_eq!(steer(&reg, None, DELETE).await.result, None);
    std::fs::remove_dir_all(&t).expect("rm");
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.removed.len(), 1);
    assert_eq!(steer(&reg, Some("acme"), DELETE).await.result, None);
}

#[tokio::test]
async fn broken_replacement_keeps_the_old_guard_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("sql.wasm");
    copy(SQL_GUARD, &file);
    let reg = open(dir.path(), None).await;
    let digest = reg.plugin_set().global.plugins()[0].digest().to_string();

    for garbage in [
        &b"not wasm at all"[..],
        &std::fs::read(SQL_GUARD).expect("read")[..1000], // cut short
        &b"\0asm\x01\0\0\0"[..],                          // a core module
    ] {
        std::fs::write(&file, garbage).expect("write");
        let r = reg.reload().await.expect("reload");
        assert_eq!(r.errors.len(), 1, "{r:?}");
        assert_eq!(r.errors[0].path, file);
        assert!(r.loaded.is_empty() && r.removed.is_empty());
        let set = reg.plugin_set();
        assert_eq!(set.global.plugins()[0].digest(), digest);
        assert_eq!(set.errors.len(), 1);
        assert!(content(&steer(&reg, None, DELETE).await).is_some());
    }

    // A manifest that does not parse keeps the whole chain.
    write(&dir.path().join("toolgate.toml"), "[[plugin]]\npath = 3\n");
    let r = reg.reload().await.expect("reload");
    assert!(r.errors.iter().any(|e| e.path.ends_with("toolgate.toml")));
    assert!(content(&steer(&reg, None, DELETE).await).is_some());

    // Fixed: the new version loads and the errors clear.
    std::fs::remove_file(dir.path().join("toolgate.toml")).expect("rm");
    copy(SQL_GUARD, &file);
    let r = reg.reload().await.expect("reload");
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(reg.plugin_set().errors.is_empty());
}

/// Many callers run steering calls without pause while the manifest flips
/// the guard's answer between two versions, reload after reload. Every call
/// must answer with one of the two versions' verdicts — none lost, none
/// faulted — and both versions must have been seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloads_under_concurrent_calls_lose_and_fail_nothing() {
    const CALLERS: usize = 16;
    const RELOADS: usize = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    copy(SCRIPTED, &dir.path().join("says.wasm"));
    copy(STEERING_ONLY, &dir.path().join("other.wasm"));
    write(&dir.path().join("toolgate.toml"), &says("v0"));
    let reg = Arc::new(open(dir.path(), None).await);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let (reg, stop, started) = (Arc::clone(&reg), Arc::clone(&stop), Arc::clone(&started));
        callers.push(tokio::spawn(async move {
            let (mut seen, mut bad) = ([0u64; 2], Vec::new());
            while !stop.load(Ordering::Relaxed) {
                // A guard call never returns Pending: yield, or this loop
                // would hold its worker thread (and the timers) forever.
                tokio::task::yield_now().await;
                started.fetch_add(1, Ordering::Relaxed);
                let d = steer(&reg, None, "x").await;
                let faulted = d.trace.iter().any(|t| t.fault.is_some());
                match content(&d) {
                    Some("v0") if !faulted => seen[0] += 1,
                    Some("v1") if !faulted => seen[1] += 1,
                    _ => bad.push(format!("{:?} {:?}", d.result, d.trace)),
                }
            }
            (seen, bad)
        }));
    }
    // Each reload waits for calls to have started since the last one (a
    // count, not a time): every generation is called, however fast or slow
    // the machine.
    let calls_since = |from: u64| {
        let started = Arc::clone(&started);
        async move {
            while started.load(Ordering::Relaxed) < from + CALLERS as u64 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    let mut generations = Vec::new();
    for i in 0..RELOADS {
        calls_since(started.load(Ordering::Relaxed)).await;
        // Alternate a manifest edit with a component swap.
        write(
            &dir.path().join("toolgate.toml"),
            &says(&format!("v{}", (i + 1) % 2)),
        );
        if i % 3 == 0 {
            let other = if i % 2 == 0 { SQL_GUARD } else { STEERING_ONLY };
            copy(other, &dir.path().join("other.wasm"));
        }
        let r = reg.reload().await.expect("reload");
        assert!(r.errors.is_empty(), "{r:?}");
        generations.push(r.generation);
    }
    calls_since(started.load(Ordering::Relaxed)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut seen, mut bad) = ([0u64; 2], Vec::new());
    for c in callers {
        // Every caller's every call returned: no call was lost.
        let (s, b) = c.await.expect("caller");
        seen[0] += s[0];
        seen[1] += s[1];
        bad.extend(b);
    }
    assert!(
        bad.is_empty(),
        "{} bad calls, e.g. {:?}",
        bad.len(),
        &bad[..1]
    );
    // The manifest alternates v0 and v1: calls saw both versions.
    assert!(seen[0] > 0 && seen[1] > 0, "calls saw v0, v1: {seen:?}");
    let ok = seen[0] + seen[1];
    assert!(
        ok >= (RELOADS * CALLERS) as u64,
        "calls between every two reloads: {ok}"
    );
    generations.dedup();
    assert_eq!(
        generations.len(),
        RELOADS,
        "each reload swaps: {generations:?}"
    );
    eprintln!("{ok} calls across {RELOADS} reloads, none lost or failed");
}

/// Waits until `f` holds (60 s: a hang guard, not a measure).
async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !f().await {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The plugin set generation once it has not changed for 500 ms.
async fn settled(reg: &Registry) -> u64 {
    loop {
        let g = reg.plugin_set().generation;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if reg.plugin_set().generation == g {
            return g;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_reloads_on_add_replace_manifest_edit_and_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = Arc::new(open(dir.path(), None).await);
    let _watch = Arc::clone(&reg)
        .watch(Duration::from_millis(100))
        .expect("watch");

    // Add (atomic rename of a dotfile).
    let file = dir.path().join("sql.wasm");
    copy(SQL_GUARD, &file);
    wait_for("the new guard", async || {
        content(&steer(&reg, None, DELETE).await).is_some()
    })
    .await;

    // A dotfile or *.tmp alone triggers nothing. (First let any reload
    // still due to the add's own events happen.)
    let g = settled(&reg).await;
    std::fs::copy(STEERING_ONLY, dir.path().join(".hidden.wasm")).expect("copy");
    std::fs::copy(STEERING_ONLY, dir.path().join("x.wasm.tmp")).expect("copy");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(reg.plugin_set().generation, g);

    // Replace with an in-place (non-atomic) copy.
    std::fs::copy(STEERING_ONLY, &file).expect("copy");
    wait_for("the replacement", async || {
        let d = steer(&reg, None, DELETE).await;
        d.result.is_none() && names(&d) == ["sql"]
    })
    .await;

    // Manifest edit.
    copy(SCRIPTED, &dir.path().join("says.wasm"));
    write(&dir.path().join("toolgate.toml"), &says("watched"));
    wait_for("the manifest edit", async || {
        content(&steer(&reg, None, "x").await) == Some("watched")
    })
    .await;

    // A new tenant directory.
    copy(
        SQL_GUARD,
        &dir.path().join("tenants").join("acme").join("sql.wasm"),
    );
    wait_for("the new tenant", async || {
        reg.plugin_set().tenants.contains_key("acme")
    })
    .await;

    // Remove.
    std::fs::remove_file(dir.path().join("toolgate.toml")).expect("rm");
    std::fs::remove_file(dir.path().join("says.wasm")).expect("rm");
    wait_for("the removal", async || {
        names(&steer(&reg, None, "x").await) == ["sql"]
    })
    .await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = Arc::new(open(dir.path(), None).await);
    let task = Arc::clone(&reg).on_sighup().expect("sighup");
    copy(SQL_GUARD, &dir.path().join("sql.wasm"));
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    wait_for("the reload on SIGHUP", async || {
        content(&steer(&reg, None, DELETE).await).is_some()
    })
    .await;
    task.abort();
}

#[test]
fn relevant_ignores_dotfiles_and_partial_files() {
    use toolgate::watch::relevant;
    let root = Path::new("/p");
    for yes in [
        "/p/a.wasm",
        "/p/toolgate.toml",
        "/p/tenants/acme/b.wasm",
        "/p/tenants/acme",
    ] {
        assert!(relevant(root, Path::new(yes)), "{yes}");
    }
    for no in [
        "/p/.a.wasm",
        "/p/a.wasm.tmp",
        "/p/a.wasm.part",
        "/p/toolgate.toml~",
        "/p/.git/index",
        "/p/tenants/.acme/a.wasm",
        "/p/.toolgate.toml.swp",
    ] {
        assert!(!relevant(root, Path::new(no)), "{no}");
    }
}

#[allow(
    dead_code,
    reason = "keeps the Value import used when cfg(unix) is off"
)]
fn _unused(_: Value) {}

/// A tenant rewriting a file every 20 ms delays no other tenant's reload:
/// another tenant's new guard goes live while the churn goes on. The
/// churning tenant itself is loaded anyway once it has kept changing for
/// the watcher's bound, and that is counted.
///
/// The settle delay is 2 s, not a few writes' worth: on a busy machine the
/// churning thread may be kept off the CPU for a fraction of a second,
/// which would let its directory settle (and the bound never be reached);
/// a pause of 2 s in every one of the bound's 5 s windows is not expected
/// even there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_churn_delays_only_itself_and_only_up_to_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy(SQL_GUARD, &dir.path().join("tenants/quiet/sql.wasm"));
    let reg = Arc::new(open(dir.path(), None).await);
    let _watch = Arc::clone(&reg)
        .watch(Duration::from_secs(2))
        .expect("watch");
    let unsettled = toolgate::watch::unsettled_reloads();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let churn = {
        let (stop, writes) = (Arc::clone(&stop), Arc::clone(&writes));
        let file = dir.path().join("tenants/churn/guard.wasm");
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let n = writes.fetch_add(1, Ordering::SeqCst);
                copy(if n % 2 == 0 { SQL_GUARD } else { STEERING_ONLY }, &file);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    wait_for("the churn to start", async || {
        writes.load(Ordering::SeqCst) > 10
    })
    .await;
    copy(SQL_GUARD, &dir.path().join("tenants/b/sql.wasm"));
    wait_for(
        "tenant b's new guard while another tenant churns",
        async || content(&steer(&reg, Some("b"), DELETE).await).is_some(),
    )
    .await;
    let when_b_was_live = writes.load(Ordering::SeqCst);
    wait_for(
        "the churning tenant, loaded though never quiet",
        async || {
            reg.plugin_set().tenants.contains_key("churn")
                && toolgate::watch::unsettled_reloads() > unsettled
        },
    )
    .await;
    assert!(
        writes.load(Ordering::SeqCst) > when_b_was_live,
        "the churn went on all along"
    );
    stop.store(true, Ordering::SeqCst);
    churn.join().expect("churn thread");
}

/// A reload reads only the directories whose entries changed since their
/// last load; the watcher's reload of one directory reads that one only.
#[tokio::test]
async fn a_reload_reads_only_the_directories_that_changed() {
    use toolgate::watch::Dir;
    let dir = tempfile::tempdir().expect("tempdir");
    copy(SQL_GUARD, &dir.path().join("sql.wasm"));
    for t in 0..20 {
        copy(
            SQL_GUARD,
            &dir.path().join(format!("tenants/t{t:02}/sql.wasm")),
        );
    }
    let reg = open(dir.path(), None).await;
    // Files changed within the file system's timestamp granularity are
    // read again; once they are older, nothing is.
    wait_for("a reload with nothing to read", async || {
        reg.reload().await.expect("reload").read.is_empty()
    })
    .await;
    let t07 = dir.path().join("tenants/t07");
    copy(STEERING_ONLY, &t07.join("sql.wasm"));
    let report = reg.reload().await.expect("reload");
    assert_eq!(report.read, std::slice::from_ref(&t07));
    assert_eq!(report.loaded, [t07.join("sql.wasm")]);
    // One directory named: that one is read, whatever its stamp.
    let report = reg
        .reload_dirs(&[Dir::Tenant("t03".into())])
        .await
        .expect("reload");
    assert_eq!(report.read, [dir.path().join("tenants/t03")]);
    assert!(report.loaded.is_empty(), "{:?}", report.loaded);
}

/// The plugins of `tenant`'s chains (its own and the combined one).
fn chain_plugins(reg: &Registry, tenant: &str) -> Vec<Arc<toolgate::Plugin>> {
    let set = reg.plugin_set();
    let own = set.tenants[tenant].plugins().iter();
    own.chain(set.chain(Some(tenant)).plugins())
        .cloned()
        .collect()
}

/// A reload of one tenant rebuilds that tenant's chains only: every other
/// tenant keeps the very guards it had (and, with them, what they keep
/// across calls: whether their calls run long, their quarantine).
#[tokio::test]
async fn a_reload_of_one_tenant_keeps_every_other_tenants_chains() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy(SQL_GUARD, &dir.path().join("sql.wasm"));
    for t in ["a", "b", "c"] {
        copy(SQL_GUARD, &dir.path().join(format!("tenants/{t}/sql.wasm")));
    }
    let reg = open(dir.path(), None).await;
    let before: Vec<_> = ["b", "c"].map(|t| chain_plugins(&reg, t)).into();
    let a_before = chain_plugins(&reg, "a");
    copy(STEERING_ONLY, &dir.path().join("tenants/a/sql.wasm"));
    let report = reg
        .reload_dirs(&[toolgate::watch::Dir::Tenant("a".into())])
        .await
        .expect("reload");
    assert_eq!(report.loaded, [dir.path().join("tenants/a/sql.wasm")]);
    let same = |x: &[Arc<toolgate::Plugin>], y: &[Arc<toolgate::Plugin>]| {
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| Arc::ptr_eq(p, q))
    };
    for (t, was) in ["b", "c"].iter().zip(&before) {
        assert!(
            same(&chain_plugins(&reg, t), was),
            "tenant {t}'s chains kept"
        );
    }
    assert!(
        !same(&chain_plugins(&reg, "a"), &a_before),
        "tenant a's rebuilt"
    );
    // A change of the global directory rebuilds every tenant's chains.
    copy(STEERING_ONLY, &dir.path().join("sql.wasm"));
    reg.reload().await.expect("reload");
    assert!(
        !same(&chain_plugins(&reg, "b"), &before[0]),
        "global change"
    );
}

#[test]
fn a_change_belongs_to_its_directory() {
    use toolgate::watch::Dir;
    let root = Path::new("/p");
    let of = |p: &str| Dir::of(root, Path::new(p));
    assert_eq!(of("/p/sql.wasm"), Dir::Global);
    assert_eq!(of("/p/toolgate.toml"), Dir::Global);
    assert_eq!(of("/p/tenants/acme"), Dir::Tenant("acme".into()));
    assert_eq!(of("/p/tenants/acme/x/y.wasm"), Dir::Tenant("acme".into()));
    assert_eq!(of("/p/tenants"), Dir::All);
    assert_eq!(of("/elsewhere"), Dir::All);
}

/// What one call through the served guard answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    /// The sql-guard version: a steer naming the missing WHERE.
    Steers,
    /// The steering-only version: it ran and proceeded.
    Proceeds,
}

/// Reads one answer of `/v1/steering?trace=1` for a `DELETE` with no
/// `WHERE`: which version of `guard` decided it, or why it is neither.
fn served_by(status: reqwest::StatusCode, body: &Value) -> Result<Served, String> {
    let trace = body["trace"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let [entry] = trace else {
        return Err(format!("{status}: not one guard ran: {body}"));
    };
    if status != reqwest::StatusCode::OK || entry["plugin"] != "guard" || !entry["fault"].is_null()
    {
        return Err(format!("{status}: {body}"));
    }
    match (entry["outcome"].as_str(), &body["result"]) {
        (Some("skip"), result)
            if result["content"] == "Add a WHERE clause before running this query." =>
        {
            Ok(Served::Steers)
        }
        (Some("proceed"), Value::Null) => Ok(Served::Proceeds),
        _ => Err(format!("{status}: {body}")),
    }
}

/// `toolgate serve` with its watcher on, under calls on several
/// connections, while a guard's file is replaced (atomic rename) by
/// another version again and again: every call is answered 200 by one of
/// the two versions — never an error, a fault or no guard at all — and
/// after each swap the new version is seen (by a call started after the
/// rename), however long the watcher and the compile take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_swaps_a_guard_under_calls_and_loses_none() {
    const CONNECTIONS: usize = 4;
    const SWAPS: usize = 6;
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let guard = dir.path().join("guard.wasm");
    copy(SQL_GUARD, &guard);
    let (_server, addr, _) = crate::server::spawn_serve(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--cache-dir",
            &cache.path().display().to_string(),
        ],
    );
    let url = format!("http://{addr}/v1/steering?trace=1");
    let body = json!({"event": {"run_id": "r", "tool_name": "run_query", "call_id": "c",
        "args": {"sql": "DELETE FROM t"}}});

    // Each call is numbered when it starts; per version, the latest number
    // that version answered.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let latest: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let callers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (stop, started, latest) =
                (Arc::clone(&stop), Arc::clone(&started), Arc::clone(&latest));
            let (url, body) = (url.clone(), body.clone());
            tokio::spawn(async move {
                // A client of its own: a connection of its own.
                let client = reqwest::Client::new();
                let (mut seen, mut bad) = ([0u64; 2], Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let n = started.fetch_add(1, Ordering::Relaxed) + 1;
                    let answer = match client.post(&url).json(&body).send().await {
                        Ok(r) => {
                            let status = r.status();
                            match r.json::<Value>().await {
                                Ok(body) => served_by(status, &body),
                                Err(e) => Err(format!("{status}: body: {e}")),
                            }
                        }
                        Err(e) => Err(format!("request: {e}")),
                    };
                    match answer {
                        Ok(version) => {
                            let v = version as usize;
                            seen[v] += 1;
                            latest[v].fetch_max(n, Ordering::Relaxed);
                        }
                        Err(e) => bad.push(e),
                    }
                }
                (seen, bad)
            })
        })
        .collect();

    // Until a call started after `from` is answered by `version`.
    let seen_since = async |version: Served, from: u64| {
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while latest[version as usize].load(Ordering::Relaxed) <= from {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        assert!(
            waited.await.is_ok(),
            "{version:?}: never answered a call started after #{from}"
        );
    };
    seen_since(Served::Steers, 0).await;
    for swap in 0..SWAPS {
        let (file, version) = if swap % 2 == 0 {
            (STEERING_ONLY, Served::Proceeds)
        } else {
            (SQL_GUARD, Served::Steers)
        };
        copy(file, &guard);
        seen_since(version, started.load(Ordering::Relaxed)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut seen, mut bad) = ([0u64; 2], Vec::new());
    for caller in callers {
        let (s, b) = caller.await.expect("caller");
        seen[0] += s[0];
        seen[1] += s[1];
        bad.extend(b);
    }
    assert!(
        bad.is_empty(),
        "{} of {} calls not answered by either version, e.g. {:?}",
        bad.len(),
        bad.len() as u64 + seen[0] + seen[1],
        &bad[..1]
    );
    // Each version served after each of its swaps (above), so both here.
    assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    eprintln!(
        "{} calls across {SWAPS} swaps: {} by sql-guard, {} by steering-only",
        seen[0] + seen[1],
        seen[0],
        seen[1]
    );
}
