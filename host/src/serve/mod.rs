//! The faces: the HTTP service and what every face shares — one request
//! parsed and answered the same way, the description of what is loaded,
//! the metrics and the log.

pub(crate) mod connections;
pub mod describe;
pub mod logging;
pub mod metrics;
pub mod request;
pub mod server;
