//! `toolgate bench`: what does my guard cost?

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use toolgate::bench::{Report, Settings};

use crate::args::{CacheArgs, LoadArgs, StateArg, open};
use crate::bad;
use crate::replay::{parse_line, read_trace};

/// The events measured when no trace is given: the bundled example trace.
const EXAMPLE_TRACE: &str = include_str!("../../../../examples/trace.jsonl");

/// `toolgate bench`'s options.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// The plugin directory.
    #[arg(long)]
    plugins: PathBuf,
    /// Measure this tenant's chain (the global chain, then the tenant's own).
    #[arg(long)]
    tenant: Option<String>,
    /// The calls to make, as a JSON-lines trace like `replay`'s. Default: the bundled
    /// example events (one of each seam).
    #[arg(long)]
    trace: Option<PathBuf>,
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
    let lines = match &args.trace {
        Some(file) => read_trace(file)?,
        None => EXAMPLE_TRACE
            .lines()
            .enumerate()
            .map(|(i, line)| Ok((i + 1, parse_line(line)?)))
            .collect::<Result<_>>()?,
    };
    let events: Vec<_> = lines.into_iter().map(|(_, r)| (r.event, r.state)).collect();
    let registry = open(&args.plugins, &args.cache, &args.load, &args.state).await?;
    let set = registry.plugin_set();
    let settings = Settings {
        window: Duration::from_secs_f64(args.seconds),
        concurrency: args.concurrency,
    };
    let chain = set.chain(tenant.as_deref());
    let report =
        toolgate::bench::measure(chain, tenant.map(String::from), &events, &settings).await?;
    if report.seams.is_empty() {
        return Err(bad(format!(
            "nothing to measure: no guard in {} subscribes to a seam the trace has events for",
            args.plugins.display()
        )));
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
