package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"toolgate.dev/guest"
	"toolgate.dev/guest/config"
	"toolgate.dev/guest/observe"
	"toolgate.dev/guest/state"
)

func TestAUsageTotalIsReadFromAnyProviderShape(t *testing.T) {
	for usage, want := range map[string]int64{
		`{"total_tokens":30,"input_tokens":1}`:      30,
		`{"input_tokens":10,"output_tokens":5}`:     15,
		`{"input_tokens":10,"prompt_tokens":99}`:    10,
		`{"prompt_tokens":7,"completion_tokens":2}`: 9,
		`{}`:                                     0,
		`{"total_tokens":-3}`:                    0,
		`{"total_tokens":2.5,"output_tokens":4}`: 4,
		`{"input_tokens":9223372036854775807,"output_tokens":1}`: 9223372036854775807,
	} {
		if got := total(json.RawMessage(usage)); got != want {
			t.Errorf("%s: %d, want %d", usage, got, want)
		}
	}
}

func TestTheConfigNeedsAPositiveBudget(t *testing.T) {
	if err := config.Call(json.RawMessage(`{"max_tokens":100}`)); err != nil {
		t.Fatal(err)
	}
	for cfg, want := range map[string]string{
		`{"max_tokens":0}`:   "config: max_tokens must be at least 1, not 0",
		`{}`:                 "config: max_tokens is required",
		`{"max_token":5}`:    `config: unknown field "max_token"`,
		`{"max_tokens":"5"}`: "config: cannot unmarshal string into Go struct field settings.max_tokens of type int64",
	} {
		if err := config.Call(json.RawMessage(cfg)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", cfg, err, want)
		}
	}
}

func TestOnceTheRunHasUsedTheBudgetEveryCallIsCancelledAndEveryToolHidden(t *testing.T) {
	state.Reset()
	limit, ok := load(json.RawMessage(`{"max_tokens":100}`))
	if !ok || limit != 100 {
		t.Fatalf("load: %d %v", limit, ok)
	}
	check := func() guest.Verdict { return steer(limit, ok) }
	narrow := func() ([]string, bool) { return hide(limit, ok) }
	observe.Call(observe.LLMEndEvent{Usage: json.RawMessage(`{"total_tokens":99}`)})
	if v := check(); v.Skip {
		t.Fatalf("99 of 100: %+v", v)
	}
	if _, narrowed := narrow(); narrowed {
		t.Fatal("99 of 100: routing leaves the palette")
	}
	observe.Call(observe.LLMEndEvent{Usage: json.RawMessage(`{"prompt_tokens":1,"completion_tokens":0}`)})
	v := check()
	if !v.Skip || v.Content != "Token budget of 100 exceeded. Answer with what you have." || v.IsError == nil || *v.IsError {
		t.Fatalf("100 of 100: %+v", v)
	}
	if visible, narrowed := narrow(); !narrowed || !reflect.DeepEqual(visible, []string{}) {
		t.Fatalf("routing: %v %v", visible, narrowed)
	}
	if got := observe.Subscriptions(); !reflect.DeepEqual(got, []observe.Hook{observe.LLMEnd}) {
		t.Fatalf("subscriptions %v", got)
	}
	// A new run starts from zero (the host keys the run scope by run id).
	state.Reset()
	if v := check(); v.Skip {
		t.Fatalf("a new run: %+v", v)
	}
}
