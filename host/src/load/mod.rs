//! Plugins in: the live registry, the loader of one directory, the
//! watcher, safe file reads, manifests and the operator's policy, the
//! compiled cache and bounded, fair compiles.
//!
//! Layer 3 (docs/design.md, "A map of the code"): imports `call`,
//! `runtime` and the crate root's vocabulary, never `serve` or `tools`.

pub(crate) mod admission;
pub(crate) mod arrivals;
pub(crate) mod batch;
pub(crate) mod cache;
pub(crate) mod compile;
pub(crate) mod compile_queue;
pub(crate) mod dir;
pub(crate) mod files;
pub(crate) mod functions;
pub(crate) mod loader;
pub(crate) mod manifest;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod progress;
pub(crate) mod registry;
pub(crate) mod remote;
pub(crate) mod watch;
