// Package http makes outbound HTTP requests from a guard, when the operator
// grants the plugin some (the contract's http interface,
// toolgate:guard@0.3.0).
//
// The host makes each request with its own client and hands back the whole
// response, whatever its status. A request the plugin is not granted (host,
// scheme, port, method, a redirect off the grant, an address on the host's
// own network), more requests or bytes than the call may use, or a network
// failure traps the call: the host classifies it (http-denied, http-budget,
// http-failed) and the plugin's on_error applies, so there is no error to
// handle here. Time spent waiting counts against the call's deadline.
//
//	answer := http.PostJSON(url, map[string]string{"text": text})
//	var verdict struct{ PII *bool `json:"pii"` }
//	if !answer.OK() || answer.JSON(&verdict) != nil || verdict.PII == nil {
//		panic("the classifier did not answer") // a fault: on_error decides
//	}
//
// Importing this package is what makes the component import the http
// interface; a guard that does not has no network at all.
//
// Off wasip1 (a guard's native unit tests) requests go to the responder set
// with [RespondWith]; with none set, Send panics naming the request, as a
// real call would trap.
package http

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Header is one header: a name and its value.
type Header struct {
	Name, Value string
}

// Request is a request to send.
type Request struct {
	// Method is the method, upper case (GET, POST, ...).
	Method string
	// URL is the absolute URL, http:// or https://.
	URL string
	// Headers are sent as given; the host adds host, content-length and,
	// when none is given, accept: */*.
	Headers []Header
	// Body is the body (nil or empty for none).
	Body []byte
}

// Response is what the server answered.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Headers are the response's headers, names lower case.
	Headers []Header
	// Body is the whole body, at most the grant's response size.
	Body []byte
}

// OK reports whether the status is 2xx.
func (r Response) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Header returns the first value of the header name (any case), and false
// when there is none.
func (r Response) Header(name string) (string, bool) {
	for _, h := range r.Headers {
		if strings.EqualFold(h.Name, name) {
			return h.Value, true
		}
	}
	return "", false
}

// Text returns the body as a string.
func (r Response) Text() string { return string(r.Body) }

// JSON decodes the body into v (as encoding/json.Unmarshal).
func (r Response) JSON(v any) error { return json.Unmarshal(r.Body, v) }

// Send sends req and waits for the whole response (see the package
// documentation: what is not granted traps the call).
func Send(req Request) Response { return send(req) }

// Get sends GET url.
func Get(url string) Response { return Send(Request{Method: "GET", URL: url}) }

// PostJSON sends POST url with v encoded as JSON (content-type:
// application/json). A v encoding/json cannot encode panics, naming url.
func PostJSON(url string, v any) Response {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("http.PostJSON %s: %v", url, err))
	}
	return Send(Request{
		Method:  "POST",
		URL:     url,
		Headers: []Header{{"content-type", "application/json"}},
		Body:    body,
	})
}
