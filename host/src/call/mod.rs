//! One guard call, sandboxed: the loaded plugin, the call written once for
//! every seam, the WIT types it lowers to and lifts from, the store it runs
//! in, its limits, quarantine, and why it failed.

pub(crate) mod bindings;
pub mod fault;
pub(crate) mod guard_call;
pub mod limits;
pub mod plugin;
pub mod quarantine;
pub(crate) mod sandbox;
pub(crate) mod wit;
