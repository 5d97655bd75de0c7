//! Logging through the host.
//!
//! Each line goes to the host's log, tagged with the plugin's name. The host
//! budgets log calls and bytes per hook call: going over the budget traps the
//! call (counted as a `host-budget` fault), so log what matters, not every
//! byte you see.
//!
//! ```rust,ignore
//! use toolgate_guest::log;
//!
//! log::info!("tool={} call={}", event.tool_name, event.call_id);
//! log::write(log::Level::Warn, "something odd");
//! ```
//!
//! Anything a guard prints to stdout or stderr also reaches the host's log,
//! bounded, without a level.

use crate::bindings::host;

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very fine detail.
    Trace,
    /// Diagnostic detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the guard handled.
    Warn,
    /// Something failed.
    Error,
}

impl From<Level> for host::Level {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => host::Level::Trace,
            Level::Debug => host::Level::Debug,
            Level::Info => host::Level::Info,
            Level::Warn => host::Level::Warn,
            Level::Error => host::Level::Error,
        }
    }
}

/// Writes one line to the host's log at `level`.
pub fn write(level: Level, message: &str) {
    host::log(level.into(), message);
}

/// Logs a `format!`-style line at a given [`Level`]:
/// `log!(Level::Info, "x={}", x)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __toolgate_log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log::write($level, &::std::format!($($arg)+))
    };
}

/// Logs a `format!`-style line at trace level.
#[doc(hidden)]
#[macro_export]
macro_rules! __toolgate_log_trace {
    ($($arg:tt)+) => { $crate::log::log!($crate::log::Level::Trace, $($arg)+) };
}

/// Logs a `format!`-style line at debug level.
#[doc(hidden)]
#[macro_export]
macro_rules! __toolgate_log_debug {
    ($($arg:tt)+) => { $crate::log::log!($crate::log::Level::Debug, $($arg)+) };
}

/// Logs a `format!`-style line at info level.
#[doc(hidden)]
#[macro_export]
macro_rules! __toolgate_log_info {
    ($($arg:tt)+) => { $crate::log::log!($crate::log::Level::Info, $($arg)+) };
}

/// Logs a `format!`-style line at warn level.
#[doc(hidden)]
#[macro_export]
macro_rules! __toolgate_log_warn {
    ($($arg:tt)+) => { $crate::log::log!($crate::log::Level::Warn, $($arg)+) };
}

/// Logs a `format!`-style line at error level.
#[doc(hidden)]
#[macro_export]
macro_rules! __toolgate_log_error {
    ($($arg:tt)+) => { $crate::log::log!($crate::log::Level::Error, $($arg)+) };
}

#[doc(inline)]
pub use crate::__toolgate_log as log;
#[doc(inline)]
pub use crate::__toolgate_log_debug as debug;
#[doc(inline)]
pub use crate::__toolgate_log_error as error;
#[doc(inline)]
pub use crate::__toolgate_log_info as info;
#[doc(inline)]
pub use crate::__toolgate_log_trace as trace;
#[doc(inline)]
pub use crate::__toolgate_log_warn as warn;
