//! The `toolgate` command: check one event, replay a trace, list plugins,
//! serve the seams over HTTP, build a guard.

mod bench;
mod build_guard;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use toolgate::tokens::TenantTokens;
use toolgate::{DecideRequest, Decision, Engine, EngineConfig, Event, Seam, Verdict};

#[derive(Parser)]
#[command(
    name = "toolgate",
    version,
    about = "Sandboxed WebAssembly guards for AI-agent tool calls"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one event through a plugin directory's chain and print the result as JSON.
    Check {
        /// The plugin directory.
        #[arg(long)]
        plugins: PathBuf,
        /// The seam: routing, rewrite, steering or result.
        #[arg(long)]
        seam: Seam,
        /// The event as JSON (a file, or - for standard input).
        #[arg(long)]
        event: PathBuf,
        /// The hook's state as a JSON object (a file).
        #[arg(long)]
        state: Option<PathBuf>,
        /// The tenant the call belongs to (runs the global chain, then the tenant's own).
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Replay a JSON-lines trace of `{seam, event, state?, tenant?}` and summarise.
    Replay {
        /// The plugin directory.
        #[arg(long)]
        plugins: PathBuf,
        /// The trace file (JSON lines), or - for standard input.
        file: PathBuf,
        /// Print each decision as a JSON line instead of a readable line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// List the plugins in a directory, the seams each subscribes to and its limits.
    List {
        /// The plugin directory.
        #[arg(long)]
        plugins: PathBuf,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Measure what a directory's guards cost: per guard, fresh-instance calls against a
    /// kept instance; per seam, the whole chain's decisions/s at a concurrency.
    Bench(bench::BenchArgs),
    /// Serve the four seams over HTTP (see the server module's docs for the endpoints).
    Serve(Box<ServeArgs>),
    /// Build a guard in Rust, Go, JS/TS or Python (told apart by its files) into a component.
    Build {
        /// The guard: its directory (with Cargo.toml, go.mod or *.go, guard.ts/js,
        /// index.ts/js, guard.py or main.py) or its source file.
        src: PathBuf,
        /// The component to write. Default: the guard's name plus .wasm, here.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The guest-sdk directory holding <lang>/build. Default: $TOOLGATE_SDK, else the
        /// first guest-sdk directory above the guard or above this executable.
        #[arg(long)]
        sdk: Option<PathBuf>,
        /// Then pre-initialise the component (see `toolgate snapshot`).
        #[arg(long)]
        snapshot: bool,
    },
    /// Compile a component read from standard input and write its native code to
    /// standard output, under memory and CPU limits (run by toolgate itself: the
    /// bounded compile of `docs/plugins.md`).
    #[command(hide = true)]
    Compile(toolgate::compile::ChildArgs),
    /// Pre-initialise a guard: call each of its seams once and save the warmed-up
    /// instance as a new component, so every fresh instance skips the runtime's start-up.
    Snapshot {
        /// The guard component.
        component: PathBuf,
        /// Where to write the snapshot. Default: replace the component (atomically).
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The warm-up calls, as a JSON-lines trace like `replay`'s (`{seam, event,
        /// state?}`; the tenant is ignored). Default: one harmless `run_query` per seam.
        #[arg(long)]
        warm_up: Option<PathBuf>,
    },
}

/// Caps on plugin files, compiles and the load probe (see `docs/plugins.md`).
#[derive(clap::Args, Clone, Debug)]
struct LoadArgs {
    /// Largest manifest (toolgate.toml) read, in KiB.
    #[arg(long, default_value_t = 1024)]
    max_manifest_kib: u64,
    /// Largest component (*.wasm) read and compiled, in MiB.
    #[arg(long, default_value_t = 64)]
    max_component_mib: u64,
    /// Longest one compile may take, in milliseconds (then it is killed and the plugin refused).
    #[arg(long, default_value_t = 120_000)]
    compile_timeout_ms: u64,
    /// Most memory (RLIMIT_DATA of the compiling child process) one compile may use, in MiB.
    #[arg(long, default_value_t = 2048)]
    compile_memory_mib: u64,
    /// Compiles that may run at once (each directory runs at most one; waiting ones
    /// are served the global directory's first, then tenant by tenant in turn).
    #[arg(long, default_value_t = 2)]
    compile_jobs: usize,
    /// CPU time a tenant's compiles may use per minute, in milliseconds: a tenant
    /// that used more in the last minute waits to compile (0: no budget).
    #[arg(long, default_value_t = 10_000)]
    tenant_compile_cpu_ms: u64,
    /// Longest the load probe (one instantiation of a new plugin) may take, in
    /// milliseconds, whatever the plugin's own timeout.
    #[arg(long, default_value_t = 1000)]
    probe_timeout_ms: u64,
    /// Compile in this process instead of a child process (no memory bound).
    #[arg(long)]
    compile_in_process: bool,
}

impl LoadArgs {
    fn limits(&self) -> Result<toolgate::registry::LoadLimits> {
        use std::time::Duration;
        use toolgate::compile::{CompileBounds, Compiler};
        if self.max_manifest_kib == 0 || self.max_component_mib == 0 {
            return Err(bad(
                "--max-manifest-kib and --max-component-mib must be at least 1",
            ));
        }
        if self.compile_timeout_ms == 0 || self.compile_memory_mib < 32 {
            return Err(bad(
                "--compile-timeout-ms must be at least 1 and --compile-memory-mib at least 32",
            ));
        }
        if self.compile_jobs == 0 || self.probe_timeout_ms == 0 {
            return Err(bad(
                "--compile-jobs and --probe-timeout-ms must be at least 1",
            ));
        }
        let compiler = if self.compile_in_process {
            Compiler::InProcess
        } else {
            let program = std::env::current_exe()
                .context("cannot find the toolgate executable to compile with")?;
            Compiler::Subprocess {
                program,
                args: Vec::new(),
            }
        };
        Ok(toolgate::registry::LoadLimits {
            max_manifest_bytes: self.max_manifest_kib.saturating_mul(1 << 10),
            max_component_bytes: self.max_component_mib.saturating_mul(1 << 20),
            compiler,
            compile: CompileBounds {
                timeout: Duration::from_millis(self.compile_timeout_ms),
                memory_bytes: self.compile_memory_mib.saturating_mul(1 << 20),
            },
            compile_jobs: self.compile_jobs,
            tenant_compile_cpu: Duration::from_millis(self.tenant_compile_cpu_ms),
            probe_timeout: Duration::from_millis(self.probe_timeout_ms),
        })
    }
}

/// `toolgate serve`'s options.
#[derive(clap::Args)]
struct ServeArgs {
    /// The plugin directory.
    #[arg(long)]
    plugins: PathBuf,
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: String,
    /// A file holding the bearer token every endpoint but /healthz requires.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// A file of tenants' own tokens (TOML: `tenant = "sha256:<hex>"`, the
    /// SHA-256 of each token): a request with one calls the seams only, as
    /// its tenant. Needs --token-file (the operator's).
    #[arg(long)]
    tenant_tokens_file: Option<PathBuf>,
    /// Largest request body accepted, in KiB (larger: 413).
    #[arg(long, default_value_t = 1024)]
    max_body_kib: usize,
    /// Longest a request may take, in milliseconds (longer: 503).
    #[arg(long, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// Most connections open at once; more are closed at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Longest a request's head may take to arrive from its first byte, in
    /// milliseconds (slower: the connection is closed).
    #[arg(long, default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// Longest a connection with no request in progress stays open without
    /// a byte read or written, in milliseconds (kept-alive connections too).
    #[arg(long, default_value_t = 30_000)]
    idle_timeout_ms: u64,
    /// Longest POST /v1/reload waits for its reload, in milliseconds; a
    /// reload not done by then is answered 202 Accepted and goes on (its
    /// outcome shows in GET /v1/plugins and the log). Must be under
    /// --request-timeout-ms; 0 answers 202 unless the reload is done at once.
    #[arg(long, default_value_t = 10_000)]
    reload_wait_ms: u64,
    /// Do not watch the plugin directory (reload only on SIGHUP or POST /v1/reload).
    #[arg(long)]
    no_watch: bool,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    load: LoadArgs,
}

/// The operator's policy for tenants, for when the global manifest does not
/// set it (its `[ceilings]`, `[shares]` and `[quarantine]` override these
/// key by key; see docs/plugins.md).
#[derive(clap::Args, Clone, Debug, Default)]
struct PolicyArgs {
    /// Guard instances alive at once across all plugins (the engine's pool;
    /// 0: the default).
    #[arg(long, default_value_t = 256)]
    max_instances: u32,
    /// Guard calls running past their first millisecond that may run at
    /// once, host-wide; the rest take turns, tenant by tenant (default:
    /// half the cores, at least 1).
    #[arg(long)]
    long_lane: Option<u32>,
    /// CPU priority of the threads those long calls run on: `idle` (Linux's
    /// SCHED_IDLE: only on a core nothing else wants) or a nice value 0..=19.
    #[arg(long, default_value_t = toolgate::LanePriority::Idle)]
    long_lane_priority: toolgate::LanePriority,
    /// Ceiling on a tenant plugin's fuel per call.
    #[arg(long)]
    tenant_max_fuel: Option<u64>,
    /// Ceiling on a tenant plugin's memory, MiB.
    #[arg(long)]
    tenant_max_memory_mib: Option<u64>,
    /// Ceiling on a tenant plugin's timeout, ms.
    #[arg(long)]
    tenant_max_timeout_ms: Option<u64>,
    /// Ceiling on a tenant plugin's largest returned string, KiB.
    #[arg(long)]
    tenant_max_return_kib: Option<u64>,
    /// Ceiling on a tenant plugin's host calls per call.
    #[arg(long)]
    tenant_max_host_calls: Option<u32>,
    /// Ceiling on a tenant plugin's log text per call, KiB.
    #[arg(long)]
    tenant_max_log_kib: Option<u64>,
    /// Instances the global account may have alive at once (default 16).
    #[arg(long)]
    global_instances: Option<u32>,
    /// Memory the global account may commit at once, MiB (default 2048).
    #[arg(long)]
    global_memory_mib: Option<u64>,
    /// Instances each tenant may have alive at once (default 4).
    #[arg(long)]
    tenant_instances: Option<u32>,
    /// Memory each tenant may commit at once, MiB (default 512).
    #[arg(long)]
    tenant_memory_mib: Option<u64>,
    /// Plugins each tenant may have; a tenant with more is not loaded
    /// (default 16).
    #[arg(long)]
    tenant_plugins: Option<u32>,
    /// Compiled code each tenant's plugins may hold together, MiB; counted
    /// in the memory budget (default 256).
    #[arg(long)]
    tenant_code_mib: Option<u64>,
    /// Guest log each tenant's guard calls may write a second, KiB; lines
    /// beyond it are dropped and counted; 0: no limit (default 256).
    #[arg(long)]
    tenant_log_kib_per_s: Option<u32>,
    /// Host-wide memory budget for all shares, MiB (default: half the RAM).
    #[arg(long)]
    memory_budget_mib: Option<u64>,
    /// Requests the global account may have in progress at once (default:
    /// four per core).
    #[arg(long)]
    global_requests: Option<u32>,
    /// Requests each tenant may have in progress at once; more wait, then
    /// are refused with 429 (default: one per core).
    #[arg(long)]
    tenant_requests: Option<u32>,
    /// Requests each tenant may start per second; more wait their turn,
    /// then are refused with 429; 0: no limit (default 0).
    #[arg(long)]
    tenant_rate: Option<u32>,
    /// Requests each tenant may start at once on top of its rate after a
    /// pause; 0: a second's worth (default 0).
    #[arg(long)]
    tenant_burst: Option<u32>,
    /// How long a call waits for its share before faulting, ms (default 1000).
    #[arg(long)]
    share_wait_ms: Option<u64>,
    /// Faults within the window that quarantine a guard; 0: off (default 5).
    #[arg(long)]
    quarantine_faults: Option<u32>,
    /// The quarantine's fault window, ms (default 30000).
    #[arg(long)]
    quarantine_window_ms: Option<u64>,
    /// How long a quarantined guard is not run before a probe, ms (default 30000).
    #[arg(long)]
    quarantine_cooldown_ms: Option<u64>,
}

impl PolicyArgs {
    /// The engine's settings and the policy these flags describe.
    fn resolve(&self) -> Result<(EngineConfig, toolgate::Policy)> {
        use std::time::Duration;
        let mut policy = toolgate::Policy::default();
        let c = &mut policy.ceilings;
        let bytes =
            |v: u64, unit: u64| usize::try_from(v.saturating_mul(unit)).unwrap_or(usize::MAX);
        if let Some(v) = self.tenant_max_fuel {
            c.fuel = v;
        }
        if let Some(v) = self.tenant_max_memory_mib {
            c.memory_bytes = bytes(v, 1 << 20);
        }
        if let Some(v) = self.tenant_max_timeout_ms {
            c.timeout = Duration::from_millis(v);
        }
        if let Some(v) = self.tenant_max_return_kib {
            c.max_return_bytes = bytes(v, 1 << 10);
        }
        if let Some(v) = self.tenant_max_host_calls {
            c.host_calls = v;
        }
        if let Some(v) = self.tenant_max_log_kib {
            c.log_bytes = bytes(v, 1 << 10);
        }
        let s = &mut policy.shares;
        s.global_instances = self.global_instances.unwrap_or(s.global_instances);
        s.global_memory_mib = self.global_memory_mib.unwrap_or(s.global_memory_mib);
        s.tenant_instances = self.tenant_instances.unwrap_or(s.tenant_instances);
        s.tenant_memory_mib = self.tenant_memory_mib.unwrap_or(s.tenant_memory_mib);
        s.tenant_plugins = self.tenant_plugins.unwrap_or(s.tenant_plugins);
        s.tenant_code_mib = self.tenant_code_mib.unwrap_or(s.tenant_code_mib);
        s.tenant_log_kib_per_s = self.tenant_log_kib_per_s.unwrap_or(s.tenant_log_kib_per_s);
        s.memory_budget_mib = self.memory_budget_mib.unwrap_or(s.memory_budget_mib);
        s.global_requests = self.global_requests.unwrap_or(s.global_requests);
        s.tenant_requests = self.tenant_requests.unwrap_or(s.tenant_requests);
        s.tenant_rate = self.tenant_rate.unwrap_or(s.tenant_rate);
        s.tenant_burst = self.tenant_burst.unwrap_or(s.tenant_burst);
        if let Some(v) = self.share_wait_ms {
            s.wait = Duration::from_millis(v);
        }
        let q = &mut policy.quarantine;
        q.faults = self.quarantine_faults.unwrap_or(q.faults);
        if let Some(v) = self.quarantine_window_ms {
            q.window = Duration::from_millis(v);
        }
        if let Some(v) = self.quarantine_cooldown_ms {
            q.cooldown = Duration::from_millis(v);
        }
        if let Err((key, why)) = policy.check() {
            return Err(bad(format!("policy: `{key}`: {why}")));
        }
        let engine = EngineConfig {
            max_instances: if self.max_instances == 0 {
                EngineConfig::default().max_instances
            } else {
                self.max_instances
            },
            long_lane: self
                .long_lane
                .unwrap_or_else(toolgate::engine::default_long_lane),
            long_lane_priority: self.long_lane_priority,
            ..EngineConfig::default()
        };
        Ok((engine, policy))
    }
}

/// Where compiled components are cached (see `docs/plugins.md`).
#[derive(clap::Args, Clone, Debug)]
struct CacheArgs {
    /// Compiled-component cache directory. Default: $TOOLGATE_CACHE_DIR, else
    /// $XDG_CACHE_HOME/toolgate, else ~/.cache/toolgate.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Compile every component, read and write no cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl CacheArgs {
    fn cache(&self) -> toolgate::cache::CompiledCache {
        use toolgate::cache::CompiledCache;
        let cache = match (&self.cache_dir, self.no_cache) {
            (_, true) => CompiledCache::disabled(),
            (Some(dir), false) => CompiledCache::at(dir),
            (None, false) => CompiledCache::from_env(),
        };
        // A cache others can write is native code they can make us run.
        if let Err(e) = cache.check_dir() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "toolgate: warning: {e}; compiling every component instead"
            );
            return CompiledCache::disabled();
        }
        cache
    }
}

/// Bad input from the user: reported on one line, exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

fn main() -> ExitCode {
    toolgate::logging::init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<BadInput>() || e.is::<toolgate::Error>() => {
            eprintln!("toolgate: error: {e:#}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("toolgate: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Check {
            plugins,
            seam,
            event,
            state,
            tenant,
            cache,
            load,
        } => {
            if !plugins.is_dir() {
                return Err(bad(format!(
                    "plugin directory {} does not exist",
                    plugins.display()
                )));
            }
            let event = read_json(&event, "event")?;
            let event = Event::from_json(seam, event)
                .map_err(|e| bad(format!("event is not a valid {seam} event: {e}")))?;
            let state = match state {
                Some(path) => read_json(&path, "state")?,
                None => json!({}),
            };
            if !state.is_object() {
                return Err(bad("state must be a JSON object"));
            }
            let tenant = tenant
                .as_deref()
                .map(toolgate::TenantName::try_from)
                .transpose()
                .map_err(|e| bad(e.to_string()))?;
            let registry = open(&plugins, &cache, &load).await?;
            let decision = registry
                .plugin_set()
                .chain(tenant.as_deref())
                .decide(&event, &state)
                .await;
            println!("{}", serde_json::to_string_pretty(&decision)?);
            if let Some(entry) = decision.unavailable() {
                // The host's doing, not the guards': nothing was decided.
                eprintln!(
                    "toolgate: not decided: guard `{}` could not be run in time ({}): {}",
                    entry.plugin,
                    entry.fault.map_or("overloaded", toolgate::Fault::as_str),
                    entry.detail.as_deref().unwrap_or("")
                );
                std::process::exit(3);
            }
        }
        Command::Replay {
            plugins,
            file,
            json,
            cache,
            load,
        } => replay(&open(&plugins, &cache, &load).await?, &file, json).await?,
        Command::List {
            plugins,
            cache,
            load,
        } => list(&plugins, &cache, &load).await?,
        // The compile child: its exit code says how it went.
        Command::Compile(args) => std::process::exit(toolgate::compile::child_main(&args)),
        Command::Serve(args) => serve(*args).await?,
        Command::Bench(args) => bench::run(args).await?,
        Command::Build {
            src,
            out,
            sdk,
            snapshot,
        } => {
            let out = build_guard::build(&src, out, sdk)?;
            if snapshot {
                snapshot_file(&out, None, None).await?;
            }
        }
        Command::Snapshot {
            component,
            out,
            warm_up,
        } => snapshot_file(&component, out, warm_up.as_deref()).await?,
    }
    Ok(())
}

/// `toolgate snapshot`: pre-initialises `input` into `out` (default: in
/// place) after the calls of the `warm_up` trace (default: one per seam),
/// written through a temporary file and a rename so a watching host never
/// loads half a component.
async fn snapshot_file(input: &Path, out: Option<PathBuf>, warm_up: Option<&Path>) -> Result<()> {
    let warm_up = match warm_up {
        Some(file) => read_trace(file)?
            .into_iter()
            .map(|(_, r)| (r.event, r.state))
            .collect(),
        None => toolgate::snapshot::default_warm_up(),
    };
    let bytes =
        std::fs::read(input).map_err(|e| bad(format!("component {}: {e}", input.display())))?;
    let engine = Engine::new(EngineConfig::default())?;
    let snapshot = toolgate::snapshot::snapshot(&engine, input, &bytes, &warm_up).await?;
    let out = out.unwrap_or_else(|| input.to_path_buf());
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::fs::write(tmp.path(), &snapshot)
        .with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.persist(&out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "snapshot {} ({} -> {} bytes)",
        out.display(),
        bytes.len(),
        snapshot.len()
    );
    Ok(())
}

fn read_json(path: &Path, what: &str) -> Result<Value> {
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| bad(format!("{what}: cannot read standard input: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| bad(format!("{what} file {}: {e}", path.display())))?
    };
    serde_json::from_str(&text).map_err(|e| {
        let source = if path == Path::new("-") {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        bad(format!("{what} in {source} is not valid JSON: {e}"))
    })
}

/// Opens a plugin directory (global and tenant chains) for one command,
/// refusing any manifest that fails.
async fn open(dir: &Path, cache: &CacheArgs, load: &LoadArgs) -> Result<toolgate::Registry> {
    open_for(dir, cache, load, &PolicyArgs::default(), false).await
}

/// Opens a plugin directory (global and tenant chains) for one command.
/// Plugins that fail are warned about; a manifest that fails is an error,
/// so a broken manifest never silently runs fewer guards.
///
/// `serve` passes `global_only`: only the global directory is loaded (the
/// tenants are pending, see [`toolgate::Registry::start_with`], so the
/// server answers at once); a tenant's broken manifest must not stop the
/// server from starting (tenants are not trusted); it is logged and that
/// tenant runs the global chain only.
async fn open_for(
    dir: &Path,
    cache: &CacheArgs,
    load: &LoadArgs,
    policy: &PolicyArgs,
    global_only: bool,
) -> Result<toolgate::Registry> {
    let registry = open_registry(dir, cache, load, policy, global_only).await?;
    let set = registry.plugin_set();
    let global_manifest = dir.join(toolgate::manifest::FILE_NAME);
    let manifest_errors: Vec<&toolgate::registry::LoadIssue> = set
        .errors
        .iter()
        .filter(|e| e.kind == toolgate::registry::IssueKind::Manifest)
        .filter(|e| !global_only || e.path == global_manifest)
        .collect();
    if let Some(first) = manifest_errors.first() {
        return Err(bad(first.message.clone()));
    }
    for e in &set.errors {
        match e.kind {
            toolgate::registry::IssueKind::Snapshot => {
                eprintln!("toolgate: warning: {}", e.message);
            }
            _ => eprintln!("toolgate: warning: plugin not loaded: {}", e.message),
        }
    }
    Ok(registry)
}

/// One line of a JSON-lines trace: its number and the request.
type TraceLine = (usize, DecideRequest);

/// Reads and parses a whole trace (`-`: standard input); the first bad line
/// is an error naming the file and the line.
fn read_trace(file: &Path) -> Result<Vec<TraceLine>> {
    let text = if file == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| bad(format!("trace file {}: {e}", file.display())))?
    };
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let request =
                parse_line(line).map_err(|e| bad(format!("{}:{}: {e}", file.display(), i + 1)))?;
            Ok((i + 1, request))
        })
        .collect()
}

async fn replay(registry: &toolgate::Registry, file: &Path, as_json: bool) -> Result<()> {
    let mut summary = Summary::default();
    for (
        n,
        DecideRequest {
            event,
            state,
            tenant,
        },
    ) in read_trace(file)?
    {
        let decision = registry
            .plugin_set()
            .chain(tenant.as_deref())
            .decide(&event, &state)
            .await;
        summary.add(&decision);
        if as_json {
            println!(
                "{}",
                json!({"line": n, "seam": event.seam(), "result": decision.result, "trace": decision.trace})
            );
        } else {
            println!("{}", describe(n, &event, &decision));
        }
    }
    summary.print();
    Ok(())
}

/// One trace line: `{"seam": ..., "event": ..., "state"?: ..., "tenant"?: ...}`
/// — the seam, then exactly what the HTTP service takes as a request body,
/// checked by the same parser (errors name the field).
fn parse_line(line: &str) -> Result<DecideRequest> {
    let mut v: Value = serde_json::from_str(line).map_err(|e| anyhow!("not valid JSON: {e}"))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| anyhow!("a line must be a JSON object"))?;
    let seam: Seam = match obj.remove("seam") {
        Some(Value::String(s)) => s.parse().map_err(|e: String| anyhow!(e))?,
        Some(_) => return Err(anyhow!("field `seam` must be a string")),
        None => return Err(anyhow!("missing field `seam`")),
    };
    DecideRequest::from_value(seam, v).map_err(|e| anyhow!(e))
}

fn describe(n: usize, event: &Event, d: &Decision<Verdict>) -> String {
    let what = match event {
        Event::Routing(e) => format!("routing {} tools", e.narrowed_tool_names.len()),
        Event::Rewrite(e) => format!("rewrite {}", e.tool_name),
        Event::Steering(e) => format!("steering {}", e.tool_name),
        Event::Result(e) => format!("result {}", e.tool_name),
    };
    let guards = d
        .trace
        .iter()
        .map(|t| match t.fault {
            Some(f) => format!("{}: fault {f} {}µs", t.plugin, t.micros),
            None => format!("{}: {} {}µs", t.plugin, t.outcome.as_str(), t.micros),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let result = serde_json::to_value(&d.result).unwrap_or(Value::Null);
    format!("#{n} {what} -> {result} [{guards}]")
}

#[derive(Default)]
struct Summary {
    decisions: usize,
    outcomes: BTreeMap<String, usize>,
    per_plugin: BTreeMap<String, (BTreeMap<String, usize>, Vec<u64>)>,
}

impl Summary {
    fn add(&mut self, d: &Decision<Verdict>) {
        self.decisions += 1;
        for t in &d.trace {
            let outcome = match t.fault {
                Some(f) => format!("fault:{f}"),
                None => t.outcome.as_str().to_string(),
            };
            *self.outcomes.entry(outcome.clone()).or_default() += 1;
            let (outcomes, micros) = self.per_plugin.entry(t.plugin.clone()).or_default();
            *outcomes.entry(outcome).or_default() += 1;
            micros.push(t.micros);
        }
    }

    fn print(&self) {
        println!("--");
        println!(
            "{} decisions; outcomes: {}",
            self.decisions,
            counts(&self.outcomes)
        );
        for (plugin, (outcomes, micros)) in &self.per_plugin {
            let mut sorted = micros.clone();
            sorted.sort_unstable();
            println!(
                "{plugin}: {} calls ({}), p50 {}µs, p99 {}µs",
                sorted.len(),
                counts(outcomes),
                percentile(&sorted, 50),
                percentile(&sorted, 99)
            );
        }
    }
}

fn counts(m: &BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) * p).div_ceil(100).min(sorted.len() - 1)]
}

/// Opens `dir` with the command's cache settings; whatever fails to load
/// is in the plugin set's `errors`.
async fn open_registry(
    dir: &Path,
    cache: &CacheArgs,
    load: &LoadArgs,
    policy: &PolicyArgs,
    global_only: bool,
) -> Result<toolgate::Registry> {
    if !dir.is_dir() {
        return Err(bad(format!(
            "plugin directory {} does not exist",
            dir.display()
        )));
    }
    let (engine, policy) = policy.resolve()?;
    let engine = Engine::new(engine)?;
    let options = toolgate::RegistryOptions {
        cache: cache.cache(),
        policy,
        load: load.limits()?,
    };
    Ok(if global_only {
        toolgate::Registry::start_with(engine, dir, options).await?
    } else {
        toolgate::Registry::open_with(engine, dir, options).await?
    })
}

async fn list(dir: &Path, cache: &CacheArgs, load: &LoadArgs) -> Result<()> {
    let registry = open_registry(dir, cache, load, &PolicyArgs::default(), false)
        .await
        .with_context(|| format!("listing {}", dir.display()))?;
    let set = registry.plugin_set();
    let description = set.describe();
    let errors: Vec<&str> = description
        .errors
        .iter()
        .map(|e| e.message.as_str())
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "generation": description.generation,
            "plugins": description.global,
            "tenants": description.tenants,
            "errors": errors,
            "refused": description.refused,
            "policy": description.policy,
            "shares": description.shares,
            "cache": {"dir": registry.cache().dir(), "stats": registry.cache_stats()},
            "compiles": registry.compile_stats(),
        }))?
    );
    Ok(())
}

/// Like `eprintln!`, but a closed standard error (the parent stopped
/// reading) never panics a running server.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

async fn serve(args: ServeArgs) -> Result<()> {
    use std::sync::Arc;
    use toolgate::metrics::Metrics;
    use toolgate::server::{self, ServerConfig};

    if !args.plugins.is_dir() {
        return Err(bad(format!(
            "plugin directory {} does not exist",
            args.plugins.display()
        )));
    }
    let token = match &args.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("token file {}: {e}", path.display())))?;
            let token = text.trim().to_string();
            if token.is_empty() {
                return Err(bad(format!("token file {} is empty", path.display())));
            }
            Some(token)
        }
        None => None,
    };
    let tenant_tokens = match &args.tenant_tokens_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("tenant tokens file {}: {e}", path.display())))?;
            let tokens = TenantTokens::parse(&text)
                .map_err(|e| bad(format!("tenant tokens file {}: {e}", path.display())))?;
            match &token {
                None => {
                    return Err(bad(
                        "--tenant-tokens-file needs --token-file: the plugin list, reloads and \
                         metrics are the operator's",
                    ));
                }
                Some(t) if tokens.holds(t) => {
                    return Err(bad(format!(
                        "tenant tokens file {}: a tenant has the operator's token",
                        path.display()
                    )));
                }
                Some(_) => tokens,
            }
        }
        None => TenantTokens::default(),
    };
    if args.max_body_kib == 0 {
        return Err(bad("--max-body-kib must be at least 1"));
    }
    if args.max_connections == 0 {
        return Err(bad("--max-connections must be at least 1"));
    }
    if args.reload_wait_ms >= args.request_timeout_ms.max(1) {
        return Err(bad(format!(
            "--reload-wait-ms ({}) must be less than --request-timeout-ms ({})",
            args.reload_wait_ms, args.request_timeout_ms
        )));
    }
    let millis = |ms: u64| std::time::Duration::from_millis(ms.max(1));
    let config = ServerConfig {
        max_body_bytes: args.max_body_kib.saturating_mul(1024),
        request_timeout: millis(args.request_timeout_ms),
        token,
        tenant_tokens,
        max_connections: args.max_connections,
        header_read_timeout: millis(args.header_timeout_ms),
        idle_timeout: millis(args.idle_timeout_ms),
        reload_wait: std::time::Duration::from_millis(args.reload_wait_ms),
    };
    let registry =
        Arc::new(open_for(&args.plugins, &args.cache, &args.load, &args.policy, true).await?);
    let set = registry.plugin_set();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| bad(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener.local_addr()?;
    if let Some(warning) = server::exposure_warning(&addr, config.token.is_some()) {
        say!("toolgate: warning: {warning}");
    }
    // Hot reload: on any change in the directory tree, and on SIGHUP.
    let _watch = if args.no_watch {
        None
    } else {
        Some(Arc::clone(&registry).watch(toolgate::watch::DEFAULT_SETTLE)?)
    };
    #[cfg(unix)]
    let hup = Arc::clone(&registry).on_sighup()?;
    let metrics = Arc::new(Metrics::new());
    let router = server::router(Arc::clone(&registry), Arc::clone(&metrics), config.clone());
    say!(
        "toolgate: serving {} global plugin(s), {} tenant(s) loading (GET /readyz), from {} on \
         http://{addr}",
        set.global.plugins().len(),
        set.pending.len(),
        args.plugins.display()
    );
    drop(set);
    // Tenants come online as each is loaded; until then their calls are
    // answered 503 (not ready).
    let loading = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            if let Ok(report) = registry.load_pending().await {
                let set = registry.plugin_set();
                say!(
                    "toolgate: {} tenant(s) loaded ({} refused, {} load error(s))",
                    set.tenants.len(),
                    set.refused.len(),
                    report.errors.len()
                );
            }
        })
    };
    server::serve_with(
        listener,
        router,
        &config,
        Some(metrics),
        server::shutdown_signal(),
    )
    .await?;
    #[cfg(unix)]
    hup.abort();
    loading.abort();
    say!("toolgate: shut down");
    Ok(())
}
