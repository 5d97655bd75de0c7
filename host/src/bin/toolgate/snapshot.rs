//! `toolgate snapshot`: a guard pre-initialised into a new component.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use toolgate::{Engine, EngineConfig};

use crate::bad;
use crate::replay::read_decisions;

/// `toolgate snapshot`'s options.
#[derive(clap::Args)]
pub(crate) struct SnapshotArgs {
    /// The guard component.
    component: PathBuf,
    /// Where to write the snapshot. Default: replace the component (atomically).
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// The warm-up calls, as a JSON-lines trace like `replay`'s (`{seam, event,
    /// state?}`; the tenant is ignored). Default: one harmless `run_query` per seam.
    #[arg(long)]
    warm_up: Option<PathBuf>,
    /// The guard's config during the warm-up, as JSON (what its manifest's
    /// `[plugin.config]` will be: a guard that keeps its parsed config in
    /// memory keeps this one). Default: `{}`.
    #[arg(long, default_value = "{}")]
    config: String,
}

/// Runs `toolgate snapshot`.
pub(crate) async fn run(args: SnapshotArgs) -> Result<()> {
    let config: serde_json::Value =
        serde_json::from_str(&args.config).map_err(|e| bad(format!("--config: not JSON: {e}")))?;
    if !config.is_object() {
        return Err(bad("--config: must be a JSON object"));
    }
    snapshot_file(&args.component, args.out, args.warm_up.as_deref(), &config).await
}

/// `toolgate snapshot`: pre-initialises `input` into `out` (default: in
/// place) after the calls of the `warm_up` trace (default: one per seam)
/// with `config`,
/// written through a temporary file and a rename so a watching host never
/// loads half a component.
pub(crate) async fn snapshot_file(
    input: &Path,
    out: Option<PathBuf>,
    warm_up: Option<&Path>,
    config: &serde_json::Value,
) -> Result<()> {
    let warm_up = match warm_up {
        Some(file) => read_decisions(file)?
            .into_iter()
            .map(|(_, r)| (r.event, r.state))
            .collect(),
        None => toolgate::snapshot::default_warm_up(),
    };
    let bytes =
        std::fs::read(input).map_err(|e| bad(format!("component {}: {e}", input.display())))?;
    let engine = Engine::new(EngineConfig::default())?;
    let snapshot = toolgate::snapshot::snapshot(&engine, input, &bytes, &warm_up, config).await?;
    let out = out.unwrap_or_else(|| input.to_path_buf());
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::fs::write(tmp.path(), &snapshot)
        .with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.persist(&out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "snapshot {} ({} -> {} bytes)",
        out.display(),
        bytes.len(),
        snapshot.len()
    );
    Ok(())
}
