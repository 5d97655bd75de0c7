//go:build wasip1

package http

import "toolgate.dev/guest/internal/abi"

func send(req Request) Response {
	pairs := make([]string, 0, 2*len(req.Headers))
	for _, h := range req.Headers {
		pairs = append(pairs, h.Name, h.Value)
	}
	status, got, body := abi.HTTPSend(req.Method, req.URL, pairs, req.Body)
	headers := make([]Header, len(got)/2)
	for i := range headers {
		headers[i] = Header{got[2*i], got[2*i+1]}
	}
	return Response{Status: int(status), Headers: headers, Body: body}
}

// RespondWith does nothing on wasip1: the host answers.
func RespondWith(func(Request) Response) {}
