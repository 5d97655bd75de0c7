package main

import (
	"encoding/json"
	"strings"
	"testing"

	"toolgate.dev/guest"
	"toolgate.dev/guest/config"
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

func TestConfiguredLimit(t *testing.T) {
	e := guest.ToolCallDispatchEvent{ToolName: "run_query", Args: json.RawMessage(`{"sql":"SELECT 1;"}`)}
	if r := boundTo(7, e); r == nil || string(r.Args) != `{"sql":"SELECT 1 LIMIT 7"}` {
		t.Fatalf("boundTo(7) = %+v", r)
	}
	if s := load(json.RawMessage(`{"limit":7}`)); s.Limit == nil || *s.Limit != 7 {
		t.Fatalf("load = %+v", s)
	}
	if s := load(json.RawMessage(`{}`)); s.Limit != nil {
		t.Fatalf("load({}) = %+v", s)
	}
}

func TestConfigIsCheckedAtLoad(t *testing.T) {
	for cfg, says := range map[string]string{
		`{"limit":0}`:          "config: limit must be 1 or more",
		`{"limit":-5}`:         "config: limit must be 1 or more",
		`{"rows":5}`:           `config: unknown field "rows"`,
		`{"limit":"100"}`:      "config: cannot unmarshal string",
		`{"limit":2.5}`:        "config: cannot unmarshal number 2.5",
		`{"limit":1,"x":true}`: `config: unknown field "x"`,
	} {
		err := config.Call(json.RawMessage(cfg))
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: %v, want %q", cfg, err, says)
		}
	}
	for _, cfg := range []string{`{}`, ``, `{"limit":1}`, `{"limit":100000}`} {
		if err := config.Call(json.RawMessage(cfg)); err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
	}
}
