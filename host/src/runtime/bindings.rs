//! The one place that turns the WIT contract into Rust types.
//!
//! The host binds to the `guard` world of `wit/guard.wit` (`0.3.0`), which
//! exports all five seams and the optional `config` check; a component may
//! export any non-empty subset of the seams. Each export is looked up
//! separately (`GuestIndices::new`), so a missing seam is simply "not
//! subscribed".
//!
//! Components built against `0.2.0` or `0.1.0` (`wit/v0.2.0/guard.wit`,
//! `wit/v0.1.0/guard.wit`, frozen) load too: [`v0_2`] and [`v0_1`] bind
//! those versions' exports and imports, with their `types` mapped onto
//! `0.3.0`'s Rust types — the records are the same word for word, and
//! wasmtime checks a component's types structurally — so one lowered event
//! serves a guard of any version.

#![allow(missing_docs, reason = "generated code")]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "guard",
    imports: {
        "toolgate:guard/state.get": async | trappable,
        "toolgate:guard/state.set": async | trappable,
        "toolgate:guard/state.delete": async | trappable,
        "toolgate:guard/state.add": async | trappable,
        "toolgate:guard/http.send": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

pub use self::exports::toolgate::guard::{
    config, observe, response, result, rewrite, routing, steering,
};
pub use self::toolgate::guard::{host, http, state, types};

/// The `0.1.0` contract: its exports and its `host` import.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "guard",
        imports: { default: trappable },
        exports: { default: async },
        with: { "toolgate:guard/types": super::types },
    });

    pub use self::exports::toolgate::guard::{result, rewrite, routing, steering};
    pub use self::toolgate::guard::host;
}

/// The `0.2.0` contract: its exports and its imports (`host`, `state`,
/// `http`).
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "guard",
        imports: {
            "toolgate:guard/state.get": async | trappable,
            "toolgate:guard/state.set": async | trappable,
            "toolgate:guard/state.delete": async | trappable,
            "toolgate:guard/state.add": async | trappable,
            "toolgate:guard/http.send": async | trappable,
            default: trappable,
        },
        exports: { default: async },
        with: { "toolgate:guard/types": super::types },
    });

    pub use self::exports::toolgate::guard::{config, result, rewrite, routing, steering};
    pub use self::toolgate::guard::{host, http, state};
}
