//! Classifying why a guard call failed, from the error's type alone.

use schemars::JsonSchema;
use serde::Serialize;
use wasmtime::Trap;

/// Why a guard call was abandoned.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The call burnt its fuel budget.
    OutOfFuel,
    /// The guest ran past its `timeout`: its own run time — the CPU time
    /// its instance spent running (start-up, guest code, its host calls) —
    /// not time it waited for a core.
    Deadline,
    /// The guest grew memory (or a table) past its cap.
    Memory,
    /// The wasm stack overflowed (e.g. unbounded recursion).
    StackOverflow,
    /// The guest executed `unreachable` (a Rust panic or abort lands here).
    Unreachable,
    /// Any other wasm trap (out-of-bounds access, division by zero, ...).
    Trap,
    /// The guest called host imports more often, or logged more, than its
    /// budget allows, or passed a host import more data in one call than
    /// the per-crossing data budget (wasmtime's hostcall fuel).
    HostBudget,
    /// The guest returned a string larger than `max_return_bytes`, or a
    /// reply larger than the per-crossing data budget (wasmtime's hostcall
    /// fuel: refused before it is copied).
    OversizedReturn,
    /// The guest's reply could not be read: a result that fails to lift
    /// (pointer out of bounds, invalid UTF-8, bad variant tag), or another
    /// error raised while calling it.
    InvalidResult,
    /// The guest could not be instantiated for this call (its start-up
    /// failed in a way that is not one of the traps above).
    Instantiate,
    /// No instance slot was free (the engine's `max_instances`). The
    /// host's doing.
    Capacity,
    /// The account the call is charged to (its tenant's, or the global
    /// one) had no instance or memory left within its wait: the caller's
    /// own share is exhausted. See `crate::runtime::shares`. The host's doing.
    ShareExhausted,
    /// The host could not give the call the CPU to finish in time: it had
    /// used less than its `timeout` of run time when its wall-clock bound
    /// (see [`crate::runtime::limits::Limits::wall_bound`]) passed — the cores were
    /// busy with other work — or the host was shutting down. The host's
    /// doing.
    Overloaded,
    /// The guard is quarantined after faulting repeatedly, and was not run.
    /// See `crate::call::quarantine`.
    Quarantined,
    /// The guard went over a state budget: operations in one call, or keys
    /// or bytes in one of its scopes (`state_ops`, `state_keys`,
    /// `state_kib`), or the memory backend's total.
    StateBudget,
    /// The state store could not be reached, or did not answer within the
    /// call's `timeout` of waiting (Redis down or slow; the breaker open).
    StateUnavailable,
    /// The state store as a whole is full — Redis at its `maxmemory`, the
    /// memory store at its capacity — while the guard's tenant is within
    /// its part of it: the store refused the write before applying any of
    /// it. The host's doing (it is sized by the operator).
    StateFull,
    /// The guard misused its state: `add` on a value that is not a decimal
    /// integer, or a sum outside s64.
    StateInvalid,
    /// The guard made an outbound HTTP request its plugin is not granted:
    /// a host, scheme, port or method off its grant, a redirect off it, an
    /// address on the host's own network the grant does not name, or a
    /// header the host sets itself.
    HttpDenied,
    /// The guard went over an outbound HTTP budget: more requests in one
    /// call than `http_requests`, or a request or response body over
    /// `http_request_kib` / `http_response_kib`.
    HttpBudget,
    /// A granted request did not get its answer: the connection was
    /// refused or broken, the name did not resolve, TLS failed, or no
    /// answer came within the call's `timeout` of waiting.
    HttpFailed,
}

impl Fault {
    /// The kebab-case name used in traces, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::OutOfFuel => "out-of-fuel",
            Fault::Deadline => "deadline",
            Fault::Memory => "memory",
            Fault::StackOverflow => "stack-overflow",
            Fault::Unreachable => "unreachable",
            Fault::Trap => "trap",
            Fault::HostBudget => "host-budget",
            Fault::OversizedReturn => "oversized-return",
            Fault::InvalidResult => "invalid-result",
            Fault::Instantiate => "instantiate",
            Fault::Capacity => "capacity",
            Fault::ShareExhausted => "share-exhausted",
            Fault::Overloaded => "overloaded",
            Fault::Quarantined => "quarantined",
            Fault::StateBudget => "state-budget",
            Fault::StateUnavailable => "state-unavailable",
            Fault::StateFull => "state-full",
            Fault::StateInvalid => "state-invalid",
            Fault::HttpDenied => "http-denied",
            Fault::HttpBudget => "http-budget",
            Fault::HttpFailed => "http-failed",
        }
    }

    /// Whether the fault is the guard's own doing (counted toward its
    /// quarantine; its `on_error` decides), rather than the host's
    /// (`capacity`, `share-exhausted`, `overloaded`, `state-full`: the
    /// request is not decided).
    pub fn is_guards(self) -> bool {
        !matches!(
            self,
            Fault::Capacity | Fault::ShareExhausted | Fault::Overloaded | Fault::StateFull
        )
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
