package response

import (
	"testing"

	"toolgate.dev/guest"
)

func TestCallRunsTheRegisteredHandler(t *testing.T) {
	handler = nil
	if a := Call(guest.ResponseRenderEvent{Content: "x"}); a != nil {
		t.Fatalf("no handler should keep the content, got %q", *a)
	}
	Handle(func(e guest.ResponseRenderEvent) *string {
		if e.Content == "keep" {
			return nil
		}
		return guest.Answer(e.Content + "|" + e.OriginalContent)
	})
	if a := Call(guest.ResponseRenderEvent{OriginalContent: "o", Content: "now"}); a == nil || *a != "now|o" {
		t.Fatalf("Call = %v", a)
	}
	if a := Call(guest.ResponseRenderEvent{Content: "keep"}); a != nil {
		t.Fatalf("keep: %q", *a)
	}
}
