//! Plugins in: the live registry, the loader of one directory, the
//! watcher, safe file reads, manifests and the operator's policy, and the
//! compiled cache and bounded compiles.

pub mod cache;
pub mod compile;
pub mod dir;
pub mod files;
pub(crate) mod loader;
pub mod manifest;
pub mod policy;
pub mod registry;
pub mod watch;
