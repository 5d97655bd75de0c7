// Package rewrite is the rewrite seam (symfonic's on_tool_call_dispatch):
// replace a call's tool name and args before it is dispatched. Importing it
// makes the guard's component export toolgate:guard/rewrite@0.3.0.
package rewrite

import "toolgate.dev/guest"

// Handler returns a replacement call, or nil to pass the call through. The
// host drops a rewrite whose tool is not in e.AvailableTools or whose args
// are not a JSON object. A panic is a fault: the host logs it and the chain
// goes on as if this guard had returned nil.
type Handler func(e guest.ToolCallDispatchEvent) *guest.Rewrite

var handler Handler

// Handle registers the guard's rewrite handler. Call it from an init
// function.
func Handle(h Handler) { handler = h }

// Call runs the registered handler as the host would (nil when none is
// registered). Guards' unit tests use it.
func Call(e guest.ToolCallDispatchEvent) *guest.Rewrite {
	if handler == nil {
		return nil
	}
	return handler(e)
}
