package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type settings struct {
	Limit *int64 `json:"limit"`
	Name  string `json:"name"`
}

func TestCallWithoutACheckAccepts(t *testing.T) {
	handler = nil
	if err := Call(json.RawMessage(`{"anything":1}`)); err != nil {
		t.Fatal(err)
	}
}

func TestHandleGetsTheRawConfig(t *testing.T) {
	var seen string
	Handle(func(raw json.RawMessage) error {
		seen = string(raw)
		return errors.New("config: no")
	})
	if err := Call(json.RawMessage(`{"a":1}`)); err == nil || err.Error() != "config: no" || seen != `{"a":1}` {
		t.Fatalf("Call = %v, saw %s", err, seen)
	}
}

func TestValidateReadsATypedConfigStrictly(t *testing.T) {
	var got settings
	Validate(func(s settings) error {
		got = s
		if s.Limit != nil && *s.Limit < 1 {
			return errors.New("config: limit must be 1 or more")
		}
		return nil
	})
	if err := Call(json.RawMessage(`{"limit":3,"name":"x"}`)); err != nil || *got.Limit != 3 || got.Name != "x" {
		t.Fatalf("Call = %v, %+v", err, got)
	}
	for raw, says := range map[string]string{
		`{"limit":0}`:    "config: limit must be 1 or more",
		`{"limits":1}`:   `config: unknown field "limits"`,
		`{"limit":"1"}`:  "config: cannot unmarshal string",
		`[1]`:            "config: cannot unmarshal array",
		`{"limit":1} {}`: "config: more than one JSON value",
		`{"limit":`:      "config: unexpected EOF",
	} {
		if err := Call(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: %v, want %q", raw, err, says)
		}
	}
	// Reading is the whole check when check is nil.
	Validate[settings](nil)
	if err := Call(json.RawMessage(`{"limit":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := Call(json.RawMessage(`{"nope":0}`)); err == nil {
		t.Fatal("an unknown key was accepted")
	}
}
