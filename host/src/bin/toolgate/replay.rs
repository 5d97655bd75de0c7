//! `toolgate replay`: a JSON-lines trace through a directory's chains, and
//! the trace format `bench` and `snapshot` read too.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use toolgate::{DecideRequest, Decision, Event, Seam, Verdict};

use crate::args::{CacheArgs, LoadArgs, open};
use crate::bad;

/// `toolgate replay`'s options.
#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
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
}

/// Runs `toolgate replay`.
pub(crate) async fn run(args: ReplayArgs) -> Result<()> {
    let registry = open(&args.plugins, &args.cache, &args.load).await?;
    replay(&registry, &args.file, args.json).await
}

/// One line of a JSON-lines trace: its number and the request.
pub(crate) type TraceLine = (usize, DecideRequest);

/// Reads and parses a whole trace (`-`: standard input); the first bad line
/// is an error naming the file and the line.
pub(crate) fn read_trace(file: &Path) -> Result<Vec<TraceLine>> {
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
pub(crate) fn parse_line(line: &str) -> Result<DecideRequest> {
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
