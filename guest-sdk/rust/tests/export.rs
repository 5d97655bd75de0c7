//! `export!` in a guard's own crate, as a guard author writes it: one call
//! naming all four seams expands, and each seam's function is exported
//! under the contract's name (what the component's exports are made of).

use toolgate_guest::{
    BeforeToolCallEvent, ResultGuard, Rewrite, RewriteGuard, RoutingGuard, SteeringGuard,
    ToolCallDispatchEvent, ToolResultCallbackEvent, ToolRoutingDecisionEvent, Verdict,
};

struct Everywhere;

impl SteeringGuard for Everywhere {
    fn on_before_tool_call(_: BeforeToolCallEvent) -> Verdict {
        Verdict::proceed()
    }
}

impl RewriteGuard for Everywhere {
    fn on_tool_call_dispatch(_: ToolCallDispatchEvent) -> Option<Rewrite> {
        None
    }
}

impl RoutingGuard for Everywhere {
    fn on_tool_routing_decision(_: ToolRoutingDecisionEvent) -> Option<Vec<String>> {
        None
    }
}

impl ResultGuard for Everywhere {
    fn on_tool_result(_: ToolResultCallbackEvent) {}
}

toolgate_guest::export!(Everywhere: steering, rewrite, routing, result);

// The exported functions, looked up by the names the contract gives them:
// linking this test fails if `export!` exported any seam under another name
// (or not at all).
unsafe extern "C" {
    #[link_name = "toolgate:guard/steering@0.3.0#before-tool-call"]
    fn before_tool_call();
    #[link_name = "toolgate:guard/rewrite@0.3.0#dispatch"]
    fn dispatch();
    #[link_name = "toolgate:guard/routing@0.3.0#narrow"]
    fn narrow();
    #[link_name = "toolgate:guard/result@0.3.0#on-result"]
    fn on_result();
}

#[test]
fn every_named_seam_is_exported_under_the_contracts_name() {
    let exports = [
        before_tool_call as unsafe extern "C" fn() as usize,
        dispatch as unsafe extern "C" fn() as usize,
        narrow as unsafe extern "C" fn() as usize,
        on_result as unsafe extern "C" fn() as usize,
    ];
    // Four distinct functions, none of them null.
    let distinct: std::collections::BTreeSet<usize> = exports.iter().copied().collect();
    assert_eq!(distinct.len(), 4, "{exports:?}");
    assert!(exports.iter().all(|&f| f != 0));
}
