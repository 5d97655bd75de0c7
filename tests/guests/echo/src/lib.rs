//! `echo`: a guard that hands back the call's args as it read them, so a
//! test can see that big integers and key order reach a Rust guard and
//! come back unchanged.
//!
//! - rewrite: the same tool, with the event's `args` (parsed by the SDK,
//!   serialised again);
//! - steering: `skip` with the event's `args` as JSON text in `content`
//!   (`is_error` false).

use toolgate_guest::{
    BeforeToolCallEvent, Rewrite, RewriteGuard, SteeringGuard, ToolCallDispatchEvent, Verdict,
};

/// The guard.
struct Echo;

impl RewriteGuard for Echo {
    fn on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Option<Rewrite> {
        Some(Rewrite::new(event.tool_name, &event.args))
    }
}

impl SteeringGuard for Echo {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        Verdict::Skip {
            content: event.args.to_string(),
            is_error: Some(false),
        }
    }
}

toolgate_guest::export!(Echo: steering, rewrite);
