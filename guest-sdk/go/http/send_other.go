//go:build !wasip1

package http

import (
	"fmt"
	"sync"
)

var (
	responderMu sync.Mutex
	responder   func(Request) Response
)

func send(req Request) Response {
	responderMu.Lock()
	respond := responder
	responderMu.Unlock()
	if respond == nil {
		panic(fmt.Sprintf("%s %s: no responder set (http.RespondWith)", req.Method, req.URL))
	}
	return respond(req)
}

// RespondWith answers the process's requests with respond from now on (a
// guard's native unit tests; nil: none, so a request panics). On wasip1 it
// does nothing: the host answers.
func RespondWith(respond func(Request) Response) {
	responderMu.Lock()
	defer responderMu.Unlock()
	responder = respond
}
