//! `toolgate check`: one event through a directory's chain.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Value, json};
use toolgate::{Event, Seam};

use crate::args::{CacheArgs, LoadArgs, open};
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

/// Runs `toolgate check`: prints the decision; exits 3 when the host could
/// not decide.
pub(crate) async fn run(args: CheckArgs) -> Result<()> {
    let CheckArgs {
        plugins,
        seam,
        event,
        state,
        tenant,
        cache,
        load,
    } = args;
    if !plugins.is_dir() {
        return Err(bad(format!(
            "plugin directory {} does not exist",
            plugins.display()
        )));
    }
    let event = read_json(&event, "event")?;
    let event = Event::from_json(seam, event)
        .map_err(|e| bad(format!("event is not a valid {seam} event: {e}")))?;
    let state = match state {
        Some(path) => read_json(&path, "state")?,
        None => json!({}),
    };
    if !state.is_object() {
        return Err(bad("state must be a JSON object"));
    }
    let tenant = tenant
        .as_deref()
        .map(toolgate::TenantName::try_from)
        .transpose()
        .map_err(|e| bad(e.to_string()))?;
    let registry = open(&plugins, &cache, &load).await?;
    let decision = registry
        .plugin_set()
        .chain(tenant.as_deref())
        .decide(&event, &state)
        .await;
    println!("{}", serde_json::to_string_pretty(&decision)?);
    if let Some(entry) = decision.unavailable() {
        // The host's doing, not the guards': nothing was decided.
        eprintln!(
            "toolgate: not decided: guard `{}` could not be run in time ({}): {}",
            entry.plugin,
            entry.fault.map_or("overloaded", toolgate::Fault::as_str),
            entry.detail.as_deref().unwrap_or("")
        );
        std::process::exit(3);
    }
    Ok(())
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
    serde_json::from_str(&text).map_err(|e| {
        let source = if path == Path::new("-") {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        bad(format!("{what} in {source} is not valid JSON: {e}"))
    })
}
