//! The peer of `cargo bench -p toolgate --bench isolation`: the example
//! `sql-guard`'s check compiled with `extism-pdk`, run in Extism 1.30 with
//! the limits toolgate gives a guard by default (fuel 500 M, 200 ms,
//! 128 MiB), on the same two events, two ways, alternated in rounds:
//!
//! - **long-lived**: one plugin called again and again (Extism's usual use:
//!   the guest's memory and globals carry over from call to call);
//! - **fresh**: a new plugin from the compiled module for every call (what
//!   toolgate's isolation is; Extism's nearest equivalent).
//!
//! Run: `extism-peer GUEST.wasm` (`ROUNDS`, `PER_ROUND` set the sample
//! size). Prints a table, then one JSON line with each path's p50/p99 (µs).

use std::time::{Duration, Instant};

use extism::{Manifest, Plugin, PluginBuilder, Wasm};
use serde_json::{Value, json};

/// toolgate's default limits per call (host/src/runtime/limits.rs).
const FUEL: u64 = 500_000_000;
const TIMEOUT: Duration = Duration::from_millis(200);
const MEMORY_PAGES: u32 = (128 << 20) / 65536;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// p50 and p99 of `samples`, in µs, as toolgate's `bench::Latency` takes
/// them (the same index into the sorted samples).
fn latency(samples: &mut [Duration]) -> Value {
    samples.sort_unstable();
    let pct = |p: usize| {
        samples.len().checked_sub(1).map_or(0.0, |last| {
            samples[(last * p).div_ceil(100).min(last)].as_secs_f64() * 1e6
        })
    };
    json!({"calls": samples.len(), "p50_us": pct(50), "p99_us": pct(99)})
}

/// Calls the hook with `event` serialised (as toolgate serialises each
/// call's event) and returns whether the guard steered.
fn call(plugin: &mut Plugin, event: &Value) -> Result<bool, extism::Error> {
    let input = event.to_string();
    let out: &str = plugin.call("on_before_tool_call", input.as_str())?;
    let verdict: Value = serde_json::from_str(out)?;
    Ok(verdict["action"] == "steer")
}

fn main() -> Result<(), extism::Error> {
    let guest = std::env::args()
        .nth(1)
        .ok_or_else(|| extism::Error::msg("usage: extism-peer GUEST.wasm"))?;
    let (rounds, per_round) = (env("ROUNDS", 10), env("PER_ROUND", 2000));
    // `LIMITS=off`: no fuel and no timeout (to see what they cost).
    let limits = std::env::var("LIMITS").map_or(true, |v| v != "off");
    let mut manifest = Manifest::new([Wasm::file(&guest)]).with_memory_max(MEMORY_PAGES);
    if limits {
        manifest = manifest.with_timeout(TIMEOUT);
    }
    let mut builder = PluginBuilder::new(manifest)
        .with_wasi(false)
        .with_cache_disabled();
    if limits {
        builder = builder.with_fuel_limit(FUEL);
    }
    let compiled = builder.compile()?;
    let mut long_lived = Plugin::new_from_compiled(&compiled)?;
    let events: Vec<Value> = ["DELETE FROM users", "DELETE FROM users WHERE id = 7"]
        .iter()
        .map(|sql| {
            json!({"run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": sql}})
        })
        .collect();
    let (mut long, mut fresh) = (Vec::new(), Vec::new());
    // Each round times the long-lived plugin's calls, then the fresh
    // plugins' in a block of their own: a fresh plugin's set-up and
    // teardown (mmap, munmap) between two long-lived calls would cool the
    // long-lived plugin's caches (p50 ~21 µs interleaved call by call
    // against ~4.5 µs on its own).
    for _ in 0..rounds {
        for i in 0..per_round {
            let e = &events[i % 2];
            let t = Instant::now();
            let steered = call(&mut long_lived, e)?;
            long.push(t.elapsed());
            assert_eq!(steered, i % 2 == 0);
        }
        for i in 0..per_round {
            let e = &events[i % 2];
            let t = Instant::now();
            let mut plugin = Plugin::new_from_compiled(&compiled)?;
            let steered = call(&mut plugin, e)?;
            drop(plugin);
            fresh.push(t.elapsed());
            assert_eq!(steered, i % 2 == 0);
        }
    }
    let (long, fresh) = (latency(&mut long), latency(&mut fresh));
    println!("extism 1.30 sql-guard, {rounds} rounds of {per_round} interleaved");
    println!("{:<28} {:>10} {:>10}", "path", "p50 µs", "p99 µs");
    for (name, l) in [
        ("long-lived plugin", &long),
        ("fresh plugin per call", &fresh),
    ] {
        println!(
            "{name:<28} {:>10.2} {:>10.2}",
            l["p50_us"].as_f64().unwrap_or(0.0),
            l["p99_us"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "{}",
        json!({"peer": "extism 1.30.0", "long_lived": long, "fresh": fresh})
    );
    Ok(())
}
