//! `result-audit` (result): writes one info line per tool result to the
//! host's log: `tool=<name> call=<id> error=<bool> bytes=<n>`, where `n` is
//! the length in bytes of the result's JSON text.

use toolgate_guest::{ResultGuard, ToolResultCallbackEvent, log};

/// The result guard.
struct ResultAudit;

impl ResultGuard for ResultAudit {
    fn on_tool_result(event: ToolResultCallbackEvent) {
        log::info!(
            "tool={} call={} error={} bytes={}",
            event.tool_name,
            event.call_id,
            event.is_error,
            event.result_json.len()
        );
    }
}

toolgate_guest::export!(ResultAudit: result);
