package main

import (
	"encoding/json"
	"strings"
	"testing"

	"toolgate.dev/guest"
	"toolgate.dev/guest/config"
	"toolgate.dev/guest/state"
)

const cancelEmail = "Tool call limit exceeded. Do not call 'send_email' again."

// decide runs one call with the given config and hook state. Natively, one
// map holds every run's state: a test starts a new run with state.Reset.
func decide(t *testing.T, cfg, tool, st string) guest.Verdict {
	t.Helper()
	if err := config.Call(json.RawMessage(cfg)); err != nil {
		t.Fatalf("%s refused: %v", cfg, err)
	}
	return limit(load(json.RawMessage(cfg)), guest.BeforeToolCallEvent{RunID: "r", ToolName: tool, Args: json.RawMessage(`{}`), State: json.RawMessage(st)})
}

func TestRunLimitCancelsOverTheLimitAndDoesNotCountIt(t *testing.T) {
	state.Reset()
	cfg := `{"tool":"send_email","run_limit":2}`
	for i, want := range []string{"", "", cancelEmail, cancelEmail} {
		v := decide(t, cfg, "send_email", `{}`)
		if v.Content != want || v.Skip != (want != "") || (v.Skip && *v.IsError) {
			t.Fatalf("call %d: %+v, want %q (a cancel)", i+1, v, want)
		}
	}
	if v := decide(t, cfg, "search", `{}`); v.Skip {
		t.Fatalf("another tool: %+v", v)
	}
	if n, _ := state.Get(state.Run, "calls:send_email"); n != "2" {
		t.Fatalf("counted %s, want 2 (refused calls given back)", n)
	}
	// A new run starts from zero (the host keys the run scope by run id).
	state.Reset()
	if v := decide(t, cfg, "send_email", `{}`); v.Skip {
		t.Fatalf("a new run: %+v", v)
	}
}

func TestThreadLimitCountsPerConversationAcrossRuns(t *testing.T) {
	state.Reset()
	cfg := `{"thread_limit":1,"thread_key":"conv"}`
	if v := decide(t, cfg, "search", `{"conv":"c1"}`); v.Skip {
		t.Fatalf("first: %+v", v)
	}
	want := "Tool call limit exceeded. Do not make additional tool calls."
	if v := decide(t, cfg, "run_query", `{"conv":"c1"}`); v.Content != want {
		t.Fatalf("second in c1: %+v", v)
	}
	for _, st := range []string{`{"conv":"c2"}`, `{}`, `{"conv":null}`, `{"conv":7}`} {
		if v := decide(t, cfg, "search", st); v.Skip {
			t.Fatalf("%s: %+v", st, v)
		}
	}
	if n, ok := state.Get(state.Tenant, "thread:7:calls:*"); !ok || n != "1" {
		t.Fatalf("a number id is its JSON text: %q %v", n, ok)
	}
}

func TestConfigIsCheckedAtLoad(t *testing.T) {
	for cfg, says := range map[string]string{
		`{"tool":"send_email"}`:             "config: set run_limit, thread_limit or both",
		`{"run_limit":"two"}`:               "cannot unmarshal string",
		`{"run_limit":1,"runlimit":2}`:      `config: unknown field "runlimit"`,
		`{"run_limit":-1}`:                  "config: run_limit must be 0 or more",
		`{"run_limit":1,"thread_limit":-3}`: "config: thread_limit must be 0 or more",
	} {
		err := config.Call(json.RawMessage(cfg))
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: %v, want %q", cfg, err, says)
		}
	}
	for _, cfg := range []string{`{"run_limit":0}`, `{"tool":"x","thread_limit":3,"thread_key":"k"}`} {
		if err := config.Call(json.RawMessage(cfg)); err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
	}
}
