//! What lifecycle observations cost a run, and what a response guard costs
//! beside a steering guard — in one run, interleaved in rounds so machine
//! noise hits every path alike.
//!
//! A run is the events symfonic fires for an agent turn with one tool
//! call: 11 lifecycle events (`on_agent_start` … `on_agent_end`, two LLM
//! calls with their usage) and 5 decisions (routing, rewrite, steering,
//! result, response), back to back: no model or tool time between them,
//! so every observation lands on the next decision of the run (which waits
//! for it), the worst case. Three paths:
//!
//! - `without`: the example `sql-guard` (steering) and `pii-redact`
//!   (response), the decisions only;
//! - `observer, not sent`: the same chain plus the `observer` test guest
//!   (subscribed to every lifecycle event, a state `add`, `get` and `set`
//!   per event; its steering answers too), the decisions only;
//! - `observer, sent`: that chain, and the run's 11 lifecycle events.
//!
//! `sent − not sent` is what observing every event costs the run; divided
//! by 11, per event. The caller's own cost of handing an event over
//! (`Chain::observe`, which returns at once) is timed apart, as is one
//! steering decision against one response decision on the `without` chain.
//!
//! Run: `cargo bench -p toolgate --bench lifecycle` (`ROUNDS`, `PER_ROUND`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::bench::Latency;
use toolgate::event::{
    BeforeToolCallEvent, ResponseRenderEvent, ToolCallDispatchEvent, ToolResultCallbackEvent,
    ToolRoutingDecisionEvent,
};
use toolgate::{Chain, Engine, EngineConfig, LifecycleEvent, LifecycleHook, Plugin, PluginSpec};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// One run's events, its id `run`.
struct Run {
    lifecycle: Vec<(usize, LifecycleEvent)>,
    routing: ToolRoutingDecisionEvent,
    rewrite: ToolCallDispatchEvent,
    steering: BeforeToolCallEvent,
    result: ToolResultCallbackEvent,
    response: ResponseRenderEvent,
}

impl Run {
    fn new(run: &str) -> Result<Run> {
        let usage = json!({"input_tokens": 900, "output_tokens": 40, "total_tokens": 940});
        let messages = json!([{"role": "user", "content": "count the users"}]);
        // (position among the run's 16 events, hook, event): the order
        // symfonic fires them in for one React turn with one tool call.
        let lifecycle = [
            (
                0,
                "on_agent_start",
                json!({"query": "count the users", "run_id": run}),
            ),
            (
                1,
                "on_node_start",
                json!({"node_name": "react", "run_id": run}),
            ),
            (
                3,
                "on_llm_start",
                json!({"model": "m", "messages": messages, "run_id": run}),
            ),
            (
                4,
                "on_llm_pre_call",
                json!({"model": "m", "messages": messages, "tools": [], "run_id": run}),
            ),
            (
                5,
                "on_token_composition",
                json!({"system_prompt_tokens": 120, "run_id": run}),
            ),
            (
                6,
                "on_llm_end",
                json!({"model": "m", "output": "", "usage": usage, "run_id": run}),
            ),
            (
                10,
                "on_llm_start",
                json!({"model": "m", "messages": messages, "run_id": run}),
            ),
            (
                11,
                "on_llm_pre_call",
                json!({"model": "m", "messages": messages, "tools": [], "run_id": run}),
            ),
            (
                12,
                "on_llm_end",
                json!({"model": "m", "output": "42 users", "usage": usage, "run_id": run}),
            ),
            (
                13,
                "on_node_end",
                json!({"node_name": "react", "run_id": run, "duration_ms": 3.0}),
            ),
            (
                15,
                "on_agent_end",
                json!({"run_id": run, "final_response": "42 users", "duration_ms": 9.0}),
            ),
        ]
        .into_iter()
        .map(|(at, hook, event)| {
            let hook: LifecycleHook = hook.parse()?;
            Ok((at, LifecycleEvent::from_value(hook, event)?))
        })
        .collect::<std::result::Result<_, String>>()?;
        Ok(Run {
            lifecycle,
            routing: serde_json::from_value(json!({
                "run_id": run, "mode": "enforce", "intent_label": "data", "total_tools": 2,
                "narrowed_tool_names": ["run_query", "search"],
            }))?,
            rewrite: serde_json::from_value(json!({
                "run_id": run, "iteration_index": 0, "node_name": "react", "call_id": "c1",
                "tool_name": "run_query", "args": {"sql": "SELECT count(*) FROM users WHERE 1"},
                "available_tools": ["run_query", "search"],
            }))?,
            steering: serde_json::from_value(json!({
                "run_id": run, "tool_name": "run_query", "call_id": "c1",
                "args": {"sql": "SELECT count(*) FROM users WHERE 1"},
            }))?,
            result: serde_json::from_value(json!({
                "run_id": run, "tool_name": "run_query", "result": "42", "call_id": "c1",
            }))?,
            response: serde_json::from_value(json!({
                "run_id": run, "iteration_index": -1, "model": "m", "node_name": "react",
                "original_content": "42 users. Questions: ops@example.com",
            }))?,
        })
    }
}

/// Plays `run` through `chain`: its decisions, and its lifecycle events
/// when `send`, in symfonic's order. Returns the run's wall time and the
/// time each `observe` call took its caller.
async fn play(chain: &Chain, run: &Run, send: bool, handed: &mut Vec<Duration>) -> Duration {
    let state = json!({});
    let mut lifecycle = run.lifecycle.iter().peekable();
    let start = Instant::now();
    for at in 0..16 {
        if let Some((_, event)) = lifecycle.next_if(|(i, _)| *i == at) {
            if send {
                let t = Instant::now();
                let observed = chain.observe(event);
                handed.push(t.elapsed());
                assert_eq!(observed, toolgate::Observed::Queued);
            }
            continue;
        }
        match at {
            2 => drop(chain.routing(&run.routing, &state).await),
            7 => drop(chain.rewrite(&run.rewrite, &state).await),
            8 => drop(chain.steering(&run.steering, &state).await),
            9 => drop(chain.result(&run.result, &state).await),
            14 => {
                let d = chain.response(&run.response, &state).await;
                assert_eq!(d.result, "42 users. Questions: [redacted]");
            }
            _ => unreachable!("every position is an event"),
        }
    }
    start.elapsed()
}

fn main() -> Result<()> {
    let rounds = env("ROUNDS", 10);
    let per_round = env("PER_ROUND", 200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let engine = Engine::new(EngineConfig::default())?;
        let load = |path: &'static str, config: Value| {
            let engine = &engine;
            async move {
                let mut spec = PluginSpec::new(path);
                spec.config = config;
                Ok::<_, toolgate::Error>(Arc::new(Plugin::load(engine, spec).await?))
            }
        };
        let sql = load(toolgate_tests::SQL_GUARD, json!({})).await?;
        let redact = load(toolgate_tests::PII_REDACT, json!({})).await?;
        let observer = load(toolgate_tests::OBSERVER, json!({})).await?;
        let without = Chain::new(vec![sql.clone(), redact.clone()]);
        let with = Chain::new(vec![sql, redact, observer]);
        let (mut t0, mut t1, mut t2) = (Vec::new(), Vec::new(), Vec::new());
        let (mut handed, mut steer, mut respond) = (Vec::new(), Vec::new(), Vec::new());
        let mut n = 0u64;
        let state = json!({});
        for _ in 0..rounds {
            for _ in 0..per_round {
                n += 1;
                let run = Run::new(&format!("run-{n}"))?;
                t0.push(play(&without, &run, false, &mut handed).await);
                t1.push(play(&with, &run, false, &mut handed).await);
                let run = Run::new(&format!("run-{n}-sent"))?;
                t2.push(play(&with, &run, true, &mut handed).await);
                let t = Instant::now();
                drop(without.steering(&run.steering, &state).await);
                steer.push(t.elapsed());
                let t = Instant::now();
                drop(without.response(&run.response, &state).await);
                respond.push(t.elapsed());
            }
        }
        let [t0, t1, t2, handed, steer, respond] =
            [t0, t1, t2, handed, steer, respond].map(|mut v| Latency::of(&mut v));
        println!(
            "a run: 5 decisions and 11 lifecycle events, back to back; {} runs per path, {rounds} rounds interleaved",
            t0.calls
        );
        println!("{:<44} {:>10} {:>10}", "path", "p50 µs", "p99 µs");
        for (name, l) in [
            ("run, without the observer", &t0),
            ("run, observer loaded, events not sent", &t1),
            ("run, observer loaded, 11 events sent", &t2),
            ("one observe() call, as its caller pays it", &handed),
            ("one steering decision (sql-guard)", &steer),
            ("one response decision (pii-redact)", &respond),
        ] {
            println!("{name:<44} {:>10.1} {:>10.1}", l.p50_us, l.p99_us);
        }
        let observing = t2.p50_us - t1.p50_us;
        println!(
            "observing 11 events costs the run {observing:.0} µs at p50 ({:.1} µs an event); \
             sent / not sent {:.2}, sent / without {:.2}; response / steering {:.2}",
            observing / 11.0,
            t2.p50_us / t1.p50_us,
            t2.p50_us / t0.p50_us,
            respond.p50_us / steer.p50_us,
        );
        Ok(())
    })
}
