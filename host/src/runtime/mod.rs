//! What every guard call shares: the wasmtime engine and its pool, the
//! tenants' shares of it, turns on the CPU for long calls, prepared
//! instances, and the reaper that tears big instances down.

pub mod engine;
pub mod prepared;
pub(crate) mod reaper;
pub mod shares;
pub mod turns;
