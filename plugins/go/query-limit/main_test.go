package main

import (
	"encoding/json"
	"testing"

	"toolgate.dev/guest"
)

func TestBound(t *testing.T) {
	cases := []struct{ tool, args, want string }{
		{"run_query", `{"sql":"SELECT 1 ;  \n","db":"main"}`, `{"sql":"SELECT 1 LIMIT 100","db":"main"}`},
		{"run_query", `{"sql":"select 1 limit 5"}`, ``},
		{"run_query", `{"query":"select 1"}`, ``},
		{"run_query", `{"sql":7}`, ``},
		{"search", `{"sql":"select 1"}`, ``},
	}
	for _, c := range cases {
		r := bound(guest.ToolCallDispatchEvent{ToolName: c.tool, Args: json.RawMessage(c.args)})
		got := ""
		if r != nil {
			if r.ToolName != c.tool {
				t.Fatalf("%s: tool %s", c.args, r.ToolName)
			}
			got = string(r.Args)
		}
		if got != c.want {
			t.Fatalf("%s: got %s, want %s", c.args, got, c.want)
		}
	}
}
