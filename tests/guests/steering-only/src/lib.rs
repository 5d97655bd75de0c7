//! `steering-only`: exports only the steering seam and always proceeds.
//! The host must subscribe it to steering and to nothing else.

use toolgate_guest::{BeforeToolCallEvent, SteeringGuard, Verdict};

/// The guard.
struct SteeringOnly;

impl SteeringGuard for SteeringOnly {
    fn on_before_tool_call(_event: BeforeToolCallEvent) -> Verdict {
        Verdict::proceed()
    }
}

toolgate_guest::export!(SteeringOnly: steering);
