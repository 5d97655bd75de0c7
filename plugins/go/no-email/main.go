// no-email (steering, a cancel guard): a send_email call is skipped with a
// benign result (is_error = false) the model moves past without retrying;
// every other call proceeds.
package main

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/steering"
)

// message is what the model sees instead of a send_email result.
const message = "Sending email is not permitted here; carry on without it."

func check(e guest.BeforeToolCallEvent) guest.Verdict {
	if e.ToolName == "send_email" {
		return guest.Cancel(message)
	}
	return guest.Proceed()
}

func init() { steering.Handle(check) }

func main() {}
