//! Beside the serving path: measuring what guards cost.
//!
//! Layer 4 (docs/design.md, "A map of the code"), beside `serve`: imports
//! every layer below, and nothing imports it.

pub(crate) mod bench;
