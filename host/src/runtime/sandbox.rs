//! What one hook call's store holds: a deny-by-default WASI context, the
//! memory limiter, captured stdout/stderr, and the host imports with their
//! budgets.

use crate::fault::HostBudgetExceeded;
use std::borrow::Cow;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::fault::{Fault, ImportRefused};
use crate::runtime::bindings::{host, http, state, types, v0_1, v0_2};
use crate::runtime::http::CallHttp;
use crate::runtime::limits::{Limiter, Limits};
use crate::runtime::log_writer::redact::Secrets;
use crate::runtime::shares::Account;
use crate::runtime::state::call::CallState;
use crate::runtime::state::{Scope, StateLimits};

/// The log target of a guard's own lines (`log`, stdout, stderr):
/// `toolgate::sandbox`, as documented (`TOOLGATE_LOG=toolgate::sandbox=info`),
/// whatever this module's path.
pub(crate) const LOG_TARGET: &str = "toolgate::sandbox";

/// The most data a guest may hand the host in one crossing — a call's
/// reply, or one host import's arguments — in bytes: wasmtime's per-crossing
/// "hostcall fuel", checked before anything is copied. A legitimate reply
/// is at most two strings of `max_return_bytes` (a rewrite's name and args)
/// plus list overhead, and a `log` message beyond `log_bytes` is refused
/// anyway, so a guest can never make the host copy much more than its
/// limits allow.
pub(crate) fn hostcall_data_budget(limits: &Limits) -> usize {
    limits
        .max_return_bytes
        .max(limits.log_bytes)
        .saturating_mul(2)
        .saturating_add(1 << 20)
}

/// Store data for one hook call on one guard.
pub(crate) struct Sandbox {
    /// The guest's WASI context, made at its first WASI call: a call that
    /// makes none (a Rust guard's usually) pays nothing for its clocks and
    /// random sources. Each store still has its own.
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    plugin: Arc<str>,
    config: Arc<str>,
    calls_left: u32,
    /// What is left of the call's `log_bytes`, shared by `log` lines and
    /// what the guest writes to stdout and stderr.
    log_left: Arc<AtomicUsize>,
    stdout: Capture,
    stderr: Capture,
    /// The account whose log budget the guest's lines spend (`None`: no
    /// budget but the call's own).
    log_account: Option<Arc<Account>>,
    /// The call's masked values, cut out of the guest's lines (`None`:
    /// no mask is configured).
    secrets: Option<Arc<Secrets>>,
    /// The call's state (see [`Sandbox::attach_state`]); until one is
    /// attached — a start function, a snapshot's warm-up — a scratch
    /// store of its own, thrown away with this one.
    state: Option<Arc<CallState>>,
    state_limits: StateLimits,
    /// The call's outbound HTTP (see [`Sandbox::attach_http`]); `None`:
    /// the plugin is granted none, and every request is refused.
    http: Option<CallHttp>,
}

impl Sandbox {
    pub(crate) fn new(plugin: Arc<str>, config: Arc<str>, limits: &Limits) -> Self {
        let log_left = Arc::new(AtomicUsize::new(limits.log_bytes));
        let stdout = Capture::new(&log_left);
        let stderr = Capture::new(&log_left);
        Sandbox {
            wasi: None,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            plugin,
            config,
            calls_left: limits.host_calls,
            log_left,
            stdout,
            stderr,
            log_account: None,
            secrets: None,
            state: None,
            state_limits: StateLimits::from(limits),
            http: None,
        }
    }

    /// Gives the guest's `http` import the call's grant and budget.
    /// What it logs about them is masked as the guest's lines are (see
    /// [`Sandbox::mask_log_with`], called first).
    pub(crate) fn attach_http(&mut self, mut http: CallHttp) {
        http.mask_log_with(self.secrets.clone());
        self.http = Some(http);
    }

    /// Gives the guest's `state` imports the call's state.
    pub(crate) fn attach_state(&mut self, state: Arc<CallState>) {
        self.state = Some(state);
    }

    /// The state the guest's imports use now.
    fn state(&mut self) -> Arc<CallState> {
        let limits = self.state_limits;
        Arc::clone(
            self.state
                .get_or_insert_with(|| Arc::new(CallState::scratch(limits))),
        )
    }

    /// Charges the guest's log lines to `account`'s log budget.
    pub(crate) fn charge_log_to(&mut self, account: Option<Arc<Account>>) {
        self.log_account = account;
    }

    /// Masks the guest's lines with `secrets` (`None`: as written).
    pub(crate) fn mask_log_with(&mut self, secrets: Option<Arc<Secrets>>) {
        self.secrets = secrets.filter(|s| !s.is_empty());
    }

    /// `text` with the call's masked values cut out.
    fn masked<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.secrets {
            Some(secrets) => secrets.scrubbed(text),
            None => Cow::Borrowed(text),
        }
    }

    /// Whether `bytes` more of log may be written now (the account's log
    /// budget; a line that may not is dropped).
    fn may_log(&self, bytes: usize) -> bool {
        self.log_account.as_ref().is_none_or(|a| a.may_log(bytes))
    }

    /// Sends whatever the guest wrote to stdout/stderr to the log: one
    /// line per stream, with what was kept and how many bytes were dropped
    /// (past the call's log budget).
    pub(crate) fn flush_output(&self) {
        for (stream, capture) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (text, dropped) = capture.take();
            if (!text.is_empty() || dropped > 0)
                && tracing::enabled!(target: LOG_TARGET, tracing::Level::INFO)
                && self.may_log(text.len())
            {
                let text = self.masked(text.trim_end());
                tracing::info!(target: LOG_TARGET, plugin = %self.plugin, stream, dropped, "{text}");
            }
        }
    }

    /// Gives a kept instance a new call's host-call and log budgets (the
    /// reused-instance measurement; a served call always has a new store).
    pub(crate) fn refill(&mut self, limits: &Limits) {
        self.calls_left = limits.host_calls;
        // A new call's state budget too: a fresh scratch store.
        self.state = None;
        self.flush_output();
        self.log_left.store(limits.log_bytes, Ordering::Relaxed);
    }

    fn spend_call(&mut self) -> wasmtime::Result<()> {
        self.calls_left = self
            .calls_left
            .checked_sub(1)
            .ok_or(HostBudgetExceeded("too many host calls"))?;
        Ok(())
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let (stdout, stderr) = (&self.stdout, &self.stderr);
        WasiCtxView {
            // Deny by default: no preopened directories, no environment, no
            // arguments, no network, stdin empty. Clocks and randomness are
            // available (language runtimes need them to start).
            ctx: self.wasi.get_or_insert_with(|| {
                WasiCtx::builder()
                    .stdout(stdout.clone())
                    .stderr(stderr.clone())
                    .allow_tcp(false)
                    .allow_udp(false)
                    .allow_ip_name_lookup(false)
                    .build()
            }),
            table: &mut self.table,
        }
    }
}

impl types::Host for Sandbox {}

impl host::Host for Sandbox {
    fn log(&mut self, level: host::Level, message: String) -> wasmtime::Result<()> {
        self.spend_call()?;
        self.log_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(message.len())
            })
            .map_err(|_| HostBudgetExceeded("too many log bytes"))?;
        use tracing::{Level, enabled};
        // A line the log keeps is written if the account's log budget
        // allows it; one the log filters out costs nothing.
        let kept = |enabled: bool| enabled && self.may_log(message.len());
        let plugin = &*self.plugin;
        // Masked only when written.
        let masked = || self.masked(&message);
        match level {
            host::Level::Trace if kept(enabled!(target: LOG_TARGET, Level::TRACE)) => {
                tracing::trace!(target: LOG_TARGET, plugin, "{}", masked())
            }
            host::Level::Debug if kept(enabled!(target: LOG_TARGET, Level::DEBUG)) => {
                tracing::debug!(target: LOG_TARGET, plugin, "{}", masked())
            }
            host::Level::Info if kept(enabled!(target: LOG_TARGET, Level::INFO)) => {
                tracing::info!(target: LOG_TARGET, plugin, "{}", masked())
            }
            host::Level::Warn if kept(enabled!(target: LOG_TARGET, Level::WARN)) => {
                tracing::warn!(target: LOG_TARGET, plugin, "{}", masked())
            }
            host::Level::Error if kept(enabled!(target: LOG_TARGET, Level::ERROR)) => {
                tracing::error!(target: LOG_TARGET, plugin, "{}", masked())
            }
            _ => {}
        }
        Ok(())
    }

    fn config(&mut self) -> wasmtime::Result<String> {
        self.spend_call()?;
        Ok(self.config.to_string())
    }
}

impl v0_1::host::Host for Sandbox {
    fn log(&mut self, level: v0_1::host::Level, message: String) -> wasmtime::Result<()> {
        use v0_1::host::Level as Then;
        let level = match level {
            Then::Trace => host::Level::Trace,
            Then::Debug => host::Level::Debug,
            Then::Info => host::Level::Info,
            Then::Warn => host::Level::Warn,
            Then::Error => host::Level::Error,
        };
        host::Host::log(self, level, message)
    }

    fn config(&mut self) -> wasmtime::Result<String> {
        host::Host::config(self)
    }
}

impl v0_2::host::Host for Sandbox {
    fn log(&mut self, level: v0_2::host::Level, message: String) -> wasmtime::Result<()> {
        use v0_2::host::Level as Then;
        let level = match level {
            Then::Trace => host::Level::Trace,
            Then::Debug => host::Level::Debug,
            Then::Info => host::Level::Info,
            Then::Warn => host::Level::Warn,
            Then::Error => host::Level::Error,
        };
        host::Host::log(self, level, message)
    }

    fn config(&mut self) -> wasmtime::Result<String> {
        host::Host::config(self)
    }
}

impl From<v0_2::state::Scope> for state::Scope {
    fn from(scope: v0_2::state::Scope) -> state::Scope {
        match scope {
            v0_2::state::Scope::Run => state::Scope::Run,
            v0_2::state::Scope::Tenant => state::Scope::Tenant,
        }
    }
}

/// `0.2.0`'s `state`: `0.3.0`'s, word for word.
impl v0_2::state::Host for Sandbox {
    async fn get(
        &mut self,
        scope: v0_2::state::Scope,
        key: String,
    ) -> wasmtime::Result<Option<String>> {
        state::Host::get(self, scope.into(), key).await
    }

    async fn set(
        &mut self,
        scope: v0_2::state::Scope,
        key: String,
        value: String,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<()> {
        state::Host::set(self, scope.into(), key, value, ttl_ms).await
    }

    async fn delete(&mut self, scope: v0_2::state::Scope, key: String) -> wasmtime::Result<()> {
        state::Host::delete(self, scope.into(), key).await
    }

    async fn add(
        &mut self,
        scope: v0_2::state::Scope,
        key: String,
        delta: i64,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<i64> {
        state::Host::add(self, scope.into(), key, delta, ttl_ms).await
    }
}

/// `0.2.0`'s `http`: `0.3.0`'s, word for word.
impl v0_2::http::Host for Sandbox {
    async fn send(
        &mut self,
        request: v0_2::http::Request,
    ) -> wasmtime::Result<v0_2::http::Response> {
        let response = http::Host::send(
            self,
            http::Request {
                method: request.method,
                url: request.url,
                headers: request.headers,
                body: request.body,
            },
        )
        .await?;
        Ok(v0_2::http::Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }
}

impl From<state::Scope> for Scope {
    fn from(scope: state::Scope) -> Scope {
        match scope {
            state::Scope::Run => Scope::Run,
            state::Scope::Tenant => Scope::Tenant,
        }
    }
}

impl state::Host for Sandbox {
    async fn get(&mut self, scope: state::Scope, key: String) -> wasmtime::Result<Option<String>> {
        self.spend_call()?;
        Ok(self.state().get(scope.into(), key).await?)
    }

    async fn set(
        &mut self,
        scope: state::Scope,
        key: String,
        value: String,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<()> {
        self.spend_call()?;
        Ok(self.state().set(scope.into(), key, value, ttl_ms)?)
    }

    async fn delete(&mut self, scope: state::Scope, key: String) -> wasmtime::Result<()> {
        self.spend_call()?;
        Ok(self.state().delete(scope.into(), key)?)
    }

    async fn add(
        &mut self,
        scope: state::Scope,
        key: String,
        delta: i64,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<i64> {
        self.spend_call()?;
        Ok(self.state().add(scope.into(), key, delta, ttl_ms).await?)
    }
}

impl http::Host for Sandbox {
    async fn send(&mut self, request: http::Request) -> wasmtime::Result<http::Response> {
        self.spend_call()?;
        let Some(call) = &mut self.http else {
            return Err(ImportRefused::new(
                Fault::HttpDenied,
                format!(
                    "{} {}: plugin {} is granted no outbound HTTP",
                    request.method, request.url, self.plugin
                ),
            )
            .into());
        };
        let response = call
            .send(crate::runtime::http::Request {
                method: request.method,
                url: request.url,
                headers: request.headers,
                body: request.body,
            })
            .await?;
        Ok(http::Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }
}

/// A bounded in-memory stdout/stderr: keeps what the call's log budget
/// (shared with `log` lines and the other stream) still has room for and
/// silently drops (and counts) the rest, so a noisy guest is neither
/// unbounded nor made to fail.
#[derive(Clone)]
struct Capture {
    buf: Arc<Mutex<CaptureBuf>>,
    left: Arc<AtomicUsize>,
}

#[derive(Default)]
struct CaptureBuf {
    kept: Vec<u8>,
    dropped: usize,
}

impl Capture {
    fn new(left: &Arc<AtomicUsize>) -> Self {
        Capture {
            buf: Arc::default(),
            left: Arc::clone(left),
        }
    }

    fn take(&self) -> (String, usize) {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&buf.kept).into_owned();
        let dropped = buf.dropped;
        buf.kept.clear();
        buf.dropped = 0;
        (text, dropped)
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let mut keep = 0;
        let _ = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                keep = data.len().min(left);
                Some(left - keep)
            });
        buf.kept.extend_from_slice(&data[..keep]);
        buf.dropped += data.len() - keep;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
