//! `no-email` (steering, a cancel guard): a `send_email` call is skipped
//! with a benign result (`is_error = false`) the model moves past without
//! retrying; every other call proceeds.

use toolgate_guest::{BeforeToolCallEvent, SteeringGuard, Verdict};

/// The steering guard.
struct NoEmail;

impl SteeringGuard for NoEmail {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        if event.tool_name == "send_email" {
            return Verdict::cancel("Sending email is not permitted here; carry on without it.");
        }
        Verdict::proceed()
    }
}

toolgate_guest::export!(NoEmail: steering);
