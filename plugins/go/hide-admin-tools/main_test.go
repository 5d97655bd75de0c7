package main

import (
	"reflect"
	"testing"

	"toolgate.dev/guest"
)

func TestNarrow(t *testing.T) {
	cases := []struct {
		names, want []string
		narrowed    bool
	}{
		{[]string{"search", "admin_purge", "run_query", "admin_drop"}, []string{"search", "run_query"}, true},
		{[]string{"search", "administer"}, []string{"search", "administer"}, false},
		{[]string{"admin_only"}, []string{}, true},
		{[]string{}, []string{}, false},
	}
	for _, c := range cases {
		got, narrowed := narrow(guest.ToolRoutingDecisionEvent{NarrowedToolNames: c.names})
		if narrowed != c.narrowed || (narrowed && !reflect.DeepEqual(got, c.want)) {
			t.Fatalf("%v: got %v (narrowed %t), want %v (narrowed %t)", c.names, got, narrowed, c.want, c.narrowed)
		}
	}
}
