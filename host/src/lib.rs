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

// The tree groups the modules by part (docs/design.md, "A map of the
// code"); each module is named from the crate root, one path each.
mod call;
mod load;
mod runtime;
mod seams;
mod serve;
mod tools;

pub mod error;
pub mod tenant;

use call::{bindings, guard_call, sandbox, wit};
pub use call::{fault, limits, plugin, quarantine};
use load::loader;
pub use load::{cache, compile, dir, files, manifest, policy, registry, watch};
use runtime::reaper;
pub use runtime::{engine, prepared, shares, turns};
pub use seams::{chain, event};
use serve::connections;
pub use serve::{describe, logging, metrics, request, server};
pub use tools::{bench, snapshot};

#[doc(no_inline)]
pub use chain::{Chain, Decision, GuardTrace, Outcome, Verdict};
#[doc(no_inline)]
pub use engine::{Engine, EngineConfig};
pub use error::Error;
#[doc(no_inline)]
pub use event::{Event, Seam};
#[doc(no_inline)]
pub use fault::Fault;
#[doc(no_inline)]
pub use limits::Limits;
#[doc(no_inline)]
pub use plugin::{OnError, Plugin, PluginSpec};
#[doc(no_inline)]
pub use policy::Policy;
/// Deprecated: the former name of [`PluginSet`] (see [`registry::Snapshot`]).
#[allow(
    deprecated,
    reason = "re-exports the deprecated alias for code that still names it"
)]
#[doc(no_inline)]
pub use registry::Snapshot;
#[doc(no_inline)]
pub use registry::{PluginSet, Registry, RegistryOptions};
#[doc(no_inline)]
pub use request::DecideRequest;
pub use tenant::TenantName;
