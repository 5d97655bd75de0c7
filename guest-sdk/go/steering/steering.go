// Package steering is the steering seam (symfonic's on_before_tool_call):
// decide whether one tool call runs. Importing it makes the guard's
// component export toolgate:guard/steering@0.3.0.
package steering

import "toolgate.dev/guest"

// Handler decides whether one call runs: guest.Proceed(), guest.Steer(msg)
// or guest.Cancel(msg). A panic is a fault: the host logs it and the chain
// goes on as if this guard had proceeded.
type Handler func(guest.BeforeToolCallEvent) guest.Verdict

var handler Handler

// Handle registers the guard's steering handler. Call it from an init
// function.
func Handle(h Handler) { handler = h }

// Call runs the registered handler as the host would (proceed when none is
// registered). Guards' unit tests use it.
func Call(e guest.BeforeToolCallEvent) guest.Verdict {
	if handler == nil {
		return guest.Proceed()
	}
	return handler(e)
}
