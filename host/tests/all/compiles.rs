//! Compiles as tenants share them: waiting ones are served the global
//! directory's first, then tenant by tenant in turn; a tenant over its
//! compile CPU budget waits; failed compiles are remembered across
//! restarts; a killed server leaves no compile child running.
//!
//! Compiles run in real `toolgate compile` children, some behind a shell
//! script that notes which component each one compiles (its SHA-256) and
//! can hold it until the test lets it go.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use toolgate::CompileStats;
use toolgate::CompiledCache;
use toolgate::LoadLimits;
use toolgate::{CompileBounds, Compiler};
use toolgate::{Registry, RegistryOptions};
use toolgate_tests::SQL_GUARD;

use crate::engine;

/// The SQL guard with a custom section named `tag` appended: the same
/// guard, other bytes (so another compile).
fn variant(tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(SQL_GUARD).expect("read the guard");
    let mut payload = vec![u8::try_from(tag.len()).expect("short tag")];
    payload.extend_from_slice(tag.as_bytes());
    bytes.push(0);
    bytes.push(u8::try_from(payload.len()).expect("short section"));
    bytes.extend_from_slice(&payload);
    bytes
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `bytes` as `dir/file`, creating `dir`; returns their SHA-256.
fn put(dir: &Path, file: &str, bytes: &[u8]) -> String {
    std::fs::create_dir_all(dir).expect("mkdir");
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, dir.join(file)).expect("rename");
    sha256(bytes)
}

/// A compiler that appends the SHA-256 of each component it is given to
/// `log`, waits while `hold` exists, then runs `toolgate compile`.
fn noting_compiler(log: &Path, hold: &Path) -> Compiler {
    let script = r#"
        f=$(mktemp -p "$(dirname "$0")") || exit 1
        cat > "$f"
        h=$(sha256sum < "$f")
        echo "${h%% *}" >> "$0"
        while [ -e "$1" ]; do sleep 0.02; done
        shift
        exec "$@" < "$f"
    "#;
    Compiler::Subprocess {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            script.into(),
            log.into(),
            hold.into(),
            env!("CARGO_BIN_EXE_toolgate").into(),
        ],
    }
}

/// The digests `log` holds, in the order compiled.
fn compiled(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits (generously) until `done` holds, failing with `what` otherwise.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn open(dir: &Path, load: LoadLimits, cache: CompiledCache) -> Arc<Registry> {
    let options = RegistryOptions {
        cache,
        load,
        ..Default::default()
    };
    Arc::new(
        Registry::open_with(engine(), dir, options)
            .await
            .expect("registry opens"),
    )
}

fn reload_in_background(reg: &Arc<Registry>) -> tokio::task::JoinHandle<()> {
    let reg = Arc::clone(reg);
    tokio::spawn(async move {
        reg.reload().await.expect("reload");
    })
}

fn waiting(reg: &Registry) -> usize {
    let CompileStats { waiting, .. } = reg.compile_stats();
    waiting
}

/// One compile slot, held by tenant `d`'s compile while others queue for
/// it: tenants that compiled before (`a`, `b`) queue first, a tenant that
/// never did (`c`) after them, yet `c` compiles first; then, held again,
/// the global directory's compile, asked for last and served more recently
/// than the tenants, goes before theirs. (A first-come-first-served queue
/// compiles in the order asked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_take_turns_and_the_global_directory_goes_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("plugins");
    let tenant = |t: &str| root.join("tenants").join(t);
    let (log, hold) = (dir.path().join("log"), dir.path().join("hold"));
    put(&tenant("a"), "g.wasm", &variant("a1"));
    put(&tenant("b"), "g.wasm", &variant("b1"));
    let load = LoadLimits {
        compiler: noting_compiler(&log, &hold),
        compile_jobs: 1,
        tenant_compile_cpu: Duration::ZERO,
        ..LoadLimits::default()
    };
    let reg = open(&root, load, CompiledCache::disabled()).await;
    assert_eq!(compiled(&log).len(), 2);

    // `d` takes the one slot and is held there.
    std::fs::write(&hold, "").expect("hold");
    let d1 = put(&tenant("d"), "g.wasm", &variant("d1"));
    let mut reloads = vec![reload_in_background(&reg)];
    until("d compiles", || compiled(&log).contains(&d1)).await;
    // `a` and `b` ask first, `c` last.
    let a2 = put(&tenant("a"), "g.wasm", &variant("a2"));
    let b2 = put(&tenant("b"), "g.wasm", &variant("b2"));
    reloads.push(reload_in_background(&reg));
    until("a and b wait", || waiting(&reg) == 2).await;
    let c1 = put(&tenant("c"), "g.wasm", &variant("c1"));
    reloads.push(reload_in_background(&reg));
    until("c waits too", || waiting(&reg) == 3).await;
    std::fs::remove_file(&hold).expect("let go");
    for r in reloads.drain(..) {
        r.await.expect("reload task");
    }
    let order = compiled(&log);
    let after_d: Vec<&String> = order.iter().skip_while(|d| **d != d1).skip(1).collect();
    assert_eq!(after_d.len(), 3, "{order:?}");
    assert_eq!(
        after_d[0], &c1,
        "the tenant that never compiled goes first: {order:?}"
    );
    assert!(after_d[1..].contains(&&a2) && after_d[1..].contains(&&b2));

    // The global directory compiles: now it was served after `a` and `c`.
    put(&root, "g.wasm", &variant("g1"));
    reg.reload().await.expect("reload");
    // Held again: two tenants wait, then the global directory asks.
    std::fs::write(&hold, "").expect("hold");
    let d2 = put(&tenant("d"), "g.wasm", &variant("d2"));
    reloads.push(reload_in_background(&reg));
    until("d compiles", || compiled(&log).contains(&d2)).await;
    put(&tenant("a"), "g.wasm", &variant("a3"));
    put(&tenant("c"), "g.wasm", &variant("c2"));
    reloads.push(reload_in_background(&reg));
    until("a and c wait", || waiting(&reg) == 2).await;
    let g2 = put(&root, "g.wasm", &variant("g2"));
    reloads.push(reload_in_background(&reg));
    until("the global directory waits too", || waiting(&reg) == 3).await;
    std::fs::remove_file(&hold).expect("let go");
    for r in reloads {
        r.await.expect("reload task");
    }
    let order = compiled(&log);
    let after_d: Vec<&String> = order.iter().skip_while(|d| **d != d2).skip(1).collect();
    assert_eq!(after_d.first(), Some(&&g2), "{order:?}");
    let stats = reg.compile_stats();
    assert_eq!(stats.global.compiles, 2, "{stats:?}");
    assert_eq!(stats.tenants["a"].compiles, 3, "{stats:?}");
    assert_eq!(stats.tenants["c"].compiles, 2, "{stats:?}");
}

/// Three tenants holding the same component, one compile slot: the
/// component is compiled once; the others, served in turn, find it
/// compiled. (Each compiled it again before: three compiles.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_holding_the_same_component_compile_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("plugins");
    let (log, hold) = (dir.path().join("log"), dir.path().join("hold"));
    let mut digest = String::new();
    for t in 0..3 {
        digest = put(
            &root.join("tenants").join(format!("t{t}")),
            "g.wasm",
            &variant("same"),
        );
    }
    let load = LoadLimits {
        compiler: noting_compiler(&log, &hold),
        compile_jobs: 1,
        tenant_compile_cpu: Duration::ZERO,
        ..LoadLimits::default()
    };
    let reg = open(&root, load, CompiledCache::at(dir.path().join("cache"))).await;
    assert_eq!(compiled(&log), vec![digest]);
    let set = reg.plugin_set();
    for t in 0..3 {
        let name = format!("t{t}");
        assert_eq!(
            set.chain(Some(&name)).plugins().len(),
            1,
            "tenant {name} serves the guard: {:?}",
            set.errors
        );
    }
}

/// With a budget of 1 ms of compile CPU per minute, a tenant that just
/// compiled waits to compile again while another tenant's compile, asked
/// for at the same time, runs at once with a slot free; the wait is
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_compile_cpu_budget_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("plugins");
    let tenant = |t: &str| root.join("tenants").join(t);
    put(&tenant("a"), "g.wasm", &variant("a1"));
    let load = LoadLimits {
        compiler: Compiler::Subprocess {
            program: env!("CARGO_BIN_EXE_toolgate").into(),
            args: Vec::new(),
        },
        compile_jobs: 2,
        tenant_compile_cpu: Duration::from_millis(1),
        ..LoadLimits::default()
    };
    let reg = open(&root, load, CompiledCache::disabled()).await;
    let stats = reg.compile_stats();
    assert_eq!(stats.tenants["a"].compiles, 1, "{stats:?}");
    assert!(stats.tenants["a"].cpu_ms_last_minute >= 1, "{stats:?}");

    put(&tenant("a"), "g.wasm", &variant("a2"));
    put(&tenant("c"), "g.wasm", &variant("c1"));
    let reload = reload_in_background(&reg);
    until("c compiles while a waits for its budget", || {
        let s = reg.compile_stats();
        s.tenants.get("c").is_some_and(|c| c.compiles == 1)
            && s.tenants["a"].over_budget
            && s.tenants["a"].waiting == 1
    })
    .await;
    let stats = reg.compile_stats();
    assert_eq!(stats.tenants["a"].compiles, 1, "{stats:?}");
    assert_eq!(stats.tenants["a"].budget_waits, 1, "{stats:?}");
    assert!(!stats.tenants["c"].over_budget, "{stats:?}");
    // `a` would compile within the minute; the test has seen enough.
    reload.abort();
}

/// A compile that failed (here past the time bound, and one that is not
/// a component) is remembered in the compiled cache: a restart reports it
/// without compiling again; forgetting failures, or other compile bounds,
/// compile it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_compiles_are_remembered_across_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, cache) = (dir.path().join("plugins"), dir.path().join("cache"));
    let slow = root.join("slow.wasm");
    let broken = root.join("broken.wasm");
    put(&root, "slow.wasm", &variant("slow"));
    // A component header, then garbage: it does not compile.
    put(&root, "broken.wasm", b"\0asm\x0d\0\x01\0\xff\xff\xff\xff");
    let load = |timeout: Duration| LoadLimits {
        compiler: Compiler::Subprocess {
            program: env!("CARGO_BIN_EXE_toolgate").into(),
            args: Vec::new(),
        },
        compile: CompileBounds {
            timeout,
            ..CompileBounds::default()
        },
        ..LoadLimits::default()
    };
    // 1 ms: no child process compiles the guard in that.
    let tight = Duration::from_millis(1);
    let message = |reg: &Registry, path: &PathBuf| {
        reg.plugin_set()
            .errors
            .iter()
            .find(|e| e.path == *path)
            .map(|e| e.message.clone())
            .unwrap_or_else(|| panic!("{} reported", path.display()))
    };
    let compiles = |reg: &Registry| reg.compile_stats().global.compiles;
    let first = open(&root, load(tight), CompiledCache::at(&cache)).await;
    assert!(message(&first, &slow).contains("compile time limit of 1 ms"));
    assert_eq!(compiles(&first), 2);
    drop(first);

    // The restart: both reported, neither compiled.
    let second = open(&root, load(tight), CompiledCache::at(&cache)).await;
    for path in [&slow, &broken] {
        let m = message(&second, path);
        assert!(m.contains("remembered from an earlier compile"), "{m}");
    }
    assert!(message(&second, &slow).contains("compile time limit of 1 ms"));
    assert_eq!(compiles(&second), 0, "compiled again after a restart");

    // Forgotten: compiled again.
    second.forget_failures();
    second.reload().await.expect("reload");
    assert_eq!(compiles(&second), 2);
    drop(second);

    // Other bounds: compiled again; the guard loads, the other does not
    // compile, and that too is remembered at the next restart.
    let roomy = Duration::from_secs(120);
    let third = open(&root, load(roomy), CompiledCache::at(&cache)).await;
    assert_eq!(compiles(&third), 2);
    assert!(!third.plugin_set().errors.iter().any(|e| e.path == slow));
    assert!(message(&third, &broken).contains("does not compile"));
    drop(third);
    let fourth = open(&root, load(roomy), CompiledCache::at(&cache)).await;
    assert_eq!(compiles(&fourth), 0);
    let m = message(&fourth, &broken);
    assert!(
        m.contains("does not compile") && m.contains("remembered"),
        "{m}"
    );
}

/// `toolgate serve` killed (SIGKILL) while a tenant's component compiles:
/// the compile child dies with it. The child is stopped first, so only
/// its parent's death can end it (a compile left to run would end on its
/// own, in time).
#[test]
fn a_killed_server_leaves_no_compile_running() {
    use rustix::process::{Pid, Signal, kill_process};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    put(
        &dir.path().join("tenants").join("bomb"),
        "bomb.wasm",
        &crate::tenant_files::compile_bomb(80_000),
    );
    let mut server = crate::KillOnDrop::spawn(
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--plugins", &dir.path().display().to_string()])
            .args(["--listen", "127.0.0.1:0", "--no-cache", "--no-watch"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let start = Instant::now();
    let child = loop {
        if let Some(pid) = compile_child_of(server.id()) {
            break pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no compile child seen"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let pid = Pid::from_raw(i32::try_from(child).expect("pid")).expect("pid");
    kill_process(pid, Signal::STOP).expect("stop the compile child");
    server.kill().expect("kill the server");
    server.wait().expect("reap the server");
    let start = Instant::now();
    while alive(child) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let orphan = alive(child);
    if orphan {
        let _ = kill_process(pid, Signal::KILL);
    }
    assert!(!orphan, "the compile child {child} outlived the server");
}

/// A child of `parent` running `toolgate compile`, if there is one.
fn compile_child_of(parent: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.filter_map(Result::ok) {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the fields after the last `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && cmdline.split(|b| *b == 0).any(|arg| arg == b"compile") {
            return Some(pid);
        }
    }
    None
}

/// Whether process `pid` runs (neither gone nor a zombie left unreaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|state| state != "Z" && state != "X")
}
