//! Untrusted tenants' files and compiles: a FIFO or a `/dev/zero` manifest,
//! symlinks out of a tenant's directory, a tenant directory that is a
//! symlink, oversized files, a compile bomb, a start function that spins,
//! a failed plugin that must not be compiled again. Each is refused with a
//! clear error while every other tenant's plugins load and serve. The
//! manifest-less `dir::load_dir` reads by the same rules.
//!
//! Hostile inputs are built here: FIFOs with `mkfifo`, symlinks with
//! `std::os::unix::fs::symlink`, components with `wat` and `wit-component`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::CompiledCache;
use toolgate::{CompileBounds, Compiler};
use toolgate::{LoadLimits, ReloadReport};
use toolgate::{Registry, RegistryOptions};
use toolgate_tests::SQL_GUARD;

use crate::contract::{WIT, componentize};
use crate::*;

const DELETE: &str = "DELETE FROM users";

/// Runs `f` on its own thread and runtime, failing the test (instead of
/// hanging it) when it does not finish within `secs`: on a build where a
/// FIFO blocks the reader, the reader never comes back.
fn within<T: Send + 'static>(
    secs: u64,
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let _ = tx.send(rt.block_on(f()));
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("did not finish within {secs} s: a file read blocked"))
}

fn options(load: LoadLimits) -> RegistryOptions {
    RegistryOptions {
        cache: CompiledCache::disabled(),
        load,
        ..Default::default()
    }
}

async fn open_with(dir: &Path, load: LoadLimits) -> Registry {
    Registry::open_with(engine(), dir, options(load))
        .await
        .expect("registry opens")
}

/// Whether `tenant`'s chain refuses a `DELETE` (the SQL guard is loaded).
async fn guarded(reg: &Registry, tenant: Option<&str>) -> bool {
    let d = reg
        .plugin_set()
        .chain(tenant)
        .steering(&steering("run_query", json!({"sql": DELETE})), &no_state())
        .await;
    d.result.is_some()
}

fn put(from: &str, to: &Path) {
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    std::fs::copy(from, to).expect("copy");
}

pub(crate) fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// The error reported for `path`, if any.
fn error_for<'a>(errors: &'a [toolgate::LoadIssue], path: &Path) -> Option<&'a str> {
    errors
        .iter()
        .find(|e| e.path == path)
        .map(|e| e.message.as_str())
}

/// A tree where tenant `good` has the SQL guard: whatever a hostile tenant
/// does, `good` must keep loading and serving.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tenants = dir.path().join("tenants");
    put(SQL_GUARD, &tenants.join("good").join("sql.wasm"));
    (dir, tenants)
}

fn open_within(dir: PathBuf, load: LoadLimits) -> (Registry, ReloadReport) {
    within(60, move || {
        Box::pin(async move {
            let reg = open_with(&dir, load).await;
            let report = reg.reload().await.expect("reload");
            (reg, report)
        })
    })
}

#[test]
fn fifo_manifest_is_refused_without_blocking() {
    let (dir, tenants) = tree();
    let fifo = tenants.join("evil").join("toolgate.toml");
    mkfifo(&fifo);
    // A FIFO named like a component, in the global directory too.
    mkfifo(&dir.path().join("pipe.wasm"));
    put(SQL_GUARD, &dir.path().join("sql.wasm"));
    let (reg, report) = open_within(dir.path().to_path_buf(), LoadLimits::default());
    let msg = error_for(&report.errors, &fifo).expect("the FIFO manifest is reported");
    assert!(msg.contains("not a regular file"), "{msg}");
    let msg = error_for(&report.errors, &dir.path().join("pipe.wasm"))
        .expect("the FIFO component is reported");
    assert!(msg.contains("not a regular file"), "{msg}");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    assert!(rt.block_on(guarded(&reg, Some("good"))));
    assert!(rt.block_on(guarded(&reg, None)), "the global guard loads");
}

#[test]
fn dev_zero_manifest_is_refused_and_others_load() {
    let (dir, tenants) = tree();
    let manifest = tenants.join("evil").join("toolgate.toml");
    std::fs::create_dir_all(manifest.parent().expect("parent")).expect("mkdir");
    symlink("/dev/zero", &manifest).expect("symlink");
    // The global directory follows symlinks, but never into a device.
    symlink("/dev/zero", dir.path().join("zero.wasm")).expect("symlink");
    let (reg, report) = open_within(dir.path().to_path_buf(), LoadLimits::default());
    let msg = error_for(&report.errors, &manifest).expect("reported");
    assert!(msg.contains("not a regular file"), "{msg}");
    let msg = error_for(&report.errors, &dir.path().join("zero.wasm")).expect("reported");
    assert!(msg.contains("not a regular file"), "{msg}");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    assert!(rt.block_on(guarded(&reg, Some("good"))));
    assert!(!rt.block_on(guarded(&reg, Some("evil"))));
}

#[tokio::test]
async fn symlinks_out_of_a_tenant_directory_are_refused() {
    let (dir, tenants) = tree();
    let outside = tempfile::tempdir().expect("tempdir");
    put(SQL_GUARD, &outside.path().join("host.wasm"));
    let evil = tenants.join("evil");
    std::fs::create_dir_all(&evil).expect("mkdir");
    // Into another tenant, and out of the plugin directory altogether.
    symlink("../good/sql.wasm", evil.join("theirs.wasm")).expect("symlink");
    symlink(outside.path().join("host.wasm"), evil.join("host.wasm")).expect("symlink");
    // A subdirectory that is a symlink, named by a manifest path.
    symlink(outside.path(), evil.join("sub")).expect("symlink");
    let reg = open_with(dir.path(), LoadLimits::default()).await;
    let set = reg.plugin_set();
    assert!(
        set.tenants
            .get("evil")
            .is_none_or(|c| c.plugins().is_empty()),
        "a symlinked component loaded: {:?}",
        set.tenants.get("evil").map(|c| c.plugins().to_vec())
    );
    assert!(!guarded(&reg, Some("evil")).await);
    for name in ["theirs.wasm", "host.wasm"] {
        let msg = error_for(&set.errors, &evil.join(name)).expect("reported");
        assert!(
            msg.contains("not a regular file inside its directory"),
            "{msg}"
        );
    }
    assert!(guarded(&reg, Some("good")).await);

    // Through a manifest: a path through a symlinked subdirectory is
    // refused, and a path to a symlink at /dev/zero, one at a host file and
    // a missing one all get the same message: no probing the host's files.
    symlink("/dev/zero", evil.join("zero.wasm")).expect("symlink");
    let mut messages = Vec::new();
    for path in ["sub/host.wasm", "zero.wasm", "host.wasm", "missing.wasm"] {
        std::fs::write(
            evil.join("toolgate.toml"),
            format!("[[plugin]]\nname = \"x\"\npath = \"{path}\"\n"),
        )
        .expect("write");
        let r = reg.reload().await.expect("reload");
        let msg = error_for(&r.errors, &evil.join("toolgate.toml"))
            .unwrap_or_else(|| panic!("{path} refused: {r:?}"));
        assert!(msg.contains("is missing or not a regular file"), "{msg}");
        messages.push(msg.replace(path, "PATH"));
        assert!(!guarded(&reg, Some("evil")).await);
    }
    messages.dedup();
    assert_eq!(messages.len(), 1, "one message for all: {messages:?}");
    assert!(guarded(&reg, Some("good")).await);
}

#[tokio::test]
async fn tenant_directory_that_is_a_symlink_is_refused() {
    let (dir, tenants) = tree();
    symlink("good", tenants.join("alias")).expect("symlink");
    let outside = tempfile::tempdir().expect("tempdir");
    put(SQL_GUARD, &outside.path().join("sql.wasm"));
    symlink(outside.path(), tenants.join("away")).expect("symlink");
    let reg = open_with(dir.path(), LoadLimits::default()).await;
    let set = reg.plugin_set();
    for name in ["alias", "away"] {
        assert!(!set.tenants.contains_key(name), "{name} loaded");
        assert!(!guarded(&reg, Some(name)).await, "{name} runs a guard");
        let msg = error_for(&set.errors, &tenants.join(name)).expect("reported");
        assert!(msg.contains("must be a directory, not a symlink"), "{msg}");
    }
    assert!(guarded(&reg, Some("good")).await);

    // A tenant directory replaced by a symlink after it loaded: removed.
    let moved = dir.path().join("moved");
    std::fs::rename(tenants.join("good"), &moved).expect("mv");
    symlink(&moved, tenants.join("good")).expect("symlink");
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.removed.len(), 1, "{r:?}");
    assert!(!guarded(&reg, Some("good")).await);
}

#[tokio::test]
async fn oversized_manifest_and_component_are_refused_unread() {
    let (dir, tenants) = tree();
    let big = tenants.join("big");
    put(SQL_GUARD, &big.join("sql.wasm"));
    let small = LoadLimits {
        max_manifest_bytes: 64,
        max_component_bytes: 1024,
        ..LoadLimits::default()
    };
    let reg = open_with(dir.path(), small.clone()).await;
    let set = reg.plugin_set();
    let msg = error_for(&set.errors, &big.join("sql.wasm")).expect("reported");
    assert!(msg.contains("larger than the limit of 1024 bytes"), "{msg}");
    assert!(!guarded(&reg, Some("big")).await);
    std::fs::write(
        big.join("toolgate.toml"),
        format!("# {}\n", "x".repeat(100)),
    )
    .expect("write");
    let r = reg.reload().await.expect("reload");
    let msg = error_for(&r.errors, &big.join("toolgate.toml")).expect("reported");
    assert!(msg.contains("larger than the limit of 64 bytes"), "{msg}");
    // A directory named like a component is refused, not skipped silently.
    std::fs::remove_file(big.join("toolgate.toml")).expect("rm");
    std::fs::create_dir(big.join("dir.wasm")).expect("mkdir");
    let r = reg.reload().await.expect("reload");
    let msg = error_for(&r.errors, &big.join("dir.wasm")).expect("reported");
    assert!(msg.contains("not a regular file"), "{msg}");

    // With the default caps the same files load (the directory named
    // like a component gone: a tenant whose directory has not loaded
    // whole is not admitted).
    std::fs::remove_dir(big.join("dir.wasm")).expect("rmdir");
    let reg = open_with(dir.path(), LoadLimits::default()).await;
    assert!(guarded(&reg, Some("big")).await);
}

/// A steering guard (it always proceeds) whose core module also holds one
/// function of `lines` straight-line arithmetic on many live locals: cheap
/// to write, costly to compile.
pub(crate) fn compile_bomb(lines: usize) -> Vec<u8> {
    let mut body = String::with_capacity(lines * 64);
    for i in 0..lines {
        let (a, b, c) = (i % 61, (i * 7 + 3) % 61, (i * 13 + 5) % 61);
        // Loads and stores at varying offsets: nothing folds away.
        let (load, store) = (8 * ((i * 7) % 8000), 8 * (i % 8000));
        body.push_str(&format!(
            "(local.set {a} (i64.add (local.get {b}) (i64.load (i32.const {load}))))\n\
             (i64.store (i32.const {store}) (i64.rotl (local.get {a}) (local.get {c})))\n"
        ));
    }
    // Every local feeds the result, so no line is dead code.
    for l in 1..61 {
        body.push_str(&format!(
            "(local.set 0 (i64.xor (local.get 0) (local.get {l})))\n"
        ));
    }
    let locals = "(local i64 i64 i64 i64 i64 i64 i64 i64 i64 i64)".repeat(6);
    let core = format!(
        r#"(module
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
            (func (export "toolgate:guard/steering@0.1.0#before-tool-call")
              (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
              (i32.store8 (i32.const 64) (i32.const 0))
              (i32.const 64))
            (func (export "bomb") (param i64) (result i64) {locals}
              {body}
              (local.get 0)))"#
    );
    componentize(
        WIT,
        "steering-guard",
        wat::parse_str(core).expect("valid wat"),
    )
}

/// A steering guard whose start function never returns.
pub(crate) fn spinning_start() -> Vec<u8> {
    let core = r#"(module
        (memory (export "memory") 1)
        (func $spin (loop $l (br $l)))
        (start $spin)
        (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
        (func (export "toolgate:guard/steering@0.1.0#before-tool-call")
          (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
          (i32.const 64)))"#;
    componentize(
        WIT,
        "steering-guard",
        wat::parse_str(core).expect("valid wat"),
    )
}

fn subprocess() -> Compiler {
    Compiler::Subprocess {
        program: env!("CARGO_BIN_EXE_toolgate").into(),
        args: Vec::new(),
    }
}

/// A compile bomb in one tenant is refused at the compile memory bound (in
/// a child process) while another tenant's new guard loads; and its
/// failure is remembered: the next reload neither compiles nor waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_bomb_is_refused_while_another_tenant_loads() {
    let (dir, tenants) = tree();
    let bomb = tenants.join("bomb").join("bomb.wasm");
    std::fs::create_dir_all(bomb.parent().expect("parent")).expect("mkdir");
    std::fs::write(&bomb, compile_bomb(BOMB_LINES)).expect("write");
    let load = LoadLimits {
        compiler: subprocess(),
        compile: CompileBounds {
            timeout: Duration::from_secs(120),
            memory_bytes: BOMB_CAP,
        },
        ..LoadLimits::default()
    };
    let start = Instant::now();
    let reg = open_with(dir.path(), load).await;
    let first = start.elapsed();
    let set = reg.plugin_set();
    let msg = error_for(&set.errors, &bomb).expect("the bomb is reported");
    assert!(msg.contains("compile refused"), "{msg}");
    assert!(msg.contains("compile memory limit"), "{msg}");
    assert!(guarded(&reg, Some("good")).await, "the other tenant loads");
    assert!(!guarded(&reg, Some("bomb")).await);

    // Unchanged: not compiled again, same error, and quicker than the
    // open that compiled it (times of the same run compared).
    let start = Instant::now();
    let r = reg.reload().await.expect("reload");
    assert!(r.compiled.is_empty(), "recompiled: {r:?}");
    assert_eq!(error_for(&r.errors, &bomb), Some(msg));
    let again = start.elapsed();
    assert!(again < first, "reload {again:?}, open {first:?}");
    eprintln!("bomb refused in {first:?}; unchanged reload in {again:?}");
}

/// A compile child that cannot do its job (here a shell script that
/// prints its arguments and exits 1, as a Python interpreter that cannot
/// import toolgate would) is reported as the compiler failing, with its
/// message, and tried again at the next reload: it is not the component's
/// doing. Its leading arguments come before `compile` and its flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_child_that_fails_to_run_is_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let guard = dir.path().join("sql.wasm");
    put(SQL_GUARD, &guard);
    let runs = tempfile::NamedTempFile::new().expect("tempfile");
    let load = LoadLimits {
        compiler: Compiler::Subprocess {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "echo run >> \"$1\"; shift; echo \"cannot start: $*\" >&2; exit 1".into(),
                "child".into(),
                runs.path().into(),
                "lead".into(),
            ],
        },
        ..LoadLimits::default()
    };
    let reg = open_with(dir.path(), load).await;
    let msg = error_for(&reg.plugin_set().errors, &guard)
        .expect("reported")
        .to_string();
    assert!(
        msg.contains("cannot start: lead compile --max-memory-bytes="),
        "{msg}"
    );
    assert!(msg.contains("exit status: 1"), "{msg}");
    assert!(!msg.contains("compile refused"), "{msg}");
    let ran = || {
        std::fs::read_to_string(runs.path())
            .expect("read")
            .lines()
            .count()
    };
    assert_eq!(ran(), 1);
    let r = reg.reload().await.expect("reload");
    assert_eq!(error_for(&r.errors, &guard), Some(msg.as_str()));
    assert_eq!(ran(), 2, "tried again at the reload");
}

/// The bomb's size: big enough to pass [`BOMB_CAP`], small enough for CI.
const BOMB_LINES: usize = 40_000;
/// The compile memory bound the bomb must exceed.
const BOMB_CAP: u64 = 96 << 20;

/// A bomb compiled in process is cut at the time bound: the reload goes
/// on and the other tenant loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_compile_is_cut_at_the_time_bound() {
    let (dir, tenants) = tree();
    // The other tenant's guard is in the compiled cache: only the bomb
    // compiles under the tight bound.
    let cache = tempfile::tempdir().expect("tempdir");
    let cached = |load| RegistryOptions {
        cache: CompiledCache::at(cache.path()),
        ..options(load)
    };
    Registry::open_with(engine(), dir.path(), cached(LoadLimits::default()))
        .await
        .expect("registry opens");
    let bomb = tenants.join("bomb").join("bomb.wasm");
    std::fs::create_dir_all(bomb.parent().expect("parent")).expect("mkdir");
    std::fs::write(&bomb, compile_bomb(BOMB_LINES / 4)).expect("write");
    // 1 ms: compiling the bomb takes far longer on any machine, so the
    // bound is what ends it.
    let load = LoadLimits {
        compile: CompileBounds {
            timeout: Duration::from_millis(1),
            ..CompileBounds::default()
        },
        ..LoadLimits::default()
    };
    let reg = Registry::open_with(engine(), dir.path(), cached(load))
        .await
        .expect("registry opens");
    let set = reg.plugin_set();
    let msg = error_for(&set.errors, &bomb).expect("reported");
    assert!(msg.contains("compile time limit of 1 ms"), "{msg}");
    assert!(guarded(&reg, Some("good")).await);
}

/// A start function that spins, with a tenant asking for a 600 s timeout:
/// the load probe stops at the operator's cap, and the next reload does not
/// probe it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_start_function_does_not_stall_reloads() {
    let (dir, tenants) = tree();
    let spin = tenants.join("spin");
    std::fs::create_dir_all(&spin).expect("mkdir");
    std::fs::write(spin.join("spin.wasm"), spinning_start()).expect("write");
    std::fs::write(
        spin.join("toolgate.toml"),
        "[[plugin]]\npath = \"spin.wasm\"\ntimeout_ms = 600000\nfuel = 9223372036854775807\n",
    )
    .expect("write");
    let load = LoadLimits {
        probe_timeout: Duration::from_millis(300),
        ..LoadLimits::default()
    };
    // An operator whose ceilings allow what the tenant asks for: the probe's
    // own cap is what must hold.
    let mut policy = toolgate::Policy::default();
    policy.ceilings.timeout = Duration::from_secs(600);
    policy.ceilings.fuel = u64::MAX;
    let start = Instant::now();
    let reg = Arc::new(
        Registry::open_with(
            engine(),
            dir.path(),
            RegistryOptions {
                policy,
                ..options(load)
            },
        )
        .await
        .expect("registry opens"),
    );
    let first = start.elapsed();
    let msg = error_for(&reg.plugin_set().errors, &spin.join("spin.wasm"))
        .expect("reported")
        .to_string();
    assert!(msg.contains("fails to start (deadline)"), "{msg}");
    // Run for the tenant's timeout, the open would take 600 s at least.
    assert!(first < Duration::from_secs(300), "open took {first:?}");
    assert!(guarded(&reg, Some("good")).await);
    // Reloads: no second probe, the same error.
    for _ in 0..3 {
        let start = Instant::now();
        let r = reg.reload().await.expect("reload");
        assert_eq!(error_for(&r.errors, &spin.join("spin.wasm")), Some(&*msg));
        // A probe spins for its cap's run time: a reload without one is
        // quicker than the open with it.
        assert!(
            start.elapsed() < first,
            "{:?} vs {first:?}",
            start.elapsed()
        );
    }
}

/// A plugin that failed to load is not compiled again while its bytes and
/// settings are unchanged; a change of either tries again.
#[tokio::test]
async fn failed_plugin_is_not_recompiled_while_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.wasm");
    // Compiles, then fails to link: it imports something unknown.
    let wit = format!(
        "{WIT}\ninterface evil {{ steal: func(); }}\nworld evil-guard {{ import evil; export steering; }}\n"
    );
    let core = wat::parse_str(
        r#"(module
            (import "toolgate:guard/evil@0.1.0" "steal" (func))
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
            (func (export "toolgate:guard/steering@0.1.0#before-tool-call")
              (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32) (i32.const 64)))"#,
    )
    .expect("wat");
    std::fs::write(&file, componentize(&wit, "evil-guard", core)).expect("write");
    let reg = open_with(dir.path(), LoadLimits::default()).await;
    let first = reg.plugin_set().errors.clone();
    assert_eq!(first.len(), 1, "{first:?}");
    for _ in 0..2 {
        let r = reg.reload().await.expect("reload");
        assert!(r.compiled.is_empty(), "compiled again: {r:?}");
        assert_eq!(r.errors.len(), 1);
        assert_eq!(r.errors[0].message, first[0].message);
    }
    // Asked to forget: tried (compiled) again.
    reg.forget_failures();
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.compiled.len(), 1, "tried again: {r:?}");
    assert_eq!(r.errors.len(), 1);
    // New settings (a manifest): tried again (re-linked from the component
    // compiled before, or compiled; either way it fails again, reported).
    std::fs::write(
        dir.path().join("toolgate.toml"),
        "[[plugin]]\npath = \"bad.wasm\"\ntimeout_ms = 100\n",
    )
    .expect("write");
    let r = reg.reload().await.expect("reload");
    assert_eq!(r.compiled.len(), 1, "new settings are tried: {r:?}");
    assert_eq!(r.errors.len(), 1);
    // Fixed bytes load.
    std::fs::copy(SQL_GUARD, &file).expect("copy");
    let r = reg.reload().await.expect("reload");
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(guarded(&reg, None).await);
}

/// Not a test: writes a compile bomb of `$BOMB_LINES` lines to `$BOMB_OUT`,
/// to measure compiles by hand (`docs/loading.md`, "Compile bounds").
#[test]
#[ignore = "a measuring aid, run by hand"]
fn write_compile_bomb() {
    let lines = std::env::var("BOMB_LINES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(BOMB_LINES);
    let out = std::env::var_os("BOMB_OUT").expect("set BOMB_OUT");
    std::fs::write(out, compile_bomb(lines)).expect("write");
}

/// Not a test: compiles the core module `$WASM_IN` with the host's engine
/// settings, to measure a real guest runtime's compile by hand (run under
/// `/usr/bin/time -v`).
#[test]
#[ignore = "a measuring aid, run by hand"]
fn measure_core_compile() {
    let path = std::env::var_os("WASM_IN").expect("set WASM_IN");
    let bytes = std::fs::read(path).expect("read");
    let start = Instant::now();
    let code = engine()
        .wasmtime()
        .precompile_module(&bytes)
        .expect("compiles");
    eprintln!(
        "{} bytes -> {} bytes of code in {:?}",
        bytes.len(),
        code.len(),
        start.elapsed()
    );
}

/// `toolgate serve` with a watched directory: one tenant's manifest is a
/// FIFO from the start (the server still starts), another's turns into a
/// symlink at `/dev/zero` while it runs. The server keeps answering, an
/// explicit reload answers promptly with both refusals, and the good
/// tenant's guard keeps steering.
#[test]
fn the_server_keeps_serving_through_fifo_and_dev_zero_manifests() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let (dir, tenants) = tree();
    mkfifo(&tenants.join("evil").join("toolgate.toml"));
    let mut child = crate::KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--plugins", &dir.path().display().to_string()])
            .args(["--listen", "127.0.0.1:0", "--no-cache"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    // Keep reading: the server logs the refusals.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find(" on http://") {
                let _ = tx.send(line[at + " on http://".len()..].trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("address printed");
    let base = format!("http://{addr}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A generous bound on every request: a reader blocked on the FIFO
    // would never answer.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let steer_good = || {
        rt.block_on(async {
            let body = json!({
                "event": {"run_id": "r", "tool_name": "run_query", "call_id": "c",
                          "args": {"sql": DELETE}},
                "tenant": "good",
            });
            let r = client
                .post(format!("{base}/v1/steering"))
                .json(&body)
                .send()
                .await
                .expect("steering answers");
            assert!(r.status().is_success(), "{}", r.status());
            r.json::<serde_json::Value>().await.expect("JSON")
        })
    };
    // Tenants come online after the server listens: wait for all.
    let ready = || {
        rt.block_on(async {
            let r = client.get(format!("{base}/readyz")).send().await;
            r.is_ok_and(|r| r.status().is_success())
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!steer_good().is_null(), "the good tenant's guard steers");

    // Broken before the start (a FIFO would hang a reader) or after.
    let zero = tenants.join("zero");
    std::fs::create_dir_all(&zero).expect("mkdir");
    symlink("/dev/zero", zero.join("toolgate.toml")).expect("symlink");
    // Let the watcher's reload run into them (not measured: the explicit
    // reload below meets them either way).
    std::thread::sleep(Duration::from_millis(800));
    let healthy = rt.block_on(async {
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .map(|r| r.status().is_success())
    });
    assert!(matches!(healthy, Ok(true)), "healthz: {healthy:?}");
    let report: serde_json::Value = rt.block_on(async {
        client
            .post(format!("{base}/v1/reload"))
            .json(&json!({}))
            .send()
            .await
            .expect("reload answers")
            .json()
            .await
            .expect("JSON")
    });
    let errors = report["errors"].to_string();
    assert!(errors.contains("evil/toolgate.toml"), "{report}");
    assert!(errors.contains("zero/toolgate.toml"), "{report}");
    assert!(
        !steer_good().is_null(),
        "the good tenant's guard still steers"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `dir::load_dir` (a directory without a manifest, no registry) reads by
/// the file rules: a FIFO and a dotfile named `*.wasm` are never read, a
/// file over the cap is refused unread, and a symlink out of the directory
/// is followed by default (the operator's directory) but refused under
/// `Symlinks::Refuse`; the good guards load whatever the others are.
#[test]
fn load_dir_reads_by_the_file_rules() {
    use toolgate::dir::Symlinks;
    use toolgate::dir::{self, DirRules};
    let root = tempfile::tempdir().expect("tempdir");
    let d = root.path().join("plugins");
    put(SQL_GUARD, &d.join("10-sql.wasm"));
    mkfifo(&d.join("20-fifo.wasm"));
    std::fs::write(d.join(".30-hidden.wasm"), b"not wasm").expect("write");
    // Sparse: over the default cap of 64 MiB without taking the space.
    std::fs::File::create(d.join("40-big.wasm"))
        .expect("create")
        .set_len(65 << 20)
        .expect("set_len");
    let outside = root.path().join("outside.wasm");
    put(toolgate_tests::NO_EMAIL, &outside);
    symlink(&outside, d.join("50-link.wasm")).expect("symlink");

    let listed = dir::components(&d).expect("components");
    assert_eq!(
        listed,
        [
            d.join("10-sql.wasm"),
            d.join("40-big.wasm"),
            d.join("50-link.wasm")
        ],
        "no FIFO, no dotfile"
    );
    let names = |chain: &toolgate::Chain| -> Vec<String> {
        chain
            .plugins()
            .iter()
            .map(|p| p.name().to_string())
            .collect()
    };
    let dir_path = d.clone();
    let (chain, errors) = within(60, move || {
        Box::pin(async move {
            dir::load_dir(&engine(), &dir_path)
                .await
                .expect("directory loads")
        })
    });
    assert_eq!(names(&chain), ["10-sql", "50-link"]);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        matches!(&errors[0], toolgate::Error::Refused { path, .. } if path.ends_with("20-fifo.wasm")),
        "{errors:?}"
    );
    assert!(
        matches!(&errors[1], toolgate::Error::TooLarge { path, limit }
            if path.ends_with("40-big.wasm") && *limit == 64 << 20),
        "{errors:?}"
    );

    // Someone else's directory: no symlink followed.
    let refuse = DirRules {
        symlinks: Symlinks::Refuse,
        ..DirRules::default()
    };
    assert_eq!(
        dir::components_with(&d, &refuse).expect("components"),
        [d.join("10-sql.wasm"), d.join("40-big.wasm")]
    );
    let dir_path = d.clone();
    let (chain, errors) = within(60, move || {
        Box::pin(async move {
            dir::load_dir_with(&engine(), &dir_path, refuse)
                .await
                .expect("directory loads")
        })
    });
    assert_eq!(names(&chain), ["10-sql"]);
    assert!(
        errors.iter().any(
            |e| matches!(e, toolgate::Error::Refused { path, .. } if path.ends_with("50-link.wasm"))
        ),
        "{errors:?}"
    );
}

/// A hard link is a second name for a file: in a tenant's directory it may
/// be a file from outside it (the operator's, another tenant's). A
/// tenant's component or manifest with more than one link is refused,
/// naming it, and a manifest's content never reaches the error text; the
/// global directory (the operator's) may hold hard links.
#[tokio::test]
async fn hard_links_into_a_tenant_directory_are_refused() {
    let (dir, tenants) = tree();
    let outside = dir.path().join("outside");
    put(SQL_GUARD, &outside.join("host.wasm"));
    std::fs::write(outside.join("secret.toml"), "secret_token = \"hunter2\"\n").expect("write");
    let evil = tenants.join("evil");
    std::fs::create_dir_all(&evil).expect("mkdir");
    std::fs::hard_link(outside.join("host.wasm"), evil.join("theirs.wasm")).expect("link");
    // The operator's own hard link loads.
    std::fs::hard_link(outside.join("host.wasm"), dir.path().join("global.wasm")).expect("link");
    let reg = open_with(dir.path(), LoadLimits::default()).await;
    let set = reg.plugin_set();
    // (The global guard runs for every tenant: count each one's own.)
    let own =
        |set: &toolgate::PluginSet, t: &str| set.tenants.get(t).map_or(0, |c| c.plugins().len());
    let msg = error_for(&set.errors, &evil.join("theirs.wasm")).expect("reported");
    assert!(msg.contains("has 3 hard links"), "{msg}");
    assert_eq!(own(&set, "evil"), 0, "a hard link loaded");
    assert_eq!(own(&set, "good"), 1);
    assert!(guarded(&reg, None).await, "the global hard link loads");

    // The manifest, hard-linked to a file outside: refused unparsed.
    std::fs::remove_file(evil.join("theirs.wasm")).expect("rm");
    std::fs::hard_link(outside.join("secret.toml"), evil.join("toolgate.toml")).expect("link");
    let r = reg.reload().await.expect("reload");
    let msg = error_for(&r.errors, &evil.join("toolgate.toml")).expect("reported");
    assert!(msg.contains("has 2 hard links"), "{msg}");
    assert!(
        !msg.contains("secret") && !msg.contains("hunter2"),
        "the linked file's content leaked: {msg}"
    );
    // A manifest path at a hard link: the key names it.
    std::fs::remove_file(evil.join("toolgate.toml")).expect("rm");
    std::fs::hard_link(outside.join("host.wasm"), evil.join("linked.wasm")).expect("link");
    std::fs::write(
        evil.join("toolgate.toml"),
        "[[plugin]]\npath = \"linked.wasm\"\n",
    )
    .expect("write");
    let r = reg.reload().await.expect("reload");
    let msg = error_for(&r.errors, &evil.join("toolgate.toml")).expect("reported");
    assert!(msg.contains("key `plugin[1].path`"), "{msg}");
    assert!(msg.contains("hard links"), "{msg}");
    let set = reg.plugin_set();
    assert_eq!(own(&set, "evil"), 0);
    assert_eq!(own(&set, "good"), 1);
}

/// A component's file name is its plugin's name without a manifest: one
/// that is no valid name (a quote, a newline, a space) is refused, naming
/// the file, while the global directory's other components load (a tenant
/// with such a file is not admitted until it loads whole); so is a tenant
/// directory named `global`.
#[tokio::test]
async fn file_names_that_are_no_plugin_names_are_refused() {
    let (dir, tenants) = tree();
    let acme = tenants.join("acme");
    put(SQL_GUARD, &acme.join("ok.wasm"));
    let bad = [
        "a\"b.wasm",
        "new\nline.wasm",
        "with space.wasm",
        "back\\slash.wasm",
    ];
    for name in bad {
        put(SQL_GUARD, &acme.join(name));
        put(SQL_GUARD, &dir.path().join(name));
    }
    put(SQL_GUARD, &tenants.join("global").join("sql.wasm"));
    let reg = open_with(dir.path(), LoadLimits::default()).await;
    let set = reg.plugin_set();
    for name in bad {
        for path in [acme.join(name), dir.path().join(name)] {
            let msg = error_for(&set.errors, &path)
                .unwrap_or_else(|| panic!("{} not reported: {:?}", path.display(), set.errors));
            assert!(msg.contains("invalid plugin name"), "{msg}");
        }
    }
    // A tenant whose files do not all load is not admitted: its calls
    // are never decided without the guards it meant to run.
    let why = &set.refused["acme"];
    assert!(why.contains("has not loaded whole"), "{why}");
    assert!(!set.tenants.contains_key("acme"));
    assert!(
        set.global.plugins().is_empty(),
        "{:?}",
        set.global.plugins()
    );
    assert!(!set.tenants.contains_key("global"));
    let msg = error_for(&set.errors, &tenants.join("global")).expect("reported");
    assert!(msg.contains("reserved for the global account"), "{msg}");

    // The library's manifest-less loader holds file names to the same rule.
    let (chain, errors) = toolgate::dir::load_dir(&engine(), &acme)
        .await
        .expect("load_dir");
    assert_eq!(chain.plugins().len(), 1);
    assert_eq!(errors.len(), bad.len(), "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.to_string().contains("invalid plugin name")),
        "{errors:?}"
    );
}
