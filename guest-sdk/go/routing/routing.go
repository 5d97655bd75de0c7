// Package routing is the routing seam (symfonic's on_tool_routing_decision):
// narrow the tools visible this turn. Importing it makes the guard's
// component export toolgate:guard/routing@0.3.0.
package routing

import "toolgate.dev/guest"

// Handler returns the tool names to keep visible and narrow = true, or
// narrow = false to leave the palette as it is (visible is then ignored).
// With narrow = true an empty visible hides every tool. Names not visible
// already are ignored: a guard can hide tools, never add one. A panic is a
// fault: the host logs it and the chain goes on as if this guard had not
// narrowed.
type Handler func(e guest.ToolRoutingDecisionEvent) (visible []string, narrow bool)

var handler Handler

// Handle registers the guard's routing handler. Call it from an init
// function.
func Handle(h Handler) { handler = h }

// Call runs the registered handler as the host would (no narrowing when
// none is registered). Guards' unit tests use it.
func Call(e guest.ToolRoutingDecisionEvent) (visible []string, narrow bool) {
	if handler == nil {
		return nil, false
	}
	return handler(e)
}
