//! `toolgate list`: what a plugin directory loads, as JSON.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::json;

use crate::args::{CacheArgs, LoadArgs, PolicyArgs, open_registry};

/// `toolgate list`'s options.
#[derive(clap::Args)]
pub(crate) struct ListArgs {
    /// The plugin directory.
    #[arg(long)]
    plugins: PathBuf,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    load: LoadArgs,
}

/// Runs `toolgate list`.
pub(crate) async fn run(args: ListArgs) -> Result<()> {
    list(&args.plugins, &args.cache, &args.load).await
}

async fn list(dir: &Path, cache: &CacheArgs, load: &LoadArgs) -> Result<()> {
    let registry = open_registry(dir, cache, load, &PolicyArgs::default(), false)
        .await
        .with_context(|| format!("listing {}", dir.display()))?;
    let set = registry.plugin_set();
    let description = set.describe();
    let errors: Vec<&str> = description
        .errors
        .iter()
        .map(|e| e.message.as_str())
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "generation": description.generation,
            "global": description.global,
            "tenants": description.tenants,
            "errors": errors,
            "refused": description.refused,
            "policy": description.policy,
            "shares": description.shares,
            "cache": {
                "dir": registry.cache().dir(),
                "stats": registry.cache_stats(),
                "functions": registry.cache().function_stats(),
            },
            "compiles": registry.compile_stats(),
        }))?
    );
    Ok(())
}
