package main

import (
	"encoding/json"
	"testing"

	"toolgate.dev/guest"
)

func TestCheck(t *testing.T) {
	ev := func(tool, args string) guest.BeforeToolCallEvent {
		return guest.BeforeToolCallEvent{ToolName: tool, Args: json.RawMessage(args)}
	}
	if v := check(ev("run_query", `{"sql":"SELECT * FROM t"}`)); !v.Skip || !*v.IsError {
		t.Fatalf("no WHERE: %+v", v)
	}
	if v := check(ev("run_query", `{"sql":"select 1 where x"}`)); v.Skip {
		t.Fatalf("where: %+v", v)
	}
	if v := check(ev("search", `{}`)); v.Skip {
		t.Fatalf("other tool: %+v", v)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("run_query without sql did not panic")
		}
	}()
	check(ev("run_query", `{"query":"x"}`))
}
