//! Classifying why a guard call failed, from the error's type alone.

use schemars::JsonSchema;
use serde::Serialize;
use wasmtime::Trap;

/// Whose doing a [`Fault`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whose {
    /// The guard's own: its `on_error` decides.
    Guard,
    /// The host's: the request is not decided (backpressure).
    Host,
}

/// Declares [`Fault`] from one table: each row a variant (with its doc),
/// its name, whose fault it is, whether it counts toward quarantine and
/// its one-line meaning (docs/failures.md). After wasmtime's
/// `generate_trap_type!`.
macro_rules! faults {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal, $whose:ident, $counts:ident, $meaning:literal; )*) => {
        /// Why a guard call was abandoned.
        ///
        /// Generated, with its names, whose fault each is, whether it counts
        /// toward quarantine and its meaning, from the one table in `fault.rs`
        /// (which also gives the schema's names and the table in
        /// docs/failures.md).
        ///
        /// A fault is either the guard's own doing ([`Fault::is_guards`]: it
        /// trapped, ran out of fuel, memory or stack, ran past its deadline while
        /// it had the CPU, returned garbage, or is quarantined for doing so) or the
        /// host's (it could not run the guard in time: no instance slot, its
        /// account's share taken, starved of CPU, shutting down, the state store
        /// full). A guard's own fault is data: the chain logs it, counts it toward quarantine and goes
        /// on as if the guard had returned nothing (or, for a fail-closed plugin,
        /// steers with a fixed message). A host's fault is never the guard's: it
        /// is not counted toward quarantine and never decides anything — the
        /// request is answered as not decided (backpressure: HTTP 503 with
        /// `Retry-After`, `toolgate.BusyError`), see docs/failures.md.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Fault {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Fault {
            /// Every fault, in the table's order.
            pub const ALL: &'static [Fault] = &[$(Fault::$variant),*];

            /// The kebab-case name used in traces, logs and metrics.
            pub fn as_str(self) -> &'static str {
                match self { $(Fault::$variant => $name,)* }
            }

            /// Whose doing it is.
            pub fn whose(self) -> Whose {
                match self { $(Fault::$variant => Whose::$whose,)* }
            }

            /// Whether it counts toward the guard's quarantine.
            pub fn counts_toward_quarantine(self) -> bool {
                match self { $(Fault::$variant => faults!(@counts $counts),)* }
            }

            /// What it means, in one line (docs/failures.md's table).
            pub fn meaning(self) -> &'static str {
                match self { $(Fault::$variant => $meaning,)* }
            }
        }
    };
    (@counts counted) => { true };
    (@counts uncounted) => { false };
}

faults! {
    /// The call burnt its fuel budget.
    OutOfFuel = "out-of-fuel", Guard, counted,
        "it burnt its fuel";
    /// The guest ran past its `timeout`: its own run time — the CPU time
    /// its instance spent running (start-up, guest code, its host calls) —
    /// not time it waited for a core.
    Deadline = "deadline", Guard, counted,
        "it *ran* past its `timeout_ms`: run time is the CPU time its instance spent (guest code, start-up, its host calls), never time it waited for a core";
    /// The guest grew memory (or a table) past its cap.
    Memory = "memory", Guard, counted,
        "it grew past its memory cap";
    /// The wasm stack overflowed (e.g. unbounded recursion).
    StackOverflow = "stack-overflow", Guard, counted,
        "it recursed too deep";
    /// The guest executed `unreachable` (a Rust panic or abort lands here).
    Unreachable = "unreachable", Guard, counted,
        "it panicked or aborted (`unreachable`)";
    /// Any other wasm trap (out-of-bounds access, division by zero, ...).
    Trap = "trap", Guard, counted,
        "it trapped otherwise (out-of-bounds access, division by zero, ...)";
    /// The guest called host imports more often, or logged more, than its
    /// budget allows, or passed a host import more data in one call than
    /// the per-crossing data budget (wasmtime's hostcall fuel).
    HostBudget = "host-budget", Guard, counted,
        "it called the host, or logged, more than its budget, or passed a host import too much data at once";
    /// The guest returned a string larger than `max_return_bytes`, or a
    /// reply larger than the per-crossing data budget (wasmtime's hostcall
    /// fuel: refused before it is copied).
    OversizedReturn = "oversized-return", Guard, counted,
        "it returned more than `max_return_bytes`";
    /// The guest's reply could not be read: a result that fails to lift
    /// (pointer out of bounds, invalid UTF-8, bad variant tag), or another
    /// error raised while calling it.
    InvalidResult = "invalid-result", Guard, counted,
        "it returned something that does not fit the contract";
    /// The guest could not be instantiated for this call (its start-up
    /// failed in a way that is not one of the traps above).
    Instantiate = "instantiate", Guard, counted,
        "it could not start";
    /// No instance slot was free (the engine's `max_instances`). The
    /// host's doing.
    Capacity = "capacity", Host, uncounted,
        "no instance slot free in the engine's pool (a shadow run: no spare room)";
    /// The account the call is charged to (its tenant's, or the global
    /// one) had no instance or memory left within its wait: the caller's
    /// own share is exhausted. See `crate::runtime::shares`. The host's doing.
    ShareExhausted = "share-exhausted", Host, uncounted,
        "its account (its tenant's, or the global one) had no instance or memory free within `[shares] wait_ms`";
    /// The host could not give the call the CPU to finish in time: it had
    /// used less than its `timeout` of run time when its wall-clock bound
    /// (see [`crate::runtime::limits::Limits::wall_bound`]) passed — the cores were
    /// busy with other work — or the host was shutting down. The host's
    /// doing.
    Overloaded = "overloaded", Host, uncounted,
        "the host did not give it the CPU to finish: still unfinished at its wall-clock bound (4 × `timeout_ms`, at least `timeout_ms` + 1 s) having run less than its timeout; or the host was shutting down";
    /// The guard is quarantined after faulting repeatedly, and was not run.
    /// See `crate::call::quarantine`.
    Quarantined = "quarantined", Guard, uncounted,
        "it faulted `[quarantine] faults` times lately; not run until a probe passes (the consequence, not counted again)";
    /// The guard went over a state budget: operations in one call, or keys
    /// or bytes in one of its scopes (`state_ops`, `state_keys`,
    /// `state_kib`), or the memory backend's total.
    StateBudget = "state-budget", Guard, counted,
        "it went over a state budget (`state_ops`, `state_keys`, `state_kib`), or its tenant over its part of the store";
    /// The state store could not be reached, or did not answer within the
    /// call's `timeout` of waiting (Redis down or slow; the breaker open).
    StateUnavailable = "state-unavailable", Guard, uncounted,
        "the state store was down, failing or slower than the call's `timeout_ms`: its `on_error` decides, but it is not counted";
    /// The state store as a whole is full — Redis at its `maxmemory`, the
    /// memory store at its capacity — while the guard's tenant is within
    /// its part of it: the store refused the write before applying any of
    /// it. The host's doing (it is sized by the operator).
    StateFull = "state-full", Host, uncounted,
        "the state store as a whole is full (Redis at its `maxmemory`, the memory store at its capacity) while the guard's tenant is within its part of it; the write was refused whole";
    /// The guard misused its state: `add` on a value that is not a decimal
    /// integer, or a sum outside s64.
    StateInvalid = "state-invalid", Guard, counted,
        "it misused its state (`add` on a value that is not a decimal integer, a sum outside s64)";
    /// The guard made an outbound HTTP request its plugin is not granted:
    /// a host, scheme, port or method off its grant, a redirect off it, an
    /// address on the host's own network the grant does not name, or a
    /// header the host sets itself.
    HttpDenied = "http-denied", Guard, counted,
        "it made an outbound HTTP request its grant does not allow";
    /// The guard went over an outbound HTTP budget: more requests in one
    /// call than `http_requests`, or a request or response body over
    /// `http_request_kib` / `http_response_kib`.
    HttpBudget = "http-budget", Guard, counted,
        "it went over an outbound HTTP budget (`http_requests`, `http_request_kib`, `http_response_kib`)";
    /// A granted request did not get its answer: the connection was
    /// refused or broken, the name did not resolve, TLS failed, or no
    /// answer came within the call's `timeout` of waiting.
    HttpFailed = "http-failed", Guard, uncounted,
        "a granted request got no answer (refused, unresolved, TLS, no answer in time): its `on_error` decides, but it is not counted";
}

impl Serialize for Fault {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl JsonSchema for Fault {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Fault".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<serde_json::Value> = Fault::ALL
            .iter()
            .map(|f| {
                serde_json::json!({
                    "const": f.as_str(),
                    "description": format!("{}'s: {}", match f.whose() {
                        Whose::Guard => "the guard",
                        Whose::Host => "the host",
                    }, f.meaning()),
                })
            })
            .collect();
        schemars::json_schema!({
            "description": "Why a guard call was abandoned (docs/failures.md, \"Whose fault\").",
            "type": "string",
            "oneOf": names,
        })
    }
}

impl Fault {
    /// Whether the fault is the guard's own doing (its `on_error`
    /// decides), rather than the host's (the request is not decided).
    pub fn is_guards(self) -> bool {
        self.whose() == Whose::Guard
    }

    /// docs/failures.md's table of faults, generated from the table.
    #[cfg(test)]
    pub(crate) fn markdown_table() -> String {
        let mut table = String::from(
            "| fault (trace `fault`) | whose | what it means | counted toward quarantine | answer |\n|---|---|---|---|---|\n",
        );
        for f in Fault::ALL {
            let (whose, answer) = match f.whose() {
                Whose::Guard => (
                    "the guard's",
                    "its `on_error`: skipped (`skip`) or fail-closed (`deny`)",
                ),
                Whose::Host => (
                    "the host's",
                    "**not decided**: HTTP 503 + `Retry-After: 1`; `toolgate.BusyError`; CLI `check` exit 3",
                ),
            };
            let counted = if f.counts_toward_quarantine() {
                "yes"
            } else {
                "no"
            };
            table += &format!(
                "| `{}` | {whose} | {} | {counted} | {answer} |\n",
                f.as_str(),
                f.meaning()
            );
        }
        table
    }

    /// Classifies an error raised while instantiating (`calling == false`)
    /// or calling (`calling == true`) a guard. Only types are inspected,
    /// never message text.
    pub(crate) fn classify(err: &wasmtime::Error, calling: bool) -> Fault {
        for cause in err.chain() {
            if cause.is::<MemoryLimitExceeded>() {
                return Fault::Memory;
            }
            if cause.is::<HostBudgetExceeded>() {
                return Fault::HostBudget;
            }
            if cause.is::<wasmtime::PoolConcurrencyLimitError>() {
                return Fault::Capacity;
            }
            if let Some(refused) = cause.downcast_ref::<ImportRefused>() {
                return refused.fault;
            }
        }
        if is_hostcall_data_exhausted(err) {
            // Raised inside a guest's execution (a wasm backtrace is
            // attached): lifting a host import's arguments. Otherwise:
            // lifting the call's reply, after the guest returned.
            return if err.downcast_ref::<wasmtime::WasmBacktrace>().is_some() {
                Fault::HostBudget
            } else {
                Fault::OversizedReturn
            };
        }
        match err.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => Fault::OutOfFuel,
            Some(Trap::Interrupt) => Fault::Deadline,
            Some(Trap::StackOverflow) => Fault::StackOverflow,
            Some(Trap::UnreachableCodeReached) => Fault::Unreachable,
            Some(_) => Fault::Trap,
            None if calling => Fault::InvalidResult,
            None => Fault::Instantiate,
        }
    }
}

/// Whether `err` is wasmtime's hostcall-fuel exhaustion: a guest handing
/// the host more data in one crossing than the store's hostcall fuel.
///
/// wasmtime raises it as a private type (`HostcallFuelExhausted`), so it
/// cannot be downcast to; it is recognised by that type's name (its
/// `Debug` form), never by message text. The hostile-guest tests pin it:
/// should a wasmtime upgrade rename the type, they fail.
pub(crate) fn is_hostcall_data_exhausted(err: &wasmtime::Error) -> bool {
    err.chain()
        .any(|cause| format!("{cause:?}") == "HostcallFuelExhausted")
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error a store's limiter raises when a guest grows past its cap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded: wanted {wanted} bytes, the limit is {limit}")]
pub struct MemoryLimitExceeded {
    /// The size the guest asked for.
    pub wanted: usize,
    /// The configured cap.
    pub limit: usize,
}

/// The error a host import raises when a guard exceeds its per-call budget
/// of host calls or log bytes. It traps the call (fault `host-budget`).
#[derive(Debug, thiserror::Error)]
#[error("host budget exceeded: {0}")]
pub struct HostBudgetExceeded(pub &'static str);

/// The error a host import (`state`, `http`) raises to trap the call with
/// a fault of its own class (`state-budget`, `http-denied`, ...).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ImportRefused {
    /// The fault the call is classified as.
    pub fault: Fault,
    /// What happened, for the trace's `detail` and the log.
    pub message: String,
}

impl ImportRefused {
    /// A refusal classified as `fault`.
    pub fn new(fault: Fault, message: impl Into<String>) -> Self {
        ImportRefused {
            fault,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fault;

    /// docs/failures.md's fault table is the one `faults!` generates;
    /// `TOOLGATE_BLESS=1` writes it.
    #[test]
    fn the_fault_table_in_failures_md_is_generated() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/failures.md");
        let doc = std::fs::read_to_string(&path).expect("docs/failures.md");
        let start = "Regenerate: TOOLGATE_BLESS=1 cargo test -p toolgate --lib -- fault:: -->\n";
        let (before, rest) = doc.split_once(start).expect("the table's start marker");
        let (table, after) = rest
            .split_once("<!-- end of the fault table -->")
            .expect("the table's end marker");
        let generated = Fault::markdown_table();
        if std::env::var_os("TOOLGATE_BLESS").is_some() && table != generated {
            std::fs::write(
                &path,
                format!("{before}{start}{generated}<!-- end of the fault table -->{after}"),
            )
            .expect("write docs/failures.md");
            return;
        }
        assert!(
            table == generated,
            "docs/failures.md's fault table differs from the one host/src/fault.rs generates; \
             regenerate it with `TOOLGATE_BLESS=1 cargo test -p toolgate --lib -- fault::`"
        );
    }

    #[test]
    fn the_guards_faults_are_decided_by_on_error_the_hosts_are_not_counted() {
        for f in Fault::ALL {
            assert!(
                f.is_guards() || !f.counts_toward_quarantine(),
                "{f}: a host's fault never counts"
            );
        }
        let host: Vec<&str> = Fault::ALL
            .iter()
            .filter(|f| !f.is_guards())
            .map(|f| f.as_str())
            .collect();
        assert_eq!(
            host,
            ["capacity", "share-exhausted", "overloaded", "state-full"]
        );
    }
}
