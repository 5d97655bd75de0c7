// memo (steering): tries to carry state from one call to the next and says
// what it saw. Each call counts itself in a package-level counter and keeps
// its call id in a package-level slice, then cancels with {"calls": n,
// "last": <the previous call's id or null>, "state": <the event's state>}
// as JSON text. On a fresh instance every call sees calls 1 and last null
// (snapshotted: what its warm-up left, the same every call).
package main

import (
	"encoding/json"

	"toolgate.dev/guest"
	"toolgate.dev/guest/steering"
)

var (
	calls int
	seen  []string
)

func memo(e guest.BeforeToolCallEvent) guest.Verdict {
	calls++
	var last *string
	if len(seen) > 0 {
		last = &seen[len(seen)-1]
	}
	said, err := json.Marshal(struct {
		Calls int             `json:"calls"`
		Last  *string         `json:"last"`
		State json.RawMessage `json:"state"`
	}{calls, last, e.State})
	if err != nil {
		panic(err)
	}
	seen = append(seen, e.CallID)
	return guest.Cancel(string(said))
}

func init() { steering.Handle(memo) }

func main() {}
