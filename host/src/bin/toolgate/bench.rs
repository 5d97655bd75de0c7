//! `toolgate bench`: what does my guard cost?

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use toolgate::bench::{Report, Settings};

use crate::args::{CacheArgs, LoadArgs, StateArg, engine_with_state, open};
use crate::bad;
use crate::cases::{CaseFile, CaseHttp, Chains};
use crate::replay::{TraceItem, parse_item, read_decisions};

/// The events measured when no trace is given: the bundled example trace.
const EXAMPLE_TRACE: &str = include_str!("../../../../examples/trace.jsonl");

/// `toolgate bench`'s options.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// The plugin directory (with --cases: default, the case file's `[[plugin]]` entries).
    #[arg(long, required_unless_present = "cases")]
    plugins: Option<PathBuf>,
    /// Measure this tenant's chain (the global chain, then the tenant's own).
    #[arg(long)]
    tenant: Option<String>,
    /// The calls to make, as a JSON-lines trace like `replay`'s. Default: the bundled
    /// example events (one of each seam).
    #[arg(long, conflicts_with = "cases")]
    trace: Option<PathBuf>,
    /// Measure the events of a case file's cases (`*.test.toml`, see `toolgate test`)
    /// instead of a trace.
    #[arg(long)]
    cases: Option<PathBuf>,
    /// With --cases: only the cases whose name contains this.
    #[arg(long, requires = "cases")]
    case: Option<String>,
    /// Seconds each measurement window lasts (per guard, and per seam under load).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Concurrent callers of the chain.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    state: StateArg,
}

/// Runs `toolgate bench`. The trace is read by the parser every face uses
/// ([`toolgate::DecideRequest::parse_line`]), but the calls are not made
/// through [`toolgate::DecideRequest::decide`]: each guard is measured in a
/// chain of its own, and the whole chain straight through
/// [`toolgate::Chain::decide`] at `--concurrency`, so that neither waits
/// for a place in the tenant's account. Its `tenant_requests` share (by
/// default one per core) would hold the chain to that many calls at once and the figures would be the
/// wait for a place, not what the guards cost; the `decide` span and the
/// admission check add nothing the guards do.
pub(crate) async fn run(args: BenchArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        return Err(bad("--seconds must be more than 0 and at most 3600"));
    }
    if args.concurrency == 0 || args.concurrency > 4096 {
        return Err(bad("--concurrency must be between 1 and 4096"));
    }
    let tenant = args
        .tenant
        .as_deref()
        .map(toolgate::TenantName::try_from)
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    let case_file = args.cases.as_deref().map(CaseFile::read).transpose()?;
    let lines = match (&args.trace, &case_file) {
        (_, Some(file)) => file
            .selected(args.case.as_deref())
            .filter_map(|c| Some((c.line, c.request()?.clone())))
            .collect(),
        (Some(file), None) => read_decisions(file)?,
        (None, None) => EXAMPLE_TRACE
            .lines()
            .enumerate()
            .map(|(i, line)| Ok((i + 1, parse_item(line)?)))
            .filter_map(|item| match item {
                Ok((n, TraceItem::Decide(request))) => Some(Ok((n, request))),
                Ok((_, TraceItem::Observe(_))) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_>>()?,
    };
    if lines.is_empty() {
        return Err(bad("no case matches"));
    }
    let events: Vec<_> = lines.into_iter().map(|(_, r)| (r.event, r.state)).collect();
    // Keeps the case file's plugin directory (and its registry) alive.
    let mut chains = None;
    let http = Arc::new(CaseHttp::default());
    let registry;
    let set = match (&args.plugins, &case_file) {
        (Some(dir), _) => {
            registry = open(dir, &args.cache, &args.load, &args.state).await?;
            registry.plugin_set()
        }
        (None, Some(file)) => {
            // The guards ask no network: every selected case's
            // `[[case.http]]` answers them, as under `toolgate test`.
            let engine = engine_with_state(&args.state)?;
            http.begin_all(file.selected(args.case.as_deref()));
            let c = chains.insert(
                Chains::new(file, engine, &args.cache, &args.load).answering(Arc::clone(&http)),
            );
            c.set(None).await?
        }
        (None, None) => return Err(bad("give --plugins, or --cases")),
    };
    let settings = Settings {
        window: Duration::from_secs_f64(args.seconds),
        concurrency: args.concurrency,
    };
    let chain = set.chain(tenant.as_deref());
    let report =
        toolgate::bench::measure(&chain, tenant.map(String::from), &events, &settings).await?;
    for wrong in http.finish() {
        eprintln!("toolgate: warning: {wrong}");
    }
    if report.seams.is_empty() {
        return Err(bad(
            "nothing to measure: no guard subscribes to a seam the events are for",
        ));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(report: &Report) {
    for seam in &report.seams {
        let c = &seam.chain;
        println!(
            "{} ({} events): chain {:.0} decisions/s at concurrency {}, p50 {:.1} µs, p99 {:.1} µs, {} faults",
            seam.seam,
            seam.events,
            c.decisions_per_sec,
            c.concurrency,
            c.latency.p50_us,
            c.latency.p99_us,
            c.faults
        );
        let spread: Vec<String> = seam
            .spread
            .iter()
            .map(|s| {
                format!(
                    "{} ms idle: p50 {:.1} µs (floor {:.1} µs)",
                    s.gap_ms, s.latency.p50_us, s.floor.p50_us
                )
            })
            .collect();
        println!("  one call at a time, after {}", spread.join(", "));
        println!(
            "  {:<24} {:>10} {:>10} {:>11} {:>11} {:>13} {:>10} {:>10}",
            "guard",
            "fresh p50",
            "fresh p99",
            "reused p50",
            "reused p99",
            "fresh/reused",
            "light p50",
            "light p99"
        );
        for g in &seam.guards {
            println!(
                "  {:<24} {:>7.1} µs {:>7.1} µs {:>8.1} µs {:>8.1} µs {:>12.1}x {:>7.1} µs {:>7.1} µs{}",
                g.plugin,
                g.fresh.p50_us,
                g.fresh.p99_us,
                g.reused.p50_us,
                g.reused.p99_us,
                g.fresh_over_reused,
                g.light.p50_us,
                g.light.p99_us,
                if g.faults > 0 {
                    format!("  ({} faults)", g.faults)
                } else {
                    String::new()
                }
            );
        }
    }
}
