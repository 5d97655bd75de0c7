// observe (lifecycle events + steering): observes every lifecycle event, as
// its config scripts, first key that applies:
//
//   - "spin": true — loops until its deadline;
//   - "trap": true — panics (a fault);
//   - "blow": true — writes values past its state budget;
//   - otherwise — adds 1 to the run's "seen", appends the hook's name to the
//     run's "hooks" (comma-separated) and keeps the event, encoded with its
//     json tags (symfonic's names), in the tenant's "event:<hook>".
//
// Its steering answers every call with a cancel whose content is JSON:
// {"seen": <n>, "hooks": <names>, "events": {<hook>: <event>, ...}}, the run's
// and the tenant's state as the call finds them, so a test reads what the
// observations left before the decision, every field of every event.
package main

import (
	"encoding/json"
	"strconv"
	"strings"

	"toolgate.dev/guest"
	"toolgate.dev/guest/observe"
	"toolgate.dev/guest/state"
	"toolgate.dev/guest/steering"
)

var spins uint64

func seen(e observe.Event) {
	config := guest.Config()
	scripted := func(key string) bool {
		raw, ok := guest.Member(config, key)
		return ok && string(raw) == "true"
	}
	switch {
	case scripted("spin"):
		for {
			spins++
		}
	case scripted("trap"):
		panic("observe-go: scripted panic")
	case scripted("blow"):
		big := strings.Repeat("x", 1<<20)
		for i := 0; i < 1024; i++ {
			state.Set(state.Run, "k"+strconv.Itoa(i), big)
		}
	}
	hook := e.Hook().String()
	state.Add(state.Run, "seen", 1)
	hooks, _ := state.Get(state.Run, "hooks")
	if hooks != "" {
		hooks += ","
	}
	state.Set(state.Run, "hooks", hooks+hook)
	encoded, err := json.Marshal(e)
	if err != nil {
		panic(err.Error())
	}
	state.Set(state.Tenant, "event:"+hook, string(encoded))
}

func said(guest.BeforeToolCallEvent) guest.Verdict {
	n, _ := state.Get(state.Run, "seen")
	hooks, _ := state.Get(state.Run, "hooks")
	events := map[string]json.RawMessage{}
	for _, k := range observe.Hooks() {
		if v, ok := state.Get(state.Tenant, "event:"+k.String()); ok {
			events[k.String()] = json.RawMessage(v)
		}
	}
	count, _ := strconv.Atoi(n)
	out, err := json.Marshal(map[string]any{"seen": count, "hooks": hooks, "events": events})
	if err != nil {
		panic(err.Error())
	}
	return guest.Cancel(string(out))
}

func init() {
	observe.Handle(seen, observe.Hooks()...)
	steering.Handle(said)
}

func main() {}
