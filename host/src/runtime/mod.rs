//! What every guard call shares, below any one call: the wasmtime engine
//! and its instance pool, the store a call runs in (its sandbox, limits
//! and the WIT bindings), the tenants' shares of capacity, turns on the CPU
//! for long calls, instances prepared ahead of need, and room for work run after
//! the answer.
//!
//! Layer 1 (docs/design.md, "A map of the code"): imports only the crate
//! root's vocabulary (`error`, `event`, `fault`, `tenant`).

pub(crate) mod backlog;
pub(crate) mod bindings;
pub(crate) mod engine;
pub(crate) mod http;
pub(crate) mod limits;
pub(crate) mod log_writer;
pub(crate) mod prepared;
pub(crate) mod runs;
pub(crate) mod sandbox;
pub(crate) mod shares;
pub(crate) mod state;
pub(crate) mod turns;
