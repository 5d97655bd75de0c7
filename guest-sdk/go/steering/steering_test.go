package steering

import (
	"testing"

	"toolgate.dev/guest"
)

func TestCallRunsTheRegisteredHandler(t *testing.T) {
	handler = nil
	if v := Call(guest.BeforeToolCallEvent{}); v.Skip {
		t.Fatal("no handler should proceed")
	}
	Handle(func(e guest.BeforeToolCallEvent) guest.Verdict { return guest.Steer(e.ToolName) })
	if v := Call(guest.BeforeToolCallEvent{ToolName: "t"}); !v.Skip || v.Content != "t" {
		t.Fatalf("Call = %+v", v)
	}
}
