// no-email (steering, a cancel guard): a send_email call is skipped with a
// benign result (is_error = false) the model moves past without retrying;
// every other call proceeds.
package main

import (
	"toolgate.dev/guest"
	"toolgate.dev/guest/steering"
)

func init() {
	steering.Handle(func(e guest.BeforeToolCallEvent) guest.Verdict {
		if e.ToolName == "send_email" {
			return guest.Cancel("Sending email is not permitted here; carry on without it.")
		}
		return guest.Proceed()
	})
}

func main() {}
