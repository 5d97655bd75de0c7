//! Calling guards: one loaded plugin, one guard call the same way at every
//! seam, the WIT types it crosses, quarantine, the chain rules that turn
//! the calls of one seam into a decision, lifecycle observations in each
//! run's order, and pre-initialised snapshots.
//!
//! Layer 2 (docs/design.md, "A map of the code"): imports `runtime` and the
//! crate root's vocabulary, never `load`, `serve` or `tools`.

pub(crate) mod chain;
pub(crate) mod guard_call;
pub(crate) mod observe;
pub(crate) mod plugin;
pub(crate) mod quarantine;
pub(crate) mod snapshot;
pub(crate) mod wit;
