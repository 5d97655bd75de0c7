//! `toolgate serve`: the four seams over HTTP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use toolgate::Metrics;
use toolgate::TenantTokens;
use toolgate::server::{self, ServerConfig};

use crate::args::{CacheArgs, LoadArgs, PolicyArgs, open_registry, refuse_broken};
use crate::bad;

/// `toolgate serve`'s options.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// The plugin directory.
    #[arg(long, required_unless_present = "set", conflicts_with = "set")]
    plugins: Option<PathBuf>,
    /// Serve a policy set instead of a directory: `oci://registry/repo:tag`
    /// (pushed by `toolgate push --set`). The tag is resolved every
    /// --poll-ms; each new version is verified, loaded whole and swapped in
    /// at once, or refused (logged, counted) while the version serving
    /// keeps serving. With the registry down at start, the version served
    /// before (kept in the cache directory) serves; with none, the server
    /// waits for a first version before it listens.
    #[arg(long, value_name = "REFERENCE")]
    set: Option<String>,
    /// How often the policy set's tag is resolved, in milliseconds.
    #[arg(long, default_value_t = 10_000, requires = "set")]
    poll_ms: u64,
    /// A public key (PEM, ECDSA P-256; `toolgate keygen`'s NAME.pub) a
    /// policy set's version may be signed with; repeat for several (key
    /// rotation). With a key, a signature that is there must be good.
    #[arg(long, value_name = "FILE", requires = "set")]
    trusted_key: Vec<PathBuf>,
    /// Refuse every policy set version not signed by a --trusted-key.
    #[arg(long, requires = "trusted_key")]
    require_signatures: bool,
    /// Speak plain HTTP to the policy set's registry, not HTTPS (a registry
    /// on loopback is spoken to in plain HTTP without it).
    #[arg(long, requires = "set")]
    set_plain_http: bool,
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: String,
    /// A file holding the bearer token every endpoint but /healthz requires.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// A file of tenants' own tokens (TOML: `tenant = "sha256:<hex>"`, the
    /// SHA-256 of each token): a request with one calls the seams only, as
    /// its tenant. Needs --token-file (the operator's).
    #[arg(long)]
    tenant_tokens_file: Option<PathBuf>,
    /// Largest request body accepted, in KiB (larger: 413).
    #[arg(long, default_value_t = 1024)]
    max_body_kib: usize,
    /// Longest a request may take, in milliseconds (longer: 503).
    #[arg(long, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// Most connections open at once; more are closed at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Longest a request's head may take to arrive from its first byte, in
    /// milliseconds (slower: the connection is closed).
    #[arg(long, default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// Longest a connection with no request in progress stays open without
    /// a byte read or written, in milliseconds (kept-alive connections too).
    #[arg(long, default_value_t = 30_000)]
    idle_timeout_ms: u64,
    /// Longest POST /v1/reload waits for its reload, in milliseconds; a
    /// reload not done by then is answered 202 Accepted and goes on (its
    /// outcome shows in GET /v1/plugins and the log). Must be under
    /// --request-timeout-ms; 0 answers 202 unless the reload is done at once.
    #[arg(long, default_value_t = 10_000)]
    reload_wait_ms: u64,
    /// On SIGTERM, how long to keep serving while draining, in milliseconds:
    /// `/readyz` answers 503 `draining` at once (a load balancer takes the
    /// replica out), calls are still answered, each with `Connection:
    /// close`; then the listener closes and calls in flight finish (each
    /// within --request-timeout-ms). Set it above the load balancer's
    /// readiness check interval. SIGINT, or a second signal, skips the wait.
    #[arg(long, default_value_t = 0)]
    drain_ms: u64,
    /// Do not watch the plugin directory (reload only on SIGHUP or POST /v1/reload).
    #[arg(long)]
    no_watch: bool,
    /// How the log on standard error is written: `text` (`TIME  LEVEL
    /// target: message fields`) or `json` (one JSON object a line). Either
    /// way one event is one line: line breaks in what it quotes are escaped.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    pub(crate) log_format: LogFormatArg,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    load: LoadArgs,
}

/// `--log-format`'s values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum LogFormatArg {
    /// Text lines.
    Text,
    /// One JSON object a line.
    Json,
}

impl From<LogFormatArg> for toolgate::logging::LogFormat {
    fn from(format: LogFormatArg) -> Self {
        match format {
            LogFormatArg::Text => toolgate::logging::LogFormat::Text,
            LogFormatArg::Json => toolgate::logging::LogFormat::Json,
        }
    }
}

impl ServeArgs {
    /// The server's settings these flags describe, checked.
    fn config(&self) -> Result<ServerConfig> {
        let token = self.token_file.as_deref().map(read_token).transpose()?;
        let tenant_tokens = match &self.tenant_tokens_file {
            Some(path) => read_tenant_tokens(path, token.as_deref())?,
            None => TenantTokens::default(),
        };
        if self.max_body_kib == 0 {
            return Err(bad("--max-body-kib must be at least 1"));
        }
        if self.max_connections == 0 {
            return Err(bad("--max-connections must be at least 1"));
        }
        if self.reload_wait_ms >= self.request_timeout_ms.max(1) {
            return Err(bad(format!(
                "--reload-wait-ms ({}) must be less than --request-timeout-ms ({})",
                self.reload_wait_ms, self.request_timeout_ms
            )));
        }
        let millis = |ms: u64| std::time::Duration::from_millis(ms.max(1));
        Ok(ServerConfig {
            max_body_bytes: self.max_body_kib.saturating_mul(1024),
            request_timeout: millis(self.request_timeout_ms),
            token,
            tenant_tokens,
            max_connections: self.max_connections,
            header_read_timeout: millis(self.header_timeout_ms),
            idle_timeout: millis(self.idle_timeout_ms),
            reload_wait: std::time::Duration::from_millis(self.reload_wait_ms),
            draining: server::Draining::default(),
        })
    }
}

/// The operator's bearer token, read from `path`.
pub(crate) fn read_token(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("token file {}: {e}", path.display())))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(bad(format!("token file {} is empty", path.display())));
    }
    Ok(token)
}

/// The tenants' tokens, read from `path`; they need the operator's
/// `token`, and none may be it.
fn read_tenant_tokens(path: &Path, token: Option<&str>) -> Result<TenantTokens> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("tenant tokens file {}: {e}", path.display())))?;
    let tokens = TenantTokens::parse(&text)
        .map_err(|e| bad(format!("tenant tokens file {}: {e}", path.display())))?;
    match token {
        None => Err(bad(
            "--tenant-tokens-file needs --token-file: the plugin list, reloads and \
             metrics are the operator's",
        )),
        Some(t) if tokens.holds(t) => Err(bad(format!(
            "tenant tokens file {}: a tenant has the operator's token",
            path.display()
        ))),
        Some(_) => Ok(tokens),
    }
}

/// Whether the log is JSON (`--log-format json`): then `say!`'s lines are
/// JSON objects too, shaped as the log's.
static SAY_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Like `eprintln!`, but a closed standard error (the parent stopped
/// reading) never panics a running server; with `--log-format json`, one
/// JSON object (`timestamp`, `level`, `target`, `fields.message`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let line = if SAY_JSON.load(std::sync::atomic::Ordering::Relaxed) {
            serde_json::json!({
                "timestamp": toolgate::logging::now_rfc3339(),
                "level": "INFO",
                "fields": {"message": text},
                "target": "toolgate::serve",
            })
            .to_string()
        } else {
            text
        };
        let _ = writeln!(std::io::stderr(), "{line}");
    }};
}

/// Completes when the server is to stop accepting: at SIGINT at once; at
/// SIGTERM after `drain` spent draining (cut short by a second signal).
fn drain_on_signal(
    draining: server::Draining,
    drain: std::time::Duration,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let signal = server::shutdown_signal();
    async move {
        let stop = signal.await;
        // Installed after the first signal (which it would see too).
        let again = server::shutdown_signal();
        if stop == server::Stop::Interrupt || drain.is_zero() {
            say!("toolgate: shutting down: calls in flight finish, no new connection is accepted");
            return;
        }
        draining.start();
        say!(
            "toolgate: draining for {} ms (/readyz answers 503), then shutting down",
            drain.as_millis()
        );
        tokio::select! {
            () = tokio::time::sleep(drain) => {}
            _ = again => {}
        }
        say!("toolgate: shutting down: calls in flight finish, no new connection is accepted");
    }
}

/// The policy set's trust: the keys of `--trusted-key`, and
/// `--require-signatures`.
fn set_trust(args: &ServeArgs) -> Result<toolgate::remote::Trust> {
    let keys = args
        .trusted_key
        .iter()
        .map(|path| {
            let pem = std::fs::read_to_string(path)
                .map_err(|e| bad(format!("--trusted-key {}: {e}", path.display())))?;
            toolgate::remote::TrustedKey::from_pem(&pem)
                .map_err(|why| bad(format!("--trusted-key {}: {why}", path.display())))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(toolgate::remote::Trust {
        keys,
        required: args.require_signatures,
    })
}

/// Follows the policy set `reference`: waits, trying every --poll-ms,
/// until a first version (from the registry, or the one kept from before)
/// serves.
async fn follow_set(args: &ServeArgs, reference: &str) -> Result<Arc<toolgate::remote::SetSource>> {
    use toolgate::remote::{SetOptions, SetSource};
    let (engine, options) = crate::args::engine_for(&args.cache, &args.load, &args.policy)?;
    let poll = std::time::Duration::from_millis(args.poll_ms.max(1));
    let set_options = SetOptions {
        plain_http: args.set_plain_http,
        poll,
        trust: set_trust(args)?,
        policy: options.policy,
        load: options.load,
        cache_dir: options.cache.dir().map(Path::to_path_buf),
        ..SetOptions::new(reference)
    };
    loop {
        match SetSource::start(engine.clone(), set_options.clone()).await {
            Ok(source) => return Ok(Arc::new(source)),
            Err(e @ toolgate::Error::Set { .. })
                if e.to_string().contains("no version to serve") =>
            {
                say!(
                    "toolgate: {e}; trying again in {} ms (nothing is served until a version is)",
                    poll.as_millis()
                );
                tokio::time::sleep(poll).await;
            }
            Err(e) => return Err(bad(e.to_string())),
        }
    }
}

/// Runs `toolgate serve` until a shutdown signal.
///
/// With a plugin directory it listens at once: until the global guards
/// are in, every call is answered 503 not ready (`GET /readyz` says which
/// guard is compiling or snapshotting, and the log has a line as each
/// one's load starts and ends); a global manifest that fails stops the
/// server with the error, as before it listened.
pub(crate) async fn run(args: ServeArgs) -> Result<()> {
    SAY_JSON.store(
        matches!(args.log_format, LogFormatArg::Json),
        std::sync::atomic::Ordering::Relaxed,
    );
    let config = args.config()?;
    let (served, shown, set_polling): (server::Served, String, _) = match (&args.set, &args.plugins)
    {
        (Some(reference), _) => {
            let source = follow_set(&args, reference).await?;
            let status = source.status();
            let shown = format!("{}@{}", status.source, status.digest);
            let polling = Arc::clone(&source).spawn_polling();
            (source.into(), shown, Some(polling))
        }
        (None, Some(plugins)) => {
            // Nothing loaded yet: the global directory loads once the
            // server listens.
            let registry = Arc::new(
                open_registry(plugins, &args.cache, &args.load, &args.policy, true).await?,
            );
            (registry.into(), plugins.display().to_string(), None)
        }
        (None, None) => return Err(bad("name --plugins DIR or --set oci://registry/repo:tag")),
    };
    let registry = served.registry();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| bad(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener.local_addr()?;
    if let Some(warning) = server::exposure_warning(&addr, config.token.is_some()) {
        say!("toolgate: warning: {warning}");
    }
    // Hot reload: on any change in the directory tree, and on SIGHUP (a
    // policy set's versions are its own: it is polled instead).
    let directory = matches!(served, server::Served::Registry(_));
    let _watch = if args.no_watch || !directory {
        None
    } else {
        Some(Arc::clone(&registry).watch(toolgate::watch::DEFAULT_SETTLE)?)
    };
    #[cfg(unix)]
    let hup = if directory {
        Some(Arc::clone(&registry).on_sighup()?)
    } else {
        None
    };
    let metrics = Arc::new(Metrics::new());
    let router = server::router(served.clone(), Arc::clone(&metrics), config.clone());
    if directory {
        say!(
            "toolgate: listening at http://{addr} for {shown}, state in {}: not ready \
             (every call answered 503) until the global plugins are loaded (GET /readyz); \
             the `serving` line follows",
            registry.engine().state().shown(),
        );
    } else {
        serving_line(&registry, &shown, addr);
    }
    // The global directory, then each tenant, come online as each is
    // loaded; until then their calls are answered 503 (not ready). (A
    // policy set's version is loaded whole before it serves.) A global
    // directory refused whole stops the server.
    let (refused_tx, refused_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let loading = {
        let registry = Arc::clone(&registry);
        let (dir, shown) = (args.plugins.clone(), shown.clone());
        tokio::spawn(async move {
            let Some(dir) = dir.filter(|_| directory) else {
                return;
            };
            if let Err(e) = load_global(&registry, &dir).await {
                let _ = refused_tx.send(e);
                return;
            }
            serving_line(&registry, &shown, addr);
            if let Ok(report) = registry.load_pending().await {
                let set = registry.plugin_set();
                say!(
                    "toolgate: {} tenant(s) loaded ({} refused, {} load error(s))",
                    set.tenants.len(),
                    set.refused.len(),
                    report.errors.len()
                );
            }
        })
    };
    drop(registry);
    let refused = Arc::new(std::sync::Mutex::new(None));
    let shutdown = {
        let signal = drain_on_signal(
            config.draining.clone(),
            std::time::Duration::from_millis(args.drain_ms),
        );
        let refused = Arc::clone(&refused);
        async move {
            tokio::select! {
                () = signal => {}
                Ok(e) = refused_rx => {
                    if let Ok(mut r) = refused.lock() {
                        *r = Some(e);
                    }
                }
            }
        }
    };
    server::serve_with(listener, router, &config, Some(metrics), shutdown).await?;
    #[cfg(unix)]
    if let Some(hup) = hup {
        hup.abort();
    }
    loading.abort();
    if let Some(polling) = set_polling {
        polling.abort();
    }
    if let Some(e) = refused.lock().ok().and_then(|mut r| r.take()) {
        return Err(e);
    }
    // What the decision log still queues is written out, within bounds.
    if let Some(log) = served.registry().plugin_set().decision_log.clone() {
        log.flush_within(std::time::Duration::from_secs(10)).await;
    }
    say!("toolgate: shut down");
    Ok(())
}

/// The line `serve` prints once the global plugins serve.
fn serving_line(registry: &toolgate::Registry, shown: &str, addr: std::net::SocketAddr) {
    let set = registry.plugin_set();
    say!(
        "toolgate: serving {} global plugin(s), {} tenant(s) loading (GET /readyz), state in {}, \
         from {shown} on http://{addr}",
        set.global.plugins().len(),
        set.pending.len(),
        registry.engine().state().shown(),
    );
}

/// Loads the global directory of `dir`: `Err` when its manifest failed or
/// it was refused whole (then nothing is ever decided: the server stops).
async fn load_global(registry: &toolgate::Registry, dir: &Path) -> Result<()> {
    registry
        .load_global()
        .await
        .map_err(|e| bad(e.to_string()))?;
    refuse_broken(dir, registry, true)?;
    let set = registry.plugin_set();
    if set.starting {
        let why = set
            .errors
            .iter()
            .find(|e| {
                matches!(
                    e.kind,
                    toolgate::IssueKind::Manifest | toolgate::IssueKind::Directory
                )
            })
            .map_or_else(
                || format!("{}: the global directory did not load", dir.display()),
                |e| e.message.clone(),
            );
        return Err(bad(why));
    }
    Ok(())
}
