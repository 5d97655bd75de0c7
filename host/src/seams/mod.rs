//! The four seams: the events and verdicts they carry, and the chain rules
//! that run a seam's guards in order, over host types only.

pub mod chain;
pub mod event;
