// render (response): answers what it saw,
// content|original|model|node|iteration|run|state.k, so a test reads every
// field of the event off the answer; a content of "keep" keeps it (nil),
// "bad" panics (a fault: a Go handler cannot answer a non-string).
package main

import (
	"strconv"
	"strings"

	"toolgate.dev/guest"
	"toolgate.dev/guest/response"
)

func render(e guest.ResponseRenderEvent) *string {
	switch e.Content {
	case "keep":
		return nil
	case "bad":
		panic("render: bad content")
	}
	k, _ := guest.StringMember(e.State, "k")
	return guest.Answer(strings.Join([]string{
		e.Content, e.OriginalContent, e.Model, e.NodeName,
		strconv.FormatInt(int64(e.IterationIndex), 10), e.RunID, k,
	}, "|"))
}

func init() { response.Handle(render) }

func main() {}
