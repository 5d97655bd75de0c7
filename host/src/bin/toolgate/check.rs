//! `toolgate check`: one event through a directory's chain.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use serde_json::{Map, Value, json};
use toolgate::NotDecided;
use toolgate::{DecideRequest, Seam};

use crate::args::{CacheArgs, LoadArgs, StateArg, engine_with_state, open};
use crate::bad;
use crate::cases::{CaseFile, CaseHttp, Chains};

/// `toolgate check`'s options.
#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// The plugin directory (with --cases: default, the case file's `[[plugin]]` entries).
    #[arg(long, required_unless_present = "cases")]
    plugins: Option<PathBuf>,
    /// The seam: routing, rewrite, steering, result or response.
    #[arg(long, required_unless_present = "cases", conflicts_with = "cases")]
    seam: Option<Seam>,
    /// The event as JSON (a file, or - for standard input).
    #[arg(long, required_unless_present = "cases", conflicts_with = "cases")]
    event: Option<PathBuf>,
    /// The hook's state as a JSON object (a file).
    #[arg(long, conflicts_with = "cases")]
    state: Option<PathBuf>,
    /// The tenant the call belongs to (runs the global chain, then the tenant's own).
    #[arg(long, conflicts_with = "cases")]
    tenant: Option<String>,
    /// Lifecycle events to deliver before the decision (a file, JSON
    /// lines `{"hook": "on_llm_end", "event": {...}}`, as `POST
    /// /v1/observe` takes them; a line without `tenant` takes --tenant's).
    /// The decision sees what the observing guards kept in state.
    #[arg(long, conflicts_with = "cases", value_name = "FILE")]
    events: Option<PathBuf>,
    /// Check the events of a case file's cases (`*.test.toml`, see `toolgate test`)
    /// instead of --seam/--event: prints each case's decision.
    #[arg(long)]
    cases: Option<PathBuf>,
    /// With --cases: only the cases whose name contains this.
    #[arg(long, requires = "cases")]
    case: Option<String>,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    load: LoadArgs,
}

/// Runs `toolgate check`: the request the flags describe, read by the
/// parser every face uses and decided as every face decides it
/// ([`DecideRequest::decide`]: the tenant's admission, its account's
/// place, the `decide` span). Prints the decision; exits 3 when the host
/// could not decide.
pub(crate) async fn run(args: CheckArgs) -> Result<()> {
    if let Some(file) = &args.cases {
        return check_cases(&args, file).await;
    }
    let (Some(plugins), Some(seam), Some(event)) = (&args.plugins, args.seam, &args.event) else {
        return Err(bad("give --plugins, --seam and --event, or --cases"));
    };
    if !plugins.is_dir() {
        return Err(bad(format!(
            "plugin directory {} does not exist",
            plugins.display()
        )));
    }
    let request = read_request(&args, seam, event)?;
    let events = args
        .events
        .as_deref()
        .map(|file| read_events(file, request.tenant.as_ref()))
        .transpose()?;
    let registry = open(plugins, &args.cache, &args.load, &StateArg::default()).await?;
    for (at, o) in events.iter().flatten() {
        if let Err(e) = registry.plugin_set().observe(o.tenant.as_deref(), &o.event) {
            return Err(bad(format!("{at}: not observed: {e}")));
        }
    }
    let refused = match request.decide(&registry.plugin_set()).await {
        Ok(decision) => {
            println!("{}", serde_json::to_string_pretty(&decision)?);
            flush_decision_log(&registry).await;
            return Ok(());
        }
        Err(refused) => refused,
    };
    not_decided(&refused)
}

/// Waits (up to 10 s) until the global manifest's decision log, if any,
/// has written every line queued so far: a command's decisions are logged
/// before its process ends.
pub(crate) async fn flush_decision_log(registry: &toolgate::Registry) {
    if let Some(log) = registry.plugin_set().decision_log.clone() {
        log.flush_within(std::time::Duration::from_secs(10)).await;
    }
}

/// `--cases`: each selected case's event through the chain (`--plugins`,
/// else the case file's entries with the case's `config`, their requests
/// answered by the case's `[[case.http]]`), its decision printed as JSON
/// with the case's name. Nothing is checked against `expect`: that is
/// `toolgate test`.
async fn check_cases(args: &CheckArgs, file: &Path) -> Result<()> {
    let cases = CaseFile::read(file)?;
    let selected: Vec<_> = cases.selected(args.case.as_deref()).collect();
    if selected.is_empty() {
        return Err(bad(format!("{}: no case matches", file.display())));
    }
    let state = StateArg::default();
    let registry = match &args.plugins {
        Some(dir) => Some(open(dir, &args.cache, &args.load, &state).await?),
        None => None,
    };
    // The case file's guards ask no network: each case's `[[case.http]]`
    // answers them, as under `toolgate test`.
    let http = Arc::new(CaseHttp::default());
    let mut chains = Chains::new(&cases, engine_with_state(&state)?, &args.cache, &args.load)
        .answering(Arc::clone(&http));
    for case in selected {
        let Some(request) = case.request() else {
            // A case whose config must be refused: print the refusal.
            let refused = match chains.set(case.config.as_ref()).await {
                Ok(_) => Value::Null,
                Err(e) => Value::from(format!("{e:#}")),
            };
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"case": case.name, "config_refused": refused})
                )?
            );
            continue;
        };
        let set = match &registry {
            Some(r) => r.plugin_set(),
            None => chains.set(case.config.as_ref()).await?,
        };
        // As `toolgate test` does: the case's lifecycle events first.
        http.begin(&case.http);
        for event in case.events() {
            if let Err(e) = set.observe(request.tenant.as_deref(), event) {
                return Err(bad(format!("{}: events: not observed: {e}", case.name)));
            }
        }
        let decided = request.decide(&set).await;
        for wrong in http.finish() {
            eprintln!("toolgate: warning: {}: {wrong}", case.name);
        }
        match decided {
            Ok(decision) => println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "case": case.name,
                    "result": decision.result,
                    "trace": decision.trace,
                }))?
            ),
            Err(refused) => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({"case": case.name}))?
                );
                not_decided(&refused)?;
            }
        }
    }
    Ok(())
}

/// Reports a request the host could not decide, and exits 3.
fn not_decided(refused: &NotDecided) -> Result<()> {
    // The host's doing, not the guards': nothing was decided, so no result.
    match refused {
        NotDecided::Unavailable { trace, .. } => {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"trace": trace}))?
            );
            eprintln!("toolgate: {refused}");
        }
        NotDecided::Busy(_) | NotDecided::NotReady(_) => {
            eprintln!("toolgate: not decided: {refused}");
        }
    }
    std::process::exit(3);
}

/// The request `--event`, `--state` and `--tenant` describe, checked as a
/// request body is (`"state": null` is `{}`); an error names the field
/// (`event.args`) and the files it came from.
fn read_request(args: &CheckArgs, seam: Seam, event: &Path) -> Result<DecideRequest> {
    let tenant = args
        .tenant
        .as_deref()
        .map(toolgate::TenantName::try_from)
        .transpose()
        .map_err(|e| bad(format!("--tenant: {e}")))?;
    let mut body = Map::new();
    body.insert("event".into(), read_json(event, "event")?);
    if let Some(path) = &args.state {
        body.insert("state".into(), read_json(path, "state")?);
    }
    let mut request = DecideRequest::from_value(seam, Value::Object(body)).map_err(|e| {
        let state = match &args.state {
            Some(path) => format!(", the state from {}", source(path)),
            None => String::new(),
        };
        bad(format!("{e} (the event from {}{state})", source(event)))
    })?;
    request.tenant = tenant;
    Ok(request)
}

/// `--events`: each line a lifecycle event request, with `tenant` when the
/// line names none; the first bad line is an error naming the file and
/// the line. Each comes with where it is, for messages.
fn read_events(
    file: &Path,
    tenant: Option<&toolgate::TenantName>,
) -> Result<Vec<(String, toolgate::ObserveRequest)>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| bad(format!("events file {}: {e}", file.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let at = format!("{}:{}", file.display(), i + 1);
            let mut o = toolgate::ObserveRequest::parse(line.as_bytes())
                .map_err(|e| bad(format!("{at}: {e}")))?;
            if o.tenant.is_none() {
                o.tenant = tenant.cloned();
            }
            Ok((at, o))
        })
        .collect()
}

/// Where `path` is read from, for messages.
fn source(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

fn read_json(path: &Path, what: &str) -> Result<Value> {
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| bad(format!("{what}: cannot read standard input: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| bad(format!("{what} file {}: {e}", path.display())))?
    };
    serde_json::from_str(&text)
        .map_err(|e| bad(format!("{what} in {} is not valid JSON: {e}", source(path))))
}
