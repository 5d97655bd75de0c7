//go:build !wasip1

package http

import (
	"strings"
	"testing"
)

// The responder sees the request as the helpers build it; the response's
// helpers read what it answers.
func TestPostJSONThroughTheResponder(t *testing.T) {
	var seen Request
	RespondWith(func(r Request) Response {
		seen = r
		return Response{
			Status:  200,
			Headers: []Header{{"content-type", "application/json"}, {"x-two", "a"}, {"x-two", "b"}},
			Body:    []byte(`{"pii":true}`),
		}
	})
	defer RespondWith(nil)

	answer := PostJSON("http://classifier.test/v1", map[string]string{"text": "a <b> é"})
	if seen.Method != "POST" || seen.URL != "http://classifier.test/v1" {
		t.Fatalf("sent %s %s", seen.Method, seen.URL)
	}
	if len(seen.Headers) != 1 || seen.Headers[0] != (Header{"content-type", "application/json"}) {
		t.Fatalf("sent headers %v", seen.Headers)
	}
	if got, want := string(seen.Body), `{"text":"a \u003cb\u003e é"}`; got != want {
		t.Fatalf("sent body %s, want %s", got, want)
	}
	if !answer.OK() || answer.Text() != `{"pii":true}` {
		t.Fatalf("answer %d %q", answer.Status, answer.Text())
	}
	var verdict struct{ PII bool }
	if err := answer.JSON(&verdict); err != nil || !verdict.PII {
		t.Fatalf("JSON = %+v, %v", verdict, err)
	}
	if v, ok := answer.Header("X-Two"); !ok || v != "a" {
		t.Fatalf("Header(X-Two) = %q, %v, want the first value", v, ok)
	}
	if v, ok := answer.Header("x-none"); ok {
		t.Fatalf("Header(x-none) = %q, true", v)
	}
}

func TestGetAndStatuses(t *testing.T) {
	RespondWith(func(r Request) Response {
		if r.Method != "GET" || len(r.Headers) != 0 || len(r.Body) != 0 {
			t.Errorf("Get sent %+v", r)
		}
		status := 200
		if strings.HasSuffix(r.URL, "/missing") {
			status = 404
		}
		return Response{Status: status, Body: []byte("not json")}
	})
	defer RespondWith(nil)
	if r := Get("https://api.test/ok"); !r.OK() {
		t.Fatalf("200 is not OK: %+v", r)
	}
	r := Get("https://api.test/missing")
	if r.OK() || r.Status != 404 {
		t.Fatalf("404 is OK: %+v", r)
	}
	var v any
	if err := r.JSON(&v); err == nil {
		t.Fatal("JSON of a non-JSON body succeeded")
	}
	for status, ok := range map[int]bool{199: false, 200: true, 204: true, 299: true, 300: false, 500: false} {
		if (Response{Status: status}).OK() != ok {
			t.Fatalf("OK() for %d is not %v", status, ok)
		}
	}
}

// With no responder, as with no grant, a request does not return.
func TestNoResponderPanicsNamingTheRequest(t *testing.T) {
	RespondWith(nil)
	defer func() {
		r, _ := recover().(string)
		if !strings.Contains(r, "GET https://api.test/x") || !strings.Contains(r, "RespondWith") {
			t.Fatalf("recovered %q", r)
		}
	}()
	Get("https://api.test/x")
}

func TestPostJSONOfWhatJSONCannotEncodePanics(t *testing.T) {
	RespondWith(func(Request) Response { t.Error("a request was sent"); return Response{} })
	defer RespondWith(nil)
	defer func() {
		if r, _ := recover().(string); !strings.Contains(r, "http.PostJSON https://api.test") {
			t.Fatalf("recovered %q", r)
		}
	}()
	PostJSON("https://api.test", func() {})
}
