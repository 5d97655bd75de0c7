//! `toolgate._native`: the toolgate host embedded in a Python process.
//!
//! A [`Host`] loads a plugin directory with the `toolgate` library (the same
//! [`Registry`], chains, limits, manifests, tenants, compiled cache and hot
//! reload as `toolgate serve`) and answers seam requests in-process. Given
//! a `compile_command` (the Python `Host` passes its interpreter and
//! `toolgate/_compile.py`), it compiles each new component in that child
//! process, which runs [`compile_child`]: the code of `toolgate compile`.
//!
//! JSON crosses the boundary as text: a request is the body `toolgate serve`
//! takes (`{"event", "state"?, "tenant"?}`) and the answer is the body it
//! returns, both parsed and written by the workspace's `serde_json`
//! (arbitrary precision, key order kept), so integers of any size and the key
//! order of `args` survive. The Python package (`toolgate/__init__.py`) wraps
//! this class with `json.dumps` / `json.loads` and typed async methods.
//!
//! Guard calls run on one process-wide multi-threaded Tokio runtime owned by
//! this module, with the GIL released. [`Host::decide`] first gives a call
//! one slice on the calling thread (inside the runtime's context): a chain
//! that finishes within it — a small guard takes tens of microseconds — is
//! answered at once, with no thread hop. A guest still running at the next
//! epoch tick (1 ms) yields, and the rest of the call continues on the
//! runtime while the caller awaits an asyncio future (pyo3-async-runtimes):
//! the event loop is never held for more than one tick per call. With
//! `inline=False` every call goes to the runtime from the start.

use std::ffi::OsString;
use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use toolgate::CompiledCache;
use toolgate::LoadLimits;
use toolgate::Metrics;
use toolgate::NotDecided;
use toolgate::watch::WatchHandle;
use toolgate::{CompileBounds, Compiler};
use toolgate::{
    DecideRequest, Engine, EngineConfig, Registry, RegistryOptions, Seam, StateBackend,
};

pyo3::create_exception!(
    _native,
    ToolgateError,
    pyo3::exceptions::PyException,
    "Something toolgate could not do: load a plugin directory, reload it, start its runtime."
);
pyo3::create_exception!(
    _native,
    RequestError,
    ToolgateError,
    "A seam request toolgate refuses as invalid (what `toolgate serve` answers with 400): \
     a missing or mistyped event field, a state that is not an object, an invalid tenant name. \
     The message names the field."
);

pyo3::create_exception!(
    _native,
    BusyError,
    ToolgateError,
    "A seam request the host could not decide in time, for reasons of its own, never a guard's: \
     its tenant already had as many requests in progress as its share allows \
     (`[shares] tenant_requests`) for the share's whole wait, or was over its rate \
     (`[shares] tenant_rate`) by more than that wait (what `toolgate serve` answers with 429); \
     or a guard of its chain could not be run in time — no instance slot, its share taken, or \
     starved of CPU on a busy host (`overloaded`; `toolgate serve` answers 503); or its \
     tenant's guards are not serving yet: its directory still loading, or its share not \
     admitted (503). The message names the limit, the guard or the tenant. Nothing was \
     decided; retrying later may succeed."
);

/// Why a seam request got no answer.
enum Refused {
    /// The request is invalid (`RequestError`).
    Invalid(String),
    /// Its account had no place for it, or its tenant is not ready
    /// (`BusyError`).
    Busy(String),
}

impl From<Refused> for PyErr {
    fn from(refused: Refused) -> PyErr {
        match refused {
            Refused::Invalid(message) => RequestError::new_err(message),
            Refused::Busy(message) => BusyError::new_err(message),
        }
    }
}

/// The process-wide runtime every host's guard calls and watchers run on,
/// and whether pyo3-async-runtimes drives its futures on it too.
struct Runtime {
    rt: &'static tokio::runtime::Runtime,
    shared: bool,
}

/// The process-wide runtime (started on first use).
fn runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        let workers = std::env::var("TOOLGATE_WORKER_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("toolgate")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the toolgate runtime: {e}"))?;
        let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
        // pyo3-async-runtimes completes asyncio futures from this runtime.
        // If another extension set its runtime first, ours still runs the
        // guard calls: `decide` then spawns onto it explicitly.
        let shared = pyo3_async_runtimes::tokio::init_with_runtime(rt).is_ok();
        Ok(Runtime { rt, shared })
    });
    rt.as_ref().map_err(|e| ToolgateError::new_err(e.clone()))
}

/// Sends the library's log (guard faults, load errors, reloads) to standard
/// error, filtered by `$TOOLGATE_LOG` (default `warn`), unless the process
/// already installed a subscriber (see `toolgate::logging`).
fn init_logging() {
    toolgate::logging::init();
}

fn parse_seam(seam: &str) -> PyResult<Seam> {
    seam.parse::<Seam>().map_err(PyValueError::new_err)
}

/// A plugin directory loaded in this process: the global chain and each
/// tenant's, with hot reload.
///
/// `Host(plugins, *, cache_dir=None, no_cache=False, watch=True,
/// settle_ms=250, max_instances=256, pooling=True, inline=True,
/// compile_command=None, compile_timeout_ms=120000,
/// compile_memory_mib=2048)`:
///
/// - `plugins`: the plugin directory (its `*.wasm`, `toolgate.toml` and
///   `tenants/`), as for `toolgate serve --plugins`.
/// - `cache_dir`: where compiled components are cached. Default:
///   `$TOOLGATE_CACHE_DIR`, else `$XDG_CACHE_HOME/toolgate`, else
///   `~/.cache/toolgate`. `no_cache=True` compiles every component and
///   writes nothing.
/// - `watch`: reload when the directory changes (after `settle_ms` of
///   quiet). Calls in flight finish on the chain they began with.
/// - `max_instances`: guard instances alive at once (the pooling allocator's
///   slots); `pooling=False` turns the pooling allocator off.
/// - `inline`: give each call its first slice (up to one epoch tick, 1 ms)
///   on the calling thread, GIL released, before handing it to the runtime
///   (see `decide`). `False`: every call is handed over at once.
/// - `compile_command`: compile each component in a child process,
///   `compile_command[0] compile_command[1:]... compile --flag=value...`,
///   a program that runs [`compile_child`] (`toolgate.Host` passes this
///   interpreter and `toolgate/_compile.py`; see
///   `toolgate::Compiler::Subprocess`), killed at
///   `compile_timeout_ms` and limited to `compile_memory_mib` of data
///   (`RLIMIT_DATA`, the child's whole process). `None`: compile in this
///   process, with no memory bound (the time bound only stops the wait).
/// - `decision_log`: JSON text of an object with `[decision_log]`'s keys
///   (`toolgate::decision_log::from_json`): the decision log's settings
///   under the global manifest's table. `None`: the defaults (off).
///
/// Loading compiles every new component (the cache makes later loads fast);
/// the GIL is released meanwhile. A directory that does not exist, or a
/// manifest that fails to parse, raises `ToolgateError`; a component that
/// fails to load is reported in `plugins()["errors"]` and skipped.
#[pyclass(module = "toolgate._native", frozen)]
struct Host {
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    watch: Mutex<Option<WatchHandle>>,
    inline: bool,
}

/// One seam call, boxed so it can start on the caller's thread and move to
/// the runtime.
type Call = Pin<Box<dyn Future<Output = Result<String, Refused>> + Send>>;

#[pymethods]
impl Host {
    #[new]
    #[pyo3(signature = (plugins, *, cache_dir=None, no_cache=false, watch=true, settle_ms=250, max_instances=256, pooling=true, inline=true, compile_command=None, compile_timeout_ms=120_000, compile_memory_mib=2048, state=None, decision_log=None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "keyword arguments of the Python constructor"
    )]
    fn new(
        py: Python<'_>,
        plugins: PathBuf,
        cache_dir: Option<PathBuf>,
        no_cache: bool,
        watch: bool,
        settle_ms: u64,
        max_instances: u32,
        pooling: bool,
        inline: bool,
        compile_command: Option<Vec<OsString>>,
        compile_timeout_ms: u64,
        compile_memory_mib: u64,
        state: Option<String>,
        decision_log: Option<String>,
    ) -> PyResult<Self> {
        let state: StateBackend = match state {
            None => StateBackend::default(),
            Some(s) => s.parse().map_err(PyValueError::new_err)?,
        };
        if no_cache && cache_dir.is_some() {
            return Err(PyValueError::new_err(
                "pass cache_dir or no_cache=True, not both",
            ));
        }
        if max_instances == 0 {
            return Err(PyValueError::new_err("max_instances must be at least 1"));
        }
        if compile_timeout_ms == 0 || compile_memory_mib < 32 {
            return Err(PyValueError::new_err(
                "compile_timeout_ms must be at least 1 and compile_memory_mib at least 32",
            ));
        }
        let compiler = match compile_command {
            None => Compiler::InProcess,
            Some(command) => {
                let mut command = command.into_iter();
                let Some(program) = command.next().filter(|p| !p.is_empty()) else {
                    return Err(PyValueError::new_err(
                        "compile_command must name a program to run",
                    ));
                };
                Compiler::Subprocess {
                    program: program.into(),
                    args: command.collect(),
                }
            }
        };
        let mut policy = toolgate::Policy::default();
        if let Some(text) = decision_log {
            let settings: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text)
                .map_err(|e| PyValueError::new_err(format!("decision_log: {e}")))?;
            policy.decision_log =
                toolgate::decision_log::from_json(&settings).map_err(PyValueError::new_err)?;
        }
        let rt = runtime()?;
        let cache = match (cache_dir, no_cache) {
            (_, true) => CompiledCache::disabled(),
            (Some(dir), false) => CompiledCache::at(dir),
            (None, false) => CompiledCache::from_env(),
        };
        let options = RegistryOptions {
            cache,
            load: LoadLimits {
                compiler,
                compile: CompileBounds {
                    timeout: Duration::from_millis(compile_timeout_ms),
                    memory_bytes: compile_memory_mib.saturating_mul(1 << 20),
                },
                ..LoadLimits::default()
            },
            policy,
            http_answers: None,
        };
        let config = EngineConfig {
            max_instances,
            pooling,
            state,
            ..EngineConfig::default()
        };
        let registry = py.detach(|| {
            rt.rt.block_on(async move {
                let engine = Engine::new(config)?;
                Registry::open_with(engine, plugins, options).await
            })
        });
        let registry = Arc::new(registry.map_err(|e| ToolgateError::new_err(e.to_string()))?);
        let manifest_error = registry
            .plugin_set()
            .errors
            .iter()
            .find(|e| e.path.file_name() == Some(toolgate::manifest::FILE_NAME.as_ref()))
            .map(|e| e.message.clone());
        if let Some(message) = manifest_error {
            // A broken manifest would silently run fewer guards.
            return Err(ToolgateError::new_err(message));
        }
        let handle = if watch {
            let _in_runtime = rt.rt.enter();
            Some(
                Arc::clone(&registry)
                    .watch(Duration::from_millis(settle_ms))
                    .map_err(|e| ToolgateError::new_err(e.to_string()))?,
            )
        } else {
            None
        };
        Ok(Host {
            registry,
            metrics: Arc::new(Metrics::new()),
            watch: Mutex::new(handle),
            inline,
        })
    }

    /// Runs one seam request; returns the answer, or an awaitable of it.
    ///
    /// `seam` is `"routing"`, `"rewrite"`, `"steering"`, `"result"` or
    /// `"response"`;
    /// `request` is the JSON text of `{"event": {...}, "state"?: {...},
    /// "tenant"?: "..."}`. The answer is the JSON text of what the Python
    /// hook returns, or with `trace=True` of `{"result": ..., "trace":
    /// [...]}`. It is returned as a `str` when the call finished within its
    /// first slice on this thread (see the module docs), else as an
    /// awaitable resolving to the `str`; an invalid request raises (or the
    /// awaitable raises) `RequestError`. Must be called with an asyncio event
    /// loop running.
    #[pyo3(signature = (seam, request, trace=false))]
    fn decide<'py>(
        &self,
        py: Python<'py>,
        seam: &str,
        request: String,
        trace: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let seam = parse_seam(seam)?;
        let rt = runtime()?;
        let registry = Arc::clone(&self.registry);
        let metrics = Arc::clone(&self.metrics);
        let mut call: Call = Box::pin(async move {
            let request =
                DecideRequest::parse(seam, request.as_bytes()).map_err(Refused::Invalid)?;
            let shadow_metrics = Arc::clone(&metrics);
            let decision = request
                .decide_answer_first(&registry.plugin_set(), move |full| {
                    shadow_metrics.record_shadow(&full);
                })
                .await
                .map_err(|refused| {
                    if let NotDecided::Unavailable { trace, .. } = &refused {
                        metrics.record_undecided(seam, trace);
                    }
                    Refused::Busy(refused.to_string())
                })?;
            metrics.record_decision(&decision);
            Ok(decision.answer(trace).to_string())
        });
        if self.inline {
            // The first slice, here, without the GIL: a guest still running
            // at the next epoch tick yields (`Pending`) and moves on below.
            let first = py.detach(|| {
                let _in_runtime = rt.rt.enter();
                match call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(answer) => Some(answer),
                    Poll::Pending => None,
                }
            });
            match first {
                Some(Ok(answer)) => return Ok(answer.into_pyobject(py)?.into_any()),
                Some(Err(refused)) => return Err(refused.into()),
                None => {}
            }
        }
        if rt.shared {
            // One task on our runtime; cancelling the asyncio future drops it.
            return pyo3_async_runtimes::tokio::future_into_py(py, async move {
                call.await.map_err(PyErr::from)
            });
        }
        let task = rt.rt.spawn(call);
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            match task.await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(refused)) => Err(refused.into()),
                Err(e) => Err(ToolgateError::new_err(format!("guard call failed: {e}"))),
            }
        })
    }

    /// Hands one lifecycle event to the guards that observe its hook and
    /// returns at once: `"queued"`, `"unobserved"` (no guard observes it)
    /// or `"dropped"` (its run's queue is full).
    ///
    /// `request` is the JSON text of `{"hook": "on_llm_end", "event":
    /// {...}, "tenant"?: "..."}`, what `toolgate serve`'s `POST
    /// /v1/observe` takes; it is checked the same way: an unknown hook or
    /// a missing or mistyped field raises `RequestError` naming it, a
    /// tenant whose guards are not serving yet `BusyError`. The
    /// observations of a run are delivered on the host's runtime, in the
    /// order they were handed over, and a later decision of the run waits
    /// for them (docs/lifecycle.md); no guard runs on the
    /// calling thread.
    fn observe(&self, request: String) -> PyResult<&'static str> {
        let rt = runtime()?;
        let request = toolgate::ObserveRequest::parse(request.as_bytes())
            .map_err(|message| PyErr::from(Refused::Invalid(message)))?;
        // The run's lane is spawned on the host's runtime.
        let _in_runtime = rt.rt.enter();
        let observed = self
            .registry
            .plugin_set()
            .observe(request.tenant.as_deref(), &request.event)
            .map_err(|e| PyErr::from(Refused::Busy(e.to_string())))?;
        Ok(observed.as_str())
    }

    /// The hooks worth sending now, as JSON text: the document of `toolgate
    /// serve`'s `GET /v1/hooks` (`hooks`: the lifecycle hooks some loaded
    /// guard of any tenant observes; `response`: whether some loaded guard
    /// answers the response seam; `generation`), following reloads.
    fn hooks(&self) -> PyResult<String> {
        let body = toolgate::server::hooks_body(&self.registry.plugin_set());
        serde_json::to_string(&body).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Re-reads the plugin directory now and swaps in the new chains;
    /// returns the reload report as JSON text (`generation`, `loaded`,
    /// `removed`, `errors`, `compiled`, `cache_hits`). Blocks the calling
    /// thread (not the runtime) until done; the GIL is released.
    fn reload(&self, py: Python<'_>) -> PyResult<String> {
        let rt = runtime()?;
        let registry = Arc::clone(&self.registry);
        let report = py
            .detach(|| rt.rt.block_on(async move { registry.reload().await }))
            .map_err(|e| ToolgateError::new_err(e.to_string()))?;
        serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// What is loaded, as JSON text: the same document as `toolgate
    /// serve`'s `GET /v1/plugins` (`generation`, `global`, `tenants`,
    /// `errors`).
    fn plugins(&self) -> PyResult<String> {
        let set = self.registry.plugin_set();
        serde_json::to_string(&set.describe()).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The seams at least one plugin of the chain for `tenant` subscribes
    /// to (`tenant=None`: the global chain).
    #[pyo3(signature = (tenant=None))]
    fn seams(&self, tenant: Option<&str>) -> Vec<&'static str> {
        let set = self.registry.plugin_set();
        let chain = set.chain(tenant);
        Seam::ALL
            .into_iter()
            .filter(|s| chain.plugins().iter().any(|p| p.subscribes(*s)))
            .map(Seam::as_str)
            .collect()
    }

    /// This host's metrics in the OpenMetrics text format: the series of
    /// `toolgate serve`'s `GET /metrics` except the HTTP ones.
    fn metrics(&self) -> String {
        self.metrics.observe(&self.registry);
        self.metrics.encode()
    }

    /// The plugin set generation serving now (incremented by every reload
    /// that changed something).
    #[getter]
    fn generation(&self) -> u64 {
        self.registry.plugin_set().generation
    }

    /// The plugin directory.
    #[getter]
    fn root(&self) -> PathBuf {
        self.registry.root().to_path_buf()
    }

    /// Whether the directory is being watched.
    #[getter]
    fn watching(&self) -> bool {
        self.watch.lock().map(|w| w.is_some()).unwrap_or(false)
    }

    /// Stops watching the directory. Calls keep working on the chains
    /// loaded last.
    fn close(&self) {
        if let Ok(mut w) = self.watch.lock() {
            w.take();
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Host({:?}, generation={})",
            self.registry.root().display(),
            self.registry.plugin_set().generation
        )
    }
}

/// The compile child, run as `python .../toolgate/_compile.py compile
/// --flag=value...` by a [`Host`] with a `compile_command`: exactly what
/// `toolgate compile` runs (`toolgate::compile::child_main`). `argv` is
/// `["compile", "--max-memory-bytes=N", ...]`. Limits this process
/// (`RLIMIT_DATA`, `RLIMIT_CPU`, no core dumps), reads the component on
/// standard input, writes its native code on standard output and returns
/// the exit code (0; 2: it does not compile; 1: it could not run); a
/// failure's message is on standard error. The limits stay on the process:
/// call it only in a process of its own.
#[pyfunction]
fn compile_child(py: Python<'_>, argv: Vec<OsString>) -> i32 {
    py.detach(|| toolgate::compile::child_main_from(argv))
}

/// How deep [`dumps`] follows containers before leaving the value to
/// `json.dumps` (which then detects a cycle or nests as deep as it can).
const DUMPS_MAX_DEPTH: u32 = 256;

/// The JSON text of `value` when it is made of plain JSON values only:
/// `dict`s with `str` keys, `list`s, `tuple`s (as arrays), `str`s, `int`s,
/// finite `float`s, `bool`s and `None`, of exactly these types. The text
/// reads back (here and in `toolgate serve`) as exactly what
/// `json.dumps(value, allow_nan=False)` reads back as: numbers are written
/// as their `repr`, key order is kept. `None` for anything else (a
/// subclass, a non-`str` key, a non-finite float, a string that is not
/// valid Unicode, nesting deeper than 256 levels): the caller then uses
/// `json.dumps`, which also raises what it raises for it.
#[pyfunction]
fn dumps(value: &Bound<'_, PyAny>) -> Option<String> {
    let mut out = Vec::with_capacity(512);
    if !write_json(value, &mut out, 0) {
        return None;
    }
    String::from_utf8(out).ok()
}

/// Appends `value` to `out` as JSON (see [`dumps`]); false when it is not
/// plain JSON.
fn write_json(value: &Bound<'_, PyAny>, out: &mut Vec<u8>, depth: u32) -> bool {
    if depth > DUMPS_MAX_DEPTH {
        return false;
    }
    if value.is_none() {
        out.extend_from_slice(b"null");
        true
    } else if let Ok(s) = value.cast_exact::<PyString>() {
        write_str(s, out)
    } else if let Ok(b) = value.cast_exact::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
        true
    } else if let Ok(n) = value.cast_exact::<PyInt>() {
        match n.extract::<i64>() {
            Ok(n) => write!(out, "{n}").is_ok(),
            // A big integer: its digits, as `json.dumps` writes them.
            Err(_) => write_repr(n.as_any(), out),
        }
    } else if let Ok(f) = value.cast_exact::<PyFloat>() {
        f.value().is_finite() && write_repr(f.as_any(), out)
    } else if let Ok(d) = value.cast_exact::<PyDict>() {
        out.push(b'{');
        for (i, (k, v)) in d.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let Ok(k) = k.cast_exact::<PyString>() else {
                return false;
            };
            if !write_str(k, out) {
                return false;
            }
            out.push(b':');
            if !write_json(&v, out, depth + 1) {
                return false;
            }
        }
        out.push(b'}');
        true
    } else if let Ok(l) = value.cast_exact::<PyList>() {
        write_array(l.iter(), out, depth)
    } else if let Ok(t) = value.cast_exact::<PyTuple>() {
        write_array(t.iter(), out, depth)
    } else {
        false
    }
}

fn write_array<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    out: &mut Vec<u8>,
    depth: u32,
) -> bool {
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if !write_json(&item, out, depth + 1) {
            return false;
        }
    }
    out.push(b']');
    true
}

fn write_str(s: &Bound<'_, PyString>, out: &mut Vec<u8>) -> bool {
    match s.to_str() {
        Ok(s) => serde_json::to_writer(&mut *out, s).is_ok(),
        // A lone surrogate: not UTF-8, left to `json.dumps`.
        Err(_) => false,
    }
}

/// `repr(value)` (what `json.dumps` writes for an `int` or a `float`).
fn write_repr(value: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> bool {
    match value.repr() {
        Ok(text) => match text.to_str() {
            Ok(text) => {
                out.extend_from_slice(text.as_bytes());
                true
            }
            Err(_) => false,
        },
        Err(_) => false,
    }
}

/// The module: `Host`, `ToolgateError`, `RequestError`, `BusyError`,
/// [`dumps`] and [`compile_child`].
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    m.add_class::<Host>()?;
    m.add_function(wrap_pyfunction!(dumps, m)?)?;
    m.add_function(wrap_pyfunction!(compile_child, m)?)?;
    m.add("ToolgateError", m.py().get_type::<ToolgateError>())?;
    m.add("RequestError", m.py().get_type::<RequestError>())?;
    m.add("BusyError", m.py().get_type::<BusyError>())?;
    Ok(())
}
