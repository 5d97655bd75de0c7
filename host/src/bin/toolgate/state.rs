//! `toolgate state get|clear`: the operator's view of guards' state, in a
//! Redis store directly or through a running `toolgate serve`'s
//! `/v1/state` (the only way to a memory store, which lives in its
//! process).

use std::path::PathBuf;

use anyhow::Result;
use serde_json::{Value, json};
use toolgate::StateBackend;
use toolgate::state::{StateFilter, StateStore};

use crate::bad;
use crate::serve::read_token;

/// `toolgate state`'s options.
#[derive(clap::Args)]
pub(crate) struct StateArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Print the keys the filter selects, as JSON (`{"entries": [...]}`).
    Get(Target),
    /// Remove the keys the filter selects; print how many (`{"removed": N}`).
    Clear(Target),
}

/// Which state, and where.
#[derive(clap::Args)]
struct Target {
    /// The tenant whose guards' state it is (`""`: calls without a tenant).
    #[arg(long)]
    tenant: String,
    /// Only this plugin's scopes.
    #[arg(long)]
    plugin: Option<String>,
    /// Only this run's scope (the tenant scope is then left out).
    #[arg(long)]
    run: Option<String>,
    /// The store itself: the `redis://...` URL `serve --state` was given.
    #[arg(long, required_unless_present = "server", conflicts_with = "server")]
    state: Option<StateBackend>,
    /// A running `toolgate serve` (`http://host:port`), asked through its
    /// `/v1/state`.
    #[arg(long)]
    server: Option<String>,
    /// The server's operator token (its `--token-file`).
    #[arg(long, requires = "server")]
    token_file: Option<PathBuf>,
}

impl Target {
    fn filter(&self) -> StateFilter {
        StateFilter {
            tenant: self.tenant.clone(),
            plugin: self.plugin.clone(),
            run: self.run.clone(),
        }
    }
}

/// Runs `toolgate state`.
pub(crate) async fn run(args: StateArgs) -> Result<()> {
    let (target, clear) = match &args.action {
        Action::Get(t) => (t, false),
        Action::Clear(t) => (t, true),
    };
    let answer = match (&target.state, &target.server) {
        (Some(backend), _) => direct(backend, &target.filter(), clear).await?,
        (None, Some(server)) => remote(server, target, clear).await?,
        (None, None) => return Err(bad("pass --state URL or --server URL")),
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

async fn direct(backend: &StateBackend, filter: &StateFilter, clear: bool) -> Result<Value> {
    let StateBackend::Redis { url } = backend else {
        return Err(bad(
            "a memory store lives in its `toolgate serve` process: pass --server URL",
        ));
    };
    let store = StateStore::redis(url)?;
    Ok(if clear {
        json!({"removed": store.clear(filter).await?})
    } else {
        json!({"entries": store.entries(filter).await?})
    })
}

async fn remote(server: &str, target: &Target, clear: bool) -> Result<Value> {
    let url = format!("{}/v1/state", server.trim_end_matches('/'));
    let client = reqwest::Client::new();
    let mut request = if clear {
        client.delete(&url)
    } else {
        client.get(&url)
    };
    let mut query = vec![("tenant", target.tenant.as_str())];
    query.extend(target.plugin.as_deref().map(|p| ("plugin", p)));
    query.extend(target.run.as_deref().map(|r| ("run", r)));
    request = request.query(&query);
    if let Some(path) = &target.token_file {
        request = request.bearer_auth(read_token(path)?);
    }
    let response = request
        .send()
        .await
        .map_err(|e| bad(format!("{url}: {e}")))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| bad(format!("{url}: {e}")))?;
    if !status.is_success() {
        return Err(bad(format!("{url}: {status}: {}", body.trim())));
    }
    serde_json::from_str(&body).map_err(|e| bad(format!("{url}: not JSON: {e}")))
}
