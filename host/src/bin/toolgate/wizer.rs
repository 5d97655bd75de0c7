//! `toolgate wizer` (hidden): the pre-initialiser componentize-js runs on
//! a JS guard's engine, made deterministic, so the same sources build the
//! same component bytes.
//!
//! componentize-js spawns `wizerBin --allow-wasi --init-func NAME
//! --dir=SOURCES --mapdir=/::WORKSPACE --wasm-bulk-memory=true
//! --inherit-env=true -o=OUT IN` with the engine's arguments on standard
//! input, and snapshots what the engine's initialisation leaves in memory.
//! The stock wizer gives that initialisation the machine's random bytes
//! and clocks, and shows it the build's temporary directories by their
//! host paths: all of it ends up in the snapshot, different every build.
//! This one takes the same command line (the JS build links
//! `toolgate-wizer` to this executable, which runs this subcommand) and
//! differs in what the guest sees:
//!
//! - random bytes from a generator with a fixed seed, a wall clock stopped
//!   at the Unix epoch and a monotonic clock that advances a fixed step per
//!   reading;
//! - each `--dir` at a fixed guest path (`/toolgate-dir0`, ...) instead of
//!   its host path, and every argument on standard input that names a
//!   preopened host directory rewritten to its guest path.
//!
//! The engine's core module (instrumented for the snapshot) is the same
//! for every guard of a world, so its compiled code is kept in the
//! compiled cache (`modules/`, checked as components' entries are): only
//! the first build compiles it. The cache is found as everywhere else
//! (`TOOLGATE_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`); those variables are
//! not passed on to the initialisation.
//!
//! Only the build-time snapshot is seeded: the component's random and
//! clock imports are stubbed out by the JS build (its engine features are
//! disabled), as before.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{ArgAction, Args};
use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime::{Config, Engine, Extern, Instance, Linker, Store, Val};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, HostMonotonicClock, HostWallClock, I32Exit, WasiCtxBuilder};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// The name componentize-js is given as its `wizerBin` (a link to this
/// executable): invoked by that name, `toolgate` runs `toolgate wizer`.
pub const LINK_NAME: &str = "toolgate-wizer";

/// The command line of wizer 10 that componentize-js uses.
#[derive(Args, Debug)]
pub struct WizerArgs {
    /// Let the initialisation call WASI (always the case here; accepted for wizer's command line).
    #[arg(long)]
    allow_wasi: bool,
    /// The export to call to initialise the module.
    #[arg(short = 'f', long, default_value = "wizer.initialize")]
    init_func: String,
    /// A host directory the initialisation may read, seen at a fixed guest path.
    #[arg(long, value_name = "DIR")]
    dir: Vec<PathBuf>,
    /// `GUEST::HOST`: a host directory the initialisation sees at GUEST.
    #[arg(long, value_name = "GUEST::HOST")]
    mapdir: Vec<String>,
    /// Whether the initialisation sees this process's environment.
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    inherit_env: bool,
    /// Bulk memory is always enabled; accepted for wizer's command line.
    #[arg(long, action = ArgAction::Set, default_value_t = true)]
    wasm_bulk_memory: bool,
    /// The pre-initialised module to write.
    #[arg(short = 'o', value_name = "OUT")]
    output: PathBuf,
    /// The core module to pre-initialise.
    input: PathBuf,
}

/// A wall clock stopped at the Unix epoch.
struct Epoch;

impl HostWallClock for Epoch {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// A monotonic clock that advances one microsecond per reading: time
/// passes (a loop waiting for it ends) the same way in every build.
struct Ticks(std::sync::atomic::AtomicU64);

impl HostMonotonicClock for Ticks {
    fn resolution(&self) -> u64 {
        1_000
    }
    fn now(&self) -> u64 {
        self.0
            .fetch_add(1_000, std::sync::atomic::Ordering::Relaxed)
    }
}

/// The variables that say where the compiled cache is: read by `toolgate
/// wizer` itself (the JS build passes them on), never shown to the
/// initialisation, so they cannot end up in the snapshot.
const OWN_ENV: [&str; 3] = ["TOOLGATE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"];

/// The seeds of the initialisation's random sources (any fixed values).
const SECURE_SEED: u64 = 0x746f_6f6c_6761_7465;
const INSECURE_SEED: u64 = 0x7769_7a65_7200_0001;

/// Preopened directories: (host, guest).
fn preopens(args: &WizerArgs) -> Result<Vec<(PathBuf, String)>> {
    let mut dirs: Vec<(PathBuf, String)> = args
        .dir
        .iter()
        .enumerate()
        .map(|(i, host)| (host.clone(), format!("/toolgate-dir{i}")))
        .collect();
    for map in &args.mapdir {
        let (guest, host) = map
            .split_once("::")
            .ok_or_else(|| anyhow!("--mapdir {map}: expected GUEST::HOST"))?;
        dirs.push((PathBuf::from(host), guest.to_string()));
    }
    Ok(dirs)
}

/// `arg` with a leading preopened host directory replaced by its guest
/// path (`/work/x/a.js` -> `/toolgate-dir0/a.js`, `/work/y/` -> `/`).
fn to_guest(arg: &str, dirs: &[(PathBuf, String)]) -> String {
    // The longest host path first: a directory inside another maps to its own.
    let mut by_len: Vec<&(PathBuf, String)> = dirs.iter().collect();
    by_len.sort_by_key(|(host, _)| std::cmp::Reverse(host.as_os_str().len()));
    for (host, guest) in by_len {
        let Some(host) = host.to_str() else { continue };
        let host = host.trim_end_matches('/');
        let Some(rest) = arg.strip_prefix(host) else {
            continue;
        };
        if rest.is_empty() || rest.starts_with('/') {
            let rest = rest.trim_start_matches('/');
            return match (guest.ends_with('/'), rest.is_empty() && !arg.ends_with('/')) {
                (_, true) => guest.clone(),
                (true, false) => format!("{guest}{rest}"),
                (false, false) => format!("{guest}/{rest}"),
            };
        }
    }
    arg.to_string()
}

/// The arguments on standard input, paths rewritten (see [`to_guest`]).
fn guest_stdin(text: &str, dirs: &[(PathBuf, String)]) -> String {
    text.split_whitespace()
        .map(|arg| to_guest(arg, dirs))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `toolgate wizer`.
pub async fn run(args: WizerArgs) -> Result<()> {
    let wasm = std::fs::read(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let dirs = preopens(&args)?;
    let mut stdin = String::new();
    std::io::stdin()
        .read_to_string(&mut stdin)
        .context("reading the arguments on standard input")?;

    let mut wasi = WasiCtxBuilder::new();
    wasi.stdin(MemoryInputPipe::new(guest_stdin(&stdin, &dirs)))
        .inherit_stdout()
        .inherit_stderr()
        .secure_random(StdRng::seed_from_u64(SECURE_SEED))
        .insecure_random(StdRng::seed_from_u64(INSECURE_SEED))
        .insecure_random_seed(u128::from(INSECURE_SEED))
        .wall_clock(Epoch)
        .monotonic_clock(Ticks(0.into()));
    if args.inherit_env {
        for (name, value) in std::env::vars_os() {
            if let (Some(name), Some(value)) = (name.to_str(), value.to_str())
                && !OWN_ENV.contains(&name)
            {
                wasi.env(name, value);
            }
        }
    }
    for (host, guest) in &dirs {
        wasi.preopened_dir(host, guest, FsPerms::ReadWrite)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot open {}", host.display()))?;
    }
    let wasi = wasi.build_p1();

    let mut wizer = Wizer::new();
    wizer.init_func(&args.init_func);
    let (cx, instrumented) = wizer.instrument(&wasm)?;
    let engine = Engine::new(&Config::new())?;
    // The engine module is the same for every guard of a world: compiled
    // once, then read from the compiled cache.
    let module = toolgate::CompiledCache::from_env()
        .load_or_compile_module(&engine, &instrumented)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot compile {}", args.input.display()))?;
    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    p1::add_to_linker_async(&mut linker, |cx| cx)?;
    linker.define_unknown_imports_as_traps(&module)?;
    let mut store = Store::new(&engine, wasi);
    let instance = linker.instantiate_async(&mut store, &module).await?;
    initialize(&mut store, &instance, &args.init_func).await?;
    let out = wizer
        .snapshot(&cx, &mut Snapshot { store, instance })
        .await?;
    std::fs::write(&args.output, out)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    Ok(())
}

/// Calls the reactor's `_initialize` (if any), then `init_func`.
async fn initialize(
    store: &mut Store<WasiP1Ctx>,
    instance: &Instance,
    init_func: &str,
) -> Result<()> {
    if let Some(Extern::Func(f)) = instance.get_export(&mut *store, "_initialize") {
        f.typed::<(), ()>(&*store)?
            .call_async(&mut *store, ())
            .await
            .map_err(anyhow::Error::from)
            .context("calling the reactor initialization function")?;
        if init_func == "_initialize" {
            return Ok(());
        }
    }
    let Some(f) = instance.get_func(&mut *store, init_func) else {
        bail!("the Wasm module does not have a `{init_func}` function export");
    };
    match f
        .typed::<(), ()>(&*store)?
        .call_async(&mut *store, ())
        .await
    {
        Ok(()) => Ok(()),
        // The engine printed why (its script's exception) and exited.
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(I32Exit(code)) => bail!("`{init_func}` exited with status {code}"),
            None => Err(anyhow::Error::from(e))
                .with_context(|| format!("the `{init_func}` function trapped")),
        },
    }
}

/// The initialised instance, read by the snapshot.
struct Snapshot {
    store: Store<WasiP1Ctx>,
    instance: Instance,
}

impl InstanceState for Snapshot {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let value = self
            .instance
            .get_global(&mut self.store, name)
            .map(|g| g.get(&mut self.store));
        match value {
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // The instrumented module exports every global it snapshots, of these types.
            other => panic!("global {name}: cannot snapshot {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut self.store, name) {
            Some(memory) => contents(memory.data(&self.store)),
            // The instrumented module exports every memory it snapshots.
            None => panic!("memory {name} is not exported"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_become_guest_paths() {
        let dirs = vec![
            (
                PathBuf::from("/tmp/3f2a/sources"),
                "/toolgate-dir0".to_string(),
            ),
            (PathBuf::from("/tmp/toolgate-js-x1"), "/".to_string()),
        ];
        let stdin = "--initializer-script-path /tmp/3f2a/sources/initializer.js \
                     --strip-path-prefix /tmp/toolgate-js-x1/ guard.js\n";
        assert_eq!(
            guest_stdin(stdin, &dirs),
            "--initializer-script-path /toolgate-dir0/initializer.js --strip-path-prefix / guard.js"
        );
        assert_eq!(to_guest("/tmp/3f2a/sources", &dirs), "/toolgate-dir0");
        // A sibling whose name only starts like a preopen is left alone.
        assert_eq!(
            to_guest("/tmp/3f2a/sources2/x", &dirs),
            "/tmp/3f2a/sources2/x"
        );
    }
}
