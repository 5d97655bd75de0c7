//! The one place that turns `wit/guard.wit` into Rust types.
//!
//! The host binds to the `guard` world, which exports all four seams; a
//! component may export any non-empty subset of it. Each seam's exports are
//! looked up separately (`GuestIndices::new`), so a missing seam is simply
//! "not subscribed".

#![allow(missing_docs, reason = "generated code")]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "guard",
    imports: { default: trappable },
    exports: { default: async },
});

pub use self::exports::toolgate::guard::{result, rewrite, routing, steering};
pub use self::toolgate::guard::{host, types};
