//! One loaded guard: how to load it ([`PluginSpec`]), its compiled and
//! probed component, the seams it exports and its limits. Calling it is
//! the private `guard_call` module's job (the instance, the call, its
//! accounting).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, InstancePre};

use crate::call::guard_call::arm_deadline;
use crate::call::quarantine::{Health, Quarantine, QuarantinePolicy, Quarantines};
use crate::call::snapshot::{SnapshotMode, SnapshotStatus};
use crate::call::wit::Exports;
use crate::error::Error;
use crate::event::Seam;
use crate::event::lifecycle::{Hooks, LifecycleHook};
use crate::runtime::engine::Engine;
use crate::runtime::http::Outbound;
use crate::runtime::http::grant::HttpGrant;
use crate::runtime::http::transport::HttpAnswers;
use crate::runtime::limits::Limits;
use crate::runtime::prepared::{self, Depth, Prepared, PreparedShare};
use crate::runtime::sandbox::Sandbox;
use crate::runtime::shares::Account;
use crate::runtime::turns::Habit;

/// What a fault in this plugin means for the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Fail open (default): log, count, and go on as if the guard returned
    /// nothing — like a Python handler that raised.
    #[default]
    Skip,
    /// Fail closed: at the steering seam the call is refused with a fixed,
    /// labelled message; at the routing seam no tool stays visible. Rewrite
    /// and result faults are logged and skipped either way.
    Deny,
}

/// Whether a plugin's verdicts are applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Its verdicts decide (default).
    #[default]
    Enforce,
    /// It runs on every call it subscribes to, in a chain of its own
    /// beside the enforced one; its would-be verdict is recorded, never
    /// applied, and its faults never quarantine it nor fail anything
    /// closed (docs/design.md, "Shadow guards").
    Shadow,
}

impl Mode {
    /// `enforce` or `shadow`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
}

/// How to load one plugin.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// The plugin's name in logs, traces and metrics.
    pub name: String,
    /// The component file.
    pub path: PathBuf,
    /// Limits for each call.
    pub limits: Limits,
    /// Configuration handed to the guard (`host.config`), a JSON object.
    pub config: Value,
    /// What a fault means.
    pub on_error: OnError,
    /// Whether its verdicts are applied. Default: [`Mode::Enforce`].
    pub mode: Mode,
    /// Instances kept made ahead of need (see `crate::runtime::prepared`).
    /// Default: [`Depth::Auto`].
    pub prepared: Depth,
    /// Whether a [`Registry`](crate::Registry) pre-initialises the
    /// component when it loads it (see [`crate::call::snapshot::SnapshotMode`]).
    /// Default: [`SnapshotMode::Auto`].
    pub snapshot: SnapshotMode,
    /// Where its `config` was written (the manifest and the line), named
    /// when the guard refuses it. Default: `None`.
    pub config_at: Option<(PathBuf, usize)>,
    /// The outbound HTTP the guard is granted (its `http` import).
    /// Default: none.
    pub http: HttpGrant,
    /// Answers its granted requests get in place of the network's (a
    /// test's; see [`HttpAnswers`]). A manifest never sets it. Default:
    /// `None`, the network.
    pub http_answers: Option<Arc<dyn HttpAnswers>>,
}

impl PluginSpec {
    /// A spec for `path` with default limits, no config and fail-open: the
    /// name is the file's stem.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        PluginSpec {
            name,
            path,
            limits: Limits::default(),
            config: Value::Object(Default::default()),
            config_at: None,
            on_error: OnError::Skip,
            mode: Mode::Enforce,
            prepared: Depth::Auto,
            snapshot: SnapshotMode::Auto,
            http: HttpGrant::default(),
            http_answers: None,
        }
    }
}

/// A loaded, linked guard, ready to be instantiated once per call.
///
/// A plugin loaded on its own runs every call it is given (no account, no
/// quarantine); a [`Registry`](crate::Registry) charges each call to the
/// caller's share and quarantines a guard that keeps faulting.
#[derive(Clone)]
pub struct Plugin {
    pub(crate) name: Arc<str>,
    pub(crate) path: PathBuf,
    pub(crate) digest: String,
    pub(crate) limits: Limits,
    /// The configuration handed to the guard, JSON text.
    pub(crate) config: Arc<str>,
    on_error: OnError,
    mode: Mode,
    pub(crate) engine: Engine,
    pub(crate) pre: InstancePre<Sandbox>,
    pub(crate) exports: Exports,
    /// The share each call is charged to; `None`: only the engine's pool.
    pub(crate) account: Option<Arc<Account>>,
    /// The quarantine of the account its calls are charged to.
    pub(crate) quarantine: Arc<Quarantine>,
    /// Every account's quarantine; shared by every copy of this plugin.
    quarantines: Arc<Quarantines>,
    /// Whether its calls have lately run long; this copy's own.
    pub(crate) habit: Arc<Habit>,
    /// Instances made ahead of need; shared by every copy of this plugin.
    pub(crate) prepared: Arc<Prepared>,
    /// Whether its component is a snapshot, made at load or before.
    pub(crate) snapshot: SnapshotStatus,
    /// Whether its component imports `state` (`0.2.0`): only then does a
    /// call carry a [`CallState`](crate::runtime::state::call::CallState).
    pub(crate) uses_state: bool,
    /// The tenant whose calls this copy serves (`""`: calls without one),
    /// whose state scopes its calls use.
    pub(crate) tenant: Arc<str>,
    /// Its outbound HTTP, when it is granted any; shared by every copy.
    pub(crate) http: Option<Arc<Outbound>>,
    /// The lifecycle hooks it observes (its `subscriptions` answer at load).
    pub(crate) observes: Hooks,
}

impl Plugin {
    /// Reads, compiles, links and probes the component at `spec.path`.
    /// Compilation runs on a blocking thread.
    pub async fn load(engine: &Engine, spec: PluginSpec) -> Result<Plugin, Error> {
        let (e, path) = (engine.clone(), spec.path.clone());
        let (component, digest) = tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(&path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
            Ok::<_, Error>((compile(&e, &path, &bytes)?, digest(&bytes)))
        })
        .await
        .map_err(|source| Error::Task {
            what: "compile",
            source,
        })??;
        Plugin::from_component(engine, spec, component, digest).await
    }

    /// Links an already compiled component (e.g. from the compiled cache)
    /// and probes it: one instantiation and a type check of every exported
    /// seam, so a wrong contract is refused now rather than on every call.
    pub async fn from_component(
        engine: &Engine,
        spec: PluginSpec,
        component: Component,
        digest: String,
    ) -> Result<Plugin, Error> {
        Plugin::from_component_probed(engine, spec, component, digest, None, None).await
    }

    /// Like [`Plugin::from_component`], with the load probe's deadline
    /// capped at `probe_timeout` (when given): a start function that spins
    /// costs a reload at most that long, whatever the plugin's own
    /// `timeout` says. Its prepared instances count against
    /// `prepared_share` too, when given (its directory's).
    pub(crate) async fn from_component_probed(
        engine: &Engine,
        spec: PluginSpec,
        component: Component,
        digest: String,
        probe_timeout: Option<Duration>,
        prepared_share: Option<Arc<PreparedShare>>,
    ) -> Result<Plugin, Error> {
        let path = spec.path;
        if spec.limits.memory_bytes > engine.config().max_memory_bytes {
            return Err(Error::Limits {
                path,
                message: format!(
                    "memory limit {} bytes exceeds the engine's maximum {} bytes",
                    spec.limits.memory_bytes,
                    engine.config().max_memory_bytes
                ),
            });
        }
        let pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| Error::Link {
                path: path.clone(),
                message: format!("{e:#}"),
            })?;
        let exports = Exports::new(&pre);
        let uses_state = component
            .component_type()
            .imports(engine.wasmtime())
            .any(|(name, _)| name.starts_with("toolgate:guard/state@"));
        let quarantines = Arc::new(Quarantines::new(QuarantinePolicy::off()));
        let mut plugin = Plugin {
            name: spec.name.into(),
            path,
            digest,
            limits: spec.limits,
            config: spec.config.to_string().into(),
            on_error: spec.on_error,
            mode: spec.mode,
            engine: engine.clone(),
            pre,
            exports,
            account: None,
            quarantine: quarantines.of(None),
            quarantines,
            habit: Arc::default(),
            prepared: Arc::new(Prepared::new(0, Arc::clone(engine.prepared_slots()), None)),
            snapshot: SnapshotStatus::Plain,
            uses_state,
            tenant: "".into(),
            http: match spec.http.is_empty() {
                true => None,
                false => Some(Arc::new(
                    Outbound::new(spec.http, spec.http_answers).map_err(Error::Engine)?,
                )),
            },
            observes: Hooks::NONE,
        };
        if plugin.seams().is_empty() && !plugin.exports.observes() {
            let exports = component
                .component_type()
                .exports(engine.wasmtime())
                .map(|(name, _)| name.to_string())
                .collect::<Vec<_>>();
            return Err(Error::NoSeams {
                path: plugin.path,
                exports: if exports.is_empty() {
                    "nothing".into()
                } else {
                    exports.join(", ")
                },
            });
        }
        plugin.observes = plugin.probe(probe_timeout).await.map_err(|e| match e {
            Error::ConfigRefused {
                path,
                plugin,
                message,
                ..
            } => Error::ConfigRefused {
                path,
                at: spec.config_at.clone(),
                plugin,
                message,
            },
            other => other,
        })?;
        // A shadow guard keeps none: the slots they would hold are the
        // enforced guards' prepared instances' (and its own calls' spare
        // room).
        let depth = match spec.prepared {
            _ if spec.mode == Mode::Shadow => 0,
            Depth::Fixed(n) => n.min(prepared::MAX_DEPTH),
            Depth::Auto => plugin.auto_depth(probe_timeout).await,
        };
        plugin.prepared = Arc::new(Prepared::new(
            usize::try_from(depth).unwrap_or(0),
            Arc::clone(engine.prepared_slots()),
            prepared_share,
        ));
        plugin.refill();
        Ok(plugin)
    }

    /// What [`Depth::Auto`] means for this plugin: the best of
    /// [`prepared::AUTO_SAMPLES`] instantiations against
    /// [`prepared::AUTO_THRESHOLD`]. Each runs under the probe's deadline;
    /// one that fails (the probe passed, so only a busy host) counts as
    /// slow.
    async fn auto_depth(&self, cap: Option<Duration>) -> u32 {
        let mut best = Duration::MAX;
        for _ in 0..prepared::AUTO_SAMPLES {
            let Ok(mut store) = self.probe_store(cap) else {
                continue;
            };
            let started = std::time::Instant::now();
            if self.start(&mut store).await.is_ok() {
                best = best.min(started.elapsed());
            }
        }
        if best >= prepared::AUTO_THRESHOLD {
            prepared::AUTO_DEPTH
        } else {
            0
        }
    }

    /// A store for a load-time instantiation: the plugin's limits, its
    /// deadline capped at `cap`.
    fn probe_store(&self, cap: Option<Duration>) -> Result<wasmtime::Store<Sandbox>, Error> {
        let (mut store, _) = self.store()?;
        if let Some(cap) = cap {
            arm_deadline(
                &mut store,
                self.limits.timeout.min(cap),
                Some((self.engine.long_lane(), None)),
            );
        }
        Ok(store)
    }

    /// One instantiation (its deadline capped at `cap`), a type check
    /// of every exported seam, and the lifecycle hooks it observes.
    async fn probe(&self, cap: Option<Duration>) -> Result<Hooks, Error> {
        let mut store = self.probe_store(cap)?;
        let instance = self.start(&mut store).await?;
        self.exports
            .check(&mut store, &instance)
            .map_err(|(export, e)| Error::Contract {
                path: self.path.clone(),
                export,
                message: format!("{e:#}"),
            })?;
        match self
            .exports
            .validate_config(&mut store, &instance, &self.config)
            .await
        {
            Ok(None | Some(Ok(()))) => self.subscriptions(&mut store, &instance).await,
            Ok(Some(Err(message))) => Err(Error::ConfigRefused {
                path: self.path.clone(),
                at: None,
                plugin: self.name.to_string(),
                message,
            }),
            Err(e) => Err(Error::ConfigRefused {
                path: self.path.clone(),
                at: None,
                plugin: self.name.to_string(),
                message: format!(
                    "validate-config faulted ({}): {}",
                    crate::fault::Fault::classify(&e, true),
                    root_cause(&e)
                ),
            }),
        }
    }

    /// The guard's `subscriptions` answer, on the probe's instance; a
    /// fault refuses the plugin at load, naming the export.
    async fn subscriptions(
        &self,
        store: &mut wasmtime::Store<Sandbox>,
        instance: &wasmtime::component::Instance,
    ) -> Result<Hooks, Error> {
        self.exports
            .subscriptions(store, instance)
            .await
            .map_err(|e| Error::Start {
                path: self.path.clone(),
                fault: crate::fault::Fault::classify(&e, true),
                message: format!("`observe.subscriptions` faulted: {}", root_cause(&e)),
            })
    }

    /// The lifecycle hooks it observes (its `subscriptions` answer at
    /// load; none when it does not export `observe`).
    pub fn observes(&self) -> Hooks {
        self.observes
    }

    /// Whether it observes `hook`.
    pub fn observes_hook(&self, hook: LifecycleHook) -> bool {
        self.observes.contains(hook)
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The component file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the component's bytes, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The bytes of compiled code its component holds in memory (plugins
    /// of one component share them).
    pub fn code_bytes(&self) -> usize {
        self.code_image().1
    }

    /// Where its compiled code is in memory, and how long it is: the same
    /// for plugins that share it.
    pub(crate) fn code_image(&self) -> (usize, usize) {
        let image = self.pre.component().image_range();
        let start = image.start as usize;
        (start, (image.end as usize).saturating_sub(start))
    }

    /// Whether its component is a snapshot: made when the registry loaded
    /// it, made before (`toolgate snapshot`), or not (and why not, when a
    /// warm-up failed).
    pub fn snapshot_status(&self) -> &SnapshotStatus {
        &self.snapshot
    }

    /// The limits each call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What a fault in this plugin means.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// Whether its verdicts are applied.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the host may write a line of about `bytes` about this
    /// plugin's call now: within its account's log budget (a tenant's
    /// `[shares] tenant_log_kib_per_s` covers the host's lines about its
    /// calls too — its faults, its malformed replies — so a tenant whose
    /// guard faults on every call cannot flood the log); lines beyond it
    /// are counted as dropped. Always, for a call of no account or of the
    /// global one.
    pub(crate) fn may_log_about(&self, bytes: usize) -> bool {
        self.account.as_ref().is_none_or(|a| a.may_log(bytes))
    }

    /// Whether it is quarantined for the account its calls are charged
    /// to, and its recent faults there.
    pub fn health(&self) -> Health {
        self.quarantine.health()
    }

    /// Its health for every account it has run for, summed up, with the
    /// accounts where it is not clear listed (see `Health::accounts`).
    pub fn health_of_every_account(&self) -> Health {
        self.quarantines.health()
    }

    /// Sets when this plugin (and every copy of it) is quarantined, for
    /// every account. A plugin loaded on its own has quarantine off, and
    /// so has a shadow plugin always: its faults never quarantine it.
    pub fn set_quarantine(&self, policy: QuarantinePolicy) {
        if self.mode == Mode::Shadow {
            return;
        }
        self.quarantines.set_policy(policy);
    }

    /// The account its calls are charged to, if any.
    pub fn account(&self) -> Option<&Arc<Account>> {
        self.account.as_ref()
    }

    /// A copy of this plugin serving `tenant`'s calls (`""`: calls without
    /// a tenant): its calls keep state in that tenant's scopes. A registry
    /// gives every plugin of a tenant's chain — the global ones included —
    /// that tenant, so a global guard's state is never shared between
    /// tenants.
    pub fn serving(&self, tenant: &str) -> Plugin {
        Plugin {
            tenant: tenant.into(),
            ..self.clone()
        }
    }

    /// Whether its component imports `state`.
    pub fn uses_state(&self) -> bool {
        self.uses_state
    }

    /// Whether its component checks its configuration at load (exports
    /// `validate-config`).
    pub fn validates_config(&self) -> bool {
        self.exports.validates_config()
    }

    /// A copy of this plugin whose calls are charged to `account`. It is
    /// quarantined for that account alone, so a tenant whose calls make a
    /// global guard fault quarantines it for its own calls only; every copy
    /// charged to the same account shares that quarantine. Whether its
    /// calls have lately run long is its own too (see
    /// `crate::runtime::turns::Habit`): another tenant's calls never make this
    /// account's start on the long lane.
    pub fn charged_to(&self, account: Arc<Account>) -> Plugin {
        Plugin {
            quarantine: self.quarantines.of(account.tenant()),
            habit: Arc::default(),
            account: Some(account),
            ..self.clone()
        }
    }

    /// The seams this plugin exports, in firing order.
    pub fn seams(&self) -> Vec<Seam> {
        Seam::ALL
            .into_iter()
            .filter(|&s| self.subscribes(s))
            .collect()
    }

    /// Whether the plugin exports `seam`.
    pub fn subscribes(&self, seam: Seam) -> bool {
        self.exports.has(seam)
    }

    /// Instances kept made ahead of need: the spec's depth, or what
    /// [`Depth::Auto`] decided at load.
    pub fn prepared_depth(&self) -> u32 {
        u32::try_from(self.prepared.depth()).unwrap_or(u32::MAX)
    }

    /// Drops the instances made ahead of need and starts making them
    /// again (within the room there is now) once the plugin is idle.
    pub fn discard_prepared(&self) {
        self.prepared.discard();
        self.refill();
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("seams", &self.seams())
            .finish_non_exhaustive()
    }
}

/// SHA-256 of `bytes`, as lowercase hex.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compiles component bytes, telling a core module or a non-wasm file apart
/// from a component that fails to validate.
pub fn compile(engine: &Engine, path: &Path, bytes: &[u8]) -> Result<Component, Error> {
    check_header(path, bytes)?;
    Component::from_binary(engine.wasmtime(), bytes).map_err(|e| Error::Compile {
        path: path.into(),
        message: format!("{e:#}"),
    })
}

/// Checks the header: a core module or a file that is not wasm is told
/// apart from a component that fails to compile.
pub(crate) fn check_header(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    const MAGIC: &[u8] = b"\0asm";
    match bytes.get(..8) {
        Some(h) if h.starts_with(MAGIC) && h[4..8] == [1, 0, 0, 0] => {
            Err(Error::CoreModule { path: path.into() })
        }
        Some(h) if h.starts_with(MAGIC) => Ok(()),
        _ => Err(Error::NotWasm { path: path.into() }),
    }
}

/// The innermost cause of a guest error, for a trace's `detail`.
pub(crate) fn root_cause(e: &wasmtime::Error) -> String {
    e.root_cause().to_string()
}
