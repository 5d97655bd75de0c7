package main

import (
	"testing"

	"toolgate.dev/guest"
)

func TestCheck(t *testing.T) {
	v := check(guest.BeforeToolCallEvent{ToolName: "send_email"})
	if !v.Skip || v.Content != message || v.IsError == nil || *v.IsError {
		t.Fatalf("send_email: %+v, want a cancel", v)
	}
	for _, tool := range []string{"run_query", "send_emails", "Send_email", ""} {
		if v := check(guest.BeforeToolCallEvent{ToolName: tool}); v.Skip {
			t.Fatalf("%q: %+v, want proceed", tool, v)
		}
	}
}
