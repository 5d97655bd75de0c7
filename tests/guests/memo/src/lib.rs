//! `memo`: a guard that tries to carry state from one call to the next and
//! reports what it saw, with the event's `state`, so a test can tell a
//! fresh instance from a reused one and see the state that reached it.
//!
//! Each call counts itself in a static counter and swaps the event's
//! `call_id` into a cell on the heap, then answers with
//! `{"calls": <the counter, this call included>, "last": <the cell's
//! previous call id, or null>, "state": <the event's state>}`:
//!
//! - steering: `skip` with that object as JSON text in `content`
//!   (`is_error` false);
//! - rewrite: the same tool, its arguments replaced by that object;
//! - result: logs `memo <that object>` at info level.
//!
//! On a fresh instance every call sees `calls` 1 and `last` null (or, when
//! snapshotted after a warm-up, the same values every call).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use toolgate_guest::serde_json::{Value, json};
use toolgate_guest::{
    BeforeToolCallEvent, ResultGuard, Rewrite, RewriteGuard, SteeringGuard, ToolCallDispatchEvent,
    ToolResultCallbackEvent, Verdict, log,
};

/// Calls this instance has served.
static CALLS: AtomicU64 = AtomicU64::new(0);

/// The previous call's id, kept in memory the guard wrote.
static LAST: Mutex<Option<String>> = Mutex::new(None);

/// Counts this call, remembers its id; returns what it found.
fn remember(call_id: &str, state: Value) -> Value {
    let calls = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    let last = match LAST.lock() {
        Ok(mut cell) => cell.replace(call_id.to_string()),
        Err(poisoned) => poisoned.into_inner().replace(call_id.to_string()),
    };
    json!({"calls": calls, "last": last, "state": state})
}

/// The guard.
struct Memo;

impl SteeringGuard for Memo {
    fn on_before_tool_call(event: BeforeToolCallEvent) -> Verdict {
        Verdict::Skip {
            content: remember(&event.call_id, event.state).to_string(),
            is_error: Some(false),
        }
    }
}

impl RewriteGuard for Memo {
    fn on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Option<Rewrite> {
        let seen = remember(&event.call_id, event.state);
        Some(Rewrite::new(event.tool_name, &seen))
    }
}

impl ResultGuard for Memo {
    fn on_tool_result(event: ToolResultCallbackEvent) {
        log::info!("memo {}", remember(&event.call_id, event.state));
    }
}

toolgate_guest::export!(Memo: steering, rewrite, result);
