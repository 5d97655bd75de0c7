package main

import (
	"encoding/json"
	"testing"

	"toolgate.dev/guest"
)

func TestLine(t *testing.T) {
	cases := []struct {
		event guest.ToolResultCallbackEvent
		want  string
	}{
		{guest.ToolResultCallbackEvent{ToolName: "run_query", CallID: "c1", Result: json.RawMessage(`"ok: é"`)},
			"tool=run_query call=c1 error=false bytes=8"},
		{guest.ToolResultCallbackEvent{ToolName: "search", CallID: "c2", IsError: true, Result: json.RawMessage(`null`)},
			"tool=search call=c2 error=true bytes=4"},
	}
	for _, c := range cases {
		if got := line(c.event); got != c.want {
			t.Fatalf("got %q, want %q", got, c.want)
		}
	}
}
