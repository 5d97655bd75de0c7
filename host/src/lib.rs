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

pub mod bench;
mod bindings;
pub mod cache;
pub mod chain;
pub mod compile;
mod connections;
pub mod describe;
pub mod dir;
pub mod engine;
pub mod error;
pub mod event;
pub mod fault;
pub mod files;
mod guard_call;
pub mod limits;
pub mod logging;
pub mod manifest;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod prepared;
pub mod quarantine;
mod reaper;
pub mod registry;
pub mod request;
mod sandbox;
pub mod server;
pub mod shares;
pub mod snapshot;
pub mod tenant;
pub mod turns;
pub mod watch;
mod wit;

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
