package guest

import (
	"encoding/json"
	"strings"
	"testing"
)

var objects = []string{
	`{"sql":"SELECT 1"}`,
	` { "a" : 1 , "sql" : "x\"y\\z\/\n\t\u00e9\ud83d\ude00" , "b":[1,{"sql":"no"},"]}"] } `,
	`{"sql":1}`,
	`{"sql":null,"x":"y"}`,
	`{"s\u0071l":"escaped key"}`,
	`{"sql":"first","sql":"last"}`,
	`{"nested":{"sql":"inner"}}`,
	`{}`,
	`{"sql":"\ud800 lone"}`,
	`{"sql":"` + strings.Repeat("x", 1<<20) + ` where"}`,
	`{"other":true,"n":-1.5e3,"f":false,"z":null}`,
}

func TestStringMemberMatchesEncodingJSON(t *testing.T) {
	for _, raw := range objects {
		var want struct {
			SQL *string `json:"sql"`
		}
		var all map[string]any
		if err := json.Unmarshal([]byte(raw), &all); err != nil {
			t.Fatalf("bad case %.40s: %v", raw, err)
		}
		_ = json.Unmarshal([]byte(raw), &want)
		_, isString := all["sql"].(string)
		got, ok := StringMember(json.RawMessage(raw), "sql")
		if ok != isString || (ok && got != *want.SQL) {
			t.Fatalf("%.60s: got %.40q %v, want %v %v", raw, got, ok, all["sql"], isString)
		}
	}
}

func TestNotObjects(t *testing.T) {
	for _, raw := range []string{``, `[]`, `"sql"`, `{"sql":"x"`, `{"sql" "x"}`, `{"sql":"x",}`,
		`{"sql":"x"} trailing`, `{"sql":"unterminated}`, `{sql:"x"}`, `{"a":[1,2}`} {
		if s, ok := StringMember(json.RawMessage(raw), "sql"); ok {
			t.Fatalf("StringMember(%s) = %q", raw, s)
		}
		if _, ok := SetStringMember(json.RawMessage(raw), "sql", "v"); ok {
			t.Fatalf("SetStringMember(%s) succeeded", raw)
		}
	}
}

func TestSetStringMember(t *testing.T) {
	cases := []struct{ in, value, want string }{
		{`{"sql":"a","n":9007199254740993}`, "b", `{"sql":"b","n":9007199254740993}`},
		{`{"n":1, "sql" : 5 }`, "q\"\n\x01<&>é", `{"n":1, "sql" : "q\"\n\u0001<&>é" }`},
		{`{"n":1}`, "v", `{"n":1,"sql":"v"}`},
		{` {} `, "v", ` {"sql":"v"} `},
		{`{"sql":"x"}`, "bad \xff utf8", `{"sql":"bad \ufffd utf8"}`},
	}
	for _, c := range cases {
		got, ok := SetStringMember(json.RawMessage(c.in), "sql", c.value)
		if !ok || string(got) != c.want {
			t.Fatalf("SetStringMember(%s, %q) = %s, %v; want %s", c.in, c.value, got, ok, c.want)
		}
		if !json.Valid(got) {
			t.Fatalf("%s is not valid JSON", got)
		}
		var back struct {
			SQL string `json:"sql"`
		}
		if err := json.Unmarshal(got, &back); err != nil || (back.SQL != c.value && !strings.Contains(c.value, "\xff")) {
			t.Fatalf("%s decodes to %q (%v)", got, back.SQL, err)
		}
	}
}

func TestQuoteRoundTrips(t *testing.T) {
	for _, s := range []string{"", "plain", "\x00\x1f\"\\/", "é☃😀", "\u2028", strings.Repeat("ab\n", 1000)} {
		var back string
		if err := json.Unmarshal(quote(s), &back); err != nil || back != s {
			t.Fatalf("quote(%q) = %s -> %q (%v)", s, quote(s), back, err)
		}
	}
}

func TestQuoteAtEveryOffset(t *testing.T) {
	for n := 0; n < 24; n++ {
		for _, special := range []string{"\"", "\\", "\n", "\x01", "é", "\xff", "\x7f"} {
			for at := 0; at <= n; at++ {
				s := strings.Repeat("a", at) + special + strings.Repeat("b", n-at)
				var back string
				if err := json.Unmarshal(quote(s), &back); err != nil {
					t.Fatalf("quote(%q) = %s: %v", s, quote(s), err)
				}
				if want := strings.ToValidUTF8(s, "\uFFFD"); back != want {
					t.Fatalf("quote(%q) = %s -> %q", s, quote(s), back)
				}
			}
		}
	}
}

func TestMember(t *testing.T) {
	obj := json.RawMessage(`{"a": {"x" : [1, 2]} ,"n":9007199254740993,"s":"q\"","a":null}`)
	for name, want := range map[string]string{"n": `9007199254740993`, "s": `"q\""`, "a": `null`} {
		if got, ok := Member(obj, name); !ok || string(got) != want {
			t.Fatalf("Member(%s) = %s, %v; want %s", name, got, ok, want)
		}
	}
	if got, ok := Member(json.RawMessage(`{"a": {"x" : [1, 2]} }`), "a"); !ok || string(got) != `{"x" : [1, 2]}` {
		t.Fatalf("Member keeps the bytes: %s %v", got, ok)
	}
	for _, raw := range []string{`{"b":1}`, `[]`, `{"a":`, ``} {
		if got, ok := Member(json.RawMessage(raw), "a"); ok {
			t.Fatalf("Member(%s) = %s, true", raw, got)
		}
	}
}

func TestIntMemberReadsIntegersOnly(t *testing.T) {
	usage := json.RawMessage(`{"total_tokens": 120, "neg":-3, "f":7.0, "e":1e3, "s":"5", "big":9223372036854775808, "n":null, "max":9223372036854775807}`)
	for name, want := range map[string]int64{"total_tokens": 120, "neg": -3, "max": 9223372036854775807} {
		if n, ok := IntMember(usage, name); !ok || n != want {
			t.Fatalf("%s: %d %v, want %d", name, n, ok, want)
		}
	}
	for _, name := range []string{"f", "e", "s", "big", "n", "absent"} {
		if n, ok := IntMember(usage, name); ok {
			t.Fatalf("%s is not an int64: got %d", name, n)
		}
	}
	if _, ok := IntMember(json.RawMessage(`[1]`), "0"); ok {
		t.Fatal("not an object")
	}
}
