//! The shared wasmtime engine: configuration, the linker every guard is
//! instantiated through, and the epoch ticker that drives deadlines.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::runtime::backlog::Backlog;
use crate::runtime::bindings::{Guard, v0_1, v0_2};
use crate::runtime::prepared::PreparedSlots;
use crate::runtime::runs::RunLanes;
use crate::runtime::sandbox::Sandbox;
use crate::runtime::state::StateStore;
use crate::runtime::turns::{LanePriority, LongLane};

/// Engine-wide settings. Per-plugin limits live in [`Limits`](crate::Limits).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How many guard instances may be alive at once across all plugins
    /// (the pooling allocator's slot count). A call that finds the pool
    /// full faults with `capacity`. Default: 256.
    pub max_instances: u32,
    /// The largest linear memory any plugin may be given, in bytes; a
    /// plugin's `memory_bytes` above it is refused at load. Default: 1 GiB.
    pub max_memory_bytes: usize,
    /// Maximum wasm stack of any call, in bytes; deeper recursion traps with
    /// `stack-overflow`. Engine-wide (wasmtime sets it per engine).
    /// Default: 512 KiB.
    pub max_wasm_stack: usize,
    /// Period of the epoch ticker that enforces deadlines; a deadline
    /// overshoots by at most one tick, and a running guest yields to the
    /// executor once per tick. Default: 1 ms.
    pub epoch_tick: Duration,
    /// Use the pooling instance allocator (fast fresh instances). Turn off
    /// only where reserving large virtual address ranges is not allowed.
    /// Default: true.
    pub pooling: bool,
    /// How many *long calls* (see `crate::runtime::turns`) may run at once on
    /// each of the lane's two sets of threads (the low ones, for accounts
    /// over their part of the CPU, and the fair ones, at the normal
    /// priority), host-wide, and how many threads each set has; the others
    /// wait their turn, one account after another. Default: half the
    /// machine's cores, at least 1.
    pub long_lane: u32,
    /// The CPU priority of the long lane's low threads: those that run the
    /// long calls of accounts using more than their part of the guards' CPU
    /// time. Default: [`LanePriority::Idle`] (they run only on a core
    /// nothing else wants).
    pub long_lane_priority: LanePriority,
    /// Where guards' state lives (the `state` import). Default: in memory,
    /// at most 64 MiB in all.
    pub state: StateBackend,
}

/// Where guards' state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateBackend {
    /// In this process, at most `capacity` bytes in all (keys, values and
    /// their bookkeeping): lost on restart, not shared by replicas.
    Memory {
        /// Bytes the store may hold, every tenant's together.
        capacity: usize,
    },
    /// In Redis at `url` (`redis://[:password@]host[:port][/db]`): shared
    /// by every replica naming the same server and database; as durable as
    /// that server is configured to be. Its `maxmemory` is the total.
    Redis {
        /// The server's URL.
        url: String,
    },
}

impl Default for StateBackend {
    fn default() -> Self {
        StateBackend::Memory { capacity: 64 << 20 }
    }
}

/// `memory` (the default: 64 MiB), `memory:MIB`, or a Redis URL
/// (`redis://...`): what `serve --state` and `toolgate.Host(state=...)`
/// take.
impl std::str::FromStr for StateBackend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "memory" {
            return Ok(StateBackend::default());
        }
        if let Some(mib) = s.strip_prefix("memory:") {
            let mib: usize = mib
                .parse()
                .map_err(|_| format!("state {s:?}: `memory:` takes a size in MiB"))?;
            return Ok(StateBackend::Memory {
                capacity: mib.saturating_mul(1 << 20),
            });
        }
        if s.starts_with("redis://") {
            return Ok(StateBackend::Redis { url: s.into() });
        }
        Err(format!(
            "state {s:?}: expected `memory`, `memory:MIB` or a redis:// URL"
        ))
    }
}

impl StateBackend {
    fn open(&self) -> Result<StateStore, crate::Error> {
        match self {
            StateBackend::Memory { capacity } => Ok(StateStore::memory(*capacity)),
            StateBackend::Redis { url } => StateStore::redis(url),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 256,
            max_memory_bytes: 1 << 30,
            max_wasm_stack: 512 << 10,
            epoch_tick: Duration::from_millis(1),
            pooling: true,
            long_lane: default_long_lane(),
            long_lane_priority: LanePriority::default(),
            state: StateBackend::default(),
        }
    }
}

/// Half the cores this process may use, at least 1.
pub fn default_long_lane() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| u32::try_from(n.get() / 2).unwrap_or(u32::MAX))
        .max(1)
}

/// One wasmtime engine shared by every plugin, with its linker and ticker.
///
/// Cheap to clone. The epoch ticker thread holds only a weak reference and
/// stops once the last clone of the engine is dropped.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    wasmtime: wasmtime::Engine,
    linker: Linker<Sandbox>,
    config: EngineConfig,
    lane: Arc<LongLane>,
    prepared: Arc<PreparedSlots>,
    state: Arc<StateStore>,
    shadow: Arc<Backlog>,
    runs: Arc<RunLanes>,
}

impl Engine {
    /// Builds an engine with `config` and starts its epoch ticker.
    pub fn new(config: EngineConfig) -> Result<Self, crate::Error> {
        let wasmtime = wasmtime::Engine::new(&wasmtime_config(&config))
            .map_err(|e| crate::Error::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&wasmtime);
        // Every contract's imports: `0.3.0`'s world, `0.2.0`'s `host`,
        // `state` and `http`, `0.1.0`'s `host`, and the older (function-less)
        // `types` under their own names.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .and_then(|()| Guard::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s))
            .and_then(|()| {
                v0_1::host::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            })
            .and_then(|()| {
                v0_2::host::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            })
            .and_then(|()| {
                v0_2::state::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            })
            .and_then(|()| {
                v0_2::http::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            })
            .and_then(|()| linker.instance("toolgate:guard/types@0.2.0").map(drop))
            .and_then(|()| linker.instance("toolgate:guard/types@0.1.0").map(drop))
            .map_err(|e| crate::Error::Engine(format!("{e:#}")))?;
        let state = Arc::new(config.state.open()?);
        spawn_ticker(&wasmtime, config.epoch_tick)?;
        Ok(Engine {
            inner: Arc::new(EngineInner {
                wasmtime,
                linker,
                lane: LongLane::new(config.long_lane, config.long_lane_priority),
                // Until a registry says which slots its shares reserve.
                prepared: PreparedSlots::new(config.max_instances / 4),
                state,
                // As many shadow runs in flight as instances in the pool.
                shadow: Backlog::new(usize::try_from(config.max_instances).unwrap_or(usize::MAX)),
                runs: Arc::default(),
                config,
            }),
        })
    }

    /// The underlying wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner.wasmtime
    }

    pub(crate) fn linker(&self) -> &Linker<Sandbox> {
        &self.inner.linker
    }

    /// The lane long calls take turns in.
    pub fn long_lane(&self) -> &Arc<LongLane> {
        &self.inner.lane
    }

    /// The pool slots prepared instances may hold.
    pub fn prepared_slots(&self) -> &Arc<PreparedSlots> {
        &self.inner.prepared
    }

    /// The store guards' state lives in.
    pub fn state(&self) -> &Arc<StateStore> {
        &self.inner.state
    }

    /// Room for shadow guards' runs after the answer.
    pub(crate) fn shadow_backlog(&self) -> &Arc<Backlog> {
        &self.inner.shadow
    }

    /// Shadow runs dropped for want of room since the engine started
    /// (`toolgate_shadow_dropped_total`).
    pub fn shadow_dropped(&self) -> u64 {
        self.inner.shadow.dropped()
    }

    /// Each run's lane of lifecycle observations.
    pub(crate) fn runs(&self) -> &Arc<RunLanes> {
        &self.inner.runs
    }

    /// Lifecycle observations delivered since the engine started (each
    /// to every guard that observes its hook; `toolgate_observations_total`).
    pub fn observations_delivered(&self) -> u64 {
        self.inner.runs.finished()
    }

    /// Lifecycle observations dropped since the engine started: their
    /// run's lane was full (`RUN_QUEUE_LIMIT` waiting), or all lanes were
    /// (`toolgate_observations_dropped_total`).
    pub fn observations_dropped(&self) -> u64 {
        self.inner.runs.dropped()
    }

    /// Observer calls that faulted since the engine started (logged and
    /// skipped; `toolgate_observe_faults_total`).
    pub fn observe_faults(&self) -> u64 {
        self.inner.runs.faults()
    }

    /// Decisions that waited their bound for their run's observations and
    /// went on without the rest (`toolgate_observe_waits_expired_total`).
    pub fn observe_waits_expired(&self) -> u64 {
        self.inner.runs.waits_expired()
    }

    /// Lifecycle observations waiting to be delivered now, all runs.
    pub fn observations_waiting(&self) -> u64 {
        self.inner.runs.waiting()
    }

    /// The settings this engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }
}

pub(crate) fn wasmtime_config(config: &EngineConfig) -> Config {
    let mut c = Config::new();
    c.consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(config.max_wasm_stack)
        // The async fiber stack must hold the wasm stack plus host frames.
        .async_stack_size(config.max_wasm_stack + (1 << 20))
        .parallel_compilation(true);
    if config.pooling {
        let n = config.max_instances.max(1);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(n)
            // Interpreted-language guests are many core modules in one
            // component (componentize-py: ~40).
            .max_core_instances_per_component(64)
            .total_core_instances(n.saturating_mul(16))
            .max_memories_per_component(16)
            .total_memories(n.saturating_mul(4))
            .max_tables_per_component(64)
            .total_tables(n.saturating_mul(16))
            .table_elements(100_000)
            .total_stacks(n)
            .max_memory_size(config.max_memory_bytes)
            // Measured: keeping 2 MiB resident and scanning for dirty pages
            // halves the cost of a fresh instance; each alone does not.
            .linear_memory_keep_resident(2 << 20)
            .pagemap_scan(Enabled::Auto)
            // Measured (BENCHMARKS.md): keeping fiber stacks and tables
            // resident avoids the TLB-shootdown IPIs a decommit costs a
            // multi-threaded host. Decommits are not batched: a batch
            // flushed on a serving thread decommits every queued memory at
            // once — tens of ms when tenants' memory bombs are in it.
            .async_stack_keep_resident(1 << 20)
            .table_keep_resident(1 << 20);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    c
}

fn spawn_ticker(engine: &wasmtime::Engine, tick: Duration) -> Result<(), crate::Error> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("toolgate-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        })
        .map(drop)
        .map_err(|source| crate::Error::Thread {
            what: "epoch ticker",
            source,
        })
}
