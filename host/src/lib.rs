//! toolgate: run AI-agent tool-call guards as sandboxed WebAssembly
//! components.
//!
//! A guard is a component built against `wit/guard.wit`
//! (`toolgate:guard@0.1.0`) that exports one or more of four seams —
//! routing, rewrite, steering, result — mirroring symfonic's callback
//! hooks. Each hook call runs on a fresh instance under fuel, memory and
//! wall-clock limits; a guard that faults is logged and skipped, exactly
//! like a Python handler that raised.
//!
//! Data flows one way: an [`Event`] goes into a [`Chain`], each
//! [`Plugin`] is called on a fresh store, its reply or [`Fault`] becomes a
//! [`GuardTrace`] entry, and the chain rules produce a [`Decision`].
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

// One folder per part of the host (docs/design.md, "A map of the code").
// Every module is declared here, at the crate root: its path — its name in
// the API and its log target (`toolgate::sandbox`) — does not depend on the
// folder its file is in.

// serve/: the faces, and what they share (one request parsed and answered
// the same way, the description of what is loaded, metrics, the log).
#[path = "serve/connections.rs"]
mod connections;
#[path = "serve/describe.rs"]
pub mod describe;
#[path = "serve/logging.rs"]
pub mod logging;
#[path = "serve/metrics.rs"]
pub mod metrics;
#[path = "serve/request.rs"]
pub mod request;
#[path = "serve/server.rs"]
pub mod server;
#[path = "serve/tokens.rs"]
pub mod tokens;

// seams/: what the four seams carry, and their chain rules.
#[path = "seams/chain.rs"]
pub mod chain;
#[path = "seams/event.rs"]
pub mod event;

// call/: one guard call, sandboxed (the plugin, the call written once for
// every seam, the WIT types, its store, limits, quarantine and faults).
#[path = "call/bindings.rs"]
mod bindings;
#[path = "call/fault.rs"]
pub mod fault;
#[path = "call/guard_call.rs"]
mod guard_call;
#[path = "call/limits.rs"]
pub mod limits;
#[path = "call/plugin.rs"]
pub mod plugin;
#[path = "call/quarantine.rs"]
pub mod quarantine;
#[path = "call/sandbox.rs"]
mod sandbox;
#[path = "call/wit.rs"]
mod wit;

// runtime/: what every call shares (the engine and its pool, the tenants'
// shares, turns for long calls and big teardowns, prepared instances).
#[path = "runtime/engine.rs"]
pub mod engine;
#[path = "runtime/prepared.rs"]
pub mod prepared;
#[path = "runtime/shares.rs"]
pub mod shares;
#[path = "runtime/turns.rs"]
pub mod turns;

// load/: plugins in (the live registry, the loader of one directory, the
// watcher, safe file reads, manifests and policy, cache and compiles).
#[path = "load/batch.rs"]
mod batch;
#[path = "load/cache.rs"]
pub mod cache;
#[path = "load/compile.rs"]
pub mod compile;
#[path = "load/compile_queue.rs"]
pub mod compile_queue;
#[path = "load/dir.rs"]
pub mod dir;
#[path = "load/files.rs"]
pub mod files;
#[path = "load/loader.rs"]
mod loader;
#[path = "load/manifest.rs"]
pub mod manifest;
#[path = "load/policy.rs"]
pub mod policy;
#[path = "load/registry.rs"]
pub mod registry;
#[path = "load/watch.rs"]
pub mod watch;

// tools/: beside the serving path (snapshots, benchmarks).
#[path = "tools/bench.rs"]
pub mod bench;
#[path = "tools/snapshot.rs"]
pub mod snapshot;

// Used by every part.
pub mod error;
pub mod tenant;

pub use chain::{Chain, Decision, GuardTrace, Outcome, Verdict};
pub use engine::{Engine, EngineConfig};
pub use error::Error;
pub use event::{Event, Seam};
pub use fault::Fault;
pub use limits::Limits;
pub use plugin::{OnError, Plugin, PluginSpec};
pub use policy::Policy;
/// Deprecated: the former name of [`PluginSet`] (see [`registry::Snapshot`]).
#[allow(
    deprecated,
    reason = "re-exports the deprecated alias for code that still names it"
)]
pub use registry::Snapshot;
pub use registry::{PluginSet, Registry, RegistryOptions};
pub use request::DecideRequest;
pub use tenant::TenantName;
pub use turns::LanePriority;
