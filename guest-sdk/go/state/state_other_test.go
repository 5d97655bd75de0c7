//go:build !wasip1

package state

import (
	"strings"
	"testing"
	"time"
)

// The native map behaves as the host's store does for one call.
func TestGetSetDeleteAdd(t *testing.T) {
	Reset()
	if v, ok := Get(Run, "k"); ok {
		t.Fatalf("Get of an absent key = %q, true", v)
	}
	Set(Run, "k", "v")
	if v, ok := Get(Run, "k"); !ok || v != "v" {
		t.Fatalf("Get after Set = %q, %v", v, ok)
	}
	if _, ok := Get(Tenant, "k"); ok {
		t.Fatal("the scopes share a key")
	}
	Set(Run, "empty", "")
	if v, ok := Get(Run, "empty"); !ok || v != "" {
		t.Fatalf("an empty value is a value: %q, %v", v, ok)
	}
	Delete(Run, "k")
	if _, ok := Get(Run, "k"); ok {
		t.Fatal("Get after Delete found the key")
	}
	if n := Add(Tenant, "n", 5); n != 5 {
		t.Fatalf("Add on an absent key = %d", n)
	}
	if n := AddTTL(Tenant, "n", -7, time.Minute); n != -2 {
		t.Fatalf("Add = %d", n)
	}
	if v, _ := Get(Tenant, "n"); v != "-2" {
		t.Fatalf("a count is kept as decimal text: %q", v)
	}
	Set(Tenant, "m", "40")
	if n := Add(Tenant, "m", 2); n != 42 {
		t.Fatalf("Add on a Set integer = %d", n)
	}
	Reset()
	if _, ok := Get(Tenant, "n"); ok {
		t.Fatal("Reset kept a key")
	}
}

func TestSetTTLZeroOrLessRemoves(t *testing.T) {
	Reset()
	for _, ttl := range []time.Duration{0, -time.Second} {
		Set(Run, "k", "v")
		SetTTL(Run, "k", "w", ttl)
		if v, ok := Get(Run, "k"); ok {
			t.Fatalf("SetTTL(%v) kept %q", ttl, v)
		}
	}
	SetTTL(Run, "k", "w", time.Nanosecond)
	if v, _ := Get(Run, "k"); v != "w" {
		t.Fatalf("SetTTL(1ns) = %q (rounded up, not gone)", v)
	}
}

func TestMillisRoundsUp(t *testing.T) {
	for ttl, want := range map[time.Duration]uint64{
		-1:                      0,
		0:                       0,
		time.Nanosecond:         1,
		time.Millisecond:        1,
		1500 * time.Microsecond: 2,
		time.Minute:             60_000,
		MaxTTL:                  9_223_372_036_855, // math.MaxInt64 ns, rounded up,
	} {
		if got := millis(ttl); got != want {
			t.Fatalf("millis(%v) = %d, want %d", ttl, got, want)
		}
	}
}

// A misuse panics natively, as it traps on the host.
func TestAddMisusePanics(t *testing.T) {
	Reset()
	Set(Run, "text", "abc")
	Set(Run, "big", "9223372036854775807")
	for _, c := range []struct {
		key   string
		delta int64
		says  string
	}{
		{"text", 1, "not a decimal integer"},
		{"big", 1, "outside int64"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), c.says) {
					t.Fatalf("Add(%s) recovered %v, want %q", c.key, r, c.says)
				}
			}()
			Add(Run, c.key, c.delta)
		}()
	}
	Set(Run, "small", "-9223372036854775808")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Add below int64 did not panic")
			}
		}()
		Add(Run, "small", -1)
	}()
	if v, _ := Get(Run, "big"); v != "9223372036854775807" {
		t.Fatalf("a refused Add changed the value: %s", v)
	}
}

func TestScopeNames(t *testing.T) {
	if Run.String() != "run" || Tenant.String() != "tenant" {
		t.Fatalf("names %s %s", Run, Tenant)
	}
}
