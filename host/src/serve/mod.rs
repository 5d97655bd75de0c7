//! The faces and what they share: one request parsed and answered the same
//! way, the HTTP service and its connections, tokens, the description of
//! what is loaded, metrics and the log.
//!
//! Layer 4 (docs/design.md, "A map of the code"): imports every layer
//! below; nothing imports it but the faces (the binary, the Python
//! package).

pub(crate) mod connections;
pub(crate) mod decision_line;
pub(crate) mod decision_record;
pub(crate) mod describe;
pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod observe;
pub(crate) mod request;
pub(crate) mod server;
pub(crate) mod tokens;
