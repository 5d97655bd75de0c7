//! toolgate: run AI-agent tool-call guards as sandboxed WebAssembly
//! components.
//!
//! A guard is a component built against `wit/guard.wit`
//! (`toolgate:guard@0.3.0`; `0.1.0` and `0.2.0` guards load unchanged)
//! that exports one or more of five seams — routing, rewrite, steering,
//! result, response — and may observe symfonic's thirteen lifecycle events
//! ([`LifecycleEvent`], [`Chain::observe`]), mirroring symfonic's callback
//! hooks. Each hook call runs on a fresh instance under fuel, memory and
//! wall-clock limits; a guard that faults is logged and skipped, exactly
//! like a Python handler that raised.
//!
//! Data flows one way: an [`Event`] goes into a [`Chain`], each
//! [`Plugin`] is called on a fresh store, its reply or [`Fault`] becomes a
//! [`GuardTrace`] entry, and the chain rules produce a [`Decision`].
//!
//! The public API is the list this file re-exports, and nothing else: the
//! types at the crate root (events in, a chain and its plugins, the
//! engine and limits, loading and the registry, the faces' request),
//! the events in [`event`], and small namespaces of functions
//! ([`server`], [`manifest`], [`remote`], [`dir`], [`watch`], [`cache`], [`compile`],
//! [`snapshot`], [`bench`](mod@bench), [`logging`]). Everything else is private to
//! the crate, in the layered parts docs/design.md maps.
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolgate::Error> {
//! use std::sync::Arc;
//! use toolgate::{Chain, Engine, EngineConfig, Plugin, PluginSpec};
//!
//! let engine = Engine::new(EngineConfig::default())?;
//! let guard = Plugin::load(&engine, PluginSpec::new("sql-guard.wasm")).await?;
//! let chain = Chain::new(vec![Arc::new(guard)]);
//! let event = serde_json::from_str(
//!     r#"{"run_id":"r","tool_name":"run_query","call_id":"c","args":{"sql":"DELETE FROM users"}}"#,
//! ).expect("valid event");
//! let decision = chain.steering(&event, &serde_json::json!({})).await;
//! println!("{}", serde_json::to_string(&decision).expect("serialisable"));
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

// The parts, bottom to top (docs/design.md, "A map of the code"). A part
// imports only from the parts listed before it; `scripts/check-layers`
// fails the build's lint step on an import that goes up.
//
// 0. the crate root's vocabulary: `error`, `event`, `fault`, `tenant`;
// 1. `runtime`: the engine, a call's store and limits, shares, turns;
// 2. `call`: a plugin, one guard call, quarantine, the chain rules;
// 3. `load`: directories, manifests, compiles, the cache, the registry;
// 4. `serve` (the faces' request, HTTP, metrics, log) and `tools`.
mod error;
pub mod event;
mod fault;
mod tenant;

mod runtime;

mod call;

mod load;

mod serve;
mod tools;

// The public API: every name a user of the library needs, and no other.

// Events in, a chain of guards, a decision out.
pub use call::chain::{
    Chain, Decision, GuardTrace, Outcome, Shadow, Verdict, fail_closed_message, withheld_message,
};
pub use call::observe::Observed;
pub use call::plugin::{Mode, OnError, Plugin, PluginSpec, digest};
pub use call::snapshot::{SnapshotMode, SnapshotStatus};
pub use error::{Error, ManifestError};
pub use event::{Event, Hooks, LifecycleEvent, LifecycleHook, Seam};
pub use fault::{Fault, Whose};
pub use tenant::TenantName;

// What every call shares: the engine, per-plugin limits, tenants' shares.
pub use runtime::engine::{Engine, EngineConfig, StateBackend, default_long_lane};
pub use runtime::http::grant::{HostPattern, HttpGrant};
pub use runtime::http::transport::{HttpAnswer, HttpAnswers};
pub use runtime::limits::Limits;
#[doc(hidden)]
pub use runtime::limits::unit as limit_unit;
pub use runtime::prepared::Depth;
pub use runtime::shares::{Rate, Shares};
pub use runtime::turns::LanePriority;

// Plugins in: directories, manifests, compiles, the live registry.
pub use load::cache::{CacheStats, CompiledCache};
pub use load::compile::{CompileBounds, Compiler};
pub use load::compile_queue::CompileStats;
pub use load::functions::FunctionStats;
pub use load::policy::Policy;
pub use load::progress::{LoadStep, PluginLoading};
pub use load::registry::{
    IssueKind, LoadIssue, LoadLimits, NotReady, PluginSet, Registry, RegistryOptions, ReloadReport,
};
pub use load::remote::FetchLimits;

// The faces: one request for every face, the HTTP service, metrics.
pub use serve::metrics::Metrics;
pub use serve::observe::ObserveRequest;
pub use serve::request::{DecideRequest, NotDecided};
pub use serve::server::ServerConfig;
pub use serve::tokens::TenantTokens;

/// `toolgate.toml`, the manifest of a plugin directory (`docs/plugins.md`).
pub mod manifest {
    pub use crate::load::manifest::{
        Entry, FILE_NAME, Manifest, Remote, Scope, key_path, line_of, toml_to_json,
    };
}

/// Plugins fetched by digest from a URL or an OCI registry, publishing
/// one (`toolgate push`; `docs/remote.md`, "Remote plugin sources"), and
/// policy sets followed by their tag (`docs/remote.md`, "Policy sets").
pub mod remote {
    pub use crate::load::remote::set::{
        SET_CONFIG_MEDIA_TYPE, SET_LAYER_MEDIA_TYPE, SetOptions, SetRefusal, SetSource, SetStatus,
    };
    pub use crate::load::remote::signature::{SigningKey, Trust, TrustedKey};
    pub use crate::load::remote::{
        PushOptions, Remote, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, push, push_set,
    };
}

/// Guards' state (the `state` import): its scopes, the store it lives in,
/// and what the operator sees of it (`toolgate state`).
pub mod state {
    pub use crate::runtime::state::{
        Scope, ScopeId, StateEntry, StateFilter, StateStore, StateUsage,
    };
}

/// Loading a directory without a registry (no manifest, no tenants).
pub mod dir {
    pub use crate::load::dir::{DirRules, components, components_with, load_dir, load_dir_with};
    pub use crate::load::files::Symlinks;
}

/// Hot reload: the watcher's settle time and what it reacts to.
pub mod watch {
    pub use crate::load::watch::{DEFAULT_SETTLE, Dir, WatchHandle, relevant, unsettled_reloads};
}

/// The compiled cache's key and bounds.
pub mod cache {
    pub use crate::load::cache::{MAX_ENTRY_BYTES, key};
    pub use crate::load::functions::{
        FUNCTION_CACHE_MAX_BYTES, MAX_FUNCTION_BYTES, SHARD_MAX_BYTES,
    };
}

/// The compile child: a component compiled in a process of its own, under
/// a memory and a CPU bound (what `toolgate compile` runs).
pub mod compile {
    pub use crate::load::compile::{ChildArgs, child_main, child_main_from};
}

/// Pre-initialising a guard into a snapshot (`toolgate snapshot`).
pub mod snapshot {
    pub use crate::call::snapshot::{Inspection, default_warm_up, inspect, plan, snapshot};
}

/// What guards cost, measured (`toolgate bench`).
pub mod bench {
    pub use crate::tools::bench::{
        ChainLoad, GuardCost, Latency, Report, Reused, SeamCost, Settings, Spread, measure,
        native_floor,
    };
}

/// `toolgate serve`: the seams over HTTP.
pub mod server {
    pub use crate::serve::observe::hooks_body;
    pub use crate::serve::server::{
        Draining, Served, ServerConfig, Stop, exposure_warning, router, serve, serve_with,
        shutdown_signal,
    };
}

/// The decision log: one JSON line per decision, from every face, to a
/// file, stdout or an HTTP endpoint (`docs/decision-log.md`, "The decision
/// log"; each line's shape: `docs/decision-log.schema.json`).
pub mod decision_log {
    pub use crate::load::manifest::log_table::from_json;
    pub use crate::runtime::log_writer::{
        DecisionLog, DecisionLogConfig, Include, Sink, dropped_total, redact::MASKED,
    };
    pub use crate::serve::decision_line::schema;
}

/// The log every face writes (`$TOOLGATE_LOG`).
pub mod logging {
    pub use crate::runtime::log_writer::now_rfc3339;
    pub use crate::serve::logging::{
        LogFormat, OneLine, filter, init, init_as, init_serving, one_line,
    };
}
