//! `toolgate push`: publishes a component as an OCI artifact and prints
//! the reference pinned by its digest, what a manifest's `oci` key takes.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::bad;

/// `toolgate push`'s options.
#[derive(clap::Args)]
pub(crate) struct PushArgs {
    /// The component (*.wasm) to push.
    file: PathBuf,
    /// Where to: `oci://registry/repo:tag` (the tag defaults to `latest`).
    reference: String,
    /// Speak plain HTTP to the registry, not HTTPS. A registry on loopback
    /// (localhost, 127.0.0.0/8, ::1) is spoken to in plain HTTP without it.
    #[arg(long)]
    plain_http: bool,
    /// The registry user, when it wants credentials; the password is read from
    /// $TOOLGATE_REGISTRY_PASSWORD (never from the command line).
    #[arg(long)]
    username: Option<String>,
}

/// Runs `toolgate push`: prints `registry/repo:tag@sha256:<hex>`.
pub(crate) async fn run(args: PushArgs) -> Result<()> {
    let Some(reference) = args.reference.strip_prefix("oci://") else {
        return Err(bad(format!(
            "{:?}: name the registry as oci://registry/repo:tag",
            args.reference
        )));
    };
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    if !wasmparser::Parser::is_component(&bytes) {
        return Err(bad(format!(
            "{}: is not a WebAssembly component",
            args.file.display()
        )));
    }
    let credentials = match args.username {
        None => None,
        Some(user) => {
            let password = std::env::var("TOOLGATE_REGISTRY_PASSWORD")
                .map_err(|_| bad("--username needs the password in $TOOLGATE_REGISTRY_PASSWORD"))?;
            Some((user, password))
        }
    };
    let options = toolgate::remote::PushOptions {
        plain_http: args.plain_http,
        credentials,
    };
    let pinned = toolgate::remote::push(&bytes, reference, &options).await?;
    println!("{pinned}");
    Ok(())
}
