//! `toolgate replay`: a JSON-lines trace through a directory's chains (or
//! through two, `--compare`), and the trace format `bench` and `snapshot`
//! read too.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use toolgate::{DecideRequest, Decision, Event, GuardTrace, NotDecided, ObserveRequest, Verdict};

use crate::args::{CacheArgs, LoadArgs, StateArg, open};
use crate::bad;

/// `toolgate replay`'s options.
#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The plugin directory.
    #[arg(long)]
    plugins: PathBuf,
    /// The trace file (JSON lines), or - for standard input. With
    /// `--compare`, a decision log too: its lines holding `seam` and
    /// `event` are replayed.
    file: PathBuf,
    /// A second plugin directory: decide every event with both and print
    /// where their answers differ, grouped by seam and change (exit 1 when
    /// they do, 0 when they are the same).
    #[arg(long, value_name = "DIR")]
    compare: Option<PathBuf>,
    /// Print each decision as a JSON line instead of a readable line (with
    /// `--compare`: the comparison as one JSON document).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    state: StateArg,
}

/// Runs `toolgate replay`.
pub(crate) async fn run(args: ReplayArgs) -> Result<()> {
    let Some(b_dir) = &args.compare else {
        let registry = open(&args.plugins, &args.cache, &args.load, &args.state).await?;
        return replay(&registry, &args.file, args.json).await;
    };
    if !matches!(args.state.backend(), toolgate::StateBackend::Memory { .. }) {
        return Err(bad(
            "--compare keeps each policy set's guard state apart, in memory; \
             a shared --state would let one set's calls count against the other's",
        ));
    }
    let events = crate::compare::read_events(&args.file, &read_text(&args.file)?)?;
    let a = open(&args.plugins, &args.cache, &args.load, &args.state).await?;
    let b = open(b_dir, &args.cache, &args.load, &args.state).await?;
    crate::compare::compare((&a, &args.plugins), (&b, b_dir), events, args.json).await
}

/// One line of a JSON-lines trace: a decision to make, or a lifecycle
/// event to deliver first (a line with `hook`).
pub(crate) enum TraceItem {
    /// `{"seam": ..., "event": ..., "state"?: ..., "tenant"?: ...}`.
    Decide(DecideRequest),
    /// `{"hook": "on_llm_end", "event": ..., "tenant"?: ...}`: what
    /// `POST /v1/observe` takes.
    Observe(ObserveRequest),
}

/// One line of a JSON-lines trace: its number and what it holds.
pub(crate) type TraceLine = (usize, TraceItem);

/// Reads and parses a whole trace (`-`: standard input); the first bad line
/// is an error naming the file and the line.
pub(crate) fn read_trace(file: &Path) -> Result<Vec<TraceLine>> {
    read_text(file)?
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let item =
                parse_item(line).map_err(|e| bad(format!("{}:{}: {e}", file.display(), i + 1)))?;
            Ok((i + 1, item))
        })
        .collect()
}

/// A trace's decisions only, each with its line number: what `bench` and
/// `snapshot` run (a lifecycle line decides nothing).
pub(crate) fn read_decisions(file: &Path) -> Result<Vec<(usize, DecideRequest)>> {
    Ok(read_trace(file)?
        .into_iter()
        .filter_map(|(n, item)| match item {
            TraceItem::Decide(request) => Some((n, request)),
            TraceItem::Observe(_) => None,
        })
        .collect())
}

/// One trace line: a lifecycle event when it has `hook`
/// ([`ObserveRequest::parse`]), else a request ([`parse_line`]).
pub(crate) fn parse_item(line: &str) -> Result<TraceItem> {
    let is_lifecycle = serde_json::from_str::<Value>(line)
        .is_ok_and(|v| v.as_object().is_some_and(|o| o.contains_key("hook")));
    if is_lifecycle {
        return ObserveRequest::parse(line.as_bytes())
            .map(TraceItem::Observe)
            .map_err(|e| anyhow!(e));
    }
    parse_line(line).map(TraceItem::Decide)
}

/// Delivers a trace's lifecycle event to `registry`'s chains: `queued`,
/// `unobserved` (no guard observes its hook) or `dropped`; an error when
/// its tenant's guards are not serving.
pub(crate) fn observe(registry: &toolgate::Registry, o: &ObserveRequest) -> Result<&'static str> {
    let observed = registry
        .plugin_set()
        .observe(o.tenant.as_deref(), &o.event)
        .map_err(|e| anyhow!("not observed: {e}"))?;
    Ok(observed.as_str())
}

/// A trace's text (`-`: standard input).
fn read_text(file: &Path) -> Result<String> {
    if file == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        return Ok(s);
    }
    std::fs::read_to_string(file).map_err(|e| bad(format!("trace file {}: {e}", file.display())))
}

/// Decides each line as every face decides a request
/// ([`DecideRequest::decide`]: the tenant's admission, its account's place,
/// the `decide` span). A line the host could not decide is printed as such
/// (with the trace up to the guard it could not run) and the replay goes
/// on; the exit code is then 3, as `check`'s.
async fn replay(registry: &toolgate::Registry, file: &Path, as_json: bool) -> Result<()> {
    let mut summary = Summary::default();
    for (n, item) in read_trace(file)? {
        let request = match item {
            TraceItem::Decide(request) => request,
            TraceItem::Observe(o) => {
                let hook = o.event.hook();
                let observed = observe(registry, &o)?;
                summary.observed += 1;
                if as_json {
                    println!(
                        "{}",
                        json!({"line": n, "hook": hook.as_str(), "observed": observed})
                    );
                } else {
                    println!("#{n} {hook} -> {observed}");
                }
                continue;
            }
        };
        let event = &request.event;
        match request.decide(&registry.plugin_set()).await {
            Ok(decision) => {
                summary.decisions += 1;
                summary.add(&decision.trace);
                if let Some(shadow) = &decision.shadow {
                    summary.add(&shadow.trace);
                }
                if as_json {
                    let mut line = json!({"line": n, "seam": event.seam(), "result": decision.result, "trace": decision.trace});
                    if let Some(shadow) = &decision.shadow {
                        line["shadow"] = json!(shadow);
                    }
                    println!("{line}");
                } else {
                    println!("{}", describe(n, event, &decision));
                }
            }
            Err(refused) => {
                let trace = match &refused {
                    NotDecided::Unavailable { trace, .. } => trace.as_slice(),
                    NotDecided::Busy(_) | NotDecided::NotReady(_) => &[],
                };
                summary.add(trace);
                summary.not_decided += 1;
                if as_json {
                    println!(
                        "{}",
                        json!({"line": n, "seam": event.seam(), "not_decided": refused.to_string(), "trace": trace})
                    );
                } else {
                    println!("#{n} {} -> not decided: {refused}", what(event));
                }
            }
        }
    }
    summary.print();
    crate::check::flush_decision_log(registry).await;
    if summary.not_decided > 0 {
        std::process::exit(3);
    }
    Ok(())
}

/// One trace line: `{"seam": ..., "event": ..., "state"?: ..., "tenant"?: ...}`
/// — the seam, then exactly what the HTTP service takes as a request body,
/// read by the same parser ([`DecideRequest::parse_line`]; errors name the
/// field).
pub(crate) fn parse_line(line: &str) -> Result<DecideRequest> {
    DecideRequest::parse_line(line).map_err(|e| anyhow!(e))
}

/// An event in a few words: its seam and tool.
pub(crate) fn what(event: &Event) -> String {
    match event {
        Event::Routing(e) => format!("routing {} tools", e.narrowed_tool_names.len()),
        Event::Rewrite(e) => format!("rewrite {}", e.tool_name),
        Event::Steering(e) => format!("steering {}", e.tool_name),
        Event::Result(e) => format!("result {}", e.tool_name),
        Event::Response(e) => format!("response of {}", e.node_name),
    }
}

fn describe(n: usize, event: &Event, d: &Decision<Verdict>) -> String {
    let what = what(event);
    let result = serde_json::to_value(&d.result).unwrap_or(Value::Null);
    let line = format!("#{n} {what} -> {result} [{}]", guards(&d.trace));
    match &d.shadow {
        None => line,
        Some(shadow) => {
            let would = serde_json::to_value(&shadow.result).unwrap_or(Value::Null);
            let agrees = match shadow.agrees {
                Some(true) => "agrees",
                Some(false) => "differs",
                None => "not decided",
            };
            format!(
                "{line} shadow: {would} ({agrees}) [{}]",
                guards(&shadow.trace)
            )
        }
    }
}

/// Each guard's outcome and time, in order.
fn guards(trace: &[GuardTrace]) -> String {
    trace
        .iter()
        .map(|t| match t.fault {
            Some(f) => format!("{}: fault {f} {}µs", t.plugin, t.micros),
            None => format!("{}: {} {}µs", t.plugin, t.outcome.as_str(), t.micros),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Default)]
struct Summary {
    decisions: usize,
    /// Lifecycle events delivered.
    observed: usize,
    not_decided: usize,
    outcomes: BTreeMap<String, usize>,
    per_plugin: BTreeMap<String, (BTreeMap<String, usize>, Vec<u64>)>,
}

impl Summary {
    /// Counts a line's guard calls (and, when it has a result, its
    /// decision).
    fn add(&mut self, trace: &[GuardTrace]) {
        for t in trace {
            let outcome = match t.fault {
                Some(f) => format!("fault:{f}"),
                None => t.outcome.as_str().to_string(),
            };
            let outcome = match t.mode {
                toolgate::Mode::Enforce => outcome,
                toolgate::Mode::Shadow => format!("shadow {outcome}"),
            };
            *self.outcomes.entry(outcome.clone()).or_default() += 1;
            let name = match t.mode {
                toolgate::Mode::Enforce => t.plugin.clone(),
                toolgate::Mode::Shadow => format!("{} (shadow)", t.plugin),
            };
            let (outcomes, micros) = self.per_plugin.entry(name).or_default();
            *outcomes.entry(outcome).or_default() += 1;
            micros.push(t.micros);
        }
    }

    fn print(&self) {
        println!("--");
        let not_decided = match self.not_decided {
            0 => String::new(),
            n => format!(", {n} not decided"),
        };
        let observed = match self.observed {
            0 => String::new(),
            n => format!(", {n} lifecycle events"),
        };
        println!(
            "{} decisions{not_decided}{observed}; outcomes: {}",
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
