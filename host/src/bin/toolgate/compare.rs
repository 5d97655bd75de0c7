//! `toolgate replay --plugins A --compare B TRACE`: every event of a trace
//! (or of a decision log) through two policy sets, and where their answers
//! differ, grouped by seam and by the change — what a policy change's
//! review looks like.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use serde_json::{Map, Value, json};
use toolgate::{DecideRequest, Decision, Event, NotDecided, Seam, Verdict};

use crate::bad;
use crate::replay::{TraceItem, TraceLine, observe, parse_item, what};

/// How many events each group shows.
const FIRST: usize = 5;

/// The keys of a line that make a request; a decision log's others are
/// left out.
const REQUEST_KEYS: [&str; 4] = ["seam", "event", "state", "tenant"];

/// A trace's or a decision log's events, each with its line number: the
/// lines holding `seam` and `event` (with `state` and `tenant` when
/// there), read as `replay` reads a trace line, and a trace's lifecycle
/// lines (`hook` and `event`); other lines are counted and passed over. A
/// line that is not JSON, or whose event is not one of its seam (or
/// hook), is an error naming the file and the line.
pub(crate) fn read_events(file: &Path, text: &str) -> Result<(Vec<TraceLine>, usize)> {
    let mut events = Vec::new();
    let mut passed_over = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |e: String| bad(format!("{}:{}: {e}", file.display(), i + 1));
        let value: Value = serde_json::from_str(line).map_err(|e| at(format!("not JSON: {e}")))?;
        if value.get("hook").is_some() {
            events.push((i + 1, parse_item(line).map_err(|e| at(format!("{e:#}")))?));
            continue;
        }
        let Some(fields) = value
            .as_object()
            .filter(|o| o.contains_key("seam") && o.contains_key("event"))
        else {
            passed_over += 1;
            continue;
        };
        let request: Map<String, Value> = REQUEST_KEYS
            .iter()
            .filter_map(|k| Some((k.to_string(), fields.get(*k)?.clone())))
            .collect();
        let request = DecideRequest::parse_line(&Value::Object(request).to_string()).map_err(at)?;
        events.push((i + 1, TraceItem::Decide(request)));
    }
    Ok((events, passed_over))
}

/// One side's answer to an event.
type Answer = Result<Decision<Verdict>, NotDecided>;

/// What changed between two answers to one event, or `None` when they are
/// the same (two refusals to decide are the same, whatever they say).
fn change(a: &Answer, b: &Answer) -> Option<&'static str> {
    let (a, b) = match (a, b) {
        (Err(_), Err(_)) => return None,
        (Ok(_), Err(_)) => return Some("decided → not decided"),
        (Err(_), Ok(_)) => return Some("not decided → decided"),
        (Ok(a), Ok(b)) if a.result == b.result => return None,
        (Ok(a), Ok(b)) => (&a.result, &b.result),
    };
    Some(match (a, b) {
        (Verdict::Steering(None), _) => "proceed → skip",
        (_, Verdict::Steering(None)) => "skip → proceed",
        (Verdict::Steering(_), _) => "skip message changed",
        (Verdict::Rewrite(_), _) => "rewrite changed",
        (Verdict::Routing(_), _) => "narrowing changed",
        // Not met: a result is always observed, the same.
        (Verdict::Result, _) => "result changed",
        (Verdict::Response(_), _) => "answer changed",
    })
}

/// An answer as the comparison shows it: the hook's return value, or
/// `{"not_decided": why}`.
fn shown(answer: &Answer) -> Value {
    match answer {
        Ok(d) => serde_json::to_value(&d.result).unwrap_or(Value::Null),
        Err(refused) => json!({"not_decided": refused.to_string()}),
    }
}

/// One event whose answers differ.
#[derive(Serialize)]
struct Differs {
    line: usize,
    event: String,
    a: Value,
    b: Value,
}

/// The events of one seam whose answers changed the same way.
#[derive(Serialize)]
struct Group {
    seam: Seam,
    change: &'static str,
    count: usize,
    first: Vec<Differs>,
}

/// The comparison, as `--json` prints it.
#[derive(Serialize)]
struct Report<'a> {
    a: &'a Path,
    b: &'a Path,
    events: usize,
    differ: usize,
    passed_over: usize,
    groups: Vec<Group>,
}

/// Decides every event with `a`, then with `b` (each with its own state,
/// in trace order; a lifecycle line is delivered to both) and prints where
/// they differ; exits 1 when they do.
pub(crate) async fn compare(
    (a, a_dir): (&toolgate::Registry, &Path),
    (b, b_dir): (&toolgate::Registry, &Path),
    (events, passed_over): (Vec<TraceLine>, usize),
    as_json: bool,
) -> Result<()> {
    let mut groups: BTreeMap<(usize, &'static str), Group> = BTreeMap::new();
    let mut count = 0;
    for (line, item) in events {
        let request = match item {
            TraceItem::Decide(request) => request,
            TraceItem::Observe(o) => {
                observe(a, &o)?;
                observe(b, &o)?;
                continue;
            }
        };
        count += 1;
        let (on_a, on_b) = (
            request.decide(&a.plugin_set()).await,
            request.decide(&b.plugin_set()).await,
        );
        let Some(change) = change(&on_a, &on_b) else {
            continue;
        };
        let seam = request.event.seam();
        let position = Seam::ALL.iter().position(|s| *s == seam).unwrap_or(0);
        let group = groups.entry((position, change)).or_insert(Group {
            seam,
            change,
            count: 0,
            first: Vec::new(),
        });
        group.count += 1;
        if group.first.len() < FIRST {
            group.first.push(Differs {
                line,
                event: describe(&request.event),
                a: shown(&on_a),
                b: shown(&on_b),
            });
        }
    }
    let report = Report {
        a: a_dir,
        b: b_dir,
        events: count,
        differ: groups.values().map(|g| g.count).sum(),
        passed_over,
        groups: groups.into_values().collect(),
    };
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    if report.differ > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// An event in a line: its seam and tool, and its run and call.
fn describe(event: &Event) -> String {
    let (run, call) = match event {
        Event::Routing(e) => (&e.run_id, None),
        Event::Rewrite(e) => (&e.run_id, Some(&e.call_id)),
        Event::Steering(e) => (&e.run_id, Some(&e.call_id)),
        Event::Result(e) => (&e.run_id, Some(&e.call_id)),
        Event::Response(e) => (&e.run_id, None),
    };
    match call {
        Some(call) => format!("{} ({run}/{call})", what(event)),
        None => format!("{} ({run})", what(event)),
    }
}

fn print(report: &Report<'_>) {
    println!(
        "a: {}\nb: {}\n{} events, {} differ{}",
        report.a.display(),
        report.b.display(),
        report.events,
        report.differ,
        match report.passed_over {
            0 => String::new(),
            n => format!(" ({n} lines without seam and event passed over)"),
        }
    );
    for g in &report.groups {
        println!("\n{} {}: {}", g.seam, g.change, g.count);
        for d in &g.first {
            println!("  #{} {}: {} → {}", d.line, d.event, d.a, d.b);
        }
        if g.count > g.first.len() {
            println!("  … and {} more", g.count - g.first.len());
        }
    }
}
