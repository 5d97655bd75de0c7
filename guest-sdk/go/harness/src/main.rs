//! `toolgate-go-harness`: runs one event through a built Go guard in
//! wasmtime 48 (the host's engine), on fresh instances and on one reused
//! instance, and prints what the guard returned plus per-call timings.
//!
//! The reused-instance run is the SDK's stress test for its allocator: with a
//! big argument, calls on one instance make the Go heap grow and collect
//! between calls, which is where a `cabi_realloc` that touched the Go heap
//! used to trap ("cannot leave component instance").
//!
//! Usage:
//!   toolgate-go-harness <guard.wasm> <seam> <event.json> [--fresh N] [--reuse N]
//!
//! <seam> is steering, rewrite, routing or result; <event.json> the event as
//! `toolgate check` takes it (a `state` member is optional). WASI is
//! deny-by-default as in the host: no preopens, no env, no inherited stdio.

use anyhow::{Context, Result, bail};
use std::time::Instant;
use wasmtime::component::{Component, Func, Instance, Linker, ResourceTable, Val};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
    log_lines: usize,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn new_store(engine: &Engine) -> Store<Host> {
    let mut store = Store::new(
        engine,
        Host {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            log_lines: 0,
        },
    );
    store.set_fuel(u64::MAX / 2).expect("fuel is enabled");
    store
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        bail!(
            "usage: toolgate-go-harness <guard.wasm> <seam> <event.json> [--fresh N] [--reuse N]"
        );
    }
    let (path, seam, event_path) = (&args[0], args[1].as_str(), &args[2]);
    let mut fresh = 20usize;
    let mut reuse = 200usize;
    let mut rest = args[3..].iter();
    while let Some(flag) = rest.next() {
        let n = rest.next().context("a count after the flag")?.parse()?;
        match flag.as_str() {
            "--fresh" => fresh = n,
            "--reuse" => reuse = n,
            other => bail!("unknown flag {other}"),
        }
    }
    let event: serde_json::Value = serde_json::from_slice(&std::fs::read(event_path)?)?;
    let (iface, func_name, param) = lower_event(seam, &event)?;

    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config)?;
    let started = Instant::now();
    let component = Component::from_file(&engine, path)?;
    eprintln!("compile: {} ms", started.elapsed().as_millis());

    let mut linker: Linker<Host> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    linker.instance("toolgate:guard/types@0.3.0")?;
    let mut host = linker.instance("toolgate:guard/host@0.3.0")?;
    host.func_new("log", |mut store, _ty, params, _results| {
        store.data_mut().log_lines += 1;
        if let [Val::Enum(level), Val::String(msg)] = params {
            eprintln!("guest log [{level}] {msg}");
        }
        Ok(())
    })?;
    // The plugin's configuration: $TOOLGATE_HARNESS_CONFIG, or `{}`.
    let config = std::env::var("TOOLGATE_HARNESS_CONFIG").unwrap_or_else(|_| "{}".into());
    host.func_new("config", move |_store, _ty, _params, results| {
        results[0] = Val::String(config.clone());
        Ok(())
    })?;
    let pre = linker.instantiate_pre(&component)?;

    let call = |store: &mut Store<Host>, instance: &Instance| -> Result<(Option<Val>, u64)> {
        let func = lookup(store, instance, iface, func_name)?;
        let fuel = store.get_fuel()?;
        let mut results = vec![Val::Bool(false); func.ty(&*store).results().len()];
        func.call(&mut *store, std::slice::from_ref(&param), &mut results)?;
        Ok((results.pop(), fuel - store.get_fuel()?))
    };

    // Fresh instance per call, as the host does by default.
    let mut times = Vec::new();
    let mut first = None;
    let mut fuel_used = 0;
    let mut start_fuel = 0;
    for _ in 0..fresh.max(1) {
        let t = Instant::now();
        let mut store = new_store(&engine);
        let before = store.get_fuel()?;
        let instance = pre.instantiate(&mut store)?;
        start_fuel = before - store.get_fuel()?;
        let (out, fuel) = call(&mut store, &instance).context("fresh call")?;
        drop(store);
        times.push(t.elapsed().as_micros() as u64);
        fuel_used = fuel;
        first.get_or_insert(out);
    }
    println!("result: {:?}", first.flatten());
    println!("start-up (instantiate + Go init): fuel {start_fuel}");
    report("fresh", &mut times, fuel_used);

    // One instance, many calls.
    let mut store = new_store(&engine);
    let instance = pre.instantiate(&mut store)?;
    let mut times = Vec::new();
    for i in 0..reuse {
        let t = Instant::now();
        let (_, fuel) = call(&mut store, &instance).with_context(|| format!("reused call {i}"))?;
        times.push(t.elapsed().as_micros() as u64);
        fuel_used = fuel;
    }
    if reuse > 0 {
        report("reused", &mut times, fuel_used);
    }
    Ok(())
}

fn report(what: &str, times: &mut [u64], fuel: u64) {
    times.sort_unstable();
    let pct = |p: usize| times[(times.len() - 1) * p / 100];
    println!(
        "{what}: {} calls, p50 {} us, p99 {} us, max {} us, fuel/call {fuel}",
        times.len(),
        pct(50),
        pct(99),
        times[times.len() - 1]
    );
}

fn lookup(store: &mut Store<Host>, instance: &Instance, iface: &str, func: &str) -> Result<Func> {
    let iface_idx = instance
        .get_export_index(&mut *store, None, iface)
        .with_context(|| format!("the component does not export {iface}"))?;
    let func_idx = instance
        .get_export_index(&mut *store, Some(&iface_idx), func)
        .with_context(|| format!("{iface} has no {func}"))?;
    instance
        .get_func(&mut *store, func_idx)
        .context("not a function")
}

fn s(v: &serde_json::Value, key: &str) -> Val {
    Val::String(v[key].as_str().unwrap_or_default().into())
}
fn json(v: &serde_json::Value, key: &str, default: &str) -> Val {
    Val::String(v.get(key).map_or(default.into(), |j| j.to_string()))
}
fn u(v: &serde_json::Value, key: &str) -> Val {
    Val::U32(v[key].as_u64().unwrap_or_default() as u32)
}
fn i(v: &serde_json::Value, key: &str) -> Val {
    Val::S32(v[key].as_i64().unwrap_or_default() as i32)
}
fn b(v: &serde_json::Value, key: &str) -> Val {
    Val::Bool(v[key].as_bool().unwrap_or_default())
}
fn strs(v: &serde_json::Value, key: &str) -> Val {
    Val::List(
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| Val::String(x.as_str().unwrap_or_default().into()))
                    .collect()
            })
            .unwrap_or_default(),
    )
}
fn rec(fields: Vec<(&str, Val)>) -> Val {
    Val::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn lower_event(seam: &str, e: &serde_json::Value) -> Result<(&'static str, &'static str, Val)> {
    Ok(match seam {
        "steering" => (
            "toolgate:guard/steering@0.3.0",
            "before-tool-call",
            rec(vec![
                ("run-id", s(e, "run_id")),
                ("tool-name", s(e, "tool_name")),
                ("call-id", s(e, "call_id")),
                ("args", json(e, "args", "{}")),
                ("state", json(e, "state", "{}")),
            ]),
        ),
        "rewrite" => (
            "toolgate:guard/rewrite@0.3.0",
            "dispatch",
            rec(vec![
                ("run-id", s(e, "run_id")),
                ("iteration-index", u(e, "iteration_index")),
                ("node-name", s(e, "node_name")),
                ("call-id", s(e, "call_id")),
                ("tool-name", s(e, "tool_name")),
                ("args", json(e, "args", "{}")),
                ("available-tools", strs(e, "available_tools")),
                ("state", json(e, "state", "{}")),
            ]),
        ),
        "routing" => (
            "toolgate:guard/routing@0.3.0",
            "narrow",
            rec(vec![
                ("run-id", s(e, "run_id")),
                ("mode", s(e, "mode")),
                ("intent-label", s(e, "intent_label")),
                ("total-tools", u(e, "total_tools")),
                ("narrowed-tool-names", strs(e, "narrowed_tool_names")),
                ("saved-tokens-estimate", u(e, "saved_tokens_estimate")),
                (
                    "tools",
                    Val::List(
                        e["tools"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|t| {
                                        rec(vec![
                                            ("name", s(t, "name")),
                                            ("description", s(t, "description")),
                                        ])
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    ),
                ),
                (
                    "query",
                    Val::Option(e["query"].as_str().map(|q| Box::new(Val::String(q.into())))),
                ),
                ("state", json(e, "state", "{}")),
            ]),
        ),
        "result" => (
            "toolgate:guard/result@0.3.0",
            "on-result",
            rec(vec![
                ("run-id", s(e, "run_id")),
                ("tool-name", s(e, "tool_name")),
                ("result", json(e, "result", "null")),
                ("call-id", s(e, "call_id")),
                ("deferred", b(e, "deferred")),
                ("is-error", b(e, "is_error")),
                ("state", json(e, "state", "{}")),
            ]),
        ),
        "response" => (
            "toolgate:guard/response@0.3.0",
            "render",
            rec(vec![
                ("run-id", s(e, "run_id")),
                ("iteration-index", i(e, "iteration_index")),
                ("model", s(e, "model")),
                ("node-name", s(e, "node_name")),
                ("original-content", s(e, "original_content")),
                (
                    "content",
                    e.get("content").map_or_else(|| s(e, "original_content"), |_| s(e, "content")),
                ),
                ("state", json(e, "state", "{}")),
            ]),
        ),
        other => bail!("unknown seam {other}"),
    })
}
