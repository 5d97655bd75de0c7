//! The argument groups several subcommands share (loading, policy, cache)
//! and opening a plugin directory with them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use toolgate::{Engine, EngineConfig};

use crate::bad;

/// Caps on plugin files, compiles and the load probe (see `docs/loading.md`).
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct LoadArgs {
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
    /// Longest one try to fetch a remote plugin source (`url`, `oci`) may take, in
    /// milliseconds.
    #[arg(long, default_value_t = 30_000)]
    fetch_timeout_ms: u64,
    /// Tries to fetch a remote plugin source when a try fails in a way that may pass
    /// (unreachable, timed out, HTTP 5xx or 429); waits 250 ms, then twice as long each time.
    #[arg(long, default_value_t = 3)]
    fetch_tries: u32,
}

impl LoadArgs {
    fn limits(&self) -> Result<toolgate::LoadLimits> {
        use std::time::Duration;
        use toolgate::{CompileBounds, Compiler};
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
        if self.fetch_timeout_ms == 0 || self.fetch_tries == 0 {
            return Err(bad(
                "--fetch-timeout-ms and --fetch-tries must be at least 1",
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
        Ok(toolgate::LoadLimits {
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
            fetch: toolgate::FetchLimits {
                timeout: Duration::from_millis(self.fetch_timeout_ms),
                tries: self.fetch_tries,
                ..toolgate::FetchLimits::default()
            },
        })
    }
}

/// Where guards' state lives (`--state`).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct StateArg {
    /// Where guards' state lives: `memory` (this process, 64 MiB in all),
    /// `memory:MIB`, or `redis://[:password@]host[:port][/db]` (shared by
    /// every replica naming it).
    #[arg(long, default_value = "memory")]
    state: toolgate::StateBackend,
}

impl StateArg {
    /// Where guards' state lives.
    pub(crate) fn backend(&self) -> &toolgate::StateBackend {
        &self.state
    }
}

/// The operator's policy for tenants, for when the global manifest does not
/// set it (its `[ceilings]`, `[shares]` and `[quarantine]` override these
/// key by key; see docs/tenants.md).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct PolicyArgs {
    /// Guard instances alive at once across all plugins (the engine's pool;
    /// 0: the default).
    #[arg(long, default_value_t = 256)]
    max_instances: u32,
    #[command(flatten)]
    state: StateArg,
    /// Guard calls running past their first millisecond that may run at
    /// once, host-wide; the rest take turns, tenant by tenant (default:
    /// half the cores, at least 1).
    #[arg(long)]
    long_lane: Option<u32>,
    /// CPU priority of the threads those long calls run on: `idle` (Linux's
    /// SCHED_IDLE: only on a core nothing else wants) or a nice value 0..=19.
    #[arg(long, default_value_t = toolgate::LanePriority::Idle)]
    long_lane_priority: toolgate::LanePriority,
    // The `[ceilings]` flags, one per limit key of `toolgate::limit_keys!`
    // that has one.
    #[command(flatten)]
    ceilings: CeilingArgs,
    // The `[shares]` flags, one per key of `toolgate::share_keys!`.
    #[command(flatten)]
    shares: ShareArgs,
    /// Faults within the window that quarantine a guard; 0: off (default 5).
    #[arg(long)]
    quarantine_faults: Option<u32>,
    /// The quarantine's fault window, ms (default 30000).
    #[arg(long)]
    quarantine_window_ms: Option<u64>,
    /// How long a quarantined guard is not run before a probe, ms (default 30000).
    #[arg(long)]
    quarantine_cooldown_ms: Option<u64>,
    #[command(flatten)]
    decision_log: DecisionLogArgs,
}

/// The decision log's flags (the global manifest's `[decision_log]`
/// overrides them key by key; its other keys are the manifest's only).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct DecisionLogArgs {
    /// Log every decision as a JSON line: `off` (default), `stdout`, a file
    /// path (rotated by size), or an `http(s)://` URL (batched, gzipped).
    #[arg(long, value_name = "SINK")]
    decision_log: Option<String>,
    /// What of the input the decision log carries: any of `args`,
    /// `content`, `state` (default: none).
    #[arg(long, value_name = "PARTS", value_delimiter = ',')]
    decision_log_include: Vec<String>,
    /// A path masked in the decision log (`args.password`,
    /// `state.user.email`); repeat or separate with commas.
    #[arg(long, value_name = "PATH", value_delimiter = ',')]
    decision_log_mask: Vec<String>,
    /// Strings in the decision log longer than this are cut, bytes
    /// (default 1024).
    #[arg(long, value_name = "BYTES")]
    decision_log_max_string_bytes: Option<usize>,
}

impl DecisionLogArgs {
    /// Sets `config` from the flags given.
    fn apply(&self, config: &mut toolgate::decision_log::DecisionLogConfig) -> Result<()> {
        use toolgate::decision_log::{DecisionLogConfig, Include};
        if let Some(sink) = &self.decision_log {
            config.sink = DecisionLogConfig::sink_from_flag(sink);
        }
        for part in &self.decision_log_include {
            if !config.include.set(part) {
                return Err(bad(format!(
                    "--decision-log-include: `{part}` is not one of {}",
                    Include::NAMES.join(", ")
                )));
            }
        }
        config.mask.extend(self.decision_log_mask.iter().cloned());
        if let Some(v) = self.decision_log_max_string_bytes {
            config.max_string_bytes = v;
        }
        Ok(())
    }
}

/// Generates [`CeilingArgs`] from `toolgate::limit_keys!`: a flag for
/// every limit key declared with one, with its help.
macro_rules! ceiling_args {
    (keys { $( {
        $(#[$attr:meta])* $field:ident: $ty:ty = $default:expr;
        $key:ident: $raw:ty, $into:path, $written:path, $lo:expr, $hi:expr, $range_unit:literal;
        flag { $( $flag:ident $(#[$help:meta])* )? }
    } )* }) => {
        /// The `[ceilings]` flags: each sets the operator's ceiling for its
        /// limit key (the global manifest's `[ceilings]` overrides them).
        #[derive(clap::Args, Clone, Debug, Default)]
        pub(crate) struct CeilingArgs {
            $( $( $(#[$help])* #[arg(long)] $flag: Option<$raw>, )? )*
        }

        impl CeilingArgs {
            /// Sets every ceiling given a flag.
            fn apply(&self, c: &mut toolgate::Limits) {
                $( $( if let Some(v) = self.$flag {
                    c.$field = $into(v);
                } )? )*
            }
        }
    };
}

toolgate::limit_keys!(ceiling_args);

/// Generates [`ShareArgs`] from `toolgate::share_keys!`: a flag for every
/// `[shares]` key, with its help.
macro_rules! share_args {
    (fields $_fields:tt keys $_keys:tt flags { $(
        { $(#[$help:meta])* $flag:ident: $raw:ty => $field:ident, $into:path; $key:ident }
    )* }) => {
        /// The `[shares]` flags: each overrides its key's default (the global
        /// manifest's `[shares]` overrides them in turn).
        #[derive(clap::Args, Clone, Debug, Default)]
        pub(crate) struct ShareArgs {
            $( $(#[$help])* #[arg(long)] $flag: Option<$raw>, )*
        }

        impl ShareArgs {
            /// Sets every key given a flag.
            fn apply(&self, s: &mut toolgate::Shares) {
                $( if let Some(v) = self.$flag {
                    s.$field = $into(v);
                } )*
            }
        }
    };
}

toolgate::share_keys!(share_args);

impl PolicyArgs {
    /// The engine's settings and the policy these flags describe.
    fn resolve(&self) -> Result<(EngineConfig, toolgate::Policy)> {
        use std::time::Duration;
        let mut policy = toolgate::Policy::default();
        self.ceilings.apply(&mut policy.ceilings);
        self.shares.apply(&mut policy.shares);
        let q = &mut policy.quarantine;
        q.faults = self.quarantine_faults.unwrap_or(q.faults);
        if let Some(v) = self.quarantine_window_ms {
            q.window = Duration::from_millis(v);
        }
        if let Some(v) = self.quarantine_cooldown_ms {
            q.cooldown = Duration::from_millis(v);
        }
        self.decision_log.apply(&mut policy.decision_log)?;
        if let Err((key, why)) = policy.check() {
            return Err(bad(format!("policy: `{key}`: {why}")));
        }
        let engine = EngineConfig {
            max_instances: if self.max_instances == 0 {
                EngineConfig::default().max_instances
            } else {
                self.max_instances
            },
            long_lane: self.long_lane.unwrap_or_else(toolgate::default_long_lane),
            long_lane_priority: self.long_lane_priority,
            state: self.state.state.clone(),
            ..EngineConfig::default()
        };
        Ok((engine, policy))
    }
}

/// Where compiled components are cached (see `docs/loading.md`).
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct CacheArgs {
    /// Compiled-component cache directory. Default: $TOOLGATE_CACHE_DIR, else
    /// $XDG_CACHE_HOME/toolgate, else ~/.cache/toolgate.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Compile every component, read and write no cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl CacheArgs {
    fn cache(&self) -> toolgate::CompiledCache {
        use toolgate::CompiledCache;
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

/// Opens a plugin directory (global and tenant chains) for one command,
/// refusing any manifest that fails.
pub(crate) async fn open(
    dir: &Path,
    cache: &CacheArgs,
    load: &LoadArgs,
    state: &StateArg,
) -> Result<toolgate::Registry> {
    let policy = PolicyArgs {
        state: state.clone(),
        ..PolicyArgs::default()
    };
    open_for(dir, cache, load, &policy).await
}

/// Opens a plugin directory (global and tenant chains) for one command.
/// Plugins that fail are warned about; a manifest that fails is an error,
/// so a broken manifest never silently runs fewer guards.
pub(crate) async fn open_for(
    dir: &Path,
    cache: &CacheArgs,
    load: &LoadArgs,
    policy: &PolicyArgs,
) -> Result<toolgate::Registry> {
    let registry = open_registry(dir, cache, load, policy, false).await?;
    refuse_broken(dir, &registry, false)?;
    Ok(registry)
}

/// What `registry` loaded of `dir`: an error for a manifest that failed
/// (so a broken manifest never silently runs fewer guards), a warning for
/// each plugin that did not load.
///
/// `serve` passes `global_only` (it loads the tenants after, see
/// [`toolgate::Registry::start_with`]): a tenant's broken manifest must
/// not stop the server (tenants are not trusted); it is logged and that
/// tenant's calls are not decided.
pub(crate) fn refuse_broken(
    dir: &Path,
    registry: &toolgate::Registry,
    global_only: bool,
) -> Result<()> {
    let set = registry.plugin_set();
    let global_manifest = dir.join(toolgate::manifest::FILE_NAME);
    let manifest_errors: Vec<&toolgate::LoadIssue> = set
        .errors
        .iter()
        .filter(|e| e.kind == toolgate::IssueKind::Manifest)
        .filter(|e| !global_only || e.path == global_manifest)
        .collect();
    if let Some(first) = manifest_errors.first() {
        return Err(bad(first.message.clone()));
    }
    for e in &set.errors {
        match e.kind {
            toolgate::IssueKind::Snapshot => {
                eprintln!("toolgate: warning: {}", e.message);
            }
            _ => eprintln!("toolgate: warning: plugin not loaded: {}", e.message),
        }
    }
    Ok(())
}

/// Opens `dir` with the command's cache settings; whatever fails to load
/// is in the plugin set's `errors`.
pub(crate) async fn open_registry(
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
    let (engine, options) = engine_for(cache, load, policy)?;
    Ok(if global_only {
        toolgate::Registry::start_with(engine, dir, options).await?
    } else {
        toolgate::Registry::open_with(engine, dir, options).await?
    })
}

/// The engine and the registry options a command's flags describe.
pub(crate) fn engine_for(
    cache: &CacheArgs,
    load: &LoadArgs,
    policy: &PolicyArgs,
) -> Result<(Engine, toolgate::RegistryOptions)> {
    let (engine, policy) = policy.resolve()?;
    let engine = Engine::new(engine)?;
    let options = toolgate::RegistryOptions {
        policy,
        ..registry_options(cache, load)?
    };
    Ok((engine, options))
}

/// An engine for `state` under the default policy, and a maker of the
/// registry options `cache` and `load` describe, for commands that open
/// several registries on one engine (`toolgate test`).
pub(crate) fn engine_with_state(state: &StateArg) -> Result<Engine> {
    let policy = PolicyArgs {
        state: state.clone(),
        ..PolicyArgs::default()
    };
    let (engine, _) = policy.resolve()?;
    Ok(Engine::new(engine)?)
}

/// The registry options `cache` and `load` describe, under the default
/// policy.
pub(crate) fn registry_options(
    cache: &CacheArgs,
    load: &LoadArgs,
) -> Result<toolgate::RegistryOptions> {
    Ok(toolgate::RegistryOptions {
        cache: cache.cache(),
        policy: toolgate::Policy::default(),
        load: load.limits()?,
        http_answers: None,
    })
}
