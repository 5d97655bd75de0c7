//! What per-call isolation costs: the example `sql-guard` called on a
//! fresh instance per call (how toolgate serves), on one reused instance
//! (no isolation), and the same check as native Rust — in one run,
//! interleaved in rounds so machine noise hits all three alike. Beside
//! them, the two parts of a fresh call that a reused one skips: making a
//! store and instance (`instantiate`) and dropping them (`teardown`),
//! timed in each round after the three paths.
//!
//! Run: `cargo bench -p toolgate --bench isolation` (set `ROUNDS` and
//! `PER_ROUND` to change the sample size, `SQL_GUARD` to time another
//! build of the guard, e.g. one an earlier commit built).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use toolgate::bench::{Latency, Reused};
use toolgate::event::BeforeToolCallEvent;
use toolgate::{Chain, Engine, EngineConfig, Event, Plugin, PluginSpec};

/// The seed's SqlGuard as a native function, given the same JSON text the
/// guest receives.
fn native_sql_guard(tool_name: &str, args_json: &str) -> bool {
    if tool_name != "run_query" {
        return false;
    }
    let args: Value = serde_json::from_str(args_json).unwrap_or(Value::Null);
    let sql = args.get("sql").and_then(Value::as_str).unwrap_or("");
    !sql.to_uppercase().contains("WHERE")
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds = env("ROUNDS", 10);
    let per_round = env("PER_ROUND", 2000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let engine = Engine::new(EngineConfig::default())?;
        let guard = std::env::var("SQL_GUARD").unwrap_or_else(|_| toolgate_tests::SQL_GUARD.into());
        let plugin = Arc::new(Plugin::load(&engine, PluginSpec::new(guard)).await?);
        let chain = Chain::new(vec![plugin.clone()]);
        let mut reused = Reused::new(plugin.clone()).await?;
        let events: Vec<BeforeToolCallEvent> = [
            "DELETE FROM users",
            "DELETE FROM users WHERE id = 7",
        ]
        .iter()
        .map(|sql| {
            serde_json::from_value(json!({
                "run_id": "r", "tool_name": "run_query", "call_id": "c", "args": {"sql": sql},
            }))
        })
        .collect::<Result<_, _>>()?;
        let wrapped: Vec<Event> = events.iter().cloned().map(Event::Steering).collect();
        let state = json!({});
        let (mut fresh, mut reuse, mut native) = (Vec::new(), Vec::new(), Vec::new());
        let (mut instantiate, mut teardown) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for i in 0..per_round {
                let e = &events[i % 2];
                let t = Instant::now();
                let d = chain.steering(e, &state).await;
                fresh.push(t.elapsed());
                assert_eq!(d.result.is_some(), i % 2 == 0);

                let t = Instant::now();
                let called = reused
                    .call(&wrapped[i % 2], &state)
                    .await
                    .map_err(|f| format!("reused call faulted: {f}"))?;
                reuse.push(t.elapsed());
                assert!(called, "sql-guard exports steering");

                let t = Instant::now();
                // The host side of the same work: serialise args, decide.
                let args = Value::Object(e.args.clone()).to_string();
                let skipped = native_sql_guard(black_box(&e.tool_name), black_box(&args));
                native.push(t.elapsed());
                assert_eq!(skipped, i % 2 == 0);
            }
            // The parts in a loop of their own, so the three paths above
            // run as they ran before the parts were timed (measured: timing
            // them in the same loop made every path ~10% slower).
            for _ in 0..per_round {
                let t = Instant::now();
                let instance = Reused::new(plugin.clone()).await?;
                instantiate.push(t.elapsed());
                let t = Instant::now();
                drop(black_box(instance));
                teardown.push(t.elapsed());
            }
        }
        let (fresh, reuse, native) = (
            Latency::of(&mut fresh),
            Latency::of(&mut reuse),
            Latency::of(&mut native),
        );
        let (instantiate, teardown) = (Latency::of(&mut instantiate), Latency::of(&mut teardown));
        println!(
            "sql-guard, {} calls per path, {} rounds interleaved",
            fresh.calls, rounds
        );
        println!(
            "{:<28} {:>10} {:>10} {:>12}",
            "path", "p50 µs", "p99 µs", "p50 / native"
        );
        for (name, l) in [
            ("fresh instance per call", &fresh),
            ("reused instance", &reuse),
            ("native Rust", &native),
            ("  instantiate (of a fresh)", &instantiate),
            ("  teardown (of a fresh)", &teardown),
        ] {
            println!(
                "{name:<28} {:>10.2} {:>10.2} {:>11.1}x",
                l.p50_us,
                l.p99_us,
                l.p50_us / native.p50_us
            );
        }
        // The fields `toolgate bench --json` reports per guard.
        println!(
            "{}",
            json!({
                "plugin": "sql-guard",
                "fresh": fresh,
                "reused": reuse,
                "native": native,
                "instantiate": instantiate,
                "teardown": teardown,
                "fresh_over_reused": fresh.p50_us / reuse.p50_us,
            })
        );
        Ok(())
    })
}
