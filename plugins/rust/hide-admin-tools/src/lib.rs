//! `hide-admin-tools` (routing): hides every tool whose name starts with
//! `admin_`, returning the remaining names; when there is nothing to hide
//! it leaves the palette as it is.

use toolgate_guest::{RoutingGuard, ToolRoutingDecisionEvent};

/// The routing guard.
struct HideAdminTools;

impl RoutingGuard for HideAdminTools {
    fn on_tool_routing_decision(event: ToolRoutingDecisionEvent) -> Option<Vec<String>> {
        let total = event.narrowed_tool_names.len();
        let kept: Vec<String> = event
            .narrowed_tool_names
            .into_iter()
            .filter(|name| !name.starts_with("admin_"))
            .collect();
        (kept.len() != total).then_some(kept)
    }
}

toolgate_guest::export!(HideAdminTools: routing);
