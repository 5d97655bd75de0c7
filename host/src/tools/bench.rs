//! What guards cost, measured: per guard, a fresh instance per call (how
//! toolgate serves) beside one instance kept alive (the floor isolation is
//! measured from), interleaved so machine noise hits both alike; per chain,
//! decisions per second at a given concurrency.
//!
//! `toolgate bench` prints a [`Report`]; the isolation and serve benches
//! report the same fields.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use wasmtime::Store;
use wasmtime::component::Instance;

use crate::call::chain::{Chain, Outcome};
use crate::call::guard_call::arm_deadline;
use crate::call::plugin::Plugin;
use crate::error::Error;
use crate::event::{Event, Seam};
use crate::fault::Fault;
use crate::runtime::sandbox::Sandbox;

/// One instance of a plugin kept alive across calls: for measurements
/// only.
///
/// toolgate never serves with it: a guest's state survives from one call
/// to the next and a trap poisons the instance for good. It exists to
/// measure what per-call isolation costs. Fuel and the deadline are reset
/// before every call.
pub struct Reused {
    plugin: Arc<Plugin>,
    store: Store<Sandbox>,
    instance: Instance,
}

impl Reused {
    /// Instantiates `plugin` once.
    pub async fn new(plugin: Arc<Plugin>) -> Result<Self, Error> {
        let (mut store, _) = plugin.store()?;
        let instance = plugin.start(&mut store).await?;
        Ok(Reused {
            plugin,
            store,
            instance,
        })
    }

    /// Calls the seam of `event` on the kept instance, with fuel and the
    /// deadline reset; `Ok(false)` if the plugin does not export that
    /// seam. A fault poisons this instance: make a new one.
    pub async fn call(&mut self, event: &Event, state: &Value) -> Result<bool, Fault> {
        let limits = self.plugin.limits();
        self.store
            .set_fuel(limits.fuel)
            .map_err(|_| Fault::Instantiate)?;
        self.store.data_mut().refill(limits);
        arm_deadline(&mut self.store, limits.timeout, None);
        self.plugin
            .call_kept(&mut self.store, &self.instance, event, &state.to_string())
            .await
            .map_err(|e| Fault::classify(&e, true))
    }
}

/// Latency percentiles of a set of calls.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// How many calls were measured.
    pub calls: u64,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
}

impl Latency {
    /// Percentiles of `samples` (sorted in place).
    pub fn of(samples: &mut [Duration]) -> Latency {
        samples.sort_unstable();
        let pct = |p: usize| {
            samples.len().checked_sub(1).map_or(0.0, |last| {
                samples[(last * p).div_ceil(100).min(last)].as_secs_f64() * 1e6
            })
        };
        Latency {
            calls: samples.len() as u64,
            p50_us: pct(50),
            p99_us: pct(99),
        }
    }
}

/// One guard at one seam: fresh instance per call against a kept instance.
#[derive(Clone, Debug, Serialize)]
pub struct GuardCost {
    /// The plugin's name.
    pub plugin: String,
    /// A fresh instance per call, through a chain of this guard alone,
    /// calls back to back.
    pub fresh: Latency,
    /// The same at light load: one call every `LIGHT_GAP`, as a caller
    /// sees it (with the plugin's prepared instances, when it keeps any).
    pub light: Latency,
    /// One instance kept alive (measurement only, never served).
    pub reused: Latency,
    /// `fresh.p50_us / reused.p50_us`: what isolation costs.
    pub fresh_over_reused: f64,
    /// Calls of either path that faulted (a faulting guard's numbers
    /// measure its fault, not its work).
    pub faults: u64,
}

/// A whole chain at one seam under concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct ChainLoad {
    /// Concurrent callers.
    pub concurrency: usize,
    /// Decisions made in the measured window.
    pub decisions: u64,
    /// Decisions per second.
    pub decisions_per_sec: f64,
    /// Latency of each decision as its caller saw it.
    pub latency: Latency,
    /// Guard calls that faulted during the window.
    pub faults: u64,
}

/// The whole chain called as an agent calls it: one decision, then an
/// idle gap (the model's turn), then the next.
#[derive(Clone, Debug, Serialize)]
pub struct Spread {
    /// The idle time before each call, in milliseconds.
    pub gap_ms: u64,
    /// Latency of each decision after its gap.
    pub latency: Latency,
    /// The floor: the same gap before [`native_floor`], a plain Rust
    /// function, timed alternately with the decisions — what any code
    /// pays after that idle gap on this machine (caches and the core gone
    /// cold), which toolgate cannot remove.
    pub floor: Latency,
}

/// A guard's kind of work as a plain Rust function, for the floor of
/// [`Spread`]: `event` to JSON text (as a call lowers it), parsed back, and
/// searched for a `DELETE`.
pub fn native_floor(event: &Event) -> bool {
    let text = match event {
        Event::Routing(e) => serde_json::to_string(e),
        Event::Rewrite(e) => serde_json::to_string(e),
        Event::Steering(e) => serde_json::to_string(e),
        Event::Result(e) => serde_json::to_string(e),
        Event::Response(e) => serde_json::to_string(e),
    }
    .unwrap_or_default();
    let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    parsed.to_string().to_uppercase().contains("DELETE")
}

/// The idle gaps [`Spread`] is measured after: from a tight tool loop to a
/// slow model turn.
pub const SPREAD_GAPS_MS: [u64; 4] = [1, 5, 20, 100];

/// The cost of one seam of a chain.
#[derive(Clone, Debug, Serialize)]
pub struct SeamCost {
    /// The seam.
    pub seam: Seam,
    /// How many distinct events of this seam were cycled through.
    pub events: usize,
    /// The whole chain, one call at a time after idle gaps of
    /// 1, 5, 20 and 100 ms: what a caller inside an agent pays (a call in a
    /// tight loop, `chain` at concurrency 1, is the other end).
    pub spread: Vec<Spread>,
    /// Per guard that subscribes to the seam, in chain order.
    pub guards: Vec<GuardCost>,
    /// The whole chain under load.
    pub chain: ChainLoad,
}

/// What `toolgate bench` prints with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The tenant whose chain was measured (`None`: the global chain).
    pub tenant: Option<String>,
    /// Seconds each measurement window lasted.
    pub seconds: f64,
    /// Per seam with at least one event and one subscribed guard.
    pub seams: Vec<SeamCost>,
}

/// How long and how hard to measure.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Length of each window: per guard (fresh and reused interleaved), and
    /// per seam for the chain under load.
    pub window: Duration,
    /// Concurrent callers of the chain.
    pub concurrency: usize,
}

/// Measures `chain` on `events` (each with its hook state).
pub async fn measure(
    chain: &Chain,
    tenant: Option<String>,
    events: &[(Event, Value)],
    settings: &Settings,
) -> Result<Report, Error> {
    let mut seams = Vec::new();
    for seam in Seam::ALL {
        let mine: Vec<(Event, Value)> = events
            .iter()
            .filter(|(e, _)| e.seam() == seam)
            .cloned()
            .collect();
        let guards: Vec<&Arc<Plugin>> = chain
            .plugins()
            .iter()
            .filter(|p| p.subscribes(seam))
            .collect();
        if mine.is_empty() || guards.is_empty() {
            continue;
        }
        let mut costs = Vec::new();
        for plugin in guards {
            costs.push(guard_cost(plugin, &mine, settings.window).await?);
        }
        let load = chain_load(chain, &mine, settings).await;
        let spread = spread(chain, &mine, settings.window).await;
        seams.push(SeamCost {
            seam,
            events: mine.len(),
            spread,
            guards: costs,
            chain: load,
        });
    }
    Ok(Report {
        tenant,
        seconds: settings.window.as_secs_f64(),
        seams,
    })
}

/// The faults of a decision's guards, its shadow guards' included.
fn faults<T>(d: &crate::call::chain::Decision<T>) -> u64 {
    d.trace
        .iter()
        .chain(d.shadow.iter().flat_map(|s| &s.trace))
        .filter(|t| t.outcome == Outcome::Fault)
        .count() as u64
}

/// The pause between calls at light load.
pub const LIGHT_GAP: Duration = Duration::from_millis(5);

async fn guard_cost(
    plugin: &Arc<Plugin>,
    events: &[(Event, Value)],
    window: Duration,
) -> Result<GuardCost, Error> {
    let alone = Chain::new(vec![Arc::clone(plugin)]);
    let mut reused = Reused::new(Arc::clone(plugin)).await?;
    let (mut fresh, mut kept) = (Vec::new(), Vec::new());
    let mut fault_count = 0;
    let start = Instant::now();
    for (event, state) in events.iter().cycle() {
        if start.elapsed() >= window && !fresh.is_empty() {
            break;
        }
        let t = Instant::now();
        let d = alone.decide(event, state).await;
        fresh.push(t.elapsed());
        fault_count += faults(&d);

        let t = Instant::now();
        let r = reused.call(event, state).await;
        kept.push(t.elapsed());
        if r.is_err() {
            fault_count += 1;
            reused = Reused::new(Arc::clone(plugin)).await?;
        }
    }
    // Light load: a pause before each call (prepared instances, if the
    // plugin keeps any, are made in it). At most a second of pauses.
    let mut light = Vec::new();
    let samples = (window.min(Duration::from_secs(1)).as_millis() / LIGHT_GAP.as_millis()).max(5);
    for (event, state) in events
        .iter()
        .cycle()
        .take(usize::try_from(samples).unwrap_or(5))
    {
        tokio::time::sleep(LIGHT_GAP).await;
        let t = Instant::now();
        let d = alone.decide(event, state).await;
        light.push(t.elapsed());
        fault_count += faults(&d);
    }
    let (fresh, reused) = (Latency::of(&mut fresh), Latency::of(&mut kept));
    let light = Latency::of(&mut light);
    Ok(GuardCost {
        light,
        plugin: plugin.name().to_string(),
        fresh_over_reused: if reused.p50_us > 0.0 {
            fresh.p50_us / reused.p50_us
        } else {
            0.0
        },
        fresh,
        reused,
        faults: fault_count,
    })
}

/// The chain after each idle gap: between 5 and 40 calls per gap, as many
/// as fit in `window` of gaps, each followed by the floor after the same
/// gap.
async fn spread(chain: &Chain, events: &[(Event, Value)], window: Duration) -> Vec<Spread> {
    let mut out = Vec::new();
    for gap_ms in SPREAD_GAPS_MS {
        let gap = Duration::from_millis(gap_ms);
        let n = (window.as_millis() / u128::from(gap_ms)).clamp(5, 40);
        let (mut samples, mut floor) = (Vec::new(), Vec::new());
        for (event, state) in events.iter().cycle().take(usize::try_from(n).unwrap_or(5)) {
            tokio::time::sleep(gap).await;
            let t = Instant::now();
            let _ = chain.decide(event, state).await;
            samples.push(t.elapsed());

            tokio::time::sleep(gap).await;
            let t = Instant::now();
            std::hint::black_box(native_floor(std::hint::black_box(event)));
            floor.push(t.elapsed());
        }
        out.push(Spread {
            gap_ms,
            latency: Latency::of(&mut samples),
            floor: Latency::of(&mut floor),
        });
    }
    out
}

async fn chain_load(chain: &Chain, events: &[(Event, Value)], settings: &Settings) -> ChainLoad {
    let events: Arc<[(Event, Value)]> = events.into();
    let start = Instant::now();
    let workers: Vec<_> = (0..settings.concurrency.max(1))
        .map(|worker| {
            let (chain, events, window) = (chain.clone(), Arc::clone(&events), settings.window);
            tokio::spawn(async move {
                let (mut samples, mut fault_count) = (Vec::new(), 0);
                for (event, state) in events.iter().cycle().skip(worker) {
                    if start.elapsed() >= window {
                        break;
                    }
                    let t = Instant::now();
                    let d = chain.decide(event, state).await;
                    samples.push(t.elapsed());
                    fault_count += faults(&d);
                }
                (samples, fault_count)
            })
        })
        .collect();
    let (mut samples, mut fault_count) = (Vec::new(), 0);
    for w in workers {
        // A worker that panicked contributes nothing; the others still count.
        if let Ok((s, f)) = w.await {
            samples.extend(s);
            fault_count += f;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let latency = Latency::of(&mut samples);
    ChainLoad {
        concurrency: settings.concurrency.max(1),
        decisions: latency.calls,
        decisions_per_sec: if elapsed > 0.0 {
            latency.calls as f64 / elapsed
        } else {
            0.0
        },
        latency,
        faults: fault_count,
    }
}
