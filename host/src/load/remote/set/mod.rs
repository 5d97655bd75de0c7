//! Policy sets: a whole plugin directory (its manifest, components and
//! `tenants/`) published as one OCI artifact (`toolgate push --set`), and
//! served by every replica that follows its tag (`toolgate serve --set`).
//!
//! - `pack.rs`: the directory as one deterministic tar layer, and back;
//! - `source.rs`: [`SetSource`], which resolves the tag every poll, and
//!   fetches, verifies (digest, signature), unpacks and loads each new
//!   version into a registry of its own, swapped in whole — a replica
//!   never serves a mix of two versions — or refuses it, the version
//!   serving kept.
//!
//! See `docs/remote.md`, "Policy sets", and `docs/deploy.md`.

pub(crate) mod pack;
mod source;

pub use source::{SetOptions, SetRefusal, SetSource, SetStatus};

/// The media type of a policy set's one layer: the directory's tar.
pub const SET_LAYER_MEDIA_TYPE: &str = "application/vnd.toolgate.set.v1.tar";

/// The media type of a policy set's config.
pub const SET_CONFIG_MEDIA_TYPE: &str = "application/vnd.toolgate.set.config.v1+json";
