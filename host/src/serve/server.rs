//! `toolgate serve`: the four seams over HTTP, for agents written in other
//! languages (the symfonic adapter in `adapters/python` speaks to it).
//!
//! Long on purpose (about 760 lines of code, 100 of tests): every route
//! and its handler, so the service's answers (status, headers, body) can
//! be read against docs/service.md in one file.
//!
//! | method | path | answer |
//! |---|---|---|
//! | POST | `/v1/{routing,rewrite,steering,result,response}` | exactly the value the Python hook returns; with `?trace=1`, `{"result": ..., "trace": [...]}` |
//! | GET | `/healthz` | `{"status": "ok", "generation": N}` (never needs the token) |
//! | GET | `/readyz` | 200 `{"status": "ready", ...}` once the global directory and every tenant's are loaded; before the global directory is, 503 `{"status": "starting", "reason": "...", "loading": [{"plugin", "step", "for_ms"}]}`; then, while tenants load, 503 `{"status": "loading", "pending": N, "tenants": [...]}`; both with `Retry-After` (never needs the token; the tenants' and plugins' names only when no token is configured) |
//! | GET, DELETE | `/v1/state?tenant=T[&plugin=P][&run=R]` | the guards' state the filter selects (`{"entries": [...]}`: tenant, plugin, run, key, value, ttl_ms), or removes it (`{"removed": N}`); operator only |
//! | GET | `/v1/plugins` | the [`Description`](crate::serve::describe::Description) of what is loaded: every global plugin (with `tenants` when restricted to some), each tenant's own chain (each plugin with its `health`: quarantine state), load errors, the operator's `policy` and each account's `shares` in use |
//! | POST | `/v1/reload` | re-reads the plugin directory; the [`ReloadReport`] (200) when done within [`ServerConfig::reload_wait`], else 202 and what is still loading (see [Reloads](#reloads)) |
//! | GET | `/metrics` | Prometheus metrics (OpenMetrics text; see [`crate::serve::metrics`]) |
//!
//! A seam request's body is `{"event": {...}, "state"?: {...}, "tenant"?: "t"}`.
//! Every POST must say `Content-Type: application/json` (parameters such as
//! `charset=utf-8` allowed): a web page can make a browser send a
//! cross-site `text/plain` or form POST without asking, but not a JSON one,
//! so without a token this is what keeps a page the operator visits from
//! calling the seams or `/v1/reload`.
//!
//! Errors are JSON `{"error": "..."}`: 400 for a body that is not JSON, an
//! unknown or mistyped field (the message names it), a state that is not
//! an object or an invalid tenant name; 401 without the bearer token when
//! one is configured; 403 for a tenant's token ([`ServerConfig::tenant_tokens`])
//! on anything but the seams, or calling as another tenant; 404 for an
//! unknown seam or path and 405 for a wrong method (both, like every path
//! but `/healthz`, only after the token is checked: no route discovery
//! without one); 413 for a body over the limit, at once when its
//! `Content-Length` says so (the connection is closed, the body never
//! read); 415 for a POST that is not `application/json`; 429 with
//! `Retry-After` when the caller's account has no place for the request;
//! 503 with `Retry-After` when the request is not decided for the host's
//! reasons — a tenant whose guards are not serving yet (its directory
//! still loading, or its share not admitted), a guard the host could not
//! run in time (docs/failures.md) — and when a request overruns the
//! request timeout (counted in `http_request_timeouts_total`); 500 if a
//! handler panicked (the server keeps serving). A request hyper cannot parse gets 400 (malformed), 414
//! (target too long) or 431 (head too large) with the same one-line JSON
//! body, and an HTTP/2 connection (prior knowledge) a GOAWAY `HTTP_1_1_REQUIRED`
//! naming the reason.
//!
//! Guard calls run inline in the handler: each is bounded by its plugin's
//! fuel and deadline, so a request's time is bounded by its chain's.
//!
//! # Reloads
//!
//! `POST /v1/reload` runs the reload as its own task: a client that gives
//! up, or the request timeout, never cuts it half-way (no load in flight is
//! cancelled, no compile killed). The handler waits for it at most
//! [`ServerConfig::reload_wait`]; done by then, the answer is 200 with the
//! [`ReloadReport`] (500 if the reload failed). Not done, it is **202
//! Accepted** with
//! `{"status": "reloading", "loading": {"global": bool, "tenants": [...]},
//! "generation": N, "waited_ms": N, "result": "..."}`: the directories
//! being loaded at that moment ([`Registry::loading`]), the generation
//! serving, and where the outcome will appear (`GET /v1/plugins`, the log).
//! Such answers are counted in `http_reloads_accepted_total`.
//!
//! At most two reload tasks are ever started by requests: the one running
//! and one to start when it is done. A request arriving while a reload
//! runs starts that next one; any further request joins it (and is
//! answered with its outcome). Every request's answer therefore comes from
//! a reload that read the directory after the request arrived.
//!
//! Connections ([`serve_with`]): at most [`ServerConfig::max_connections`]
//! open at once (more are closed at once), a request head must arrive
//! within [`ServerConfig::header_read_timeout`] of its first byte, and a
//! connection with nothing in progress is closed after
//! [`ServerConfig::idle_timeout`] without a byte either way.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::json;
use tokio::sync::watch;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::Error;
use crate::event::Seam;
use crate::load::registry::{Registry, ReloadReport};
use crate::load::remote::set::{SetSource, SetStatus};
use crate::serve::metrics::{self, Metrics};
use crate::serve::request::{DecideRequest, NotDecided};
use crate::serve::tokens::{Caller, TenantTokens, same_digest, sha256};

/// How the service answers. Every field documents its default.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The operator's bearer token, which every endpoint but `/healthz`
    /// requires (`Authorization: Bearer <token>`). Default: none (no auth).
    pub token: Option<String>,
    /// Each tenant's own bearer token: a request with one calls the seams
    /// only, always as its tenant (see `crate::serve::tokens`). With tenant
    /// tokens every request but `/healthz` needs a token, and the plugin
    /// list, reloads and metrics need the operator's. Default: none.
    pub tenant_tokens: TenantTokens,
    /// Largest request body accepted, in bytes; a larger one gets 413.
    /// Default: 1 MiB.
    pub max_body_bytes: usize,
    /// Longest a request may take before it is answered 503. Guard calls
    /// are bounded by their own deadlines; this bounds a whole request
    /// (a long chain; a reload is answered 202 after `reload_wait`, see
    /// Reloads). Default: 30 s.
    pub request_timeout: Duration,
    /// Most connections open at once; a connection accepted beyond it is
    /// closed at once (never queued). Default: 1024.
    pub max_connections: usize,
    /// Longest a request's head (request line and headers) may take to
    /// arrive, from its first byte; a slower one closes the connection.
    /// Default: 10 s.
    pub header_read_timeout: Duration,
    /// Longest a connection with no request in progress may stay open
    /// without a byte read or written: a new connection that sends
    /// nothing, a kept-alive one between requests, a client that stops
    /// reading its answer. Default: 30 s.
    pub idle_timeout: Duration,
    /// Longest `POST /v1/reload` waits for its reload before answering 202
    /// Accepted (the reload goes on; see Reloads). Keep it
    /// under `request_timeout`: otherwise the request timeout answers
    /// first (503), the reload still going on. Default: 10 s.
    pub reload_wait: Duration,
    /// Whether the server is draining: once [`Draining::start`] is called
    /// `/readyz` answers 503 `{"status": "draining"}` (so a load balancer
    /// takes the replica out) and every answer carries `Connection:
    /// close`, while calls are still served. Default: not draining.
    pub draining: Draining,
}

/// A server's draining switch (see [`ServerConfig::draining`]): clones
/// share one switch, which only ever turns on.
#[derive(Clone, Debug, Default)]
pub struct Draining(Arc<std::sync::atomic::AtomicBool>);

impl Draining {
    /// Turns draining on, for good.
    pub fn start(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether draining has started.
    pub fn is_draining(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            token: None,
            tenant_tokens: TenantTokens::default(),
            max_body_bytes: 1 << 20,
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            reload_wait: Duration::from_secs(10),
            draining: Draining::default(),
        }
    }
}

/// What a server serves: one registry (a plugin directory), or a policy
/// set's, which a new version replaces whole (`serve --set`).
#[derive(Clone)]
pub enum Served {
    /// A registry of its own (a plugin directory).
    Registry(Arc<Registry>),
    /// The registry of the version of a policy set serving now.
    Set(Arc<SetSource>),
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Served::Registry(r) => write!(f, "Served::Registry({})", r.root().display()),
            Served::Set(s) => write!(f, "Served::Set({s:?})"),
        }
    }
}

impl From<Arc<Registry>> for Served {
    fn from(registry: Arc<Registry>) -> Served {
        Served::Registry(registry)
    }
}

impl From<Arc<SetSource>> for Served {
    fn from(set: Arc<SetSource>) -> Served {
        Served::Set(set)
    }
}

impl Served {
    /// The registry serving now: hold it for one request.
    pub fn registry(&self) -> Arc<Registry> {
        match self {
            Served::Registry(r) => Arc::clone(r),
            Served::Set(s) => s.registry(),
        }
    }

    /// The policy set's status, when a set is served.
    pub fn set_status(&self) -> Option<SetStatus> {
        match self {
            Served::Registry(_) => None,
            Served::Set(s) => Some(s.status()),
        }
    }
}

impl App {
    /// The registry serving now.
    fn registry(&self) -> Arc<Registry> {
        self.served.registry()
    }
}

struct App {
    served: Served,
    metrics: Arc<Metrics>,
    token_digest: Option<[u8; 32]>,
    max_body_bytes: usize,
    tenant_tokens: TenantTokens,
    request_timeout: Duration,
    reload_wait: Duration,
    reloads: Arc<Reloads>,
    draining: Draining,
}

type Shared = Arc<App>;

/// An error answered as `{"error": message}` with `status`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, axum::Json(json!({ "error": self.message }))).into_response();
        if matches!(
            self.status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Builds the service's router over `served` (an `Arc<Registry>`, or a
/// policy set's [`SetSource`]), recording into `metrics`.
/// Serve it with [`serve`], or call it directly (`tower::ServiceExt::oneshot`).
pub fn router(served: impl Into<Served>, metrics: Arc<Metrics>, config: ServerConfig) -> Router {
    let app: Shared = Arc::new(App {
        served: served.into(),
        metrics,
        token_digest: config.token.as_deref().map(sha256),
        max_body_bytes: config.max_body_bytes,
        tenant_tokens: config.tenant_tokens,
        request_timeout: config.request_timeout,
        reload_wait: config.reload_wait,
        reloads: Arc::default(),
        draining: config.draining,
    });
    let operator_only = Router::new()
        .route("/v1/plugins", get(plugins))
        .route("/v1/reload", post(reload))
        .route("/v1/state", get(state_get).delete(state_clear))
        .route("/metrics", get(metrics_text))
        .route_layer(middleware::from_fn(operator_only));
    // Everything but `/healthz` is behind the token, unknown paths and
    // wrong methods included: without a token nothing tells which
    // routes exist.
    let authorized = Router::new()
        .merge(operator_only)
        .route("/v1/{seam}", post(decide))
        .route("/v1/observe", post(observe))
        .route_layer(middleware::from_fn(require_json))
        .route("/v1/hooks", get(hooks))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&app), authorize));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .method_not_allowed_fallback(method_not_allowed)
        .merge(authorized)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            declared_length,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), timeout))
        .layer(CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), count))
        .with_state(app)
}

/// Serves `router` on `listener` with the default connection limits of
/// [`ServerConfig`] until `shutdown` completes, then stops accepting and
/// waits for requests in flight to finish. See [`serve_with`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, &ServerConfig::default(), None, shutdown).await
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting, lets each connection finish the request it is handling, and
/// returns once all are closed.
///
/// The connection limits of `config` apply (`max_connections`,
/// `header_read_timeout`, `idle_timeout`); its other fields are the
/// router's (pass the same config to [`router`]). With `metrics`, open,
/// refused and timed-out connections are counted there.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    config: &ServerConfig,
    metrics: Option<Arc<Metrics>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = crate::serve::connections::ConnectionLimits {
        max_connections: config.max_connections,
        header_read_timeout: config.header_read_timeout,
        idle_timeout: config.idle_timeout,
    };
    crate::serve::connections::serve_connections(listener, router, limits, metrics, shutdown).await
}

/// The signal that asked the server to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT (Ctrl-C): someone at a terminal.
    Interrupt,
    /// SIGTERM: a supervisor (systemd, Kubernetes) stopping the process.
    Terminate,
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM, with which.
///
/// The handlers are installed when this is called (it must be called on a
/// Tokio runtime), not when the future is first polled: a signal that
/// arrives while the server is busy before it first looks at the future is
/// still a graceful shutdown, never the default action.
#[cfg(unix)]
pub fn shutdown_signal() -> impl Future<Output = Stop> + Send + 'static {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    async move {
        tokio::select! {
            () = recv(&mut term) => Stop::Terminate,
            () = recv(&mut int) => Stop::Interrupt,
        }
    }
}

/// Completes on Ctrl-C.
#[cfg(not(unix))]
pub fn shutdown_signal() -> impl Future<Output = Stop> + Send + 'static {
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        Stop::Interrupt
    }
}

/// The warning to print when serving on `addr` exposes the guards beyond
/// this machine without a token; `None` when it does not.
pub fn exposure_warning(addr: &SocketAddr, has_token: bool) -> Option<String> {
    if addr.ip().is_loopback() || has_token {
        return None;
    }
    Some(format!(
        "listening on non-loopback address {addr} without --token-file: anyone who can reach it \
         can query and reload the guards"
    ))
}

// ---- middleware -------------------------------------------------------

/// Finds who the request comes from by its bearer token ([`Caller`], put
/// in the request's extensions): the operator's token, a tenant's, or no
/// token where none is configured; anything else is 401.
async fn authorize(State(app): State<Shared>, mut request: Request, next: Next) -> Response {
    let caller = if app.token_digest.is_none() && app.tenant_tokens.is_empty() {
        Caller::Operator
    } else {
        let offered = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let Some(offered) = offered else {
            return unauthorized("missing bearer token (Authorization: Bearer <token>)");
        };
        let digest = sha256(offered);
        match (&app.token_digest, app.tenant_tokens.tenant(&digest)) {
            (Some(expected), _) if same_digest(expected, &digest) => Caller::Operator,
            (_, Some(tenant)) => Caller::Tenant(tenant.clone()),
            _ => return unauthorized("invalid bearer token"),
        }
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Refuses a tenant's token (403) on the operator's endpoints.
async fn operator_only(request: Request, next: Next) -> Response {
    match request.extensions().get::<Caller>() {
        Some(Caller::Tenant(tenant)) => ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "tenant `{tenant}`'s token may call the seams only (POST /v1/{{seam}}); {} {} \
                 needs the operator's token",
                request.method(),
                request.uri().path()
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Answers 413 at once to a request whose `Content-Length` is over the
/// body limit, without waiting for a body that may never come (and closes
/// the connection: the body is not read).
async fn declared_length(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(length) if length > app.max_body_bytes as u64 => {
            let mut response =
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, too_large(app.max_body_bytes))
                    .into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
        _ => next.run(request).await,
    }
}

/// The message of a 413.
fn too_large(limit: usize) -> String {
    format!("request body is larger than the limit of {limit} bytes (--max-body-kib)")
}

/// Refuses a POST whose body is not declared `application/json` (415).
async fn require_json(request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    match request.headers().get(header::CONTENT_TYPE) {
        Some(value) if is_json(value) => next.run(request).await,
        Some(value) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "POST bodies must be sent with Content-Type: application/json, not {:?}",
                String::from_utf8_lossy(value.as_bytes())
            ),
        )
        .into_response(),
        None => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "POST requests must say Content-Type: application/json",
        )
        .into_response(),
    }
}

/// Whether a `Content-Type` value is `application/json`, with any
/// parameters (`; charset=utf-8`), case-insensitively.
fn is_json(value: &HeaderValue) -> bool {
    let Ok(text) = value.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

async fn timeout(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let (endpoint, seam) = endpoint_of(&request);
    match tokio::time::timeout(app.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(
                endpoint,
                "request cut by the request timeout ({} ms)",
                app.request_timeout.as_millis()
            );
            app.metrics.record_request_timeout(&endpoint, seam);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "request timed out after {} ms",
                    app.request_timeout.as_millis()
                ),
            )
            .into_response()
        }
    }
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    tracing::error!("a request handler panicked; answered 500");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}

/// Counts every answered request by endpoint (the route, with a known
/// seam spelt out) and status.
async fn count(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let (endpoint, _) = endpoint_of(&request);
    let mut response = next.run(request).await;
    // A draining server sends its clients elsewhere: each connection
    // closes after the answer in hand.
    if app.draining.is_draining() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    app.metrics
        .record_request(&endpoint, response.status().as_u16(), started.elapsed());
    response
}

/// The endpoint label of a request (its route, with a known seam spelt
/// out), and the seam it calls, if any.
fn endpoint_of(request: &Request) -> (String, Option<Seam>) {
    match request.extensions().get::<MatchedPath>() {
        Some(m) if m.as_str() == "/v1/{seam}" => {
            let seam = request.uri().path().trim_start_matches("/v1/");
            match seam.parse::<Seam>() {
                Ok(seam) => (format!("/v1/{seam}"), Some(seam)),
                Err(_) => (m.as_str().to_string(), None),
            }
        }
        Some(m) => (m.as_str().to_string(), None),
        None => ("unmatched".to_string(), None),
    }
}

// ---- handlers ---------------------------------------------------------

async fn healthz(State(app): State<Shared>) -> Response {
    axum::Json(json!({"status": "ok", "generation": app.registry().plugin_set().generation}))
        .into_response()
}

/// 200 once every tenant with a directory is loaded, else 503 with the
/// tenants still loading; 503 `draining` once the server drains; never
/// needs the token.
async fn readyz(State(app): State<Shared>) -> Response {
    if app.draining.is_draining() {
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "draining"})),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    let registry = app.registry();
    let set = registry.plugin_set();
    let pending: Vec<&str> = set.pending.iter().map(String::as_str).collect();
    let (status, shown) = match (set.starting, pending.is_empty()) {
        (true, _) => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
        (false, false) => (StatusCode::SERVICE_UNAVAILABLE, "loading"),
        (false, true) => (StatusCode::OK, "ready"),
    };
    // Tenant and plugin names are the operator's to see: with a token,
    // only how many and what step (the names are in `GET /v1/plugins`).
    let open = app.token_digest.is_none() && app.tenant_tokens.is_empty();
    let loading: Vec<serde_json::Value> = registry
        .loading_plugins()
        .into_iter()
        .map(|p| match open {
            true => json!({"plugin": p.plugin, "step": p.step, "for_ms": p.for_ms}),
            false => json!({"step": p.step, "for_ms": p.for_ms}),
        })
        .collect();
    let mut body = json!({
        "status": shown,
        "generation": set.generation,
        "pending": pending.len(),
        "tenants": if open { json!(pending) } else { json!(null) },
        "loading": loading,
    });
    if set.starting {
        body["reason"] = json!(match loading.is_empty() {
            false => "the global plugins are loading: every call is answered 503 until they are in",
            true => "the global plugins are not loaded: every call is answered 503",
        });
    }
    let mut response = (status, axum::Json(body)).into_response();
    if status != StatusCode::OK {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {}", request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    // `/v1/{seam}` matches any name: a name that is no seam is no path.
    if let Some(seam) = request.uri().path().strip_prefix("/v1/")
        && request
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|m| m.as_str() == "/v1/{seam}")
        && seam.parse::<Seam>().is_err()
    {
        return not_found(request).await;
    }
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "method {} not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

async fn decide(
    State(app): State<Shared>,
    caller: Option<Extension<Caller>>,
    Path(seam): Path<String>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let seam: Seam = seam
        .parse()
        .map_err(|e: String| ApiError::new(StatusCode::NOT_FOUND, e))?;
    let with_trace = wants_trace(query.as_deref())?;
    let body = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(app.max_body_bytes)
        } else {
            format!("cannot read the request body: {}", rejection.body_text())
        };
        ApiError::new(status, message)
    })?;
    let mut request = DecideRequest::parse(seam, &body).map_err(ApiError::bad_request)?;
    if let Some(Extension(Caller::Tenant(own))) = caller {
        match &request.tenant {
            Some(named) if *named != own => {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!("tenant `{own}`'s token cannot call as tenant `{named}`"),
                ));
            }
            _ => request.tenant = Some(own),
        }
    }
    let metrics = Arc::clone(&app.metrics);
    let decision = request
        .decide_answer_first(&app.registry().plugin_set(), move |full| {
            metrics.record_shadow(&full);
        })
        .await
        .map_err(|refused| {
            // Counted (per account: `share_busy`; per guard: its
            // `unavailable` outcomes); one line per refusal would let a
            // flood flood the log too.
            tracing::debug!("request not decided: {refused}");
            let status = match &refused {
                NotDecided::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
                NotDecided::NotReady(_) => StatusCode::SERVICE_UNAVAILABLE,
                NotDecided::Unavailable { trace, .. } => {
                    app.metrics.record_undecided(seam, trace);
                    StatusCode::SERVICE_UNAVAILABLE
                }
            };
            ApiError::new(status, refused.to_string())
        })?;
    app.metrics.record_decision(&decision);
    let body = decision.answer(with_trace);
    Ok(axum::Json(body).into_response())
}

/// `POST /v1/observe`: `{"hook": "on_llm_end", "event": {...}, "tenant"?:
/// "t"}`, a lifecycle event queued for the guards that observe its hook;
/// answered 202 at once (`{"observed": "queued" | "unobserved" |
/// "dropped"}`), before any guard runs. A decision for the same run that
/// arrives after the answer waits for it (`docs/lifecycle.md`, "Lifecycle
/// events").
async fn observe(
    State(app): State<Shared>,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            too_large(app.max_body_bytes)
        } else {
            format!("cannot read the request body: {}", rejection.body_text())
        };
        ApiError::new(status, message)
    })?;
    let request =
        crate::serve::observe::ObserveRequest::parse(&body).map_err(ApiError::bad_request)?;
    let tenant = match (caller, request.tenant) {
        (Some(Extension(Caller::Tenant(own))), Some(named)) if named != own => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("tenant `{own}`'s token cannot call as tenant `{named}`"),
            ));
        }
        (Some(Extension(Caller::Tenant(own))), _) => Some(own),
        (_, named) => named,
    };
    let observed = app
        .registry()
        .plugin_set()
        .observe(tenant.as_deref(), &request.event)
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let body = serde_json::json!({ "observed": observed.as_str() });
    Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
}

/// `GET /v1/hooks`: `{"hooks": [...], "response": bool, "generation": n}`,
/// the lifecycle hooks some loaded guard (any tenant) observes now and
/// whether some guard answers the response seam: what an adapter offers
/// its agent ([`crate::serve::observe::hooks_body`]).
/// The hooks worth sending; 503 not ready while the global directory
/// has not loaded (an empty list would tell a client to send nothing).
async fn hooks(State(app): State<Shared>) -> Result<Response, ApiError> {
    let set = app.registry().plugin_set();
    set.ready(None)
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    Ok(axum::Json(crate::serve::observe::hooks_body(&set)).into_response())
}

fn wants_trace(query: Option<&str>) -> Result<bool, ApiError> {
    let mut trace = false;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "trace" {
            trace = match value {
                "" | "1" | "true" => true,
                "0" | "false" => false,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "query parameter `trace` must be 1, true, 0 or false, not {other:?}"
                    )));
                }
            };
        }
    }
    Ok(trace)
}

async fn plugins(State(app): State<Shared>) -> Response {
    let set = app.registry().plugin_set();
    let described = set.describe();
    match app.served.set_status() {
        None => axum::Json(described).into_response(),
        // A policy set's source, version and generation beside what it
        // loaded: how an operator sees a fleet converge.
        Some(status) => {
            let mut body = serde_json::to_value(&described).unwrap_or_default();
            if let Some(fields) = body.as_object_mut() {
                fields.insert("set".into(), json!(status));
            }
            axum::Json(body).into_response()
        }
    }
}

/// The query of `/v1/state`: `tenant` (required; `""` for calls without
/// one), `plugin` and `run` (optional).
#[derive(serde::Deserialize)]
struct StateQuery {
    tenant: Option<String>,
    plugin: Option<String>,
    run: Option<String>,
}

impl StateQuery {
    fn filter(self) -> Result<crate::runtime::state::StateFilter, ApiError> {
        let tenant = self.tenant.ok_or_else(|| {
            ApiError::bad_request("query parameter `tenant` is required (empty: calls without one)")
        })?;
        Ok(crate::runtime::state::StateFilter {
            tenant,
            plugin: self.plugin,
            run: self.run,
        })
    }
}

/// `GET /v1/state?tenant=T[&plugin=P][&run=R]`: the guards' state the
/// filter selects, every key with its value and time to live.
async fn state_get(
    State(app): State<Shared>,
    axum::extract::Query(q): axum::extract::Query<StateQuery>,
) -> Result<Response, ApiError> {
    let filter = q.filter()?;
    let entries = app
        .registry()
        .engine()
        .state()
        .entries(&filter)
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    Ok(axum::Json(serde_json::json!({ "entries": entries })).into_response())
}

/// `DELETE /v1/state?tenant=T[&plugin=P][&run=R]`: removes what the filter
/// selects; answers how many keys.
async fn state_clear(
    State(app): State<Shared>,
    axum::extract::Query(q): axum::extract::Query<StateQuery>,
) -> Result<Response, ApiError> {
    let filter = q.filter()?;
    let removed = app
        .registry()
        .engine()
        .state()
        .clear(&filter)
        .await
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    Ok(axum::Json(serde_json::json!({ "removed": removed })).into_response())
}

async fn reload(State(app): State<Shared>) -> Result<Response, ApiError> {
    let registry = app.registry();
    let mut outcome = app
        .reloads
        .request(move || async move { registry.reload_logged("on POST /v1/reload").await });
    let waited = tokio::time::timeout(app.reload_wait, async {
        outcome
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|done| done.clone())
    })
    .await;
    match waited {
        Ok(Some(done)) => match &*done {
            Ok(report) => Ok(axum::Json(report).into_response()),
            Err(e) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reload failed: {e}"),
            )),
        },
        // The task ended without an outcome: it panicked (and was logged).
        Ok(None) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reload failed: the reload ended without an answer",
        )),
        Err(_) => {
            app.metrics.record_reload_accepted();
            let loading = app.registry().loading();
            tracing::info!(
                ?loading,
                "POST /v1/reload answered 202 after {} ms; the reload goes on",
                app.reload_wait.as_millis()
            );
            let body = json!({
                "status": "reloading",
                "loading": loading,
                "generation": app.registry().plugin_set().generation,
                "waited_ms": u64::try_from(app.reload_wait.as_millis()).unwrap_or(u64::MAX),
                "result": "the reload goes on; its outcome appears in GET /v1/plugins \
                           (generation, errors) and in the log",
            });
            Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
        }
    }
}

/// What a reload started over HTTP came to: `None` until it is done.
type ReloadOutcome = Option<Arc<Result<ReloadReport, Error>>>;

/// The reloads started by `POST /v1/reload`, each run as its own task so a
/// request dropped (by its client or the request timeout) never cancels
/// one. At most two exist: the one running and the next, which starts when
/// the running one is done; a request arriving while there is a next one
/// joins it. Every request so waits on a reload that reads the directory
/// after it arrived, and requests never pile up tasks.
#[derive(Default)]
struct Reloads {
    slots: std::sync::Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    /// The reload running now (or done: see [`finished`]).
    running: Option<watch::Receiver<ReloadOutcome>>,
    /// The reload that starts when the running one is done.
    next: Option<watch::Receiver<ReloadOutcome>>,
}

/// Whether the reload behind `outcome` is over (done, or its task gone).
fn finished(outcome: &watch::Receiver<ReloadOutcome>) -> bool {
    outcome.borrow().is_some() || outcome.has_changed().is_err()
}

impl Reloads {
    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The outcome of a reload that reads the directory after this call:
    /// the next one already waiting, else a new task running `run` (at
    /// once, or when the reload running now is done).
    fn request<F, Fut>(self: &Arc<Self>, run: F) -> watch::Receiver<ReloadOutcome>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<ReloadReport, Error>> + Send + 'static,
    {
        let mut slots = self.slots();
        if let Some(next) = &slots.next {
            return next.clone();
        }
        let (done, outcome) = watch::channel(None);
        let before = slots.running.take().filter(|r| !finished(r));
        match &before {
            Some(running) => {
                slots.running = Some(running.clone());
                slots.next = Some(outcome.clone());
            }
            None => slots.running = Some(outcome.clone()),
        }
        drop(slots);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Some(mut before) = before {
                // Done or gone (its task panicked): either way, our turn.
                let _ = before.wait_for(Option::is_some).await;
                let mut slots = this.slots();
                slots.running = slots.next.take();
            }
            let result = run().await;
            done.send_replace(Some(Arc::new(result)));
        });
        outcome
    }
}

async fn metrics_text(State(app): State<Shared>) -> Response {
    app.metrics.observe(&app.registry());
    if let Some(set) = app.served.set_status() {
        app.metrics.observe_set(&set);
    }
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        app.metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        let expected = sha256("s3cret");
        let matches = |offered: &str| same_digest(&expected, &sha256(offered));
        assert!(matches("s3cret"));
        assert!(!matches("s3cre"));
        assert!(!matches("s3cret "));
        assert!(!matches(""));
    }

    #[test]
    fn trace_query() {
        assert!(!wants_trace(None).expect("ok"));
        assert!(wants_trace(Some("trace=1")).expect("ok"));
        assert!(wants_trace(Some("a=b&trace")).expect("ok"));
        assert!(!wants_trace(Some("trace=0")).expect("ok"));
        assert!(wants_trace(Some("trace=maybe")).is_err());
    }

    /// A reload run by [`Reloads`] that counts itself in `started` and,
    /// given `hold`, waits for it before finishing; its report's
    /// generation is its number (1, 2, ...).
    fn counted(
        started: &Arc<std::sync::atomic::AtomicU64>,
        hold: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Result<ReloadReport, Error>> + Send>>
    + Send
    + 'static {
        let started = Arc::clone(started);
        move || {
            Box::pin(async move {
                let n = started.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                if let Some(hold) = hold {
                    let _ = hold.await;
                }
                Ok(ReloadReport {
                    generation: n,
                    ..ReloadReport::default()
                })
            })
        }
    }

    async fn generation_of(mut outcome: watch::Receiver<ReloadOutcome>) -> u64 {
        let done = outcome
            .wait_for(Option::is_some)
            .await
            .expect("the reload task answers")
            .clone()
            .expect("done");
        match &*done {
            Ok(report) => report.generation,
            Err(e) => panic!("reload failed: {e}"),
        }
    }

    /// Requests arriving while a reload runs start one more reload between
    /// them, which starts only when the running one is done; a request
    /// after both are done starts a new one.
    #[tokio::test]
    async fn reload_requests_never_pile_up_tasks() {
        let reloads = Arc::new(Reloads::default());
        let started = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (release, hold) = tokio::sync::oneshot::channel();
        let first = reloads.request(counted(&started, Some(hold)));
        let later: Vec<_> = (0..10)
            .map(|_| reloads.request(counted(&started, None)))
            .collect();
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        // The next reload waits for the running one.
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
        release.send(()).expect("the first reload waits");
        assert_eq!(generation_of(first).await, 1);
        for outcome in later {
            assert_eq!(generation_of(outcome).await, 2, "joined the next reload");
        }
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Nothing running: a new request runs a new reload.
        let again = reloads.request(counted(&started, None));
        assert_eq!(generation_of(again).await, 3);
    }

    #[test]
    fn exposure() {
        let lo: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let any: SocketAddr = "0.0.0.0:1".parse().expect("addr");
        assert!(exposure_warning(&lo, false).is_none());
        assert!(exposure_warning(&any, true).is_none());
        assert!(
            exposure_warning(&any, false)
                .expect("warns")
                .contains("0.0.0.0:1")
        );
    }
}
