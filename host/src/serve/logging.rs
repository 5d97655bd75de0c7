//! The log every face writes: `tracing` to standard error, filtered by
//! `$TOOLGATE_LOG` (an `EnvFilter` string; default `warn`).
//!
//! At `debug`, each decision is a span `decide` (seam, tenant) and each
//! guard call inside it a span `guard` (plugin, digest, seam, account; on
//! close: fault, fuel, micros), printed when it closes. The runtime's and
//! the compiler's own logs (wasmtime, cranelift, regalloc2) stay at `warn`
//! unless `$TOOLGATE_LOG` names them.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Targets kept at `warn` unless `$TOOLGATE_LOG` names them: at `debug`
/// they would print every function they compile.
const QUIET: [&str; 5] = [
    "cranelift_codegen",
    "cranelift_frontend",
    "regalloc2",
    "wasmtime",
    "wasmtime_internal_cranelift",
];

/// The filter `$TOOLGATE_LOG` describes (`warn` when unset or invalid),
/// with the compiler's targets kept quiet.
pub fn filter() -> EnvFilter {
    let user = std::env::var("TOOLGATE_LOG").unwrap_or_default();
    let mut directives: Vec<String> = QUIET
        .iter()
        .filter(|t| !user.contains(*t))
        .map(|t| format!("{t}=warn"))
        .collect();
    directives.push(if user.trim().is_empty() {
        "warn".into()
    } else {
        user
    });
    EnvFilter::try_new(directives.join(","))
        .or_else(|_| EnvFilter::try_new("warn"))
        .unwrap_or_default()
}

/// Installs the log on standard error, unless the process already has a
/// subscriber (then this does nothing). Colours (ANSI escape codes) only
/// when standard error is a terminal: a log file or pipe gets plain text.
///
/// A line that cannot be written (standard error closed: the process that
/// read it went away) is dropped. tracing-subscriber's default would report
/// the failure with `eprintln!` — on the same closed stream, which panics
/// and would take the server down at its next log line.
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .try_init();
}
