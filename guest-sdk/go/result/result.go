// Package result is the result seam (symfonic's on_tool_result): observe
// what a tool returned. Importing it makes the guard's component export
// toolgate:guard/result@0.3.0.
package result

import "toolgate.dev/guest"

// Handler observes one tool result; there is nothing to return. A panic is
// a fault: the host logs it and goes on.
type Handler func(e guest.ToolResultCallbackEvent)

var handler Handler

// Handle registers the guard's result handler. Call it from an init
// function.
func Handle(h Handler) { handler = h }

// Call runs the registered handler as the host would. Guards' unit tests
// use it.
func Call(e guest.ToolResultCallbackEvent) {
	if handler != nil {
		handler(e)
	}
}
