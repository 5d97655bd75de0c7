//! `rewrite-only`: exports only the rewrite seam and never rewrites.
//! The host must subscribe it to rewrite and to nothing else.

use toolgate_guest::{Rewrite, RewriteGuard, ToolCallDispatchEvent};

/// The guard.
struct RewriteOnly;

impl RewriteGuard for RewriteOnly {
    fn on_tool_call_dispatch(_event: ToolCallDispatchEvent) -> Option<Rewrite> {
        None
    }
}

toolgate_guest::export!(RewriteOnly: rewrite);
