package guest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestVerdictHelpers(t *testing.T) {
	if v := Proceed(); v.Skip || v.Content != "" || v.IsError != nil {
		t.Fatalf("Proceed() = %+v", v)
	}
	if v := Steer("fix it"); !v.Skip || v.Content != "fix it" || v.IsError == nil || !*v.IsError {
		t.Fatalf("Steer() = %+v", v)
	}
	if v := Cancel("no"); !v.Skip || v.Content != "no" || v.IsError == nil || *v.IsError {
		t.Fatalf("Cancel() = %+v", v)
	}
}

func TestStringArg(t *testing.T) {
	e := BeforeToolCallEvent{Args: json.RawMessage(`{"sql":"SELECT \"x\" \u00e9","n":1}`)}
	if s, ok := e.StringArg("sql"); !ok || s != `SELECT "x" é` {
		t.Fatalf("StringArg(sql) = %q, %v", s, ok)
	}
	for _, name := range []string{"n", "missing"} {
		if s, ok := e.StringArg(name); ok {
			t.Fatalf("StringArg(%s) = %q, true", name, s)
		}
	}
	for _, raw := range []string{`[]`, `"sql"`, `not json`, ``} {
		if _, ok := (ToolCallDispatchEvent{Args: json.RawMessage(raw)}).StringArg("sql"); ok {
			t.Fatalf("StringArg on %q succeeded", raw)
		}
	}
}

func TestObjectKeepsNumbersExact(t *testing.T) {
	obj, err := Object(json.RawMessage(`{"big":9007199254740993,"f":1.5,"s":"<&>"}`))
	if err != nil {
		t.Fatal(err)
	}
	r := RewriteTo("run_query", obj)
	want := `{"big":9007199254740993,"f":1.5,"s":"<&>"}`
	if r.ToolName != "run_query" || string(r.Args) != want {
		t.Fatalf("RewriteTo = %s %s, want %s", r.ToolName, r.Args, want)
	}
	for _, raw := range []string{`[1]`, `null`, `"x"`, `{`} {
		if _, err := Object(json.RawMessage(raw)); err == nil {
			t.Fatalf("Object(%s) succeeded", raw)
		}
	}
}

func TestRewriteToRefusesNonObjects(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("RewriteTo with a list did not panic")
		}
	}()
	RewriteTo("x", []int{1})
}

func TestAvailable(t *testing.T) {
	e := ToolCallDispatchEvent{AvailableTools: []string{"a", "b"}}
	if !e.Available("b") || e.Available("c") {
		t.Fatal("Available is wrong")
	}
}

func TestConfigOffWasm(t *testing.T) {
	if got := string(Config()); got != "{}" {
		t.Fatalf("Config() = %s", got)
	}
}

func TestUpperContainsMatchesToUpper(t *testing.T) {
	subs := []string{"WHERE", "LIMIT", "where", "", "É", "SS", "Ǆ", "W"}
	texts := []string{
		"", "select * from t where x", "SELECT 1", "wher", "xxwhere", "whERe", "limit",
		"WHERWHERE", "café where", "straße", "ǆ", "where\x00", "\xff where", "w",
		strings.Repeat("x", 1<<16) + "Where",
	}
	for _, s := range texts {
		for _, sub := range subs {
			want := strings.Contains(strings.ToUpper(s), sub)
			if got := UpperContains(s, sub); got != want {
				t.Fatalf("UpperContains(%.30q, %q) = %v, want %v", s, sub, got, want)
			}
		}
	}
}

func TestUpperContainsAtEveryOffset(t *testing.T) {
	for n := 0; n < 40; n++ {
		for at := 0; at+5 <= n; at++ {
			b := []byte(strings.Repeat("wxhe", 10)[:n])
			copy(b[at:], "wHeRe")
			s := string(b)
			if got, want := UpperContains(s, "WHERE"), strings.Contains(strings.ToUpper(s), "WHERE"); got != want {
				t.Fatalf("UpperContains(%q) = %v, want %v", s, got, want)
			}
		}
		s := strings.Repeat("x", n) + "é"
		if UpperContains(s, "X") != (n > 0) {
			t.Fatalf("UpperContains(%q, X) wrong", s)
		}
	}
}

// The former event names are aliases of the same types: a handler written
// against them still compiles and registers.
func TestDeprecatedEventNamesAreAliases(t *testing.T) {
	var old DispatchEvent = ToolCallDispatchEvent{AvailableTools: []string{"a"}}
	var routing RoutingEvent = ToolRoutingDecisionEvent{RunID: "r"}
	var result ToolResultEvent = ToolResultCallbackEvent{ToolName: "t"}
	if !old.Available("a") || routing.RunID != "r" || result.ToolName != "t" {
		t.Fatal("aliases lost their fields")
	}
}

func TestDecodeReadsAnyShapeAndKeepsNumbers(t *testing.T) {
	type usage struct {
		Total int64 `json:"total_tokens"`
	}
	u, err := Decode[usage](json.RawMessage(`{"total_tokens":30,"other":{"x":1}}`))
	if err != nil || u.Total != 30 {
		t.Fatalf("%+v %v", u, err)
	}
	list, err := Decode[[]map[string]any](json.RawMessage(`[{"n":12345678901234567890}]`))
	if err != nil || list[0]["n"] != json.Number("12345678901234567890") {
		t.Fatalf("%v %v", list, err)
	}
	if _, err := Decode[usage](json.RawMessage(`{"total_tokens":"x"}`)); err == nil {
		t.Fatal("a wrong type is an error")
	}
	if _, err := Decode[any](json.RawMessage(`1 2`)); err == nil {
		t.Fatal("two values are an error")
	}
}
