// pii (steering, outbound HTTP): the Rust pii-check example's behaviour,
// written with the Go SDK's http package. Before the config's tool
// (default send_email) runs, it POSTs {"text": T} to the config's url, T
// being the call's body argument or the args as JSON text; {"pii": true}
// steers with the example's message, {"pii": false} proceeds, anything else
// panics (a fault: on_error decides).
package main

import (
	"fmt"

	"toolgate.dev/guest"
	"toolgate.dev/guest/http"
	"toolgate.dev/guest/steering"
)

const message = "This email contains personal data (an address, a phone number, " +
	"a name with contact details ...). Remove the personal data from the email, then send it again."

type settings struct {
	URL  string `json:"url"`
	Tool string `json:"tool"`
}

func check(e guest.BeforeToolCallEvent) guest.Verdict {
	s, err := guest.ConfigAs[settings](guest.Config())
	if err != nil {
		panic(err)
	}
	if s.Tool == "" {
		s.Tool = "send_email"
	}
	if e.ToolName != s.Tool {
		return guest.Proceed()
	}
	text, ok := e.StringArg("body")
	if !ok {
		text = string(e.Args)
	}
	answer := http.PostJSON(s.URL, map[string]string{"text": text})
	var verdict struct {
		PII *bool `json:"pii"`
	}
	if !answer.OK() || answer.JSON(&verdict) != nil || verdict.PII == nil {
		panic(fmt.Sprintf("the classifier at %s answered %d %q, not {\"pii\": true|false}",
			s.URL, answer.Status, answer.Text()))
	}
	if *verdict.PII {
		return guest.Steer(message)
	}
	return guest.Proceed()
}

func init() { steering.Handle(check) }

func main() {}
