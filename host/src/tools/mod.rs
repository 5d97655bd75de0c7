//! Tools beside the serving path: pre-initialising a guard, and measuring
//! what guards cost.

pub mod bench;
pub mod snapshot;
