// Package response is the response seam (symfonic's on_response_render):
// rewrite the run's final answer. Importing it makes the guard's component
// export toolgate:guard/response@0.3.0.
package response

import "toolgate.dev/guest"

// Handler gives the answer to return instead of e.Content, or nil to keep
// it (guest.Answer(s) makes one). Guards run in registration order, each
// given the previous one's answer as e.Content. A panic is a fault: the host
// logs it and the chain goes on with the content it had.
type Handler func(e guest.ResponseRenderEvent) *string

var handler Handler

// Handle registers the guard's response handler. Call it from an init
// function.
func Handle(h Handler) { handler = h }

// Call runs the registered handler as the host would (nil, keep the
// content, when none is registered). Guards' unit tests use it.
func Call(e guest.ResponseRenderEvent) *string {
	if handler == nil {
		return nil
	}
	return handler(e)
}
