// echo (rewrite, steering): hands back the call's args as the guard read
// them. A rewrite names the same tool with the event's Args; a steering
// call cancels with Args as JSON text; both through guest.Object, the
// SDK's decoder, and guest.RewriteTo / json.Marshal, its encoders, so
// whatever the SDK loses of the args (big integers) shows up in what comes
// back. Go's maps have no order: encoding/json writes their keys sorted, so
// a Go guard that decodes args into a map and encodes them again sorts
// them; one that must keep the order edits the raw bytes
// (guest.SetStringMember) or passes Args on as they are. The rewrite does
// the latter, the steering answer the former, and the tests say which is
// which.
package main

import (
	"encoding/json"

	"toolgate.dev/guest"
	"toolgate.dev/guest/rewrite"
	"toolgate.dev/guest/steering"
)

func echoRewrite(e guest.ToolCallDispatchEvent) *guest.Rewrite {
	return &guest.Rewrite{ToolName: e.ToolName, Args: e.Args}
}

func echoSteering(e guest.BeforeToolCallEvent) guest.Verdict {
	args, err := guest.Object(e.Args)
	if err != nil {
		panic(err)
	}
	said, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return guest.Cancel(string(said))
}

func init() {
	rewrite.Handle(echoRewrite)
	steering.Handle(echoSteering)
}

func main() {}
