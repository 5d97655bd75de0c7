package guest

import (
	"encoding/json"
	"testing"
)

func TestConfigAs(t *testing.T) {
	type settings struct {
		Tool  *string        `json:"tool"`
		Limit int64          `json:"limit"`
		Extra map[string]any `json:"extra"`
	}
	s, err := ConfigAs[settings](json.RawMessage(`{"tool":"x","limit":2,"extra":{"n":9007199254740993}}`))
	if err != nil || *s.Tool != "x" || s.Limit != 2 || s.Extra["n"] != json.Number("9007199254740993") {
		t.Fatalf("ConfigAs = %+v, %v", s, err)
	}
	for _, blank := range []string{``, " \n"} {
		if s, err := ConfigAs[settings](json.RawMessage(blank)); err != nil || s.Tool != nil {
			t.Fatalf("ConfigAs(%q) = %+v, %v", blank, s, err)
		}
	}
	for raw, want := range map[string]string{
		`{"tool":"x","tol":1}`: `config: unknown field "tol"`,
		`{"limit":1.5}`:        "config: cannot unmarshal number 1.5 into Go struct field settings.limit of type int64",
		`{} []`:                "config: more than one JSON value",
	} {
		if _, err := ConfigAs[settings](json.RawMessage(raw)); err == nil || err.Error() != want {
			t.Fatalf("ConfigAs(%s) = %v, want %q", raw, err, want)
		}
	}
}
