//! `toolgate check`: one event through a directory's chain.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Map, Value, json};
use toolgate::NotDecided;
use toolgate::{DecideRequest, Seam};

use crate::args::{CacheArgs, LoadArgs, StateArg, open};
use crate::bad;

/// `toolgate check`'s options.
#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// The plugin directory.
    #[arg(long)]
    plugins: PathBuf,
    /// The seam: routing, rewrite, steering or result.
    #[arg(long)]
    seam: Seam,
    /// The event as JSON (a file, or - for standard input).
    #[arg(long)]
    event: PathBuf,
    /// The hook's state as a JSON object (a file).
    #[arg(long)]
    state: Option<PathBuf>,
    /// The tenant the call belongs to (runs the global chain, then the tenant's own).
    #[arg(long)]
    tenant: Option<String>,
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
    if !args.plugins.is_dir() {
        return Err(bad(format!(
            "plugin directory {} does not exist",
            args.plugins.display()
        )));
    }
    let request = read_request(&args)?;
    let registry = open(&args.plugins, &args.cache, &args.load, &StateArg::default()).await?;
    let refused = match request.decide(&registry.plugin_set()).await {
        Ok(decision) => {
            println!("{}", serde_json::to_string_pretty(&decision)?);
            // The global manifest's decision log, if any, gets its line
            // before the process ends.
            if let Some(log) = registry.plugin_set().decision_log.clone() {
                log.flush_within(std::time::Duration::from_secs(10)).await;
            }
            return Ok(());
        }
        Err(refused) => refused,
    };
    // The host's doing, not the guards': nothing was decided, so no result.
    match &refused {
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
fn read_request(args: &CheckArgs) -> Result<DecideRequest> {
    let tenant = args
        .tenant
        .as_deref()
        .map(toolgate::TenantName::try_from)
        .transpose()
        .map_err(|e| bad(format!("--tenant: {e}")))?;
    let mut body = Map::new();
    body.insert("event".into(), read_json(&args.event, "event")?);
    if let Some(path) = &args.state {
        body.insert("state".into(), read_json(path, "state")?);
    }
    let mut request = DecideRequest::from_value(args.seam, Value::Object(body)).map_err(|e| {
        let state = match &args.state {
            Some(path) => format!(", the state from {}", source(path)),
            None => String::new(),
        };
        bad(format!(
            "{e} (the event from {}{state})",
            source(&args.event)
        ))
    })?;
    request.tenant = tenant;
    Ok(request)
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
